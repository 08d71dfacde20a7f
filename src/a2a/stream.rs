//! A task's events as both bindings stream them: the `StreamResponse`s of specification §3.2.3
//! (the task, then each status or artifact update until the task ends), each written by a
//! binding's [`Frame`] — JSON-RPC wraps it in a response object, HTTP+JSON sends it bare.

use std::sync::mpsc::RecvTimeoutError;
use std::sync::Mutex;
use std::time::Duration;

use serde::Serialize;
use serde_json::value::RawValue;

use super::tasks::{Update, Updates};
use super::types::{Artifact, Task, TaskStatus};
use crate::http::{Sink, Streamer};

/// How long a stream may stay silent before a comment line shows it (and the client) alive.
const HEARTBEAT: Duration = Duration::from_secs(15);
/// How often a silent stream looks whether the server is shutting down.
const TICK: Duration = Duration::from_millis(250);
/// At most about this many bytes of events already queued are written together.
const BATCH_BYTES: usize = 64 << 10;

/// One `StreamResponse`: exactly one of its members.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub enum StreamResponse<'a> {
    Task(&'a Task),
    StatusUpdate(StatusUpdateEvent<'a>),
    ArtifactUpdate(ArtifactUpdateEvent<'a>),
    /// One of the above already written out as JSON ([`Update::Written`]), written as it is.
    #[serde(untagged)]
    Written(&'a RawValue),
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusUpdateEvent<'a> {
    pub task_id: &'a str,
    pub context_id: &'a str,
    pub status: &'a TaskStatus,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ArtifactUpdateEvent<'a> {
    pub task_id: &'a str,
    pub context_id: &'a str,
    pub artifact: &'a Artifact,
    pub last_chunk: bool,
}

impl StreamResponse<'_> {
    /// Length of the reply data it carries (JSON text).
    pub fn data_bytes(&self) -> usize {
        match self {
            StreamResponse::Task(task) => task.data_bytes(),
            StreamResponse::StatusUpdate(_) => 0,
            StreamResponse::ArtifactUpdate(a) => a.artifact.data().get().len(),
            StreamResponse::Written(text) => text.get().len(),
        }
    }

    /// The change an update makes to `task` (its id and context), as a `StreamResponse`.
    pub fn of<'a>(task: &'a Task, update: &'a Update) -> StreamResponse<'a> {
        match update {
            Update::Status(status) => StreamResponse::StatusUpdate(StatusUpdateEvent {
                task_id: &task.id,
                context_id: &task.context_id,
                status,
            }),
            Update::Artifact(artifact) => StreamResponse::ArtifactUpdate(ArtifactUpdateEvent {
                task_id: &task.id,
                context_id: &task.context_id,
                artifact,
                last_chunk: true,
            }),
            Update::Written(text) => StreamResponse::Written(text),
        }
    }
}

/// How a binding writes one `StreamResponse` as the JSON text of an SSE event's `data`,
/// appended to `out` (the events about to be written together).
pub trait Frame: Send + Sync {
    fn frame_into(&self, event: &StreamResponse<'_>, out: &mut Vec<u8>) -> Result<(), String>;
}

/// A running task and the channel its changes arrive on (what `SendStreamingMessage` and
/// `SubscribeToTask` give a binding to stream).
pub struct TaskStream {
    pub first: Task,
    pub updates: Updates,
    /// Called once the stream is over (its client gone, or the task ended): a watch that
    /// this stream started ends with it.
    pub on_end: Option<OnEnd>,
}

pub type OnEnd = Box<dyn FnOnce() + Send + Sync>;

/// One SSE event: `data: <json>` and a blank line.
pub fn sse(json: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(json.len() + 8);
    out.extend_from_slice(b"data: ");
    out.extend_from_slice(json.as_bytes());
    out.extend_from_slice(b"\n\n");
    out
}

/// A stream of one event already written (an error before any task existed).
pub struct OneEvent(pub String);

impl Streamer for OneEvent {
    fn run(&self, sink: &mut dyn Sink) {
        sink.send(&sse(&self.0));
    }
}

/// A task's stream through one binding's framing, until the task ends or the client goes.
pub struct TaskEvents<F: Frame> {
    frame: F,
    first: Task,
    updates: Mutex<Updates>,
    on_end: Mutex<Option<OnEnd>>,
}

impl<F: Frame> Drop for TaskEvents<F> {
    fn drop(&mut self) {
        let on_end = self.on_end.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(f) = on_end {
            f();
        }
    }
}

impl<F: Frame> TaskEvents<F> {
    pub fn new(frame: F, stream: TaskStream) -> TaskEvents<F> {
        TaskEvents {
            frame,
            first: stream.first,
            updates: Mutex::new(stream.updates),
            on_end: Mutex::new(stream.on_end),
        }
    }

    /// `first` and the changes queued behind it (up to [`BATCH_BYTES`]) as SSE events, to be
    /// written at once: a watch's snapshot of a thousand workers is a few dozen writes, not a
    /// thousand. False beside them when the stream ends with them (the task's last status, or
    /// an event that could not be written).
    fn batch(&self, first: Update, updates: &Updates) -> (Vec<u8>, bool) {
        let mut out = Vec::new();
        let mut next = Some(first);
        while let Some(update) = next.take() {
            if !self.event_into(&StreamResponse::of(&self.first, &update), &mut out) {
                return (out, false);
            }
            if matches!(&update, Update::Status(s) if s.state.is_terminal()) {
                return (out, false);
            }
            if out.len() < BATCH_BYTES {
                next = updates.try_recv();
                if next.is_some() {
                    // Room for the whole batch at once (a no-op once it is there), not grown
                    // by doubling.
                    out.reserve(BATCH_BYTES + BATCH_BYTES / 8 - out.len());
                }
            }
        }
        (out, true)
    }

    /// One SSE event appended to `out`; false (and `out` as it was) if it could not be
    /// written.
    fn event_into(&self, event: &StreamResponse<'_>, out: &mut Vec<u8>) -> bool {
        let before = out.len();
        out.extend_from_slice(b"data: ");
        match self.frame.frame_into(event, out) {
            Ok(()) => {
                out.extend_from_slice(b"\n\n");
                true
            }
            Err(e) => {
                log::error!("a stream event could not be written: {e}");
                out.truncate(before);
                false
            }
        }
    }

    /// One event; `false` once the client is gone.
    fn send(&self, sink: &mut dyn Sink, event: &StreamResponse<'_>) -> bool {
        let mut out = Vec::with_capacity(1024 + event.data_bytes());
        self.event_into(event, &mut out) && sink.send(&out)
    }
}

impl<F: Frame> Streamer for TaskEvents<F> {
    fn run(&self, sink: &mut dyn Sink) {
        if !self.send(sink, &StreamResponse::Task(&self.first)) {
            return;
        }
        if self.first.status.state.is_terminal() {
            return;
        }
        let updates = self.updates.lock().unwrap_or_else(|p| p.into_inner());
        let mut silent = Duration::ZERO;
        loop {
            if sink.closing() {
                // The server is stopping: the client reconnects to whoever serves next.
                return;
            }
            let delivered = match updates.recv_timeout(TICK) {
                Ok(update) => {
                    silent = Duration::ZERO;
                    let (batch, more) = self.batch(update, &updates);
                    let sent = sink.send(&batch);
                    if !more {
                        return;
                    }
                    sent
                }
                Err(RecvTimeoutError::Timeout) => {
                    if sink.gone() {
                        return;
                    }
                    silent += TICK;
                    if silent < HEARTBEAT {
                        continue;
                    }
                    silent = Duration::ZERO;
                    sink.send(b": still working\n\n")
                }
                // The task was evicted (or the store is gone): nothing more will come.
                Err(RecvTimeoutError::Disconnected) => return,
            };
            if !delivered {
                return;
            }
        }
    }
}
