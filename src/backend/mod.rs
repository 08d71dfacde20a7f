//! The backend seam. Everything above this trait (control operations, protocol, HTTP) is
//! backend-agnostic; everything below it (one folder per backend) knows one engine. This file
//! holds the seam only: the trait, what crosses it, and its error. It imports no backend;
//! `lib.rs` is the one place that builds one.
//!
//! - `docker/`: containers on a Docker (or Podman) engine.
//! - `k8s/`: pods on Kubernetes.
//! - `local/`: WezTerm tabs, recorded in a state file.
//! - `probe`, `labels`, `worker_env`, `api_call`: what every container or pod backend shares
//!   (readiness, ownership labels and deterministic names, the worker's environment, query
//!   encoding, one way to make an engine call).
//!
//! Which layer owns which guarantee:
//! - **One worker per task** is owned by the backend: [`Backend::create`] must refuse a second
//!   worker for a task with [`BackendError::WorkerExists`]. Backends that get this atomically
//!   from their engine (a deterministic container or pod name that the engine keeps unique)
//!   say so in [`Capabilities::atomic_task_uniqueness`]; then it also holds across several
//!   controllers. A backend that can only check-then-create does not, and the operation
//!   layer serialises that backend's creates within this process.
//! - **`MAX_WORKERS`** is owned by the operation layer (no engine offers a counted quota):
//!   it counts listed workers plus creates in flight under one lock, so one controller never
//!   exceeds it; several controllers sharing one owner id could, together.
//! - **Ownership** (what is listed and stopped) is owned by the backend: it reads its engine's
//!   labels or its state file on every call, never memory.

pub(crate) mod api_call;
pub mod changes;
pub mod copies;
pub(crate) mod docker;
#[doc(hidden)]
pub mod fake;
pub(crate) mod k8s;
pub(crate) mod labels;
pub mod lease;
pub(crate) mod local;
pub mod members;
pub mod pools;
pub(crate) mod probe;
pub mod renewal;
pub mod suspension;
pub mod tail;
pub mod validation;
pub(crate) mod worker_env;
pub mod workspaces;

use std::fmt;

use serde::Serialize;

pub use self::changes::{Change, Changes};
pub use self::copies::Copies;
pub use self::members::{Activation, ClaimError, MemberSpec, MemberState, PoolMember};
pub use self::pools::Pools;
pub use self::renewal::Renewal;
pub use self::suspension::{Suspend, Suspension};
pub use self::validation::{Check, Finding, Refusal, Subject};
pub use self::workspaces::{TaskWorkspace, Workspaces};
pub use crate::settings::templates::{Template, DEFAULT_TEMPLATE};
use crate::time::rfc3339_secs;
use crate::token::Token;

/// Which backend: the `backend` field of every worker it reports, and its metric label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    Docker,
    K8s,
    Local,
}

impl BackendKind {
    pub fn as_str(self) -> &'static str {
        match self {
            BackendKind::Docker => "docker",
            BackendKind::K8s => "k8s",
            BackendKind::Local => "local",
        }
    }
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a backend reports how a create is going ("container created", "waiting for the
/// worker's Agent Card", ...): one short line for people per step. Nothing when no one listens.
#[derive(Clone, Default)]
pub struct Progress(Option<std::sync::Arc<Report>>);

/// What receives each step.
type Report = dyn Fn(&str) + Send + Sync;

impl Progress {
    pub fn new(report: impl Fn(&str) + Send + Sync + 'static) -> Progress {
        Progress(Some(std::sync::Arc::new(report)))
    }

    pub fn step(&self, what: &str) {
        if let Some(report) = &self.0 {
            report(what);
        }
    }
}

impl fmt::Debug for Progress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() {
            "Progress(reported)"
        } else {
            "Progress(none)"
        })
    }
}

/// The scope of workers created before scopes existed (no scope label, no `scope` in the state
/// file) and of the `admin` caller: its workers keep the names they had.
pub const ADMIN_SCOPE: &str = "admin";

/// What `create` asks a backend to start.
#[derive(Debug, Clone)]
pub struct CreateSpec {
    pub worker_id: String,
    pub task: String,
    /// The creating caller's scope: stored where ownership lives (a label, the state file) and
    /// returned with the worker. A backend stores it and filters nothing by it (the control
    /// layer decides who sees what); one worker per task holds per scope.
    pub scope: String,
    /// The worker's own bearer token (empty for a backend whose workers have no endpoint).
    pub token: Token,
    /// When the reaper stops it (Unix seconds); `None`: it lives until stopped. Stored where
    /// ownership lives (a label, the state file), so every replica and every restart sees it.
    pub expires_at: Option<u64>,
    /// The caller's tags, stored with the worker the same way (labels, annotations, the state
    /// file) and returned by every operation.
    pub metadata: Metadata,
    /// What it is started from (image or program, limits, port, environment): the template
    /// as it was when the create began. Its name is stored where ownership lives and returned
    /// with the worker; a later change of the template does not touch this worker.
    pub template: std::sync::Arc<Template>,
    /// Where to say how it is going.
    pub progress: Progress,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum WorkerState {
    Starting,
    Running,
    Exited,
    /// Being removed: stopped, but its engine has not finished removing it (a Kubernetes pod
    /// in its grace period, a container Docker is removing). It holds its task's name until it
    /// is gone, and does not count against `MAX_WORKERS`.
    Stopping,
    /// Suspended: not running (no CPU, no memory held), its files and identity kept; it
    /// holds its task, does not count against `MAX_WORKERS`, and runs again on `resume`.
    Suspended,
    Unknown,
}

impl WorkerState {
    /// Every state, in the order the docs name them.
    pub const ALL: [WorkerState; 6] = [
        WorkerState::Starting,
        WorkerState::Running,
        WorkerState::Exited,
        WorkerState::Stopping,
        WorkerState::Suspended,
        WorkerState::Unknown,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            WorkerState::Starting => "starting",
            WorkerState::Running => "running",
            WorkerState::Exited => "exited",
            WorkerState::Stopping => "stopping",
            WorkerState::Suspended => "suspended",
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
    pub backend: BackendKind,
    pub state: WorkerState,
    /// The WezTerm pane of the worker's tab (local backend only; `""` elsewhere).
    pub pane_id: String,
    /// The Claude Code session bound to the task's file (local backend only; `""` elsewhere).
    pub session_id: String,
    /// RFC 3339 UTC.
    pub created_at: String,
    /// Why the worker is not running; `""` while it runs.
    pub reason: String,
    /// When the reaper stops it (RFC 3339 UTC); `""` when it has no TTL.
    pub expires_at: String,
    /// The caller's tags from create (`{}` when none); never used for ownership.
    pub metadata: Metadata,
    /// The scope of the caller that created it ([`ADMIN_SCOPE`] for workers made before scopes).
    pub scope: String,
    /// The template it was made from ([`DEFAULT_TEMPLATE`] for workers made before templates).
    pub template: String,
    /// The one-way hash of its token, as stored with it ([`crate::token::Token::hash`]; `""`
    /// when none is, as for workers made before it was): what lets a worker renew itself with
    /// its own token while the controller keeps no token. Never sent to a caller.
    #[serde(skip)]
    pub token_hash: String,
}

/// A caller's tags on a worker: at most [`MAX_METADATA_KEYS`] keys of
/// `[a-z0-9][a-z0-9._-]{0,62}`, values of at most [`MAX_METADATA_VALUE`] printable characters
/// (checked by the control layer before a backend sees them).
pub type Metadata = std::collections::BTreeMap<String, String>;
pub const MAX_METADATA_KEYS: usize = 16;
pub const MAX_METADATA_VALUE: usize = 256;

impl Worker {
    /// A worker as a backend reports it; what does not apply to it stays `""` (`a2a_url`,
    /// `pane_id`, `session_id`, `reason`) until the backend sets it.
    pub fn new(
        backend: BackendKind,
        worker_id: impl Into<String>,
        task: impl Into<String>,
        state: WorkerState,
        created_at: impl Into<String>,
    ) -> Worker {
        Worker {
            worker_id: worker_id.into(),
            task: task.into(),
            a2a_url: String::new(),
            backend,
            state,
            pane_id: String::new(),
            session_id: String::new(),
            created_at: created_at.into(),
            reason: String::new(),
            expires_at: String::new(),
            metadata: Metadata::new(),
            scope: ADMIN_SCOPE.to_string(),
            template: DEFAULT_TEMPLATE.to_string(),
            token_hash: String::new(),
        }
    }

    /// The same, made from template `template`.
    pub fn templated(mut self, template: impl Into<String>) -> Worker {
        self.template = template.into();
        self
    }

    /// The same, in `scope`.
    pub fn scoped(mut self, scope: impl Into<String>) -> Worker {
        self.scope = scope.into();
        self
    }

    /// The same, with the caller's tags.
    pub fn tagged(mut self, metadata: Metadata) -> Worker {
        self.metadata = metadata;
        self
    }

    /// The same, with the hash of its token as stored with it.
    pub fn hashed(mut self, token_hash: impl Into<String>) -> Worker {
        self.token_hash = token_hash.into();
        self
    }

    /// The same, expiring at `expires_at` (Unix seconds), if given.
    pub fn expiring(mut self, expires_at: Option<u64>) -> Worker {
        self.expires_at = expires_at.map(rfc3339_secs).unwrap_or_default();
        self
    }
}

/// The end of a worker's output, as `logs` returns it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Logs {
    pub text: String,
    /// Whether the size bound ([`tail::MAX_LOG_BYTES`]) cut what was asked for.
    pub truncated: bool,
}

impl Logs {
    /// No output (a suspended worker's, whose process is gone until it is resumed).
    pub fn none() -> Logs {
        Logs {
            text: String::new(),
            truncated: false,
        }
    }
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
    /// The worker did not become ready in time (what became of it is in the text).
    NotReady(String),
    /// The cluster's admission refused the worker this configuration builds (Kubernetes'
    /// PodSecurity or ServiceAccount admission): the engine's own words.
    Rejected(String),
    /// The engine's own quota is exhausted (a Kubernetes ResourceQuota).
    Capacity(String),
    /// What the controller cannot do in the state it finds, or as it is set up (a workspace
    /// copy without a copy image, of a storage class that does not clone, to a task that has
    /// one by now): the whole sentence.
    Refused(String),
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
            BackendError::ImageNotFound(image) => write!(f, "worker image not found: {image}"),
            BackendError::NotReady(why) => write!(f, "worker did not become ready: {why}"),
            BackendError::Rejected(why) => write!(f, "the cluster rejected the worker: {why}"),
            BackendError::Capacity(why) => write!(f, "no capacity for the worker: {why}"),
            BackendError::Refused(why) => f.write_str(why),
            BackendError::Internal(why) => write!(f, "backend error: {why}"),
        }
    }
}

impl std::error::Error for BackendError {}

impl BackendError {
    /// The same error with `note` added to its text (what became of what the failed call
    /// had made); an error without text is returned as it is.
    pub fn with_note(self, note: &str) -> BackendError {
        self.map_text(|s| format!("{s}; {note}"))
    }

    /// The same error with its text (if it has one) passed through `f`.
    fn map_text(self, f: impl Fn(String) -> String) -> BackendError {
        match self {
            BackendError::Unavailable(s) => BackendError::Unavailable(f(s)),
            BackendError::ImageNotFound(s) => BackendError::ImageNotFound(f(s)),
            BackendError::NotReady(s) => BackendError::NotReady(f(s)),
            BackendError::Rejected(s) => BackendError::Rejected(f(s)),
            BackendError::Capacity(s) => BackendError::Capacity(f(s)),
            BackendError::Refused(s) => BackendError::Refused(f(s)),
            BackendError::Internal(s) => BackendError::Internal(f(s)),
            other @ (BackendError::WorkerExists { .. } | BackendError::NotFound) => other,
        }
    }

    /// The same error with every occurrence of `token` replaced: engine messages may quote
    /// what they were given, and a worker's token never leaves the backend in an error.
    pub fn redact(self, token: &Token) -> BackendError {
        let secret = token.expose();
        if secret.is_empty() {
            return self;
        }
        self.map_text(|s| s.replace(secret, "<redacted>"))
    }
}

/// What a backend can promise, beside what it does. The optional abilities (a change stream,
/// workspaces, pools, renewal, suspension) are not flags here: each is a trait reached through
/// [`Backend::abilities`], so having one and implementing it cannot disagree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// Whether [`Backend::create`] refuses a second worker per task atomically in the engine
    /// (then it also holds across several controllers); without, the operation layer
    /// serialises this backend's creates within this process.
    pub atomic_task_uniqueness: bool,
    /// Whether workers have an endpoint of their own, and so a token. Without one, `create`
    /// hands out an empty token and none is generated.
    pub endpoints: bool,
}

impl Capabilities {
    /// A container or pod per worker: named for its task (so the engine keeps one per task)
    /// and reached at an endpoint of its own.
    pub const CONTAINERS: Capabilities = Capabilities {
        atomic_task_uniqueness: true,
        endpoints: true,
    };
}

/// The optional abilities of a backend, each a small trait of its own beside the seam (one
/// file each), present when the backend has it. What the control layer does without one is
/// said on each field.
#[derive(Clone, Copy, Default)]
pub struct Abilities<'a> {
    /// The engine's change stream ([`Changes`]); without, watchers rely on listing alone.
    pub changes: Option<&'a dyn Changes>,
    /// Task workspaces ([`Workspaces`]); without, a template with a `workspace` is refused by
    /// [`Backend::validate`].
    pub workspaces: Option<&'a dyn Workspaces>,
    /// Warm pools ([`Pools`]); without, a template with a `pool` is refused when templates
    /// are read.
    pub pools: Option<&'a dyn Pools>,
    /// Lifetimes that change after create ([`Renewal`]); without, `renew` is refused.
    pub renewal: Option<&'a dyn Renewal>,
    /// Suspend and resume ([`Suspension`]); without, both are refused.
    pub suspension: Option<&'a dyn Suspension>,
    /// Workspace copies ([`Copies`]); without, `copy_workspace` and create's `from_task` are
    /// refused.
    pub copies: Option<&'a dyn Copies>,
}

/// The seam every backend implements. Calls block; each is made from one request thread.
pub trait Backend: Send + Sync {
    /// Which backend this is: the `backend` field of its workers.
    fn kind(&self) -> BackendKind;

    /// What it promises ([`Capabilities`]).
    fn capabilities(&self) -> Capabilities;

    /// Starts one worker for `spec.task`, or refuses with [`BackendError::WorkerExists`].
    /// Anything half-created on a failure path is removed before this returns.
    fn create(&self, spec: &CreateSpec) -> Result<Worker, BackendError>;

    /// Every worker this controller owns, oldest first, read from the engine.
    fn list(&self) -> Result<Vec<Worker>, BackendError>;

    /// Stops and removes a worker this controller owns; returns it as it was.
    fn stop(&self, worker_id: &str) -> Result<Worker, BackendError>;

    /// The last `lines` lines (at most [`tail::MAX_TAIL_LINES`]) of the output of a worker
    /// this controller owns, within [`tail::MAX_LOG_BYTES`]; [`BackendError::NotFound`] for
    /// any other id. What it returns is never logged.
    fn logs(&self, worker_id: &str, lines: u32) -> Result<Logs, BackendError>;

    /// Whether the engine answers (for `/readiness`).
    fn health(&self) -> Result<(), BackendError>;

    /// Validation's first step, without the engine ([`Subject`]): whether this backend can
    /// start workers from a template at all, or take a task's name. By default, everything.
    fn validate(&self, _subject: Subject<'_>) -> Result<(), Refusal> {
        Ok(())
    }

    /// Validation's second step, asking the engine ([`Check`]). By default: the engine
    /// answers; a template passes the first step; nothing to dry-run at startup.
    fn check(&self, asked: Check<'_>) -> Vec<Finding> {
        match asked {
            Check::Engine => vec![Finding::of_health(self.health())],
            Check::Template(t) => vec![Finding::of(self.validate(Subject::Template(t)), "usable")],
            Check::Startup(_) => Vec::new(),
        }
    }

    /// The optional abilities it has ([`Abilities`]); by default none.
    fn abilities(&self) -> Abilities<'_> {
        Abilities::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction_removes_the_token_everywhere() {
        let token = Token::from_secret("s3cr3t-token".into());
        let e = BackendError::Internal("env s3cr3t-token and s3cr3t-token".into()).redact(&token);
        assert_eq!(
            e,
            BackendError::Internal("env <redacted> and <redacted>".into())
        );
        let e = BackendError::NotReady("s3cr3t-token".into()).redact(&token);
        assert!(!e.to_string().contains("s3cr3t"));
        let empty = Token::from_secret(String::new());
        let e = BackendError::Unavailable("x".into()).redact(&empty);
        assert_eq!(e, BackendError::Unavailable("x".into()));
    }

    #[test]
    fn workers_serialize_every_key_and_the_kind_in_lowercase() {
        let w = Worker::new(
            BackendKind::K8s,
            "w1",
            "t",
            WorkerState::Starting,
            "2026-01-01T00:00:00Z",
        );
        let v = serde_json::to_value(&w).unwrap();
        assert_eq!(v["backend"], "k8s");
        assert_eq!(v["a2a_url"], "");
        assert_eq!(v["expires_at"], "", "no TTL");
        assert_eq!(v["metadata"], serde_json::json!({}), "present when empty");
        assert_eq!(
            v["scope"], ADMIN_SCOPE,
            "the admin scope unless a backend says another"
        );
        assert_eq!(v["template"], DEFAULT_TEMPLATE);
        assert_eq!(v.as_object().unwrap().len(), 13);
        let v = serde_json::to_value(w.expiring(Some(1_900_000_000))).unwrap();
        assert_eq!(v["expires_at"], "2030-03-17T17:46:40Z");
    }
}
