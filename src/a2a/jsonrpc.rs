//! The A2A v1.0 JSON-RPC methods: version check, dispatch, and control tasks over
//! [`Control`] (`SendMessage` runs an operation; `GetTask`, `ListTasks`, `CancelTask` read the
//! recent tasks). It sees request headers only after the routes have authenticated the caller
//! and removed credentials; decoding what the caller sent is [`super::decode`]'s.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};

use super::decode::{
    envelope, field, history_length, optional_string, parse_message, required_string, string_list,
    whole_number, ServiceParams,
};
use super::tasks::{self, Filter, TaskStore, Update};
use super::types::{
    response_err, Artifact, DataPart, Message, Part, Role, RpcError, Task, TaskState, TaskStatus,
    PROTOCOL_VERSION,
};
use crate::backend::Progress;
use crate::control::{self, Control, ControlError, ControlRequest, ErrorCode, Outcome};
use crate::http::{Sink, Streamer};
use crate::time::{now_millis, parse_rfc3339_millis, rfc3339_millis};
use crate::token::{uuid_v4, Token};

/// Most `returnImmediately` operations running in the background at once; beyond it a request
/// is served as if it had not asked (the reply then simply arrives finished).
const MAX_BACKGROUND: usize = 64;
const DEFAULT_PAGE_SIZE: usize = 50;
const MAX_PAGE_SIZE: usize = 100;

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

    /// Answers one JSON-RPC request body: a JSON-RPC response object as the JSON text to send,
    /// or, for the streaming methods, a stream of server-sent events (each one a JSON-RPC
    /// response; an error before the stream starts is its one event).
    pub fn handle(&self, params: &ServiceParams, body: &[u8]) -> Answer {
        let request: Value = match serde_json::from_slice(body) {
            Ok(v) => v,
            Err(e) => {
                return Answer::Json(
                    response_err(&Value::Null, &RpcError::parse_error(e)).to_string(),
                )
            }
        };
        let (id, method, rpc_params) = match envelope(&request) {
            Ok(parts) => parts,
            Err((id, e)) => return Answer::Json(response_err(&id, &e).to_string()),
        };
        let streaming = matches!(method, "SendStreamingMessage" | "SubscribeToTask");
        let refuse = |e: RpcError| {
            let text = response_err(&id, &e).to_string();
            if streaming {
                Answer::Events(Arc::new(OneEvent(text)))
            } else {
                Answer::Json(text)
            }
        };
        if let Some(v) = &params.version {
            if v != PROTOCOL_VERSION {
                return refuse(RpcError::version_not_supported(v));
            }
        }
        if !params.extensions.is_empty() {
            log::debug!(
                "A2A-Extensions requested (none supported): {:?}",
                params.extensions
            );
        }
        if streaming {
            let need = rpc_params.ok_or_else(|| RpcError::invalid_params("params are required"));
            let stream = need.and_then(|p| match method {
                "SendStreamingMessage" => self.send_streaming(&id, p),
                _ => self.subscribe(&id, p),
            });
            return stream.unwrap_or_else(refuse);
        }
        let reply = self.dispatch(method, rpc_params).and_then(|result| {
            to_text(
                &Reply {
                    jsonrpc: "2.0",
                    id: &id,
                    result: &result,
                },
                result.get().len(),
            )
        });
        Answer::Json(reply.unwrap_or_else(|e| response_err(&id, &e).to_string()))
    }

    fn dispatch(
        &self,
        method: &str,
        params: Option<&Map<String, Value>>,
    ) -> Result<Box<RawValue>, RpcError> {
        let need = || params.ok_or_else(|| RpcError::invalid_params("params are required"));
        match method {
            "SendMessage" => self.send_message(need()?),
            "GetTask" => self.get_task(need()?),
            "ListTasks" => self.list_tasks(params.unwrap_or(&Map::new())),
            "CancelTask" => self.cancel_task(need()?),
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

    fn send_message(&self, params: &Map<String, Value>) -> Result<Box<RawValue>, RpcError> {
        let Prepared {
            base,
            request,
            history_length,
            return_immediately,
        } = self.prepare(params)?;
        let task_id = base.id.clone();
        if return_immediately && request.is_ok() && self.reserve_background() {
            let working = self.store_working(&base);
            self.spawn_background(base, request, task_id);
            return to_raw(&TaskResult {
                task: &with_history(working, history_length),
            });
        }

        let outcome = self.control.execute(request, &task_id);
        let (task, token, status_millis) = finish(base, outcome);
        // The reply below delivers the token; the stored copy never holds it.
        self.tasks.insert(&task, None, status_millis);
        let mut task = task;
        if let Some(token) = &token {
            tasks::with_token(&mut task, token);
        }
        to_raw(&TaskResult {
            task: &with_history(task, history_length),
        })
    }

    /// `SendStreamingMessage`: the task is stored WORKING and its operation runs in the
    /// background (a client that goes away neither cancels nor disturbs it); the stream is the
    /// task, its progress, its artifact and its final status.
    fn send_streaming(&self, id: &Value, params: &Map<String, Value>) -> Result<Answer, RpcError> {
        let Prepared {
            base,
            request,
            history_length,
            ..
        } = self.prepare(params)?;
        let task_id = base.id.clone();
        self.store_working(&base);
        let subscribed = self.tasks.subscribe(&task_id);
        if self.reserve_background() {
            self.spawn_background(base, request, task_id.clone());
        } else {
            // No background place: the operation runs here, and the stream shows its end.
            let outcome = self.control.execute(request, &task_id);
            let (task, token, status_millis) = finish(base, outcome);
            self.tasks.update(&task, token, status_millis);
        }
        let (first, updates) = subscribed.ok_or_else(|| RpcError::task_not_found(&task_id))?;
        Ok(Answer::Events(Arc::new(TaskEvents::new(
            id.clone(),
            with_history(first, history_length),
            updates,
        ))))
    }

    /// `SubscribeToTask`: the task as it is, then its changes until it ends. A finished task
    /// has nothing more to tell (UnsupportedOperationError, as the specification says).
    fn subscribe(&self, id: &Value, params: &Map<String, Value>) -> Result<Answer, RpcError> {
        let task_id = required_string(params, &["id", "taskId", "task_id"], "id")?;
        let (first, updates) = self
            .tasks
            .subscribe(&task_id)
            .ok_or_else(|| RpcError::task_not_found(&task_id))?;
        if first.status.state.is_terminal() {
            return Err(RpcError::unsupported(&format!(
                "task {task_id} is already {}: nothing more will happen (GetTask shows it)",
                first.status.state.name()
            ))
            .with("taskId", task_id.clone()));
        }
        Ok(Answer::Events(Arc::new(TaskEvents::new(
            id.clone(),
            first,
            updates,
        ))))
    }

    /// What `SendMessage` and `SendStreamingMessage` share: the message checked, the task
    /// made (WORKING, no timestamp yet), the control request read from it.
    fn prepare(&self, params: &Map<String, Value>) -> Result<Prepared, RpcError> {
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
                return Err(RpcError::content_type_not_supported(
                    "replies are application/json data parts",
                )
                .with("supportedOutputModes", "application/json"));
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

        Ok(Prepared {
            base,
            request,
            history_length,
            return_immediately,
        })
    }

    /// Stores the task as it starts (WORKING, stamped now); returns that copy.
    fn store_working(&self, base: &Task) -> Task {
        let now = now_millis();
        let mut working = base.clone();
        working.status.timestamp = rfc3339_millis(now);
        self.tasks.insert(&working, None, now);
        working
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
        let slot = BackgroundSlot(Arc::clone(&self.background));
        let fallback = base.clone();
        let progress_base = base.clone();
        let run = move || {
            let _slot = slot;
            // A bug in the operation must not leave its task WORKING forever: the panic is
            // caught here as the HTTP layer catches a request handler's.
            // Each step the backend reports becomes the task's WORKING status, which
            // subscribers hear as it happens.
            let progress = {
                let (tasks, base) = (Arc::clone(&tasks), progress_base);
                Progress::new(move |step: &str| {
                    tasks.progress(&base.id, working_status(&base, step));
                })
            };
            let outcome = catch_unwind(AssertUnwindSafe(|| {
                control.execute_reporting(request, &task_id, progress)
            }))
                .unwrap_or_else(|_| {
                    log::error!("background operation for task {task_id} panicked; the task is marked failed");
                    Outcome::Failed(ControlError::new(
                        ErrorCode::Internal,
                        "the operation stopped on an internal error; list shows whether a worker was created",
                    ))
                });
            let (task, token, status_millis) = finish(base, outcome);
            if !tasks.update(&task, token, status_millis) {
                log::warn!(
                    "task {task_id} was evicted before its operation finished; its result (and any worker token) was not kept"
                );
            }
        };
        if let Err(e) = thread::Builder::new().name("control-bg".into()).spawn(run) {
            // Nothing ran (and the slot was released with the closure): the stored task must
            // not stay WORKING forever.
            log::error!("cannot start a background operation: {e}");
            let failure = ControlError::new(
                ErrorCode::Internal,
                "the operation could not be started; nothing was done",
            );
            let (task, _, status_millis) = finish(fallback, Outcome::Failed(failure));
            self.tasks.update(&task, None, status_millis);
        }
    }

    fn get_task(&self, params: &Map<String, Value>) -> Result<Box<RawValue>, RpcError> {
        let id = required_string(params, &["id", "taskId", "task_id"], "id")?;
        let history_length = history_length(params)?;
        let task = self
            .tasks
            .get(&id, true)
            .ok_or_else(|| RpcError::task_not_found(&id))?;
        to_raw(&with_history(task, history_length))
    }

    fn cancel_task(&self, params: &Map<String, Value>) -> Result<Box<RawValue>, RpcError> {
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

    fn list_tasks(&self, params: &Map<String, Value>) -> Result<Box<RawValue>, RpcError> {
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
        to_raw(&TasksResult {
            tasks,
            next_page_token: page.next_seq.map(|s| s.to_string()).unwrap_or_default(),
            page_size,
            total_size: page.total,
        })
    }
}

/// One of the [`MAX_BACKGROUND`] places, given back when dropped (also when the operation
/// panics, or its thread never starts).
struct BackgroundSlot(Arc<AtomicUsize>);

impl Drop for BackgroundSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Completes a task from an operation's outcome; returns the token to deliver, if any, and
/// the status time (milliseconds) the store orders by.
fn finish(mut task: Task, outcome: Outcome) -> (Task, Option<Token>, u64) {
    let now = now_millis();
    task.status.timestamp = rfc3339_millis(now);
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
                format!("{verb}: {}", e.message),
                json!({ "error": e }),
                &task,
            );
            task.history.push(msg.clone());
            task.status.message = Some(msg);
            (task, None, now)
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

/// What [`Protocol::handle`] answers.
pub enum Answer {
    /// A JSON-RPC response object.
    Json(String),
    /// Server-sent events (`text/event-stream`), each a JSON-RPC response.
    Events(Arc<dyn Streamer>),
}

/// What `SendMessage` and `SendStreamingMessage` have once the message is checked.
struct Prepared {
    base: Task,
    request: Result<ControlRequest, ControlError>,
    history_length: Option<usize>,
    return_immediately: bool,
}

/// A task's WORKING status whose agent message says what just happened.
fn working_status(task: &Task, step: &str) -> TaskStatus {
    TaskStatus {
        state: TaskState::Working,
        timestamp: rfc3339_millis(now_millis()),
        message: Some(Message {
            message_id: uuid_v4().unwrap_or_else(|_| format!("{}-progress", task.id)),
            role: Role::Agent,
            parts: vec![Part::text(step)],
            context_id: Some(task.context_id.clone()),
            task_id: Some(task.id.clone()),
            metadata: None,
        }),
    }
}

/// How long a stream may stay silent before a comment line shows it (and the client) alive.
const HEARTBEAT: Duration = Duration::from_secs(15);

/// One SSE event: `data: <one JSON-RPC response>` and a blank line.
fn sse(json: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(json.len() + 8);
    out.extend_from_slice(b"data: ");
    out.extend_from_slice(json.as_bytes());
    out.extend_from_slice(b"\n\n");
    out
}

/// A stream of one event (an error before any task existed).
struct OneEvent(String);

impl Streamer for OneEvent {
    fn run(&self, sink: &mut dyn Sink) {
        sink.send(&sse(&self.0));
    }
}

/// A task's stream: the task, then each change (`StreamResponse`s), until it ends.
struct TaskEvents {
    id: Value,
    first: Task,
    updates: Mutex<Receiver<Update>>,
}

impl TaskEvents {
    fn new(id: Value, first: Task, updates: Receiver<Update>) -> TaskEvents {
        TaskEvents {
            id,
            first,
            updates: Mutex::new(updates),
        }
    }

    /// One `StreamResponse` as an SSE event; `false` once the client is gone.
    fn send(&self, sink: &mut dyn Sink, result: &impl Serialize) -> bool {
        let reply = Reply {
            jsonrpc: "2.0",
            id: &self.id,
            result,
        };
        match to_text(&reply, 0) {
            Ok(text) => sink.send(&sse(&text)),
            Err(e) => {
                log::error!("a stream event could not be written: {}", e.message);
                false
            }
        }
    }
}

impl Streamer for TaskEvents {
    fn run(&self, sink: &mut dyn Sink) {
        if !self.send(sink, &TaskResult { task: &self.first }) {
            return;
        }
        if self.first.status.state.is_terminal() {
            return;
        }
        let updates = self.updates.lock().unwrap_or_else(|p| p.into_inner());
        let (task_id, context_id) = (&self.first.id, &self.first.context_id);
        loop {
            let delivered = match updates.recv_timeout(HEARTBEAT) {
                Ok(Update::Status(status)) => {
                    let end = status.state.is_terminal();
                    let sent = self.send(
                        sink,
                        &StatusUpdate {
                            status_update: StatusUpdateEvent {
                                task_id,
                                context_id,
                                status: &status,
                            },
                        },
                    );
                    if end {
                        return;
                    }
                    sent
                }
                Ok(Update::Artifact(artifact)) => self.send(
                    sink,
                    &ArtifactUpdate {
                        artifact_update: ArtifactUpdateEvent {
                            task_id,
                            context_id,
                            artifact: &artifact,
                            last_chunk: true,
                        },
                    },
                ),
                Err(RecvTimeoutError::Timeout) => sink.send(b": still working\n\n"),
                // The task was evicted (or the store is gone): nothing more will come.
                Err(RecvTimeoutError::Disconnected) => return,
            };
            if !delivered {
                return;
            }
        }
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct StatusUpdate<'a> {
    status_update: StatusUpdateEvent<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct StatusUpdateEvent<'a> {
    task_id: &'a str,
    context_id: &'a str,
    status: &'a TaskStatus,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ArtifactUpdate<'a> {
    artifact_update: ArtifactUpdateEvent<'a>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ArtifactUpdateEvent<'a> {
    task_id: &'a str,
    context_id: &'a str,
    artifact: &'a Artifact,
    last_chunk: bool,
}

/// A JSON-RPC success response.
#[derive(Serialize)]
struct Reply<'a, T: Serialize + ?Sized> {
    jsonrpc: &'static str,
    id: &'a Value,
    result: &'a T,
}

/// `SendMessage`'s result.
#[derive(Serialize)]
struct TaskResult<'a> {
    task: &'a Task,
}

/// `ListTasks`' result.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct TasksResult {
    tasks: Vec<Task>,
    next_page_token: String,
    page_size: usize,
    total_size: usize,
}

fn to_raw(result: &impl Serialize) -> Result<Box<RawValue>, RpcError> {
    serde_json::value::to_raw_value(result).map_err(|e| RpcError::internal(&e.to_string()))
}

fn to_text<T: Serialize + ?Sized>(
    reply: &Reply<'_, T>,
    size_hint: usize,
) -> Result<String, RpcError> {
    // Written into a buffer of about its final size: grown from empty, a list's reply would be
    // copied a handful of times.
    let mut out = Vec::with_capacity(size_hint + 64);
    serde_json::to_writer(&mut out, reply).map_err(|e| RpcError::internal(&e.to_string()))?;
    String::from_utf8(out).map_err(|e| RpcError::internal(&e.to_string()))
}
