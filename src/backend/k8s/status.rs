//! What a pod's status says about its worker: the state and reason `list` reports, and how a
//! starting pod is doing (ready, still waiting, or failed for good). The fields read are the
//! API reference's: `phase`, the `Ready` and `PodScheduled` conditions, and each container's
//! `state.waiting.reason` and `state`/`lastState.terminated.{exitCode,reason}`.

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
    pub status: Status,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Metadata {
    pub name: String,
    pub labels: Option<Ours>,
    pub annotations: Option<HashMap<String, String>>,
    pub creation_timestamp: String,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct Status {
    pub phase: String,
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

#[derive(Deserialize)]
struct PodList {
    items: Vec<Pod>,
}

pub fn parse_list(body: &[u8]) -> Result<Vec<Pod>, String> {
    serde_json::from_slice::<PodList>(body)
        .map(|l| l.items)
        .map_err(|e| format!("unexpected pod list from the Kubernetes API: {e}"))
}

/// How a starting pod is doing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    Ready,
    /// Not yet; the reason so far.
    Waiting(String),
    /// The image cannot be pulled.
    ImageFailed(String),
    /// It will not become ready.
    Failed(String),
}

impl Pod {
    pub fn parse(body: &[u8]) -> Result<Pod, String> {
        serde_json::from_slice(body)
            .map_err(|e| format!("unexpected pod from the Kubernetes API: {e}"))
    }

    fn condition(&self, kind: &str) -> Option<&Condition> {
        self.status.conditions.iter().find(|c| c.kind == kind)
    }

    fn ready(&self) -> bool {
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
                    "was killed for running out of memory (exit code {})",
                    t.exit_code
                )
            } else {
                format!("exited with code {}", t.exit_code)
            })
        })
    }

    pub fn progress(&self) -> Progress {
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
            return Progress::Failed(format!("the pod cannot be scheduled: {}", c.message));
        }
        let why = self
            .waiting()
            .map(|(_, t)| t)
            .unwrap_or_else(|| format!("the pod is {}", self.status.phase.to_lowercase()));
        Progress::Waiting(why)
    }

    /// The worker's state and why it is not running (`""` while it runs).
    pub fn state(&self) -> (WorkerState, String) {
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
                None => (WorkerState::Starting, "not ready yet".into()),
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
                    .unwrap_or_default(),
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

    fn pod(status: serde_json::Value) -> Pod {
        Pod::parse(
            json!({"metadata": {"name": "p"}, "status": status})
                .to_string()
                .as_bytes(),
        )
        .unwrap()
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
        let p = pod(
            json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
            "reason": "Unschedulable", "message": "0/1 nodes are available"}]}),
        );
        assert!(matches!(p.progress(), Progress::Failed(t) if t.contains("0/1 nodes")));
        let p = pod(
            json!({"phase": "Failed", "containerStatuses": [{"name": "worker",
            "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]}),
        );
        assert_eq!(
            p.state(),
            (
                WorkerState::Exited,
                "was killed for running out of memory (exit code 137)".into()
            )
        );
        assert!(matches!(p.progress(), Progress::Failed(_)));
        assert_eq!(
            pod(json!({"phase": "Unknown"})).state().0,
            WorkerState::Unknown
        );
    }
}
