//! Opening a worker's tab: its record first (written before the tab opens, with a pending
//! entry, so a list meanwhile says `starting` and a crash leaves a trace), its workspace, the
//! spawn in its GUI, then the pane id recorded. A spawn WezTerm does not answer in time is
//! waited for by a thread (up to `LATE_PATIENCE`), which records the tab or closes it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::status::{Pending, Seen};
use super::store::{self, Record, Store, StoreError};
use super::wezterm::{LateSpawn, SpawnError};
use super::{gui, state_error, task, LocalBackend};
use crate::backend::{BackendError, CreateSpec, Worker, Workspaces};
use crate::time::{now_millis, rfc3339_secs};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long a late spawn is waited for before it is given up (and its CLI killed).
pub(super) const LATE_PATIENCE: Duration = Duration::from_secs(600);

impl LocalBackend {
    /// The directory of the caller's scope (made if need be) and the task's file in it.
    pub(super) fn task_file_of(
        &self,
        spec: &CreateSpec,
    ) -> Result<(PathBuf, PathBuf), BackendError> {
        let dir = self.scope_dir(&spec.scope);
        if dir != self.task_dir {
            store::private_dir(&dir).map_err(|e| {
                BackendError::Internal(format!(
                    "the scope's task directory {} cannot be made: {e}",
                    dir.display()
                ))
            })?;
        }
        let file = task::task_file(&dir, &spec.task).map_err(BackendError::Internal)?;
        Ok((dir, file))
    }

    /// Refuses a task that has a worker, then finds the GUI to open the tab in and asks it
    /// (a GUI that does not answer now would queue the spawn and carry it out whenever it
    /// resumes: open nothing if it is silent); the GUI and its instance.
    pub(super) fn free_task(&self, spec: &CreateSpec) -> Result<(PathBuf, String), BackendError> {
        // Only this task's records (in this scope) are asked about: a GUI that hangs holding
        // other workers does not hold up a create into another one.
        let (records, pending) = self.snapshot()?;
        let mine: Vec<Record> = records
            .into_iter()
            .filter(|r| r.task == spec.task && r.scope == spec.scope)
            .collect();
        let (kept, dropped) = self.reconcile(mine, &pending);
        self.forget(&dropped)?;
        if let Some((r, seen)) = kept.first() {
            return Err(BackendError::WorkerExists {
                worker_id: r.worker_id.clone(),
                state: self.worker(r, seen).state,
            });
        }
        let gui = self
            .discovery
            .current()
            .map_err(BackendError::Unavailable)?;
        let instance = gui::instance(&gui).map_err(BackendError::Unavailable)?;
        self.cli.list(&gui).map_err(|e| {
            BackendError::Unavailable(format!("WezTerm GUI {}: {e}", gui.display()))
        })?;
        Ok((gui, instance))
    }

    /// The worker's record, written before the tab opens (a crash while it opens leaves a
    /// trace to warn about), together with its pending entry (a list meanwhile says
    /// `starting`).
    pub(super) fn record_opening(
        &self,
        spec: &CreateSpec,
        (gui, instance): &(PathBuf, String),
        file: &Path,
    ) -> Result<Record, BackendError> {
        let record = Record {
            worker_id: spec.worker_id.clone(),
            task: spec.task.clone(),
            pane_id: None,
            gui_socket: gui.clone(),
            gui_instance: Some(instance.clone()),
            baseline_session_id: task::session_id(file).unwrap_or_default(),
            created_at: rfc3339_secs(now_millis() / 1000),
            expires_at: spec.expires_at,
            metadata: spec.metadata.clone(),
            scope: spec.scope.clone(),
            template: spec.template.name.clone(),
            suspended: None,
        };
        let store = self.store();
        let mut records = store.load().map_err(state_error)?;
        records.push(record.clone());
        store.save(&records).map_err(state_error)?;
        self.pending().insert(
            record.worker_id.clone(),
            Pending {
                since: record.created_at.clone(),
                gui: gui.clone(),
                cancelled: false,
            },
        );
        Ok(record)
    }

    /// A template's workspace, the tab's working directory (else the task directory is), and
    /// whether this create made it.
    pub(super) fn workspace_for(
        &self,
        spec: &CreateSpec,
    ) -> Result<(Option<PathBuf>, bool), BackendError> {
        match &spec.template.workspace {
            Some(w) => {
                let (path, fresh) = self.workspaces.ensure(
                    &spec.scope,
                    &spec.task,
                    &spec.template.name,
                    &w.size,
                )?;
                Ok((Some(path), fresh))
            }
            None => Ok((None, false)),
        }
    }

    /// Opens the tab; its pane. A spawn WezTerm does not answer in time is left to a thread
    /// (the tab may still open); one that failed forgets its record, and the workspace this
    /// create made (`fresh`).
    pub(super) fn spawn(
        &self,
        spec: &CreateSpec,
        record: &Record,
        gui: &Path,
        cwd: &Path,
        argv: &[String],
        fresh: bool,
    ) -> Result<u64, BackendError> {
        match self.cli.spawn_or_late(gui, cwd, argv) {
            Ok(pane) => Ok(pane),
            Err(SpawnError::Late(late)) => {
                // The GUI may still open the tab: its record stays, and a thread waits for the
                // pane id to record it (or to close the tab, if the worker is stopped first).
                let waited = late.waited();
                self.wait_for_late_tab(late, record);
                Err(BackendError::Unavailable(format!(
                    "WezTerm GUI {}: wezterm did not answer the spawn within {} ms (LOCAL_CLI_TIMEOUT); its tab may still open: the controller keeps waiting for WezTerm's answer (up to {} min) and records it as worker {}, listed starting until then",
                    gui.display(),
                    waited.as_millis(),
                    LATE_PATIENCE.as_secs() / 60,
                    record.worker_id
                )))
            }
            Err(SpawnError::Failed(e)) => {
                if let Err(save) =
                    LocalBackend::record_pane(&self.store, &self.pending, &spec.worker_id, None)
                {
                    log::warn!("{save}");
                }
                // No tab opened: a workspace this create made has no one to use it.
                if fresh {
                    if let Err(gone) = self.workspaces.delete(&spec.scope, &spec.task) {
                        log::warn!("the workspace this failed create made was kept: {gone}");
                    }
                }
                Err(BackendError::Unavailable(format!(
                    "WezTerm GUI {}: {e}",
                    gui.display()
                )))
            }
        }
    }

    /// Records the tab's pane: the worker, or (stopped while its tab opened, or unrecorded,
    /// when it could never be listed or stopped) the tab closed again and why.
    pub(super) fn recorded(
        &self,
        spec: &CreateSpec,
        record: &mut Record,
        gui: &Path,
        pane: u64,
    ) -> Result<Worker, BackendError> {
        let recorded =
            LocalBackend::record_pane(&self.store, &self.pending, &spec.worker_id, Some(pane));
        let why = match recorded {
            Ok(true) => {
                record.pane_id = Some(pane);
                spec.progress.step(&format!("tab opened (pane {pane})"));
                return Ok(self.worker(record, &Seen::Live));
            }
            Ok(false) => "it was stopped while its tab opened".to_string(),
            Err(e) => format!("the tab opened but could not be recorded ({e})"),
        };
        let closed = match self.cli.kill_pane(gui, pane) {
            Ok(_) => "the tab was closed".to_string(),
            Err(kill) => format!("closing the tab failed ({kill}): close pane {pane} by hand"),
        };
        Err(BackendError::NotReady(format!("{why}; {closed}")))
    }

    /// Records the pane a spawn answered with, and ends the spawn's pending entry. `Ok(false)`
    /// when the worker was stopped while its tab opened: its record is gone then, and the
    /// caller closes the tab. The CLI is never called here (the store's mutex is held).
    pub(super) fn record_pane(
        store: &Mutex<Store>,
        pending: &Mutex<HashMap<String, Pending>>,
        worker_id: &str,
        pane: Option<u64>,
    ) -> Result<bool, StoreError> {
        let store = store.lock().unwrap_or_else(|p| p.into_inner());
        let cancelled = pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(worker_id)
            .is_some_and(|p| p.cancelled);
        let mut records = store.load()?;
        let at = records.iter().position(|r| r.worker_id == worker_id);
        match (pane, at) {
            (Some(pane), Some(at)) if !cancelled => records[at].pane_id = Some(pane),
            (_, Some(at)) => {
                records.remove(at);
            }
            (_, None) => {}
        }
        store.save(&records)?;
        Ok(pane.is_some() && !cancelled && at.is_some())
    }

    /// Waits in the background for a spawn the GUI did not answer in time, then records its
    /// pane (or closes it, if the worker was stopped meanwhile); a spawn never answered drops
    /// its record. Either way one task never has two tabs: until then the record stands,
    /// listed `starting`.
    pub(super) fn wait_for_late_tab(&self, late: LateSpawn, record: &Record) {
        let (store, pending, cli) = (
            Arc::clone(&self.store),
            Arc::clone(&self.pending),
            Arc::clone(&self.cli),
        );
        let (worker_id, gui) = (record.worker_id.clone(), record.gui_socket.clone());
        let spawned = std::thread::Builder::new()
            .name("wezterm-late-spawn".into())
            .spawn(move || {
                let outcome = late.finish(LATE_PATIENCE);
                let pane = outcome.as_ref().ok().copied();
                let recorded = LocalBackend::record_pane(&store, &pending, &worker_id, pane);
                if let Err(e) = &recorded {
                    log::warn!("{e}");
                }
                match (outcome, recorded) {
                    (Ok(pane), Ok(true)) => log::info!(
                        "the late tab of local worker {worker_id} opened (pane {pane} in WezTerm GUI {}): recorded",
                        gui.display()
                    ),
                    (Ok(pane), _) => match cli.kill_pane(&gui, pane) {
                        Ok(_) => log::info!(
                            "the late tab of stopped local worker {worker_id} (pane {pane}) was closed"
                        ),
                        Err(e) => log::warn!(
                            "the late tab of stopped local worker {worker_id} (pane {pane} in WezTerm GUI {}) could not be closed ({e}): close it by hand",
                            gui.display()
                        ),
                    },
                    (Err(e), _) => log::warn!(
                        "WezTerm GUI {} never answered the spawn of local worker {worker_id} ({e}); its record was dropped: if a tab opens for it, close it by hand",
                        gui.display()
                    ),
                }
            });
        if let Err(e) = spawned {
            log::warn!(
                "cannot wait for the late tab of local worker {} ({e}); its record was dropped: if a tab opens for it, close it by hand",
                record.worker_id
            );
            let _ = LocalBackend::record_pane(&self.store, &self.pending, &record.worker_id, None)
                .map_err(|e| log::warn!("{e}"));
        }
    }
}
