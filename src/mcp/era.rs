//! Which revision a request speaks, read from the request alone: `_meta` with a protocol
//! version (2026-07-28, stateless; its headers must mirror its body), or an
//! `Mcp-Session-Id` minted by an `initialize` (the handshake revisions). Anything else is
//! refused as the revisions say: a missing `_meta` or header, a header the body contradicts,
//! a version not served, a session not known.

use serde_json::{Map, Value};

use super::exchange::Head;
use super::wire::{self, RpcError};
use crate::control::Caller;

/// A request's revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Era {
    /// 2026-07-28.
    Modern,
    /// A handshake revision, in the session with this id.
    Legacy {
        session: String,
        version: &'static str,
    },
}

impl Era {
    pub fn modern(&self) -> bool {
        matches!(self, Era::Modern)
    }

    /// A handshake revision's era, for what is the same in every session.
    pub fn legacy_any() -> Era {
        Era::Legacy {
            session: String::new(),
            version: wire::LEGACY[0],
        }
    }

    pub fn session(&self) -> Option<&str> {
        match self {
            Era::Modern => None,
            Era::Legacy { session, .. } => Some(session),
        }
    }

    /// The era of a request (any but `initialize`) from `caller`.
    pub fn of(
        caller: &Caller,
        head: &Head,
        method: &str,
        params: &Map<String, Value>,
    ) -> Result<Era, RpcError> {
        let meta = params.get("_meta").and_then(Value::as_object);
        let body_version = meta.and_then(|m| m.get(wire::META_VERSION));
        if body_version.is_some() || head.version.as_deref() == Some(wire::MODERN) {
            return modern(head, method, params, meta, body_version);
        }
        if let Some(id) = &head.session {
            return legacy(caller, head, id);
        }
        Err(match head.version.as_deref() {
            Some(v) if wire::LEGACY.contains(&v) => RpcError::invalid_request(format!(
                "{v} needs a session: send initialize first, then its Mcp-Session-Id with every request"
            )),
            Some(v) => RpcError::unsupported_version(v),
            None => RpcError::params(format!(
                "no protocol version: a {} request carries _meta.{} (and the MCP-Protocol-Version header); a handshake revision starts with initialize",
                wire::MODERN,
                wire::META_VERSION
            ))
            .with_status(400),
        })
    }
}

/// A 2026-07-28 request: `_meta` complete, the revision served, the headers mirroring it.
fn modern(
    head: &Head,
    method: &str,
    params: &Map<String, Value>,
    meta: Option<&Map<String, Value>>,
    body_version: Option<&Value>,
) -> Result<Era, RpcError> {
    let missing = |what: &str| {
        RpcError::params(format!(
            "_meta.{what} is missing: every {} request carries it",
            wire::MODERN
        ))
        .with_status(400)
    };
    let Some(version) = body_version else {
        return Err(missing(wire::META_VERSION));
    };
    let Some(version) = version.as_str() else {
        return Err(
            RpcError::params(format!("_meta.{} must be a string", wire::META_VERSION))
                .with_status(400),
        );
    };
    if meta
        .and_then(|m| m.get(wire::META_CAPABILITIES))
        .is_none_or(|c| !c.is_object())
    {
        return Err(missing(wire::META_CAPABILITIES));
    }
    match head.version.as_deref() {
        None => {
            return Err(RpcError::header_mismatch(
                "the MCP-Protocol-Version header is missing",
            ))
        }
        Some(h) if h != version => {
            return Err(RpcError::header_mismatch(format!(
                "MCP-Protocol-Version {:?} does not match _meta's {:?}",
                shown(h),
                shown(version)
            )))
        }
        Some(_) => {}
    }
    if version != wire::MODERN {
        return Err(RpcError::unsupported_version(version));
    }
    match head.method.as_deref() {
        None => {
            return Err(RpcError::header_mismatch(
                "the Mcp-Method header is missing",
            ))
        }
        Some(h) if h != method => {
            return Err(RpcError::header_mismatch(format!(
                "Mcp-Method {:?} does not match the body's method {:?}",
                shown(h),
                shown(method)
            )))
        }
        Some(_) => {}
    }
    let named = match method {
        "tools/call" | "prompts/get" => params.get("name"),
        "resources/read" => params.get("uri"),
        _ => return Ok(Era::Modern),
    };
    let body_name = named.and_then(Value::as_str).unwrap_or("");
    match &head.name {
        None => Err(RpcError::header_mismatch(format!(
            "the Mcp-Name header is missing (a {method} names its target in it)"
        ))),
        Some(Err(_)) => Err(RpcError::header_mismatch(
            "Mcp-Name is not valid: a value outside plain ASCII is sent as =?base64?...?=",
        )),
        Some(Ok(h)) if h != body_name => Err(RpcError::header_mismatch(format!(
            "Mcp-Name {:?} does not match the body's {:?}",
            shown(h),
            shown(body_name)
        ))),
        Some(Ok(_)) if method == "tools/call" => mirrored(head, body_name, params),
        Some(Ok(_)) => Ok(Era::Modern),
    }
}

/// A tool call's `Mcp-Param-*` headers: each argument its tool mirrors is in its header, with
/// the same value, and no header names one the body does not have.
fn mirrored(head: &Head, tool: &str, params: &Map<String, Value>) -> Result<Era, RpcError> {
    let Some(tool) = super::tools::find(tool) else {
        return Ok(Era::Modern);
    };
    let arguments = params.get("arguments").and_then(Value::as_object);
    for (argument, header) in tool.mirrored() {
        let body = arguments
            .and_then(|a| a.get(argument))
            .filter(|v| !v.is_null());
        let sent = head.param(header);
        let (body, sent) = match (body, sent) {
            (None, None) => continue,
            (Some(_), None) => {
                return Err(RpcError::header_mismatch(format!(
                    "Mcp-Param-{header} is missing: the body's {argument} is mirrored in it"
                )))
            }
            (None, Some(_)) => {
                return Err(RpcError::header_mismatch(format!(
                    "Mcp-Param-{header} is sent, but the body has no {argument}"
                )))
            }
            (Some(body), Some(sent)) => (body, sent),
        };
        if !sent
            .bytes()
            .all(|b| b == b'\t' || (b' '..=b'~').contains(&b))
        {
            return Err(RpcError::header_mismatch(format!(
                "Mcp-Param-{header} holds characters a header value may not"
            )));
        }
        let sent = wire::header_value(sent)
            .map_err(|e| RpcError::header_mismatch(format!("Mcp-Param-{header}: {e}")))?;
        let expected = match body {
            Value::String(s) => s.clone(),
            Value::Bool(b) => b.to_string(),
            Value::Number(n) => n.to_string(),
            other => other.to_string(),
        };
        let same = match (body, sent.parse::<f64>()) {
            (Value::Number(n), Ok(h)) => n.as_f64() == Some(h),
            _ => sent == expected,
        };
        if !same {
            return Err(RpcError::header_mismatch(format!(
                "Mcp-Param-{header} {:?} does not match the body's {argument} {:?}",
                shown(&sent),
                shown(&expected)
            )));
        }
    }
    Ok(Era::Modern)
}

/// A handshake-revision request: its session one this caller was given, its version header
/// (when sent) one of the handshake revisions.
fn legacy(caller: &Caller, head: &Head, id: &str) -> Result<Era, RpcError> {
    let Some(session) = super::session::read(id, &caller.key) else {
        return Err(RpcError::new(
            404,
            wire::INVALID_REQUEST,
            "Session not found: start a new one with initialize",
        ));
    };
    // A version the handshake revisions have is taken (the session's governs what is said); one
    // they do not is refused, as the revision says for an invalid or unsupported header.
    if let Some(v) = head.version.as_deref() {
        if !wire::LEGACY.contains(&v) {
            return Err(RpcError::invalid_request(format!(
                "MCP-Protocol-Version {:?} is not a revision this session can speak (it speaks {})",
                shown(v),
                session.version
            )));
        }
    }
    Ok(Era::Legacy {
        session: id.to_string(),
        version: session.version,
    })
}

/// At most 64 characters of a value a client sent, for an error message.
fn shown(s: &str) -> String {
    s.chars().take(64).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn head(version: Option<&str>, method: Option<&str>) -> Head {
        Head {
            version: version.map(str::to_string),
            method: method.map(str::to_string),
            ..Head::default()
        }
    }

    fn params(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    fn meta(version: &str) -> Value {
        json!({"_meta": {wire::META_VERSION: version, wire::META_CAPABILITIES: {}}})
    }

    #[test]
    fn a_modern_request_is_read_from_its_meta_and_its_headers_must_agree() {
        let caller = Caller::admin();
        let ok = Era::of(
            &caller,
            &head(Some(wire::MODERN), Some("tools/list")),
            "tools/list",
            &params(meta(wire::MODERN)),
        );
        assert_eq!(ok, Ok(Era::Modern));
        let no_header = Era::of(
            &caller,
            &head(None, Some("tools/list")),
            "tools/list",
            &params(meta(wire::MODERN)),
        );
        assert_eq!(no_header.unwrap_err().code, wire::HEADER_MISMATCH);
        let wrong_method = Era::of(
            &caller,
            &head(Some(wire::MODERN), Some("tools/call")),
            "tools/list",
            &params(meta(wire::MODERN)),
        );
        assert_eq!(wrong_method.unwrap_err().code, wire::HEADER_MISMATCH);
        let old = Era::of(
            &caller,
            &head(Some("1900-01-01"), Some("tools/list")),
            "tools/list",
            &params(meta("1900-01-01")),
        );
        assert_eq!(old.unwrap_err().code, wire::UNSUPPORTED_VERSION);
        let no_meta = Era::of(
            &caller,
            &head(Some(wire::MODERN), Some("tools/list")),
            "tools/list",
            &Map::new(),
        )
        .unwrap_err();
        assert_eq!((no_meta.code, no_meta.status), (wire::INVALID_PARAMS, 400));
    }

    #[test]
    fn a_tool_call_names_its_tool_in_a_header() {
        let caller = Caller::admin();
        let mut p = params(meta(wire::MODERN));
        p.insert("name".into(), json!("list"));
        let mut h = head(Some(wire::MODERN), Some("tools/call"));
        assert_eq!(
            Era::of(&caller, &h, "tools/call", &p).unwrap_err().code,
            wire::HEADER_MISMATCH
        );
        h.name = Some(Ok("stop".into()));
        assert_eq!(
            Era::of(&caller, &h, "tools/call", &p).unwrap_err().code,
            wire::HEADER_MISMATCH
        );
        h.name = Some(Ok("list".into()));
        assert_eq!(Era::of(&caller, &h, "tools/call", &p), Ok(Era::Modern));
    }

    #[test]
    fn a_session_is_the_callers_own_or_unknown() {
        let alice = Caller::named("alice", "a", false, None);
        let id = super::super::session::mint("2025-11-25", &alice.key).unwrap();
        let h = Head {
            session: Some(id.clone()),
            ..Head::default()
        };
        assert!(matches!(
            Era::of(&alice, &h, "tools/list", &Map::new()),
            Ok(Era::Legacy { .. })
        ));
        let bob = Caller::named("bob", "b", false, None);
        assert_eq!(
            Era::of(&bob, &h, "tools/list", &Map::new())
                .unwrap_err()
                .status,
            404
        );
        let none = Era::of(
            &alice,
            &head(Some("2025-11-25"), None),
            "tools/list",
            &Map::new(),
        );
        assert_eq!(none.unwrap_err().status, 400);
    }
}
