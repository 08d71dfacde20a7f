//! Watches as tasks: a `watch` control request runs as a task that stays WORKING, each worker
//! event one status update, until it is canceled, its stream ends or its source cuts it off.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::mpsc::RecvTimeoutError;
use std::sync::{Arc, Mutex};
use std::thread;

use serde::Serialize;
use serde_json::json;
use serde_json::value::RawValue;

use super::super::tasks;
use super::super::types::{Part, Role, Task, TaskState, TaskStatus};
use super::record::{agent_message, finish, message_id, Recorder};
use super::{EndWhy, Service, Watch};
use crate::control::watch::Event;
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
        let run = move || run_watch(&record, &watches, base, sub, &why);
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

/// A watch's task, while it runs: its snapshot sent, then each event, until it is canceled,
/// cut off or its source stops; then its end recorded and it leaves the running watches.
fn run_watch(
    record: &Recorder,
    watches: &Mutex<HashMap<String, EndWhy>>,
    base: Task,
    mut sub: control::watch::Subscription,
    why: &EndWhy,
) {
    send_snapshot(record, &base, &mut sub, why);
    let (state, text) = follow(record, &base, &sub, why);
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
}

/// The snapshot, paced to the task's streams: sent, then let go (a thousand workers'
/// snapshot is not kept for the watch's life, nor each of its events as the task's status;
/// its `synced` is).
fn send_snapshot(
    record: &Recorder,
    base: &Task,
    sub: &mut control::watch::Subscription,
    why: &EndWhy,
) {
    let snapshot = std::mem::take(&mut sub.snapshot);
    let last = snapshot.len().saturating_sub(1);
    for (i, event) in snapshot.into_iter().enumerate() {
        record.room_for(&base.id, why);
        match i == last {
            true => record.progress(base, event_status(base, &event)),
            false => {
                if let Some(written) = written_update(base, &event) {
                    record.passing(base, written);
                }
            }
        }
    }
}

/// Each event as it comes, until the watch is told to end (canceled, its client gone), is cut
/// off, or its source stops: how it ended, and why.
fn follow(
    record: &Recorder,
    base: &Task,
    sub: &control::watch::Subscription,
    why: &EndWhy,
) -> (TaskState, String) {
    loop {
        if let Some(why) = why.lock().unwrap_or_else(|p| p.into_inner()).clone() {
            return (TaskState::Canceled, format!("watch ended: {why}"));
        }
        match sub.recv_timeout(WATCH_POLL) {
            Ok(event) => {
                record.room_for(&base.id, why);
                record.progress(base, event_status(base, &event));
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) if sub.cut_off.load(Ordering::SeqCst) => {
                return (
                    TaskState::Failed,
                    format!(
                        "watch cut off: it left {} events unread",
                        crate::control::watch::BACKLOG
                    ),
                );
            }
            Err(RecvTimeoutError::Disconnected) => {
                return (TaskState::Failed, "watch ended: its source stopped".into());
            }
        }
    }
}

/// The line for people that a watch event's status carries.
struct EventLine<'a>(&'a Event);

impl std::fmt::Display for EventLine<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let event = self.0;
        match &event.worker {
            Some(w) => {
                write!(
                    f,
                    "{} worker {} (task {:?}): {}",
                    event.kind,
                    w.worker_id,
                    w.task,
                    w.state.as_str()
                )?;
                if !event.reason.is_empty() {
                    write!(f, ": {}", event.reason)?;
                }
                Ok(())
            }
            None => write!(f, "{}: what follows happens as it happens", event.kind),
        }
    }
}

/// Written by `collect_str`: straight into the JSON, escaped, with no string of its own.
impl serde::Serialize for EventLine<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// A snapshot event's status update as the JSON text of its `StreamResponse`, written straight
/// from the event: the same text as [`event_status`] in a
/// `StreamResponse::StatusUpdate` (a test holds the two alike), without building the status,
/// its message and parts first and freeing them after (for 64 watchers of a thousand workers
/// that was most of the allocator's traffic, and every thread contends for its two arenas).
fn written_update(task: &Task, event: &Event) -> Option<Box<RawValue>> {
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Update<'a> {
        status_update: StatusUpdate<'a>,
    }
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct StatusUpdate<'a> {
        task_id: &'a str,
        context_id: &'a str,
        status: Status<'a>,
    }
    #[derive(Serialize)]
    struct Status<'a> {
        state: TaskState,
        timestamp: &'a str,
        message: Message<'a>,
    }
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    struct Message<'a> {
        message_id: &'a str,
        role: Role,
        parts: (Text<'a>, Data<'a>),
        context_id: &'a str,
        task_id: &'a str,
    }
    #[derive(Serialize)]
    struct Text<'a> {
        text: EventLine<'a>,
    }
    #[derive(Serialize)]
    struct Data<'a> {
        data: EventData<'a>,
    }
    let message_id = message_id(task);
    let update = Update {
        status_update: StatusUpdate {
            task_id: &task.id,
            context_id: &task.context_id,
            status: Status {
                state: TaskState::Working,
                timestamp: &event.at,
                message: Message {
                    message_id: &message_id,
                    role: Role::Agent,
                    parts: (
                        Text {
                            text: EventLine(event),
                        },
                        Data {
                            data: EventData { event },
                        },
                    ),
                    context_id: &task.context_id,
                    task_id: &task.id,
                },
            },
        },
    };
    // to_raw_value, not RawValue::from_string: the text is not parsed again to check it.
    serde_json::value::to_raw_value(&update)
        .map_err(|e| log::error!("a watch event could not be written: {e}"))
        .ok()
}

/// A watch event's data part: `{"event": ...}`.
#[derive(Serialize)]
struct EventData<'a> {
    event: &'a Event,
}

/// A watch event as its task's WORKING status: a line for people, the event for programs.
fn event_status(task: &Task, event: &Event) -> TaskStatus {
    TaskStatus {
        state: TaskState::Working,
        timestamp: event.at.clone(),
        message: Some(agent_message(
            task,
            vec![
                Part::text(EventLine(event).to_string()),
                Part::data(json!({ "event": event })),
            ],
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::a2a::stream::{StatusUpdateEvent, StreamResponse};
    use crate::backend::{BackendKind, Worker, WorkerState};
    use crate::control::watch::Seen;

    fn task() -> Task {
        Task {
            id: "t-1".into(),
            context_id: "c-1".into(),
            status: TaskStatus {
                state: TaskState::Working,
                timestamp: String::new(),
                message: None,
            },
            artifacts: Vec::new(),
            history: Vec::new(),
            metadata: None,
        }
    }

    fn event(kind: &'static str, worker: Option<Worker>, reason: &str) -> Event {
        Event {
            kind,
            worker: worker.map(Seen::new),
            reason: reason.into(),
            at: "2026-12-05T10:00:00.123Z".into(),
        }
    }

    /// The JSON of `text`, its message id taken out (each message has a new one).
    fn without_message_id(text: &str) -> serde_json::Value {
        let mut v: serde_json::Value = serde_json::from_str(text).expect("JSON");
        let message = &mut v["statusUpdate"]["status"]["message"];
        let id = message["messageId"].as_str().map(str::to_string);
        assert!(id.is_some_and(|id| id.len() == 36), "{message}");
        message.as_object_mut().map(|m| m.remove("messageId"));
        v
    }

    #[test]
    fn a_written_update_is_the_status_update_of_its_event() {
        let task = task();
        let mut w = Worker::new(
            BackendKind::Docker,
            "w-1",
            "a \"quoted\" task\nwith é",
            WorkerState::Exited,
            "2026-12-05T09:00:00Z",
        );
        w.reason = "exited with code 3".into();
        for e in [
            event("added", Some(w.clone()), ""),
            event("changed", Some(w), "exited with code 3"),
            event("synced", None, ""),
        ] {
            let status = event_status(&task, &e);
            let built = serde_json::to_string(&StreamResponse::StatusUpdate(StatusUpdateEvent {
                task_id: &task.id,
                context_id: &task.context_id,
                status: &status,
            }))
            .unwrap();
            let written = written_update(&task, &e).expect("written");
            assert_eq!(
                without_message_id(written.get()),
                without_message_id(&built)
            );
        }
    }
}
