//! The local backend: a worker is a WezTerm tab (a new window running `LOCAL_COMMAND` in
//! `LOCAL_TASK_DIR`), with no endpoint and no token. A pane carries no label, so the state
//! file is the record of which panes are ours; the live panes are the truth. Every create,
//! list and stop first reconciles the two:
//! - a record whose pane is gone from a GUI that answers is dropped;
//! - a record of a GUI that is provably gone (socket missing, process ended) is dropped;
//! - a record of a GUI that does not answer right now is kept and reported `unknown`;
//! - a record whose socket names no server instance (written by an earlier version for a
//!   mux server's `sock`) is kept, reported `unknown`, and never acted on: its pane id may be
//!   a stranger's now;
//! - a pane whose program has ended but that WezTerm holds open (`exit_behavior`, or a
//!   program that could not start) is reported `exited` with the reason its text gives.
//!
//! Pieces: `wezterm` (the CLI, with deadlines), `gui` (which GUI, and whether one is gone),
//! `store` (the state file), `task` (task files and their session id).
//!
//! Creates are check-then-act, so [`Backend::atomic_task_uniqueness`] is `false`: the
//! operation layer serialises them, and one mutex here orders every read-modify-write of
//! the state file; the file's lock keeps a second controller off it. That mutex is never held
//! across a CLI call (a hung GUI would hold up every other): reconciliation reads a snapshot,
//! asks the GUIs (all at once), then removes from the file as it is by then only the records
//! it found gone. Stop and `logs` ask only the worker's own GUI.

mod check;
mod command;
mod create;
pub(crate) mod gui;
mod lifetime;
mod status;
pub(crate) mod store;
pub(crate) mod task;
pub(crate) mod wezterm;
mod workspaces;

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use self::gui::{Discovery, Liveness};
use self::store::{Record, Store, StoreError};
use self::wezterm::{Cli, CliError, Killed};
use super::tail::{Tail, MAX_LOG_BYTES};
use super::{
    Abilities, Backend, BackendError, BackendKind, Capabilities, Check, CreateSpec, Finding, Logs,
    Refusal, Subject, Worker, WorkerState,
};
use crate::settings::LocalSettings;

/// Why the local backend cannot start. `Display` is one line naming the setting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigError {
    Wezterm(String),
    TaskDir(String),
    Command(String),
    Store(StoreError),
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Wezterm(why) => write!(f, "setting LOCAL_WEZTERM: {why}"),
            ConfigError::TaskDir(why) => write!(f, "setting LOCAL_TASK_DIR: {why}"),
            ConfigError::Command(why) => write!(f, "setting LOCAL_COMMAND: {why}"),
            ConfigError::Store(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for ConfigError {}

pub struct LocalBackend {
    cli: Arc<Cli>,
    discovery: Discovery,
    task_dir: PathBuf,
    command: Vec<String>,
    /// Fenced tabs' proxy and key: a tab holds its placeholder, never the model key (its
    /// allowlist is advisory: a tab cannot be fenced).
    fence: Option<crate::settings::Fence>,
    workspaces: workspaces::Directories,
    store: Arc<Mutex<Store>>,
    /// Creates whose spawn the GUI has not answered yet (worker id → since when, and whether
    /// it was stopped meanwhile): their records have no pane yet, and a thread waits for it.
    pending: Arc<Mutex<HashMap<String, status::Pending>>>,
    /// Session ids read from task files, by path, with the file's (inode, size, mtime).
    sessions: Mutex<HashMap<PathBuf, (SessionStamp, Option<String>)>>,
}

/// What tells a task file unchanged: inode, size, modification time.
type SessionStamp = (u64, u64, Option<std::time::SystemTime>);
/// Most task files whose session id is kept (then the memo starts again).
const MAX_SESSIONS_KEPT: usize = 4096;

impl LocalBackend {
    /// Checks the program and the task directory and takes the state file: whatever is wrong
    /// stops startup with one line. No GUI needs to be running. `env` is the controller's
    /// environment (for `WEZTERM_UNIX_SOCKET`, `XDG_RUNTIME_DIR`, `HOME`).
    pub fn new(
        local: &LocalSettings,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<LocalBackend, ConfigError> {
        LocalBackend::build(local, env, false)
    }

    /// The same, for `check` beside a running controller: the state file is read without
    /// taking its lock, and never written.
    pub fn inspect(
        local: &LocalSettings,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<LocalBackend, ConfigError> {
        LocalBackend::build(local, env, true)
    }

    fn build(
        local: &LocalSettings,
        env: &dyn Fn(&str) -> Option<String>,
        read_only: bool,
    ) -> Result<LocalBackend, ConfigError> {
        command::check_program(&local.wezterm)?;
        command::check_command(&local.command)?;
        match std::fs::metadata(&local.task_dir) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(ConfigError::TaskDir(format!(
                    "{} is not a directory",
                    local.task_dir.display()
                )))
            }
            Err(e) => {
                return Err(ConfigError::TaskDir(format!(
                    "{} cannot be read: {e}",
                    local.task_dir.display()
                )))
            }
        }
        let (store, mut records) = if read_only {
            Store::peek(&local.state_file).map_err(ConfigError::Store)?
        } else {
            Store::open(&local.state_file).map_err(ConfigError::Store)?
        };
        // A record without a pane is a create the previous controller did not finish.
        let before = records.len();
        records.retain(status::finished);
        if records.len() != before && !read_only {
            store.save(&records).map_err(ConfigError::Store)?;
        }
        let discovery = Discovery::from_env(env);
        let gui = match discovery.current() {
            Ok(socket) => format!("current WezTerm GUI {}", socket.display()),
            Err(why) => why,
        };
        log::info!(
            "local backend: state file {} with {} record(s); {gui}",
            local.state_file.display(),
            records.len()
        );
        let cli = Cli::new(local.wezterm.clone(), local.cli_timeout)
            .with_log_dir(discovery.runtime_dir().map(Path::to_path_buf))
            .with_workspace(local.workspace.clone());
        Ok(LocalBackend {
            cli: Arc::new(cli),
            discovery,
            task_dir: local.task_dir.clone(),
            command: local.command.clone(),
            fence: local.fence.clone(),
            workspaces: workspaces::Directories::new(local.workspaces_dir.clone()),
            store: Arc::new(Mutex::new(store)),
            pending: Arc::new(Mutex::new(HashMap::new())),
            sessions: Mutex::new(HashMap::new()),
        })
    }

    fn store(&self) -> MutexGuard<'_, Store> {
        self.store.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The records on disk and the spawns in flight, read together under the store's mutex
    /// (so a record without a pane is either in flight or left by a crash). No CLI call is
    /// ever made under that mutex: a GUI that hangs must not hold up the others.
    fn snapshot(&self) -> Result<(Vec<Record>, HashMap<String, status::Pending>), BackendError> {
        let store = self.store();
        let records = store.load().map_err(state_error)?;
        let pending = self.pending().clone();
        Ok((records, pending))
    }

    fn pending(&self) -> MutexGuard<'_, HashMap<String, status::Pending>> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Removes from the file, as it is now, the records reconciliation dropped. A record
    /// changed or added since the snapshot (a pane recorded, a create) is not among them.
    fn forget(&self, dropped: &[Record]) -> Result<(), BackendError> {
        if dropped.is_empty() {
            return Ok(());
        }
        let store = self.store();
        let mut records = store.load().map_err(state_error)?;
        let before = records.len();
        records.retain(|r| !dropped.contains(r));
        if records.len() != before {
            store.save(&records).map_err(state_error)?;
        }
        Ok(())
    }

    /// Where a scope's task files are: `LOCAL_TASK_DIR` for the admin scope (as before scopes),
    /// `LOCAL_TASK_DIR/<scope>` for any other, so that two scopes' tasks of the same name have
    /// two files (and two Claude sessions).
    fn scope_dir(&self, scope: &str) -> PathBuf {
        if scope == crate::backend::ADMIN_SCOPE {
            self.task_dir.clone()
        } else {
            self.task_dir.join(scope)
        }
    }
}

impl LocalBackend {}

fn state_error(e: StoreError) -> BackendError {
    BackendError::Internal(e.to_string())
}

impl Backend for LocalBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Local
    }

    /// The task's record first, then its workspace, then the tab (`create.rs`).
    fn create(&self, spec: &CreateSpec) -> Result<Worker, BackendError> {
        let (dir, file) = self.task_file_of(spec)?;
        let opened_in = self.free_task(spec)?;
        let mut record = self.record_opening(spec, &opened_in, &file)?;
        let gui = opened_in.0;
        let (workspace, fresh) = self.workspace_for(spec)?;
        let fenced = match (&self.fence, spec.template.egress.fenced()) {
            (Some(fence), true) => {
                crate::backend::worker_env::fenced_env(&spec.worker_id, &spec.template, fence)
            }
            _ => Vec::new(),
        };
        let argv = command::argv(
            &self.command,
            &spec.template,
            &spec.task,
            &file,
            &spec.worker_id,
            workspace.as_deref(),
            &fenced,
        );
        spec.progress.step("opening a tab in WezTerm");
        let cwd = workspace.as_deref().unwrap_or(&dir);
        let pane = self.spawn(spec, &record, &gui, cwd, &argv, fresh)?;
        self.recorded(spec, &mut record, &gui, pane)
    }

    fn list(&self) -> Result<Vec<Worker>, BackendError> {
        let kept = self.reconciled()?;
        Ok(kept.iter().map(|(r, seen)| self.worker(r, seen)).collect())
    }

    /// Closes the worker's pane in its own GUI (no other GUI is asked), then forgets it.
    fn stop(&self, worker_id: &str) -> Result<Worker, BackendError> {
        let target = {
            let store = self.store();
            let records = store.load().map_err(state_error)?;
            // A tab still being opened is closed when its GUI answers.
            if let Some(p) = self.pending().get_mut(worker_id) {
                p.cancelled = true;
                if let Some(r) = records.iter().find(|r| r.worker_id == worker_id) {
                    let mut w = self.worker(r, &status::Seen::Live);
                    w.state = WorkerState::Stopping;
                    w.reason = format!(
                        "its tab is still being opened (WezTerm GUI {} has not answered); it is closed when WezTerm answers",
                        p.gui.display()
                    );
                    return Ok(w);
                }
            }
            records
                .into_iter()
                .find(|r| {
                    r.worker_id == worker_id && (r.pane_id.is_some() || r.suspended.is_some())
                })
                .ok_or(BackendError::NotFound)?
        };
        // A suspended worker has no tab to close: its record goes.
        if target.suspended.is_some() {
            let worker = self.worker(&target, &status::Seen::Suspended(String::new()));
            self.forget(&[target])?;
            return Ok(worker);
        }
        let mut worker = self.worker(&target, &status::Seen::Live);
        let pane = target.pane_id.unwrap_or_default();
        let closed = match gui::liveness_of(&target.gui_socket, target.gui_instance.as_deref()) {
            Liveness::Gone(why) => Err(format!("its WezTerm GUI is gone: {why}")),
            // Never closed: the pane id may be a stranger's. The record goes; the operator
            // closes the tab if it is still the worker's.
            Liveness::Unprovable(why) => Err(format!(
                "its record was dropped without closing pane {pane}: {why}; close that tab by hand if it is still the worker's"
            )),
            Liveness::Alive => match self.cli.kill_pane(&target.gui_socket, pane) {
                Ok(Killed::Closed) => Ok(()),
                Ok(Killed::AlreadyGone) => Err("its pane was already gone".to_string()),
                // Stopping failed: the record stays, the worker is still ours.
                Err(e) => {
                    return Err(BackendError::Unavailable(format!(
                        "WezTerm GUI {}: {e}",
                        target.gui_socket.display()
                    )))
                }
            },
        };
        if let Err(why) = closed {
            worker.state = WorkerState::Exited;
            worker.reason = why;
        }
        self.forget(&[target])?;
        Ok(worker)
    }

    /// The pane's text: the last `lines` lines of scrollback and screen, the screen's unwritten
    /// rows left out.
    fn logs(&self, worker_id: &str, lines: u32) -> Result<Logs, BackendError> {
        let records = self.store().load().map_err(state_error)?;
        // A suspended worker's tab is closed: nothing to read until it is resumed.
        if records
            .iter()
            .any(|r| r.worker_id == worker_id && r.suspended.is_some())
        {
            return Ok(Logs::none());
        }
        let Some(record) = records
            .into_iter()
            .find(|r| r.worker_id == worker_id && r.pane_id.is_some())
        else {
            return Err(BackendError::NotFound);
        };
        match gui::liveness_of(&record.gui_socket, record.gui_instance.as_deref()) {
            Liveness::Gone(why) => {
                return Err(BackendError::Unavailable(format!(
                    "its WezTerm GUI is gone: {why}"
                )))
            }
            Liveness::Unprovable(why) => return Err(BackendError::Unavailable(why)),
            Liveness::Alive => {}
        }
        let text = self
            .cli
            .get_text(
                &record.gui_socket,
                record.pane_id.unwrap_or_default(),
                lines,
            )
            .map_err(|e| match e {
                CliError::Failed(why) if why.contains("no such pane") => BackendError::NotFound,
                e => BackendError::Unavailable(format!(
                    "WezTerm GUI {}: {e}",
                    record.gui_socket.display()
                )),
            })?;
        let written = text.trim_end_matches(['\n', ' ']);
        let mut tail = Tail::new(MAX_LOG_BYTES);
        tail.push(written.as_bytes());
        if !written.is_empty() {
            tail.push(b"\n");
        }
        Ok(tail.finish(lines))
    }

    /// Asks the current GUI (`list`, within `LOCAL_CLI_TIMEOUT`): a GUI that is stopped or
    /// hung is not ready, nor is a `LOCAL_WEZTERM` that is not WezTerm.
    fn health(&self) -> Result<(), BackendError> {
        let gui = self
            .discovery
            .current()
            .map_err(BackendError::Unavailable)?;
        self.cli
            .list(&gui)
            .map(|_| ())
            .map_err(|e| BackendError::Unavailable(format!("WezTerm GUI {}: {e}", gui.display())))
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            // Check-then-create: the operation layer serialises creates.
            atomic_task_uniqueness: false,
            // A tab is reached through WezTerm, not an endpoint of its own: no token.
            endpoints: false,
        }
    }

    fn validate(&self, subject: Subject<'_>) -> Result<(), Refusal> {
        match subject {
            Subject::Template(t) => self
                .template_refusal(t)
                .and_then(|()| check::isolation_refusal(t, self.fence.is_some())),
            Subject::Task(task) => task::task_file(&self.task_dir, task)
                .map(|_| ())
                .map_err(|why| Refusal::new("task", why)),
        }
    }

    fn check(&self, asked: Check<'_>) -> Vec<Finding> {
        match asked {
            Check::Engine => self.gui_findings(),
            Check::Template(t) => vec![self.template_finding(t)],
            Check::Startup(_) => Vec::new(),
        }
    }

    /// Directories under `LOCAL_WORKSPACES_DIR` (`workspaces.rs`); the expiry and suspensions
    /// in the state file (`lifetime.rs`).
    fn abilities(&self) -> Abilities<'_> {
        Abilities {
            workspaces: Some(&self.workspaces),
            renewal: Some(self),
            suspension: Some(self),
            copies: Some(&self.workspaces),
            ..Abilities::default()
        }
    }
}
