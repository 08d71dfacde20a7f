//! What a pod's status says about its worker: the state and reason `list` reports, and how a
//! starting pod is doing (ready, still waiting, or failed for good). The fields read are the
//! API reference's: `metadata.deletionTimestamp` (a pod in its grace period: `stopping`),
//! `spec.nodeName`, `phase`, the `Ready`, `ContainersReady` and `PodScheduled` conditions, and
//! each container's `state.waiting.reason` and `state`/`lastState.terminated.{exitCode,reason}`.
//!
//! As a real API server and its controllers set them (`../shared/reference/k8s-real/`): a
//! deleted pod stays, with `deletionTimestamp`, until its kubelet confirms (forever on a dead
//! node); an unschedulable pod waits with `PodScheduled=False` (reason `Unschedulable`) for a
//! node an autoscaler may add; when a node stops reporting, the node controller sets its pods'
//! `Ready` to `False` with no reason and leaves `ContainersReady` as it was.

use std::collections::HashMap;

use serde::Deserialize;

use crate::backend::labels::Ours;
use crate::backend::WorkerState;

/// Waiting reasons that mean the image cannot be pulled: create fails `image_not_found`.
const IMAGE_FAILURES: [&str; 4] = [
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "ErrImageNeverPull",
];
/// Waiting reasons that mean the worker will not start: create fails `not_ready`.
const START_FAILURES: [&str; 4] = [
    "CrashLoopBackOff",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
];

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Pod {
    pub metadata: Metadata,
    pub spec: Spec,
    pub status: Status,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Spec {
    /// The node the scheduler bound the pod to; `""` until then.
    pub node_name: String,
    pub containers: Vec<SpecContainer>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct SpecContainer {
    pub name: String,
    pub ports: Vec<ContainerPort>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ContainerPort {
    pub container_port: u16,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Metadata {
    pub name: String,
    pub labels: Option<Ours>,
    pub annotations: Option<HashMap<String, String>>,
    pub creation_timestamp: String,
    pub uid: String,
    pub resource_version: String,
    /// Set when the pod was deleted: it is in its grace period until its kubelet confirms.
    pub deletion_timestamp: Option<String>,
    pub deletion_grace_period_seconds: Option<i64>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Status {
    pub phase: String,
    /// The pod's IP, once its sandbox has one.
    #[serde(rename = "podIP")]
    pub pod_ip: String,
    pub conditions: Vec<Condition>,
    pub container_statuses: Vec<ContainerStatus>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type")]
    pub kind: String,
    pub status: String,
    pub reason: String,
    pub message: String,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ContainerStatus {
    pub name: String,
    pub state: ContainerState,
    pub last_state: ContainerState,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ContainerState {
    pub waiting: Option<Waiting>,
    pub terminated: Option<Terminated>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Waiting {
    pub reason: String,
    pub message: String,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Terminated {
    pub exit_code: i64,
    pub reason: String,
}

#[derive(Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
struct ListMeta {
    #[serde(rename = "continue")]
    next: Option<String>,
}

/// The pods of one page of a pod list, parsed once; its `continue` token (`None` on the last
/// page: none, or an empty one) is handed to `on_token` as soon as it is read: exactly once for
/// a page that parses, at most once for one that does not (its token may come before the
/// fault). The API server writes a list's metadata before its items, so the next page
/// can be asked for while this one's pods are still being parsed (a real server's pods are
/// ~6.5 KiB each, half of it `managedFields`: scanning a page of 500 takes milliseconds).
pub fn parse_page(
    body: &[u8],
    on_token: &mut dyn FnMut(Option<String>),
) -> Result<Vec<Pod>, String> {
    use serde::de::{DeserializeSeed, Error, IgnoredAny, MapAccess, Visitor};

    struct Page<'a>(&'a mut dyn FnMut(Option<String>));

    impl<'de> DeserializeSeed<'de> for Page<'_> {
        type Value = Vec<Pod>;
        fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Vec<Pod>, D::Error> {
            d.deserialize_map(self)
        }
    }

    impl<'de> Visitor<'de> for Page<'_> {
        type Value = Vec<Pod>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a pod list")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Vec<Pod>, A::Error> {
            let (mut told, mut items) = (false, None);
            while let Some(key) = map.next_key::<String>()? {
                match key.as_str() {
                    "metadata" => {
                        let meta: ListMeta = map.next_value()?;
                        if !told {
                            told = true;
                            (self.0)(meta.next.filter(|c| !c.is_empty()));
                        }
                    }
                    "items" => items = Some(map.next_value::<Vec<Pod>>()?),
                    _ => {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
            }
            if !told {
                (self.0)(None);
            }
            items.ok_or_else(|| A::Error::missing_field("items"))
        }
    }

    let mut de = serde_json::Deserializer::from_slice(body);
    Page(on_token)
        .deserialize(&mut de)
        .and_then(|pods| de.end().map(|()| pods))
        .map_err(|e| format!("unexpected pod list from the Kubernetes API: {e}"))
}

/// How a starting pod is doing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    Ready,
    /// Not yet; the reason so far.
    Waiting(String),
    /// No node can take it (yet): the scheduler's message. An autoscaler may add one, so
    /// this is waited out like any other wait.
    Unschedulable(String),
    /// The image cannot be pulled.
    ImageFailed(String),
    /// It will not become ready.
    Failed(String),
    /// Someone deleted it while it started (it is in its grace period, or gone).
    Deleted(String),
}

impl Pod {
    /// The port the worker container listens on, as its pod says (its template's port when
    /// it was made).
    pub fn worker_port(&self) -> Option<u16> {
        self.spec
            .containers
            .iter()
            .find(|c| c.name == super::pod::WORKER_CONTAINER)?
            .ports
            .first()
            .map(|p| p.container_port)
            .filter(|p| *p != 0)
    }

    pub fn parse(body: &[u8]) -> Result<Pod, String> {
        serde_json::from_slice(body)
            .map_err(|e| format!("unexpected pod from the Kubernetes API: {e}"))
    }

    fn condition(&self, kind: &str) -> Option<&Condition> {
        self.status.conditions.iter().find(|c| c.kind == kind)
    }

    pub fn ready(&self) -> bool {
        self.status.phase == "Running"
            && self.condition("Ready").is_some_and(|c| c.status == "True")
    }

    /// The first container waiting with a reason, as `Reason: message`.
    fn waiting(&self) -> Option<(&str, String)> {
        self.status.container_statuses.iter().find_map(|c| {
            let w = c.state.waiting.as_ref().filter(|w| !w.reason.is_empty())?;
            let text = if w.message.is_empty() {
                w.reason.clone()
            } else {
                format!("{}: {}", w.reason, w.message)
            };
            Some((w.reason.as_str(), text))
        })
    }

    /// The first terminated container (now, or the last run), as the reason text.
    fn terminated(&self) -> Option<String> {
        self.status.container_statuses.iter().find_map(|c| {
            let t = c
                .state
                .terminated
                .as_ref()
                .or(c.last_state.terminated.as_ref())?;
            Some(if t.reason == "OOMKilled" {
                format!(
                    "was killed for running out of memory (the kubelet's reason OOMKilled, exit code {})",
                    t.exit_code
                )
            } else {
                format!("exited with code {}", t.exit_code)
            })
        })
    }

    /// Whether it was deleted and is in its grace period.
    pub fn terminating(&self) -> bool {
        self.metadata.deletion_timestamp.is_some()
    }

    /// `stopping since T (grace period Ns)`.
    pub fn stopping_reason(&self) -> String {
        let since = self.metadata.deletion_timestamp.as_deref().unwrap_or("");
        // The API's deletionTimestamp is when the grace period ends; since = that - grace.
        let grace = self.metadata.deletion_grace_period_seconds.unwrap_or(0);
        let began = crate::time::parse_rfc3339_millis(since)
            .map(|end| crate::time::rfc3339_secs((end / 1000).saturating_sub(grace.max(0) as u64)))
            .unwrap_or_else(|| since.to_string());
        format!("stopping since {began} (grace period {grace}s, until its node confirms)")
    }

    /// The node the pod runs on, when the node controller has marked it not ready because
    /// the node stopped reporting: `Ready` is `False` with no reason of the kubelet's while the
    /// containers were ready (the kubelet itself always gives a reason).
    pub fn node_suspect(&self) -> Option<&str> {
        if self.spec.node_name.is_empty() || self.terminating() || self.ready() {
            return None;
        }
        let ready = self.condition("Ready")?;
        let containers = self.condition("ContainersReady");
        let marked = ready.status == "False"
            && ready.reason.is_empty()
            && containers.is_some_and(|c| c.status == "True");
        (marked || self.status.phase == "Unknown").then_some(self.spec.node_name.as_str())
    }

    /// Why it is not ready, from the `Ready` condition (`ContainersNotReady: containers with
    /// unready status: [worker]`), else a waiting container, else the phase.
    fn not_ready_reason(&self) -> String {
        if let Some((_, text)) = self.waiting() {
            return text;
        }
        match self.condition("Ready") {
            Some(c) if c.status != "True" && !c.reason.is_empty() => {
                if c.message.is_empty() {
                    c.reason.clone()
                } else {
                    format!("{}: {}", c.reason, c.message)
                }
            }
            _ if self.spec.node_name.is_empty() => "waiting for the scheduler to place it".into(),
            _ => format!("not ready yet (phase {})", self.status.phase),
        }
    }

    pub fn progress(&self) -> Progress {
        if self.terminating() {
            return Progress::Deleted(format!(
                "the pod was deleted while it started ({})",
                self.stopping_reason()
            ));
        }
        if self.ready() {
            return Progress::Ready;
        }
        if let Some((reason, text)) = self.waiting() {
            if IMAGE_FAILURES.contains(&reason) {
                return Progress::ImageFailed(text);
            }
            if START_FAILURES.contains(&reason) {
                let last = self
                    .terminated()
                    .map(|t| format!(" (the worker {t})"))
                    .unwrap_or_default();
                return Progress::Failed(format!("{text}{last}"));
            }
        }
        if matches!(self.status.phase.as_str(), "Failed" | "Succeeded") {
            return Progress::Failed(format!(
                "the worker {} before it was ready",
                self.terminated()
                    .unwrap_or_else(|| format!("pod is {}", self.status.phase))
            ));
        }
        if let Some(c) = self
            .condition("PodScheduled")
            .filter(|c| c.status == "False" && c.reason == "Unschedulable")
        {
            return Progress::Unschedulable(c.message.clone());
        }
        if let Some(node) = self.node_suspect() {
            return Progress::Waiting(format!(
                "its node {node} stopped reporting (the node controller marked the pod not ready)"
            ));
        }
        Progress::Waiting(self.not_ready_reason())
    }

    /// The worker's state and why it is not running (`""` while it runs).
    pub fn state(&self) -> (WorkerState, String) {
        if self.terminating() {
            return (WorkerState::Stopping, self.stopping_reason());
        }
        if let Some(node) = self.node_suspect() {
            return (
                WorkerState::Unknown,
                format!(
                    "node {node} stopped reporting: the node controller marked the pod not ready"
                ),
            );
        }
        match self.status.phase.as_str() {
            "Running" if self.ready() => (WorkerState::Running, String::new()),
            "Running" => match self.waiting() {
                Some(("CrashLoopBackOff", text)) => (
                    WorkerState::Exited,
                    self.terminated()
                        .map(|t| format!("{t} ({text})"))
                        .unwrap_or(text),
                ),
                Some((_, text)) => (WorkerState::Starting, text),
                None => (WorkerState::Starting, self.not_ready_reason()),
            },
            "Pending" | "" => (
                WorkerState::Starting,
                self.waiting()
                    .map(|(_, t)| t)
                    .or_else(|| {
                        self.condition("PodScheduled")
                            .filter(|c| c.status == "False")
                            .map(|c| format!("{}: {}", c.reason, c.message))
                    })
                    .unwrap_or_else(|| self.not_ready_reason()),
            ),
            "Succeeded" | "Failed" => (
                WorkerState::Exited,
                self.terminated()
                    .unwrap_or_else(|| format!("the pod {}", self.status.phase.to_lowercase())),
            ),
            other => (WorkerState::Unknown, format!("the pod phase is {other}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_pages_continue_token_is_told_before_its_pods_are_parsed() {
        let page = |meta: serde_json::Value| {
            json!({"kind": "PodList", "apiVersion": "v1", "metadata": meta,
                "items": [{"metadata": {"name": "a"}}, {"metadata": {"name": "b"}}]})
            .to_string()
        };
        let read = |body: &str| {
            let mut told = Vec::new();
            let pods = parse_page(body.as_bytes(), &mut |t| told.push(t));
            (pods.map(|p| p.len()), told)
        };
        let more = page(json!({"resourceVersion": "9", "continue": "eyJ2IjoxfQ"}));
        assert_eq!(read(&more), (Ok(2), vec![Some("eyJ2IjoxfQ".to_string())]));
        // The last page: no token, or an empty one (as the API server writes it); no
        // metadata at all; metadata after the items.
        assert_eq!(read(&page(json!({"continue": ""}))), (Ok(2), vec![None]));
        assert_eq!(read(&page(json!({}))), (Ok(2), vec![None]));
        assert_eq!(read(r#"{"items": []}"#), (Ok(0), vec![None]));
        assert_eq!(
            read(r#"{"items": [], "metadata": {"continue": "x"}}"#),
            (Ok(0), vec![Some("x".to_string())])
        );
        // Told as soon as it is read, even when the rest is cut off.
        let (pods, told) = read(r#"{"metadata": {"continue": "x"}, "items": ["#);
        assert!(pods.is_err());
        assert_eq!(told, vec![Some("x".to_string())]);
        assert!(read(r#"{"metadata": {}}"#).0.is_err(), "no items");
        assert!(read(r#"{"items": []} trailing"#).0.is_err());
    }

    fn pod(status: serde_json::Value) -> Pod {
        Pod::parse(
            json!({"metadata": {"name": "p"}, "spec": {"nodeName": "n1"}, "status": status})
                .to_string()
                .as_bytes(),
        )
        .unwrap()
    }

    #[test]
    fn a_deleted_pod_is_stopping_and_ends_a_wait() {
        // As the real server answers a DELETE with a grace period (delete200.b).
        let p = Pod::parse(
            json!({"metadata": {"name": "p", "deletionTimestamp": "2026-12-01T08:42:56Z",
                                "deletionGracePeriodSeconds": 10},
                   "spec": {"nodeName": "n1"},
                   "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}})
            .to_string()
            .as_bytes(),
        )
        .unwrap();
        let (state, reason) = p.state();
        assert_eq!(state, WorkerState::Stopping);
        assert!(reason.contains("since 2026-12-01T08:42:46Z"), "{reason}");
        assert!(
            matches!(p.progress(), Progress::Deleted(_)),
            "never Ready once deleted"
        );
    }

    #[test]
    fn a_node_that_stopped_reporting_makes_the_worker_unknown() {
        // As the node controller leaves a pod of a dead node (s20-node-down.txt).
        let p = pod(json!({"phase": "Running", "conditions": [
            {"type": "Ready", "status": "False"}, {"type": "ContainersReady", "status": "True"},
            {"type": "PodScheduled", "status": "True"}]}));
        let (state, reason) = p.state();
        assert_eq!(state, WorkerState::Unknown);
        assert!(reason.contains("node n1"), "{reason}");
        // The kubelet's own not-ready gives a reason: that is said as it is.
        let p = pod(json!({"phase": "Running", "conditions": [
            {"type": "Ready", "status": "False", "reason": "ContainersNotReady",
             "message": "containers with unready status: [worker]"},
            {"type": "ContainersReady", "status": "False", "reason": "ContainersNotReady"}]}));
        assert_eq!(
            p.state(),
            (
                WorkerState::Starting,
                "ContainersNotReady: containers with unready status: [worker]".into()
            )
        );
        assert!(
            matches!(p.progress(), Progress::Waiting(t) if t.starts_with("ContainersNotReady"))
        );
    }

    #[test]
    fn ready_running_and_waiting() {
        let p =
            pod(json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}));
        assert_eq!(p.progress(), Progress::Ready);
        assert_eq!(p.state(), (WorkerState::Running, String::new()));
        let p = pod(json!({"phase": "Pending"}));
        assert!(matches!(p.progress(), Progress::Waiting(_)));
        assert_eq!(p.state().0, WorkerState::Starting);
    }

    #[test]
    fn failures_with_their_reasons() {
        let p = pod(
            json!({"phase": "Pending", "containerStatuses": [{"name": "worker",
            "state": {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image \"x:1\""}}}]}),
        );
        assert!(matches!(p.progress(), Progress::ImageFailed(t) if t.contains("ImagePullBackOff")));
        let p = pod(
            json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}],
            "containerStatuses": [{"name": "worker", "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                                   "lastState": {"terminated": {"exitCode": 3, "reason": "Error"}}}]}),
        );
        let Progress::Failed(why) = p.progress() else {
            panic!()
        };
        assert!(
            why.contains("CrashLoopBackOff") && why.contains("exited with code 3"),
            "{why}"
        );
        assert_eq!(p.state().0, WorkerState::Exited);
        // Unschedulable is a wait (an autoscaler may add a node), not a failure.
        let p = pod(
            json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
            "reason": "Unschedulable", "message": "0/1 nodes are available"}]}),
        );
        assert!(matches!(p.progress(), Progress::Unschedulable(t) if t.contains("0/1 nodes")));
        let p = pod(
            json!({"phase": "Failed", "containerStatuses": [{"name": "worker",
            "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]}),
        );
        assert_eq!(
            p.state(),
            (
                WorkerState::Exited,
                "was killed for running out of memory (the kubelet's reason OOMKilled, exit code 137)".into()
            )
        );
        assert!(matches!(p.progress(), Progress::Failed(_)));
        assert_eq!(
            pod(json!({"phase": "Unknown"})).state().0,
            WorkerState::Unknown
        );
    }
}
