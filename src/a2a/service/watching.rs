//! Watches as tasks: a `watch` control request runs as a task that stays WORKING, each worker
//! event one status update, until it is canceled, its stream ends or its source cuts it off.

use std::sync::atomic::Ordering;
use std::sync::mpsc::RecvTimeoutError;
use std::sync::{Arc, Mutex};
use std::thread;

use serde_json::json;
use serde_json::value::RawValue;

use super::super::tasks;
use super::super::types::{Part, Task, TaskState, TaskStatus};
use super::record::{agent_message, finish};
use super::{Service, Watch};
use crate::control::{self, Caller, ControlError, ErrorCode, Outcome};
use crate::time::{now_millis, rfc3339_millis};

/// How often a watch looks whether it should end.
pub(super) const WATCH_POLL: std::time::Duration = std::time::Duration::from_millis(100);

impl Service {
    /// Starts a watch as a running task: stored WORKING, each event a WORKING status with the
    /// event in a data part, until it is canceled, its stream (when `stream`) ends, or the
    /// source cuts it off. With `stream`, the task's subscription is taken before the first
    /// event. A watch that cannot start is a finished, failed task.
    pub(super) fn start_watch(
        &self,
        caller: &Caller,
        base: Task,
        filter: control::Filter,
        stream: bool,
    ) -> Watch {
        let task_id = base.id.clone();
        let sub = match self.control.watch(caller, filter) {
            Ok(sub) => sub,
            Err(e) => {
                let (task, _, millis) = finish(base, Outcome::Failed(e));
                self.record.done_at_once(&task, &caller.key, millis);
                return Watch {
                    first: task,
                    updates: tasks::Updates::ended(),
                    end: None,
                };
            }
        };
        let working = self.store_working(caller, &base);
        let updates = stream
            .then(|| self.tasks.subscribe(&task_id, &caller.key))
            .flatten()
            .map_or_else(tasks::Updates::ended, |(_, updates)| updates);
        let why = Arc::new(Mutex::new(None::<String>));
        self.watches
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(task_id.clone(), Arc::clone(&why));
        let (record, watches, end) = (
            self.record.clone(),
            Arc::clone(&self.watches),
            Arc::clone(&why),
        );
        let run = move || {
            // Sent, then let go: a thousand workers' snapshot is not kept for the watch's life,
            // nor each of its events as the task's status (its `synced` is).
            let mut sub = sub;
            let snapshot = std::mem::take(&mut sub.snapshot);
            let last = snapshot.len().saturating_sub(1);
            for (i, event) in snapshot.into_iter().enumerate() {
                record.room_for(&base.id, &why);
                let status = event_status(&base, &event);
                match i == last {
                    true => record.progress(&base, status),
                    false => record.passing(&base, status),
                }
            }
            let (state, text) = loop {
                if let Some(why) = why.lock().unwrap_or_else(|p| p.into_inner()).clone() {
                    break (TaskState::Canceled, format!("watch ended: {why}"));
                }
                match sub.recv_timeout(WATCH_POLL) {
                    Ok(event) => {
                        record.room_for(&base.id, &why);
                        record.progress(&base, event_status(&base, &event));
                    }
                    Err(RecvTimeoutError::Timeout) => {}
                    Err(RecvTimeoutError::Disconnected) => {
                        break if sub.cut_off.load(Ordering::SeqCst) {
                            (
                                TaskState::Failed,
                                format!(
                                    "watch cut off: it left {} events unread",
                                    crate::control::watch::BACKLOG
                                ),
                            )
                        } else {
                            (TaskState::Failed, "watch ended: its source stopped".into())
                        };
                    }
                }
            };
            drop(sub);
            let mut task = base;
            let now = now_millis();
            let message = agent_message(&task, vec![Part::text(text)]);
            task.status = TaskStatus {
                state,
                timestamp: rfc3339_millis(now),
                message: Some(message.clone()),
            };
            task.history.push(message);
            record.finished(&task, None, now);
            watches
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&task.id);
        };
        if let Err(e) = thread::Builder::new().name("watch-task".into()).spawn(run) {
            log::error!("cannot start a watch: {e}");
            let failure = ControlError::new(ErrorCode::Internal, "the watch could not be started");
            let (task, _, millis) = finish(working.clone(), Outcome::Failed(failure));
            self.record.finished(&task, None, millis);
        }
        Watch {
            first: working,
            updates,
            end: Some(end),
        }
    }
}

/// A watch event as its task's WORKING status: a line for people, the event for programs.
fn event_status(task: &Task, event: &crate::control::watch::Event) -> TaskStatus {
    let text = match &event.worker {
        Some(w) if event.reason.is_empty() => {
            format!(
                "{} worker {} (task {:?}): {}",
                event.kind,
                w.worker_id,
                w.task,
                w.state.as_str()
            )
        }
        Some(w) => format!(
            "{} worker {} (task {:?}): {}: {}",
            event.kind,
            w.worker_id,
            w.task,
            w.state.as_str(),
            event.reason
        ),
        None => format!("{}: what follows happens as it happens", event.kind),
    };
    // Written out once, as text: each stream of the watch sends these bytes as they are.
    #[derive(serde::Serialize)]
    struct Data<'a> {
        event: &'a crate::control::watch::Event,
    }
    let mut out = Vec::with_capacity(256 + event.worker.as_ref().map_or(0, |w| w.json_len()));
    let written = serde_json::to_writer(&mut out, &Data { event })
        .map_err(|e| e.to_string())
        .and_then(|()| String::from_utf8(out).map_err(|e| e.to_string()))
        .and_then(|text| RawValue::from_string(text).map_err(|e| e.to_string()));
    let data = match written {
        Ok(raw) => Part::data_text(raw),
        Err(e) => {
            log::error!("a watch event could not be written: {e}");
            Part::data(json!({ "event": null }))
        }
    };
    TaskStatus {
        state: TaskState::Working,
        timestamp: event.at.clone(),
        message: Some(agent_message(task, vec![Part::text(text), data])),
    }
}
