//! Renew on Kubernetes: a pod's labels can change, so the new expiry is the pod's own
//! `expires-at` label, patched in place (with the pod's uid: a pod made again under the same
//! name meanwhile is not touched). Every replica, the reaper and a restart read it from the
//! pod at once.

use serde_json::{json, Value};

use super::api::{ApiError, Method, Reason};
use super::refusals::api_error;
use super::K8sBackend;
use crate::backend::{labels, BackendError, Renewal, Worker, WorkerState};

impl Renewal for K8sBackend {
    fn find(&self, worker_id: &str) -> Result<Worker, BackendError> {
        let pod = match self.owned_pod(worker_id) {
            Ok((_, w)) => Some(w),
            Err(BackendError::NotFound) => None,
            Err(e) => return Err(e),
        };
        self.one_with_record(worker_id, pod)?
            .ok_or(BackendError::NotFound)
    }

    fn renew(&self, worker: &Worker, expires_at: Option<u64>) -> Result<Worker, BackendError> {
        let (pod, worker) = self.owned_pod(&worker.worker_id)?;
        if worker.state == WorkerState::Stopping {
            return Err(BackendError::NotFound);
        }
        let value = match expires_at {
            Some(at) => json!(at.to_string()),
            None => Value::Null,
        };
        let patch = json!({"metadata": {
            "uid": pod.metadata.uid,
            "labels": { labels::EXPIRES_AT: value },
        }});
        let path = format!("{}/{}", self.pods_path(), pod.metadata.name);
        match self.api.call(Method::Patch, &path, Some(&patch)) {
            Ok(_) => {}
            // Gone, or another pod under its name now: not this worker any more.
            // (a changed uid is 422 Invalid, "field is immutable", on the real server)
            Err(ApiError::Status {
                reason: Reason::NotFound | Reason::Conflict | Reason::Invalid,
                ..
            }) => return Err(BackendError::NotFound),
            Err(e) => return Err(api_error(e)),
        }
        Ok(worker.expiring(expires_at))
    }
}
