//! Decoding what a caller sent: the service parameters (`A2A-Version`, `A2A-Extensions`), the
//! JSON-RPC 2.0 envelope, messages and parts, and the typed fields of method parameters
//! (camelCase or snake_case names, ProtoJSON number forms). Every refusal is an [`RpcError`].

use serde_json::{Map, Value};

use super::types::{Message, Part, Role, RpcError};
use crate::push::{Authentication, PushConfig};

/// The service parameters of one request, normalised.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ServiceParams {
    /// `None` when the caller sent no `A2A-Version` (treated as 1.0, see the README).
    pub version: Option<String>,
    /// `A2A-Extensions`, trimmed, without empties and duplicates, in first-seen order.
    pub extensions: Vec<String>,
    /// Relayed by another replica (`A2A-Relayed-By`): answered here, relayed no further.
    pub relayed: bool,
    /// The caller's `Authorization`, for the calls a replica makes to the others on its behalf
    /// (`ListTasks` over every replica); set by the routes, never printed.
    pub authorization: Credential,
}

/// A caller's credential as it came; `Debug` does not show it.
#[derive(Default, Clone, PartialEq, Eq)]
pub struct Credential(pub Option<String>);

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Credential(..)"
        } else {
            "Credential(none)"
        })
    }
}

impl ServiceParams {
    /// From headers (name, value) and the raw query string.
    pub fn from_request(headers: &[(String, String)], query: &str) -> ServiceParams {
        let header_version = headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("A2A-Version"))
            .map(|(_, v)| v.trim().to_string());
        let query_version = query.split('&').find_map(|pair| {
            let (k, v) = pair.split_once('=')?;
            k.eq_ignore_ascii_case("A2A-Version")
                .then(|| percent_decode(v).trim().to_string())
        });
        let mut extensions: Vec<String> = Vec::new();
        for (_, value) in headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case("A2A-Extensions"))
        {
            for uri in value.split(',').map(str::trim).filter(|u| !u.is_empty()) {
                if !extensions.iter().any(|e| e == uri) {
                    extensions.push(uri.to_string());
                }
            }
        }
        ServiceParams {
            version: header_version.or(query_version),
            extensions,
            relayed: headers
                .iter()
                .any(|(k, _)| k.eq_ignore_ascii_case(crate::replicas::RELAYED_BY)),
            authorization: Credential::default(),
        }
    }
}

pub(super) fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match b[i] {
            b'%' if i + 2 < b.len() => match (hex(b[i + 1]), hex(b[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push((h * 16 + l) as u8);
                    i += 3;
                    continue;
                }
                _ => out.push(b'%'),
            },
            b'+' => out.push(b' '),
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A checked envelope: id, method, params.
pub(super) type Envelope<'a> = (Value, &'a str, Option<&'a Map<String, Value>>);

/// Checks the JSON-RPC 2.0 envelope; on failure returns the id to answer with.
pub(super) fn envelope(request: &Value) -> Result<Envelope<'_>, (Value, RpcError)> {
    let obj = match request {
        Value::Array(_) => {
            return Err((
                Value::Null,
                RpcError::invalid_request("batch requests are not supported"),
            ))
        }
        Value::Object(o) => o,
        _ => {
            return Err((
                Value::Null,
                RpcError::invalid_request("the request must be a JSON object"),
            ))
        }
    };
    let id = match obj.get("id") {
        Some(id @ (Value::String(_) | Value::Number(_) | Value::Null)) => id.clone(),
        Some(_) => {
            return Err((
                Value::Null,
                RpcError::invalid_request("id must be a string, a number or null"),
            ))
        }
        None => {
            return Err((
                Value::Null,
                RpcError::invalid_request("id is required (notifications are not supported)"),
            ))
        }
    };
    if obj.get("jsonrpc") != Some(&Value::String("2.0".into())) {
        return Err((id, RpcError::invalid_request("jsonrpc must be \"2.0\"")));
    }
    let method = match obj.get("method") {
        Some(Value::String(m)) if !m.is_empty() => m.as_str(),
        _ => {
            return Err((
                id,
                RpcError::invalid_request("method must be a non-empty string"),
            ))
        }
    };
    let params = match obj.get("params") {
        None | Some(Value::Null) => None,
        Some(Value::Object(p)) => Some(p),
        Some(_) => return Err((id, RpcError::invalid_params("params must be an object"))),
    };
    Ok((id, method, params))
}

pub(super) fn parse_message(v: &Value) -> Result<Message, RpcError> {
    let m = v
        .as_object()
        .ok_or_else(|| RpcError::invalid_params("message must be an object"))?;
    let message_id = required_string(m, &["messageId", "message_id"], "message.messageId")?;
    if message_id.is_empty() {
        return Err(RpcError::invalid_params(
            "message.messageId must not be empty",
        ));
    }
    let role = match field(m, &["role"]) {
        None | Some(Value::Null) => {
            return Err(RpcError::invalid_params("message.role is required"))
        }
        Some(r) => Role::parse(r).ok_or_else(|| {
            RpcError::invalid_params("message.role must be ROLE_USER or ROLE_AGENT")
        })?,
    };
    if role != Role::User {
        return Err(RpcError::invalid_params(
            "message.role must be ROLE_USER for a message sent to this agent",
        ));
    }
    let parts = match field(m, &["parts"]) {
        Some(Value::Array(parts)) if !parts.is_empty() => parts,
        Some(Value::Array(_)) => {
            return Err(RpcError::invalid_params("message.parts must not be empty"))
        }
        None | Some(Value::Null) => {
            return Err(RpcError::invalid_params("message.parts is required"))
        }
        Some(_) => return Err(RpcError::invalid_params("message.parts must be an array")),
    };
    let parts = parts
        .iter()
        .enumerate()
        .map(|(i, p)| parse_part(i, p))
        .collect::<Result<Vec<Part>, RpcError>>()?;
    let metadata = match field(m, &["metadata"]) {
        None | Some(Value::Null) => None,
        Some(v @ Value::Object(_)) => Some(v.clone()),
        Some(_) => {
            return Err(RpcError::invalid_params(
                "message.metadata must be an object",
            ))
        }
    };
    Ok(Message {
        message_id,
        role,
        parts,
        context_id: optional_string(m, &["contextId", "context_id"], "message.contextId")?
            .filter(|c| !c.is_empty()),
        task_id: optional_string(m, &["taskId", "task_id"], "message.taskId")?
            .filter(|t| !t.is_empty()),
        metadata,
    })
}

fn parse_part(i: usize, v: &Value) -> Result<Part, RpcError> {
    let p = v
        .as_object()
        .ok_or_else(|| RpcError::invalid_params(format!("message.parts[{i}] must be an object")))?;
    let name = |k: &str| format!("message.parts[{i}].{k}");
    let mut part = Part {
        text: optional_string(p, &["text"], &name("text"))?,
        data: p.get("data").filter(|d| !d.is_null()).cloned(),
        raw: optional_string(p, &["raw"], &name("raw"))?,
        url: optional_string(p, &["url"], &name("url"))?,
        media_type: optional_string(p, &["mediaType", "media_type"], &name("mediaType"))?,
        filename: optional_string(p, &["filename"], &name("filename"))?,
        metadata: p.get("metadata").filter(|d| !d.is_null()).cloned(),
    };
    let members = [
        part.text.is_some(),
        part.data.is_some(),
        part.raw.is_some(),
        part.url.is_some(),
    ]
    .iter()
    .filter(|b| **b)
    .count();
    if members != 1 {
        return Err(RpcError::invalid_params(format!(
            "message.parts[{i}] must have exactly one of text, data, raw, url (v1.0 parts have no kind)"
        )));
    }
    if part.metadata.as_ref().is_some_and(|m| !m.is_object()) {
        part.metadata = None;
    }
    Ok(part)
}

pub(super) fn history_length(params: &Map<String, Value>) -> Result<Option<usize>, RpcError> {
    match field(params, &["historyLength", "history_length"]) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => whole_number(v)
            .map(|n| Some(n.min(1_000) as usize))
            .ok_or_else(|| RpcError::invalid_params("historyLength must be a whole number >= 0")),
    }
}

/// A non-negative whole number, also when it arrives as a float (`2.0`) or a ProtoJSON
/// string (`"2"`).
pub(super) fn whole_number(v: &Value) -> Option<u64> {
    match v {
        Value::Number(n) => n.as_u64().or_else(|| {
            n.as_f64()
                .filter(|f| *f >= 0.0 && f.fract() == 0.0 && *f < 1e15)
                .map(|f| f as u64)
        }),
        Value::String(s) => s.parse().ok(),
        _ => None,
    }
}

pub(super) fn field<'a>(m: &'a Map<String, Value>, names: &[&str]) -> Option<&'a Value> {
    names.iter().find_map(|n| m.get(*n))
}

pub(super) fn optional_string(
    m: &Map<String, Value>,
    names: &[&str],
    label: &str,
) -> Result<Option<String>, RpcError> {
    match field(m, names) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(RpcError::invalid_params(format!(
            "{label} must be a string"
        ))),
    }
}

pub(super) fn required_string(
    m: &Map<String, Value>,
    names: &[&str],
    label: &str,
) -> Result<String, RpcError> {
    optional_string(m, names, label)?
        .ok_or_else(|| RpcError::invalid_params(format!("{label} is required")))
}

pub(super) fn string_list(v: &Value, label: &str) -> Result<Vec<String>, RpcError> {
    match v {
        Value::Null => Ok(Vec::new()),
        Value::Array(items) => items
            .iter()
            .map(|i| {
                i.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| RpcError::invalid_params(format!("{label} must be strings")))
            })
            .collect(),
        _ => Err(RpcError::invalid_params(format!(
            "{label} must be an array"
        ))),
    }
}

/// A `TaskPushNotificationConfig` request object, read for task `task_id`.
pub fn push_config(m: &Map<String, Value>, task_id: &str) -> Result<PushConfig, RpcError> {
    let url = required_string(m, &["url"], "url")?;
    let authentication = match field(m, &["authentication"]) {
        None | Some(Value::Null) => None,
        Some(Value::Object(a)) => {
            // v0.3 had a list of schemes; v1.0 one.
            let scheme = match field(a, &["scheme"]) {
                Some(Value::String(s)) => s.clone(),
                _ => match field(a, &["schemes"]) {
                    Some(Value::Array(list)) => list
                        .first()
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string(),
                    _ => String::new(),
                },
            };
            Some(Authentication {
                scheme,
                credentials: optional_string(a, &["credentials"], "authentication.credentials")?
                    .unwrap_or_default(),
            })
        }
        Some(_) => {
            return Err(RpcError::invalid_params(
                "authentication must be an object with scheme and credentials",
            ))
        }
    };
    Ok(PushConfig {
        id: optional_string(m, &["id"], "id")?.unwrap_or_default(),
        task_id: task_id.to_string(),
        url,
        token: optional_string(m, &["token"], "token")?.unwrap_or_default(),
        authentication,
    })
}

/// The task a message continues (`message.taskId`), if it names one.
pub(super) fn message_task(params: &Map<String, Value>) -> Option<String> {
    let message = field(params, &["message"])?;
    field(message.as_object()?, &["taskId", "task_id"])?
        .as_str()
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn service_parameters_come_from_headers_or_the_query_and_extensions_once_each() {
        let p = ServiceParams::from_request(
            &headers(&[
                ("a2a-version", " 1.0 "),
                ("A2A-Extensions", " https://a/x , https://b/y,,https://a/x"),
                ("A2A-Extensions", "https://b/y, https://c/z"),
            ]),
            "",
        );
        assert_eq!(p.version.as_deref(), Some("1.0"));
        assert_eq!(p.extensions, ["https://a/x", "https://b/y", "https://c/z"]);
        let p = ServiceParams::from_request(&[], "x=1&A2A-Version=0.3");
        assert_eq!(p.version.as_deref(), Some("0.3"));
        assert_eq!(ServiceParams::from_request(&[], "").version, None);
    }

    #[test]
    fn percent_escapes_decode_and_broken_ones_stay_as_they_are() {
        assert_eq!(percent_decode("1%2E0"), "1.0");
        assert_eq!(percent_decode("a%zz%"), "a%zz%");
        assert_eq!(percent_decode("%"), "%");
    }

    #[test]
    fn whole_numbers_come_as_numbers_or_digit_strings() {
        assert_eq!(whole_number(&json!(2)), Some(2));
        assert_eq!(whole_number(&json!(2.0)), Some(2));
        assert_eq!(whole_number(&json!("3")), Some(3));
        assert_eq!(whole_number(&json!(2.5)), None);
        assert_eq!(whole_number(&json!(-1)), None);
    }
}
