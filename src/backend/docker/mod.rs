//! The Docker backend: one container per worker, owned by its three labels, named
//! deterministically from (controller id, task) so the engine itself refuses a second
//! container for a task. Nothing about workers is kept in memory.
//!
//! - `engine`: the Docker Engine API client (typed answers and errors);
//! - `unix_socket`: the ureq transport it runs over;
//! - `check`: what `validate` and `check` ask of a template;
//! - `watcher`: the change stream (`/events`), and which worker an event is about;
//! - `ended`: what a `die` event said, until a list has read it;
//! - `workspace`: task workspaces as named volumes;
//! - `pool`: warm pools (members, claims through a binding and a rename);
//! - `copy`: workspace copies, by a short-lived container of the controller's own image.

mod check;
mod copy;
mod create;
mod ended;
pub(crate) mod engine;
mod fence;
mod lifetime;
mod pool;
mod status;
mod unix_socket;
mod watcher;
pub(crate) mod wire;
mod workspace;

use std::time::Duration;

use self::engine::Engine;
use self::wire::{EngineError, Summary};
use super::labels;
use super::probe::Probe;
use super::{
    Abilities, Backend, BackendError, BackendKind, Capabilities, Check, CreateSpec, Finding, Logs,
    Refusal, Subject, Worker, Workspaces,
};
use crate::settings::{ContainerSettings, DockerSettings};

/// Grace period a worker gets between SIGTERM and SIGKILL on stop.
const STOP_GRACE_SECS: u64 = 10;

pub struct DockerBackend {
    engine: Engine,
    controller_id: String,
    container: ContainerSettings,
    docker: DockerSettings,
    anthropic_auth_token: Option<String>,
    probe: Probe,
    /// The time of the last engine event followed (Unix seconds): a reconnect asks from it.
    events_since: std::sync::Mutex<Option<i64>>,
    /// What an inspect said of a listed container that is not running (or shows no port), by
    /// container id, kept while the list shows it the same way ([`seen_as`]): a list of many
    /// exited workers inspects each once, not every time.
    records: std::sync::Mutex<std::collections::HashMap<String, status::Record>>,
    /// Containers whose `die` came lately: a list inspects them rather than trust its state.
    ended: ended::Ended,
}

/// How long one `/events` call runs before it is made again (a quiet stream has no
/// heartbeat; the watch source re-checks that someone still watches).
const EVENTS_CALL: Duration = Duration::from_secs(30);

impl DockerBackend {
    pub fn new(
        controller_id: &str,
        container: ContainerSettings,
        docker: DockerSettings,
        ready_timeout: Duration,
        anthropic_auth_token: Option<String>,
    ) -> DockerBackend {
        DockerBackend {
            engine: Engine::new(docker.socket.clone()),
            controller_id: controller_id.to_string(),
            container,
            docker,
            anthropic_auth_token,
            probe: Probe::new(ready_timeout),
            events_since: std::sync::Mutex::new(None),
            records: std::sync::Mutex::new(std::collections::HashMap::new()),
            ended: ended::Ended::default(),
        }
    }
}

impl Backend for DockerBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Docker
    }

    /// The task's workspace first (a new one is removed again if the create fails), then the
    /// container.
    fn create(&self, spec: &CreateSpec) -> Result<Worker, BackendError> {
        let fresh = self.ensure_workspace(spec)?;
        if spec.template.workspace.is_some() {
            spec.progress.step(if fresh {
                "the task's workspace was made"
            } else {
                "the task's workspace is there"
            });
        }
        match self.create_container(spec) {
            Err(e) if fresh => {
                let note = self.remove_fresh_workspace(spec);
                Err(match e {
                    e @ BackendError::WorkerExists { .. } => e,
                    e => e.with_note(&note),
                })
            }
            other => other,
        }
    }

    /// The containers, then the leases (one more engine call: a thread and a second
    /// connection per list cost more memory under load than the call's time).
    fn list(&self) -> Result<Vec<Worker>, BackendError> {
        let listing = self
            .engine
            .list(&labels::owner_selector(&self.controller_id))
            .map_err(engine_error)?;
        let leases = self.leases(None)?;
        let mut containers = listing.containers().map_err(engine_error)?;
        let listed: std::collections::HashSet<String> =
            containers.iter().map(|c| c.id.to_string()).collect();
        let mut workers = Vec::with_capacity(containers.len());
        let mut bindings = None;
        let died = self.ended.lately();
        for c in &mut containers {
            if let Some(w) = self.listed_worker(c, &died, &mut bindings)? {
                let c: &Summary = c;
                workers.push((c.created, c.name(), w));
            }
        }
        self.keep_records_of(&listed);
        self.ended.keep_only(&listed);
        workers.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        self.with_leases(workers.into_iter().map(|(_, _, w)| w).collect(), leases)
    }

    fn stop(&self, worker_id: &str) -> Result<Worker, BackendError> {
        let status::Found {
            container,
            worker,
            binding,
            mounts_workspace,
        } = self.owned_container(worker_id)?;
        // Its workspace's last use, while the worker still holds it (see `workspace`); a
        // container the engine lists without that volume has none to stamp.
        if mounts_workspace {
            if let Err(e) = Workspaces::released(self, &worker.scope, &worker.task) {
                log::debug!(
                    "the workspace of worker {worker_id} was not stamped before its stop: {e}"
                );
            }
        }
        self.engine
            .stop(&container, STOP_GRACE_SECS)
            .map_err(engine_error)?;
        self.engine.remove(&container).map_err(engine_error)?;
        if let Some(volume) = binding {
            if let Err(e) = self.engine.remove_volume(&volume) {
                log::warn!(
                    "the binding {volume} of a stopped worker was left (the pool sweeps it): {e}"
                );
            }
        }
        self.remove_leases(worker_id);
        Ok(worker)
    }

    fn logs(&self, worker_id: &str, lines: u32) -> Result<Logs, BackendError> {
        let found = self.owned_container(worker_id)?;
        self.engine
            .logs(&found.container, lines)
            .map_err(engine_error)
    }

    fn health(&self) -> Result<(), BackendError> {
        self.engine.ping().map_err(engine_error)
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::CONTAINERS
    }

    fn validate(&self, subject: Subject<'_>) -> Result<(), Refusal> {
        match subject {
            Subject::Template(t) => check::template_refusal(t)
                .and_then(|()| check::fence_settings_refusal(t, self.container.fence.is_some())),
            Subject::Task(_) => Ok(()),
        }
    }

    fn check(&self, asked: Check<'_>) -> Vec<Finding> {
        self.findings(asked)
    }

    /// Docker's `/events` for this controller's containers (`watcher.rs`); named volumes with
    /// ownership labels and last-use stamps (`workspace.rs`); member containers bound to a
    /// task by a binding volume (`pool.rs`); lifetimes and suspensions as record volumes
    /// (`lifetime.rs`).
    fn abilities(&self) -> Abilities<'_> {
        Abilities {
            changes: Some(self),
            workspaces: Some(self),
            pools: Some(self),
            renewal: Some(self),
            suspension: Some(self),
            copies: Some(self),
        }
    }
}

fn engine_error(e: EngineError) -> BackendError {
    match e {
        EngineError::Unreachable(why) => BackendError::Unavailable(why),
        EngineError::Status { status, message } if status >= 500 => {
            BackendError::Internal(format!("docker engine error {status}: {message}"))
        }
        EngineError::Status { status, message } => {
            BackendError::Internal(format!("docker engine refused ({status}): {message}"))
        }
        EngineError::Protocol(why) => BackendError::Unavailable(why),
    }
}

/// 409 is Docker's name conflict; Podman answers 500 with "already in use" to a create, and
/// with `name "X" is in use: container already exists` to a rename.
fn is_name_conflict(e: &EngineError) -> bool {
    match e {
        EngineError::Status { status: 409, .. } => true,
        EngineError::Status {
            status: 500,
            message,
        } => message.contains("already in use") || message.contains("container already exists"),
        _ => false,
    }
}

fn short(id: &str) -> &str {
    id.get(..12).unwrap_or(id)
}
