//! Workspace copies on Docker: one volume into another by a short-lived container of
//! `WORKSPACE_COPY_IMAGE` (the controller's own image, so nothing new is pulled), running its
//! `copy-files /from /to` subcommand (`crate::fork::copy_into`) as root with only the
//! capabilities a copy that keeps owners and modes needs, no network, a read-only root.
//!
//! A volume cannot be renamed, and its labels are fixed at create, so a copy is marked
//! unfinished by a volume of its own, `<volume>-copying` (label `workspace=copying`), made
//! before the new workspace's volume and removed after the copy container has exited 0 and
//! gone. While the mark exists the workspace is not listed, and a create of the task (or
//! another copy to it) is refused ([`Copies::unfinished`]). A controller killed meanwhile
//! leaves the mark: [`Copies::tidy`] finishes a copy whose container exited 0, removes (with
//! the volume it was making) one whose container failed or is gone, and leaves one still
//! running to finish — and a mark younger than a minute without a running container to the
//! controller that is making it.

use std::time::Duration;

use serde_json::{json, Value};

use super::workspace::{self, copy_mark as mark};
use super::{engine_error, DockerBackend};
use crate::backend::{labels, BackendError, Copies, Progress, TaskWorkspace, Workspaces};

/// The longest a copy may run.
const COPY_TIMEOUT: Duration = Duration::from_secs(3600);
/// A mark younger than this without a running copy container is left to the controller
/// making the copy (between its mark and its container's start).
const START_GRACE_MS: u64 = 60_000;

/// The name of the container copying into workspace volume `volume`.
fn copier(volume: &str) -> String {
    format!("{volume}-copy")
}

impl DockerBackend {
    fn copy_image(&self) -> Result<&str, BackendError> {
        self.container.copy_image.as_deref().ok_or_else(|| {
            BackendError::Refused(
                "workspaces cannot be copied: set WORKSPACE_COPY_IMAGE to the controller's own image (scripts/build-image.sh a2a-worker-controller TAG)".into(),
            )
        })
    }

    /// The copy container's configuration: `from` read-only at `/from`, `to` at `/to`.
    fn copier_config(&self, image: &str, from: &str, to: &str, owner: &Value) -> Value {
        json!({
            "Image": image,
            "Cmd": ["copy-files", "/from", "/to"],
            "User": "0:0",
            "Labels": owner,
            "HostConfig": {
                "Mounts": [
                    {"Type": "volume", "Source": from, "Target": "/from", "ReadOnly": true},
                    {"Type": "volume", "Source": to, "Target": "/to"},
                ],
                "NetworkMode": "none",
                "CapDrop": ["ALL"],
                "CapAdd": ["CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID"],
                "SecurityOpt": ["no-new-privileges"],
                "ReadonlyRootfs": true,
            },
        })
    }

    /// Removes what a copy into `volume` made: its container (by name, when there is one),
    /// with `whole` the volume it was making too, and then its mark.
    /// Whether all of it went (what did not is said, and the next pass tries again).
    fn settle(&self, volume: &str, whole: bool) -> bool {
        if let Err(e) = self.engine.remove(&copier(volume)) {
            log::warn!(
                "the copy container of {volume} could not be removed: {}",
                engine_error(e)
            );
        }
        if !whole {
            match self.engine.remove_volume(volume) {
                Ok(_) => {
                    let _ = self.remove_stamps(volume, u64::MAX);
                }
                Err(e) => {
                    log::warn!(
                        "the unfinished copy {volume} could not be removed: {}",
                        engine_error(e)
                    );
                    return false;
                }
            }
        }
        match self.engine.remove_volume(&mark(volume)) {
            Ok(_) => true,
            Err(e) => {
                log::warn!(
                    "the mark of the copy into {volume} could not be removed: {}",
                    engine_error(e)
                );
                false
            }
        }
    }

    /// Runs the copy container `id` to its end; `Err` (its last words) unless it exited 0.
    fn run_copier(&self, id: &str, from: &str) -> Result<(), BackendError> {
        let code = self
            .engine
            .start(id)
            .and_then(|()| self.engine.wait(id, COPY_TIMEOUT))
            .map_err(engine_error)?;
        if code == 0 {
            return Ok(());
        }
        let said = self
            .engine
            .logs(id, 3)
            .map(|l| l.text.trim().replace('\n', "; "))
            .unwrap_or_default();
        Err(BackendError::Internal(format!(
            "the copy of task {from:?}'s workspace failed (exit {code}): {said}"
        )))
    }
}

impl Copies for DockerBackend {
    fn copy(
        &self,
        source: &TaskWorkspace,
        to: &str,
        progress: &Progress,
    ) -> Result<TaskWorkspace, BackendError> {
        let image = self.copy_image()?;
        let (scope, from) = (source.scope.as_str(), source.task.as_str());
        let (from_volume, to_volume) = (
            source.name.as_str(),
            workspace::name(&self.controller_id, scope, to),
        );
        if self
            .engine
            .volume(&to_volume)
            .map_err(engine_error)?
            .is_some()
            || self.unfinished(scope, to)?
        {
            return Err(BackendError::Refused(format!(
                "task {to:?} has a workspace already, or one being copied"
            )));
        }
        let owner = |kind: &str| {
            json!({
                labels::OWNER: self.controller_id,
                labels::TASK: to,
                labels::SCOPE: scope,
                labels::TEMPLATE: source.template,
                labels::SIZE: source.size,
                labels::WORKSPACE: kind,
            })
        };
        // The mark first, the workspace's volume second: never a volume without its mark
        // until the copy is whole.
        self.engine
            .create_volume(&mark(&to_volume), &owner("copying"))
            .map_err(engine_error)?;
        let made = self
            .engine
            .create_volume(&to_volume, &owner("workspace"))
            .map_err(engine_error)
            .and_then(|_| {
                let config = self.copier_config(image, from_volume, &to_volume, &owner("copy"));
                self.engine
                    .create(&copier(&to_volume), &config)
                    .map_err(|e| match e.status() {
                        Some(409) => {
                            BackendError::Refused(format!("a copy to task {to:?} is under way"))
                        }
                        Some(404) => {
                            BackendError::ImageNotFound(format!("{image} (WORKSPACE_COPY_IMAGE)"))
                        }
                        _ => engine_error(e),
                    })
            });
        let id = match made {
            Ok(id) => id,
            // Another copy to the task made its container first: its mark and volume are its.
            Err(e @ BackendError::Refused(_)) => return Err(e),
            Err(e) => {
                self.settle(&to_volume, false);
                return Err(e);
            }
        };
        progress.step(&format!("copying the workspace of task {from:?}"));
        if let Err(e) = self.run_copier(&id, from) {
            self.settle(&to_volume, false);
            return Err(e);
        }
        self.stamp(&to_volume, scope, to)?;
        self.settle(&to_volume, true);
        progress.step("the workspace is copied");
        self.find(scope, to)
    }

    fn unfinished(&self, scope: &str, task: &str) -> Result<bool, BackendError> {
        let volume = workspace::name(&self.controller_id, scope, task);
        Ok(self
            .engine
            .volume(&mark(&volume))
            .map_err(engine_error)?
            .is_some())
    }

    fn tidy(&self) -> Result<usize, BackendError> {
        let selectors = [
            format!("{}={}", labels::OWNER, self.controller_id),
            format!("{}=copying", labels::WORKSPACE),
        ];
        let marks = self.engine.volumes(&selectors).map_err(engine_error)?;
        let now = crate::time::now_millis();
        let mut settled = 0;
        for m in marks {
            let l = m.labels.unwrap_or_default();
            let get = |k: &str| l.get(k).cloned().unwrap_or_default();
            let (task, scope) = (get(labels::TASK), get(labels::SCOPE));
            let volume = workspace::name(&self.controller_id, &scope, &task);
            if mark(&volume) != m.name {
                continue;
            }
            let young = crate::time::parse_rfc3339_millis(&m.created_at)
                .is_none_or(|at| now.saturating_sub(at) < START_GRACE_MS);
            let state = self
                .engine
                .inspect(&copier(&volume))
                .map_err(engine_error)?
                .and_then(|i| i.state)
                .map(|s| (s.status, s.exit_code));
            let whole = match state.as_ref().map(|(s, code)| (s.as_str(), *code)) {
                Some(("running" | "paused" | "restarting" | "removing", _)) => continue,
                Some(("created", _)) | None if young => continue,
                Some(("exited", 0)) => true,
                _ => false,
            };
            if whole {
                self.stamp(&volume, &scope, &task)?;
            }
            // Said once it is done: a caller may take the task's workspace from then on.
            if !self.settle(&volume, whole) {
                continue;
            }
            if whole {
                log::info!("the copy to task {task:?}'s workspace finished while no controller waited: done");
            } else {
                log::info!(
                    "the copy to task {task:?}'s workspace was cut off ({}): removed",
                    state.map_or("no copy container".to_string(), |(s, code)| format!(
                        "{s}, exit {code}"
                    ))
                );
            }
            settled += 1;
        }
        Ok(settled)
    }
}
