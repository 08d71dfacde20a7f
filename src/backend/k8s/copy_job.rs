//! The copy Job of a workspace copy on Kubernetes (a storage class that does not clone; the
//! run and its tidying are `copy_by_job`): a Job of `WORKSPACE_COPY_IMAGE` (the controller's
//! own image) runs its `copy-files /from /to` (`crate::fork::copy_into`) with the source claim
//! mounted read-only at `/from` and the new claim at `/to`.
//!
//! The namespace enforces PodSecurity `restricted`, which forbids the root that keeps every
//! owner, so the Job's pod runs as the workers do (the user, group and `fsGroup` of
//! `K8S_POD_TEMPLATE`, else 65532): it reads the source through the workers' group, and what
//! it writes is the workers' (an owner or mode it may not set is counted in its output, not an
//! error). No capabilities, no privilege escalation, a read-only root, no service account
//! token, never restarted (`backoffLimit` 0), ended after an hour (`activeDeadlineSeconds`).
//! It carries the label `copy` (the controller id), never `owner`: its pod is no worker. The
//! Role grows by `create`, `get` and `delete` on `jobs` (group `batch`).

use std::time::Duration;

use serde::Deserialize;
use serde_json::{json, Value};

use super::api::{ApiError, Method, Reason};
use super::pod::DEFAULT_RUN_AS_USER;
use super::status::{Pod, Progress as PodProgress};
use super::{percent_encode, K8sBackend};
use crate::backend::{labels, BackendError};

/// The longest a copy may run (the Job's `activeDeadlineSeconds`).
pub(super) const COPY_TIMEOUT: Duration = Duration::from_secs(3600);

/// The copy Job, but its names, image, user and labels (`copy_job_manifest` fills them in):
/// one pod, never restarted, no capabilities, a read-only root, no service account token, the
/// source read-only at `/from`, the new claim at `/to`. (Text, not `json!`: the same object in
/// a fraction of the code.)
const JOB: &str = r#"{
  "apiVersion": "batch/v1", "kind": "Job", "metadata": {},
  "spec": {"backoffLimit": 0, "template": {"metadata": {}, "spec": {
    "restartPolicy": "Never", "automountServiceAccountToken": false, "enableServiceLinks": false,
    "containers": [{
      "name": "copy", "args": ["copy-files", "/from", "/to"],
      "securityContext": {"allowPrivilegeEscalation": false, "privileged": false,
        "readOnlyRootFilesystem": true, "runAsNonRoot": true, "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"}},
      "resources": {"requests": {"cpu": "100m", "memory": "32Mi"},
        "limits": {"cpu": "1", "memory": "256Mi"}},
      "volumeMounts": [{"name": "from", "mountPath": "/from", "readOnly": true},
        {"name": "to", "mountPath": "/to"}]}],
    "volumes": [{"name": "from", "persistentVolumeClaim": {"readOnly": true}},
      {"name": "to", "persistentVolumeClaim": {}}]}}}
}"#;

/// A Job as the API answers it (the fields used).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct Job {
    status: JobStatus,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct JobStatus {
    conditions: Vec<JobCondition>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct JobCondition {
    #[serde(rename = "type")]
    kind: String,
    status: String,
    reason: String,
    message: String,
}

/// Where a copy Job stands.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Outcome {
    Running,
    Done,
    /// Its reason and message.
    Failed(String),
}

impl Job {
    pub(super) fn outcome(&self) -> Outcome {
        let set = |kind: &str| {
            self.status
                .conditions
                .iter()
                .find(|c| c.kind == kind && c.status == "True")
        };
        if set("Complete").is_some() {
            return Outcome::Done;
        }
        match set("Failed") {
            Some(c) if c.message.is_empty() => Outcome::Failed(c.reason.clone()),
            Some(c) => Outcome::Failed(format!("{}: {}", c.reason, c.message)),
            None => Outcome::Running,
        }
    }
}

/// The pod-level security of the workers (`K8S_POD_TEMPLATE`'s, else the default user), which
/// the copy runs as: restricted, with the workers' user, group and `fsGroup`.
fn workers_security(template: Option<&Value>) -> Value {
    let pod = template.map(|t| &t["spec"]["securityContext"]);
    let worker = template
        .and_then(|t| t["spec"]["containers"].as_array())
        .and_then(|cs| {
            cs.iter()
                .find(|c| c["name"] == super::pod::WORKER_CONTAINER)
        })
        .map(|c| &c["securityContext"]);
    let field = |name: &str| {
        worker
            .map(|w| &w[name])
            .filter(|v| v.is_u64())
            .or_else(|| pod.map(|p| &p[name]).filter(|v| v.is_u64()))
            .cloned()
    };
    let user = field("runAsUser").unwrap_or(json!(DEFAULT_RUN_AS_USER));
    let fs_group = pod
        .map(|p| &p["fsGroup"])
        .filter(|v| v.is_u64())
        .cloned()
        .unwrap_or_else(|| user.clone());
    let mut security = json!({
        "runAsNonRoot": true,
        "runAsUser": user,
        "fsGroup": fs_group,
        "seccompProfile": {"type": "RuntimeDefault"},
    });
    if let Some(group) = field("runAsGroup") {
        security["runAsGroup"] = group;
    }
    security
}

impl K8sBackend {
    pub(super) fn jobs_path(&self) -> String {
        format!("/apis/batch/v1/namespaces/{}/jobs", self.namespace)
    }

    /// The copy Job of the workspace of (scope, task): named like the task's pod, which fits a
    /// Job's 63 characters.
    pub(super) fn copy_job_name(&self, scope: &str, task: &str) -> String {
        format!(
            "{}-copy",
            labels::pod_name(&self.controller_id, scope, task)
        )
    }

    /// The copy Job: `from` (a claim, read-only) into `to` (the new claim), as the workers'
    /// user, on the nodes the workers' template asks for.
    pub(super) fn copy_job_manifest(&self, image: &str, name: &str, from: &str, to: &str) -> Value {
        let mut job: Value = serde_json::from_str(JOB).unwrap_or_default();
        job["metadata"]["name"] = json!(name);
        job["metadata"]["namespace"] = json!(self.namespace);
        let mark = json!({labels::COPY: self.controller_id});
        job["metadata"]["labels"] = mark.clone();
        job["spec"]["activeDeadlineSeconds"] = json!(COPY_TIMEOUT.as_secs());
        let template = &mut job["spec"]["template"];
        template["metadata"]["labels"] = mark;
        let spec = &mut template["spec"];
        spec["securityContext"] = workers_security(self.template.as_ref());
        spec["containers"][0]["image"] = json!(image);
        spec["volumes"][0]["persistentVolumeClaim"]["claimName"] = json!(from);
        spec["volumes"][1]["persistentVolumeClaim"]["claimName"] = json!(to);
        for field in ["nodeSelector", "tolerations", "imagePullSecrets"] {
            if let Some(v) = self.template.as_ref().map(|t| &t["spec"][field]) {
                if !v.is_null() {
                    spec[field] = v.clone();
                }
            }
        }
        job
    }

    pub(super) fn job(&self, name: &str) -> Result<Option<Job>, BackendError> {
        self.get_as(&format!("{}/{name}", self.jobs_path()), "Job")
    }

    /// The pods of Job `job` (the Job controller labels them with its name).
    pub(super) fn copy_pods(&self, job: &str) -> Result<Vec<Pod>, BackendError> {
        self.select(&[format!("batch.kubernetes.io/job-name={job}")])
    }

    /// `: <the last lines the copy printed>`, or nothing.
    pub(super) fn last_words(&self, job: &str) -> String {
        let Some(pod) = self.copy_pods(job).ok().and_then(|p| p.into_iter().next()) else {
            return String::new();
        };
        let path = format!(
            "{}/{}/log?container=copy&tailLines=3",
            self.pods_path(),
            percent_encode(&pod.metadata.name)
        );
        match self.api.log_tail(&path, 3) {
            Ok(Some(l)) if !l.text.trim().is_empty() => {
                format!(": {}", l.text.trim().replace('\n', "; "))
            }
            _ => String::new(),
        }
    }

    /// Deletes Job `name` and its pods (background propagation: a Job's own default orphans
    /// them); gone already counts as deleted.
    pub(super) fn delete_job(&self, name: &str) -> Result<(), ApiError> {
        let path = format!("{}/{name}?propagationPolicy=Background", self.jobs_path());
        match self.api.call(Method::Delete, &path, None) {
            Ok(_)
            | Err(ApiError::Status {
                reason: Reason::NotFound,
                ..
            }) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

/// Whether a copy Job's pod has started, and what it is doing; a pod whose image cannot be
/// pulled fails the copy. A pod that ended is the copy's end (the Job's conditions say which
/// next), not a worker that failed to get ready.
pub(super) fn copy_pod_state(pod: Option<&Pod>, job: &str) -> Result<(bool, String), BackendError> {
    let Some(pod) = pod else {
        return Ok((false, "waiting for the Job's pod".into()));
    };
    match pod.status.phase.as_str() {
        "Succeeded" => return Ok((true, "the copy ended".into())),
        "Failed" => return Ok((true, "the copy failed".into())),
        _ => {}
    }
    Ok(match pod.progress() {
        PodProgress::ImageFailed(t) => {
            return Err(BackendError::ImageNotFound(format!(
                "{t} (WORKSPACE_COPY_IMAGE, the copy Job {job})"
            )))
        }
        PodProgress::Ready => (true, "copying".into()),
        PodProgress::Waiting(t) | PodProgress::Unschedulable(t) => (false, t),
        PodProgress::Failed(t) | PodProgress::Deleted(t) => (true, t),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_copy_job_text_is_a_whole_job() {
        let job: Value = serde_json::from_str(JOB).unwrap();
        let pod = &job["spec"]["template"]["spec"];
        assert_eq!(job["spec"]["backoffLimit"], 0);
        assert_eq!(
            pod["containers"][0]["args"],
            json!(["copy-files", "/from", "/to"])
        );
        assert_eq!(pod["volumes"][0]["persistentVolumeClaim"]["readOnly"], true);
        assert_eq!(pod["automountServiceAccountToken"], false);
    }

    #[test]
    fn the_copy_runs_as_the_workers_user_group_and_fs_group() {
        assert_eq!(
            workers_security(None),
            json!({"runAsNonRoot": true, "runAsUser": DEFAULT_RUN_AS_USER,
                   "fsGroup": DEFAULT_RUN_AS_USER, "seccompProfile": {"type": "RuntimeDefault"}})
        );
        let template = json!({"spec": {
            "securityContext": {"runAsUser": 1000, "runAsGroup": 3000, "fsGroup": 2000},
            "containers": [{"name": "worker", "securityContext": {"runAsUser": 1001}}]}});
        let s = workers_security(Some(&template));
        assert_eq!(
            (&s["runAsUser"], &s["runAsGroup"], &s["fsGroup"]),
            (&json!(1001), &json!(3000), &json!(2000))
        );
    }

    #[test]
    fn a_copy_pod_that_ended_is_the_copy_and_one_without_its_image_fails_it() {
        let pod = |status: Value| -> Pod {
            serde_json::from_value(json!({"metadata": {"name": "j-abcde"}, "status": status}))
                .unwrap()
        };
        let ended = pod(json!({"phase": "Succeeded"}));
        assert_eq!(
            copy_pod_state(Some(&ended), "j").unwrap(),
            (true, "the copy ended".to_string())
        );
        let pending = pod(
            json!({"phase": "Pending", "containerStatuses": [{"name": "copy",
            "state": {"waiting": {"reason": "ErrImagePull", "message": "not found"}}}]}),
        );
        assert!(matches!(
            copy_pod_state(Some(&pending), "j"),
            Err(BackendError::ImageNotFound(m)) if m.contains("WORKSPACE_COPY_IMAGE")
        ));
        assert!(!copy_pod_state(None, "j").unwrap().0);
    }

    #[test]
    fn a_job_is_done_failed_or_running_by_its_conditions() {
        let job = |conds: Value| -> Job {
            serde_json::from_value(json!({"status": {"conditions": conds}})).unwrap()
        };
        assert_eq!(job(json!([])).outcome(), Outcome::Running);
        assert_eq!(
            job(json!([{"type": "SuccessCriteriaMet", "status": "True"},
                       {"type": "Complete", "status": "True"}]))
            .outcome(),
            Outcome::Done
        );
        assert_eq!(
            job(
                json!([{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                        "message": "Job has reached the specified backoff limit"}])
            )
            .outcome(),
            Outcome::Failed(
                "BackoffLimitExceeded: Job has reached the specified backoff limit".into()
            )
        );
        assert_eq!(
            job(json!([{"type": "FailureTarget", "status": "True", "reason": "DeadlineExceeded"}]))
                .outcome(),
            Outcome::Running
        );
    }
}
