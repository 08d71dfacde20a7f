//! The A2A service: the operations of specification §3.1 on the recent tasks and the control
//! operations, independent of any binding. `SendMessage` runs an operation as an A2A task;
//! `GetTask`, `ListTasks`, `CancelTask` and `SubscribeToTask` read the recent tasks. Requests
//! arrive as their JSON request objects (§3.2, camelCase or snake_case names) and answers are
//! typed; a refusal is an [`RpcError`], which each binding renders its own way (§5.4). The
//! bindings (`jsonrpc`, `rest`) only translate: nothing here knows which one a request came
//! through. It sees request headers only after the routes have authenticated the caller and
//! removed credentials.
//!
//! The operations, one idea a file: sending and subscribing here; the background operations
//! (`returnImmediately`, streams) in `background`; watches in `watching`; `GetTask`,
//! `ListTasks` and `CancelTask` in `queries`; the push-config methods in `push_configs`; where
//! each change of a task goes, in `record`.

mod background;
mod everywhere;
mod push_configs;
mod queries;
mod record;
mod watching;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};

use serde_json::{Map, Value};

use super::decode::{
    field, history_length, parse_message, push_config, required_string, string_list, ServiceParams,
};
use super::stream::TaskStream;
use super::tasks::{self, TaskStore};
use super::types::{RpcError, Task, TaskState, TaskStatus, PROTOCOL_VERSION};
use crate::control::{self, Caller, Control, ControlError, ControlRequest};
use crate::push::Pusher;
use crate::replicas::{Location, Replicas};
use crate::token::uuid_v4;
use record::{finish, with_history, Recorder};

pub struct Service {
    control: Arc<Control>,
    tasks: Arc<TaskStore>,
    push: Arc<Pusher>,
    record: Recorder,
    /// Running watches: task id → why it should end (set by CancelTask or a hang-up).
    watches: Arc<Mutex<HashMap<String, EndWhy>>>,
    background: Arc<AtomicUsize>,
    extended_card: Value,
    /// The other replicas, when this is one of several: task ids name their replica.
    replicas: Option<Arc<Replicas>>,
}

impl Service {
    pub fn new(
        control: Arc<Control>,
        tasks: Arc<TaskStore>,
        push: Arc<Pusher>,
        extended_card: Value,
    ) -> Service {
        Service {
            record: Recorder::new(Arc::clone(&tasks), Arc::clone(&push)),
            control,
            tasks,
            push,
            watches: Arc::default(),
            background: Arc::new(AtomicUsize::new(0)),
            extended_card,
            replicas: None,
        }
    }

    /// One replica of several: the tasks it mints name it, and calls on another replica's
    /// task are relayed there.
    pub fn with_replicas(mut self, replicas: Option<Arc<Replicas>>) -> Service {
        self.replicas = replicas;
        self
    }

    /// Where a call on task `task_id` is answered: here (`None`), or by the replica at the
    /// address that holds it. A task of a replica that is gone is `TaskNotFound` saying so.
    pub fn holder(
        &self,
        params: &ServiceParams,
        task_id: &str,
    ) -> Result<Option<SocketAddr>, RpcError> {
        let Some(replicas) = self.replicas.as_ref().filter(|_| self.relays(params)) else {
            return Ok(None);
        };
        match replicas.locate(task_id) {
            Location::Here => Ok(None),
            Location::Peer(addr) => Ok(Some(addr)),
            Location::Gone(ip) => Err(RpcError::task_not_found_gone(task_id, &ip.to_string())),
            Location::Unknown(why) => Err(RpcError::internal(&format!(
                "task {task_id} is held by another replica, and the replicas cannot be listed now: {why}"
            ))
            .with("taskId", task_id)),
        }
    }

    /// The refusal when the replica holding `task_id` at `addr` does not answer.
    pub fn holder_unanswered(&self, task_id: &str, addr: SocketAddr, why: &str) -> RpcError {
        if let Some(r) = &self.replicas {
            r.forget();
        }
        RpcError::task_not_found_unanswered(task_id, &addr.ip().to_string(), why)
    }

    /// Whether a call may be relayed from here: this is one of several replicas and the call
    /// was not relayed already. Bindings look for the task a call names only then.
    pub fn relays(&self, params: &ServiceParams) -> bool {
        self.replicas.is_some() && !params.relayed
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
        let return_immediately = return_immediately(&config)?;
        accepted_output_modes(&config)?;
        if let Some(task_id) = &message.task_id {
            return Err(self.follow_up_refusal(caller, task_id, message.context_id.as_deref()));
        }

        let task_id = uuid_v4().map_err(|e| RpcError::internal(&e.to_string()))?;
        let task_id = match &self.replicas {
            Some(r) => r.task_id(&task_id),
            None => task_id,
        };
        let context_id = match &message.context_id {
            Some(c) => c.clone(),
            None => uuid_v4().map_err(|e| RpcError::internal(&e.to_string()))?,
        };
        self.webhook_of(&config, &task_id)?;
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

    /// Why a message to an existing task is refused: every control task is finished when its
    /// reply is sent, so a follow-up can never be accepted; an unknown id (or another
    /// caller's) is not found, and a context that is not the task's is invalid.
    fn follow_up_refusal(&self, caller: &Caller, task_id: &str, context: Option<&str>) -> RpcError {
        let Some((context_id, _)) = self.tasks.peek(task_id, &caller.key) else {
            return RpcError::task_not_found(task_id);
        };
        if context.is_some_and(|c| c != context_id) {
            return RpcError::invalid_params("contextId does not match the task's contextId");
        }
        RpcError::unsupported(
            "control tasks are terminal and accept no further messages; send a new message without taskId",
        )
        .with("taskId", task_id.to_string())
    }

    /// A webhook given with the message, set before anything runs (a refused one stops the
    /// request here), so it hears the task from its first event.
    fn webhook_of(&self, config: &Map<String, Value>, task_id: &str) -> Result<(), RpcError> {
        match field(
            config,
            &[
                "taskPushNotificationConfig",
                "pushNotificationConfig",
                "task_push_notification_config",
            ],
        ) {
            None | Some(Value::Null) => Ok(()),
            Some(Value::Object(c)) => {
                let webhook = push_config(c, task_id)?;
                self.push
                    .create(webhook)
                    .map(|_| ())
                    .map_err(|e| RpcError::invalid_params(e.to_string()))
            }
            Some(_) => Err(RpcError::invalid_params(
                "taskPushNotificationConfig must be an object",
            )),
        }
    }
}

/// `returnImmediately`: a boolean, false when absent.
fn return_immediately(config: &Map<String, Value>) -> Result<bool, RpcError> {
    match field(config, &["returnImmediately", "return_immediately"]) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(RpcError::invalid_params(
            "returnImmediately must be a boolean",
        )),
    }
}

/// `acceptedOutputModes`: replies are JSON data parts, so a caller must accept JSON (or say
/// nothing).
fn accepted_output_modes(config: &Map<String, Value>) -> Result<(), RpcError> {
    let Some(modes) = field(config, &["acceptedOutputModes", "accepted_output_modes"]) else {
        return Ok(());
    };
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
    Ok(())
}

/// What `SendMessage` and `SendStreamingMessage` have once the message is checked.
struct Prepared {
    base: Task,
    request: Result<ControlRequest, ControlError>,
    history_length: Option<usize>,
    return_immediately: bool,
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
