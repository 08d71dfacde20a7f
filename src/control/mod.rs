//! Control operations (`create`, `list`, `stop`, `logs`, and `watch` through [`watch`]):
//! request validation (metadata and list filters included), the outcome model
//! (completed / rejected / failed) and the guarantees this layer owns (see `backend/mod.rs` for
//! the split of responsibilities). One log line and one metric sample per operation.

pub mod caller;
pub mod watch;

pub use caller::Caller;

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::Value;

use crate::backend::{
    tail, Backend, BackendError, CreateSpec, Metadata, Progress, Worker, WorkerState,
    MAX_METADATA_KEYS, MAX_METADATA_VALUE,
};
use crate::metrics::Metrics;
use crate::sentry::Sentry;
use crate::settings::Lifetime;
use crate::time;
use crate::token::{self, Token};

pub const MAX_TASK_CHARS: usize = 256;
pub const MAX_WORKER_ID_CHARS: usize = 64;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ControlRequest {
    /// `ttl`: the caller's lifetime for the worker, when it named one.
    Create {
        task: String,
        ttl: Option<Duration>,
        metadata: Metadata,
    },
    List {
        filter: Filter,
    },
    Stop {
        worker_id: String,
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
}

impl ControlRequest {
    pub fn operation(&self) -> &'static str {
        match self {
            ControlRequest::Create { .. } => "create",
            ControlRequest::List { .. } => "list",
            ControlRequest::Watch { .. } => "watch",
            ControlRequest::Stop { .. } => "stop",
            ControlRequest::Logs { .. } => "logs",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    InvalidRequest,
    WorkerExists,
    NotFound,
    BackendUnavailable,
    ImageNotFound,
    NotReady,
    Capacity,
    RejectedByCluster,
    Internal,
}

/// The `{"error": ...}` a failed or rejected task carries in its status message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ControlError {
    pub code: ErrorCode,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub worker_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<WorkerState>,
}

impl ControlError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> ControlError {
        ControlError {
            code,
            message: message.into(),
            worker_id: None,
            state: None,
        }
    }

    pub fn invalid(message: impl Into<String>) -> ControlError {
        ControlError::new(ErrorCode::InvalidRequest, message)
    }
}

impl From<BackendError> for ControlError {
    fn from(e: BackendError) -> ControlError {
        let message = e.to_string();
        match e {
            BackendError::Unavailable(_) => {
                ControlError::new(ErrorCode::BackendUnavailable, message)
            }
            BackendError::WorkerExists { worker_id, state } => ControlError {
                code: ErrorCode::WorkerExists,
                message,
                worker_id: Some(worker_id),
                state: Some(state),
            },
            BackendError::NotFound => ControlError::new(ErrorCode::NotFound, message),
            BackendError::ImageNotFound(_) => ControlError::new(ErrorCode::ImageNotFound, message),
            BackendError::NotReady(_) => ControlError::new(ErrorCode::NotReady, message),
            BackendError::Rejected(_) => ControlError::new(ErrorCode::RejectedByCluster, message),
            BackendError::Capacity(_) => ControlError::new(ErrorCode::Capacity, message),
            BackendError::Internal(_) => ControlError::new(ErrorCode::Internal, message),
        }
    }
}

/// How an operation ended.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// The reply data, and for `create` the worker's token (kept apart so the protocol layer
    /// can deliver it exactly once). The data is JSON text, written once from the backend's
    /// typed answer and sent as it is.
    Completed {
        data: Box<RawValue>,
        token: Option<Token>,
    },
    /// Not attempted: the request was malformed.
    Rejected(ControlError),
    /// Attempted and failed.
    Failed(ControlError),
}

impl Outcome {
    pub fn label(&self) -> &'static str {
        match self {
            Outcome::Completed { .. } => "completed",
            Outcome::Rejected(_) => "rejected",
            Outcome::Failed(_) => "failed",
        }
    }
}

/// `list`'s reply data.
#[derive(Serialize)]
struct Workers {
    workers: Vec<Worker>,
}

/// `create`'s and `stop`'s reply data.
#[derive(Serialize)]
struct OneWorker {
    worker: Worker,
}

/// `logs`' reply data.
#[derive(Serialize)]
struct LogsReply<'a> {
    worker_id: &'a str,
    text: &'a str,
    truncated: bool,
}

/// A completed outcome with its reply data written out as JSON text, into a buffer made for
/// about `hint` bytes ([`crate::json`]).
fn completed(reply: &impl Serialize, token: Option<Token>, hint: usize) -> Outcome {
    match crate::json::to_raw_sized(reply, hint) {
        Ok(data) => Outcome::Completed { data, token },
        // Plain structs of strings and numbers: cannot fail, but never a panic if it does.
        Err(e) => Outcome::Failed(ControlError::new(
            ErrorCode::Internal,
            format!("the reply could not be written: {e}"),
        )),
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
        }),
        "list" => Ok(ControlRequest::List {
            filter: valid_filter(request)?,
        }),
        "watch" => Ok(ControlRequest::Watch {
            filter: valid_filter(request)?,
        }),
        "stop" => Ok(ControlRequest::Stop {
            worker_id: valid_worker_id(request.get("worker_id"), "stop")?,
        }),
        "logs" => Ok(ControlRequest::Logs {
            worker_id: valid_worker_id(request.get("worker_id"), "logs")?,
            tail: valid_tail(request.get("tail"))?,
        }),
        other => Err(ControlError::invalid(format!(
            "unknown operation {:?}: use create, list, stop, logs or watch",
            truncate(other, 64)
        ))),
    }
}

/// A task: 1 to 256 characters, not blank, no control characters (they would reach log
/// lines, labels and terminal titles).
fn valid_task(v: Option<&Value>) -> Result<String, ControlError> {
    let task = match v {
        None | Some(Value::Null) => return Err(ControlError::invalid("create needs a task")),
        Some(Value::String(s)) => s,
        Some(_) => return Err(ControlError::invalid("task must be a string")),
    };
    if task.trim().is_empty() {
        return Err(ControlError::invalid("task must not be empty"));
    }
    if task.chars().count() > MAX_TASK_CHARS {
        return Err(ControlError::invalid(format!(
            "task is longer than {MAX_TASK_CHARS} characters"
        )));
    }
    if task.chars().any(|c| c.is_control() || is_bidi_control(c)) {
        return Err(ControlError::invalid(
            "task must not contain control characters",
        ));
    }
    Ok(task.clone())
}

/// Which workers `list` answers: all of them must match (an empty filter matches all).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    pub metadata: Metadata,
    pub state: Option<WorkerState>,
    pub task: Option<String>,
    /// Set by this layer from the caller, never by a request: the one scope it sees (`None`:
    /// an admin, every scope).
    pub scope: Option<String>,
}

impl Filter {
    pub fn matches(&self, w: &Worker) -> bool {
        self.scope.as_ref().is_none_or(|s| &w.scope == s)
            && self.state.is_none_or(|s| w.state == s)
            && self.task.as_ref().is_none_or(|t| &w.task == t)
            && self
                .metadata
                .iter()
                .all(|(k, v)| w.metadata.get(k) == Some(v))
    }
}

/// `list`'s optional filters: `metadata` (as create takes it), `state`, `task`.
fn valid_filter(request: &serde_json::Map<String, Value>) -> Result<Filter, ControlError> {
    let state = match request.get("state") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(
            [
                WorkerState::Starting,
                WorkerState::Running,
                WorkerState::Exited,
                WorkerState::Stopping,
                WorkerState::Unknown,
            ]
            .into_iter()
            .find(|w| w.as_str() == s)
            .ok_or_else(|| {
                ControlError::invalid(
                    "state must be one of starting, running, exited, stopping, unknown",
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

/// What one operation's log line names.
struct Ids<'a> {
    /// The A2A task carrying the operation.
    task_id: &'a str,
    /// The worker's task (create only).
    task: &'a str,
    worker_id: &'a str,
    /// Who asked (its name; `reaper` for the reaper's own stops).
    caller: &'a str,
}

/// The TTL a create gets: the one asked for (refused above the ceiling), else the default,
/// else the ceiling (with a ceiling, no worker lives forever).
pub fn ttl_for(
    lifetime: &Lifetime,
    asked: Option<Duration>,
) -> Result<Option<Duration>, ControlError> {
    match (asked, lifetime.max_ttl) {
        (Some(ttl), Some(max)) if ttl > max => Err(ControlError::invalid(format!(
            "ttl {} is longer than MAX_WORKER_TTL ({})",
            time::duration_text(ttl),
            time::duration_text(max)
        ))),
        (Some(ttl), _) => Ok(Some(ttl)),
        (None, max) => Ok(lifetime.default_ttl.or(max)),
    }
}

/// The reaper of one controller: every `interval` (and once at start, for workers that
/// expired while no controller ran) it stops the workers whose TTL has passed. Every replica
/// runs one; they need no coordination (a worker another replica stopped first is simply
/// gone). A list that fails is said once, and again when it works. Dropping this stops the
/// reaper before its next pass.
pub struct Reaper {
    /// Held only to be dropped: that ends the reaper.
    _stop: mpsc::Sender<()>,
}

impl Reaper {
    pub fn start(control: Arc<Control>, interval: Duration) -> Reaper {
        let (stop, stopped) = mpsc::channel::<()>();
        let run = move || {
            let mut failing = false;
            loop {
                match catch_unwind(AssertUnwindSafe(|| control.reap())) {
                    Ok(Ok(())) if failing => {
                        failing = false;
                        log::info!("reaper: listing workers works again");
                    }
                    Ok(Ok(())) => {}
                    Ok(Err(e)) if !failing => {
                        failing = true;
                        log::warn!(
                            "reaper: cannot list workers, trying again every {}s: {e}",
                            interval.as_secs()
                        );
                    }
                    Ok(Err(_)) => {}
                    Err(_) => log::error!(
                        "reaper: a pass stopped on an internal error; trying again next pass"
                    ),
                }
                match stopped.recv_timeout(interval) {
                    Err(mpsc::RecvTimeoutError::Timeout) => {}
                    Ok(()) | Err(mpsc::RecvTimeoutError::Disconnected) => return,
                }
            }
        };
        if let Err(e) = std::thread::Builder::new().name("reaper".into()).spawn(run) {
            log::error!("cannot start the reaper (expired workers will not be stopped): {e}");
        }
        Reaper { _stop: stop }
    }
}

/// The operation layer over one backend.
pub struct Control {
    backend: Arc<dyn Backend>,
    metrics: Arc<Metrics>,
    sentry: Option<Arc<Sentry>>,
    max_workers: u32,
    lifetime: Lifetime,
    /// Creates admitted but not finished (counted against `MAX_WORKERS` and the caller's
    /// `max_workers`).
    in_flight: Mutex<InFlight>,
    /// Serialises creates of a backend whose task uniqueness is check-then-create.
    create_lock: Mutex<()>,
    /// What watchers hear: one source for all of them.
    watch: Arc<watch::Hub>,
}

/// `MAX_WATCHERS`' default.
pub const DEFAULT_MAX_WATCHERS: usize = 64;

impl Control {
    pub fn new(
        backend: Arc<dyn Backend>,
        metrics: Arc<Metrics>,
        sentry: Option<Arc<Sentry>>,
        max_workers: u32,
    ) -> Control {
        Control {
            watch: watch::Hub::new(Arc::clone(&backend), DEFAULT_MAX_WATCHERS),
            backend,
            metrics,
            sentry,
            max_workers,
            lifetime: Lifetime::default(),
            in_flight: Mutex::default(),
            create_lock: Mutex::new(()),
        }
    }

    /// The same, with at most `max` watchers at once.
    pub fn with_max_watchers(mut self, max: usize) -> Control {
        self.watch = watch::Hub::new(Arc::clone(&self.backend), max);
        self
    }

    /// Starts a watch: the matching workers (of the caller's scope, unless it is an admin) as
    /// they are, `synced`, then their events.
    pub fn watch(
        &self,
        caller: &Caller,
        mut filter: Filter,
    ) -> Result<watch::Subscription, ControlError> {
        filter.scope = caller.visible_scope();
        self.watch.subscribe(filter).map_err(|e| match e {
            watch::WatchError::Full(max) => ControlError::new(
                ErrorCode::Capacity,
                format!("MAX_WATCHERS ({max}) watches run already: end one first"),
            ),
            watch::WatchError::Backend(why) => {
                ControlError::new(ErrorCode::BackendUnavailable, why)
            }
        })
    }

    /// The same, with workers' lifetimes.
    pub fn with_lifetime(mut self, lifetime: Lifetime) -> Control {
        self.lifetime = lifetime;
        self
    }

    pub fn backend(&self) -> &dyn Backend {
        self.backend.as_ref()
    }

    /// Runs a parsed request for `caller` (or reports a rejected one), logging and counting it.
    pub fn execute(
        &self,
        caller: &Caller,
        request: Result<ControlRequest, ControlError>,
        task_id: &str,
    ) -> Outcome {
        self.execute_reporting(caller, request, task_id, Progress::default())
    }

    /// The same, saying how a create goes through `progress` as it goes.
    pub fn execute_reporting(
        &self,
        caller: &Caller,
        request: Result<ControlRequest, ControlError>,
        task_id: &str,
        progress: Progress,
    ) -> Outcome {
        let started = Instant::now();
        let (operation, task, outcome, worker_id) = match request {
            Err(e) => (
                "invalid",
                String::new(),
                Outcome::Rejected(e),
                String::new(),
            ),
            Ok(req) => {
                let op = req.operation();
                let task = match &req {
                    ControlRequest::Create { task, .. } => task.clone(),
                    _ => String::new(),
                };
                let (outcome, worker_id) = self.run(caller, req, progress);
                (op, task, outcome, worker_id)
            }
        };
        let took = started.elapsed();
        let ids = Ids {
            task_id,
            task: &task,
            worker_id: &worker_id,
            caller: &caller.name,
        };
        self.record(operation, &ids, &outcome, took);
        outcome
    }

    /// Whether `worker_id` is a worker `caller` may reach. An admin reaches any id (the backend
    /// says whether it exists). Any other caller's answer for another scope's worker is the one
    /// for a worker that does not exist, reached the same way (one list, nothing asked of the
    /// backend after it), so neither the reply nor its timing tells the two apart.
    fn reachable(&self, caller: &Caller, worker_id: &str) -> Result<(), BackendError> {
        if caller.admin {
            return Ok(());
        }
        let workers = self.backend.list()?;
        match workers.iter().find(|w| w.worker_id == worker_id) {
            Some(w) if caller.sees(w) => Ok(()),
            _ => Err(BackendError::NotFound),
        }
    }

    fn run(&self, caller: &Caller, req: ControlRequest, progress: Progress) -> (Outcome, String) {
        match req {
            ControlRequest::List { mut filter } => match self.backend.list() {
                Ok(mut workers) => {
                    filter.scope = caller.visible_scope();
                    workers.retain(|w| filter.matches(w));
                    workers.sort_by(|a, b| a.created_at.cmp(&b.created_at));
                    // About 260 bytes a worker (a 30-worker reply is 7.8 KB).
                    let hint = 260 * workers.len();
                    (completed(&Workers { workers }, None, hint), String::new())
                }
                Err(e) => (Outcome::Failed(e.into()), String::new()),
            },
            ControlRequest::Watch { .. } => (
                Outcome::Rejected(ControlError::invalid(
                    "watch is a stream: send it with SendStreamingMessage (or with returnImmediately, then SubscribeToTask or a push notification config)",
                )),
                String::new(),
            ),
            ControlRequest::Stop { worker_id } => {
                if let Err(e) = self.reachable(caller, &worker_id) {
                    return (Outcome::Failed(e.into()), worker_id);
                }
                // Said before: the engine may tell watchers of the removal before stop returns.
                self.watch.stopping(&worker_id, "stopped by a caller");
                let stopped = self.backend.stop(&worker_id);
                self.watch.stopped(&worker_id, stopped.is_ok());
                match stopped {
                    Ok(worker) => (completed(&OneWorker { worker }, None, 0), worker_id),
                    Err(e) => (Outcome::Failed(e.into()), worker_id),
                }
            }
            // The text goes to the caller only: never into a log line.
            ControlRequest::Logs { worker_id, tail } => match self
                .reachable(caller, &worker_id)
                .and_then(|()| self.backend.logs(&worker_id, tail))
            {
                Ok(logs) => (
                    completed(
                        &LogsReply {
                            worker_id: &worker_id,
                            text: &logs.text,
                            truncated: logs.truncated,
                        },
                        None,
                        logs.text.len(),
                    ),
                    worker_id,
                ),
                Err(e) => (Outcome::Failed(e.into()), worker_id),
            },
            ControlRequest::Create {
                task,
                ttl,
                metadata,
            } => self.create(caller, task, ttl, metadata, progress),
        }
    }

    fn create(
        &self,
        caller: &Caller,
        task: String,
        ttl: Option<Duration>,
        metadata: Metadata,
        progress: Progress,
    ) -> (Outcome, String) {
        let failed = |e: ControlError| (Outcome::Failed(e), String::new());
        if let Err(why) = self.backend.check_task(&task) {
            return (Outcome::Rejected(ControlError::invalid(why)), String::new());
        }
        let ttl = match ttl_for(&self.lifetime, ttl) {
            Ok(ttl) => ttl,
            Err(e) => return (Outcome::Rejected(e), String::new()),
        };
        let endpoints = self.backend.workers_have_endpoints();
        let ids = token::random_hex(6).and_then(|id| {
            let token = if endpoints {
                Token::generate()?
            } else {
                Token::from_secret(String::new())
            };
            Ok((id, token))
        });
        let (worker_id, token) = match ids {
            Ok(v) => v,
            Err(e) => {
                return failed(ControlError::new(
                    ErrorCode::Internal,
                    format!("the system random generator failed: {e}"),
                ))
            }
        };
        let _serial = if self.backend.atomic_task_uniqueness() {
            None
        } else {
            Some(self.create_lock.lock().unwrap_or_else(|p| p.into_inner()))
        };
        let admitted = match self.admit(caller) {
            Ok(a) => a,
            Err(e) => return failed(e),
        };
        // Whole seconds, rounded up: a worker never goes before its TTL has passed.
        let expires_at =
            ttl.map(|t| time::now_millis().div_ceil(1000) + t.as_secs_f64().ceil() as u64);
        let spec = CreateSpec {
            worker_id: worker_id.clone(),
            task,
            scope: caller.scope.clone(),
            token,
            expires_at,
            metadata,
            progress,
        };
        let result = self.backend.create(&spec);
        drop(admitted);
        match result {
            Ok(worker) => {
                let worker_id = worker.worker_id.clone();
                self.watch.poke();
                (
                    completed(&OneWorker { worker }, Some(spec.token), 0),
                    worker_id,
                )
            }
            Err(e) => (Outcome::Failed(e.into()), worker_id),
        }
    }

    /// Stops every listed worker whose expiry has passed, through the same stop as a caller's
    /// (each logged and counted as operation `reap`). A worker that is already gone when its
    /// stop arrives (another replica reaped it first) is not an error; one already being
    /// removed (`stopping`) was stopped by an earlier pass, and is left alone.
    /// Fails only when the workers cannot be listed.
    pub fn reap(&self) -> Result<(), BackendError> {
        let workers = self.backend.list()?;
        let now = time::now_millis();
        for w in workers {
            let Some(expiry) = time::parse_rfc3339_millis(&w.expires_at) else {
                continue;
            };
            if expiry > now || w.state == WorkerState::Stopping {
                continue;
            }
            let started = Instant::now();
            self.watch.stopping(
                &w.worker_id,
                &format!("reaped: its TTL ended at {}", w.expires_at),
            );
            let stopped = self.backend.stop(&w.worker_id);
            self.watch.stopped(&w.worker_id, stopped.is_ok());
            let outcome = match stopped {
                Ok(worker) => {
                    log::info!(
                        "reaper: stopped worker {} (task {:?}): its TTL ended at {}",
                        w.worker_id,
                        w.task,
                        w.expires_at
                    );
                    completed(&OneWorker { worker }, None, 0)
                }
                Err(BackendError::NotFound) => {
                    log::debug!(
                        "reaper: worker {} was already gone (stopped elsewhere)",
                        w.worker_id
                    );
                    continue;
                }
                Err(e) => Outcome::Failed(e.into()),
            };
            let ids = Ids {
                task_id: "reaper",
                task: &w.task,
                worker_id: &w.worker_id,
                caller: "reaper",
            };
            self.record("reap", &ids, &outcome, started.elapsed());
        }
        Ok(())
    }

    /// Reserves a place under `MAX_WORKERS` and the caller's `max_workers` (which counts its
    /// scope's workers): listed workers plus creates in flight. The place is given back when
    /// the returned guard drops, also if the backend panics.
    fn admit(&self, caller: &Caller) -> Result<Admitted<'_>, ControlError> {
        let mut in_flight = self.in_flight.lock().unwrap_or_else(|p| p.into_inner());
        let scope_in_flight = in_flight.by_scope.get(&caller.scope).copied().unwrap_or(0);
        let scope_max = caller.max_workers.filter(|m| *m > 0);
        if self.max_workers > 0 || scope_max.is_some() {
            // A worker being removed (`stopping`) is on its way out: it holds its task, not a
            // place.
            let workers = self.backend.list().map_err(ControlError::from)?;
            let counted = workers.iter().filter(|w| w.state != WorkerState::Stopping);
            let (existing, in_scope) = counted.fold((0u64, 0u64), |(all, mine), w| {
                (all + 1, mine + u64::from(w.scope == caller.scope))
            });
            if self.max_workers > 0
                && existing + u64::from(in_flight.total) >= u64::from(self.max_workers)
            {
                return Err(ControlError::new(
                    ErrorCode::Capacity,
                    format!(
                        "MAX_WORKERS ({}) reached: stop a worker first",
                        self.max_workers
                    ),
                ));
            }
            if let Some(max) = scope_max {
                if in_scope + u64::from(scope_in_flight) >= u64::from(max) {
                    return Err(ControlError::new(
                        ErrorCode::Capacity,
                        format!(
                            "caller {}'s max_workers ({max}) reached in scope {}: stop one of its workers first",
                            caller.name, caller.scope
                        ),
                    ));
                }
            }
        }
        in_flight.total += 1;
        *in_flight.by_scope.entry(caller.scope.clone()).or_default() += 1;
        Ok(Admitted(self, caller.scope.clone()))
    }

    fn record(&self, operation: &'static str, ids: &Ids<'_>, outcome: &Outcome, took: Duration) {
        let Ids {
            task_id,
            task,
            worker_id,
            caller,
        } = ids;
        let backend = self.backend.kind().as_str();
        self.metrics
            .control_operation(operation, backend, outcome.label(), caller, took);
        let ms = took.as_millis();
        match outcome {
            Outcome::Completed { .. } => log::info!(
                "control operation={operation} caller={caller:?} task_id={task_id} task={task:?} worker_id={worker_id:?} outcome=completed duration_ms={ms}"
            ),
            Outcome::Rejected(e) | Outcome::Failed(e) => {
                log::warn!(
                    "control operation={operation} caller={caller:?} task_id={task_id} task={task:?} worker_id={worker_id:?} outcome={} code={:?} error={:?} duration_ms={ms}",
                    outcome.label(),
                    e.code,
                    e.message
                );
                let caller_error = matches!(
                    e.code,
                    ErrorCode::InvalidRequest
                        | ErrorCode::WorkerExists
                        | ErrorCode::NotFound
                        | ErrorCode::Capacity
                );
                if let (Some(sentry), false) = (&self.sentry, caller_error) {
                    sentry.report(&format!("{operation} failed ({:?}): {}", e.code, e.message), operation, backend);
                }
            }
        }
    }
}

/// Creates in flight: all of them, and by scope.
#[derive(Default)]
struct InFlight {
    total: u32,
    by_scope: HashMap<String, u32>,
}

/// A create counted in flight (in its scope); dropping it gives the place back.
struct Admitted<'a>(&'a Control, String);

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        let mut in_flight = self.0.in_flight.lock().unwrap_or_else(|p| p.into_inner());
        in_flight.total = in_flight.total.saturating_sub(1);
        if let Some(n) = in_flight.by_scope.get_mut(&self.1) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                in_flight.by_scope.remove(&self.1);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
        assert_eq!(ttl_for(&none, None).unwrap(), None);
        let capped = Lifetime {
            default_ttl: Some(Duration::from_secs(600)),
            max_ttl: Some(Duration::from_secs(7200)),
        };
        assert_eq!(
            ttl_for(&capped, None).unwrap(),
            Some(Duration::from_secs(600))
        );
        assert_eq!(
            ttl_for(&capped, Some(Duration::from_secs(7200))).unwrap(),
            Some(Duration::from_secs(7200))
        );
        let e = ttl_for(&capped, Some(Duration::from_secs(7201))).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidRequest);
        assert_eq!(e.message, "ttl 2h1s is longer than MAX_WORKER_TTL (2h)");
        let ceiling_only = Lifetime {
            default_ttl: None,
            max_ttl: Some(Duration::from_secs(60)),
        };
        assert_eq!(
            ttl_for(&ceiling_only, None).unwrap(),
            Some(Duration::from_secs(60)),
            "with a ceiling no worker lives forever"
        );
    }

    #[test]
    fn requests() {
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
            })
        );
        assert_eq!(
            parse(json!({"operation": "stop", "worker_id": "abc123"})),
            Ok(ControlRequest::Stop {
                worker_id: "abc123".into()
            })
        );
        assert!(parse_request([&json!({"no": 1}), &json!({"operation": "list"})]).is_ok());
    }

    #[test]
    fn rejections() {
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
