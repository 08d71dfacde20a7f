//! Workspace copies on Kubernetes for storage classes that do not clone: a Job of
//! `WORKSPACE_COPY_IMAGE` (the controller's own image) runs its `copy-files /from /to`
//! (`crate::fork::copy_into`) with the source claim mounted read-only at `/from` and the new
//! claim at `/to`.
//!
//! The namespace enforces PodSecurity `restricted`, which forbids the root that keeps every
//! owner, so the Job's pod runs as the workers do (the user, group and `fsGroup` of
//! `K8S_POD_TEMPLATE`, else 65532): it reads the source through the workers' group, and what
//! it writes is the workers' (an owner it may not give is counted in its output, not an
//! error). No capabilities, no privilege escalation, a read-only root, no service account
//! token, never restarted (`backoffLimit` 0), ended after an hour (`activeDeadlineSeconds`).
//! It carries the label `copy` (the controller id), never `owner`: its pod is no worker.
//!
//! Whole or nothing: the new claim is made with the annotation `copying` and keeps it until
//! the Job has succeeded; while it is there the claim is not listed, a create of its task is
//! refused and no pod mounts it. A controller killed meanwhile leaves the mark:
//! [`K8sBackend::tidy_copy_jobs`] finishes a copy whose Job succeeded, removes (with the claim)
//! one whose Job failed or is gone, and leaves one still running — and a mark younger than a
//! minute without a Job to the controller that is making it. The Role grows by `create`,
//! `get` and `delete` on `jobs` (group `batch`).

use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::{json, Value};

use super::api::{ApiError, Method, Reason};
use super::copy::Fill;
use super::pod::DEFAULT_RUN_AS_USER;
use super::refusals::api_error;
use super::status::{Pod, Progress as PodProgress};
use super::workspace::claim_name;
use super::{percent_encode, K8sBackend};
use crate::backend::{labels, BackendError, Progress};

/// The longest a copy may run (the Job's `activeDeadlineSeconds`).
const COPY_TIMEOUT: Duration = Duration::from_secs(3600);
/// A mark younger than this without a Job is left to the controller making the copy (between
/// its claim and its Job).
const START_GRACE_SECS: u64 = 60;
/// How often a copy's Job is looked at.
const POLL: Duration = Duration::from_millis(500);

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
struct Job {
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
enum Outcome {
    Running,
    Done,
    /// Its reason and message.
    Failed(String),
}

impl Job {
    fn outcome(&self) -> Outcome {
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
    fn jobs_path(&self) -> String {
        format!("/apis/batch/v1/namespaces/{}/jobs", self.namespace)
    }

    /// The copy Job of the workspace of (scope, task): named like the task's pod, which fits a
    /// Job's 63 characters.
    fn copy_job_name(&self, scope: &str, task: &str) -> String {
        format!(
            "{}-copy",
            labels::pod_name(&self.controller_id, scope, task)
        )
    }

    /// The copy Job: `from` (a claim, read-only) into `to` (the new claim), as the workers'
    /// user, on the nodes the workers' template asks for.
    fn copy_job_manifest(&self, image: &str, name: &str, from: &str, to: &str) -> Value {
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

    /// Fills a new claim of task `to` from claim `source` by a copy Job, waiting for it; what
    /// fails removes what it made.
    pub(super) fn copy_by_job(
        &self,
        source: &Value,
        scope: &str,
        from: &str,
        to: &str,
        progress: &Progress,
    ) -> Result<(), BackendError> {
        let class = source["spec"]["storageClassName"].as_str().unwrap_or("");
        let Some(image) = self.container.copy_image.as_deref() else {
            return Err(BackendError::Refused(format!(
                "task {from:?}'s workspace is of storage class {}, which K8S_CLONE_STORAGE_CLASSES does not name as one that clones, and a copy by a Job needs WORKSPACE_COPY_IMAGE (the controller's own image)",
                if class.is_empty() { "(the cluster's default)" } else { class }
            )));
        };
        let claim = claim_name(&self.controller_id, scope, to);
        let job = self.copy_job_name(scope, to);
        self.make_copy_claim(&self.copy_manifest(source, scope, to, Fill::Job), to)?;
        let body = self.copy_job_manifest(
            image,
            &job,
            source["metadata"]["name"].as_str().unwrap_or(""),
            &claim,
        );
        let path = format!("{}?fieldValidation=Strict", self.jobs_path());
        progress.step(&format!(
            "copying the workspace of task {from:?} by the Job {job}"
        ));
        let made = self
            .api
            .call(Method::Post, &path, Some(&body))
            .map_err(api_error)
            .and_then(|_| self.wait_copy_job(&job, from, progress));
        match made {
            Ok(()) => self.finish_copy(&claim, &job),
            Err(e) => {
                let left = self.drop_copy(&claim, &job);
                Err(annotate(e, &left))
            }
        }
    }

    /// Waits for the Job to succeed or fail; a pod the Job controller may not make (its
    /// `FailedCreate` event), or that cannot start (its image, no node for it after the
    /// readiness timeout), fails the copy without waiting out the hour.
    fn wait_copy_job(
        &self,
        job: &str,
        from: &str,
        progress: &Progress,
    ) -> Result<(), BackendError> {
        let began = Instant::now();
        let mut said = String::new();
        loop {
            let found: Job = self.job(job)?.ok_or_else(|| {
                BackendError::Internal(format!("the copy Job {job} was deleted while it ran"))
            })?;
            match found.outcome() {
                Outcome::Done => return Ok(()),
                Outcome::Failed(why) => {
                    return Err(BackendError::Internal(format!(
                        "the copy of task {from:?}'s workspace failed ({why}){}",
                        self.last_words(job)
                    )))
                }
                Outcome::Running => {}
            }
            let pod = self.copy_pods(job)?.into_iter().next();
            if pod.is_none() {
                // The Job controller could not make the pod (PodSecurity, a quota): its event
                // says why, and it will not get better by waiting.
                if let Some(why) = self
                    .last_warning(job)
                    .filter(|w| w.starts_with("FailedCreate"))
                {
                    return Err(BackendError::Refused(format!(
                        "the copy Job {job} cannot make its pod: {why}"
                    )));
                }
            }
            let (started, text) = copy_pod_state(pod.as_ref(), job)?;
            if text != said {
                progress.step(&format!("the copy Job {job}: {text}"));
                said = text.clone();
            }
            let waited = began.elapsed();
            if !started && waited >= self.ready_timeout {
                return Err(BackendError::NotReady(format!(
                    "the copy Job {job}'s pod did not start in {}s: {text}",
                    waited.as_secs()
                )));
            }
            if waited >= COPY_TIMEOUT + Duration::from_secs(60) {
                return Err(BackendError::Internal(format!(
                    "the copy Job {job} ran past its deadline"
                )));
            }
            std::thread::sleep(POLL);
        }
    }

    fn job(&self, name: &str) -> Result<Option<Job>, BackendError> {
        match self
            .api
            .call(Method::Get, &format!("{}/{name}", self.jobs_path()), None)
        {
            Ok((_, body)) => serde_json::from_slice(&body)
                .map(Some)
                .map_err(|e| BackendError::Internal(format!("unexpected Job: {e}"))),
            Err(ApiError::Status {
                reason: Reason::NotFound,
                ..
            }) => Ok(None),
            Err(e) => Err(api_error(e)),
        }
    }

    /// The pods of Job `job` (the Job controller labels them with its name).
    fn copy_pods(&self, job: &str) -> Result<Vec<Pod>, BackendError> {
        let selector = format!("batch.kubernetes.io/job-name={job}");
        let path = format!(
            "{}?labelSelector={}",
            self.pods_path(),
            percent_encode(&selector)
        );
        let (_, body) = self.api.call(Method::Get, &path, None).map_err(api_error)?;
        super::status::parse_page(&body, &mut |_| {}).map_err(BackendError::Internal)
    }

    /// `: <the last lines the copy printed>`, or nothing.
    fn last_words(&self, job: &str) -> String {
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

    /// A copy whose Job succeeded: the claim's mark removed (it is a workspace from now on),
    /// then the Job with its pod.
    fn finish_copy(&self, claim: &str, job: &str) -> Result<(), BackendError> {
        let patch = json!({"metadata": {"annotations": {labels::COPYING: null}}});
        self.api
            .call(
                Method::Patch,
                &format!("{}/{claim}", self.claims_path()),
                Some(&patch),
            )
            .map_err(api_error)?;
        if let Err(e) = self.delete_job(job) {
            log::warn!(
                "the finished copy Job {job} could not be deleted: {}",
                api_error(e)
            );
        }
        Ok(())
    }

    /// Deletes Job `name` and its pods (background propagation: a Job's own default orphans
    /// them); gone already counts as deleted.
    fn delete_job(&self, name: &str) -> Result<(), ApiError> {
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

    /// Removes what a copy made (its Job, then its claim): what became of them, when not all
    /// went ("" when it did).
    fn drop_copy(&self, claim: &str, job: &str) -> String {
        let mut left = Vec::new();
        if let Err(e) = self.delete_job(job) {
            left.push(format!("the copy Job {job} was kept: {}", api_error(e)));
        }
        let path = format!("{}/{claim}", self.claims_path());
        match self.api.call(Method::Delete, &path, None) {
            Ok(_)
            | Err(ApiError::Status {
                reason: Reason::NotFound,
                ..
            }) => {}
            Err(e) => left.push(format!(
                "the unfinished claim {claim} was kept (the next tidy removes it): {}",
                api_error(e)
            )),
        }
        left.join("; ")
    }

    /// Settles the claims copies cut off left marked: how many.
    pub(super) fn tidy_copy_jobs(&self) -> Result<usize, BackendError> {
        let selector = format!("{}={}", labels::OWNER, self.controller_id);
        let path = format!(
            "{}?labelSelector={}",
            self.claims_path(),
            percent_encode(&selector)
        );
        let (_, body) = self.api.call(Method::Get, &path, None).map_err(api_error)?;
        let list: Value = serde_json::from_slice(&body)
            .map_err(|e| BackendError::Internal(format!("unexpected claim list: {e}")))?;
        let now = crate::time::now_millis() / 1000;
        let mut settled = 0;
        for claim in list["items"].as_array().into_iter().flatten() {
            let meta = &claim["metadata"];
            let Some(since) = meta["annotations"][labels::COPYING].as_str() else {
                continue;
            };
            let (Some(name), Some(scope), Some(task)) = (
                meta["name"].as_str(),
                meta["labels"][labels::SCOPE].as_str(),
                meta["annotations"][labels::TASK].as_str(),
            ) else {
                continue;
            };
            if !meta["deletionTimestamp"].is_null() {
                continue;
            }
            let job = self.copy_job_name(scope, task);
            let young = since
                .parse::<u64>()
                .is_ok_and(|t| now < t + START_GRACE_SECS);
            let outcome = self.job(&job)?.map(|j| j.outcome());
            let what = match outcome {
                Some(Outcome::Running) => continue,
                None if young => continue,
                Some(Outcome::Done) => match self.finish_copy(name, &job) {
                    Ok(()) => "finished (its Job had succeeded)".to_string(),
                    Err(e) => {
                        log::warn!("the copy into claim {name} could not be finished: {e}");
                        continue;
                    }
                },
                Some(Outcome::Failed(why)) => {
                    self.dropped(name, &job, &format!("its Job failed: {why}"))
                }
                None => self.dropped(name, &job, "its Job is gone"),
            };
            log::info!("the copy into claim {name} (task {task:?}), cut off: {what}");
            settled += 1;
        }
        Ok(settled)
    }

    /// Removes a cut-off copy; the words for the log.
    fn dropped(&self, claim: &str, job: &str, why: &str) -> String {
        let left = self.drop_copy(claim, job);
        if left.is_empty() {
            format!("removed ({why})")
        } else {
            format!("removal tried ({why}): {left}")
        }
    }
}

/// Whether a copy Job's pod has started, and what it is doing; a pod whose image cannot be
/// pulled fails the copy. A pod that ended is the copy's end (the Job's conditions say which
/// next), not a worker that failed to get ready.
fn copy_pod_state(pod: Option<&Pod>, job: &str) -> Result<(bool, String), BackendError> {
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

/// `e` with what was left of the copy said after it.
fn annotate(e: BackendError, left: &str) -> BackendError {
    if left.is_empty() {
        return e;
    }
    match e {
        BackendError::Internal(m) => BackendError::Internal(format!("{m}; {left}")),
        BackendError::NotReady(m) => BackendError::NotReady(format!("{m}; {left}")),
        other => {
            log::warn!("after a failed copy: {left}");
            other
        }
    }
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
