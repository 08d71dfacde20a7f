//! Renew, suspend and resume on the local backend. The new expiry is written to the worker's
//! record in the state file (under its lock, as it is on disk now), where the reaper and a
//! restart read it. A suspended worker is its record, marked suspended with the Claude Code
//! session its tab had, and no tab: resume opens a tab running the template's
//! `resume_command` with `{session_id}` filled in.

use super::create::LATE_PATIENCE;
use super::gui::{self, Liveness};
use super::status::Seen;
use super::store::{Record, Suspended};
use super::wezterm::SpawnError;
use super::{command, state_error, task, LocalBackend};
use crate::backend::{
    Backend, BackendError, Progress, Renewal, Suspend, Suspension, Template, Worker,
};
use crate::time::{now_millis, rfc3339_secs};

impl Renewal for LocalBackend {
    fn find(&self, worker_id: &str) -> Result<Worker, BackendError> {
        self.list()?
            .into_iter()
            .find(|w| w.worker_id == worker_id)
            .ok_or(BackendError::NotFound)
    }

    fn renew(&self, worker: &Worker, expires_at: Option<u64>) -> Result<Worker, BackendError> {
        let worker_id = worker.worker_id.as_str();
        {
            let store = self.store();
            let mut records = store.load().map_err(state_error)?;
            let record = records
                .iter_mut()
                .find(|r| r.worker_id == worker_id)
                .ok_or(BackendError::NotFound)?;
            record.expires_at = expires_at;
            store.save(&records).map_err(state_error)?;
        }
        self.list()?
            .into_iter()
            .find(|w| w.worker_id == worker_id)
            .ok_or(BackendError::NotFound)
    }
}

/// A tab can be opened again where it left off only with the template's `resume_command` and
/// the session its agent had: otherwise a suspend would close it for good.
impl Suspension for LocalBackend {
    fn suspendable(&self, worker: &Worker, template: Option<&Template>) -> Result<(), String> {
        match template {
            None => Err(format!(
                "its template {} is no longer in the templates file, so its resume_command is unknown",
                worker.template
            )),
            Some(t) if t.resume_command.is_empty() => Err(format!(
                "template {} has no resume_command: its tab could not be opened again where it left off",
                t.name
            )),
            Some(_) if worker.session_id.is_empty() => Err(
                "no session id was seen in its task file yet: there is nothing to resume".into(),
            ),
            Some(_) => Ok(()),
        }
    }

    /// The record says suspended first (with the session it had), then the tab is closed; a
    /// tab that cannot be closed puts the record back as it was.
    fn suspend(&self, worker_id: &str, how: &Suspend) -> Result<Worker, BackendError> {
        let before = self.record_of(worker_id)?;
        let session_id = self
            .session_of(&before)
            .filter(|id| *id != before.baseline_session_id)
            .unwrap_or_default();
        let pane = before.pane_id.ok_or(BackendError::NotFound)?;
        let suspended = Record {
            pane_id: None,
            expires_at: how.until,
            suspended: Some(Suspended {
                at: how.at,
                ttl_left: how.ttl_left,
                session_id,
            }),
            ..before.clone()
        };
        self.replace(&suspended)?;
        if let Liveness::Alive =
            gui::liveness_of(&before.gui_socket, before.gui_instance.as_deref())
        {
            if let Err(e) = self.cli.kill_pane(&before.gui_socket, pane) {
                self.replace(&before)?;
                return Err(BackendError::Unavailable(format!(
                    "WezTerm GUI {}: its tab could not be closed, so it was not suspended: {e}",
                    before.gui_socket.display()
                )));
            }
        }
        Ok(self.worker(
            &suspended,
            &Seen::Suspended(format!("suspended at {}", rfc3339_secs(how.at))),
        ))
    }

    /// A tab of the current GUI running the template's `resume_command`, `{session_id}` filled
    /// in (and `{task}`, `{task_file}`, `{worker_id}` as in `command`), in its workspace or task
    /// directory; then the record says where it runs and its TTL left, from now.
    fn resume(
        &self,
        worker_id: &str,
        template: Option<&Template>,
        progress: &Progress,
    ) -> Result<Worker, BackendError> {
        let record = self.record_of(worker_id)?;
        let Some(s) = record.suspended.clone() else {
            return self.find(worker_id);
        };
        let t = template
            .filter(|t| !t.resume_command.is_empty())
            .ok_or_else(|| {
                BackendError::Internal(format!(
                    "template {} has no resume_command (any more): the worker stays suspended",
                    record.template
                ))
            })?;
        let gui = self
            .discovery
            .current()
            .map_err(BackendError::Unavailable)?;
        let instance = gui::instance(&gui).map_err(BackendError::Unavailable)?;
        let dir = self.scope_dir(&record.scope);
        let file = task::task_file(&dir, &record.task).map_err(BackendError::Internal)?;
        let workspace = match &t.workspace {
            Some(w) => Some(
                self.workspaces
                    .ensure(&record.scope, &record.task, &t.name, &w.size)?
                    .0,
            ),
            None => None,
        };
        let resumed = Template {
            command: t
                .resume_command
                .iter()
                .map(|a| a.replace("{session_id}", &s.session_id))
                .collect(),
            ..t.clone()
        };
        let fenced = match (&self.fence, t.egress.fenced()) {
            (Some(fence), true) => crate::backend::worker_env::fenced_env(worker_id, t, fence),
            _ => Vec::new(),
        };
        let argv = command::argv(
            &self.command,
            &resumed,
            &record.task,
            &file,
            worker_id,
            workspace.as_deref(),
            &fenced,
        );
        progress.step("opening a tab in WezTerm to resume the session");
        let cwd = workspace.as_deref().unwrap_or(&dir);
        let pane = match self.cli.spawn_or_late(&gui, cwd, &argv) {
            Ok(pane) => pane,
            Err(SpawnError::Late(late)) => late.finish(LATE_PATIENCE).map_err(|e| {
                BackendError::Unavailable(format!(
                    "WezTerm GUI {} did not open the tab ({e}): the worker stays suspended",
                    gui.display()
                ))
            })?,
            Err(SpawnError::Failed(e)) => {
                return Err(BackendError::Unavailable(format!(
                    "WezTerm GUI {}: {e}; the worker stays suspended",
                    gui.display()
                )))
            }
        };
        let now = now_millis().div_ceil(1000);
        let running = Record {
            pane_id: Some(pane),
            gui_socket: gui,
            gui_instance: Some(instance),
            expires_at: s.ttl_left.map(|l| now + l),
            suspended: None,
            ..record
        };
        self.replace(&running)?;
        progress.step(&format!("tab opened (pane {pane})"));
        Ok(self.worker(&running, &Seen::Live))
    }
}

impl LocalBackend {
    /// The record of `worker_id` as the file has it now.
    fn record_of(&self, worker_id: &str) -> Result<Record, BackendError> {
        self.store()
            .load()
            .map_err(state_error)?
            .into_iter()
            .find(|r| r.worker_id == worker_id)
            .ok_or(BackendError::NotFound)
    }

    /// Writes `record` in place of the one with its worker id (under the file's lock, as the
    /// file is now); `NotFound` when that one is gone (stopped meanwhile).
    fn replace(&self, record: &Record) -> Result<(), BackendError> {
        let store = self.store();
        let mut records = store.load().map_err(state_error)?;
        let at = records
            .iter()
            .position(|r| r.worker_id == record.worker_id)
            .ok_or(BackendError::NotFound)?;
        records[at] = record.clone();
        store.save(&records).map_err(state_error)
    }
}
