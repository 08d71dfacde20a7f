//! The workers as resources: each worker's record (`a2a-worker://workers/<id>`, JSON as `list`
//! gives it) and its output (`.../logs`, the last lines as `logs` gives them). What a caller
//! may read is what its `list` shows: read through the same control operations, for it.

use std::sync::Arc;

use serde_json::{json, Map, Value};

use super::era::Era;
use super::wire::{self, RpcError};
use crate::control::{Caller, Control, ControlRequest, ErrorCode, Filter, Outcome, DEFAULT_TAIL};

const PREFIX: &str = "a2a-worker://workers/";
const LOGS: &str = "/logs";

/// What a resource URI names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Named {
    Record(String),
    Logs(String),
}

impl Named {
    pub fn parse(uri: &str) -> Option<Named> {
        let rest = uri.strip_prefix(PREFIX)?;
        let (id, logs) = match rest.strip_suffix(LOGS) {
            Some(id) => (id, true),
            None => (rest, false),
        };
        let valid = !id.is_empty()
            && id.len() <= crate::control::MAX_WORKER_ID_CHARS
            && id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
        match (valid, logs) {
            (false, _) => None,
            (true, false) => Some(Named::Record(id.to_string())),
            (true, true) => Some(Named::Logs(id.to_string())),
        }
    }
}

/// A worker record's URI.
pub fn record_uri(worker_id: &str) -> String {
    format!("{PREFIX}{worker_id}")
}

/// Cache hints of a 2026-07-28 result: what a caller sees changes at any time, and is its own.
fn cacheable(era: &Era, result: Value) -> Value {
    wire::cacheable(era.modern(), result, wire::Cache::Private)
}

/// The workers `caller` sees, through `list`.
fn workers(control: &Control, caller: &Caller, filter: Filter) -> Result<Vec<Value>, RpcError> {
    let request = ControlRequest::List { filter };
    match control.execute(caller, Ok(request), "mcp:resources") {
        Outcome::Completed { data, .. } => {
            let mut reply: Value = serde_json::from_str(data.get())
                .map_err(|e| RpcError::new(200, wire::INTERNAL_ERROR, e.to_string()))?;
            match reply["workers"].take() {
                Value::Array(workers) => Ok(workers),
                _ => Ok(Vec::new()),
            }
        }
        Outcome::Rejected(e) | Outcome::Failed(e) => Err(RpcError::new(
            200,
            wire::INTERNAL_ERROR,
            format!("{:?}: {}", e.code, e.message),
        )),
    }
}

/// `resources/list`: every worker's record (one page: a caller holds at most `MAX_WORKERS`).
pub fn list(control: &Arc<Control>, caller: &Caller, era: &Era) -> Result<Value, RpcError> {
    let resources: Vec<Value> = workers(control, caller, Filter::default())?
        .iter()
        .map(|w| {
            let id = w["worker_id"].as_str().unwrap_or_default();
            json!({
                "uri": record_uri(id),
                "name": id,
                "title": format!("{} ({})", w["task"].as_str().unwrap_or_default(), w["state"].as_str().unwrap_or_default()),
                "description": "The worker as list shows it; its output is at this URI + /logs.",
                "mimeType": "application/json",
            })
        })
        .collect();
    Ok(cacheable(era, json!({ "resources": resources })))
}

/// `resources/templates/list`: a worker's record and its output, by id.
pub fn templates(era: &Era) -> Value {
    cacheable(
        era,
        json!({"resourceTemplates": [
            {"uriTemplate": format!("{PREFIX}{{worker_id}}"), "name": "worker", "title": "A worker's record", "description": "The worker as list shows it (never its token).", "mimeType": "application/json"},
            {"uriTemplate": format!("{PREFIX}{{worker_id}}{LOGS}"), "name": "worker-logs", "title": "A worker's output", "description": "The last 200 lines of the worker's output.", "mimeType": "text/plain"},
        ]}),
    )
}

/// `resources/read`.
pub fn read(
    control: &Arc<Control>,
    caller: &Caller,
    era: &Era,
    params: &Map<String, Value>,
) -> Result<Value, RpcError> {
    let uri = params
        .get("uri")
        .and_then(Value::as_str)
        .ok_or_else(|| RpcError::params("resources/read needs a uri"))?;
    let not_found = || {
        let code = match era.modern() {
            true => wire::INVALID_PARAMS,
            false => wire::RESOURCE_NOT_FOUND_LEGACY,
        };
        let shown: String = uri.chars().take(128).collect();
        RpcError {
            data: Some(json!({"uri": shown})),
            ..RpcError::new(200, code, format!("Resource not found: {shown}"))
        }
    };
    let (mime, text) = match Named::parse(uri).ok_or_else(not_found)? {
        Named::Record(id) => {
            let worker = workers(control, caller, Filter::default())?
                .into_iter()
                .find(|w| w["worker_id"] == id.as_str())
                .ok_or_else(not_found)?;
            ("application/json", worker.to_string())
        }
        Named::Logs(worker_id) => {
            let request = ControlRequest::Logs {
                worker_id,
                tail: DEFAULT_TAIL,
            };
            match control.execute(caller, Ok(request), "mcp:resources") {
                Outcome::Completed { data, .. } => {
                    let reply: Value = serde_json::from_str(data.get()).unwrap_or_default();
                    (
                        "text/plain",
                        reply["text"].as_str().unwrap_or_default().to_string(),
                    )
                }
                Outcome::Failed(e) | Outcome::Rejected(e) if e.code == ErrorCode::NotFound => {
                    return Err(not_found())
                }
                Outcome::Failed(e) | Outcome::Rejected(e) => {
                    return Err(RpcError::new(200, wire::INTERNAL_ERROR, e.message))
                }
            }
        }
    };
    Ok(cacheable(
        era,
        json!({"contents": [{"uri": uri, "mimeType": mime, "text": text}]}),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_uri_names_a_record_or_its_logs_and_nothing_else() {
        assert_eq!(
            Named::parse("a2a-worker://workers/w-1"),
            Some(Named::Record("w-1".into()))
        );
        assert_eq!(
            Named::parse("a2a-worker://workers/w-1/logs"),
            Some(Named::Logs("w-1".into()))
        );
        assert_eq!(Named::parse("a2a-worker://workers/"), None);
        assert_eq!(Named::parse("a2a-worker://workers/../etc"), None);
        assert_eq!(Named::parse("file:///etc/passwd"), None);
    }
}
