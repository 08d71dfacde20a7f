//! The Kubernetes backend (k3s or any conformant cluster): one pod per task, owned by its
//! labels, named deterministically from (controller id, task) so the API server itself refuses
//! a second pod for a task — from this replica or another. Nothing about workers is kept in
//! memory: list and stop read the pods' labels every time.
//!
//! - `api`: the API client (TLS with the cluster CA, rotating bearer tokens or a client
//!   certificate, `Status` errors);
//! - `pod`: the worker pod (labels, environment, probe, restrictions, the operator's template);
//! - `status`: what a pod's status says about its worker (state, reason, failure).

pub(crate) mod api;
pub(crate) mod pod;
mod status;

use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

use self::api::{Api, ApiConfig, ApiError, ConfigError, Method, Reason};
use self::status::{Pod, Progress};
use super::api_call::percent_encode;
use super::{labels, worker_env};
use super::{Backend, BackendError, BackendKind, CreateSpec, Logs, Worker, WorkerState};
use crate::settings::{ContainerSettings, K8sSettings};
use crate::time::{now_millis, parse_rfc3339_millis, rfc3339_secs};

/// Grace period a worker pod gets on stop (and on a failed create).
const STOP_GRACE_SECS: u64 = 10;
/// How often create looks at a starting pod.
const POLL: Duration = Duration::from_millis(250);

pub struct K8sBackend {
    api: Api,
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
            api: Api::new(&config),
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

    /// Where callers reach the worker in pod `name`.
    fn url_for(&self, name: &str) -> String {
        let port = self.container.port.to_string();
        match &self.k8s.worker_url {
            Some(t) => t
                .replace("{pod}", name)
                .replace("{namespace}", &self.namespace)
                .replace("{port}", &port),
            None => format!(
                "http://{name}.{}.{}.svc.{}:{port}",
                self.k8s.worker_service, self.namespace, self.k8s.cluster_domain
            ),
        }
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

    /// Pods matching every `key=value` label selector, oldest first.
    fn select(&self, selectors: &[String]) -> Result<Vec<Pod>, BackendError> {
        let path = format!(
            "{}?labelSelector={}",
            self.pods_path(),
            percent_encode(&selectors.join(","))
        );
        let (_, body) = self.api.call(Method::Get, &path, None).map_err(api_error)?;
        let mut pods = status::parse_list(&body).map_err(BackendError::Internal)?;
        pods.sort_by(|a, b| {
            (&a.metadata.creation_timestamp, &a.metadata.name)
                .cmp(&(&b.metadata.creation_timestamp, &b.metadata.name))
        });
        Ok(pods)
    }

    /// Deletes a pod with the grace period; gone already counts as deleted.
    fn delete(&self, name: &str) -> Result<(), BackendError> {
        let path = format!(
            "{}/{name}?gracePeriodSeconds={STOP_GRACE_SECS}",
            self.pods_path()
        );
        match self.api.call(Method::Delete, &path, None) {
            Ok(_)
            | Err(ApiError::Status {
                reason: Reason::NotFound,
                ..
            }) => Ok(()),
            Err(e) => Err(api_error(e)),
        }
    }

    fn delete_quietly(&self, name: &str) {
        if let Err(e) = self.delete(name) {
            log::warn!("could not delete the failed worker pod {name}: {e}");
        }
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
        let created = parse_rfc3339_millis(&pod.metadata.creation_timestamp).unwrap_or(0);
        let (state, reason) = pod.state();
        Some(Worker {
            a2a_url: self.url_for(&pod.metadata.name),
            reason,
            ..Worker::new(
                BackendKind::K8s,
                owned.worker_id,
                task,
                state,
                rfc3339_secs(created / 1000),
            )
            .expiring(owned.expires_at)
        })
    }

    /// The answer to a name collision: the task's existing worker, if this controller owns it.
    fn existing(&self, name: &str) -> BackendError {
        match self.get(name) {
            Ok(Some(mut pod)) => match self.worker_of(&mut pod) {
                Some(w) => BackendError::WorkerExists {
                    worker_id: w.worker_id,
                    state: w.state,
                },
                None => BackendError::Internal(format!(
                    "the pod name {name} is taken by a pod this controller does not own"
                )),
            },
            Ok(None) => BackendError::Internal(format!(
                "pod {name} was being created or deleted by someone else while this create ran; try again"
            )),
            Err(e) => e,
        }
    }

    /// Waits for the pod's `Ready` condition, with a watch on the pod (polling if the API will
    /// not watch); a pod that fails (image pull, crash, cannot be scheduled or configured) or
    /// does not get ready in time is deleted, with the reason.
    fn wait_ready(&self, name: &str) -> Result<(), BackendError> {
        let deadline = Instant::now() + self.ready_timeout;
        let mut last = String::from("it was not scheduled yet");
        let mut watching = true;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                self.delete_quietly(name);
                return Err(BackendError::NotReady(format!(
                    "the pod did not become Ready within {}s: {last}",
                    self.ready_timeout.as_secs_f32()
                )));
            }
            let progress = if watching {
                let path = format!(
                    "{}?watch=1&fieldSelector={}&timeoutSeconds={}",
                    self.pods_path(),
                    percent_encode(&format!("metadata.name={name}")),
                    left.as_secs().max(1)
                );
                let started = Instant::now();
                let watched = self.api.watch(&path, deadline, |kind, object| {
                    if kind == "DELETED" {
                        return Some(gone());
                    }
                    let pod = serde_json::from_value::<Pod>(object.clone()).ok()?;
                    match pod.progress() {
                        Progress::Waiting(why) => {
                            last = why;
                            None
                        }
                        decided => Some(decided),
                    }
                });
                match watched {
                    Ok(Some(decided)) => decided,
                    Ok(None) => {
                        // The stream ended (its timeout, or the server): watch again.
                        if started.elapsed() < POLL {
                            thread::sleep(POLL);
                        }
                        continue;
                    }
                    Err(ApiError::Unreachable(why)) => return Err(BackendError::Unavailable(why)),
                    Err(e) => {
                        log::debug!("watching pod {name} failed ({e}); polling it instead");
                        watching = false;
                        continue;
                    }
                }
            } else {
                match self.get(name)? {
                    None => gone(),
                    Some(pod) => pod.progress(),
                }
            };
            // A failed pod is deleted (a pod already gone is deleted without complaint).
            match progress {
                Progress::Ready => return Ok(()),
                Progress::Waiting(why) => last = why,
                Progress::ImageFailed(why) => {
                    self.delete_quietly(name);
                    return Err(BackendError::ImageNotFound(format!(
                        "{} ({why})",
                        self.container.image
                    )));
                }
                Progress::Failed(why) => {
                    self.delete_quietly(name);
                    return Err(BackendError::NotReady(why));
                }
            }
            thread::sleep(POLL);
        }
    }
}

/// A starting pod that vanished.
fn gone() -> Progress {
    Progress::Failed("the pod disappeared while starting".into())
}

impl Backend for K8sBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::K8s
    }

    fn create(&self, spec: &CreateSpec) -> Result<Worker, BackendError> {
        let redact = |e: BackendError| e.redact(&spec.token);
        let name = labels::pod_name(&self.controller_id, &spec.task);
        let url = self.url_for(&name);
        let env = worker_env::environment(
            spec,
            &url,
            &self.container,
            self.anthropic_auth_token.as_deref(),
        );
        let body = pod::manifest(&pod::PodInputs {
            name: &name,
            namespace: &self.namespace,
            controller_id: &self.controller_id,
            worker_id: &spec.worker_id,
            task: &spec.task,
            expires_at: spec.expires_at,
            env: &env,
            container: &self.container,
            k8s: &self.k8s,
            template: self.template.as_ref(),
        });
        let created = match self.api.call(Method::Post, &self.pods_path(), Some(&body)) {
            Ok((_, bytes)) => Pod::parse(&bytes).map_err(BackendError::Internal)?,
            Err(ApiError::Status {
                reason: Reason::AlreadyExists,
                ..
            }) => return Err(self.existing(&name)),
            Err(e) => return Err(redact(api_error(e))),
        };
        spec.progress.step("pod created");
        let state = if self.ready_timeout.is_zero() {
            WorkerState::Starting
        } else {
            spec.progress.step("waiting for the pod to be ready");
            self.wait_ready(&name).map_err(redact)?;
            spec.progress.step("the pod is ready");
            WorkerState::Running
        };
        let created_at =
            parse_rfc3339_millis(&created.metadata.creation_timestamp).unwrap_or_else(now_millis);
        Ok(Worker {
            a2a_url: url,
            ..Worker::new(
                BackendKind::K8s,
                &spec.worker_id,
                &spec.task,
                state,
                rfc3339_secs(created_at / 1000),
            )
            .expiring(spec.expires_at)
        })
    }

    fn list(&self) -> Result<Vec<Worker>, BackendError> {
        let mut pods = self.select(&labels::owner_selector(&self.controller_id))?;
        Ok(pods.iter_mut().filter_map(|p| self.worker_of(p)).collect())
    }

    fn stop(&self, worker_id: &str) -> Result<Worker, BackendError> {
        let (pod, worker) = self.owned_pod(worker_id)?;
        self.delete(&pod.metadata.name)?;
        Ok(worker)
    }

    fn logs(&self, worker_id: &str, lines: u32) -> Result<Logs, BackendError> {
        let (pod, _) = self.owned_pod(worker_id)?;
        let path = format!(
            "{}/{}/log?container={}&tailLines={lines}",
            self.pods_path(),
            percent_encode(&pod.metadata.name),
            pod::WORKER_CONTAINER
        );
        self.api.log_tail(&path, lines).map_err(api_error)
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
            .map_err(|e| BackendError::Unavailable(e.to_string()))
    }
}

/// An API failure as the seam's error: unreachable or refusing the controller's credentials
/// is `Unavailable`; anything else is `Internal` with the API server's message (RBAC's names
/// the verb and resource it refused).
fn api_error(e: ApiError) -> BackendError {
    match e {
        ApiError::Unreachable(why) => BackendError::Unavailable(why),
        ApiError::Status {
            reason: Reason::Unauthorized,
            message,
            ..
        } => BackendError::Unavailable(format!(
            "the Kubernetes API refused the controller's credentials: {message}"
        )),
        ApiError::Status {
            reason: Reason::TooManyRequests,
            message,
            ..
        } => BackendError::Unavailable(format!("the Kubernetes API is throttling: {message}")),
        ApiError::Status {
            reason: Reason::Forbidden,
            message,
            ..
        } => BackendError::Internal(format!("Kubernetes RBAC refused: {message}")),
        other @ (ApiError::Status { .. } | ApiError::Protocol(_)) => {
            BackendError::Internal(other.to_string())
        }
    }
}
