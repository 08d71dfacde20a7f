//! Warm pools on Kubernetes. A member is a pod labelled as a member of its slot
//! ([`labels::member_name`]: owner, slot, template, revision, key id, nonce) and named after
//! the slot and its nonce ([`member_pod_name`]): a claimed member keeps its pod (and so its
//! name), so the slot's next member needs another. Two replicas that fill one slot at once
//! make two members; the pool removes the younger.
//! and started with [`worker_env::member_environment`]: no task, worker id or token. The
//! controller reaches a member at its pod IP (the activation is the controller's own call).
//!
//! A pod's name cannot change, and a task's worker is known by the name of its pod
//! ([`labels::pod_name`]), which the API server gives one pod. So a claim is:
//! - first the **activation** ([`members::activate`]): a member takes one, so of claims
//!   racing for it (from any replica) one is answered 200 and the others 409 (they lost, and
//!   try another member). A member that does not answer in time, or refuses, is removed;
//! - then the **binding**, the commit: a pod under the task's pod name that is never scheduled
//!   (a scheduling gate holds it) and names the member (label [`labels::BINDING`]) and its uid
//!   and the worker id (annotations). The API server refuses it (409) when a cold pod or another
//!   claim holds the name, so one task has one worker across replicas as before (the member,
//!   bound for nothing, is then removed). A cold create that meets a binding is answered with
//!   the bound worker, and waits for it to go when it is stopping, exactly as for a cold pod;
//! - last, the member's **labels**: a merge patch adds the worker's labels and annotations
//!   (owner, worker id, task, scope, expiry, metadata) and repeats the member's uid, which the
//!   API server keeps immutable (422 when the name is another pod's now). From then on the
//!   member pod is listed, watched, stopped, logged and reaped as a worker, from any replica.
//!
//! A member pod with a binding but no worker labels is a claim that did not finish (listed as
//! `claiming`, removed by the pool after a deadline). A binding whose member is gone is removed
//! by the garbage collector (its owner reference), by the next create of its task, and by the
//! pool's sweep.

use std::time::Instant;

use serde_json::{json, Value};

use super::api::{ApiError, Method, Reason};
use super::refusals::{api_error, create_error};
use super::status::Pod;
use super::{delete_pod, pod, K8sBackend};
use crate::backend::labels::{self};
use crate::backend::members;
use crate::backend::{
    worker_env, Activation, BackendError, ClaimError, CreateSpec, MemberSpec, MemberState,
    PoolMember, Pools, Worker, WorkerState,
};
use crate::time::parse_rfc3339_millis;

/// The pod name of slot `slot`'s member with nonce `nonce` (at most 61 characters: a slot's
/// name has at most 54).
pub(super) fn member_pod_name(slot: &str, nonce: &str) -> String {
    let part: String = nonce.chars().take(6).collect();
    format!("{slot}-{part}")
}

/// What a binding pod says: the member it binds (name and uid) and the worker it makes.
pub(super) struct Binding {
    pub name: String,
    pub uid: String,
    pub member: String,
    pub member_uid: String,
    pub worker_id: String,
}

impl Binding {
    /// The binding `pod` is, when it is this controller's.
    pub(super) fn of(pod: &Pod, controller_id: &str) -> Option<Binding> {
        let member = pod.metadata.labels.as_ref()?.binding(controller_id)?;
        let annotation = |key: &str| {
            pod.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(key))
                .cloned()
                .unwrap_or_default()
        };
        Some(Binding {
            name: pod.metadata.name.clone(),
            uid: pod.metadata.uid.clone(),
            member: member.to_string(),
            member_uid: annotation(labels::BINDING),
            worker_id: annotation(labels::WORKER_ID),
        })
    }
}

/// What holds a binding's task.
pub(super) enum Bound {
    /// The member, claimed: the worker.
    Worker(Box<Pod>),
    /// The member, not labelled yet (a claim in progress, or one that did not finish).
    Claiming,
    /// The member is gone (or its name is another pod's): the binding holds nothing.
    Gone,
}

/// Who holds a task's pod name (a create met it there).
pub(super) enum Holder {
    /// A worker: the pod to follow while it stops (its own name and uid), why it is stopping,
    /// the worker, and the binding that holds the name for it (a pooled worker).
    Worker {
        pod: String,
        uid: String,
        reason: String,
        worker: Box<Worker>,
        binding: Option<Binding>,
    },
    /// A claim binding a member that has not labelled it yet.
    Claiming { worker_id: String },
    /// A binding whose member is gone: it was removed, the name is free.
    Freed,
}

impl Holder {
    /// The create's answer: the task has this worker.
    pub(super) fn exists(self) -> BackendError {
        match self {
            Holder::Worker { worker, .. } => BackendError::WorkerExists {
                worker_id: worker.worker_id,
                state: worker.state,
            },
            Holder::Claiming { worker_id } => BackendError::WorkerExists {
                worker_id,
                state: WorkerState::Starting,
            },
            Holder::Freed => BackendError::Internal(
                "the task's pod name was held by a claim that did not happen; it was freed, try again".into(),
            ),
        }
    }
}

impl K8sBackend {
    /// Who holds pod name `name`, which is `there`: a cold worker's pod, or a binding (its
    /// member looked up). A pod this controller does not own is an error.
    pub(super) fn holder(&self, name: &str, mut there: Pod) -> Result<Holder, BackendError> {
        if let Some(b) = Binding::of(&there, &self.controller_id) {
            return match self.bound(&b)? {
                Bound::Worker(mut p) => {
                    let (pod, uid, reason) = (
                        p.metadata.name.clone(),
                        p.metadata.uid.clone(),
                        p.stopping_reason(),
                    );
                    match self.worker_of(&mut p) {
                        Some(worker) => Ok(Holder::Worker {
                            pod,
                            uid,
                            reason,
                            worker: Box::new(worker),
                            binding: Some(b),
                        }),
                        None => Ok(Holder::Claiming {
                            worker_id: b.worker_id,
                        }),
                    }
                }
                Bound::Claiming => Ok(Holder::Claiming {
                    worker_id: b.worker_id,
                }),
                Bound::Gone => {
                    self.unbind(&b)?;
                    Ok(Holder::Freed)
                }
            };
        }
        let (uid, reason) = (there.metadata.uid.clone(), there.stopping_reason());
        match self.worker_of(&mut there) {
            Some(worker) => Ok(Holder::Worker {
                pod: name.to_string(),
                uid,
                reason,
                worker: Box::new(worker),
                binding: None,
            }),
            None => Err(BackendError::Internal(format!(
                "the pod name {name} is taken by a pod this controller does not own"
            ))),
        }
    }

    /// The member pod a binding names, as it is now.
    pub(super) fn bound(&self, b: &Binding) -> Result<Bound, BackendError> {
        let Some(member) = self.get(&b.member)? else {
            return Ok(Bound::Gone);
        };
        if member.metadata.uid != b.member_uid {
            return Ok(Bound::Gone);
        }
        let claimed = labels::owned(member.metadata.labels.clone(), &self.controller_id)
            .is_some_and(|o| o.worker_id == b.worker_id);
        Ok(if claimed {
            Bound::Worker(Box::new(member))
        } else {
            Bound::Claiming
        })
    }

    /// Deletes binding `b` (only that pod: its uid), gone already or not.
    pub(super) fn unbind(&self, b: &Binding) -> Result<(), BackendError> {
        delete_pod(&self.api, &self.pods_path(), &b.name, 0, Some(&b.uid))
            .map(|_| ())
            .map_err(api_error)
    }

    /// This controller's bindings.
    fn bindings(&self) -> Result<Vec<Binding>, BackendError> {
        let pods = self.select(&[
            format!("{}={}", labels::OWNER, self.controller_id),
            labels::BINDING.to_string(),
        ])?;
        Ok(pods
            .iter()
            .filter_map(|p| Binding::of(p, &self.controller_id))
            .collect())
    }

    /// The address the controller reaches a member at: its pod IP and port.
    fn member_address(&self, p: &Pod) -> String {
        if p.status.pod_ip.is_empty() {
            return String::new();
        }
        let port = p.worker_port().unwrap_or(self.container.port);
        let ip: Result<std::net::IpAddr, _> = p.status.pod_ip.parse();
        match ip {
            Ok(ip) => format!("http://{}", std::net::SocketAddr::new(ip, port)),
            Err(_) => String::new(),
        }
    }

    fn member_body(&self, m: &MemberSpec) -> Value {
        let t = &m.template;
        let env = worker_env::member_environment(m, &self.container);
        let none = crate::backend::Metadata::new();
        pod::member_manifest(
            &pod::PodInputs {
                name: &member_pod_name(&m.name, &m.nonce),
                namespace: &self.namespace,
                controller_id: &self.controller_id,
                worker_id: "",
                task: "",
                expires_at: None,
                token_hash: "",
                scope: "",
                metadata: &none,
                env: &env,
                worker: t,
                k8s: &self.k8s,
                pod_template: self.pod_template(t),
                workspace_claim: None,
            },
            &m.labels(),
        )
    }

    fn member_ready(&self, m: &MemberSpec, deadline: Instant) -> Result<(), BackendError> {
        let decided =
            self.follow_pod(&member_pod_name(&m.name, &m.nonce), deadline, |p| match p {
                None => Some(Err(BackendError::NotReady(
                    "the member's pod disappeared while it started".into(),
                ))),
                Some(p) if p.ready() => Some(Ok(self.member_address(p))),
                Some(p) => match p.progress() {
                    super::status::Progress::ImageFailed(why) => Some(Err(
                        BackendError::ImageNotFound(format!("{} ({why})", m.template.image)),
                    )),
                    super::status::Progress::Failed(why)
                    | super::status::Progress::Deleted(why) => {
                        Some(Err(BackendError::NotReady(why)))
                    }
                    _ => None,
                },
            })?;
        let address = match decided {
            Some(found) => found?,
            None => {
                return Err(BackendError::NotReady(format!(
                    "the member's pod was not ready within {}s",
                    self.ready_timeout.as_secs_f32()
                )))
            }
        };
        if address.is_empty() {
            return Err(BackendError::NotReady("the member's pod has no IP".into()));
        }
        members::check_member(&address, &m.template.image)
    }
    /// Removes a member a claim took but could not bind (its token was never handed out).
    pub(super) fn discard_member(&self, m: &PoolMember) {
        let name = member_pod_name(&m.name, &m.nonce);
        if let Err(e) = delete_pod(&self.api, &self.pods_path(), &name, 0, Some(&m.id)) {
            log::warn!(
                "pool: member {} could not be removed: {}",
                m.name,
                api_error(e)
            );
        }
    }

    /// After a pooled worker's pod was deleted: its binding, at once when the pod is gone
    /// already (else the garbage collector, the task's next create or the sweep removes it
    /// once the pod has finished stopping).
    pub(super) fn release_binding(&self, worker_pod: &str, uid: &str, gone: bool) {
        if !gone {
            return;
        }
        let selector = format!(
            "{}={},{}={}",
            labels::OWNER,
            self.controller_id,
            labels::BINDING,
            worker_pod
        );
        match self.select(&[selector]) {
            Ok(pods) => {
                for b in pods.iter().filter_map(|p| Binding::of(p, &self.controller_id)) {
                    if b.member_uid == uid {
                        if let Err(e) = self.unbind(&b) {
                            log::warn!("the binding {} of a stopped worker was left (the pool sweeps it): {e}", b.name);
                        }
                    }
                }
            }
            Err(e) => log::warn!(
                "the binding of the stopped worker {worker_pod} could not be read (the pool sweeps it): {e}"
            ),
        }
    }
}

impl Pools for K8sBackend {
    fn claim_member(
        &self,
        member: &PoolMember,
        spec: &CreateSpec,
        activation: &Activation,
    ) -> Result<Worker, ClaimError> {
        members::claim(self, member, spec, activation)
    }

    fn members(&self) -> Result<Vec<PoolMember>, BackendError> {
        let pods = self.select(&labels::member_selector(&self.controller_id))?;
        let mut bindings: Option<Vec<Binding>> = None;
        let mut out = Vec::new();
        for p in &pods {
            let Some(m) = p
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.member(&self.controller_id))
            else {
                continue; // a worker now, or not ours
            };
            if bindings.is_none() {
                bindings = Some(self.bindings()?);
            }
            let bound = bindings
                .as_deref()
                .unwrap_or_default()
                .iter()
                .any(|b| b.member == p.metadata.name && b.member_uid == p.metadata.uid);
            let state =
                if p.terminating() || matches!(p.status.phase.as_str(), "Failed" | "Succeeded") {
                    MemberState::Ended
                } else if bound {
                    MemberState::Claiming
                } else if p.ready() {
                    MemberState::Ready
                } else {
                    MemberState::Starting
                };
            out.push(PoolMember {
                name: m.member,
                id: p.metadata.uid.clone(),
                address: self.member_address(p),
                template: m.template,
                revision: m.revision,
                key_id: m.key_id,
                nonce: m.nonce,
                state,
                created_ms: parse_rfc3339_millis(&p.metadata.creation_timestamp).unwrap_or(0),
            });
        }
        Ok(out)
    }

    /// Creates the member's pod, waits until it is ready, and asks its card whether it speaks
    /// the activation contract (the API cannot read an image's labels, so this is where an
    /// image that does not is found).
    fn start_member(&self, m: &MemberSpec) -> Result<(), BackendError> {
        let path = format!("{}?fieldValidation=Strict", self.pods_path());
        let created = match self
            .api
            .call(Method::Post, &path, Some(&self.member_body(m)))
        {
            Ok((_, bytes)) => Pod::parse(&bytes).map_err(BackendError::Internal)?,
            Err(ApiError::Status {
                reason: Reason::AlreadyExists,
                ..
            }) => {
                return Err(BackendError::WorkerExists {
                    worker_id: String::new(),
                    state: WorkerState::Starting,
                })
            }
            Err(e) => return Err(create_error(e, self.pod_template(&m.template).is_some())),
        };
        let uid = created.metadata.uid.clone();
        let checked = self.member_ready(m, Instant::now() + self.ready_timeout);
        if let Err(e) = checked {
            let name = member_pod_name(&m.name, &m.nonce);
            let _ = delete_pod(&self.api, &self.pods_path(), &name, 0, Some(&uid));
            return Err(e);
        }
        Ok(())
    }

    /// Removes an unclaimed member, only as the pool saw it: its uid, and (read again now) no
    /// worker labels, with that version as a precondition, so a claim that labels it meanwhile
    /// keeps it. A claim that did not finish goes with its binding.
    fn remove_member(&self, m: &PoolMember) -> Result<(), BackendError> {
        let name = member_pod_name(&m.name, &m.nonce);
        let Some(p) = self.get(&name)? else {
            return Ok(());
        };
        if p.metadata.uid != m.id {
            return Ok(());
        }
        if labels::owned(p.metadata.labels.clone(), &self.controller_id).is_some() {
            return Ok(()); // claimed meanwhile: a worker
        }
        let options = json!({"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0,
            "preconditions": {"uid": m.id, "resourceVersion": p.metadata.resource_version}});
        let path = format!("{}/{name}?gracePeriodSeconds=0", self.pods_path());
        match self.api.call(Method::Delete, &path, Some(&options)) {
            Ok(_)
            | Err(ApiError::Status {
                reason: Reason::NotFound,
                ..
            }) => {}
            // Changed since it was read: the next pass looks again.
            Err(ApiError::Status {
                reason: Reason::Conflict,
                ..
            }) => return Ok(()),
            Err(e) => return Err(api_error(e)),
        }
        if m.state == MemberState::Claiming {
            for b in self.bindings()? {
                if b.member == name && b.member_uid == m.id {
                    self.unbind(&b)?;
                }
            }
        }
        Ok(())
    }

    /// Removes bindings whose member is gone (bindings read first, then the members, so a
    /// binding made meanwhile is not looked at).
    fn sweep(&self) -> Result<usize, BackendError> {
        let bindings = self.bindings()?;
        if bindings.is_empty() {
            return Ok(0);
        }
        let members = self.select(&labels::member_selector(&self.controller_id))?;
        let live: std::collections::HashSet<(&str, &str)> = members
            .iter()
            .map(|p| (p.metadata.name.as_str(), p.metadata.uid.as_str()))
            .collect();
        let mut swept = 0;
        for b in bindings
            .iter()
            .filter(|b| !live.contains(&(b.member.as_str(), b.member_uid.as_str())))
        {
            self.unbind(b)?;
            swept += 1;
        }
        Ok(swept)
    }
}
