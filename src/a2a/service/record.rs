//! Where a task's life goes as it happens (the task store, its streams and its webhooks), and
//! the tasks an operation's outcome and its steps make.

use std::sync::Arc;

use serde_json::json;
use serde_json::value::RawValue;

use super::super::stream::{ArtifactUpdateEvent, StatusUpdateEvent, StreamResponse};
use super::super::tasks::TaskStore;
use super::super::types::{Artifact, DataPart, Message, Part, Role, Task, TaskState, TaskStatus};
use crate::control::Outcome;
use crate::push::Pusher;
use crate::time::{now_millis, rfc3339_millis};
use crate::token::{uuid_v4, Token};

/// Completes a task from an operation's outcome; returns the token to deliver, if any, and
/// the status time (milliseconds) the store orders by.
pub(super) fn finish(mut task: Task, outcome: Outcome) -> (Task, Option<Token>, u64) {
    let now = now_millis();
    task.status.timestamp = rfc3339_millis(now);
    let outcome_kind = outcome.label();
    match outcome {
        Outcome::Completed { data, token } => {
            task.status.state = TaskState::Completed;
            task.artifacts = vec![Artifact {
                artifact_id: uuid_v4().unwrap_or_else(|_| format!("{}-result", task.id)),
                name: "result".into(),
                parts: [DataPart { data }],
            }];
            (task, token, now)
        }
        Outcome::Rejected(e) | Outcome::Failed(e) => {
            let (state, verb) = if matches!(outcome_kind, "rejected") {
                (TaskState::Rejected, "rejected")
            } else {
                (TaskState::Failed, "failed")
            };
            task.status.state = state;
            let msg = agent_message(
                &task,
                vec![
                    Part::text(format!("{verb}: {}", e.message)),
                    Part::data(json!({ "error": e })),
                ],
            );
            task.history.push(msg.clone());
            task.status.message = Some(msg);
            (task, None, now)
        }
    }
}

/// `None` = all history; `Some(0)` = none; `Some(n)` = the last n messages.
pub(super) fn with_history(mut task: Task, history_length: Option<usize>) -> Task {
    if let Some(n) = history_length {
        let len = task.history.len();
        task.history.drain(..len.saturating_sub(n));
    }
    task
}

/// A message from this agent about `task`.
/// How long a task waits for its streams to read before it sends on anyway.
const ROOM_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// A new message id for a message about `task`.
pub(super) fn message_id(task: &Task) -> String {
    uuid_v4().unwrap_or_else(|_| format!("{}-{}", task.id, now_millis()))
}

pub(super) fn agent_message(task: &Task, parts: Vec<Part>) -> Message {
    Message {
        message_id: message_id(task),
        role: Role::Agent,
        parts,
        context_id: Some(task.context_id.clone()),
        task_id: Some(task.id.clone()),
        metadata: None,
    }
}

/// A task's WORKING status whose agent message says what just happened.
pub(super) fn working_status(task: &Task, step: &str) -> TaskStatus {
    TaskStatus {
        state: TaskState::Working,
        timestamp: rfc3339_millis(now_millis()),
        message: Some(agent_message(task, vec![Part::text(step)])),
    }
}

/// Where a task's changes go: the task store (and so its streams), and the task's webhooks,
/// each change as the `StreamResponse` a stream carries. A push never carries a worker's
/// token: the store adds it to what a stream's first reader gets, never to these.
#[derive(Clone)]
pub(super) struct Recorder {
    tasks: Arc<TaskStore>,
    push: Arc<Pusher>,
}

impl Recorder {
    pub(super) fn new(tasks: Arc<TaskStore>, push: Arc<Pusher>) -> Recorder {
        Recorder { tasks, push }
    }

    fn push(&self, task_id: &str, event: &StreamResponse<'_>, last: bool) {
        if !self.push.watches(task_id) {
            return;
        }
        match serde_json::to_string(event) {
            Ok(body) => self.push.notify(task_id, &body, last),
            Err(e) => log::error!("a push notification could not be written: {e}"),
        }
    }

    /// A task of caller `owner` stored as it starts.
    pub(super) fn started(&self, task: &Task, owner: &str, status_millis: u64) {
        self.tasks.insert(task, owner, None, status_millis);
        self.push(&task.id, &StreamResponse::Task(task), false);
    }

    /// Waits while a stream of task `id` is behind (a snapshot of a thousand workers
    /// arrives at once; the stream writes it at the client's pace, a few dozen held at a
    /// time), until the task is ended (`ended` set) or [`ROOM_WAIT`] passes: a stream that
    /// reads nothing is then let go by the backlog's own rule, and a watch that cannot pass
    /// its events on is cut off by its source's.
    pub(super) fn room_for(&self, id: &str, ended: &std::sync::Mutex<Option<String>>) {
        self.tasks
            .wait_for_room(id, std::time::Instant::now() + ROOM_WAIT, ended);
    }

    /// A step of a running task.
    pub(super) fn progress(&self, task: &Task, status: TaskStatus) {
        let event = StreamResponse::StatusUpdate(StatusUpdateEvent {
            task_id: &task.id,
            context_id: &task.context_id,
            status: &status,
        });
        self.push(&task.id, &event, false);
        // Moved, not copied: a watch's snapshot passes a thousand of these at once.
        self.tasks.progress(&task.id, status);
    }

    /// A step of a running task told to its streams and webhooks, not kept as its status
    /// ([`TaskStore::pass`]). `written` is the JSON text of the update's `StreamResponse`: the
    /// streams frame these bytes as they are, a webhook posts them.
    pub(super) fn passing(&self, task: &Task, written: Box<RawValue>) {
        if self.push.watches(&task.id) {
            self.push.notify(&task.id, written.get(), false);
        }
        self.tasks.pass(&task.id, written);
    }

    /// A running task's end: its artifacts, then its final status. False if the task was
    /// evicted meanwhile.
    pub(super) fn finished(&self, task: &Task, token: Option<Token>, status_millis: u64) -> bool {
        let kept = self.tasks.update(task, token, status_millis);
        for artifact in &task.artifacts {
            let event = StreamResponse::ArtifactUpdate(ArtifactUpdateEvent {
                task_id: &task.id,
                context_id: &task.context_id,
                artifact,
                last_chunk: true,
            });
            self.push(&task.id, &event, false);
        }
        let event = StreamResponse::StatusUpdate(StatusUpdateEvent {
            task_id: &task.id,
            context_id: &task.context_id,
            status: &task.status,
        });
        self.push(&task.id, &event, true);
        kept
    }

    /// A task that ran before it was stored (a blocking SendMessage): the finished task.
    pub(super) fn done_at_once(&self, task: &Task, owner: &str, status_millis: u64) {
        self.tasks.insert(task, owner, None, status_millis);
        self.push(&task.id, &StreamResponse::Task(task), true);
    }
}
