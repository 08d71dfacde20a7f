//! The A2A v1.0 JSON-RPC layer: envelope validation, service parameters (`A2A-Version`,
//! `A2A-Extensions`), method dispatch, and control tasks over [`Control`]. It sees request
//! headers only after the HTTP layer has authenticated the caller and removed credentials.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;

use serde_json::{json, Map, Value};

use crate::a2a::{
    response_err, response_ok, Artifact, Message, Part, Role, RpcError, Task, TaskState,
    TaskStatus, PROTOCOL_VERSION,
};
use crate::control::{self, Control, ControlError, ControlRequest, ErrorCode, Outcome};
use crate::tasks::{self, Filter, TaskStore};
use crate::time::{now_millis, parse_rfc3339_millis, rfc3339_millis};
use crate::token::{uuid_v4, Token};

/// Most `returnImmediately` operations running in the background at once; beyond it a request
/// is served as if it had not asked (the reply then simply arrives finished).
const MAX_BACKGROUND: usize = 64;
pub const DEFAULT_PAGE_SIZE: usize = 50;
pub const MAX_PAGE_SIZE: usize = 100;

/// The service parameters of one request, normalised.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ServiceParams {
    /// `None` when the caller sent no `A2A-Version` (treated as 1.0, see the README).
    pub version: Option<String>,
    /// `A2A-Extensions`, trimmed, without empties and duplicates, in first-seen order.
    pub extensions: Vec<String>,
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
        }
    }
}

fn percent_decode(s: &str) -> String {
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

pub struct Protocol {
    control: Arc<Control>,
    tasks: Arc<TaskStore>,
    background: Arc<AtomicUsize>,
}

impl Protocol {
    pub fn new(control: Arc<Control>, tasks: Arc<TaskStore>) -> Protocol {
        Protocol {
            control,
            tasks,
            background: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// Answers one JSON-RPC request body. Always returns a JSON-RPC response object.
    pub fn handle(&self, params: &ServiceParams, body: &[u8]) -> Value {
        let request: Value = match serde_json::from_slice(body) {
            Ok(v) => v,
            Err(e) => return response_err(&Value::Null, &RpcError::parse_error(e)),
        };
        let (id, method, rpc_params) = match envelope(&request) {
            Ok(parts) => parts,
            Err((id, e)) => return response_err(&id, &e),
        };
        if let Some(v) = &params.version {
            if v != PROTOCOL_VERSION {
                return response_err(&id, &RpcError::version_not_supported(v));
            }
        }
        if !params.extensions.is_empty() {
            log::debug!(
                "A2A-Extensions requested (none supported): {:?}",
                params.extensions
            );
        }
        match self.dispatch(method, rpc_params) {
            Ok(result) => response_ok(&id, result),
            Err(e) => response_err(&id, &e),
        }
    }

    fn dispatch(
        &self,
        method: &str,
        params: Option<&Map<String, Value>>,
    ) -> Result<Value, RpcError> {
        let need = || params.ok_or_else(|| RpcError::invalid_params("params are required"));
        match method {
            "SendMessage" => self.send_message(need()?),
            "GetTask" => self.get_task(need()?),
            "ListTasks" => self.list_tasks(params.unwrap_or(&Map::new())),
            "CancelTask" => self.cancel_task(need()?),
            "SendStreamingMessage" | "SubscribeToTask" => Err(RpcError::unsupported(
                "streaming is not supported (capabilities.streaming is false)",
            )),
            "CreateTaskPushNotificationConfig"
            | "GetTaskPushNotificationConfig"
            | "ListTaskPushNotificationConfigs"
            | "DeleteTaskPushNotificationConfig" => Err(RpcError::push_not_supported()),
            "GetExtendedAgentCard" => Err(RpcError::unsupported(
                "there is no extended agent card (capabilities.extendedAgentCard is false)",
            )),
            other => Err(RpcError::method_not_found(other)),
        }
    }

    fn send_message(&self, params: &Map<String, Value>) -> Result<Value, RpcError> {
        let message = field(params, &["message"])
            .ok_or_else(|| RpcError::invalid_params("message is required"))?;
        let message = parse_message(message)?;
        let config = match field(params, &["configuration"]) {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(c)) => c.clone(),
            Some(_) => return Err(RpcError::invalid_params("configuration must be an object")),
        };
        let history_length = history_length(&config)?;
        let return_immediately = match field(&config, &["returnImmediately", "return_immediately"])
        {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => {
                return Err(RpcError::invalid_params(
                    "returnImmediately must be a boolean",
                ))
            }
        };
        if let Some(modes) = field(&config, &["acceptedOutputModes", "accepted_output_modes"]) {
            let modes = string_list(modes, "acceptedOutputModes")?;
            let ok = modes.is_empty()
                || modes
                    .iter()
                    .any(|m| matches!(m.as_str(), "application/json" | "*/*" | "application/*"));
            if !ok {
                return Err(RpcError {
                    code: -32005,
                    message: "Content type not supported: replies are application/json data parts"
                        .into(),
                    reason: Some("CONTENT_TYPE_NOT_SUPPORTED"),
                    metadata: vec![("supportedOutputModes", "application/json".into())],
                });
            }
        }
        if let Some(task_id) = &message.task_id {
            // Every control task is finished when its reply is sent, so a follow-up message
            // can never be accepted; unknown ids are reported as such.
            let (context_id, _) = self
                .tasks
                .peek(task_id)
                .ok_or_else(|| RpcError::task_not_found(task_id))?;
            if message
                .context_id
                .as_ref()
                .is_some_and(|c| c != &context_id)
            {
                return Err(RpcError::invalid_params(
                    "contextId does not match the task's contextId",
                ));
            }
            return Err(RpcError::unsupported(
                "control tasks are terminal and accept no further messages; send a new message without taskId",
            )
            .with("taskId", task_id.clone()));
        }

        let task_id = uuid_v4().map_err(|e| RpcError::internal(&e.to_string()))?;
        let context_id = match &message.context_id {
            Some(c) => c.clone(),
            None => uuid_v4().map_err(|e| RpcError::internal(&e.to_string()))?,
        };
        let mut user = message;
        user.task_id = Some(task_id.clone());
        user.context_id = Some(context_id.clone());
        let request = control::parse_request(user.parts.iter().filter_map(|p| p.data.as_ref()));
        let base = Task {
            id: task_id.clone(),
            context_id,
            status: TaskStatus {
                state: TaskState::Working,
                timestamp: String::new(),
                message: None,
            },
            artifacts: Vec::new(),
            history: vec![user],
            metadata: None,
        };

        if return_immediately && request.is_ok() && self.reserve_background() {
            let now = now_millis();
            let mut working = base.clone();
            working.status.timestamp = rfc3339_millis(now);
            self.tasks.insert(working.clone(), None, now);
            self.spawn_background(base, request, task_id);
            return Ok(json!({ "task": with_history(working, history_length) }));
        }

        let outcome = self.control.execute(request, &task_id);
        let (task, token) = finish(base, outcome);
        let status_millis = parse_rfc3339_millis(&task.status.timestamp).unwrap_or(0);
        // The reply below delivers the token; the stored copy never holds it.
        self.tasks.insert(task.clone(), None, status_millis);
        let mut task = task;
        if let Some(token) = &token {
            tasks::with_token(&mut task, token);
        }
        Ok(json!({ "task": with_history(task, history_length) }))
    }

    fn reserve_background(&self) -> bool {
        self.background
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < MAX_BACKGROUND).then_some(n + 1)
            })
            .is_ok()
    }

    fn spawn_background(
        &self,
        base: Task,
        request: Result<ControlRequest, ControlError>,
        task_id: String,
    ) {
        let control = Arc::clone(&self.control);
        let tasks = Arc::clone(&self.tasks);
        let background = Arc::clone(&self.background);
        let fallback = base.clone();
        let run = move || {
            let outcome = control.execute(request, &task_id);
            let (task, token) = finish(base, outcome);
            let status_millis = parse_rfc3339_millis(&task.status.timestamp).unwrap_or(0);
            if !tasks.update(task, token, status_millis) {
                log::warn!(
                    "task {task_id} was evicted before its operation finished; its result (and any worker token) was not kept"
                );
            }
            background.fetch_sub(1, Ordering::SeqCst);
        };
        if let Err(e) = thread::Builder::new().name("control-bg".into()).spawn(run) {
            // Nothing ran: the stored task must not stay WORKING forever.
            log::error!("cannot start a background operation: {e}");
            let failure = ControlError::new(
                ErrorCode::Internal,
                "the operation could not be started; nothing was done",
            );
            let (task, _) = finish(fallback, Outcome::Failed(failure));
            let status_millis = parse_rfc3339_millis(&task.status.timestamp).unwrap_or(0);
            self.tasks.update(task, None, status_millis);
            self.background.fetch_sub(1, Ordering::SeqCst);
        }
    }

    fn get_task(&self, params: &Map<String, Value>) -> Result<Value, RpcError> {
        let id = required_string(params, &["id", "taskId", "task_id"], "id")?;
        let history_length = history_length(params)?;
        let task = self
            .tasks
            .get(&id, true)
            .ok_or_else(|| RpcError::task_not_found(&id))?;
        to_json(&with_history(task, history_length))
    }

    fn cancel_task(&self, params: &Map<String, Value>) -> Result<Value, RpcError> {
        let id = required_string(params, &["id", "taskId", "task_id"], "id")?;
        match self.tasks.peek(&id) {
            None => Err(RpcError::task_not_found(&id)),
            Some((_, state)) if state.is_terminal() => Err(RpcError::task_not_cancelable(
                &id,
                &format!("it is already {}", state.name()),
            )),
            Some(_) => Err(RpcError::task_not_cancelable(
                &id,
                "a control operation cannot be interrupted once started",
            )),
        }
    }

    fn list_tasks(&self, params: &Map<String, Value>) -> Result<Value, RpcError> {
        let page_size = match field(params, &["pageSize", "page_size"]) {
            None | Some(Value::Null) => DEFAULT_PAGE_SIZE,
            Some(v) => match whole_number(v) {
                Some(n) if (1..=MAX_PAGE_SIZE as u64).contains(&n) => n as usize,
                _ => {
                    return Err(RpcError::invalid_params(format!(
                        "pageSize must be a whole number from 1 to {MAX_PAGE_SIZE}"
                    )))
                }
            },
        };
        let before_seq = match optional_string(params, &["pageToken", "page_token"], "pageToken")? {
            None => None,
            Some(t) if t.is_empty() => None,
            Some(t) => Some(t.parse::<u64>().ok().filter(|n| *n > 0).ok_or_else(|| {
                RpcError::invalid_params("pageToken is not one this server issued")
            })?),
        };
        let state = match field(params, &["status", "state"]) {
            None | Some(Value::Null) => None,
            // The unset forms mean "no filter": the proto default (TASK_STATE_UNSPECIFIED, 0)
            // and what @a2a-js/sdk 1.3.0 sends for a status it was not given ("UNRECOGNIZED").
            Some(Value::String(s))
                if matches!(s.as_str(), "" | "TASK_STATE_UNSPECIFIED" | "UNRECOGNIZED") =>
            {
                None
            }
            Some(Value::Number(n)) if n.as_f64() == Some(0.0) => None,
            Some(v) => Some(TaskState::parse(v).ok_or_else(|| {
                RpcError::invalid_params("status must be a task state such as TASK_STATE_COMPLETED")
            })?),
        };
        let status_after_millis = match optional_string(
            params,
            &["statusTimestampAfter", "status_timestamp_after"],
            "statusTimestampAfter",
        )? {
            None => None,
            Some(t) => Some(parse_rfc3339_millis(&t).ok_or_else(|| {
                RpcError::invalid_params("statusTimestampAfter must be an RFC 3339 timestamp")
            })?),
        };
        let include_artifacts = match field(params, &["includeArtifacts", "include_artifacts"]) {
            None | Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(_) => {
                return Err(RpcError::invalid_params(
                    "includeArtifacts must be a boolean",
                ))
            }
        };
        let history_length = history_length(params)?;
        let filter = Filter {
            context_id: optional_string(params, &["contextId", "context_id"], "contextId")?,
            state,
            status_after_millis,
            before_seq,
        };
        let page = self.tasks.list(&filter, page_size, include_artifacts);
        let tasks: Vec<Task> = page
            .tasks
            .into_iter()
            .map(|t| with_history(t, history_length))
            .collect();
        Ok(json!({
            "tasks": tasks,
            "nextPageToken": page.next_seq.map(|s| s.to_string()).unwrap_or_default(),
            "pageSize": page_size,
            "totalSize": page.total,
        }))
    }
}

/// A checked envelope: id, method, params.
type Envelope<'a> = (Value, &'a str, Option<&'a Map<String, Value>>);

/// Checks the JSON-RPC 2.0 envelope; on failure returns the id to answer with.
fn envelope(request: &Value) -> Result<Envelope<'_>, (Value, RpcError)> {
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

fn parse_message(v: &Value) -> Result<Message, RpcError> {
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

/// Completes a task from an operation's outcome; returns the token to deliver, if any.
fn finish(mut task: Task, outcome: Outcome) -> (Task, Option<Token>) {
    let now = rfc3339_millis(now_millis());
    task.status.timestamp = now;
    let outcome_kind = outcome.label();
    let agent_message = |text: String, data: Value, task: &Task| Message {
        message_id: uuid_v4().unwrap_or_else(|_| format!("{}-status", task.id)),
        role: Role::Agent,
        parts: vec![Part::text(text), Part::data(data)],
        context_id: Some(task.context_id.clone()),
        task_id: Some(task.id.clone()),
        metadata: None,
    };
    match outcome {
        Outcome::Completed { data, token } => {
            task.status.state = TaskState::Completed;
            task.artifacts = vec![Artifact {
                artifact_id: uuid_v4().unwrap_or_else(|_| format!("{}-result", task.id)),
                name: "result".into(),
                parts: vec![Part::data(data)],
            }];
            (task, token)
        }
        Outcome::Rejected(e) | Outcome::Failed(e) => {
            let (state, verb) = if matches!(outcome_kind, "rejected") {
                (TaskState::Rejected, "rejected")
            } else {
                (TaskState::Failed, "failed")
            };
            task.status.state = state;
            let msg = agent_message(
                format!("{verb}: {}", e.message),
                json!({ "error": e }),
                &task,
            );
            task.history.push(msg.clone());
            task.status.message = Some(msg);
            (task, None)
        }
    }
}

/// `None` = all history; `Some(0)` = none; `Some(n)` = the last n messages.
fn with_history(mut task: Task, history_length: Option<usize>) -> Task {
    if let Some(n) = history_length {
        let len = task.history.len();
        task.history.drain(..len.saturating_sub(n));
    }
    task
}

fn history_length(params: &Map<String, Value>) -> Result<Option<usize>, RpcError> {
    match field(params, &["historyLength", "history_length"]) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => whole_number(v)
            .map(|n| Some(n.min(1_000) as usize))
            .ok_or_else(|| RpcError::invalid_params("historyLength must be a whole number >= 0")),
    }
}

/// A non-negative whole number, also when it arrives as a float (`2.0`) or a ProtoJSON
/// string (`"2"`).
fn whole_number(v: &Value) -> Option<u64> {
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

fn field<'a>(m: &'a Map<String, Value>, names: &[&str]) -> Option<&'a Value> {
    names.iter().find_map(|n| m.get(*n))
}

fn optional_string(
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

fn required_string(
    m: &Map<String, Value>,
    names: &[&str],
    label: &str,
) -> Result<String, RpcError> {
    optional_string(m, names, label)?
        .ok_or_else(|| RpcError::invalid_params(format!("{label} is required")))
}

fn string_list(v: &Value, label: &str) -> Result<Vec<String>, RpcError> {
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

fn to_json(task: &Task) -> Result<Value, RpcError> {
    serde_json::to_value(task).map_err(|e| RpcError::internal(&e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn service_params() {
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
    fn percent_decoding() {
        assert_eq!(percent_decode("1%2E0"), "1.0");
        assert_eq!(percent_decode("a%zz%"), "a%zz%");
        assert_eq!(percent_decode("%"), "%");
    }

    #[test]
    fn whole_numbers() {
        assert_eq!(whole_number(&json!(2)), Some(2));
        assert_eq!(whole_number(&json!(2.0)), Some(2));
        assert_eq!(whole_number(&json!("3")), Some(3));
        assert_eq!(whole_number(&json!(2.5)), None);
        assert_eq!(whole_number(&json!(-1)), None);
    }
}
