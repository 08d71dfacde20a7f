//! Suspend and resume on Kubernetes. Deleting the pod is what frees its node, so a suspended
//! worker is a record: a Secret named as the worker's pod (type
//! `a2a-worker-controller/suspended-worker`), carrying the worker's labels (owner, worker id,
//! task, scope, template, token hash, its `expires-at` while suspended, `suspended-at`,
//! `ttl-left`), its task and metadata as annotations, and one data key, `token`: the worker's
//! own token, so it is valid again once resumed. A Secret because of that token: a role that can
//! only read pods reads nothing of it. Its files are its task workspace's claim, which outlives
//! the pod: a template without a workspace cannot be suspended here.
//!
//! One worker per task holds by the engine throughout: a create posts the task's pod (the name
//! the engine keeps unique), then looks for a record of the same name and, finding one, deletes
//! the pod it made and answers `worker_exists` (`suspended`); a resume makes the pod under that
//! name (a create racing it gets the API's 409), then deletes the record.

use std::collections::HashMap;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::{json, Value};

use super::api::{ApiError, Method, Reason};
use super::refusals::api_error;
use super::{delete_pod, pod, K8sBackend, STOP_GRACE_SECS};
use crate::backend::lease::{SUSPENDED_AT, TTL_LEFT};
use crate::backend::{
    labels, BackendError, BackendKind, CreateSpec, Progress, Suspend, Suspension, Template, Worker,
    WorkerState,
};
use crate::time::{now_millis, rfc3339_secs};
use crate::token::Token;

/// The Secret type of a suspended worker's record.
pub const RECORD_TYPE: &str = "a2a-worker-controller/suspended-worker";
/// On a record: the worker's `created_at` (its pod is made again on resume).
const CREATED_AT: &str = "a2a-worker-controller/created-at";

/// A record as the API returns it (the fields used).
#[derive(Debug, Deserialize)]
struct Secret {
    metadata: SecretMeta,
    #[serde(default)]
    data: HashMap<String, String>,
}

#[derive(Debug, Deserialize)]
struct SecretMeta {
    name: String,
    #[serde(default)]
    labels: HashMap<String, String>,
    #[serde(default)]
    annotations: HashMap<String, String>,
}

#[derive(Deserialize)]
struct SecretList {
    #[serde(default)]
    items: Vec<Secret>,
}

/// A suspended worker as its record says.
pub(super) struct Record {
    name: String,
    pub worker: Worker,
    token: String,
    ttl_left: Option<u64>,
}

impl Record {
    fn of(s: Secret, controller_id: &str) -> Option<Record> {
        let l = &s.metadata.labels;
        if l.get(labels::OWNER).map(String::as_str) != Some(controller_id) {
            return None;
        }
        let number = |k: &str| l.get(k).and_then(|v| v.parse::<u64>().ok());
        let worker_id = l.get(labels::WORKER_ID)?.clone();
        let a = &s.metadata.annotations;
        let task = a.get(labels::TASK).cloned().unwrap_or_default();
        let at = number(SUSPENDED_AT).unwrap_or(0);
        let created = a.get(CREATED_AT).cloned().unwrap_or_default();
        let mut worker = Worker::new(
            BackendKind::K8s,
            worker_id,
            task,
            WorkerState::Suspended,
            created,
        )
        .expiring(number(labels::EXPIRES_AT))
        .tagged(labels::meta_of(a.iter()))
        .scoped(l.get(labels::SCOPE).cloned().unwrap_or_default())
        .templated(l.get(labels::TEMPLATE).cloned().unwrap_or_default())
        .hashed(l.get(labels::TOKEN_HASH).cloned().unwrap_or_default());
        worker.reason = format!("suspended at {}", rfc3339_secs(at));
        let token = s
            .data
            .get("token")
            .and_then(|b| crate::base64::decode(b))
            .and_then(|b| String::from_utf8(b).ok())
            .unwrap_or_default();
        Some(Record {
            name: s.metadata.name,
            worker,
            token,
            ttl_left: number(TTL_LEFT),
        })
    }
}

impl K8sBackend {
    pub(super) fn secrets_path(&self) -> String {
        format!("/api/v1/namespaces/{}/secrets", self.namespace)
    }

    /// This controller's records of suspended workers (of one worker, when given).
    pub(super) fn records(&self, worker_id: Option<&str>) -> Result<Vec<Record>, BackendError> {
        let mut selector = vec![
            format!("{}={}", labels::OWNER, self.controller_id),
            SUSPENDED_AT.to_string(),
        ];
        if let Some(id) = worker_id {
            if !labels::is_label_value(id) {
                return Ok(Vec::new());
            }
            selector.push(format!("{}={id}", labels::WORKER_ID));
        }
        let path = format!(
            "{}?labelSelector={}",
            self.secrets_path(),
            crate::backend::api_call::percent_encode(&selector.join(","))
        );
        let body = match self.api.call(Method::Get, &path, None) {
            Ok((_, body)) => body,
            // A Role without secrets (deployed before suspensions): none can exist.
            Err(ApiError::Status {
                reason: Reason::Forbidden,
                ..
            }) => return Ok(Vec::new()),
            Err(e) => return Err(api_error(e)),
        };
        let list: SecretList = serde_json::from_slice(&body).map_err(|e| {
            BackendError::Internal(format!(
                "unexpected secret list from the Kubernetes API: {e}"
            ))
        })?;
        Ok(list
            .items
            .into_iter()
            .filter_map(|s| Record::of(s, &self.controller_id))
            .collect())
    }

    /// `workers` (a list) with the suspended ones: each record stands for its worker when no
    /// pod does, or when its pod is in its grace period (suspended a moment ago). A running
    /// pod beside its record is the worker (a resume under way, or a suspend cut short).
    pub(super) fn with_records(
        &self,
        mut workers: Vec<Worker>,
    ) -> Result<Vec<Worker>, BackendError> {
        let records = self.records(None)?;
        if records.is_empty() {
            return Ok(workers);
        }
        for r in records {
            match workers
                .iter_mut()
                .find(|w| w.worker_id == r.worker.worker_id)
            {
                Some(w) if w.state == WorkerState::Stopping => *w = r.worker,
                Some(_) => {}
                None => workers.push(r.worker),
            }
        }
        workers.sort_by(|a, b| a.created_at.cmp(&b.created_at));
        Ok(workers)
    }

    /// One worker (`None`: no pod) as [`K8sBackend::with_records`] would list it.
    pub(super) fn one_with_record(
        &self,
        worker_id: &str,
        pod: Option<Worker>,
    ) -> Result<Option<Worker>, BackendError> {
        if pod
            .as_ref()
            .is_some_and(|w| w.state != WorkerState::Stopping)
        {
            return Ok(pod);
        }
        let record = self.records(Some(worker_id))?.into_iter().next();
        Ok(record.map(|r| r.worker).or(pod))
    }

    /// Deletes the record `name` (gone already is fine).
    fn delete_record(&self, name: &str) -> Result<(), BackendError> {
        let path = format!("{}/{name}", self.secrets_path());
        match self.api.call(Method::Delete, &path, None) {
            Ok(_)
            | Err(ApiError::Status {
                reason: Reason::NotFound,
                ..
            }) => Ok(()),
            Err(e) => Err(api_error(e)),
        }
    }

    /// A suspended worker's record, by id; `NotFound` without one. Stopping it deletes it.
    pub(super) fn stop_suspended(&self, worker_id: &str) -> Result<Worker, BackendError> {
        let record = self
            .records(Some(worker_id))?
            .into_iter()
            .next()
            .ok_or(BackendError::NotFound)?;
        self.delete_record(&record.name)?;
        Ok(record.worker)
    }

    /// After a create posted `name`: a record of that name means the task's worker is
    /// suspended; the pod just made goes, and the create is refused.
    pub(super) fn refuse_if_suspended(&self, name: &str) -> Result<(), BackendError> {
        let path = format!("{}/{name}", self.secrets_path());
        let secret = match self.api.call(Method::Get, &path, None) {
            Ok((_, body)) => serde_json::from_slice::<Secret>(&body).ok(),
            Err(ApiError::Status {
                reason: Reason::NotFound | Reason::Forbidden,
                ..
            }) => None,
            Err(e) => return Err(api_error(e)),
        };
        let Some(record) = secret.and_then(|s| Record::of(s, &self.controller_id)) else {
            return Ok(());
        };
        if let Err(e) = delete_pod(&self.api, &self.pods_path(), name, 0, None) {
            log::warn!("the pod {name} of a create refused for a suspended worker stays: {e}");
        }
        Err(BackendError::WorkerExists {
            worker_id: record.worker.worker_id,
            state: WorkerState::Suspended,
        })
    }

    /// The worker's own token, from its pod's environment.
    fn token_of(&self, pod_name: &str) -> Result<String, BackendError> {
        let path = format!("{}/{pod_name}", self.pods_path());
        let (_, body) = self.api.call(Method::Get, &path, None).map_err(api_error)?;
        let pod: Value = serde_json::from_slice(&body)
            .map_err(|e| BackendError::Internal(format!("unexpected pod: {e}")))?;
        pod["spec"]["containers"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|c| c["name"] == pod::WORKER_CONTAINER)
            .flat_map(|c| c["env"].as_array().cloned().unwrap_or_default())
            .find(|e| e["name"] == self.container.token_env.as_str())
            .and_then(|e| e["value"].as_str().map(String::from))
            .ok_or_else(|| {
                BackendError::Internal(format!(
                    "the worker's pod {pod_name} holds no {} to keep",
                    self.container.token_env
                ))
            })
    }

    /// The record of `worker` (its pod `pod_name`), suspended as `how` says.
    fn record_body(&self, worker: &Worker, pod_name: &str, how: &Suspend, token: &str) -> Value {
        let mut l = serde_json::Map::new();
        l.insert(labels::OWNER.into(), json!(self.controller_id));
        let own = labels::identity(
            &worker.worker_id,
            labels::task_label_value(&worker.task),
            &worker.scope,
            &worker.template,
            how.until,
            &worker.token_hash,
        );
        for (k, v) in own {
            l.insert(k.into(), json!(v));
        }
        l.insert(SUSPENDED_AT.into(), json!(how.at.to_string()));
        if let Some(left) = how.ttl_left {
            l.insert(TTL_LEFT.into(), json!(left.to_string()));
        }
        let mut a = serde_json::Map::new();
        a.insert(labels::TASK.into(), json!(worker.task));
        a.insert(CREATED_AT.into(), json!(worker.created_at));
        for (k, v) in labels::meta_entries(&worker.metadata) {
            a.insert(k, json!(v));
        }
        json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": pod_name, "labels": l, "annotations": a},
            "type": RECORD_TYPE,
            "stringData": {"token": token},
        })
    }

    /// Posts a record; one left by an earlier suspend or resume of the worker is replaced.
    fn post_record(&self, name: &str, body: &Value) -> Result<(), BackendError> {
        for attempt in 0..2 {
            match self
                .api
                .call(Method::Post, &self.secrets_path(), Some(body))
            {
                Ok(_) => return Ok(()),
                Err(ApiError::Status {
                    reason: Reason::AlreadyExists,
                    ..
                }) if attempt == 0 => self.delete_record(name)?,
                Err(e) => return Err(api_error(e)),
            }
        }
        Err(BackendError::Internal(format!(
            "the record {name} of a suspended worker could not be written"
        )))
    }
}

impl Suspension for K8sBackend {
    fn suspendable(&self, worker: &Worker, template: Option<&Template>) -> Result<(), String> {
        match template {
            None => Err(format!(
                "its template {} is no longer in the templates file",
                worker.template
            )),
            Some(t) if t.workspace.is_none() => Err(format!(
                "on Kubernetes a suspended worker keeps its files in its task workspace, and template {} has none",
                t.name
            )),
            Some(_) => match self.owned_pod(&worker.worker_id) {
                // A claimed member's pod is named for its slot, not its task.
                Ok((pod, w))
                    if pod.metadata.name
                        != labels::pod_name(&self.controller_id, &w.scope, &w.task) =>
                {
                    Err("it was a warm pool member: its identity lives in its running process (given at activation), which deleting its pod would lose".into())
                }
                _ => Ok(()),
            },
        }
    }

    /// The record first (with the token from the pod), then the pod deleted (its grace
    /// period); a pod that cannot be deleted takes its record back.
    fn suspend(&self, worker_id: &str, how: &Suspend) -> Result<Worker, BackendError> {
        let (pod, worker) = self.owned_pod(worker_id)?;
        if pod.terminating() {
            return Err(BackendError::NotFound);
        }
        let name = labels::pod_name(&self.controller_id, &worker.scope, &worker.task);
        let token = self.token_of(&pod.metadata.name)?;
        let body = self.record_body(&worker, &name, how, &token);
        self.post_record(&name, &body)?;
        let deleted = delete_pod(
            &self.api,
            &self.pods_path(),
            &pod.metadata.name,
            STOP_GRACE_SECS,
            Some(&pod.metadata.uid),
        );
        if let Err(e) = deleted {
            let _ = self.delete_record(&name);
            return Err(api_error(e));
        }
        if pod.metadata.name != name {
            // A claimed member's binding held the task's name; it goes with its member.
            self.release_binding(&pod.metadata.name, &pod.metadata.uid, true);
        }
        let mut suspended = worker.expiring(how.until);
        // No pod, no address, until it is resumed (as a list says).
        suspended.a2a_url = String::new();
        suspended.state = WorkerState::Suspended;
        suspended.reason = format!("suspended at {}", rfc3339_secs(how.at));
        Ok(suspended)
    }

    /// The pod made again under the task's name from the template as it is now, with the
    /// worker's own identity and token (the create's path: its claim, its readiness wait),
    /// then the record deleted.
    fn resume(
        &self,
        worker_id: &str,
        template: Option<&Template>,
        progress: &Progress,
    ) -> Result<Worker, BackendError> {
        let Some(record) = self.records(Some(worker_id))?.into_iter().next() else {
            // No record: it runs (resumed by another replica), or it is not ours.
            return self.owned_pod(worker_id).map(|(_, w)| w);
        };
        let template = template.ok_or_else(|| {
            BackendError::Internal(format!(
                "its template {} is no longer in the templates file: the worker stays suspended",
                record.worker.template
            ))
        })?;
        let now = now_millis().div_ceil(1000);
        let w = &record.worker;
        let spec = CreateSpec {
            worker_id: w.worker_id.clone(),
            task: w.task.clone(),
            scope: w.scope.clone(),
            token: Token::from_secret(record.token.clone()),
            expires_at: record.ttl_left.map(|l| now + l),
            metadata: w.metadata.clone(),
            template: Arc::new(template.clone()),
            progress: progress.clone(),
        };
        let resumed = self.create_resumed(&spec)?;
        self.delete_record(&record.name)?;
        Ok(resumed)
    }
}
