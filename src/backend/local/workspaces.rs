//! Local task workspaces: one directory per (scope, task) under `LOCAL_WORKSPACES_DIR`, the
//! working directory of each of the task's tabs, kept when a worker stops. Beside each
//! directory `NAME/` its record `NAME.json` (task, scope, template, size, created, last used)
//! says whose it is; the record sits outside the directory, where the agent in the tab does not
//! write. The size is a label here: a directory has no quota.

use std::fs;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::store::private_dir;
use crate::backend::{labels, BackendError, Copies, Progress, TaskWorkspace, Workspaces};
use crate::time::{now_millis, rfc3339_secs};

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Record {
    task: String,
    scope: String,
    template: String,
    size: String,
    created_at: String,
    last_used: String,
}

impl Record {
    /// The workspace this record says, kept at `path`.
    fn listed(self, path: &Path) -> TaskWorkspace {
        TaskWorkspace {
            task: self.task,
            scope: self.scope,
            template: self.template,
            size: self.size,
            created_at: self.created_at,
            last_used: self.last_used,
            in_use: false,
            name: path.display().to_string(),
        }
    }
}

/// The workspaces directory of one local backend.
pub struct Directories {
    dir: PathBuf,
}

impl Directories {
    pub fn new(dir: PathBuf) -> Directories {
        Directories { dir }
    }

    /// The directory name of the workspace of (scope, task): a slug of the task and a hash of
    /// both, as container names are made.
    fn name(scope: &str, task: &str) -> String {
        labels::container_name("ws", scope, task)
    }

    /// The workspace's directory, made (private to this user) with its record if it is not
    /// there yet, its last use now; and whether this call made it.
    pub fn ensure(
        &self,
        scope: &str,
        task: &str,
        template: &str,
        size: &str,
    ) -> Result<(PathBuf, bool), BackendError> {
        let name = Directories::name(scope, task);
        let path = self.dir.join(&name);
        let fail = |what: &str, e: std::io::Error| {
            BackendError::Internal(format!(
                "the task's workspace {} could not be {what}: {e}",
                path.display()
            ))
        };
        let fresh = !path.is_dir();
        private_dir(&path).map_err(|e| fail("made", e))?;
        let now = rfc3339_secs(now_millis() / 1000);
        let record = match self.read(&name) {
            Some(r) if r.task == task && r.scope == scope => Record {
                last_used: now,
                ..r
            },
            _ => Record {
                task: task.to_string(),
                scope: scope.to_string(),
                template: template.to_string(),
                size: size.to_string(),
                created_at: now.clone(),
                last_used: now,
            },
        };
        self.write(&name, &record)
            .map_err(|e| fail("recorded", e))?;
        Ok((path, fresh))
    }

    fn record_path(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.json"))
    }

    fn read(&self, name: &str) -> Option<Record> {
        let text = fs::read(self.record_path(name)).ok()?;
        serde_json::from_slice(&text).ok()
    }

    fn write(&self, name: &str, record: &Record) -> std::io::Result<()> {
        let path = self.record_path(name);
        let tmp = path.with_extension("json.tmp");
        let text = serde_json::to_vec(record).map_err(std::io::Error::other)?;
        fs::write(&tmp, text)?;
        fs::rename(&tmp, &path)
    }
}

impl Workspaces for Directories {
    /// Every workspace with a record (a directory without one is not the controller's).
    fn owned(&self) -> Result<Vec<TaskWorkspace>, BackendError> {
        let entries = match fs::read_dir(&self.dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => {
                return Err(BackendError::Internal(format!(
                    "LOCAL_WORKSPACES_DIR {} cannot be read: {e}",
                    self.dir.display()
                )))
            }
        };
        let mut out = Vec::new();
        for entry in entries.flatten() {
            let file = entry.file_name().to_string_lossy().into_owned();
            let Some(name) = file.strip_suffix(".json") else {
                continue;
            };
            if let Some(r) = self.read(name).filter(|_| self.dir.join(name).is_dir()) {
                out.push(r.listed(&self.dir.join(name)));
            }
        }
        Ok(out)
    }

    /// Deletes the workspace of (scope, task) with everything in it.
    fn delete(&self, scope: &str, task: &str) -> Result<TaskWorkspace, BackendError> {
        let name = Directories::name(scope, task);
        let path = self.dir.join(&name);
        let found = self
            .owned()?
            .into_iter()
            .find(|w| w.scope == scope && w.task == task && Path::new(&w.name) == path)
            .ok_or(BackendError::NotFound)?;
        fs::remove_dir_all(&path).map_err(|e| {
            BackendError::Internal(format!(
                "the workspace {} could not be deleted: {e}",
                path.display()
            ))
        })?;
        let _ = fs::remove_file(self.record_path(&name));
        Ok(found)
    }

    /// Marks the workspace of (scope, task), if there is one, as used until now.
    fn released(&self, scope: &str, task: &str) -> Result<(), BackendError> {
        let name = Directories::name(scope, task);
        let Some(r) = self
            .read(&name)
            .filter(|r| r.scope == scope && r.task == task)
        else {
            return Ok(());
        };
        let record = Record {
            last_used: rfc3339_secs(now_millis() / 1000),
            ..r
        };
        self.write(&name, &record)
            .map_err(|e| BackendError::Internal(format!("the workspace record of {name}: {e}")))
    }
}

/// A workspace copied for another task: the directory made whole beside its place under an
/// unfinished name and renamed into it (`crate::fork`), then its record written. A copy cut
/// off before the rename is never a workspace ([`Copies::tidy`] removes it); one cut off after
/// it, before its record, is the whole copy, which the task's first create records.
impl Copies for Directories {
    fn copy(
        &self,
        source: &TaskWorkspace,
        to: &str,
        progress: &Progress,
    ) -> Result<TaskWorkspace, BackendError> {
        let (scope, from) = (source.scope.as_str(), source.task.as_str());
        let target = Directories::name(scope, to);
        let path = self.dir.join(&target);
        if path.exists() || self.record_path(&target).exists() {
            return Err(BackendError::Refused(format!(
                "task {to:?} has a workspace already"
            )));
        }
        let nonce = crate::token::random_hex(8)
            .map_err(|e| BackendError::Internal(format!("the random generator failed: {e}")))?;
        progress.step(&format!("copying the workspace of task {from:?}"));
        crate::fork::copy_tree(Path::new(&source.name), &path, &nonce).map_err(|e| {
            BackendError::Internal(format!(
                "the workspace of task {from:?} could not be copied to {}: {e}",
                path.display()
            ))
        })?;
        let now = rfc3339_secs(now_millis() / 1000);
        let copied = Record {
            task: to.to_string(),
            scope: scope.to_string(),
            template: source.template.clone(),
            size: source.size.clone(),
            created_at: now.clone(),
            last_used: now,
        };
        self.write(&target, &copied).map_err(|e| {
            BackendError::Internal(format!("the workspace record of {target}: {e}"))
        })?;
        Ok(copied.listed(&path))
    }

    /// A copy is renamed into place whole: the place is never half a copy.
    fn unfinished(&self, _scope: &str, _task: &str) -> Result<bool, BackendError> {
        Ok(false)
    }

    fn tidy(&self) -> Result<usize, BackendError> {
        match crate::fork::remove_unfinished(&self.dir) {
            Ok(n) => Ok(n),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
            Err(e) => Err(BackendError::Internal(format!(
                "LOCAL_WORKSPACES_DIR {}: unfinished copies could not be removed: {e}",
                self.dir.display()
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workspace_is_made_once_kept_and_deleted_whole() {
        let dir = std::env::temp_dir().join(format!("a2a-local-ws-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let ws = Directories::new(dir.clone());
        assert!(ws.owned().unwrap().is_empty(), "no directory yet: none");
        let (path, fresh) = ws.ensure("team-a", "fix it", "coder", "1Gi").unwrap();
        assert!(fresh);
        fs::write(path.join("notes"), "kept").unwrap();
        let (again, fresh) = ws.ensure("team-a", "fix it", "coder", "1Gi").unwrap();
        assert_eq!(path, again);
        assert!(!fresh, "made once");
        assert_eq!(fs::read_to_string(again.join("notes")).unwrap(), "kept");
        let (other, _) = ws.ensure("team-b", "fix it", "coder", "1Gi").unwrap();
        assert_ne!(path, other, "never shared across scopes");
        let listed = ws.owned().unwrap();
        assert_eq!(listed.len(), 2);
        assert!(listed
            .iter()
            .all(|w| w.template == "coder" && w.size == "1Gi"));
        ws.released("team-a", "fix it").unwrap();
        let gone = ws.delete("team-a", "fix it").unwrap();
        assert_eq!(gone.task, "fix it");
        assert!(!path.exists());
        assert_eq!(ws.delete("team-a", "fix it"), Err(BackendError::NotFound));
        assert_eq!(ws.owned().unwrap().len(), 1);
        let _ = fs::remove_dir_all(&dir);
    }
}
