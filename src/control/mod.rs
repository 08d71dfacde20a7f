//! Control operations (`create`, `list`, `stop`, `logs`, and `watch` through [`watch`]) over
//! the backend seam: the guarantees this layer owns (see `backend/mod.rs` for the split of
//! responsibilities): scopes, `MAX_WORKERS` and the callers' `max_workers`, one create at a
//! time where the backend needs it, one log line and one metric sample per operation. The
//! requests are read in [`request`], outcomes and error codes are [`error`]'s, the reaper is
//! [`reaper`]'s, watchers hear [`watch`], and templates and workspaces are [`templates`]'.

pub mod caller;
mod create;
pub mod egress;
pub mod error;
mod fork;
mod lifetime;
pub mod pool;
pub mod reaper;
pub mod request;
pub mod templates;
pub mod watch;

pub use caller::Caller;
pub use error::{ControlError, ErrorCode, Outcome};
pub use reaper::Reaper;
pub use request::{
    parse_request, ttl_for, ControlRequest, Filter, DEFAULT_TAIL, MAX_TASK_CHARS,
    MAX_WORKER_ID_CHARS,
};

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::backend::{Backend, BackendError, Progress, Worker};
use crate::metrics::Metrics;
use crate::sentry::Sentry;
use crate::settings::templates::TemplatesFile;
use crate::token::Token;

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

/// The operation layer over one backend.
pub struct Control {
    backend: Arc<dyn Backend>,
    metrics: Arc<Metrics>,
    sentry: Option<Arc<Sentry>>,
    max_workers: u32,
    /// The worker templates (each with its lifetime), as they are now.
    templates: Arc<TemplatesFile>,
    /// `WORKSPACE_TTL`: how long a workspace outlives its last worker (`None`: until deleted).
    workspace_ttl: Option<Duration>,
    /// Whether the reaper's last look at the workspaces failed (said once).
    workspaces_failing: std::sync::atomic::AtomicBool,
    /// Creates admitted but not finished (counted against `MAX_WORKERS` and the caller's
    /// `max_workers`).
    in_flight: Mutex<InFlight>,
    /// Serialises creates of a backend whose task uniqueness is check-then-create.
    create_lock: Mutex<()>,
    /// What watchers hear: one source for all of them.
    watch: Arc<watch::Hub>,
    /// The warm pools creates of pooled templates take members from.
    pool: Option<Arc<pool::Pool>>,
    /// Held by a renew and by the reaper's look-again-then-stop of expired workers: within
    /// this controller a renew that answered is never undone by a reap that read the old
    /// expiry.
    lifetimes: Mutex<()>,
}

/// `MAX_WATCHERS`' default.
pub const DEFAULT_MAX_WATCHERS: usize = 64;

impl Control {
    pub fn new(
        backend: Arc<dyn Backend>,
        metrics: Arc<Metrics>,
        sentry: Option<Arc<Sentry>>,
        max_workers: u32,
        templates: Arc<TemplatesFile>,
    ) -> Control {
        Control {
            watch: watch::Hub::new(Arc::clone(&backend), DEFAULT_MAX_WATCHERS),
            backend,
            metrics,
            sentry,
            max_workers,
            templates,
            workspace_ttl: None,
            workspaces_failing: std::sync::atomic::AtomicBool::new(false),
            in_flight: Mutex::default(),
            create_lock: Mutex::new(()),
            pool: None,
            lifetimes: Mutex::new(()),
        }
    }

    /// The same, taking members from `pool` for templates that keep one.
    pub fn with_pool(mut self, pool: Arc<pool::Pool>) -> Control {
        self.pool = Some(pool);
        self
    }

    /// Each pooled template's pool as last seen (none without pools).
    pub fn pool_status(&self) -> Vec<pool::PoolStatus> {
        self.pool.as_ref().map(|p| p.status()).unwrap_or_default()
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
        if caller.renews_only.is_some() && !matches!(req, ControlRequest::Renew { .. }) {
            return (
                Outcome::Rejected(ControlError::new(
                    ErrorCode::Forbidden,
                    format!(
                        "a worker's own token may only renew its worker, not {}",
                        req.operation()
                    ),
                )),
                String::new(),
            );
        }
        match req {
            ControlRequest::Renew { worker_id, ttl } => {
                (self.renew(caller, &worker_id, ttl), worker_id)
            }
            ControlRequest::Suspend { worker_id } => (self.suspend(caller, &worker_id), worker_id),
            ControlRequest::Resume { worker_id } => {
                (self.resume(caller, &worker_id, progress), worker_id)
            }
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
            ControlRequest::Stop {
                worker_id,
                delete_workspace,
            } => {
                if let Err(e) = self.reachable(caller, &worker_id) {
                    return (Outcome::Failed(e.into()), worker_id);
                }
                // Said before: the engine may tell watchers of the removal before stop returns.
                self.watch.stopping(&worker_id, "stopped by a caller");
                let stopped = self.backend.stop(&worker_id);
                self.watch.stopped(&worker_id, stopped.is_ok());
                let worker = match stopped {
                    Ok(worker) => worker,
                    Err(e) => return (Outcome::Failed(e.into()), worker_id),
                };
                (self.stopped(worker, delete_workspace), worker_id)
            }
            ControlRequest::Workspaces => (self.workspace_list(caller), String::new()),
            ControlRequest::CopyWorkspace { from_task, task } => (
                self.copy_workspace_of(caller, &from_task, &task),
                String::new(),
            ),
            ControlRequest::DeleteWorkspace { task, scope } => {
                (self.delete_workspace_of(caller, &task, scope), String::new())
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
            ControlRequest::Templates => (self.template_list(caller), String::new()),
            ControlRequest::Create {
                task,
                ttl,
                metadata,
                template,
                from_task,
            } => {
                let template = match self.template_for(caller, template.as_deref()) {
                    Ok(t) => t,
                    Err(e) => return (Outcome::Rejected(e), String::new()),
                };
                let name = template.name.clone();
                let done = match from_task {
                    Some(from) => {
                        self.create_from(caller, &from, task, ttl, metadata, template, progress)
                    }
                    None => self.create(caller, task, ttl, metadata, template, progress),
                };
                self.metrics
                    .worker_create(self.backend.kind().as_str(), &name, done.0.label());
                done
            }
        }
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
                        | ErrorCode::InvalidState
                        | ErrorCode::Forbidden
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
