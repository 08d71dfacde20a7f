//! Following one pod until something is decided about it: its readiness during a create, or
//! its end while a create waits for the task's previous pod to finish stopping.
//!
//! Each round reads the pod (`GET`: its state now, and the `resourceVersion` to watch from),
//! then watches it by name from that version, so an event between the read and the watch is
//! never missed and a pod that is already gone is seen at once. A watch the API refuses (RBAC
//! without `watch`) turns into polling; a watch from a version the server has compacted away
//! (`410 Expired`) or a stream the server ends starts the next round. An API server that
//! cannot be reached (restarting) is retried until the deadline: a blip does not fail a create.
//! As the real server answers (`../shared/reference/k8s-real/`: `watch.b`, `watchbm.b`,
//! `s23-apiserver-restart.txt`).

use std::thread;
use std::time::{Duration, Instant};

use super::api::{ApiError, Method};
use super::refusals::api_error;
use super::status::Pod;
use super::K8sBackend;
use crate::backend::api_call::percent_encode;
use crate::backend::labels;
use crate::backend::{BackendError, Change, Changes, Worker};

/// How often a pod is looked at when it cannot be watched.
const POLL: Duration = Duration::from_millis(250);
/// How long one watch of the pods runs for the watch source before it is made again.
const FOLLOW_CALL: Duration = Duration::from_secs(30);
/// How soon an unreachable API server is asked again.
const RETRY: Duration = Duration::from_millis(500);

impl K8sBackend {
    /// Follows pod `name` until `decide` returns `Some` — it sees the pod after every change,
    /// and `None` once the pod is gone — or `deadline` passes (`Ok(None)`). When the API could
    /// not be reached at the deadline, that is the error.
    pub(super) fn follow_pod<T>(
        &self,
        name: &str,
        deadline: Instant,
        mut decide: impl FnMut(Option<&Pod>) -> Option<T>,
    ) -> Result<Option<T>, BackendError> {
        let mut watching = true;
        let mut unreachable: Option<BackendError> = None;
        loop {
            if Instant::now() >= deadline {
                return match unreachable {
                    Some(e) => Err(e),
                    None => Ok(None),
                };
            }
            let pod = match self.get(name) {
                Ok(pod) => {
                    unreachable = None;
                    pod
                }
                Err(e @ BackendError::Unavailable(_)) => {
                    unreachable = Some(e);
                    pause(RETRY, deadline);
                    continue;
                }
                Err(e) => return Err(e),
            };
            if let Some(done) = decide(pod.as_ref()) {
                return Ok(Some(done));
            }
            if !watching {
                pause(POLL, deadline);
                continue;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            let mut path = format!(
                "{}?watch=1&allowWatchBookmarks=true&fieldSelector={}&timeoutSeconds={}",
                self.pods_path(),
                percent_encode(&format!("metadata.name={name}")),
                left.as_secs().max(1)
            );
            if let Some(p) = &pod {
                path.push_str("&resourceVersion=");
                path.push_str(&percent_encode(&p.metadata.resource_version));
            }
            let started = Instant::now();
            let watched = self.api.watch(&path, deadline, |kind, object| {
                if kind == "DELETED" {
                    return decide(None);
                }
                let pod = serde_json::from_value::<Pod>(object.clone()).ok()?;
                decide(Some(&pod))
            });
            match watched {
                Ok(Some(done)) => return Ok(Some(done)),
                // The stream ended (its timeout, or the server): the next round reads again.
                Ok(None) => {
                    if started.elapsed() < POLL {
                        pause(POLL, deadline);
                    }
                }
                Err(e @ ApiError::Unreachable(_)) => {
                    unreachable = Some(api_error(e));
                    pause(RETRY, deadline);
                }
                // Compacted away: read again and watch from the newer version.
                Err(ApiError::Status { code: 410, .. }) => {}
                Err(e @ ApiError::Status { .. }) if is_throttled(&e) => pause(RETRY, deadline),
                Err(e) => {
                    log::debug!("watching pod {name} failed ({e}); polling it instead");
                    watching = false;
                }
            }
        }
    }

    /// The latest warning events about pod `name` (a failing readiness probe, the
    /// scheduler's `FailedScheduling`), newest last; nothing when events cannot be read.
    pub(super) fn last_warning(&self, name: &str) -> Option<String> {
        let path = format!(
            "/api/v1/namespaces/{}/events?fieldSelector={}",
            self.namespace,
            percent_encode(&format!("involvedObject.name={name},type=Warning"))
        );
        let (_, body) = self
            .api
            .call(Method::Get, &path, None)
            .map_err(|e| log::debug!("events of pod {name} cannot be read: {}", api_error(e)))
            .ok()?;
        let list: serde_json::Value = serde_json::from_slice(&body).ok()?;
        let last = list["items"].as_array()?.iter().max_by_key(|e| {
            e["lastTimestamp"]
                .as_str()
                .or(e["eventTime"].as_str())
                .unwrap_or("")
                .to_string()
        })?;
        let reason = last["reason"].as_str().unwrap_or("");
        let message = crate::backend::api_call::one_line(last["message"].as_str().unwrap_or(""));
        (!message.is_empty()).then(|| format!("{reason}: {message}"))
    }
}

/// Which worker a pod watch event (its object, the pod) is about: the `worker-id` label, which
/// a worker's pod has from its create (or its claim, for a pool member). An unclaimed member's
/// pod has none and is not a worker: `None`, nothing to tell.
fn change_of(pod: &serde_json::Value) -> Option<Change> {
    let id = pod["metadata"]["labels"][labels::WORKER_ID].as_str()?;
    Some(Change::Worker(id.to_string()))
}

fn is_throttled(e: &ApiError) -> bool {
    matches!(e, ApiError::Status { code: 429, .. })
}

/// Sleeps `d`, but not past `deadline`.
fn pause(d: Duration, deadline: Instant) {
    let left = deadline.saturating_duration_since(Instant::now());
    thread::sleep(d.min(left));
}

impl Changes for K8sBackend {
    /// Follows this controller's pods for the watch source: the list's `resourceVersion`
    /// (one item asked for: only the version matters), then a watch from it with bookmarks,
    /// each event of a worker's pod telling `changed` which worker (see [`change_of`]). A
    /// stream the server ends, or a version it has compacted away (`410 Expired`), returns
    /// `Ok`: the source lists and follows again.
    fn follow(&self, changed: &mut dyn FnMut(Change) -> bool) -> Result<(), BackendError> {
        let selector = percent_encode(&labels::owner_selector(&self.controller_id).join(","));
        let (_, body) = self
            .api
            .call(
                Method::Get,
                &format!("{}?limit=1&labelSelector={selector}", self.pods_path()),
                None,
            )
            .map_err(api_error)?;
        let list: serde_json::Value = serde_json::from_slice(&body)
            .map_err(|e| BackendError::Internal(format!("pod list: {e}")))?;
        let version = list["metadata"]["resourceVersion"].as_str().unwrap_or("");
        let path = format!(
            "{}?watch=1&allowWatchBookmarks=true&labelSelector={selector}&timeoutSeconds={}&resourceVersion={}",
            self.pods_path(),
            FOLLOW_CALL.as_secs(),
            percent_encode(version)
        );
        let until = Instant::now() + FOLLOW_CALL;
        match self.api.watch(&path, until, |_, pod| {
            let go_on = change_of(pod).is_none_or(&mut *changed);
            (!go_on).then_some(())
        }) {
            Ok(_) => Ok(()),
            Err(ApiError::Status { code: 410, .. }) => {
                log::debug!("watch: pod version {version} expired (410); listing again");
                Ok(())
            }
            Err(e) => Err(api_error(e)),
        }
    }
    /// One label-selected list of the pods carrying that worker id.
    fn worker(&self, worker_id: &str) -> Result<Option<Worker>, BackendError> {
        // Its pod gone or going: suspended (its record), or gone for good.
        match self.owned_pod(worker_id) {
            Ok((_, w)) => self.one_with_record(worker_id, Some(w)),
            Err(BackendError::NotFound) => self.one_with_record(worker_id, None),
            Err(e) => Err(e),
        }
    }
}
