//! Control operations (`create`, `list`, `stop`, `logs`, and `watch` through [`watch`]) over
//! the backend seam: the guarantees this layer owns (see `backend/mod.rs` for the split of
//! responsibilities): scopes, `MAX_WORKERS` and the callers' `max_workers`, one create at a
//! time where the backend needs it, one log line and one metric sample per operation. The
//! requests are read in [`request`], outcomes and error codes are [`error`]'s, the reaper is
//! [`reaper`]'s, and watchers hear [`watch`].

pub mod caller;
pub mod error;
pub mod reaper;
pub mod request;
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

use crate::backend::{
    Backend, BackendError, CreateSpec, Metadata, Progress, TaskWorkspace, Template, Worker,
    WorkerState, DEFAULT_TEMPLATE,
};
use crate::metrics::Metrics;
use crate::sentry::Sentry;
use crate::settings::templates::TemplatesFile;
use crate::time;
use crate::token::{self, Token};

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

/// `templates`' reply data: what a caller may create from.
#[derive(Serialize)]
struct TemplateList {
    templates: Vec<TemplateInfo>,
}

/// One template as callers see it: what it starts and its limits (never its environment's
/// values, nor its files' paths).
#[derive(Serialize)]
pub struct TemplateInfo {
    pub name: String,
    pub description: String,
    /// The image (docker, k8s) or the program (local).
    pub image: String,
    pub memory_bytes: Option<i64>,
    pub cpus: Option<f64>,
    pub pids_limit: Option<i64>,
    /// Seconds; `None`: none.
    pub ttl: Option<u64>,
    pub max_ttl: Option<u64>,
    pub port: u16,
    /// The workspace's path and size, when the template has one.
    pub workspace: Option<WorkspaceInfo>,
}

#[derive(Serialize)]
pub struct WorkspaceInfo {
    pub path: String,
    pub size: String,
}

impl TemplateInfo {
    pub fn of(t: &Template) -> TemplateInfo {
        TemplateInfo {
            name: t.name.clone(),
            description: t.description.clone(),
            image: if t.image.is_empty() {
                t.command.first().cloned().unwrap_or_default()
            } else {
                t.image.clone()
            },
            memory_bytes: t.memory_bytes,
            cpus: t.nano_cpus.map(|n| n as f64 / 1e9),
            pids_limit: t.pids_limit,
            ttl: t.lifetime.default_ttl.map(|d| d.as_secs()),
            max_ttl: t.lifetime.max_ttl.map(|d| d.as_secs()),
            port: t.port,
            workspace: t.workspace.as_ref().map(|w| WorkspaceInfo {
                path: w.path.clone(),
                size: w.size.clone(),
            }),
        }
    }
}

/// `workspaces`' reply data.
#[derive(Serialize)]
struct Workspaces {
    workspaces: Vec<TaskWorkspace>,
}

/// `delete_workspace`'s reply data, and `stop`'s with `"workspace": "delete"`.
#[derive(Serialize)]
struct Stopped {
    worker: Option<Worker>,
    workspace: Option<TaskWorkspace>,
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

    /// The same, with workspaces deleted this long after their last use.
    pub fn with_workspace_ttl(mut self, ttl: Option<Duration>) -> Control {
        self.workspace_ttl = ttl;
        self
    }

    /// The task workspaces, each with whether a worker of its task exists now.
    pub fn workspaces(&self) -> Result<Vec<TaskWorkspace>, BackendError> {
        let mut spaces = self.backend.workspaces()?;
        if spaces.is_empty() {
            return Ok(spaces);
        }
        let workers = self.backend.list()?;
        for s in &mut spaces {
            s.in_use = workers
                .iter()
                .any(|w| w.task == s.task && w.scope == s.scope);
        }
        spaces.sort_by(|a, b| (&a.created_at, &a.name).cmp(&(&b.created_at, &b.name)));
        Ok(spaces)
    }

    /// Deletes the workspace of `task` in `scope` unless a worker of the task exists.
    fn delete_workspace(&self, scope: &str, task: &str) -> Result<TaskWorkspace, ControlError> {
        let workers = self.backend.list().map_err(ControlError::from)?;
        if let Some(w) = workers.iter().find(|w| w.task == task && w.scope == scope) {
            let mut e = ControlError::from(BackendError::WorkerExists {
                worker_id: w.worker_id.clone(),
                state: w.state,
            });
            e.message = format!(
                "the task's worker {} ({}) still has the workspace: stop it first, or stop it with \"workspace\": \"delete\"",
                w.worker_id,
                w.state.as_str()
            );
            return Err(e);
        }
        self.backend
            .delete_workspace(scope, task)
            .map_err(|e| match e {
                BackendError::NotFound => ControlError::new(
                    ErrorCode::NotFound,
                    format!("task {task:?} has no workspace (in this caller's scope)"),
                ),
                e => ControlError::from(e),
            })
    }

    /// The templates `caller` may create from, by name.
    pub fn templates_for(&self, caller: &Caller) -> Vec<Arc<Template>> {
        let templates = self.templates.current();
        templates
            .all()
            .filter(|t| caller.may_use(&t.name))
            .cloned()
            .collect()
    }

    /// The template a create of `caller` asked for (`None`: `default`), or a refusal naming
    /// the templates it may use (never the others).
    fn template_for(
        &self,
        caller: &Caller,
        asked: Option<&str>,
    ) -> Result<Arc<Template>, ControlError> {
        let name = asked.unwrap_or(DEFAULT_TEMPLATE);
        let templates = self.templates.current();
        match templates.get(name) {
            Some(t) if caller.may_use(name) => Ok(Arc::clone(t)),
            _ => {
                let usable: Vec<&str> = templates
                    .all()
                    .map(|t| t.name.as_str())
                    .filter(|n| caller.may_use(n))
                    .collect();
                let which = if asked.is_none() {
                    "no template was named and this caller may not use default".to_string()
                } else {
                    format!("unknown template {name:?}")
                };
                Err(ControlError::invalid(if usable.is_empty() {
                    format!("{which}: this caller may use no template")
                } else {
                    format!("{which}: this caller may use {}", usable.join(", "))
                }))
            }
        }
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
                if !delete_workspace {
                    self.released(&worker);
                    return (completed(&OneWorker { worker }, None, 0), worker_id);
                }
                match self.backend.delete_workspace(&worker.scope, &worker.task) {
                    Ok(space) => (
                        completed(
                            &Stopped {
                                worker: Some(worker),
                                workspace: Some(space),
                            },
                            None,
                            0,
                        ),
                        worker_id,
                    ),
                    Err(BackendError::NotFound) => (
                        completed(
                            &Stopped {
                                worker: Some(worker),
                                workspace: None,
                            },
                            None,
                            0,
                        ),
                        worker_id,
                    ),
                    Err(e) => {
                        let mut e = ControlError::from(e);
                        e.message = format!(
                            "worker {worker_id} was stopped, but its workspace could not be deleted (delete_workspace tries again): {}",
                            e.message
                        );
                        (Outcome::Failed(e), worker_id)
                    }
                }
            }
            ControlRequest::Workspaces => match self.workspaces() {
                Ok(mut workspaces) => {
                    let scope = caller.visible_scope();
                    workspaces.retain(|w| scope.as_ref().is_none_or(|s| &w.scope == s));
                    (
                        completed(&Workspaces { workspaces }, None, 0),
                        String::new(),
                    )
                }
                Err(e) => (Outcome::Failed(e.into()), String::new()),
            },
            ControlRequest::DeleteWorkspace { task, scope } => {
                // Only an admin names another scope; anyone else's workspace elsewhere is
                // the same not_found as none at all.
                let scope = match scope {
                    Some(s) if caller.admin => s,
                    _ => caller.scope.clone(),
                };
                match self.delete_workspace(&scope, &task) {
                    Ok(space) => (
                        completed(
                            &Stopped {
                                worker: None,
                                workspace: Some(space),
                            },
                            None,
                            0,
                        ),
                        String::new(),
                    ),
                    Err(e) => (Outcome::Failed(e), String::new()),
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
            ControlRequest::Templates => {
                let templates = self
                    .templates_for(caller)
                    .iter()
                    .map(|t| TemplateInfo::of(t))
                    .collect();
                (
                    completed(&TemplateList { templates }, None, 0),
                    String::new(),
                )
            }
            ControlRequest::Create {
                task,
                ttl,
                metadata,
                template,
            } => {
                let template = match self.template_for(caller, template.as_deref()) {
                    Ok(t) => t,
                    Err(e) => return (Outcome::Rejected(e), String::new()),
                };
                let name = template.name.clone();
                let done = self.create(caller, task, ttl, metadata, template, progress);
                self.metrics
                    .worker_create(self.backend.kind().as_str(), &name, done.0.label());
                done
            }
        }
    }

    fn create(
        &self,
        caller: &Caller,
        task: String,
        ttl: Option<Duration>,
        metadata: Metadata,
        template: Arc<Template>,
        progress: Progress,
    ) -> (Outcome, String) {
        let failed = |e: ControlError| (Outcome::Failed(e), String::new());
        if let Err(why) = self.backend.check_task(&task) {
            return (Outcome::Rejected(ControlError::invalid(why)), String::new());
        }
        if let Err(e) = self.workspace_room(caller, &task, &template) {
            return failed(e);
        }
        let ceiling = if template.name == DEFAULT_TEMPLATE {
            "MAX_WORKER_TTL".to_string()
        } else {
            format!("template {}'s max_ttl", template.name)
        };
        let ttl = match ttl_for(&template.lifetime, ttl, &ceiling) {
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
            template,
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

    /// Whether a create of `template` for `task` may make a workspace under the caller's
    /// `max_workspaces` (a task that has one already reuses it).
    fn workspace_room(
        &self,
        caller: &Caller,
        task: &str,
        template: &Template,
    ) -> Result<(), ControlError> {
        let (Some(max), Some(_)) = (caller.max_workspaces, &template.workspace) else {
            return Ok(());
        };
        let spaces = self.backend.workspaces().map_err(ControlError::from)?;
        let mine: Vec<&TaskWorkspace> = spaces.iter().filter(|w| w.scope == caller.scope).collect();
        if mine.iter().any(|w| w.task == task) || mine.len() < max as usize {
            return Ok(());
        }
        Err(ControlError::new(
            ErrorCode::Capacity,
            format!(
                "caller {}'s max_workspaces ({max}) reached in scope {}: delete a workspace first (delete_workspace)",
                caller.name, caller.scope
            ),
        ))
    }

    /// Notes a stopped worker's workspace as used until now (its TTL counts from here).
    fn released(&self, worker: &Worker) {
        if let Err(e) = self.backend.workspace_released(&worker.scope, &worker.task) {
            log::warn!(
                "the workspace of task {:?} could not be marked as used now: {e}",
                worker.task
            );
        }
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
