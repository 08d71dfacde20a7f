//! The A2A service: the operations of specification §3.1 on the recent tasks and the control
//! operations, independent of any binding. `SendMessage` runs an operation as an A2A task;
//! `GetTask`, `ListTasks`, `CancelTask` and `SubscribeToTask` read the recent tasks. Requests
//! arrive as their JSON request objects (§3.2, camelCase or snake_case names) and answers are
//! typed; a refusal is an [`RpcError`], which each binding renders its own way (§5.4). The
//! bindings (`jsonrpc`, `rest`) only translate: nothing here knows which one a request came
//! through. It sees request headers only after the routes have authenticated the caller and
//! removed credentials.

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::RecvTimeoutError;
use std::sync::{Arc, Mutex};
use std::thread;

use serde::Serialize;
use serde_json::{json, Map, Value};

use super::decode::{
    field, history_length, optional_string, parse_message, required_string, string_list,
    whole_number, ServiceParams,
};
use super::stream::{ArtifactUpdateEvent, StatusUpdateEvent, StreamResponse, TaskStream};
use super::tasks::{self, Filter, TaskStore};
use super::types::{
    Artifact, DataPart, Message, Part, Role, RpcError, Task, TaskState, TaskStatus,
    PROTOCOL_VERSION,
};
use crate::backend::Progress;
use crate::control::{self, Caller, Control, ControlError, ControlRequest, ErrorCode, Outcome};
use crate::push::{Authentication, PushConfig, Pusher};
use crate::time::{now_millis, parse_rfc3339_millis, rfc3339_millis};
use crate::token::{uuid_v4, Token};

/// Most `returnImmediately` operations running in the background at once; beyond it a request
/// is served as if it had not asked (the reply then simply arrives finished).
const MAX_BACKGROUND: usize = 64;
const DEFAULT_PAGE_SIZE: usize = 50;
const MAX_PAGE_SIZE: usize = 100;

pub struct Service {
    control: Arc<Control>,
    tasks: Arc<TaskStore>,
    push: Arc<Pusher>,
    record: Recorder,
    /// Running watches: task id → why it should end (set by CancelTask or a hang-up).
    watches: Arc<Mutex<HashMap<String, EndWhy>>>,
    background: Arc<AtomicUsize>,
    extended_card: Value,
}

impl Service {
    pub fn new(
        control: Arc<Control>,
        tasks: Arc<TaskStore>,
        push: Arc<Pusher>,
        extended_card: Value,
    ) -> Service {
        Service {
            record: Recorder {
                tasks: Arc::clone(&tasks),
                push: Arc::clone(&push),
            },
            control,
            tasks,
            push,
            watches: Arc::default(),
            background: Arc::new(AtomicUsize::new(0)),
            extended_card,
        }
    }

    /// The service parameters every operation checks first (§3.2.6): the version this
    /// server speaks; extensions are none, and asking for one is not an error.
    pub fn check(&self, params: &ServiceParams) -> Result<(), RpcError> {
        if let Some(v) = &params.version {
            if v != PROTOCOL_VERSION {
                return Err(RpcError::version_not_supported(v));
            }
        }
        if !params.extensions.is_empty() {
            log::debug!(
                "A2A-Extensions requested (none supported): {:?}",
                params.extensions
            );
        }
        Ok(())
    }

    /// `GetExtendedAgentCard` (§3.1.11): the card for authenticated callers.
    pub fn extended_card(&self) -> &Value {
        &self.extended_card
    }

    /// `CreateTaskPushNotificationConfig` (§3.1.7): a webhook for a task still running. The
    /// request is a `TaskPushNotificationConfig` (the v0.3 form, its fields under
    /// `pushNotificationConfig`, is read too).
    pub fn push_create(
        &self,
        caller: &Caller,
        params: &Map<String, Value>,
    ) -> Result<PushConfig, RpcError> {
        let task_id = required_string(params, &["taskId", "task_id"], "taskId")?;
        self.running_task(caller, &task_id)?;
        let fields = match field(
            params,
            &["pushNotificationConfig", "push_notification_config"],
        ) {
            Some(Value::Object(inner)) => inner,
            _ => params,
        };
        let config = push_config(fields, &task_id)?;
        self.push
            .create(config)
            .map_err(|e| RpcError::invalid_params(e.to_string()))
    }

    /// `GetTaskPushNotificationConfig` (§3.1.8).
    pub fn push_get(
        &self,
        caller: &Caller,
        params: &Map<String, Value>,
    ) -> Result<PushConfig, RpcError> {
        let task_id = required_string(params, &["taskId", "task_id"], "taskId")?;
        let id = required_string(params, &["id"], "id")?;
        self.known_task(caller, &task_id)?;
        self.push.get(&task_id, &id).ok_or_else(|| {
            RpcError::task_not_found(&task_id).with("pushNotificationConfigId", id.clone())
        })
    }

    /// `ListTaskPushNotificationConfigs` (§3.1.9): all of a task's configs, one page.
    pub fn push_list(
        &self,
        caller: &Caller,
        params: &Map<String, Value>,
    ) -> Result<PushConfigs, RpcError> {
        let task_id = required_string(params, &["taskId", "task_id"], "taskId")?;
        self.known_task(caller, &task_id)?;
        Ok(PushConfigs {
            configs: self.push.list(&task_id),
            next_page_token: String::new(),
        })
    }

    /// `DeleteTaskPushNotificationConfig` (§3.1.10): idempotent.
    pub fn push_delete(
        &self,
        caller: &Caller,
        params: &Map<String, Value>,
    ) -> Result<Empty, RpcError> {
        let task_id = required_string(params, &["taskId", "task_id"], "taskId")?;
        let id = required_string(params, &["id"], "id")?;
        self.known_task(caller, &task_id)?;
        self.push.delete(&task_id, &id);
        Ok(Empty {})
    }

    /// The state of one of the caller's tasks; another caller's is `TaskNotFound`, as an
    /// unknown one is.
    fn known_task(&self, caller: &Caller, task_id: &str) -> Result<TaskState, RpcError> {
        self.tasks
            .peek(task_id, &caller.key)
            .map(|(_, state)| state)
            .ok_or_else(|| RpcError::task_not_found(task_id))
    }

    /// A webhook is only worth setting on a task that will still change.
    fn running_task(&self, caller: &Caller, task_id: &str) -> Result<(), RpcError> {
        let state = self.known_task(caller, task_id)?;
        if state.is_terminal() {
            return Err(RpcError::unsupported(&format!(
                "task {task_id} is already {}: no notification will follow (GetTask shows it)",
                state.name()
            ))
            .with("taskId", task_id));
        }
        Ok(())
    }

    /// `SendMessage` (§3.1.1): runs the control operation (in the background when the caller
    /// asked `returnImmediately`) and answers the task; the token, if any, only here.
    pub fn send_message(
        &self,
        caller: &Caller,
        params: &Map<String, Value>,
    ) -> Result<Task, RpcError> {
        let Prepared {
            base,
            request,
            history_length,
            return_immediately,
        } = self.prepare(caller, params)?;
        let task_id = base.id.clone();
        if let (Ok(ControlRequest::Watch { filter }), true) = (&request, return_immediately) {
            let watch = self.start_watch(caller, base, filter.clone(), false);
            return Ok(with_history(watch.first, history_length));
        }
        if return_immediately && request.is_ok() && self.reserve_background() {
            let working = self.store_working(caller, &base);
            self.spawn_background(caller, base, request, task_id);
            return Ok(with_history(working, history_length));
        }

        let outcome = self.control.execute(caller, request, &task_id);
        let (task, token, status_millis) = finish(base, outcome);
        // The reply below delivers the token; the stored copy never holds it.
        self.record.done_at_once(&task, &caller.key, status_millis);
        let mut task = task;
        if let Some(token) = &token {
            tasks::with_token(&mut task, token);
        }
        Ok(with_history(task, history_length))
    }

    /// `SendStreamingMessage`: the task is stored WORKING and its operation runs in the
    /// background (a client that goes away neither cancels nor disturbs it); the stream is the
    /// task, its progress, its artifact and its final status.
    pub fn send_streaming(
        &self,
        caller: &Caller,
        params: &Map<String, Value>,
    ) -> Result<TaskStream, RpcError> {
        let Prepared {
            base,
            request,
            history_length,
            ..
        } = self.prepare(caller, params)?;
        let task_id = base.id.clone();
        if let Ok(ControlRequest::Watch { filter }) = &request {
            // The stream is the watch: it ends when its client goes.
            let Watch {
                first,
                updates,
                end,
            } = self.start_watch(caller, base, filter.clone(), true);
            return Ok(TaskStream {
                first: with_history(first, history_length),
                updates,
                on_end: end.map(|why| -> super::stream::OnEnd {
                    Box::new(move || {
                        why.lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .get_or_insert_with(|| {
                                "its stream ended (the client went away)".into()
                            });
                    })
                }),
            });
        }
        self.store_working(caller, &base);
        let subscribed = self.tasks.subscribe(&task_id, &caller.key);
        if self.reserve_background() {
            self.spawn_background(caller, base, request, task_id.clone());
        } else {
            // No background place: the operation runs here, and the stream shows its end.
            let outcome = self.control.execute(caller, request, &task_id);
            let (task, token, status_millis) = finish(base, outcome);
            self.record.finished(&task, token, status_millis);
        }
        let (first, updates) = subscribed.ok_or_else(|| RpcError::task_not_found(&task_id))?;
        Ok(TaskStream {
            first: with_history(first, history_length),
            updates,
            on_end: None,
        })
    }

    /// `SubscribeToTask`: the task as it is, then its changes until it ends. A finished task
    /// has nothing more to tell (UnsupportedOperationError, as the specification says).
    pub fn subscribe(
        &self,
        caller: &Caller,
        params: &Map<String, Value>,
    ) -> Result<TaskStream, RpcError> {
        let task_id = required_string(params, &["id", "taskId", "task_id"], "id")?;
        let (first, updates) = self
            .tasks
            .subscribe(&task_id, &caller.key)
            .ok_or_else(|| RpcError::task_not_found(&task_id))?;
        if first.status.state.is_terminal() {
            return Err(RpcError::unsupported(&format!(
                "task {task_id} is already {}: nothing more will happen (GetTask shows it)",
                first.status.state.name()
            ))
            .with("taskId", task_id.clone()));
        }
        Ok(TaskStream {
            first,
            updates,
            on_end: None,
        })
    }

    /// What `SendMessage` and `SendStreamingMessage` share: the message checked, the task
    /// made (WORKING, no timestamp yet), the control request read from it.
    fn prepare(&self, caller: &Caller, params: &Map<String, Value>) -> Result<Prepared, RpcError> {
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
                .peek(task_id, &caller.key)
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
        // A webhook given with the message is set before anything runs (a refused one stops
        // the request here), so it hears the task from its first event.
        match field(
            &config,
            &[
                "taskPushNotificationConfig",
                "pushNotificationConfig",
                "task_push_notification_config",
            ],
        ) {
            None | Some(Value::Null) => {}
            Some(Value::Object(c)) => {
                let webhook = push_config(c, &task_id)?;
                self.push
                    .create(webhook)
                    .map_err(|e| RpcError::invalid_params(e.to_string()))?;
            }
            Some(_) => {
                return Err(RpcError::invalid_params(
                    "taskPushNotificationConfig must be an object",
                ))
            }
        }
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

    /// Starts a watch as a running task: stored WORKING, each event a WORKING status with the
    /// event in a data part, until it is canceled, its stream (when `stream`) ends, or the
    /// source cuts it off. With `stream`, the task's subscription is taken before the first
    /// event. A watch that cannot start is a finished, failed task.
    fn start_watch(
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
            for event in &sub.snapshot {
                record.progress(&base, event_status(&base, event));
            }
            let (state, text) = loop {
                if let Some(why) = why.lock().unwrap_or_else(|p| p.into_inner()).clone() {
                    break (TaskState::Canceled, format!("watch ended: {why}"));
                }
                match sub.recv_timeout(WATCH_POLL) {
                    Ok(event) => record.progress(&base, event_status(&base, &event)),
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

    /// Stores the caller's task as it starts (WORKING, stamped now); returns that copy.
    fn store_working(&self, caller: &Caller, base: &Task) -> Task {
        let now = now_millis();
        let mut working = base.clone();
        working.status.timestamp = rfc3339_millis(now);
        self.record.started(&working, &caller.key, now);
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
        caller: &Caller,
        base: Task,
        request: Result<ControlRequest, ControlError>,
        task_id: String,
    ) {
        let control = Arc::clone(&self.control);
        let caller = caller.clone();
        let record = self.record.clone();
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
                let (record, base) = (record.clone(), progress_base);
                Progress::new(move |step: &str| {
                    record.progress(&base, working_status(&base, step));
                })
            };
            let outcome = catch_unwind(AssertUnwindSafe(|| {
                control.execute_reporting(&caller, request, &task_id, progress)
            }))
                .unwrap_or_else(|_| {
                    log::error!("background operation for task {task_id} panicked; the task is marked failed");
                    Outcome::Failed(ControlError::new(
                        ErrorCode::Internal,
                        "the operation stopped on an internal error; list shows whether a worker was created",
                    ))
                });
            let (task, token, status_millis) = finish(base, outcome);
            if !record.finished(&task, token, status_millis) {
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
            self.record.finished(&task, None, status_millis);
        }
    }

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
            owner: caller.key.clone(),
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
        Ok(TasksPage {
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
fn with_history(mut task: Task, history_length: Option<usize>) -> Task {
    if let Some(n) = history_length {
        let len = task.history.len();
        task.history.drain(..len.saturating_sub(n));
    }
    task
}

/// What `SendMessage` and `SendStreamingMessage` have once the message is checked.
struct Prepared {
    base: Task,
    request: Result<ControlRequest, ControlError>,
    history_length: Option<usize>,
    return_immediately: bool,
}

/// A message from this agent about `task`.
fn agent_message(task: &Task, parts: Vec<Part>) -> Message {
    Message {
        message_id: uuid_v4().unwrap_or_else(|_| format!("{}-{}", task.id, now_millis())),
        role: Role::Agent,
        parts,
        context_id: Some(task.context_id.clone()),
        task_id: Some(task.id.clone()),
        metadata: None,
    }
}

/// A task's WORKING status whose agent message says what just happened.
fn working_status(task: &Task, step: &str) -> TaskStatus {
    TaskStatus {
        state: TaskState::Working,
        timestamp: rfc3339_millis(now_millis()),
        message: Some(agent_message(task, vec![Part::text(step)])),
    }
}

/// Why a running watch should end; `None` while it should not.
type EndWhy = Arc<Mutex<Option<String>>>;

/// A watch as its starter gets it: the task as it starts, its updates (none unless asked
/// for), and where to say why it should end (none for a watch that could not start).
struct Watch {
    first: Task,
    updates: tasks::Updates,
    end: Option<EndWhy>,
}

/// How often a watch looks whether it should end.
const WATCH_POLL: std::time::Duration = std::time::Duration::from_millis(100);

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
    TaskStatus {
        state: TaskState::Working,
        timestamp: event.at.clone(),
        message: Some(agent_message(
            task,
            vec![Part::text(text), Part::data(json!({ "event": event }))],
        )),
    }
}

/// `ListTasks`' answer.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TasksPage {
    pub tasks: Vec<Task>,
    pub next_page_token: String,
    pub page_size: usize,
    pub total_size: usize,
}

impl TasksPage {
    /// Length of its tasks' reply data (JSON text).
    pub fn data_bytes(&self) -> usize {
        self.tasks.iter().map(Task::data_bytes).sum()
    }
}

/// `ListTaskPushNotificationConfigs`' answer.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PushConfigs {
    pub configs: Vec<PushConfig>,
    pub next_page_token: String,
}

/// `google.protobuf.Empty`.
#[derive(Serialize)]
pub struct Empty {}

/// A `TaskPushNotificationConfig` request object, read for task `task_id`.
fn push_config(m: &Map<String, Value>, task_id: &str) -> Result<PushConfig, RpcError> {
    let url = required_string(m, &["url"], "url")?;
    let authentication = match field(m, &["authentication"]) {
        None | Some(Value::Null) => None,
        Some(Value::Object(a)) => {
            // v0.3 had a list of schemes; v1.0 one.
            let scheme = match field(a, &["scheme"]) {
                Some(Value::String(s)) => s.clone(),
                _ => match field(a, &["schemes"]) {
                    Some(Value::Array(list)) => list
                        .first()
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string(),
                    _ => String::new(),
                },
            };
            Some(Authentication {
                scheme,
                credentials: optional_string(a, &["credentials"], "authentication.credentials")?
                    .unwrap_or_default(),
            })
        }
        Some(_) => {
            return Err(RpcError::invalid_params(
                "authentication must be an object with scheme and credentials",
            ))
        }
    };
    Ok(PushConfig {
        id: optional_string(m, &["id"], "id")?.unwrap_or_default(),
        task_id: task_id.to_string(),
        url,
        token: optional_string(m, &["token"], "token")?.unwrap_or_default(),
        authentication,
    })
}

/// Where a task's changes go: the task store (and so its streams), and the task's webhooks,
/// each change as the `StreamResponse` a stream carries. A push never carries a worker's
/// token: the store adds it to what a stream's first reader gets, never to these.
#[derive(Clone)]
struct Recorder {
    tasks: Arc<TaskStore>,
    push: Arc<Pusher>,
}

impl Recorder {
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
    fn started(&self, task: &Task, owner: &str, status_millis: u64) {
        self.tasks.insert(task, owner, None, status_millis);
        self.push(&task.id, &StreamResponse::Task(task), false);
    }

    /// A step of a running task.
    fn progress(&self, task: &Task, status: TaskStatus) {
        self.tasks.progress(&task.id, status.clone());
        let event = StreamResponse::StatusUpdate(StatusUpdateEvent {
            task_id: &task.id,
            context_id: &task.context_id,
            status: &status,
        });
        self.push(&task.id, &event, false);
    }

    /// A running task's end: its artifacts, then its final status. False if the task was
    /// evicted meanwhile.
    fn finished(&self, task: &Task, token: Option<Token>, status_millis: u64) -> bool {
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
    fn done_at_once(&self, task: &Task, owner: &str, status_millis: u64) {
        self.tasks.insert(task, owner, None, status_millis);
        self.push(&task.id, &StreamResponse::Task(task), true);
    }
}
