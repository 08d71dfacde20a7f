//! Creating a worker's pod: its manifest (the pod template, labels, environment), the
//! create (a name conflict is the task's worker already, or a pod of it still terminating,
//! waited out), the wait until it is ready (a watch, or polls), and what a failed create
//! leaves: the pod is deleted, now or, if the API is away, by a thread that tries later.

use super::api::{ApiError, Method, Reason};
use super::refusals::{api_error, create_error};
use super::status::{Pod, Progress};
use super::{delete_pod, pod, pool, workspace, K8sBackend};
use crate::backend::{labels, worker_env};
use crate::backend::{BackendError, BackendKind, CreateSpec, Template, Worker, WorkerState};
use crate::time::{now_millis, parse_rfc3339_millis, rfc3339_secs};
use serde_json::Value;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

/// How long a failed create's pod is retried for removal while the API cannot be reached.
pub(super) const CLEANUP_FOR: Duration = Duration::from_secs(3600);

/// How a wait for readiness ended badly.
pub(super) enum Failure {
    /// The pod failed, or time ran out: the create removes its pod.
    Ours(BackendError),
    /// Someone else deleted the pod: nothing of the create's is left to remove.
    Gone(BackendError),
}

impl K8sBackend {
    /// Where callers reach the worker in pod `name`, listening on `port`.
    pub(super) fn url_for(&self, name: &str, port: u16) -> String {
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
    pub(super) fn pod_template<'a>(&'a self, template: &'a Template) -> Option<&'a Value> {
        match &template.pod_template {
            Some(own) => Some(&own.value),
            None => self.template.as_ref(),
        }
    }

    /// The pod this backend sends to create `spec`'s worker in pod `name`.
    pub(super) fn manifest(&self, spec: &CreateSpec, name: &str) -> Result<Value, BackendError> {
        let env = worker_env::environment(
            spec,
            &self.url_for(name, spec.template.port),
            &self.container,
            self.anthropic_auth_token.as_deref(),
        )?;
        let token_hash = spec.token.hash();
        Ok(pod::manifest(&pod::PodInputs {
            name,
            namespace: &self.namespace,
            controller_id: &self.controller_id,
            worker_id: &spec.worker_id,
            task: &spec.task,
            scope: &spec.scope,
            expires_at: spec.expires_at,
            token_hash: &token_hash,
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

    /// Creates pod `name` from `body`. A name collision is answered with the task's existing
    /// worker, read once; one that is still stopping (its grace period) is waited for, until
    /// `deadline`, then the create is tried again; one that does not go in time is the task's
    /// worker, `stopping`.
    pub(super) fn post(
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
            let gone = self.follow_pod(&pod, deadline, |p| match p {
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
    pub(super) fn wait_ready(
        &self,
        name: &str,
        spec: &CreateSpec,
        deadline: Instant,
    ) -> Result<(), Failure> {
        let mut last = String::from("it was not scheduled yet");
        let mut said = String::new();
        let decided = self.follow_pod(name, deadline, |pod| {
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
    pub(super) fn discard(&self, name: &str, uid: &str, error: BackendError) -> BackendError {
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
    pub(super) fn remove_later(&self, name: &str, uid: &str) {
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

    /// The pod of a create: posted, and waited for until it is ready.
    /// A create (not a resume) whose task has a suspended worker's record is refused once
    /// its pod is posted (`suspend.rs`).
    pub(super) fn create_pod(
        &self,
        spec: &CreateSpec,
        body: &Value,
        resuming: bool,
    ) -> Result<Worker, BackendError> {
        let redact = |e: BackendError| e.redact(&spec.token);
        let name = labels::pod_name(&self.controller_id, &spec.scope, &spec.task);
        let url = self.url_for(&name, spec.template.port);
        let created = self
            .post(spec, &name, body, Instant::now() + self.ready_timeout)
            .map_err(redact)?;
        if !resuming {
            self.refuse_if_suspended(&name)?;
        }
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
            .hashed(spec.token.hash())
        })
    }
}
