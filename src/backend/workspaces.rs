//! Task workspaces, an ability of its own: a backend that keeps them answers
//! [`Backend::workspaces`](super::Backend::workspaces) with this. A workspace is made by the
//! first create of a template with one (inside the backend's `create`), kept by `stop`, and
//! mounted by the task's next worker.

use serde::Serialize;

use super::BackendError;

/// A task's workspace as a backend reports it. Every key is always present.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TaskWorkspace {
    pub task: String,
    pub scope: String,
    /// The template whose create made it.
    pub template: String,
    /// As the template said (`2Gi`); where it is enforced is the backend's (README).
    pub size: String,
    /// RFC 3339 UTC.
    pub created_at: String,
    /// When a worker last had it (RFC 3339 UTC): made, or its worker stopped.
    pub last_used: String,
    /// Whether a worker of its task exists now (filled in by the control layer).
    pub in_use: bool,
    /// The engine's name for it (volume, claim, directory).
    pub name: String,
}

/// The engine's side of task workspaces.
pub trait Workspaces: Send + Sync {
    /// Every task workspace this controller owns, read from the engine (or the state file).
    fn owned(&self) -> Result<Vec<TaskWorkspace>, BackendError>;

    /// The workspace of `task` in `scope`, by what its labels (or record) say, as
    /// [`Workspaces::owned`] lists it; [`BackendError::NotFound`] when there is none.
    fn find(&self, scope: &str, task: &str) -> Result<TaskWorkspace, BackendError> {
        self.owned()?
            .into_iter()
            .find(|w| w.scope == scope && w.task == task)
            .ok_or(BackendError::NotFound)
    }

    /// Deletes the workspace of `task` in `scope`, returning it as it was;
    /// [`BackendError::NotFound`] when there is none. The control layer has checked that no
    /// worker of the task exists.
    fn delete(&self, scope: &str, task: &str) -> Result<TaskWorkspace, BackendError>;

    /// Notes that the last worker of `task` in `scope` has gone now (its workspace's last
    /// use), when it has a workspace.
    fn released(&self, scope: &str, task: &str) -> Result<(), BackendError>;
}
