//! Control requests as callers send them: the first data part with an `"operation"`, read and
//! checked before anything runs (tasks, worker ids, TTLs, tails, metadata, list filters), and
//! the TTL a create gets from what it asked and the controller's lifetime settings.

use std::time::Duration;

use serde_json::Value;

use super::error::ControlError;
use crate::backend::{tail, Metadata, Worker, WorkerState, MAX_METADATA_KEYS, MAX_METADATA_VALUE};
use crate::settings::templates::check_name as check_template_name;
use crate::settings::Lifetime;
use crate::time;

pub const MAX_TASK_CHARS: usize = 256;
pub const MAX_WORKER_ID_CHARS: usize = 64;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ControlRequest {
    /// `ttl`: the caller's lifetime for the worker, when it named one.
    Create {
        task: String,
        ttl: Option<Duration>,
        metadata: Metadata,
        /// The template named (`None`: `default`).
        template: Option<String>,
        /// The task whose workspace the new task's starts as a copy of.
        from_task: Option<String>,
    },
    /// The templates the caller may create from.
    Templates,
    List {
        filter: Filter,
    },
    /// `delete_workspace`: the worker's task workspace is deleted with it.
    Stop {
        worker_id: String,
        delete_workspace: bool,
    },
    /// The task workspaces the caller's scope has.
    Workspaces,
    /// Task `task`'s workspace made a copy of task `from_task`'s (same scope), no worker made.
    CopyWorkspace {
        from_task: String,
        task: String,
    },
    /// Deletes a task's workspace (refused while a worker of the task exists). `scope`: an
    /// admin's choice of scope (others always act in their own).
    DeleteWorkspace {
        task: String,
        scope: Option<String>,
    },
    /// The last `tail` lines of a worker's output.
    Logs {
        worker_id: String,
        tail: u32,
    },
    /// What happens to the workers (matching `filter`), as a stream: see [`watch`].
    Watch {
        filter: Filter,
    },
    /// The worker's expiry becomes now + `ttl` (bounded as a create's).
    Renew {
        worker_id: String,
        ttl: Duration,
    },
    /// The worker stops running and keeps its files and identity.
    Suspend {
        worker_id: String,
    },
    /// A suspended worker runs again.
    Resume {
        worker_id: String,
    },
}

impl ControlRequest {
    pub fn operation(&self) -> &'static str {
        match self {
            ControlRequest::Create { .. } => "create",
            ControlRequest::Templates => "templates",
            ControlRequest::Workspaces => "workspaces",
            ControlRequest::DeleteWorkspace { .. } => "delete_workspace",
            ControlRequest::CopyWorkspace { .. } => "copy_workspace",
            ControlRequest::List { .. } => "list",
            ControlRequest::Watch { .. } => "watch",
            ControlRequest::Stop { .. } => "stop",
            ControlRequest::Logs { .. } => "logs",
            ControlRequest::Renew { .. } => "renew",
            ControlRequest::Suspend { .. } => "suspend",
            ControlRequest::Resume { .. } => "resume",
        }
    }
}

/// Finds the control request: the first data part whose value is an object with an
/// `"operation"` key. Unknown fields are ignored.
pub fn parse_request<'a>(
    data_parts: impl IntoIterator<Item = &'a Value>,
) -> Result<ControlRequest, ControlError> {
    let request = data_parts
        .into_iter()
        .filter_map(Value::as_object)
        .find(|o| o.contains_key("operation"))
        .ok_or_else(|| {
            ControlError::invalid(
                "the message has no control request: send a data part {\"operation\": \"create\" | \"list\" | \"stop\", ...}",
            )
        })?;
    let operation = request["operation"]
        .as_str()
        .ok_or_else(|| ControlError::invalid("operation must be a string"))?;
    match operation {
        "create" => Ok(ControlRequest::Create {
            task: valid_task(request.get("task"))?,
            ttl: valid_ttl(request.get("ttl"))?,
            metadata: valid_metadata(request.get("metadata"), "create")?,
            template: valid_template(request.get("template"))?,
            from_task: match request.get("from_task") {
                None | Some(Value::Null) => None,
                // Present: the "needs" line cannot be the answer.
                v => Some(task_field(v, "create needs a from_task", "from_task")?),
            },
        }),
        "templates" => Ok(ControlRequest::Templates),
        "list" => Ok(ControlRequest::List {
            filter: valid_filter(request)?,
        }),
        "watch" => Ok(ControlRequest::Watch {
            filter: valid_filter(request)?,
        }),
        "stop" => Ok(ControlRequest::Stop {
            worker_id: valid_worker_id(request.get("worker_id"), "stop")?,
            delete_workspace: match request.get("workspace") {
                None | Some(Value::Null) => false,
                Some(Value::String(s)) if s == "keep" => false,
                Some(Value::String(s)) if s == "delete" => true,
                Some(_) => {
                    return Err(ControlError::invalid(
                        "workspace must be \"keep\" (the default) or \"delete\"",
                    ))
                }
            },
        }),
        "workspaces" => Ok(ControlRequest::Workspaces),
        "copy_workspace" => Ok(ControlRequest::CopyWorkspace {
            from_task: task_field(
                request.get("from_task"),
                "copy_workspace needs a from_task",
                "from_task",
            )?,
            task: task_field(request.get("task"), "copy_workspace needs a task", "task")?,
        }),
        "delete_workspace" => Ok(ControlRequest::DeleteWorkspace {
            task: task_field(request.get("task"), "delete_workspace needs a task", "task")?,
            scope: match request.get("scope") {
                None | Some(Value::Null) => None,
                Some(Value::String(s)) => Some(s.clone()),
                Some(_) => return Err(ControlError::invalid("scope must be a string")),
            },
        }),
        "logs" => Ok(ControlRequest::Logs {
            worker_id: valid_worker_id(request.get("worker_id"), "logs")?,
            tail: valid_tail(request.get("tail"))?,
        }),
        "renew" => Ok(ControlRequest::Renew {
            worker_id: valid_worker_id(request.get("worker_id"), "renew")?,
            ttl: valid_ttl(request.get("ttl"))?
                .ok_or_else(|| ControlError::invalid("renew needs a ttl, e.g. \"2h\""))?,
        }),
        "suspend" => Ok(ControlRequest::Suspend {
            worker_id: valid_worker_id(request.get("worker_id"), "suspend")?,
        }),
        "resume" => Ok(ControlRequest::Resume {
            worker_id: valid_worker_id(request.get("worker_id"), "resume")?,
        }),
        other => Err(ControlError::invalid(format!(
            "unknown operation {:?}: use create, list, stop, logs, watch, renew, suspend, resume, templates, workspaces, copy_workspace or delete_workspace",
            truncate(other, 64)
        ))),
    }
}

/// A task: 1 to 256 characters, not blank, no control characters (they would reach log
/// lines, labels and terminal titles).
fn valid_task(v: Option<&Value>) -> Result<String, ControlError> {
    task_field(v, "create needs a task", "task")
}

/// A task name in field `field` of a request (`needs`: what a missing one is told).
fn task_field(v: Option<&Value>, needs: &str, field: &str) -> Result<String, ControlError> {
    let task = match v {
        None | Some(Value::Null) => return Err(ControlError::invalid(needs)),
        Some(Value::String(s)) => s,
        Some(_) => return Err(ControlError::invalid(format!("{field} must be a string"))),
    };
    if task.trim().is_empty() {
        return Err(ControlError::invalid(format!("{field} must not be empty")));
    }
    if task.chars().count() > MAX_TASK_CHARS {
        return Err(ControlError::invalid(format!(
            "{field} is longer than {MAX_TASK_CHARS} characters"
        )));
    }
    if task.chars().any(|c| c.is_control() || is_bidi_control(c)) {
        return Err(ControlError::invalid(format!(
            "{field} must not contain control characters"
        )));
    }
    Ok(task.clone())
}

/// A template name as a request gives it (whether it exists is the operation's to say).
fn valid_template(v: Option<&Value>) -> Result<Option<String>, ControlError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => check_template_name(s)
            .map(|()| Some(s.clone()))
            .map_err(|why| ControlError::invalid(format!("template: {why}"))),
        Some(_) => Err(ControlError::invalid("template must be a string")),
    }
}

/// Which workers `list` answers: all of them must match (an empty filter matches all).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    pub metadata: Metadata,
    pub state: Option<WorkerState>,
    pub task: Option<String>,
    pub template: Option<String>,
    /// Set by this layer from the caller, never by a request: the one scope it sees (`None`:
    /// an admin, every scope).
    pub scope: Option<String>,
}

impl Filter {
    pub fn matches(&self, w: &Worker) -> bool {
        self.scope.as_ref().is_none_or(|s| &w.scope == s)
            && self.state.is_none_or(|s| w.state == s)
            && self.task.as_ref().is_none_or(|t| &w.task == t)
            && self.template.as_ref().is_none_or(|t| &w.template == t)
            && self
                .metadata
                .iter()
                .all(|(k, v)| w.metadata.get(k) == Some(v))
    }
}

/// `list`'s optional filters: `metadata` (as create takes it), `state`, `task`, `template`.
fn valid_filter(request: &serde_json::Map<String, Value>) -> Result<Filter, ControlError> {
    let state = match request.get("state") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(
            WorkerState::ALL
                .into_iter()
                .find(|w| w.as_str() == s)
                .ok_or_else(|| {
                    ControlError::invalid(
                    "state must be one of starting, running, exited, stopping, suspended, unknown",
                )
                })?,
        ),
        Some(_) => return Err(ControlError::invalid("state must be a string")),
    };
    let task = match request.get("task") {
        None | Some(Value::Null) => None,
        v => Some(valid_task(v)?),
    };
    Ok(Filter {
        metadata: valid_metadata(request.get("metadata"), "list")?,
        state,
        task,
        template: valid_template(request.get("template"))?,
        scope: None,
    })
}

/// Metadata: an object of at most [`MAX_METADATA_KEYS`] keys `[a-z0-9][a-z0-9._-]{0,62}`,
/// each a string of at most [`MAX_METADATA_VALUE`] printable characters. Absent or null: none.
fn valid_metadata(v: Option<&Value>, operation: &str) -> Result<Metadata, ControlError> {
    let map = match v {
        None | Some(Value::Null) => return Ok(Metadata::new()),
        Some(Value::Object(m)) => m,
        Some(_) => {
            return Err(ControlError::invalid(format!(
                "{operation}: metadata must be an object of string values"
            )))
        }
    };
    if map.len() > MAX_METADATA_KEYS {
        return Err(ControlError::invalid(format!(
            "metadata has {} keys: at most {MAX_METADATA_KEYS}",
            map.len()
        )));
    }
    let mut out = Metadata::new();
    for (k, v) in map {
        let shown = truncate(k, 64);
        let key_ok = !k.is_empty()
            && k.len() <= 63
            && k.bytes()
                .next()
                .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
            && k.bytes().all(|b| {
                b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-')
            });
        if !key_ok {
            return Err(ControlError::invalid(format!(
                "metadata key {shown:?} must be 1-63 characters of [a-z0-9._-], starting with a letter or digit"
            )));
        }
        let Value::String(value) = v else {
            return Err(ControlError::invalid(format!(
                "metadata key {shown:?}: the value must be a string"
            )));
        };
        if value.chars().count() > MAX_METADATA_VALUE
            || value.chars().any(|c| c.is_control() || is_bidi_control(c))
        {
            return Err(ControlError::invalid(format!(
                "metadata key {shown:?}: the value must be at most {MAX_METADATA_VALUE} printable characters"
            )));
        }
        out.insert(k.clone(), value.clone());
    }
    Ok(out)
}

/// How many lines `logs` returns when the request names none.
pub const DEFAULT_TAIL: u32 = 200;

/// A number of lines: 1 to [`tail::MAX_TAIL_LINES`]; absent or null: [`DEFAULT_TAIL`].
fn valid_tail(v: Option<&Value>) -> Result<u32, ControlError> {
    let refuse = || {
        ControlError::invalid(format!(
            "tail must be a whole number of lines from 1 to {}",
            tail::MAX_TAIL_LINES
        ))
    };
    match v {
        None | Some(Value::Null) => Ok(DEFAULT_TAIL),
        Some(Value::Number(n)) => n
            .as_u64()
            .filter(|n| (1..=u64::from(tail::MAX_TAIL_LINES)).contains(n))
            .map(|n| n as u32)
            .ok_or_else(refuse),
        Some(_) => Err(refuse()),
    }
}

/// A lifetime: a duration such as `"90m"`, `"2h"` or `"1h30m"`, or a whole number of seconds;
/// at least one second. Absent or null: none asked for.
fn valid_ttl(v: Option<&Value>) -> Result<Option<Duration>, ControlError> {
    let refuse = || {
        ControlError::invalid(
            "ttl must be a duration such as \"90m\" or \"2h\", or a whole number of seconds (at least 1)",
        )
    };
    let ttl = match v {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(s)) => time::parse_duration(s).ok_or_else(refuse)?,
        Some(Value::Number(n)) => Duration::from_secs(n.as_u64().ok_or_else(refuse)?),
        Some(_) => return Err(refuse()),
    };
    if ttl < Duration::from_secs(1) {
        return Err(refuse());
    }
    Ok(Some(ttl))
}

fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}')
}

/// A worker id: 1 to 64 characters of `[A-Za-z0-9_.-]`.
fn valid_worker_id(v: Option<&Value>, operation: &str) -> Result<String, ControlError> {
    let id = match v {
        None | Some(Value::Null) => {
            return Err(ControlError::invalid(format!(
                "{operation} needs a worker_id"
            )))
        }
        Some(Value::String(s)) => s,
        Some(_) => return Err(ControlError::invalid("worker_id must be a string")),
    };
    let ok = !id.is_empty()
        && id.len() <= MAX_WORKER_ID_CHARS
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if ok {
        Ok(id.clone())
    } else {
        Err(ControlError::invalid(format!(
            "worker_id must be 1-{MAX_WORKER_ID_CHARS} characters of [A-Za-z0-9_.-]"
        )))
    }
}

fn truncate(s: &str, max: usize) -> String {
    s.chars().take(max).collect()
}

/// The TTL a create gets: the one asked for (refused above the ceiling), else the default,
/// else the ceiling (with a ceiling, no worker lives forever). `ceiling` names the ceiling in
/// the refusal (`MAX_WORKER_TTL`, a template's `max_ttl`).
pub fn ttl_for(
    lifetime: &Lifetime,
    asked: Option<Duration>,
    ceiling: &str,
) -> Result<Option<Duration>, ControlError> {
    match (asked, lifetime.max_ttl) {
        (Some(ttl), Some(max)) if ttl > max => Err(ControlError::invalid(format!(
            "ttl {} is longer than {ceiling} ({})",
            time::duration_text(ttl),
            time::duration_text(max)
        ))),
        (Some(ttl), _) => Ok(Some(ttl)),
        (None, max) => Ok(lifetime.default_ttl.or(max)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::ErrorCode;
    use serde_json::json;

    const M: &str = "MAX_WORKER_TTL";

    fn parse(v: Value) -> Result<ControlRequest, ControlError> {
        parse_request([&v])
    }

    #[test]
    fn ttl_is_a_duration_or_seconds_and_stays_under_the_ceiling() {
        let ttl = |v: Value| match parse(json!({"operation": "create", "task": "t", "ttl": v})) {
            Ok(ControlRequest::Create { ttl, .. }) => Ok(ttl),
            Ok(other) => panic!("{other:?}"),
            Err(e) => Err(e.message),
        };
        assert_eq!(ttl(json!("90m")), Ok(Some(Duration::from_secs(5400))));
        assert_eq!(ttl(json!("1h30m")), Ok(Some(Duration::from_secs(5400))));
        assert_eq!(ttl(json!(45)), Ok(Some(Duration::from_secs(45))));
        assert_eq!(ttl(Value::Null), Ok(None));
        for bad in [
            json!(0),
            json!(-5),
            json!(1.5),
            json!("0s"),
            json!("500ms"),
            json!("soon"),
            json!(true),
        ] {
            let e = ttl(bad.clone()).unwrap_err();
            assert!(e.contains("ttl must be a duration"), "{bad}: {e}");
        }
        let none = Lifetime::default();
        assert_eq!(ttl_for(&none, None, M).unwrap(), None);
        let capped = Lifetime {
            on_expiry: Default::default(),
            suspended_ttl: None,
            default_ttl: Some(Duration::from_secs(600)),
            max_ttl: Some(Duration::from_secs(7200)),
        };
        assert_eq!(
            ttl_for(&capped, None, M).unwrap(),
            Some(Duration::from_secs(600))
        );
        assert_eq!(
            ttl_for(&capped, Some(Duration::from_secs(7200)), M).unwrap(),
            Some(Duration::from_secs(7200))
        );
        let e = ttl_for(&capped, Some(Duration::from_secs(7201)), M).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidRequest);
        assert_eq!(e.message, "ttl 2h1s is longer than MAX_WORKER_TTL (2h)");
        let ceiling_only = Lifetime {
            on_expiry: Default::default(),
            suspended_ttl: None,
            default_ttl: None,
            max_ttl: Some(Duration::from_secs(60)),
        };
        assert_eq!(
            ttl_for(&ceiling_only, None, M).unwrap(),
            Some(Duration::from_secs(60)),
            "with a ceiling no worker lives forever"
        );
    }

    #[test]
    fn each_operation_is_read_with_its_fields_and_unknown_keys_ignored() {
        assert_eq!(
            parse(json!({"operation": "list", "x": 1})),
            Ok(ControlRequest::List {
                filter: Filter::default()
            })
        );
        assert_eq!(
            parse(json!({"operation": "create", "task": "fix the build"})),
            Ok(ControlRequest::Create {
                task: "fix the build".into(),
                ttl: None,
                metadata: Metadata::new(),
                template: None,
                from_task: None,
            })
        );
        assert_eq!(
            parse(
                json!({"operation": "create", "task": "t", "template": "coder", "from_task": "base"})
            ),
            Ok(ControlRequest::Create {
                task: "t".into(),
                ttl: None,
                metadata: Metadata::new(),
                template: Some("coder".into()),
                from_task: Some("base".into()),
            })
        );
        assert_eq!(
            parse(json!({"operation": "copy_workspace", "from_task": "a", "task": "b"})),
            Ok(ControlRequest::CopyWorkspace {
                from_task: "a".into(),
                task: "b".into(),
            })
        );
        for (asked, says) in [
            (
                json!({"operation": "copy_workspace", "task": "b"}),
                "copy_workspace needs a from_task",
            ),
            (
                json!({"operation": "copy_workspace", "from_task": "a"}),
                "copy_workspace needs a task",
            ),
            (
                json!({"operation": "copy_workspace", "from_task": 7, "task": "b"}),
                "from_task must be a string",
            ),
            (
                json!({"operation": "create", "task": "b", "from_task": ""}),
                "from_task must not be empty",
            ),
        ] {
            assert_eq!(parse(asked).unwrap_err().message, says);
        }
        assert_eq!(
            parse(json!({"operation": "stop", "worker_id": "abc123"})),
            Ok(ControlRequest::Stop {
                worker_id: "abc123".into(),
                delete_workspace: false,
            })
        );
        assert!(parse_request([&json!({"no": 1}), &json!({"operation": "list"})]).is_ok());
    }

    #[test]
    fn a_malformed_request_is_refused_naming_the_field() {
        for bad in [
            json!({"operation": 1}),
            json!({"operation": "destroy"}),
            json!({"operation": "create"}),
            json!({"operation": "create", "task": ""}),
            json!({"operation": "create", "task": "   "}),
            json!({"operation": "create", "task": 5}),
            json!({"operation": "create", "task": "a\nb"}),
            json!({"operation": "create", "task": "a\u{202e}b"}),
            json!({"operation": "create", "task": "x".repeat(257)}),
            json!({"operation": "create", "task": "t", "template": 1}),
            json!({"operation": "create", "task": "t", "template": "Coder"}),
            json!({"operation": "list", "template": "a b"}),
            json!({"operation": "stop"}),
            json!({"operation": "stop", "worker_id": "../etc"}),
            json!({"operation": "stop", "worker_id": "a=b,c"}),
            json!({"operation": "stop", "worker_id": "x".repeat(65)}),
            json!({"task": "x"}),
        ] {
            let e = parse(bad.clone()).unwrap_err();
            assert_eq!(e.code, ErrorCode::InvalidRequest, "{bad}");
        }
        assert!(parse(json!({"operation": "create", "task": "ünïcödé ✓ task=1,2"})).is_ok());
    }
}
