//! The Kubernetes backend (k3s or any conformant cluster): one pod per task, owned by its
//! labels, named deterministically from (controller id, task) so the API server itself refuses
//! a second pod for a task — from this replica or another. Nothing about workers is kept in
//! memory: list and stop read the pods' labels every time.
//!
//! - `api`: the API client (TLS with the cluster CA, rotating bearer tokens or a client
//!   certificate, `Status` errors, `Warning` headers);
//! - `pod`: the worker pod (labels, environment, probe, restrictions, the operator's template);
//! - `status`: what a pod's status says about its worker (state, reason, failure);
//! - `watch`: following one pod until it is ready, failed or gone;
//! - `check`: what `check` and startup ask the API (access reviews, a dry-run create);
//! - `pool`: warm pools (member pods, claims bound by a gated binding pod);
//! - `copy`: workspace copies, a claim cloned from another (`dataSource`), or filled by a
//!   Job of the controller's image for classes that do not clone (`copy_job`: the Job;
//!   `copy_by_job`: the copy from start to end, and what a cut-off one left);
//! - `refusals`: the API's refusals as the seam's errors.
//!
//! Stopping follows the real API's graceful deletion: `DELETE` answers with the pod still
//! there (`deletionTimestamp` set) until its kubelet confirms, so such a pod is `stopping`; a
//! second stop does not delete it again, and a create for its task waits for it to go. A pod
//! a failed create made is removed at once (grace period 0, only that pod: its `uid` is a
//! precondition), and if the API cannot be reached, in the background until it can.

pub(crate) mod api;
mod check;
mod claim;
mod config;
mod copy;
mod copy_by_job;
mod copy_job;
mod create;
mod fence;
mod lifetime;
pub(crate) mod pod;
mod pool;
mod refusals;
mod replicas;
mod status;
mod suspend;
mod watch;
pub(crate) mod workspace;

use std::path::Path;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use serde_json::{json, Value};

use self::api::{Api, ApiConfig, ApiError, ConfigError, Method, Reason};
use self::refusals::api_error;
use self::status::Pod;
use super::api_call::percent_encode;
use super::labels;
use super::{
    Abilities, Backend, BackendError, BackendKind, Capabilities, Check, CreateSpec, Finding, Logs,
    Refusal, Subject, Worker, WorkerState,
};
use crate::settings::{ContainerSettings, K8sSettings};
use crate::time::parse_rfc3339_millis;

/// Grace period a worker pod gets on stop.
const STOP_GRACE_SECS: u64 = 10;
/// The largest page a list asks for (`limit`; the rest comes with `continue`).
const PAGE: usize = 500;

pub struct K8sBackend {
    api: Arc<Api>,
    namespace: String,
    controller_id: String,
    container: ContainerSettings,
    k8s: K8sSettings,
    ready_timeout: Duration,
    anthropic_auth_token: Option<String>,
    template: Option<Value>,
}

impl K8sBackend {
    /// Reads and checks the credentials and the pod template: whatever is wrong stops startup
    /// with one line naming the setting. `env` and `service_account_dir` locate in-cluster
    /// credentials.
    pub fn new(
        controller_id: &str,
        container: ContainerSettings,
        k8s: K8sSettings,
        ready_timeout: Duration,
        anthropic_auth_token: Option<String>,
        env: &dyn Fn(&str) -> Option<String>,
        service_account_dir: &Path,
    ) -> Result<K8sBackend, ConfigError> {
        let config = ApiConfig::load(&k8s, env, service_account_dir)?;
        let template = match &k8s.pod_template {
            None => None,
            Some(path) => {
                let text = std::fs::read(path).map_err(|e| ConfigError::Unreadable {
                    setting: "K8S_POD_TEMPLATE",
                    path: path.clone(),
                    why: e.to_string(),
                })?;
                let value: Value =
                    serde_json::from_slice(&text).map_err(|e| ConfigError::Invalid {
                        setting: "K8S_POD_TEMPLATE",
                        why: format!("{} is not JSON: {e}", path.display()),
                    })?;
                pod::check_template(&value).map_err(|why| ConfigError::Invalid {
                    setting: "K8S_POD_TEMPLATE",
                    why,
                })?;
                Some(value)
            }
        };
        Ok(K8sBackend {
            api: Arc::new(Api::new(&config)),
            namespace: config.namespace.clone(),
            controller_id: controller_id.to_string(),
            container,
            k8s,
            ready_timeout,
            anthropic_auth_token,
            template,
        })
    }

    fn pods_path(&self) -> String {
        format!("/api/v1/namespaces/{}/pods", self.namespace)
    }

    fn get(&self, name: &str) -> Result<Option<Pod>, BackendError> {
        match self
            .api
            .call(Method::Get, &format!("{}/{name}", self.pods_path()), None)
        {
            Ok((_, body)) => Pod::parse(&body).map(Some).map_err(BackendError::Internal),
            Err(ApiError::Status {
                reason: Reason::NotFound,
                ..
            }) => Ok(None),
            Err(e) => Err(api_error(e)),
        }
    }

    /// The object at `path` read as `T` (the fields used, or the whole object; `what` names it
    /// in an error); `None` when there is none.
    fn get_as<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        what: &str,
    ) -> Result<Option<T>, BackendError> {
        match self.api.call(Method::Get, path, None) {
            Ok((_, body)) => serde_json::from_slice(&body)
                .map(Some)
                .map_err(|e| BackendError::Internal(format!("unexpected {what}: {e}"))),
            Err(ApiError::Status {
                reason: Reason::NotFound,
                ..
            }) => Ok(None),
            Err(e) => Err(api_error(e)),
        }
    }

    /// Pods matching every `key=value` label selector, oldest first, read page by page. Each
    /// page is parsed once; the next one is asked for (on a thread of its own) as soon as its
    /// `continue` token is read, so the API server builds it while this one is parsed.
    fn select(&self, selectors: &[String]) -> Result<Vec<Pod>, BackendError> {
        let base = format!(
            "{}?limit={PAGE}&labelSelector={}",
            self.pods_path(),
            percent_encode(&selectors.join(","))
        );
        let fetch = |token: Option<&str>| -> Result<Vec<u8>, BackendError> {
            let path = match token {
                Some(token) => format!("{base}&continue={}", percent_encode(token)),
                None => base.clone(),
            };
            let (_, body) = self.api.call(Method::Get, &path, None).map_err(api_error)?;
            Ok(body)
        };
        let fetch = &fetch;
        let mut pods = Vec::new();
        thread::scope(|s| -> Result<(), BackendError> {
            let mut body = fetch(None)?;
            loop {
                // The next page: being fetched, or (no thread to be had) to fetch after.
                let mut next = None;
                let page = status::parse_page(&body, &mut |token| {
                    next = token.map(|t| {
                        let kept = t.clone();
                        thread::Builder::new()
                            .name("k8s-page".into())
                            .spawn_scoped(s, move || fetch(Some(&t)))
                            .map_err(|_| kept)
                    });
                });
                let next = next.map(|n| match n {
                    Ok(fetching) => fetching.join().unwrap_or_else(|_| {
                        Err(BackendError::Internal(
                            "reading the next page of pods failed unexpectedly".into(),
                        ))
                    }),
                    Err(token) => fetch(Some(&token)),
                });
                pods.extend(page.map_err(BackendError::Internal)?);
                match next {
                    Some(next) => body = next?,
                    None => return Ok(()),
                }
            }
        })?;
        pods.sort_by(|a, b| {
            (&a.metadata.creation_timestamp, &a.metadata.name)
                .cmp(&(&b.metadata.creation_timestamp, &b.metadata.name))
        });
        Ok(pods)
    }

    /// The pod of a worker this controller owns, and the worker; `NotFound` otherwise.
    fn owned_pod(&self, worker_id: &str) -> Result<(Pod, Worker), BackendError> {
        if !labels::is_label_value(worker_id) {
            // No pod can carry it as a label: it is not one of ours.
            return Err(BackendError::NotFound);
        }
        let pods = self.select(&labels::worker_selector(&self.controller_id, worker_id))?;
        pods.into_iter()
            .find_map(|mut p| {
                let w = self
                    .worker_of(&mut p)
                    .filter(|w| w.worker_id == worker_id)?;
                Some((p, w))
            })
            .ok_or(BackendError::NotFound)
    }

    /// A pod as a worker; `None` when this controller does not own it.
    /// Its labels are taken out of the pod (they move into the worker).
    fn worker_of(&self, pod: &mut Pod) -> Option<Worker> {
        let owned = labels::owned(pod.metadata.labels.take(), &self.controller_id)?;
        // The label holds a label-safe form of the task; the annotation holds the task.
        let task = pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(labels::TASK))
            .cloned()
            .unwrap_or(owned.task);
        // Metadata lives in annotations: label values could not hold it.
        let metadata = pod
            .metadata
            .annotations
            .as_ref()
            .map(labels::meta_of)
            .unwrap_or_default();
        let created = parse_rfc3339_millis(&pod.metadata.creation_timestamp).unwrap_or(0);
        let created_at = labels::created_at(owned.claimed_ms, created);
        let (state, reason) = pod.state();
        let port = pod.worker_port().unwrap_or(self.container.port);
        Some(Worker {
            a2a_url: self.url_for(&pod.metadata.name, port),
            reason,
            ..Worker::new(BackendKind::K8s, owned.worker_id, task, state, created_at)
                .expiring(owned.expires_at)
                .tagged(metadata)
                .scoped(owned.scope)
                .templated(owned.template)
                .hashed(owned.token_hash)
        })
    }
}

/// Deletes pod `name` with a grace period, only if its uid is still `uid` (when given); gone
/// already counts as deleted (`None`), and so does a newer pod of the same name (the uid
/// precondition fails: that one is not ours to delete). The pod as the API answered.
fn delete_pod(
    api: &Api,
    pods_path: &str,
    name: &str,
    grace: u64,
    uid: Option<&str>,
) -> Result<Option<Pod>, ApiError> {
    let path = format!("{pods_path}/{name}?gracePeriodSeconds={grace}");
    let body = uid.map(|uid| {
        json!({"kind": "DeleteOptions", "apiVersion": "v1",
               "gracePeriodSeconds": grace, "preconditions": {"uid": uid}})
    });
    match api.call(Method::Delete, &path, body.as_ref()) {
        Ok((_, bytes)) => Ok(Pod::parse(&bytes).ok()),
        Err(ApiError::Status {
            reason: Reason::NotFound | Reason::Conflict,
            ..
        }) => Ok(None),
        Err(e) => Err(e),
    }
}

impl K8sBackend {
    /// A create's steps (`resuming`: a suspended worker's pod made again, its record kept
    /// until it is up).
    fn create_with(&self, spec: &CreateSpec, resuming: bool) -> Result<Worker, BackendError> {
        let body = self
            .manifest(
                spec,
                &labels::pod_name(&self.controller_id, &spec.scope, &spec.task),
            )
            .map_err(|e| e.redact(&spec.token))?;
        let claim = self.ensure_claim(spec)?;
        if let Some((name, fresh)) = &claim {
            spec.progress.step(&if *fresh {
                format!("the task's workspace claim {name} was made")
            } else {
                format!("the task's workspace claim {name} is there")
            });
        }
        match self.create_pod(spec, &body, resuming) {
            Err(e) if claim.as_ref().is_some_and(|(_, fresh)| *fresh) => {
                let note = self.delete_fresh_claim(spec);
                Err(match e {
                    e @ BackendError::WorkerExists { .. } => e,
                    e => e.with_note(&note),
                })
            }
            other => other,
        }
    }

    /// A suspended worker's pod, made again (`suspend.rs`).
    pub(super) fn create_resumed(&self, spec: &CreateSpec) -> Result<Worker, BackendError> {
        self.create_with(spec, true)
    }
}

impl Backend for K8sBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::K8s
    }

    /// The task's workspace claim first (a pod whose claim does not exist is never
    /// scheduled; a new claim is deleted again if the create fails), then the pod.
    fn create(&self, spec: &CreateSpec) -> Result<Worker, BackendError> {
        self.create_with(spec, false)
    }

    /// The pods, and the records of suspended workers (`suspend.rs`), oldest first.
    fn list(&self) -> Result<Vec<Worker>, BackendError> {
        let mut pods = self.select(&labels::owner_selector(&self.controller_id))?;
        let workers: Vec<Worker> = pods.iter_mut().filter_map(|p| self.worker_of(p)).collect();
        self.with_records(workers)
    }

    /// A pod already in its grace period is not deleted again: it is returned, `stopping`.
    fn stop(&self, worker_id: &str) -> Result<Worker, BackendError> {
        let (pod, mut worker) = match self.owned_pod(worker_id) {
            Err(BackendError::NotFound) => return self.stop_suspended(worker_id),
            other => other?,
        };
        if pod.terminating() {
            // Suspended a moment ago (its pod in its grace period): its record goes too.
            match self.stop_suspended(worker_id) {
                Ok(_) | Err(BackendError::NotFound) => {}
                Err(e) => return Err(e),
            }
            return Ok(worker);
        }
        let answered = delete_pod(
            &self.api,
            &self.pods_path(),
            &pod.metadata.name,
            STOP_GRACE_SECS,
            Some(&pod.metadata.uid),
        )
        .map_err(api_error)?;
        // Deleted with a grace period, the pod stays until its kubelet confirms; unbound or
        // finished, it is gone at once (and the answer says so).
        let stopping = answered.filter(|p| {
            p.terminating() && p.metadata.deletion_grace_period_seconds.unwrap_or(0) > 0
        });
        if let Some(p) = &stopping {
            worker.state = WorkerState::Stopping;
            worker.reason = p.stopping_reason();
        }
        // A pooled worker's pod is its member's, not named after its task: its binding is.
        if pod.metadata.name != labels::pod_name(&self.controller_id, &worker.scope, &worker.task) {
            self.release_binding(&pod.metadata.name, &pod.metadata.uid, stopping.is_none());
        }
        Ok(worker)
    }

    fn logs(&self, worker_id: &str, lines: u32) -> Result<Logs, BackendError> {
        let (pod, _) = match self.owned_pod(worker_id) {
            // A suspended worker has no pod: nothing to read until it is resumed.
            Err(BackendError::NotFound) if !self.records(Some(worker_id))?.is_empty() => {
                return Ok(Logs::none())
            }
            other => other?,
        };
        let path = format!(
            "{}/{}/log?container={}&tailLines={lines}",
            self.pods_path(),
            percent_encode(&pod.metadata.name),
            pod::WORKER_CONTAINER
        );
        match self.api.log_tail(&path, lines) {
            Ok(Some(logs)) => Ok(logs),
            // The API's answer for a pod without a node: no container has run yet.
            Ok(None) => Err(BackendError::NotReady(format!(
                "worker {worker_id} has no output yet: its pod is not on a node ({})",
                pod.state().1
            ))),
            Err(ApiError::Status { code, message, .. })
                if code >= 500 && (message.contains("dial tcp") || message.contains("connect:")) =>
            {
                Err(BackendError::Unavailable(format!(
                    "the API server cannot reach the kubelet of node {} for the worker's output: {message}",
                    pod.spec.node_name
                )))
            }
            Err(e) => Err(api_error(e)),
        }
    }

    fn health(&self) -> Result<(), BackendError> {
        let path = format!(
            "{}?limit=1&labelSelector={}",
            self.pods_path(),
            percent_encode(&labels::owner_selector(&self.controller_id).join(","))
        );
        self.api
            .call(Method::Get, &path, None)
            .map(|_| ())
            .map_err(api_error)
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::CONTAINERS
    }

    fn validate(&self, subject: Subject<'_>) -> Result<(), Refusal> {
        match subject {
            Subject::Template(t) => check::template_refusal(t).and_then(|()| {
                crate::backend::validation::fence_refusal(t, self.container.fence.is_some())
            }),
            Subject::Task(_) => Ok(()),
        }
    }

    fn check(&self, asked: Check<'_>) -> Vec<Finding> {
        match asked {
            Check::Engine => self.findings(),
            Check::Template(t) => vec![self.template_finding(t)],
            Check::Startup(t) => self
                .fence_refusal(t)
                .or_else(|| self.validate_template(t).err())
                .into_iter()
                .map(Finding::failed)
                .collect(),
        }
    }

    /// A watch of this controller's pods (`watch` is in the Role; `watch.rs`); persistent
    /// volume claims with ownership labels (`workspace.rs`); member pods bound to a task by a
    /// gated binding pod and a label patch (`pool.rs`); the expiry as a pod label
    /// (`lifetime.rs`); suspended workers as records (`suspend.rs`).
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
