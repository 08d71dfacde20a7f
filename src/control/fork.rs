//! Tasks that start from another task's files: `copy_workspace` (the copy alone) and create's
//! `from_task` (the copy, then the worker). Who may copy what is decided here, the same on
//! every backend: both tasks in the caller's scope (another scope's task is one that has no
//! workspace, as `delete_workspace` answers it), the source with a workspace that no running
//! worker is writing (a suspended or exited one's is still), the target with no workspace and
//! no worker, and room under the caller's `max_workspaces`. The backend's [`Copies`] makes the
//! copy so that no worker is ever handed half of one.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use super::caller::Caller;
use super::error::{ControlError, ErrorCode, Outcome};
use super::{completed, Control};
use crate::backend::{
    BackendError, Copies, Metadata, Progress, TaskWorkspace, Template, WorkerState,
};

fn wrong_state(message: String) -> ControlError {
    ControlError::new(ErrorCode::InvalidState, message)
}

/// `copy_workspace`'s reply data.
#[derive(Serialize)]
struct Copied {
    workspace: TaskWorkspace,
}

impl Control {
    /// The backend's copies, or the refusal of a backend without them.
    fn copies(&self) -> Result<&dyn Copies, ControlError> {
        self.backend.abilities().copies.ok_or_else(|| {
            ControlError::invalid(format!(
                "the {} backend cannot copy workspaces",
                self.backend.kind()
            ))
        })
    }

    /// `copy_workspace`: task `to`'s workspace made a copy of task `from`'s.
    pub(super) fn copy_workspace_of(&self, caller: &Caller, from: &str, to: &str) -> Outcome {
        match self.fork(caller, from, to, &Progress::default()) {
            Ok(workspace) => completed(&Copied { workspace }, None, 0),
            Err(e) => Outcome::Failed(e),
        }
    }

    /// Checks that `caller` may copy task `from`'s workspace to task `to`, then copies it.
    pub(super) fn fork(
        &self,
        caller: &Caller,
        from: &str,
        to: &str,
        progress: &Progress,
    ) -> Result<TaskWorkspace, ControlError> {
        let copies = self.copies()?;
        if from == to {
            return Err(ControlError::invalid(
                "from_task and task are the same task: a workspace is copied to another task",
            ));
        }
        let scope = caller.scope.as_str();
        let workers = self.backend.list().map_err(ControlError::from)?;
        let mine = |task: &str| {
            workers
                .iter()
                .find(move |w| w.scope == scope && w.task == task)
        };
        if let Some(w) = mine(from).filter(|w| {
            matches!(
                w.state,
                WorkerState::Starting | WorkerState::Running | WorkerState::Stopping
            )
        }) {
            return Err(wrong_state(format!(
                "task {from:?}'s worker {} is {} and may still be writing its workspace: stop or suspend it first",
                w.worker_id,
                w.state.as_str()
            )));
        }
        if let Some(w) = mine(to) {
            let mut e = ControlError::from(BackendError::WorkerExists {
                worker_id: w.worker_id.clone(),
                state: w.state,
            });
            e.message = format!(
                "task {to:?} has a worker already ({}): a task starts from another's files before its first worker",
                w.worker_id
            );
            return Err(e);
        }
        let spaces = self.owned_workspaces().map_err(ControlError::from)?;
        let theirs: Vec<&TaskWorkspace> = spaces.iter().filter(|w| w.scope == scope).collect();
        let Some(source) = theirs.iter().find(|w| w.task == from) else {
            return Err(ControlError::new(
                ErrorCode::NotFound,
                format!("task {from:?} has no workspace (in this caller's scope) to copy"),
            ));
        };
        // One being copied is not listed: the backend's copy refuses it.
        if theirs.iter().any(|w| w.task == to) {
            return Err(wrong_state(format!(
                "task {to:?} has a workspace already: delete it first (delete_workspace), or copy to a new task"
            )));
        }
        super::templates::room_among(caller, to, &spaces)?;
        let copied = copies.copy(source, to, progress)?;
        log::info!("the workspace of task {from:?} was copied to task {to:?} (scope {scope})");
        Ok(copied)
    }

    /// A create whose task starts from task `from`'s files: the copy, then the create; a
    /// create that fails removes the copy it was made for.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn create_from(
        &self,
        caller: &Caller,
        from: &str,
        task: String,
        ttl: Option<Duration>,
        metadata: Metadata,
        template: Arc<Template>,
        progress: Progress,
    ) -> (Outcome, String) {
        if template.workspace.is_none() {
            return (
                Outcome::Rejected(ControlError::invalid(format!(
                    "from_task needs a template with a workspace: template {} has none",
                    template.name
                ))),
                String::new(),
            );
        }
        // A create that capacity would refuse is refused before the copy, not after it (the
        // place is taken again by the create itself; one taken meanwhile still removes the copy).
        if let Err(e) = self.admit(caller) {
            return (Outcome::Failed(e), String::new());
        }
        if let Err(e) = self.fork(caller, from, &task, &progress) {
            return (Outcome::Failed(e), String::new());
        }
        let (outcome, worker_id) =
            self.create(caller, task.clone(), ttl, metadata, template, progress);
        let outcome = match outcome {
            Outcome::Rejected(e) => Outcome::Rejected(self.unfork(caller, &task, e)),
            Outcome::Failed(e) => Outcome::Failed(self.unfork(caller, &task, e)),
            done => done,
        };
        (outcome, worker_id)
    }

    /// Removes the copy a failed create was made for, and says so in its refusal.
    fn unfork(&self, caller: &Caller, task: &str, mut e: ControlError) -> ControlError {
        match self.remove_workspace(&caller.scope, task) {
            Ok(_) => e
                .message
                .push_str(" (the workspace copied for it was removed)"),
            Err(removal) => e.message.push_str(&format!(
                " (the workspace copied for it was kept: {removal})"
            )),
        }
        e
    }

    /// Refuses a create of `task` while a copy to its workspace is under way or was cut off.
    pub(super) fn copy_settled(
        &self,
        caller: &Caller,
        task: &str,
        template: &Template,
    ) -> Result<(), ControlError> {
        let (Some(copies), Some(_)) = (self.backend.abilities().copies, &template.workspace) else {
            return Ok(());
        };
        if copies.unfinished(&caller.scope, task)? {
            return Err(wrong_state(format!(
                "task {task:?}'s workspace is still being copied: its worker is made once the copy is whole"
            )));
        }
        Ok(())
    }

    /// Finishes or removes what cut-off copies left (the reaper's workspace pass).
    pub(super) fn tidy_copies(&self) {
        let Some(copies) = self.backend.abilities().copies else {
            return;
        };
        match copies.tidy() {
            Ok(0) => {}
            Ok(n) => log::info!("{n} workspace copies that were cut off were settled"),
            Err(e) => log::warn!("workspace copies that were cut off could not be looked at: {e}"),
        }
    }
}
