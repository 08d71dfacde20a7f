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
//! - `refusals`: the API's refusals as the seam's errors.
//!
//! Stopping follows the real API's graceful deletion: `DELETE` answers with the pod still
//! there (`deletionTimestamp` set) until its kubelet confirms, so such a pod is `stopping`; a
//! second stop does not delete it again, and a create for its task waits for it to go. A pod
//! a failed create made is removed at once (grace period 0, only that pod: its `uid` is a
//! precondition), and if the API cannot be reached, in the background until it can.

pub(crate) mod api;
mod check;
pub(crate) mod pod;
mod pool;
mod refusals;
mod status;
mod watch;
pub(crate) mod workspace;

use std::path::Path;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use self::api::{Api, ApiConfig, ApiError, ConfigError, Method, Reason};
use self::refusals::{api_error, create_error};
use self::status::{Pod, Progress};
use super::api_call::percent_encode;
use super::{labels, worker_env};
use super::{
    Backend, BackendError, BackendKind, Change, CreateSpec, Finding, Logs, TaskWorkspace, Template,
    Worker, WorkerState,
};
use crate::settings::{ContainerSettings, K8sSettings};
use crate::time::{now_millis, parse_rfc3339_millis, rfc3339_secs};

/// Grace period a worker pod gets on stop.
const STOP_GRACE_SECS: u64 = 10;
/// How long a failed create's pod is retried for removal while the API cannot be reached.
const CLEANUP_FOR: Duration = Duration::from_secs(3600);
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

    /// Where callers reach the worker in pod `name`, listening on `port`.
    fn url_for(&self, name: &str, port: u16) -> String {
        let port = port.to_string();
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

    /// The pod template a worker of `template` is made with: its own, else `K8S_POD_TEMPLATE`.
    fn pod_template<'a>(&'a self, template: &'a Template) -> Option<&'a Value> {
        match &template.pod_template {
            Some(own) => Some(&own.value),
            None => self.template.as_ref(),
        }
    }

    /// The pod this backend sends to create `spec`'s worker in pod `name`.
    fn manifest(&self, spec: &CreateSpec, name: &str) -> Result<Value, BackendError> {
        let env = worker_env::environment(
            spec,
            &self.url_for(name, spec.template.port),
            &self.container,
            self.anthropic_auth_token.as_deref(),
        )?;
        Ok(pod::manifest(&pod::PodInputs {
            name,
            namespace: &self.namespace,
            controller_id: &self.controller_id,
            worker_id: &spec.worker_id,
            task: &spec.task,
            scope: &spec.scope,
            expires_at: spec.expires_at,
            metadata: &spec.metadata,
            env: &env,
            worker: &spec.template,
            k8s: &self.k8s,
            pod_template: self.pod_template(&spec.template),
            workspace_claim: spec
                .template
                .workspace
                .as_ref()
                .map(|_| workspace::claim_name(&self.controller_id, &spec.scope, &spec.task))
                .as_deref(),
        }))
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
        let (state, reason) = pod.state();
        let port = pod.worker_port().unwrap_or(self.container.port);
        Some(Worker {
            a2a_url: self.url_for(&pod.metadata.name, port),
            reason,
            ..Worker::new(
                BackendKind::K8s,
                owned.worker_id,
                task,
                state,
                rfc3339_secs(created / 1000),
            )
            .expiring(owned.expires_at)
            .tagged(metadata)
            .scoped(owned.scope)
            .templated(owned.template)
        })
    }

    /// Creates pod `name` from `body`. A name collision is answered with the task's existing
    /// worker, read once; one that is still stopping (its grace period) is waited for, until
    /// `deadline`, then the create is tried again; one that does not go in time is the task's
    /// worker, `stopping`.
    fn post(
        &self,
        spec: &CreateSpec,
        name: &str,
        body: &Value,
        deadline: Instant,
    ) -> Result<Pod, BackendError> {
        let path = format!("{}?fieldValidation=Strict", self.pods_path());
        let mut waited = false;
        loop {
            let refused = match self.api.call(Method::Post, &path, Some(body)) {
                Ok((_, bytes)) => return Pod::parse(&bytes).map_err(BackendError::Internal),
                Err(e) => e,
            };
            if !matches!(
                refused,
                ApiError::Status {
                    reason: Reason::AlreadyExists,
                    ..
                }
            ) {
                return Err(create_error(
                    refused,
                    self.pod_template(&spec.template).is_some(),
                ));
            }
            let holder = match self.get(name)? {
                Some(old) => self.holder(name, old)?,
                None => pool::Holder::Freed,
            };
            let (pod, uid, reason, previous, binding) = match holder {
                // It went between the two calls (or held nothing): try again, once.
                pool::Holder::Freed if waited => {
                    return Err(BackendError::Internal(format!(
                        "pod {name} was being created or deleted by someone else while this create ran; try again"
                    )));
                }
                pool::Holder::Freed => {
                    waited = true;
                    continue;
                }
                holder @ pool::Holder::Claiming { .. } => return Err(holder.exists()),
                pool::Holder::Worker {
                    pod,
                    uid,
                    reason,
                    worker,
                    binding,
                } => (pod, uid, reason, worker, binding),
            };
            let exists = BackendError::WorkerExists {
                worker_id: previous.worker_id.clone(),
                state: previous.state,
            };
            if previous.state != WorkerState::Stopping || waited || Instant::now() >= deadline {
                return Err(exists);
            }
            spec.progress.step(&format!(
                "waiting for the task's previous worker {} to finish stopping: it is {reason}",
                previous.worker_id
            ));
            let gone = self.follow(&pod, deadline, |p| match p {
                None => Some(()),
                Some(p) if p.metadata.uid != uid => Some(()),
                Some(_) => None,
            })?;
            if gone.is_none() {
                return Err(exists);
            }
            // A pooled worker's name was held by its binding: free it too.
            if let Some(b) = &binding {
                self.unbind(b)?;
            }
            spec.progress.step("the previous pod is gone");
            waited = true;
        }
    }

    /// Waits for the pod's `Ready` condition until `deadline`. An unschedulable pod is waited
    /// for too (an autoscaler may add a node), with the scheduler's message as a step; a pod
    /// that fails (image pull, crash, configuration), is deleted by someone else, or is not
    /// ready in time, ends the wait with the reason.
    fn wait_ready(&self, name: &str, spec: &CreateSpec, deadline: Instant) -> Result<(), Failure> {
        let mut last = String::from("it was not scheduled yet");
        let mut said = String::new();
        let decided = self.follow(name, deadline, |pod| {
            let Some(pod) = pod else {
                return Some(Err(Failure::Gone(BackendError::NotReady(
                    "the pod disappeared while it started (deleted by someone else)".into(),
                ))));
            };
            match pod.progress() {
                Progress::Ready => Some(Ok(())),
                Progress::Waiting(why) => {
                    last = why;
                    None
                }
                Progress::Unschedulable(message) => {
                    if message != said {
                        spec.progress
                            .step(&format!("the pod cannot be scheduled yet: {message}"));
                        said = message.clone();
                    }
                    last = format!("the pod cannot be scheduled: {message}");
                    None
                }
                Progress::ImageFailed(why) => Some(Err(Failure::Ours(
                    BackendError::ImageNotFound(format!("{} ({why})", spec.template.image)),
                ))),
                Progress::Failed(why) => Some(Err(Failure::Ours(BackendError::NotReady(why)))),
                Progress::Deleted(why) => Some(Err(Failure::Gone(BackendError::NotReady(why)))),
            }
        });
        match decided {
            Ok(Some(end)) => end,
            Ok(None) => {
                let event = self
                    .last_warning(name)
                    .filter(|e| !last.contains(e.split_once(": ").map_or(e.as_str(), |x| x.1)))
                    .map(|e| format!(" (last warning event: {e})"))
                    .unwrap_or_default();
                Err(Failure::Ours(BackendError::NotReady(format!(
                    "the pod did not become Ready within {}s: {last}{event}",
                    self.ready_timeout.as_secs_f32()
                ))))
            }
            Err(e) => Err(Failure::Ours(e)),
        }
    }

    /// Removes the pod a failed create made (`uid`, so never a newer pod of the task), at
    /// once: its token was never handed out. Returns the error with what became of the pod.
    fn discard(&self, name: &str, uid: &str, error: BackendError) -> BackendError {
        match delete_pod(&self.api, &self.pods_path(), name, 0, Some(uid)) {
            Ok(_) => match self.get(name) {
                Ok(Some(p)) if p.metadata.uid == uid => {
                    error.with_note(&format!("its pod {name} is being removed"))
                }
                Ok(_) => error.with_note("its pod was removed"),
                Err(e) => error.with_note(&format!(
                    "its pod {name} was deleted, but whether it is gone could not be read: {e}"
                )),
            },
            Err(ApiError::Unreachable(why)) => {
                self.remove_later(name, uid);
                log::warn!(
                    "the pod {name} of a failed create could not be removed ({why}); retrying until the API answers"
                );
                error.with_note(&format!(
                    "its pod {name} could not be removed yet (the Kubernetes API is unreachable); the controller keeps trying"
                ))
            }
            Err(e) => {
                let why = api_error(e);
                log::warn!("the pod {name} of a failed create was left: {why}");
                error.with_note(&format!(
                    "its pod {name} was left: the controller could not delete it ({why})"
                ))
            }
        }
    }

    /// Retries removing a failed create's pod in the background until the API answers.
    fn remove_later(&self, name: &str, uid: &str) {
        let api = Arc::clone(&self.api);
        let (path, name, uid) = (self.pods_path(), name.to_string(), uid.to_string());
        let spawned = thread::Builder::new()
            .name("k8s-cleanup".into())
            .spawn(move || {
                let until = Instant::now() + CLEANUP_FOR;
                let mut wait = Duration::from_secs(1);
                while Instant::now() < until {
                    thread::sleep(wait);
                    match delete_pod(&api, &path, &name, 0, Some(&uid)) {
                        Ok(_) => {
                            log::info!("removed the pod {name} of a failed create");
                            return;
                        }
                        Err(ApiError::Unreachable(_)) => {
                            wait = (wait * 2).min(Duration::from_secs(30));
                        }
                        Err(e) => {
                            log::warn!(
                                "the pod {name} of a failed create was left: {}",
                                api_error(e)
                            );
                            return;
                        }
                    }
                }
                log::warn!(
                    "gave up removing the pod {name} of a failed create after {}s: the API stayed unreachable; `stop` removes it",
                    CLEANUP_FOR.as_secs()
                );
            });
        if let Err(e) = spawned {
            log::warn!("cannot retry removing the pod {}: {e}", self.pods_path());
        }
    }
}

/// How a wait for readiness ended badly.
enum Failure {
    /// The pod failed, or time ran out: the create removes its pod.
    Ours(BackendError),
    /// Someone else deleted the pod: nothing of the create's is left to remove.
    Gone(BackendError),
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
    /// The pod of a create: posted, and waited for until it is ready.
    fn create_pod(&self, spec: &CreateSpec, body: &Value) -> Result<Worker, BackendError> {
        let redact = |e: BackendError| e.redact(&spec.token);
        let name = labels::pod_name(&self.controller_id, &spec.scope, &spec.task);
        let url = self.url_for(&name, spec.template.port);
        let created = self
            .post(spec, &name, body, Instant::now() + self.ready_timeout)
            .map_err(redact)?;
        spec.progress.step("pod created");
        let state = if self.ready_timeout.is_zero() {
            WorkerState::Starting
        } else {
            spec.progress.step("waiting for the pod to be ready");
            let deadline = Instant::now() + self.ready_timeout;
            match self.wait_ready(&name, spec, deadline) {
                Ok(()) => {}
                Err(Failure::Gone(e)) => return Err(redact(e)),
                Err(Failure::Ours(e)) => {
                    let e = self.discard(&name, &created.metadata.uid, e);
                    return Err(redact(e));
                }
            }
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
            .tagged(spec.metadata.clone())
            .scoped(spec.scope.clone())
            .templated(spec.template.name.clone())
        })
    }
}

impl Backend for K8sBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::K8s
    }

    /// The task's workspace claim first (a pod whose claim does not exist is never
    /// scheduled; a new claim is deleted again if the create fails), then the pod.
    fn create(&self, spec: &CreateSpec) -> Result<Worker, BackendError> {
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
        match self.create_pod(spec, &body) {
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

    fn has_change_stream(&self) -> bool {
        true
    }

    /// A watch of this controller's pods (`watch` is in the Role); see `watch.rs`.
    fn follow_changes(&self, changed: &mut dyn FnMut(Change) -> bool) -> Result<(), BackendError> {
        self.follow_pods(changed)
    }

    /// One label-selected list of the pods carrying that worker id.
    fn worker(&self, worker_id: &str) -> Result<Option<Worker>, BackendError> {
        match self.owned_pod(worker_id) {
            Ok((_, w)) => Ok(Some(w)),
            Err(BackendError::NotFound) => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn list(&self) -> Result<Vec<Worker>, BackendError> {
        let mut pods = self.select(&labels::owner_selector(&self.controller_id))?;
        Ok(pods.iter_mut().filter_map(|p| self.worker_of(p)).collect())
    }

    /// A pod already in its grace period is not deleted again: it is returned, `stopping`.
    fn stop(&self, worker_id: &str) -> Result<Worker, BackendError> {
        let (pod, mut worker) = self.owned_pod(worker_id)?;
        if pod.terminating() {
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
        let (pod, _) = self.owned_pod(worker_id)?;
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

    fn check(&self) -> Vec<Finding> {
        self.findings()
    }

    fn replica(&self) -> Option<std::net::IpAddr> {
        self.k8s.replica.as_ref().map(|r| r.ip)
    }

    /// The running pods of the replica selector that have an IP (one in its grace period
    /// still answers until it exits).
    fn replicas(&self) -> Result<Vec<std::net::IpAddr>, BackendError> {
        let Some(replica) = &self.k8s.replica else {
            return Ok(Vec::new());
        };
        let pods = self.select(std::slice::from_ref(&replica.selector))?;
        Ok(pods
            .iter()
            .filter(|p| p.status.phase == "Running")
            .filter_map(|p| p.status.pod_ip.parse().ok())
            .collect())
    }

    /// A template's own pod template follows the rules `K8S_POD_TEMPLATE` does.
    fn accepts(&self, template: &Template) -> Result<(), String> {
        if template.image.is_empty() {
            return Err("image: a k8s template needs an image (or WORKER_IMAGE)".into());
        }
        if template.network.is_some() {
            return Err(
                "network applies to the docker backend only (pods use the cluster's network)"
                    .into(),
            );
        }
        match &template.pod_template {
            Some(own) => pod::check_template(&own.value)
                .map_err(|why| format!("pod_template {}: {why}", own.path.display())),
            None => Ok(()),
        }
    }

    fn workspaces(&self) -> Result<Vec<TaskWorkspace>, BackendError> {
        self.claims()
    }

    fn delete_workspace(&self, scope: &str, task: &str) -> Result<TaskWorkspace, BackendError> {
        self.delete_claim(scope, task)
    }

    fn workspace_released(&self, scope: &str, task: &str) -> Result<(), BackendError> {
        self.claim_released(scope, task)
    }

    fn check_template(&self, template: &Template) -> Finding {
        if let Err(why) = self.accepts(template) {
            return Finding::failed(why);
        }
        if template.workspace.is_some() {
            for verb in ["create", "get", "list", "patch", "delete"] {
                match self.may(verb, "persistentvolumeclaims", "") {
                    Ok((true, _)) => {}
                    Ok((false, why)) => {
                        return Finding::failed(format!(
                        "its workspace needs the Role to allow {verb} persistentvolumeclaims{why}"
                    ))
                    }
                    Err(e) => {
                        return Finding::failed(format!(
                            "cannot ask whether it may {verb} persistentvolumeclaims: {e}"
                        ))
                    }
                }
            }
        }
        if template.pool > 0 {
            match self.may("patch", "pods", "") {
                Ok((true, _)) => {}
                Ok((false, why)) => {
                    return Finding::failed(format!(
                    "its pool needs the Role to allow patch pods (a claim labels its member){why}"
                ))
                }
                Err(e) => {
                    return Finding::failed(format!("cannot ask whether it may patch pods: {e}"))
                }
            }
            if let Err(e) = self.dry_run_binding(template) {
                return Finding::failed(format!(
                    "the dry run of a pool claim's binding pod was refused: {e}"
                ));
            }
        }
        match self.dry_run(template) {
            Ok(name) => Finding::ok(format!(
                "image {}: a worker pod passes validation and admission (dry run of {name}: nothing created){}{}",
                template.image,
                if template.workspace.is_some() { "; may keep its workspace claims" } else { "" },
                if template.pool > 0 {
                    "; may patch pods, and a claim's binding pod passes too (whether the image speaks the activation contract is asked of each member's card: the API cannot read image labels)"
                } else {
                    ""
                }
            )),
            Err(e) => Finding::failed(format!("the dry run of a worker pod was refused: {e}")),
        }
    }

    fn validate(&self, template: &Template) -> Result<(), String> {
        self.validate_template(template)
    }

    /// Member pods, bound to a task by a gated binding pod and a label patch (`pool.rs`).
    fn pools(&self) -> bool {
        true
    }

    fn pool_members(&self) -> Result<Vec<super::PoolMember>, BackendError> {
        self.pool_member_list()
    }

    fn start_member(&self, member: &super::MemberSpec) -> Result<(), BackendError> {
        self.start_pool_member(member)
    }

    fn claim_member(
        &self,
        member: &super::PoolMember,
        spec: &CreateSpec,
        activation: &super::Activation,
    ) -> Result<Worker, super::ClaimError> {
        self.claim_pool_member(member, spec, activation)
            .map_err(|e| match e {
                super::ClaimError::Task(e) => super::ClaimError::Task(e.redact(&spec.token)),
                e => e,
            })
    }

    fn remove_member(&self, member: &super::PoolMember) -> Result<(), BackendError> {
        self.remove_pool_member(member)
    }

    fn sweep_pool(&self) -> Result<usize, BackendError> {
        self.sweep_bindings()
    }
}
