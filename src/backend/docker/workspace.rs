//! Task workspaces on Docker: one named volume per (controller id, scope, task), named after
//! the task's container (`<container name>-workspace`), labelled with the owner, scope,
//! template, task and size, mounted at the template's path, kept when a container is removed.
//! A volume's labels are fixed at create, so its last use is a second, empty volume
//! (`...-workspace-used-<ms>`, label `last-used`) made at each use before the older stamps are
//! removed: the workspace is never without its last use (had the stamp been removed and made
//! again, the reaper could find it in between as old as its first create, and delete it). A
//! stop stamps before its container goes, too: between a worker's removal and its stop's
//! stamp, the workspace is in no worker's use. Docker's default `local` driver has no size
//! limit: the size is a label here.

use std::collections::HashMap;

use serde_json::json;

use super::{engine_error, DockerBackend};
use crate::backend::{labels, BackendError, CreateSpec, TaskWorkspace, Workspaces};
use crate::time::{now_millis, parse_rfc3339_millis, rfc3339_secs};

/// The volume of the task workspace of (controller, scope, task): its container's name and
/// `-workspace`; its last-use stamps add `-used-<Unix ms>` (`-used` alone before there were
/// several).
pub(super) fn name(controller_id: &str, scope: &str, task: &str) -> String {
    format!(
        "{}-workspace",
        labels::container_name(controller_id, scope, task)
    )
}

/// The mark of an unfinished copy into workspace volume `volume` (`copy.rs`): a volume that
/// has one is no workspace yet.
pub(super) fn copy_mark(volume: &str) -> String {
    format!("{volume}-copying")
}

impl DockerBackend {
    /// Makes the task's workspace volume, or finds the one its earlier workers had, and
    /// stamps its use; whether it is new. A volume of that name that is not this task's is
    /// refused.
    pub(super) fn ensure_workspace(&self, spec: &CreateSpec) -> Result<bool, BackendError> {
        let Some(w) = &spec.template.workspace else {
            return Ok(false);
        };
        let name = name(&self.controller_id, &spec.scope, &spec.task);
        let fresh = self.engine.volume(&name).map_err(engine_error)?.is_none();
        let wanted = json!({
            labels::OWNER: self.controller_id,
            labels::TASK: spec.task,
            labels::SCOPE: spec.scope,
            labels::TEMPLATE: spec.template.name,
            labels::WORKSPACE: "workspace",
            labels::SIZE: w.size,
        });
        let volume = self
            .engine
            .create_volume(&name, &wanted)
            .map_err(engine_error)?;
        let theirs = volume.labels.unwrap_or_default();
        let ours = |k: &str, v: &str| theirs.get(k).map(String::as_str) == Some(v);
        if !(ours(labels::OWNER, &self.controller_id)
            && ours(labels::TASK, &spec.task)
            && ours(labels::SCOPE, &spec.scope))
        {
            return Err(BackendError::Internal(format!(
                "the volume name {name} is taken by a volume that is not this task's workspace"
            )));
        }
        self.stamp(&name, &spec.scope, &spec.task)?;
        Ok(fresh)
    }

    /// Removes a workspace the failed create that made it will never use (one a racing create
    /// mounted meanwhile is in use, and stays).
    pub(super) fn remove_fresh_workspace(&self, spec: &CreateSpec) -> String {
        let name = name(&self.controller_id, &spec.scope, &spec.task);
        match self.engine.remove_volume(&name) {
            Ok(_) => {
                let _ = self.remove_stamps(&name, u64::MAX);
                "the workspace it made was removed".into()
            }
            Err(e) => format!("the workspace {name} it made was kept: {}", engine_error(e)),
        }
    }

    /// Stamps the workspace's last use: now. The new stamp is made before the older ones go
    /// (two stamps racing: the later one stays).
    pub(super) fn stamp(&self, name: &str, scope: &str, task: &str) -> Result<(), BackendError> {
        let now = now_millis();
        let labels = json!({
            labels::OWNER: self.controller_id,
            labels::TASK: task,
            labels::SCOPE: scope,
            labels::WORKSPACE: "stamp",
            labels::LAST_USED: (now / 1000).to_string(),
        });
        match self
            .engine
            .create_volume(&format!("{name}-used-{now}"), &labels)
        {
            Ok(_) => {}
            Err(e) if e.status() == Some(409) => {}
            Err(e) => return Err(engine_error(e)),
        }
        self.remove_stamps(name, now)
    }

    /// Removes the stamps of workspace `name` made before `before` (Unix ms).
    pub(super) fn remove_stamps(&self, name: &str, before: u64) -> Result<(), BackendError> {
        let selectors = [
            format!("{}={}", labels::OWNER, self.controller_id),
            format!("{}=stamp", labels::WORKSPACE),
        ];
        let volumes = self.engine.volumes(&selectors).map_err(engine_error)?;
        for v in volumes {
            match stamp_of(&v.name) {
                Some((of, at)) if of == name && at < before => {
                    self.engine.remove_volume(&v.name).map_err(engine_error)?;
                }
                _ => {}
            }
        }
        Ok(())
    }
}

/// The workspace a stamp volume is of, and when it was made (Unix ms; 0 for a stamp named
/// before stamps carried the time).
fn stamp_of(volume: &str) -> Option<(&str, u64)> {
    if let Some((of, at)) = volume.rsplit_once("-used-") {
        return Some((of, at.parse().ok()?));
    }
    Some((volume.strip_suffix("-used")?, 0))
}

impl Workspaces for DockerBackend {
    /// This controller's workspace volumes (stamps folded into them).
    fn owned(&self) -> Result<Vec<TaskWorkspace>, BackendError> {
        let volumes = self
            .engine
            .volumes(&labels::owner_selector(&self.controller_id))
            .map_err(engine_error)?;
        let mut stamps: HashMap<String, u64> = HashMap::new();
        let mut copying = std::collections::HashSet::new();
        let mut spaces = Vec::new();
        for v in volumes {
            let l = v.labels.unwrap_or_default();
            let get = |k: &str| l.get(k).cloned().unwrap_or_default();
            match l.get(labels::WORKSPACE).map(String::as_str) {
                Some("stamp") => {
                    let at = l.get(labels::LAST_USED).and_then(|t| t.parse::<u64>().ok());
                    if let (Some(at), Some((of, _))) = (at, stamp_of(&v.name)) {
                        let latest = stamps.entry(of.to_string()).or_default();
                        *latest = (*latest).max(at);
                    }
                }
                Some("copying") => {
                    copying.insert(v.name);
                }
                Some("workspace") => spaces.push(TaskWorkspace {
                    task: get(labels::TASK),
                    scope: get(labels::SCOPE),
                    template: get(labels::TEMPLATE),
                    size: get(labels::SIZE),
                    created_at: parse_rfc3339_millis(&v.created_at)
                        .map(|ms| rfc3339_secs(ms / 1000))
                        .unwrap_or_default(),
                    last_used: String::new(),
                    in_use: false,
                    name: v.name,
                }),
                _ => {}
            }
        }
        // A copy not yet whole is no workspace yet.
        spaces.retain(|s| !copying.contains(&copy_mark(&s.name)));
        for s in &mut spaces {
            s.last_used = stamps
                .remove(&s.name)
                .map(rfc3339_secs)
                .unwrap_or_else(|| s.created_at.clone());
        }
        Ok(spaces)
    }
    fn delete(&self, scope: &str, task: &str) -> Result<TaskWorkspace, BackendError> {
        let found = self.find(scope, task)?;
        let name = found.name.clone();
        match self.engine.remove_volume(&name) {
            Ok(_) => {}
            Err(e) if e.status() == Some(409) => {
                return Err(BackendError::Internal(format!(
                    "the workspace volume {name} is in use by a container (a worker of the task being created?): {}",
                    engine_error(e)
                )))
            }
            Err(e) => return Err(engine_error(e)),
        }
        if let Err(e) = self.remove_stamps(&name, u64::MAX) {
            log::warn!("a last-use stamp of workspace {name} was left: {e}");
        }
        Ok(found)
    }

    fn released(&self, scope: &str, task: &str) -> Result<(), BackendError> {
        let name = name(&self.controller_id, scope, task);
        // One look at that volume, not a list of all of them.
        if self.engine.volume(&name).map_err(engine_error)?.is_some() {
            self.stamp(&name, scope, task)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::stamp_of;

    #[test]
    fn a_stamp_names_its_workspace_and_its_time() {
        assert_eq!(
            stamp_of("ctl-t-1-workspace-used-1764000000123"),
            Some(("ctl-t-1-workspace", 1764000000123))
        );
        assert_eq!(
            stamp_of("ctl-t-1-workspace-used"),
            Some(("ctl-t-1-workspace", 0))
        );
        assert_eq!(stamp_of("ctl-t-1-workspace"), None);
        assert_eq!(stamp_of("ctl-t-1-workspace-used-x"), None);
    }
}
