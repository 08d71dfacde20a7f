//! MCP's JSON-RPC on the wire: one message read from a POST body, the revisions this server
//! speaks, the `_meta` keys of the stateless revision, and the errors with their codes and
//! HTTP statuses (the transport section of each revision says which status goes with which).

use serde_json::{json, Map, Value};

/// The stateless revision: every request carries its version in `_meta`.
pub const MODERN: &str = "2026-07-28";
/// The handshake revisions (an `initialize`, then `Mcp-Session-Id`), newest first: the first
/// is what an `initialize` asking for one not here is offered.
pub const LEGACY: [&str; 3] = ["2025-11-25", "2025-06-18", "2025-03-26"];

/// Every revision, newest first (an `UnsupportedProtocolVersionError` lists them).
pub fn supported() -> Vec<&'static str> {
    std::iter::once(MODERN).chain(LEGACY).collect()
}

pub const META_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
pub const META_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
pub const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
pub const META_SUBSCRIPTION: &str = "io.modelcontextprotocol/subscriptionId";

/// JSON-RPC's own codes, and MCP's.
pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;
pub const INTERNAL_ERROR: i64 = -32603;
/// 2025-11-25's "resource not found" (2026-07-28 answers [`INVALID_PARAMS`]).
pub const RESOURCE_NOT_FOUND_LEGACY: i64 = -32002;
pub const HEADER_MISMATCH: i64 = -32020;
pub const UNSUPPORTED_VERSION: i64 = -32022;

/// A JSON-RPC error, with the HTTP status its answer carries.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    pub status: u16,
    pub code: i64,
    pub message: String,
    pub data: Option<Value>,
}

impl RpcError {
    pub fn new(status: u16, code: i64, message: impl Into<String>) -> RpcError {
        RpcError {
            status,
            code,
            message: message.into(),
            data: None,
        }
    }

    pub fn parse(why: impl std::fmt::Display) -> RpcError {
        RpcError::new(400, PARSE_ERROR, format!("Parse error: {why}"))
    }

    pub fn invalid_request(why: impl Into<String>) -> RpcError {
        RpcError::new(400, INVALID_REQUEST, why)
    }

    /// A method this server does not serve: 404 in the stateless revision (its transport
    /// says so), 200 in the handshake ones.
    pub fn no_method(method: &str, modern: bool) -> RpcError {
        let status = if modern { 404 } else { 200 };
        let shown: String = method.chars().take(64).collect();
        RpcError::new(
            status,
            METHOD_NOT_FOUND,
            format!("Method not found: {shown}"),
        )
    }

    pub fn params(why: impl Into<String>) -> RpcError {
        RpcError::new(200, INVALID_PARAMS, why)
    }

    pub fn header_mismatch(why: impl Into<String>) -> RpcError {
        RpcError::new(
            400,
            HEADER_MISMATCH,
            format!("Header mismatch: {}", why.into()),
        )
    }

    pub fn unsupported_version(requested: &str) -> RpcError {
        let shown: String = requested.chars().take(64).collect();
        RpcError {
            data: Some(json!({"supported": supported(), "requested": shown})),
            ..RpcError::new(
                400,
                UNSUPPORTED_VERSION,
                format!(
                    "Unsupported protocol version {shown:?}: this server speaks {}",
                    supported().join(", ")
                ),
            )
        }
    }

    pub fn with_status(mut self, status: u16) -> RpcError {
        self.status = status;
        self
    }

    /// The error response to the request `id` (`null` when it had none or could not be read).
    pub fn response(&self, id: &Value) -> Value {
        let mut error = json!({"code": self.code, "message": self.message});
        if let Some(data) = &self.data {
            error["data"] = data.clone();
        }
        json!({"jsonrpc": "2.0", "id": id, "error": error})
    }
}

/// One JSON-RPC message from a POST body.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    /// A request: its id, method and params (an object; absent params are an empty one).
    Request {
        id: Value,
        method: String,
        params: Map<String, Value>,
    },
    /// A notification: no id, nothing to answer but `202 Accepted`.
    Notification {
        method: String,
        params: Map<String, Value>,
    },
}

impl Message {
    /// Reads one message. A batch (an array) is refused: no revision served here has them.
    /// The error carries the id when the body had one, so its answer can name it.
    pub fn read(body: &[u8]) -> Result<Message, (Value, RpcError)> {
        let value: Value =
            serde_json::from_slice(body).map_err(|e| (Value::Null, RpcError::parse(e)))?;
        let Value::Object(mut object) = value else {
            let why = match value {
                Value::Array(_) => "a POST carries one JSON-RPC message: batches are not accepted",
                _ => "a JSON-RPC message is an object",
            };
            return Err((Value::Null, RpcError::invalid_request(why)));
        };
        let id = object.remove("id");
        let shown_id = match &id {
            Some(v @ (Value::String(_) | Value::Number(_))) => v.clone(),
            _ => Value::Null,
        };
        let fail = |why: &str| Err((shown_id.clone(), RpcError::invalid_request(why)));
        if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
            return fail("jsonrpc must be \"2.0\"");
        }
        let method = match object.remove("method") {
            Some(Value::String(m)) => m,
            Some(_) => return fail("method must be a string"),
            None if object.contains_key("result") || object.contains_key("error") => {
                return fail("this server sends no requests: a response is not expected")
            }
            None => return fail("a request needs a method"),
        };
        let params = match object.remove("params") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(p)) => p,
            Some(_) => return fail("params must be an object"),
        };
        match id {
            None => Ok(Message::Notification { method, params }),
            Some(id @ (Value::String(_) | Value::Number(_))) => {
                Ok(Message::Request { id, method, params })
            }
            Some(_) => fail("id must be a string or a number"),
        }
    }
}

/// Who may keep a 2026-07-28 result, and how long.
#[derive(Debug, Clone, Copy)]
pub enum Cache {
    /// The same for every caller while the controller runs (the tools, the prompts).
    Public,
    /// The caller's own, and changing at any time (its workers).
    Private,
}

/// `result` with 2026-07-28's cache hints (`ttlMs`, `cacheScope`) when `modern`.
pub fn cacheable(modern: bool, mut result: Value, cache: Cache) -> Value {
    if modern {
        let (ttl, scope) = match cache {
            Cache::Public => (60_000, "public"),
            Cache::Private => (0, "private"),
        };
        result["ttlMs"] = json!(ttl);
        result["cacheScope"] = json!(scope);
    }
    result
}

/// A successful response to `id`.
pub fn result(id: &Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

/// A successful response to `id` whose result is already JSON text.
pub fn result_text(id: &Value, result: &str) -> String {
    let id = id.to_string();
    let mut out = String::with_capacity(result.len() + id.len() + 40);
    out.push_str("{\"jsonrpc\":\"2.0\",\"id\":");
    out.push_str(&id);
    out.push_str(",\"result\":");
    out.push_str(result);
    out.push('}');
    out
}

/// A notification's JSON text.
pub fn notification(method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "method": method, "params": params})
}

/// One SSE event carrying a message already written as (compact, one-line) JSON text.
pub fn event_text(message: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(message.len() + 8);
    out.extend_from_slice(b"data: ");
    out.extend_from_slice(message.as_bytes());
    out.extend_from_slice(b"\n\n");
    out
}

/// One SSE event carrying `message`.
pub fn event(message: &Value) -> Vec<u8> {
    let mut out = b"data: ".to_vec();
    // A Value always writes; never a newline in compact JSON.
    let _ = serde_json::to_writer(&mut out, message);
    out.extend_from_slice(b"\n\n");
    out
}

/// A `=?base64?...?=` header value that does not decode to UTF-8.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BadEncoding;

impl std::fmt::Display for BadEncoding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a =?base64?...?= value that is not base64 of UTF-8")
    }
}

/// A header value as the stateless revision sends one that is not plain ASCII:
/// `=?base64?...?=` decoded; anything else as it is.
pub fn header_value(raw: &str) -> Result<String, BadEncoding> {
    match raw
        .strip_prefix("=?base64?")
        .and_then(|r| r.strip_suffix("?="))
    {
        // Padded, as the revision's encoding examples are: a value of another length is refused.
        Some(encoded) if encoded.len() % 4 == 0 => crate::base64::decode(encoded)
            .and_then(|b| String::from_utf8(b).ok())
            .ok_or(BadEncoding),
        Some(_) => Err(BadEncoding),
        None => Ok(raw.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_a_notification_and_what_is_refused() {
        let r = Message::read(br#"{"jsonrpc":"2.0","id":7,"method":"tools/list"}"#).unwrap();
        assert!(matches!(r, Message::Request { ref method, .. } if method == "tools/list"));
        let n = Message::read(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
        assert!(matches!(n, Ok(Message::Notification { .. })));
        let batch = Message::read(br#"[{"jsonrpc":"2.0","id":1,"method":"a"}]"#).unwrap_err();
        assert_eq!(batch.1.code, INVALID_REQUEST);
        let bad = Message::read(b"{not json").unwrap_err();
        assert_eq!((bad.1.code, bad.1.status), (PARSE_ERROR, 400));
        let params =
            Message::read(br#"{"jsonrpc":"2.0","id":"x","method":"a","params":[1]}"#).unwrap_err();
        assert_eq!(params.0, json!("x"));
        let answer = Message::read(br#"{"jsonrpc":"2.0","id":1,"result":{}}"#).unwrap_err();
        assert_eq!(answer.1.code, INVALID_REQUEST);
    }

    #[test]
    fn a_base64_header_value_is_decoded() {
        assert_eq!(header_value("list"), Ok("list".into()));
        assert_eq!(
            header_value("=?base64?SGVsbG8sIOS4lueVjA==?="),
            Ok("Hello, 世界".into())
        );
        assert_eq!(header_value("=?base64?!!?="), Err(BadEncoding));
        assert_eq!(
            header_value("=?base64?SGVsbG8?="),
            Err(BadEncoding),
            "unpadded"
        );
        assert_eq!(
            header_value("=?base64?SGVsbG8="),
            Ok("=?base64?SGVsbG8=".into())
        );
    }

    #[test]
    fn an_unsupported_version_names_every_supported_one() {
        let e = RpcError::unsupported_version("1900-01-01").response(&json!(3));
        assert_eq!(e["error"]["code"], -32022);
        assert_eq!(e["error"]["data"]["requested"], "1900-01-01");
        assert_eq!(e["error"]["data"]["supported"][0], MODERN);
    }
}
