//! The recent tasks read back: `GetTask`, `ListTasks` (paged, filtered) and `CancelTask`
//! (which only a watch obeys).

use std::thread;

use serde::Serialize;
use serde_json::{Map, Value};

use super::super::decode::{field, history_length, optional_string, required_string, whole_number};
use super::super::tasks::Filter;
use super::super::types::{RpcError, Task, TaskState};
use super::record::with_history;
use super::watching::WATCH_POLL;
use super::Service;
use crate::control::Caller;
use crate::time::parse_rfc3339_millis;

const DEFAULT_PAGE_SIZE: usize = 50;
const MAX_PAGE_SIZE: usize = 100;

impl Service {
    /// `GetTask` (§3.1.3).
    pub fn get_task(&self, caller: &Caller, params: &Map<String, Value>) -> Result<Task, RpcError> {
        let id = required_string(params, &["id", "taskId", "task_id"], "id")?;
        let history_length = history_length(params)?;
        let task = self
            .tasks
            .get(&id, &caller.key, true)
            .ok_or_else(|| RpcError::task_not_found(&id))?;
        Ok(with_history(task, history_length))
    }

    /// `CancelTask` (§3.1.5): a watch ends (`TASK_STATE_CANCELED`); any other control
    /// operation cannot be interrupted, so this refuses, saying why.
    pub fn cancel_task(
        &self,
        caller: &Caller,
        params: &Map<String, Value>,
    ) -> Result<Task, RpcError> {
        let id = required_string(params, &["id", "taskId", "task_id"], "id")?;
        // Another caller's task is not there for this one, whatever it is.
        let state = self.known_task(caller, &id)?;
        let watch = self
            .watches
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&id)
            .cloned();
        if let Some(why) = watch {
            why.lock()
                .unwrap_or_else(|p| p.into_inner())
                .get_or_insert_with(|| "canceled (CancelTask)".into());
            // Its thread ends it within a moment.
            let deadline = std::time::Instant::now() + WATCH_POLL * 8;
            while self
                .tasks
                .peek(&id, &caller.key)
                .is_some_and(|(_, s)| !s.is_terminal())
                && std::time::Instant::now() < deadline
            {
                thread::sleep(std::time::Duration::from_millis(10));
            }
            return self
                .tasks
                .get(&id, &caller.key, true)
                .ok_or_else(|| RpcError::task_not_found(&id));
        }
        if state.is_terminal() {
            Err(RpcError::task_not_cancelable(
                &id,
                &format!("it is already {}", state.name()),
            ))
        } else {
            Err(RpcError::task_not_cancelable(
                &id,
                "a control operation cannot be interrupted once started",
            ))
        }
    }

    /// `ListTasks` (§3.1.4), newest status first, paged.
    pub fn list_tasks(
        &self,
        caller: &Caller,
        params: &Map<String, Value>,
    ) -> Result<TasksPage, RpcError> {
        let page_size = page_size(params)?;
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
            owner: caller.key.clone(),
            context_id: optional_string(params, &["contextId", "context_id"], "contextId")?,
            state,
            status_after_millis,
            before_seq,
        };
        let page = self.tasks.list(&filter, page_size, include_artifacts);
        // Asked by another replica merging its page with this one's: where each task ends.
        let page_tokens = matches!(
            field(params, &["replicaPageTokens"]),
            Some(Value::Bool(true))
        )
        .then(|| page.seqs.iter().map(u64::to_string).collect());
        let tasks = page
            .tasks
            .into_iter()
            .map(|t| ListedTask::Here(Box::new(with_history(t, history_length))))
            .collect();
        Ok(TasksPage {
            tasks,
            next_page_token: page.next_seq.map(|s| s.to_string()).unwrap_or_default(),
            page_size,
            total_size: page.total,
            page_tokens,
        })
    }
}

/// `ListTasks`' `pageSize`.
pub(super) fn page_size(params: &Map<String, Value>) -> Result<usize, RpcError> {
    match field(params, &["pageSize", "page_size"]) {
        None | Some(Value::Null) => Ok(DEFAULT_PAGE_SIZE),
        Some(v) => match whole_number(v) {
            Some(n) if (1..=MAX_PAGE_SIZE as u64).contains(&n) => Ok(n as usize),
            _ => Err(RpcError::invalid_params(format!(
                "pageSize must be a whole number from 1 to {MAX_PAGE_SIZE}"
            ))),
        },
    }
}

/// `ListTasks`' answer.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TasksPage {
    pub tasks: Vec<ListedTask>,
    pub next_page_token: String,
    pub page_size: usize,
    pub total_size: usize,
    /// For a replica merging pages: the page token after each task (asked for only then).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub page_tokens: Option<Vec<String>>,
}

/// A listed task: one of this replica's, or another replica's as it answered it.
#[derive(Serialize)]
#[serde(untagged)]
pub enum ListedTask {
    Here(Box<Task>),
    There(Box<Value>),
}

impl TasksPage {
    /// Length of its tasks' reply data (JSON text; a hint, so another replica's count 0).
    pub fn data_bytes(&self) -> usize {
        self.tasks
            .iter()
            .map(|t| match t {
                ListedTask::Here(t) => t.data_bytes(),
                ListedTask::There(_) => 0,
            })
            .sum()
    }
}
