//! Workspace copies (forks), an ability of its own: a backend that can start a task from
//! another task's files answers [`Backend::abilities`](super::Backend::abilities) with this.
//! The control layer decides who may copy what (same scope, the source in no running worker's
//! use, the target without a workspace); the backend makes the copy so that a caller never
//! sees half of one: a copy cut off (the controller killed) is never handed to a worker, and
//! is finished or removed by [`Copies::tidy`].

use super::{BackendError, Progress, TaskWorkspace};

/// The engine's side of workspace copies.
pub trait Copies: Send + Sync {
    /// Makes the workspace of task `to` a copy of `source` (a workspace as
    /// [`Workspaces::owned`](super::Workspaces::owned) listed it: its files, modes, owners and
    /// links; the source untouched), in its scope, with its template and size, and returns the
    /// new one as `owned` would. Refuses when `to` has one or is being copied to.
    fn copy(
        &self,
        source: &TaskWorkspace,
        to: &str,
        progress: &Progress,
    ) -> Result<TaskWorkspace, BackendError>;

    /// Whether a copy to task `task` in `scope` is under way or was cut off (its workspace is
    /// then not to be mounted).
    fn unfinished(&self, scope: &str, task: &str) -> Result<bool, BackendError>;

    /// Finishes or removes what copies cut off left; how many it settled.
    fn tidy(&self) -> Result<usize, BackendError>;
}
