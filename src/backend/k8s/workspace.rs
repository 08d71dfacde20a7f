//! Task workspaces on Kubernetes: one PersistentVolumeClaim per (controller id, scope, task),
//! named from the task like its pod (`<pod name>-ws`), created before the pod and reused when
//! it exists, owned by labels (owner, scope, template, the label-safe task; the exact task in
//! the annotation of the same key). Its size is the claim's storage request, which the
//! cluster's provisioner enforces; its storage class is the template's (else the cluster's
//! default). Its last use is an annotation, patched when a worker of the task stops. The pods
//! that mount it keep it: the API holds a deleted claim (`kubernetes.io/pvc-protection`) until
//! no pod uses it.

use serde::Deserialize;
use serde_json::{json, Value};

use super::api::{ApiError, Method, Reason};
use super::refusals::api_error;
use super::K8sBackend;
use crate::backend::labels::{self, Ours};
use crate::backend::{BackendError, CreateSpec, TaskWorkspace, Workspaces};
use crate::time::{now_millis, parse_rfc3339_millis, rfc3339_secs};

/// A claim as the API answers it (the fields used).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Claim {
    pub metadata: ClaimMeta,
}

impl Claim {
    /// Whether a copy Job is filling it (`copy_job`): no workspace yet.
    pub(super) fn being_copied(&self) -> bool {
        self.metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(labels::COPYING))
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ClaimMeta {
    pub name: String,
    pub labels: Option<Ours>,
    pub annotations: Option<std::collections::HashMap<String, String>>,
    pub creation_timestamp: String,
    pub deletion_timestamp: Option<String>,
    pub uid: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct ClaimList {
    items: Vec<Claim>,
}

/// The claim of the workspace of (scope, task).
pub fn claim_name(controller_id: &str, scope: &str, task: &str) -> String {
    format!("{}-ws", labels::pod_name(controller_id, scope, task))
}

/// The claim a create sends for `spec`'s workspace (`None` without one).
pub fn manifest(controller_id: &str, namespace: &str, spec: &CreateSpec) -> Option<Value> {
    let w = spec.template.workspace.as_ref()?;
    let name = claim_name(controller_id, &spec.scope, &spec.task);
    let mut claim = json!({
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {
                labels::OWNER: controller_id,
                labels::TASK: labels::task_label_value(&spec.task),
                labels::SCOPE: spec.scope,
                labels::TEMPLATE: spec.template.name,
                labels::WORKSPACE: "workspace",
            },
            "annotations": {
                labels::TASK: spec.task,
                labels::SIZE: w.size,
                labels::LAST_USED: (now_millis() / 1000).to_string(),
            },
        },
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": w.size}},
        },
    });
    if let Some(class) = &w.storage_class {
        claim["spec"]["storageClassName"] = json!(class);
    }
    Some(claim)
}

impl K8sBackend {
    pub(super) fn claims_path(&self) -> String {
        format!(
            "/api/v1/namespaces/{}/persistentvolumeclaims",
            self.namespace
        )
    }

    /// Whether `claim` is the workspace of (scope, task) of this controller.
    fn is_workspace_of(&self, claim: &Claim, scope: &str, task: &str) -> bool {
        let Some(owned) = claim.metadata.labels.clone().and_then(|l| {
            // A claim has no worker id: read it as one with its own name, for `owned`.
            labels::owned_workspace(l, &self.controller_id)
        }) else {
            return false;
        };
        let exact = claim
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(labels::TASK));
        owned.scope == scope && exact.map(String::as_str) == Some(task)
    }

    /// Makes the task's claim, or finds the one its earlier workers had (a claim of that name
    /// that is not this task's workspace is refused), and marks its use now. A claim being
    /// deleted (its last pod still stopping: `kubernetes.io/pvc-protection` holds it) is waited
    /// for, as long as a create waits for readiness, then made anew. The claim's name, and
    /// whether this create made it.
    pub(super) fn ensure_claim(
        &self,
        spec: &CreateSpec,
    ) -> Result<Option<(String, bool)>, BackendError> {
        let Some(body) = manifest(&self.controller_id, &self.namespace, spec) else {
            return Ok(None);
        };
        let name = claim_name(&self.controller_id, &spec.scope, &spec.task);
        let deadline = std::time::Instant::now() + self.ready_timeout;
        for _ in 0..8 {
            match self.api.call(
                Method::Post,
                &format!("{}?fieldValidation=Strict", self.claims_path()),
                Some(&body),
            ) {
                Ok(_) => return Ok(Some((name, true))),
                Err(ApiError::Status {
                    reason: Reason::AlreadyExists,
                    ..
                }) => {}
                Err(e) => return Err(api_error(e)),
            }
            let Some(claim) = self.claim(&name)? else {
                continue; // deleted between the two calls: make it
            };
            if !self.is_workspace_of(&claim, &spec.scope, &spec.task) {
                return Err(BackendError::Internal(format!(
                    "the claim name {name} is taken by a claim that is not this task's workspace"
                )));
            }
            if claim.being_copied() {
                return Err(BackendError::Refused(format!(
                    "task {:?}'s workspace is still being copied; try again once the copy is done",
                    spec.task
                )));
            }
            if claim.metadata.deletion_timestamp.is_none() {
                self.mark_used(&name)?;
                return Ok(Some((name, false)));
            }
            spec.progress.step(&format!(
                "waiting for the task's deleted workspace claim {name} to go (a pod of the task still stops)"
            ));
            while self
                .claim(&name)?
                .is_some_and(|c| c.metadata.uid == claim.metadata.uid)
            {
                if std::time::Instant::now() >= deadline {
                    return Err(BackendError::NotReady(format!(
                        "the task's deleted workspace claim {name} was still held by a stopping pod after {}s; try again once it is gone",
                        self.ready_timeout.as_secs()
                    )));
                }
                std::thread::sleep(std::time::Duration::from_millis(250));
            }
        }
        Err(BackendError::Internal(format!(
            "the workspace claim {name} was made and deleted by someone else over and over while this create ran; try again"
        )))
    }

    /// Deletes claim `name`; gone already counts as deleted.
    pub(super) fn delete_claim_named(&self, name: &str) -> Result<(), ApiError> {
        match self.api.call(
            Method::Delete,
            &format!("{}/{name}", self.claims_path()),
            None,
        ) {
            Ok(_)
            | Err(ApiError::Status {
                reason: Reason::NotFound,
                ..
            }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Deletes the claim a failed create made (its pod, if any, was removed): what became of it.
    pub(super) fn delete_fresh_claim(&self, spec: &CreateSpec) -> String {
        let name = claim_name(&self.controller_id, &spec.scope, &spec.task);
        match self.delete_claim_named(&name) {
            Ok(()) => "the workspace claim it made was deleted".into(),
            Err(e) => format!(
                "the workspace claim {name} it made was kept: {}",
                api_error(e)
            ),
        }
    }

    pub(super) fn claim(&self, name: &str) -> Result<Option<Claim>, BackendError> {
        self.claim_as::<Claim>(name)
    }

    /// Claim `name` as stored, read as `T` (the fields used, or the whole object); `None` when
    /// there is none.
    pub(super) fn claim_as<T: serde::de::DeserializeOwned>(
        &self,
        name: &str,
    ) -> Result<Option<T>, BackendError> {
        self.get_as(&format!("{}/{name}", self.claims_path()), "claim")
    }

    /// This controller's workspace claims, as the API lists them (those being deleted or
    /// filled by a copy too).
    pub(super) fn workspace_claims(&self) -> Result<Vec<Claim>, BackendError> {
        let selector = format!(
            "{}={},{}=workspace",
            labels::OWNER,
            self.controller_id,
            labels::WORKSPACE
        );
        let path = format!(
            "{}?labelSelector={}",
            self.claims_path(),
            super::percent_encode(&selector)
        );
        let (_, body) = self.api.call(Method::Get, &path, None).map_err(api_error)?;
        let list: ClaimList = serde_json::from_slice(&body)
            .map_err(|e| BackendError::Internal(format!("unexpected claim list: {e}")))?;
        Ok(list.items)
    }

    /// Sets (or, `null`, removes) annotations of claim `name`; a claim gone is no error.
    pub(super) fn annotate_claim(
        &self,
        name: &str,
        annotations: Value,
    ) -> Result<(), BackendError> {
        let patch = json!({"metadata": {"annotations": annotations}});
        match self.api.call(
            Method::Patch,
            &format!("{}/{name}", self.claims_path()),
            Some(&patch),
        ) {
            Ok(_)
            | Err(ApiError::Status {
                reason: Reason::NotFound,
                ..
            }) => Ok(()),
            Err(e) => Err(api_error(e)),
        }
    }

    fn mark_used(&self, name: &str) -> Result<(), BackendError> {
        self.annotate_claim(
            name,
            json!({labels::LAST_USED: (now_millis() / 1000).to_string()}),
        )
    }
}

impl Workspaces for K8sBackend {
    /// This controller's workspace claims.
    fn owned(&self) -> Result<Vec<TaskWorkspace>, BackendError> {
        Ok(self
            .workspace_claims()?
            .into_iter()
            .filter(|c| c.metadata.deletion_timestamp.is_none() && !c.being_copied())
            .filter_map(|c| {
                let owned = labels::owned_workspace(c.metadata.labels?, &self.controller_id)?;
                let notes = c.metadata.annotations.unwrap_or_default();
                let created = parse_rfc3339_millis(&c.metadata.creation_timestamp)
                    .map(|ms| rfc3339_secs(ms / 1000))
                    .unwrap_or_default();
                Some(TaskWorkspace {
                    task: notes.get(labels::TASK).cloned()?,
                    scope: owned.scope,
                    template: owned.template,
                    size: notes.get(labels::SIZE).cloned().unwrap_or_default(),
                    last_used: notes
                        .get(labels::LAST_USED)
                        .and_then(|t| t.parse::<u64>().ok())
                        .map(rfc3339_secs)
                        .unwrap_or_else(|| created.clone()),
                    created_at: created,
                    in_use: false,
                    name: c.metadata.name,
                })
            })
            .collect())
    }

    fn delete(&self, scope: &str, task: &str) -> Result<TaskWorkspace, BackendError> {
        // By what its labels say, not by its name: a claim made otherwise (by hand, by an
        // earlier version) is the task's workspace too.
        let found = self.find(scope, task)?;
        self.delete_claim_named(&found.name).map_err(api_error)?;
        Ok(found)
    }

    fn released(&self, scope: &str, task: &str) -> Result<(), BackendError> {
        let name = claim_name(&self.controller_id, scope, task);
        match self.claim(&name)? {
            Some(c) if self.is_workspace_of(&c, scope, task) => self.mark_used(&name),
            _ => Ok(()),
        }
    }
}
