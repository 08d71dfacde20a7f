//! Workspace copies on Kubernetes: the new task's claim is a clone of the source's — a
//! PersistentVolumeClaim whose `dataSource` is the source claim, of the same storage class and
//! size — where the operator has said the storage class's driver clones
//! (`K8S_CLONE_STORAGE_CLASSES`: no API object a namespaced Role may read says it; a CSI
//! driver advertises cloning to its provisioner only). The provisioner fills the volume before
//! the claim binds, and a pod that mounts it waits for the binding: no worker is handed half a
//! copy, so nothing is marked unfinished and nothing is left to tidy. The Role needs nothing
//! beyond what workspaces take (create and get on persistentvolumeclaims).
//!
//! Another storage class is refused with one line: a copy by a Job of the controller's image is
//! not built yet (the namespace's PodSecurity `restricted` forbids the root a copy that keeps
//! owners needs, so such a Job would copy as the workers' user).

use serde_json::{json, Value};

use super::api::{ApiError, Method, Reason};
use super::refusals::api_error;
use super::workspace::claim_name;
use super::K8sBackend;
use crate::backend::{labels, BackendError, Copies, Progress, TaskWorkspace, Workspaces};

impl K8sBackend {
    /// The clone of claim `source` (as stored) for task `to` in `scope`.
    fn clone_manifest(&self, source: &Value, scope: &str, to: &str, class: &str) -> Value {
        let meta = &source["metadata"];
        json!({
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
                "storageClassName": class,
                "dataSource": {
                    "kind": "PersistentVolumeClaim",
                    "name": meta["name"],
                },
            },
        })
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
        if !self.k8s.clone_storage_classes.iter().any(|c| c == class) {
            return Err(BackendError::Refused(format!(
                "task {from:?}'s workspace is of storage class {}, which K8S_CLONE_STORAGE_CLASSES does not name as one that clones (copies by a Job are not built yet)",
                if class.is_empty() { "(none named)" } else { class }
            )));
        }
        let body = self.clone_manifest(&source, scope, to, class);
        let path = format!("{}?fieldValidation=Strict", self.claims_path());
        progress.step(&format!("cloning the workspace of task {from:?}"));
        match self.api.call(Method::Post, &path, Some(&body)) {
            Ok(_) => {}
            Err(ApiError::Status {
                reason: Reason::AlreadyExists,
                ..
            }) => {
                return Err(BackendError::Refused(format!(
                    "task {to:?} has a workspace already"
                )))
            }
            Err(e) => return Err(api_error(e)),
        }
        self.find(scope, to)
    }

    /// A clone is filled before it binds, and no pod mounts it before: never half a copy.
    fn unfinished(&self, _scope: &str, _task: &str) -> Result<bool, BackendError> {
        Ok(false)
    }

    fn tidy(&self) -> Result<usize, BackendError> {
        Ok(0)
    }
}
