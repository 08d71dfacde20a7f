//! Kubernetes' side of a warm-pool claim (the protocol is `members::claim`): the task's pod
//! name held by a gated binding pod, then the worker's labels patched onto the member.

use serde_json::{json, Value};

use super::api::{ApiError, Method, Reason};
use super::pool::{member_pod_name, Binding, Holder};
use super::refusals::{api_error, create_error};
use super::status::Pod;
use super::{pod, K8sBackend};
use crate::backend::labels;
use crate::backend::members;
use crate::backend::{BackendError, ClaimError, CreateSpec, PoolMember};
use crate::settings::ContainerSettings;

/// Kubernetes' steps of the claim protocol: a binding pod named after the task is the
/// commit's guard (the API server gives one pod a name), then the worker's labels on the
/// member (its uid repeated: a member replaced meanwhile under its name refuses the patch).
impl members::ClaimSteps for K8sBackend {
    /// The binding pod.
    type Bound = Pod;

    fn worker_url(&self, member: &PoolMember, spec: &CreateSpec) -> Result<String, ClaimError> {
        if member.address.is_empty() {
            return Err(ClaimError::Broken(format!(
                "member {} has no pod IP",
                member.name
            )));
        }
        let pod_name = member_pod_name(&member.name, &member.nonce);
        Ok(self.url_for(&pod_name, spec.template.port))
    }

    fn worker_settings(&self) -> (&ContainerSettings, Option<&str>) {
        (&self.container, self.anthropic_auth_token.as_deref())
    }

    /// The task's pod name is free, or held by a binding whose claim did not happen.
    fn task_free(&self, spec: &CreateSpec) -> Result<(), ClaimError> {
        let target = task_pod(self, spec);
        if let Some(there) = self.get(&target).map_err(ClaimError::Task)? {
            match self.holder(&target, there).map_err(ClaimError::Task)? {
                Holder::Freed => {}
                holder => return Err(ClaimError::Task(holder.exists())),
            }
        }
        Ok(())
    }

    /// The same pod (uid), not terminating, with no worker's labels yet.
    fn still_unclaimed(&self, member: &PoolMember) -> Result<bool, ClaimError> {
        let pod_name = member_pod_name(&member.name, &member.nonce);
        let current = self.get(&pod_name).map_err(ClaimError::Task)?;
        Ok(current.is_some_and(|p| {
            p.metadata.uid == member.id
                && !p.terminating()
                && labels::owned(p.metadata.labels, &self.controller_id).is_none()
        }))
    }

    fn activation_base(
        &self,
        member: &PoolMember,
        _: &CreateSpec,
        _: &str,
    ) -> Result<String, ClaimError> {
        Ok(member.address.clone())
    }

    fn discard(&self, member: &PoolMember) {
        self.discard_member(member);
    }

    /// The binding pod, named after the task.
    fn bind(&self, member: &PoolMember, spec: &CreateSpec) -> Result<Pod, ClaimError> {
        let target = task_pod(self, spec);
        let pod_name = member_pod_name(&member.name, &member.nonce);
        let binding = pod::binding_manifest(
            &target,
            &self.namespace,
            &self.controller_id,
            (&pod_name, &member.id),
            &spec.worker_id,
            &spec.template.image,
        );
        let path = format!("{}?fieldValidation=Strict", self.pods_path());
        match self.api.call(Method::Post, &path, Some(&binding)) {
            Ok((_, bytes)) => Pod::parse(&bytes).map_err(|e| {
                self.discard_member(member);
                ClaimError::Task(BackendError::Internal(e))
            }),
            Err(ApiError::Status {
                reason: Reason::AlreadyExists,
                ..
            }) => {
                self.discard_member(member);
                let answer = match self.get(&target) {
                    Ok(Some(there)) => match self.holder(&target, there) {
                        Ok(holder) => holder.exists(),
                        Err(e) => e,
                    },
                    Ok(None) => BackendError::Internal(format!(
                        "pod {target} was being created or deleted by someone else while this create ran; try again"
                    )),
                    Err(e) => e,
                };
                Err(ClaimError::Task(answer))
            }
            Err(e) => {
                self.discard_member(member);
                Err(ClaimError::Task(create_error(e, false)))
            }
        }
    }

    /// The worker's labels and annotations patched onto the member.
    fn commit(&self, member: &PoolMember, spec: &CreateSpec, bound: Pod) -> Result<(), ClaimError> {
        let pod_name = member_pod_name(&member.name, &member.nonce);
        let patch = json!({"metadata": {
            "uid": member.id,
            "labels": claimed_labels(spec),
            "annotations": claimed_annotations(spec),
        }});
        let patched = self.api.call(
            Method::Patch,
            &format!("{}/{pod_name}", self.pods_path()),
            Some(&patch),
        );
        let Err(e) = patched else {
            return Ok(());
        };
        self.discard_member(member);
        if let Some(b) = Binding::of(&bound, &self.controller_id) {
            if let Err(e) = self.unbind(&b) {
                log::warn!("the binding {} of a claim that did not happen was left (the pool sweeps it): {e}", task_pod(self, spec));
            }
        }
        Err(match e {
            ApiError::Status {
                reason: Reason::NotFound | Reason::Invalid | Reason::Conflict,
                ..
            } => ClaimError::Broken(format!("member {} went while it was claimed", member.name)),
            e => ClaimError::Task(api_error(e)),
        })
    }
}

/// The pod name of `spec`'s task.
fn task_pod(k: &K8sBackend, spec: &CreateSpec) -> String {
    labels::pod_name(&k.controller_id, &spec.scope, &spec.task)
}

/// A claimed member's worker labels (identity, scope, template, expiry).
fn claimed_labels(spec: &CreateSpec) -> serde_json::Map<String, Value> {
    let task = labels::task_label_value(&spec.task);
    labels::identity(
        &spec.worker_id,
        task,
        &spec.scope,
        &spec.template.name,
        spec.expires_at,
        &spec.token.hash(),
    )
    .into_iter()
    .chain([labels::claimed_now()])
    .map(|(k, v)| (k.to_string(), json!(v)))
    .collect()
}

/// A claimed member's annotations: its task in full, and the caller's tags.
fn claimed_annotations(spec: &CreateSpec) -> serde_json::Map<String, Value> {
    let mut annotations = serde_json::Map::new();
    annotations.insert(labels::TASK.into(), json!(spec.task));
    for (k, v) in labels::meta_entries(&spec.metadata) {
        annotations.insert(k, json!(v));
    }
    annotations
}
