//! Workspace copies on Kubernetes. The new task's claim is made beside the source's, of the
//! same storage class, size and access modes, with the new task's labels; how it is filled
//! depends on the class:
//!
//! - a class the operator names in `K8S_CLONE_STORAGE_CLASSES` clones: the claim's
//!   `dataSource` is the source claim (no API object a namespaced Role may read says which
//!   classes clone; a CSI driver advertises cloning to its provisioner only). The provisioner
//!   fills the volume before the claim binds, and a pod that mounts it waits for the binding:
//!   no worker is handed half a copy, so nothing is marked and nothing is left to tidy;
//! - any other class is filled by a copy Job (`copy_job`), the claim marked unfinished until
//!   the Job has succeeded.

use serde_json::{json, Value};

use super::api::{ApiError, Method, Reason};
use super::refusals::api_error;
use super::workspace::claim_name;
use super::K8sBackend;
use crate::backend::{labels, BackendError, Copies, Progress, TaskWorkspace, Workspaces};

/// How the new claim is filled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Fill {
    /// By the storage class's driver, from the source claim (`dataSource`).
    Clone,
    /// By a copy Job; the claim carries the `copying` mark until it is done.
    Job,
}

impl K8sBackend {
    /// The claim of task `to` in `scope` copied from claim `source` (as stored).
    pub(super) fn copy_manifest(&self, source: &Value, scope: &str, to: &str, fill: Fill) -> Value {
        let meta = &source["metadata"];
        let mut claim = json!({
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {
                "name": claim_name(&self.controller_id, scope, to),
                "namespace": self.namespace,
                "labels": {
                    labels::OWNER: self.controller_id,
                    labels::TASK: labels::task_label_value(to),
                    labels::SCOPE: scope,
                    labels::TEMPLATE: meta["labels"][labels::TEMPLATE],
                    labels::WORKSPACE: "workspace",
                },
                "annotations": {
                    labels::TASK: to,
                    labels::SIZE: meta["annotations"][labels::SIZE],
                    labels::LAST_USED: (crate::time::now_millis() / 1000).to_string(),
                },
            },
            "spec": {
                "accessModes": source["spec"]["accessModes"],
                "resources": {"requests": {"storage": source["spec"]["resources"]["requests"]["storage"]}},
            },
        });
        if let Some(class) = source["spec"]["storageClassName"].as_str() {
            claim["spec"]["storageClassName"] = json!(class);
        }
        match fill {
            Fill::Clone => {
                claim["spec"]["dataSource"] =
                    json!({"kind": "PersistentVolumeClaim", "name": meta["name"]});
            }
            Fill::Job => {
                claim["metadata"]["annotations"][labels::COPYING] =
                    json!((crate::time::now_millis() / 1000).to_string());
            }
        }
        claim
    }

    /// Makes the new claim; one that is there already is the caller's refusal.
    pub(super) fn make_copy_claim(&self, body: &Value, to: &str) -> Result<(), BackendError> {
        let path = format!("{}?fieldValidation=Strict", self.claims_path());
        match self.api.call(Method::Post, &path, Some(body)) {
            Ok(_) => Ok(()),
            Err(ApiError::Status {
                reason: Reason::AlreadyExists,
                ..
            }) => Err(BackendError::Refused(format!(
                "task {to:?} has a workspace already, or one being copied"
            ))),
            Err(e) => Err(api_error(e)),
        }
    }
}

impl Copies for K8sBackend {
    fn copy(
        &self,
        found: &TaskWorkspace,
        to: &str,
        progress: &Progress,
    ) -> Result<TaskWorkspace, BackendError> {
        let (scope, from) = (found.scope.as_str(), found.task.as_str());
        let source: Value = self.claim_as(&found.name)?.ok_or(BackendError::NotFound)?;
        let class = source["spec"]["storageClassName"].as_str().unwrap_or("");
        if self.k8s.clone_storage_classes.iter().any(|c| c == class) {
            let body = self.copy_manifest(&source, scope, to, Fill::Clone);
            progress.step(&format!("cloning the workspace of task {from:?}"));
            self.make_copy_claim(&body, to)?;
        } else {
            self.copy_by_job(&source, scope, from, to, progress)?;
        }
        self.find(scope, to)
    }

    /// A clone is filled before it binds and no pod mounts it before; a claim a Job fills
    /// carries the `copying` mark until the Job has succeeded.
    fn unfinished(&self, scope: &str, task: &str) -> Result<bool, BackendError> {
        let name = claim_name(&self.controller_id, scope, task);
        Ok(self.claim(&name)?.is_some_and(|c| c.being_copied()))
    }

    fn tidy(&self) -> Result<usize, BackendError> {
        self.tidy_copy_jobs()
    }
}
