//! The backend seam. Everything above this trait (control operations, protocol, HTTP) is
//! backend-agnostic; everything below it (one module per backend) knows one engine.
//!
//! Which layer owns which guarantee:
//! - **One worker per task** is owned by the backend: [`Backend::create`] must refuse a second
//!   worker for a task with [`BackendError::WorkerExists`]. Backends that get this atomically
//!   from their engine (a deterministic container or pod name that the engine keeps unique)
//!   return `true` from [`Backend::atomic_task_uniqueness`]; then it also holds across
//!   several controllers. A backend that can only check-then-create returns `false`, and the
//!   operation layer serialises that backend's creates within this process.
//! - **`MAX_WORKERS`** is owned by the operation layer (no engine offers a counted quota):
//!   it counts listed workers plus creates in flight under one lock, so one controller never
//!   exceeds it; several controllers sharing one owner id could, together.
//! - **Ownership** (what is listed and stopped) is owned by the backend: it reads its engine's
//!   labels or its state file on every call, never memory.

use std::fmt;

use serde::Serialize;

use crate::token::Token;

/// What `create` asks a backend to start.
#[derive(Debug, Clone)]
pub struct CreateSpec {
    pub worker_id: String,
    pub task: String,
    /// The worker's own bearer token (empty for a backend whose workers have no endpoint).
    pub token: Token,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum WorkerState {
    Starting,
    Running,
    Exited,
    Unknown,
}

impl WorkerState {
    pub fn as_str(self) -> &'static str {
        match self {
            WorkerState::Starting => "starting",
            WorkerState::Running => "running",
            WorkerState::Exited => "exited",
            WorkerState::Unknown => "unknown",
        }
    }
}

/// A worker as callers see it. Every key is always present; what does not apply is `""`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Worker {
    pub worker_id: String,
    pub task: String,
    pub a2a_url: String,
    pub backend: String,
    pub state: WorkerState,
    pub pane_id: String,
    pub session_id: String,
    /// RFC 3339 UTC.
    pub created_at: String,
    /// Why the worker is not running; `""` while it runs.
    pub reason: String,
}

/// A backend's failure. Messages are for people and never contain a token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackendError {
    /// The engine cannot be reached or answered like something else.
    Unavailable(String),
    /// The task already has a worker.
    WorkerExists {
        worker_id: String,
        state: WorkerState,
    },
    /// No worker with that id is owned by this controller (or it does not exist at all: the
    /// two are deliberately the same answer).
    NotFound,
    /// The worker image is not present on the engine.
    ImageNotFound(String),
    /// The worker did not become ready in time and was removed.
    NotReady(String),
    /// Anything else the engine refused.
    Internal(String),
}

impl fmt::Display for BackendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BackendError::Unavailable(why) => write!(f, "backend unavailable: {why}"),
            BackendError::WorkerExists { worker_id, state } => write!(
                f,
                "the task already has worker {worker_id} ({})",
                state.as_str()
            ),
            BackendError::NotFound => f.write_str("no such worker"),
            BackendError::ImageNotFound(image) => write!(f, "worker image {image} not found"),
            BackendError::NotReady(why) => write!(f, "worker did not become ready: {why}"),
            BackendError::Internal(why) => write!(f, "backend error: {why}"),
        }
    }
}

impl std::error::Error for BackendError {}

/// The seam every backend implements. Calls block; each is made from one request thread.
pub trait Backend: Send + Sync {
    /// `docker`, `k8s` or `local`: the `backend` field of its workers.
    fn name(&self) -> &'static str;

    /// Starts one worker for `spec.task`, or refuses with [`BackendError::WorkerExists`].
    /// Anything half-created on a failure path is removed before this returns.
    fn create(&self, spec: &CreateSpec) -> Result<Worker, BackendError>;

    /// Every worker this controller owns, oldest first, read from the engine.
    fn list(&self) -> Result<Vec<Worker>, BackendError>;

    /// Stops and removes a worker this controller owns; returns it as it was.
    fn stop(&self, worker_id: &str) -> Result<Worker, BackendError>;

    /// Whether the engine answers (for `/readiness`).
    fn health(&self) -> Result<(), BackendError>;

    /// Whether [`Backend::create`] refuses a second worker per task atomically in the engine.
    fn atomic_task_uniqueness(&self) -> bool {
        true
    }
}

/// Builds the backend the settings select, or says why it cannot.
pub fn from_settings(
    settings: &crate::settings::Settings,
) -> Result<std::sync::Arc<dyn Backend>, String> {
    use crate::settings::BackendKind;
    match (settings.backend, &settings.container, &settings.docker) {
        (BackendKind::Docker, Some(container), Some(docker)) => {
            Ok(std::sync::Arc::new(crate::docker::DockerBackend::new(
                &settings.controller_id,
                container.clone(),
                docker.clone(),
                settings.worker_ready_timeout,
                settings.anthropic_auth_token.clone(),
            )))
        }
        (kind, _, _) => Err(format!(
            "backend {:?} is not built into this version yet; no worker can be started (use -backend=docker)",
            kind.as_str()
        )),
    }
}
