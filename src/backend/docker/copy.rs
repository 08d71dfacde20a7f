//! Workspace copies on Docker: one volume into another by a short-lived container of
//! `WORKSPACE_COPY_IMAGE` (the controller's own image, so nothing new is pulled), running its
//! `copy-files /from /to` subcommand (`crate::fork::copy_into`) as root with only the
//! capabilities a copy that keeps owners and modes needs, no network, a read-only root.
//!
//! A volume cannot be renamed, so the copy container itself marks the copy unfinished: it is
//! named after the new workspace's volume (`<volume>-copy`) and made in one call with that
//! volume (mounted with the workspace's labels); it is removed only once it has exited 0. While
//! it exists, a create of the task is refused ([`Copies::unfinished`]). A controller killed
//! meanwhile leaves the container: [`Copies::tidy`] finishes what it finds exited 0 (removes the
//! container), removes with its volume one that failed or never started, and leaves one that is
//! still running to finish.

use std::time::Duration;

use serde_json::json;

use super::{engine_error, workspace, DockerBackend};
use crate::backend::{labels, BackendError, Copies, Progress, TaskWorkspace, Workspaces};

/// The longest a copy may run.
const COPY_TIMEOUT: Duration = Duration::from_secs(3600);
/// A copy container never started younger than this is left to the controller starting it.
const START_GRACE_SECS: i64 = 60;

/// The name of the container copying into workspace volume `volume`.
fn copier(volume: &str) -> String {
    format!("{volume}-copy")
}

impl DockerBackend {
    fn copy_image(&self) -> Result<&str, BackendError> {
        self.container.copy_image.as_deref().ok_or_else(|| {
            BackendError::Rejected(
                "workspaces cannot be copied: set WORKSPACE_COPY_IMAGE to the controller's own image (scripts/build-image.sh a2a-worker-controller TAG)".into(),
            )
        })
    }

    /// The copy container's configuration: `from` read-only at `/from`, the new volume `to`
    /// (made with `labels` if absent) at `/to`.
    fn copier_config(
        &self,
        image: &str,
        from: &str,
        to: &str,
        owner: serde_json::Value,
    ) -> serde_json::Value {
        json!({
            "Image": image,
            "Cmd": ["copy-files", "/from", "/to"],
            "User": "0:0",
            "Labels": owner,
            "HostConfig": {
                "Mounts": [
                    {"Type": "volume", "Source": from, "Target": "/from", "ReadOnly": true},
                    {"Type": "volume", "Source": to, "Target": "/to",
                     "VolumeOptions": {"Labels": self.workspace_labels(&owner)}},
                ],
                "NetworkMode": "none",
                "CapDrop": ["ALL"],
                "CapAdd": ["CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID"],
                "SecurityOpt": ["no-new-privileges"],
                "ReadonlyRootfs": true,
            },
        })
    }

    /// The new workspace volume's labels, from the copy container's.
    fn workspace_labels(&self, owner: &serde_json::Value) -> serde_json::Value {
        let mut l = owner.clone();
        l[labels::WORKSPACE] = json!("workspace");
        l
    }

    /// Removes a copy container, and with `volume` the workspace it was making.
    fn discard_copy(&self, container: &str, volume: Option<&str>) {
        if let Err(e) = self.engine.remove(container) {
            log::warn!(
                "the copy container {container} could not be removed: {}",
                engine_error(e)
            );
        }
        if let Some(v) = volume {
            match self.engine.remove_volume(v) {
                Ok(_) => {
                    let _ = self.remove_stamps(v, u64::MAX);
                }
                Err(e) => log::warn!(
                    "the unfinished copy {v} could not be removed: {}",
                    engine_error(e)
                ),
            }
        }
    }
}

impl Copies for DockerBackend {
    fn copy(
        &self,
        scope: &str,
        from: &str,
        to: &str,
        progress: &Progress,
    ) -> Result<TaskWorkspace, BackendError> {
        let image = self.copy_image()?;
        let source = self.find(scope, from)?;
        let (from_volume, to_volume) = (
            workspace::name(&self.controller_id, scope, from),
            workspace::name(&self.controller_id, scope, to),
        );
        if self
            .engine
            .volume(&to_volume)
            .map_err(engine_error)?
            .is_some()
        {
            return Err(BackendError::Rejected(format!(
                "task {to:?} has a workspace already"
            )));
        }
        let owner = json!({
            labels::OWNER: self.controller_id,
            labels::TASK: to,
            labels::SCOPE: scope,
            labels::TEMPLATE: source.template,
            labels::SIZE: source.size,
            labels::WORKSPACE: "copy",
        });
        let name = copier(&to_volume);
        let config = self.copier_config(image, &from_volume, &to_volume, owner);
        let id = match self.engine.create(&name, &config) {
            Ok(id) => id,
            Err(e) if e.status() == Some(409) => {
                return Err(BackendError::Rejected(format!(
                    "a copy to task {to:?} is under way"
                )))
            }
            Err(e) if e.status() == Some(404) => {
                return Err(BackendError::ImageNotFound(format!(
                    "{image} (WORKSPACE_COPY_IMAGE)"
                )))
            }
            Err(e) => return Err(engine_error(e)),
        };
        progress.step(&format!("copying the workspace of task {from:?}"));
        let ended = self
            .engine
            .start(&id)
            .and_then(|()| self.engine.wait(&id, COPY_TIMEOUT));
        match ended {
            Ok(0) => {}
            Ok(code) => {
                let said = self
                    .engine
                    .logs(&id, 3)
                    .map(|l| l.text.trim().replace('\n', "; "))
                    .unwrap_or_default();
                self.discard_copy(&id, Some(&to_volume));
                return Err(BackendError::Internal(format!(
                    "the copy of task {from:?}'s workspace failed (exit {code}): {said}"
                )));
            }
            Err(e) => {
                self.discard_copy(&id, Some(&to_volume));
                return Err(engine_error(e));
            }
        }
        // Whole: the container goes, and with it the mark of an unfinished copy.
        self.engine.remove(&id).map_err(engine_error)?;
        self.stamp(&to_volume, scope, to)?;
        progress.step("the workspace is copied");
        self.find(scope, to)
    }

    fn unfinished(&self, scope: &str, task: &str) -> Result<bool, BackendError> {
        let volume = workspace::name(&self.controller_id, scope, task);
        Ok(self
            .engine
            .inspect(&copier(&volume))
            .map_err(engine_error)?
            .is_some())
    }

    fn tidy(&self) -> Result<usize, BackendError> {
        let selectors = [
            format!("{}={}", labels::OWNER, self.controller_id),
            format!("{}=copy", labels::WORKSPACE),
        ];
        let listing = self.engine.list(&selectors).map_err(engine_error)?;
        let now = crate::time::now_millis() as i64 / 1000;
        let mut settled = 0;
        for c in listing.containers().map_err(engine_error)? {
            let Some(owned) = c
                .labels
                .clone()
                .and_then(|l| labels::owned_workspace(l, &self.controller_id))
            else {
                continue;
            };
            let volume = workspace::name(&self.controller_id, &owned.scope, &owned.task);
            let finished = match c.state.as_ref() {
                "running" | "paused" | "restarting" | "removing" => continue,
                "created" if now - c.created < START_GRACE_SECS => continue,
                "exited" => self
                    .engine
                    .inspect(&c.id)
                    .map_err(engine_error)?
                    .and_then(|i| i.state)
                    .is_some_and(|s| s.exit_code == 0),
                _ => false,
            };
            if finished {
                log::info!(
                    "the copy to task {:?}'s workspace finished while no controller waited: done",
                    owned.task
                );
                self.discard_copy(&c.id, None);
                self.stamp(&volume, &owned.scope, &owned.task)?;
            } else {
                log::info!(
                    "the copy to task {:?}'s workspace was cut off ({}): removed",
                    owned.task,
                    c.state
                );
                self.discard_copy(&c.id, Some(&volume));
            }
            settled += 1;
        }
        Ok(settled)
    }
}
