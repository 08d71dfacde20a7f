//! A worker template: what one kind of worker is started from (its image or program, extra
//! environment, limits, lifetime, port, readiness path, pod template, network, workspace,
//! pool). Reading one from the templates file is `entry.rs`'s; the file is `templates.rs`'s.

use serde_json::Value;
use std::path::PathBuf;

use super::egress::{Egress, Route};
use super::types::Lifetime;
pub use super::types::PoolSize;

/// The template a create without `"template"` gets.
pub const DEFAULT_TEMPLATE: &str = "default";
/// What a worker probes for readiness unless its template says otherwise.
pub const DEFAULT_READY_PATH: &str = "/.well-known/agent-card.json";

/// One template, complete: every field the file left out is the default template's.
#[derive(Debug, Clone, PartialEq)]
pub struct Template {
    pub name: String,
    /// For people (the status page, `templates`); not used otherwise.
    pub description: String,
    /// The worker image (docker, k8s); `""` for the local backend.
    pub image: String,
    /// The tab's program and arguments (local); empty for the container backends.
    pub command: Vec<String>,
    /// The program a resumed tab runs (local), one argument holding `{session_id}`; empty:
    /// its tabs cannot be suspended.
    pub resume_command: Vec<String>,
    /// Extra, non-secret environment, after the contract's variables.
    pub env: Vec<(String, String)>,
    /// Extra environment whose values are read from files at each create (secrets).
    pub env_files: Vec<(String, PathBuf)>,
    /// Limits (docker, k8s; a local tab has none).
    pub memory_bytes: Option<i64>,
    pub nano_cpus: Option<i64>,
    /// The container's process limit (docker only: Kubernetes sets none per pod).
    pub pids_limit: Option<i64>,
    /// The TTL a create of this template gets, and its ceiling.
    pub lifetime: Lifetime,
    /// The port the worker listens on.
    pub port: u16,
    /// What readiness probes (`GET`, answered 200).
    pub ready_path: String,
    /// A pod template of its own (k8s only; checked by that backend, refused by the others'
    /// `validate`), else `K8S_POD_TEMPLATE`.
    pub pod_template: Option<PodTemplate>,
    /// The Docker network workers of this template join, else `DOCKER_NETWORK` (docker only:
    /// the k8s backend refuses it; pods use the cluster's network).
    pub network: Option<String>,
    /// The task's workspace: a volume that outlives its workers.
    pub workspace: Option<Workspace>,
    /// How many started, unbound members of this template each controller id keeps ready
    /// (a warm pool; `0..0`: none): a fixed number, or between a minimum and a maximum after
    /// the demand. A create takes one and binds it to its task.
    pub pool: PoolSize,
    /// What its workers may reach (`open`: anything; otherwise only the egress proxy).
    pub egress: Egress,
    /// Destinations the egress proxy calls for its workers, adding a secret header.
    pub egress_routes: Vec<Route>,
    /// The OCI runtime its containers run on (Docker's `HostConfig.Runtime`, Kubernetes'
    /// `runtimeClassName`); the engine's default without it.
    pub runtime: Option<String>,
}

impl Template {
    /// A template named `name` that starts `image` listening on `port`, with nothing else set
    /// (no limits, no TTL, the Agent Card for readiness, no workspace).
    pub fn new(name: &str, image: &str, port: u16) -> Template {
        Template {
            name: name.to_string(),
            description: String::new(),
            image: image.to_string(),
            command: Vec::new(),
            resume_command: Vec::new(),
            env: Vec::new(),
            env_files: Vec::new(),
            memory_bytes: None,
            nano_cpus: None,
            pids_limit: None,
            lifetime: Lifetime::default(),
            port,
            ready_path: DEFAULT_READY_PATH.to_string(),
            pod_template: None,
            network: None,
            workspace: None,
            pool: PoolSize::NONE,
            egress: Egress::Open,
            egress_routes: Vec::new(),
            runtime: None,
        }
    }
}

pub use super::types::MAX_POOL;

/// A template's own pod template: where it was read from, and what it holds.
#[derive(Debug, Clone, PartialEq)]
pub struct PodTemplate {
    pub path: PathBuf,
    pub value: Value,
}

/// A template's workspace: where it is mounted and how large it may grow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workspace {
    /// Absolute path in the worker (container backends; a local tab starts in it).
    pub path: String,
    /// As written (`2Gi`): a Kubernetes quantity and a label value.
    pub size: String,
    pub size_bytes: u64,
    /// The Kubernetes storage class; the cluster's default without it.
    pub storage_class: Option<String>,
}
