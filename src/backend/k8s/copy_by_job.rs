//! A workspace copy by a Job (`copy_job`), from start to end: the new claim is made with the
//! annotation `copying` and keeps it until the Job has succeeded; while it is there the claim
//! is not listed, a create of its task is refused and no pod mounts it (whole or nothing). A
//! copy that fails removes its Job and claim and says why in one line. A controller killed
//! meanwhile leaves the mark: [`K8sBackend::tidy_copy_jobs`] finishes a copy whose Job
//! succeeded, removes (with the claim) one whose Job failed or is gone, and leaves one still
//! running — and a mark younger than a minute without a Job to the controller that is making it.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::api::Method;
use super::copy::Fill;
use super::copy_job::{copy_pod_state, Outcome, COPY_TIMEOUT};
use super::refusals::api_error;
use super::workspace::claim_name;
use super::K8sBackend;
use crate::backend::{labels, BackendError, Progress};

/// A mark younger than this without a Job is left to the controller making the copy (between
/// its claim and its Job).
const START_GRACE_SECS: u64 = 60;
/// How often a copy's Job is looked at.
const POLL: Duration = Duration::from_millis(500);

impl K8sBackend {
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
                Err(if left.is_empty() {
                    e
                } else {
                    e.with_note(&left)
                })
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
            let found = self.job(job)?.ok_or_else(|| {
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

    /// A copy whose Job succeeded: the claim's mark removed (it is a workspace from now on),
    /// then the Job with its pod.
    fn finish_copy(&self, claim: &str, job: &str) -> Result<(), BackendError> {
        self.annotate_claim(claim, json!({labels::COPYING: null}))?;
        if let Err(e) = self.delete_job(job) {
            log::warn!(
                "the finished copy Job {job} could not be deleted: {}",
                api_error(e)
            );
        }
        Ok(())
    }

    /// Removes what a copy made (its Job, then its claim): what became of them, when not all
    /// went ("" when it did).
    fn drop_copy(&self, claim: &str, job: &str) -> String {
        let mut left = Vec::new();
        if let Err(e) = self.delete_job(job) {
            left.push(format!("the copy Job {job} was kept: {}", api_error(e)));
        }
        if let Err(e) = self.delete_claim_named(claim) {
            left.push(format!(
                "the unfinished claim {claim} was kept (the next tidy removes it): {}",
                api_error(e)
            ));
        }
        left.join("; ")
    }

    /// Settles the claims copies cut off left marked: how many.
    pub(super) fn tidy_copy_jobs(&self) -> Result<usize, BackendError> {
        let now = crate::time::now_millis() / 1000;
        let mut settled = 0;
        for claim in self.workspace_claims()? {
            let meta = &claim.metadata;
            let notes = meta.annotations.as_ref();
            let (Some(since), Some(task), Some(scope), None) = (
                notes.and_then(|n| n.get(labels::COPYING)),
                notes.and_then(|n| n.get(labels::TASK)),
                meta.labels
                    .clone()
                    .and_then(|l| labels::owned_workspace(l, &self.controller_id)),
                &meta.deletion_timestamp,
            ) else {
                continue;
            };
            let (name, scope) = (meta.name.as_str(), scope.scope.as_str());
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
