//! A2A v1.0 wire types (JSON-RPC binding, ProtoJSON names) and the JSON-RPC error object.
//! Nothing here knows about workers, backends or the wire.

use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};

pub const PROTOCOL_VERSION: &str = "1.0";
const ERROR_DOMAIN: &str = "a2a-protocol.org";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Role {
    #[serde(rename = "ROLE_USER")]
    User,
    #[serde(rename = "ROLE_AGENT")]
    Agent,
}

impl Role {
    /// ProtoJSON enums: the name, or the number.
    pub fn parse(v: &Value) -> Option<Role> {
        match v {
            Value::String(s) if s == "ROLE_USER" => Some(Role::User),
            Value::String(s) if s == "ROLE_AGENT" => Some(Role::Agent),
            Value::Number(n) if n.as_f64() == Some(1.0) => Some(Role::User),
            Value::Number(n) if n.as_f64() == Some(2.0) => Some(Role::Agent),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum TaskState {
    #[serde(rename = "TASK_STATE_SUBMITTED")]
    Submitted,
    #[serde(rename = "TASK_STATE_WORKING")]
    Working,
    #[serde(rename = "TASK_STATE_COMPLETED")]
    Completed,
    #[serde(rename = "TASK_STATE_FAILED")]
    Failed,
    #[serde(rename = "TASK_STATE_CANCELED")]
    Canceled,
    #[serde(rename = "TASK_STATE_INPUT_REQUIRED")]
    InputRequired,
    #[serde(rename = "TASK_STATE_REJECTED")]
    Rejected,
    #[serde(rename = "TASK_STATE_AUTH_REQUIRED")]
    AuthRequired,
}

impl TaskState {
    pub const ALL: [TaskState; 8] = [
        TaskState::Submitted,
        TaskState::Working,
        TaskState::Completed,
        TaskState::Failed,
        TaskState::Canceled,
        TaskState::InputRequired,
        TaskState::Rejected,
        TaskState::AuthRequired,
    ];

    pub fn name(self) -> &'static str {
        match self {
            TaskState::Submitted => "TASK_STATE_SUBMITTED",
            TaskState::Working => "TASK_STATE_WORKING",
            TaskState::Completed => "TASK_STATE_COMPLETED",
            TaskState::Failed => "TASK_STATE_FAILED",
            TaskState::Canceled => "TASK_STATE_CANCELED",
            TaskState::InputRequired => "TASK_STATE_INPUT_REQUIRED",
            TaskState::Rejected => "TASK_STATE_REJECTED",
            TaskState::AuthRequired => "TASK_STATE_AUTH_REQUIRED",
        }
    }

    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            TaskState::Completed | TaskState::Failed | TaskState::Canceled | TaskState::Rejected
        )
    }

    /// The name (`TASK_STATE_COMPLETED`) or the proto number.
    pub fn parse(v: &Value) -> Option<TaskState> {
        let number = |n: f64| TaskState::ALL.get((n as usize).checked_sub(1)?).copied();
        match v {
            Value::String(s) => TaskState::ALL.into_iter().find(|st| st.name() == s),
            Value::Number(n) => n.as_f64().filter(|f| f.fract() == 0.0).and_then(number),
            _ => None,
        }
    }
}

/// A part: exactly one of `text`, `data`, `raw`, `url`; no `kind` (that was v0.3).
#[derive(Debug, Clone, PartialEq, Serialize, Default)]
#[serde(rename_all = "camelCase")]
pub struct Part {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub raw: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub filename: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
}

impl Part {
    pub fn text(text: impl Into<String>) -> Part {
        Part {
            text: Some(text.into()),
            ..Part::default()
        }
    }

    pub fn data(data: Value) -> Part {
        Part {
            data: Some(data),
            ..Part::default()
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Message {
    pub message_id: String,
    pub role: Role,
    pub parts: Vec<Part>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskStatus {
    pub state: TaskState,
    pub timestamp: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<Message>,
}

/// A task's result. Its one part is reply data already written out as JSON text: stored,
/// copied and sent as it is, never parsed back or converted to a value on the way.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Artifact {
    pub artifact_id: String,
    pub name: String,
    pub parts: [DataPart; 1],
}

impl Artifact {
    pub fn data(&self) -> &RawValue {
        &self.parts[0].data
    }
}

impl Task {
    /// Length of its reply data (JSON text): most of a finished control task's size.
    pub fn data_bytes(&self) -> usize {
        self.artifacts.iter().map(|a| a.data().get().len()).sum()
    }
}

/// A data part whose value is JSON text.
#[derive(Debug, Clone, Serialize)]
pub struct DataPart {
    pub data: Box<RawValue>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Task {
    pub id: String,
    pub context_id: String,
    pub status: TaskStatus,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub artifacts: Vec<Artifact>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<Message>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
}

/// A JSON-RPC error with, for A2A-specific codes, one `google.rpc.ErrorInfo` in `data`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    pub reason: Option<&'static str>,
    pub metadata: Vec<(&'static str, String)>,
}

impl RpcError {
    fn plain(code: i64, message: impl Into<String>) -> RpcError {
        RpcError {
            code,
            message: message.into(),
            reason: None,
            metadata: Vec::new(),
        }
    }

    fn a2a(code: i64, reason: &'static str, message: impl Into<String>) -> RpcError {
        RpcError {
            code,
            message: message.into(),
            reason: Some(reason),
            metadata: Vec::new(),
        }
    }

    pub fn with(mut self, key: &'static str, value: impl Into<String>) -> RpcError {
        self.metadata.push((key, value.into()));
        self
    }

    /// A caller past its own bound on requests in flight or open streams (answered with
    /// HTTP 429 and `Retry-After`); a server error code of JSON-RPC's own range.
    pub fn caller_limit(message: impl Into<String>) -> RpcError {
        RpcError::a2a(-32099, "CALLER_LIMIT", message)
    }

    pub fn parse_error(detail: impl std::fmt::Display) -> RpcError {
        RpcError::plain(-32700, format!("Parse error: {detail}"))
    }
    pub fn invalid_request(detail: &str) -> RpcError {
        RpcError::plain(-32600, format!("Invalid request: {detail}"))
    }
    pub fn method_not_found(method: &str) -> RpcError {
        RpcError::plain(-32601, format!("Method not found: {:?}", clip(method)))
    }
    /// An HTTP+JSON path that names no operation (JSON-RPC's "method not found").
    pub fn no_route(path: &str) -> RpcError {
        RpcError::plain(
            -32601,
            format!("Not found: no A2A operation at {:?}", clip(path)),
        )
    }
    pub fn invalid_params(detail: impl Into<String>) -> RpcError {
        RpcError::plain(-32602, format!("Invalid params: {}", detail.into()))
    }
    pub fn internal(detail: &str) -> RpcError {
        RpcError::plain(-32603, format!("Internal error: {detail}"))
    }
    pub fn task_not_found(task_id: &str) -> RpcError {
        RpcError::a2a(-32001, "TASK_NOT_FOUND", "Task not found").with("taskId", task_id)
    }
    /// A task whose replica is gone: its tasks lived in its memory.
    pub fn task_not_found_gone(task_id: &str, replica: &str) -> RpcError {
        RpcError::a2a(
            -32001,
            "TASK_NOT_FOUND",
            format!(
                "Task not found: the replica that held it ({replica}) is gone, and its tasks with it (its workers are not: list them)"
            ),
        )
        .with("taskId", task_id)
        .with("replica", replica)
    }
    /// A task whose replica is listed but does not answer.
    pub fn task_not_found_unanswered(task_id: &str, replica: &str, why: &str) -> RpcError {
        RpcError::a2a(
            -32001,
            "TASK_NOT_FOUND",
            format!("Task not found: the replica that holds it ({replica}) does not answer: {why}"),
        )
        .with("taskId", task_id)
        .with("replica", replica)
    }
    pub fn task_not_cancelable(task_id: &str, why: &str) -> RpcError {
        RpcError::a2a(
            -32002,
            "TASK_NOT_CANCELABLE",
            format!("Task not cancelable: {why}"),
        )
        .with("taskId", task_id)
    }
    pub fn push_not_supported() -> RpcError {
        RpcError::a2a(
            -32003,
            "PUSH_NOTIFICATION_NOT_SUPPORTED",
            "Push notifications are not supported",
        )
    }
    pub fn unsupported(what: &str) -> RpcError {
        RpcError::a2a(
            -32004,
            "UNSUPPORTED_OPERATION",
            format!("Unsupported operation: {what}"),
        )
    }
    pub fn content_type_not_supported(what: &str) -> RpcError {
        RpcError::a2a(
            -32005,
            "CONTENT_TYPE_NOT_SUPPORTED",
            format!("Content type not supported: {what}"),
        )
    }
    pub fn version_not_supported(version: &str) -> RpcError {
        RpcError::a2a(
            -32009,
            "VERSION_NOT_SUPPORTED",
            format!(
                "A2A version {:?} is not supported; this server speaks {PROTOCOL_VERSION}",
                clip(version)
            ),
        )
        .with("requestedVersion", clip(version))
        .with("supportedVersions", PROTOCOL_VERSION)
    }

    pub fn to_json(&self) -> Value {
        let mut obj = Map::new();
        obj.insert("code".into(), json!(self.code));
        obj.insert("message".into(), json!(self.message));
        let metadata: Map<String, Value> = self
            .metadata
            .iter()
            .map(|(k, v)| (k.to_string(), json!(v)))
            .collect();
        if let Some(reason) = self.reason {
            obj.insert(
                "data".into(),
                json!([{
                    "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                    "reason": reason,
                    "domain": ERROR_DOMAIN,
                    "metadata": metadata,
                }]),
            );
        }
        Value::Object(obj)
    }
}

impl RpcError {
    /// The HTTP status and `google.rpc.Code` name the HTTP+JSON binding answers this error
    /// with (specification §5.4; JSON-RPC's own codes by their meaning).
    pub fn http_status(&self) -> (u16, &'static str) {
        match self.code {
            -32001 => (404, "NOT_FOUND"),
            -32002 => (409, "FAILED_PRECONDITION"),
            -32003 | -32004 | -32009 => (400, "UNIMPLEMENTED"),
            -32005 => (415, "INVALID_ARGUMENT"),
            -32006 => (502, "INTERNAL"),
            -32007 | -32008 => (400, "FAILED_PRECONDITION"),
            -32601 => (404, "NOT_FOUND"),
            -32603 => (500, "INTERNAL"),
            _ => (400, "INVALID_ARGUMENT"),
        }
    }

    /// The HTTP+JSON body (AIP-193, specification §11.6): `{"error": {code, status, message,
    /// details: [ErrorInfo]}}`; JSON-RPC's own errors carry a reason too (`INVALID_PARAMS`,
    /// ...), so a client can tell them apart without reading the message.
    pub fn to_rest_json(&self) -> Value {
        let (code, status) = self.http_status();
        let reason = self.reason.unwrap_or(match self.code {
            -32700 => "PARSE_ERROR",
            -32600 => "INVALID_REQUEST",
            -32601 => "METHOD_NOT_FOUND",
            -32602 => "INVALID_PARAMS",
            _ => "INTERNAL_ERROR",
        });
        let metadata: Map<String, Value> = self
            .metadata
            .iter()
            .map(|(k, v)| (k.to_string(), json!(v)))
            .collect();
        rest_error_body(code, status, reason, &self.message, metadata)
    }
}

/// An HTTP+JSON error body (AIP-193): `{"error": {code, status, message, details:
/// [ErrorInfo]}}` — for A2A's errors and the HTTP layer's own (401, 413, 405).
pub fn rest_error_body(
    code: u16,
    status: &str,
    reason: &str,
    message: &str,
    metadata: Map<String, Value>,
) -> Value {
    json!({"error": {
        "code": code,
        "status": status,
        "message": message,
        "details": [{
            "@type": "type.googleapis.com/google.rpc.ErrorInfo",
            "reason": reason,
            "domain": ERROR_DOMAIN,
            "metadata": metadata,
        }],
    }})
}

/// A client-supplied string as echoed in an error: at most 64 characters.
fn clip(s: &str) -> String {
    s.chars().take(64).collect()
}

/// A JSON-RPC response body.
pub fn response_ok(id: &Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

pub fn response_err(id: &Value, error: &RpcError) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": error.to_json()})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enums_parse_names_and_numbers() {
        assert_eq!(Role::parse(&json!("ROLE_USER")), Some(Role::User));
        assert_eq!(Role::parse(&json!(2)), Some(Role::Agent));
        assert_eq!(Role::parse(&json!("user")), None);
        assert_eq!(
            TaskState::parse(&json!("TASK_STATE_FAILED")),
            Some(TaskState::Failed)
        );
        assert_eq!(TaskState::parse(&json!(7)), Some(TaskState::Rejected));
        assert_eq!(TaskState::parse(&json!("completed")), None);
        assert_eq!(TaskState::parse(&json!(0)), None);
    }

    #[test]
    fn a2a_errors_carry_error_info() {
        let v = RpcError::task_not_found("t-1").to_json();
        assert_eq!(v["code"], -32001);
        assert_eq!(v["data"][0]["reason"], "TASK_NOT_FOUND");
        assert_eq!(v["data"][0]["metadata"]["taskId"], "t-1");
        let v = RpcError::parse_error("x").to_json();
        assert!(v.get("data").is_none());
        let long = "m".repeat(100_000);
        assert!(RpcError::method_not_found(&long).message.len() < 100);
        assert!(
            RpcError::version_not_supported(&long)
                .to_json()
                .to_string()
                .len()
                < 500
        );
    }
}
