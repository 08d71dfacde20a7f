//! Internals that integration tests and fuzz targets reach into. Not an API: it changes with
//! the code it exposes. Part of the composition root (it names backends).

pub use crate::backend::docker::engine::{negotiate_version, Engine};
pub use crate::backend::docker::wire::{error_message, parse_inspect, parse_list, Summary};
pub use crate::backend::k8s::api::{
    Api as K8sApi, ApiConfig as K8sApiConfig, ApiError as K8sApiError,
    ConfigError as K8sConfigError, Method as K8sMethod, Reason as K8sReason,
    SERVICE_ACCOUNT_DIR as K8S_SERVICE_ACCOUNT_DIR,
};
pub use crate::backend::k8s::pod::{
    binding_manifest as k8s_binding_pod, check_template, manifest as k8s_pod,
    member_manifest as k8s_member_pod, PodInputs,
};
pub use crate::backend::k8s::workspace::manifest as k8s_claim;
pub use crate::backend::k8s::K8sBackend;
pub use crate::backend::labels::MemberLabels;
pub use crate::backend::labels::{container_name, owner_selector, pod_name};
pub use crate::backend::local::store::{Record as LocalRecord, Store as LocalStore};
pub use crate::backend::local::task::{session_id, task_file};
pub use crate::backend::local::LocalBackend;
pub use crate::backend::worker_env::environment as worker_environment;
pub use crate::hash::sha256;
pub use crate::metrics::Metrics;
