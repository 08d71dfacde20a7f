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

mod command;
pub(crate) mod gui;
pub(crate) mod store;
pub(crate) mod task;
pub(crate) mod wezterm;
mod workspaces;

use std::collections::BTreeMap;
use std::collections::HashMap;
use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use self::gui::{Discovery, Liveness};
use self::store::{Record, Store, StoreError};
use self::wezterm::{ended_reason, Cli, CliError, Killed, LateSpawn, SpawnError};
use super::tail::{Tail, MAX_LOG_BYTES};
use super::{
    Backend, BackendError, BackendKind, CreateSpec, Finding, Logs, TaskWorkspace, Template, Worker,
    WorkerState,
};
use crate::settings::LocalSettings;
use crate::time::{now_millis, rfc3339_secs};

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
    workspaces: workspaces::Workspaces,
    store: Arc<Mutex<Store>>,
    /// Creates whose spawn the GUI has not answered yet (worker id → since when, and whether
    /// it was stopped meanwhile): their records have no pane yet, and a thread waits for it.
    pending: Arc<Mutex<HashMap<String, Pending>>>,
    /// Session ids read from task files, by path, with the file's (inode, size, mtime).
    sessions: Mutex<HashMap<PathBuf, (SessionStamp, Option<String>)>>,
}

/// What tells a task file unchanged: inode, size, modification time.
type SessionStamp = (u64, u64, Option<std::time::SystemTime>);
/// Most task files whose session id is kept (then the memo starts again).
const MAX_SESSIONS_KEPT: usize = 4096;

/// A spawn still waiting for its GUI's answer.
#[derive(Debug, Clone)]
struct Pending {
    since: String,
    gui: PathBuf,
    /// Stopped before its tab opened: the tab is closed as soon as its id is known.
    cancelled: bool,
}

/// What reconciling some records found: those kept (with what was seen) and those to drop.
type Verdict = (Vec<(Record, Seen)>, Vec<Record>);

/// How long a late spawn is waited for before it is given up (and its CLI killed).
const LATE_PATIENCE: Duration = Duration::from_secs(600);

/// What reconciliation found out about a kept record.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seen {
    /// Its GUI listed the pane.
    Live,
    /// Its GUI did not answer (or cannot be trusted to be the pane's); why.
    Unanswered(String),
    /// Its pane is held open by WezTerm after its program ended; why it ended.
    Ended(String),
    /// Its spawn has not been answered yet.
    Opening(String),
}

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
        records.retain(finished);
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
            workspaces: workspaces::Workspaces::new(local.workspaces_dir.clone()),
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
    fn snapshot(&self) -> Result<(Vec<Record>, HashMap<String, Pending>), BackendError> {
        let store = self.store();
        let records = store.load().map_err(state_error)?;
        let pending = self.pending().clone();
        Ok((records, pending))
    }

    fn pending(&self) -> MutexGuard<'_, HashMap<String, Pending>> {
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

    /// Reconciles `records` with the live panes, each GUI asked once and all GUIs at the same
    /// time, so a list costs at most one `LOCAL_CLI_TIMEOUT` however many GUIs hang. Returns
    /// the records kept, with what was seen, oldest first, and the records to drop.
    fn reconcile(&self, records: Vec<Record>, pending: &HashMap<String, Pending>) -> Verdict {
        let mut by_gui: BTreeMap<PathBuf, Vec<Record>> = BTreeMap::new();
        let mut kept = Vec::new();
        let mut dropped = Vec::new();
        for r in records {
            if r.pane_id.is_none() {
                if let Some(p) = pending.get(&r.worker_id) {
                    let why = format!(
                        "its tab is being opened: WezTerm GUI {} has not answered the spawn yet (since {})",
                        p.gui.display(),
                        p.since
                    );
                    kept.push((r, Seen::Opening(why)));
                    continue;
                }
            }
            if !finished(&r) {
                dropped.push(r);
                continue;
            }
            by_gui.entry(r.gui_socket.clone()).or_default().push(r);
        }
        let mut asked: Vec<Verdict> = Vec::new();
        if by_gui.len() <= 1 {
            asked.extend(
                by_gui
                    .into_iter()
                    .map(|(s, all)| self.reconcile_gui(&s, all)),
            );
        } else {
            std::thread::scope(|scope| {
                let mut threads = Vec::new();
                for (socket, all) in by_gui {
                    let started = std::thread::Builder::new()
                        .name("wezterm-list".into())
                        .spawn_scoped(scope, move || self.reconcile_gui(&socket, all));
                    match started {
                        Ok(thread) => threads.push(thread),
                        // No thread to spare: this GUI is asked here, after the others start.
                        Err(e) => log::warn!("cannot list a WezTerm GUI in parallel: {e}"),
                    }
                }
                for thread in threads {
                    match thread.join() {
                        Ok(one) => asked.push(one),
                        // Its records stay on disk; they are missing from this answer only.
                        Err(_) => log::error!("listing a WezTerm GUI panicked"),
                    }
                }
            });
        }
        for (k, d) in asked {
            kept.extend(k);
            dropped.extend(d);
        }
        kept.sort_by(|a, b| oldest_first(&a.0, &b.0));
        (kept, dropped)
    }

    /// One GUI's records against its live panes.
    fn reconcile_gui(&self, socket: &Path, all: Vec<Record>) -> Verdict {
        let (mut kept, mut dropped) = (Vec::new(), Vec::new());
        // Each record against the server instance it names: one socket path may have had
        // several servers.
        let server = gui::Server::at(socket);
        let mut records = Vec::new();
        for r in all {
            match server.of(r.gui_instance.as_deref()) {
                Liveness::Gone(why) => {
                    log::info!(
                        "local worker {} (task {:?}) dropped: its WezTerm GUI is gone: {why}",
                        r.worker_id,
                        r.task
                    );
                    dropped.push(r);
                }
                Liveness::Unprovable(why) => kept.push((r, Seen::Unanswered(why))),
                Liveness::Alive => records.push(r),
            }
        }
        if records.is_empty() {
            return (kept, dropped);
        }
        match self.cli.list(socket) {
            Ok(panes) => {
                for r in records {
                    let listed = r
                        .pane_id
                        .and_then(|p| panes.iter().find(|l| l.pane_id == p));
                    if let Some(l) = listed.filter(|l| l.ended()) {
                        let why = self
                            .cli
                            .get_text(socket, l.pane_id, 20)
                            .ok()
                            .and_then(|t| ended_reason(&t))
                            .unwrap_or_else(|| "its program has ended".into());
                        kept.push((r, Seen::Ended(why)));
                    } else if listed.is_some() {
                        kept.push((r, Seen::Live));
                    } else {
                        log::info!(
                            "local worker {} (task {:?}) dropped: pane {} is gone from WezTerm GUI {}",
                            r.worker_id,
                            r.task,
                            pane_text(&r),
                            socket.display()
                        );
                        dropped.push(r);
                    }
                }
            }
            Err(e) => {
                let why = format!("WezTerm GUI {} does not answer: {e}", socket.display());
                log::warn!("{why}; its {} record(s) are kept", records.len());
                kept.extend(
                    records
                        .into_iter()
                        .map(|r| (r, Seen::Unanswered(why.clone()))),
                );
            }
        }
        (kept, dropped)
    }

    /// Every record, reconciled; what was found gone is removed from the file.
    fn reconciled(&self) -> Result<Vec<(Record, Seen)>, BackendError> {
        let (records, pending) = self.snapshot()?;
        let (kept, dropped) = self.reconcile(records, &pending);
        self.forget(&dropped)?;
        Ok(kept)
    }

    /// A record as callers see it: the session id only once it differs from the baseline.
    fn worker(&self, record: &Record, seen: &Seen) -> Worker {
        let (state, reason) = match seen {
            Seen::Live => (WorkerState::Running, String::new()),
            Seen::Unanswered(why) => (WorkerState::Unknown, why.clone()),
            Seen::Ended(why) => (WorkerState::Exited, why.clone()),
            Seen::Opening(why) => (WorkerState::Starting, why.clone()),
        };
        let mut w = Worker::new(
            BackendKind::Local,
            &record.worker_id,
            &record.task,
            state,
            &record.created_at,
        )
        .expiring(record.expires_at)
        .tagged(record.metadata.clone())
        .scoped(record.scope.clone())
        .templated(record.template.clone());
        w.pane_id = pane_text(record);
        w.reason = reason;
        w.session_id = self
            .session_of(record)
            .filter(|id| *id != record.baseline_session_id)
            .unwrap_or_default();
        w
    }

    /// The session id in a record's task file. A regular file (not a link) directly in the
    /// task directory cannot resolve outside it, and one unchanged since it was last read
    /// (the same inode, size and modification time) says what it said then: a list of 200
    /// tabs is then one `lstat` per task file, not two path resolutions and a read. A link is
    /// checked and read every time.
    fn session_of(&self, record: &Record) -> Option<String> {
        let dir = self.scope_dir(&record.scope);
        let path = task::task_file_path(&dir, &record.task)?;
        let meta = fs::symlink_metadata(&path).ok()?;
        if !meta.file_type().is_file() {
            return task::task_file(&dir, &record.task)
                .ok()
                .and_then(|file| task::session_id(&file));
        }
        let stamp = {
            use std::os::unix::fs::MetadataExt;
            (meta.ino(), meta.len(), meta.modified().ok())
        };
        let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((seen, id)) = sessions.get(&path) {
            if *seen == stamp {
                return id.clone();
            }
        }
        let id = task::session_id(&path);
        if sessions.len() >= MAX_SESSIONS_KEPT {
            sessions.clear();
        }
        sessions.insert(path, (stamp, id.clone()));
        id
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

impl LocalBackend {
    /// Records the pane a spawn answered with, and ends the spawn's pending entry. `Ok(false)`
    /// when the worker was stopped while its tab opened: its record is gone then, and the
    /// caller closes the tab. The CLI is never called here (the store's mutex is held).
    fn record_pane(
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
    fn wait_for_late_tab(&self, late: LateSpawn, record: &Record) {
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

/// The order workers are reported in: by creation, then id.
fn oldest_first(a: &Record, b: &Record) -> std::cmp::Ordering {
    (&a.created_at, &a.worker_id).cmp(&(&b.created_at, &b.worker_id))
}

/// Whether the record's create finished (it has a pane). One without is a create a crash
/// interrupted: said in the log, because its tab may be open, unrecorded.
fn finished(r: &Record) -> bool {
    if r.pane_id.is_none() {
        log::warn!(
            "local worker {} (task {:?}) was being created when the controller stopped; if WezTerm GUI {} opened a tab for it, close that tab by hand (record dropped)",
            r.worker_id,
            r.task,
            r.gui_socket.display()
        );
    }
    r.pane_id.is_some()
}

fn pane_text(record: &Record) -> String {
    record.pane_id.map(|p| p.to_string()).unwrap_or_default()
}

fn state_error(e: StoreError) -> BackendError {
    BackendError::Internal(e.to_string())
}

impl Backend for LocalBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Local
    }

    fn check_task(&self, task: &str) -> Result<(), String> {
        task::task_file(&self.task_dir, task).map(|_| ())
    }

    fn create(&self, spec: &CreateSpec) -> Result<Worker, BackendError> {
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
        // A GUI that does not answer now would queue the spawn and carry it out whenever it
        // resumes: ask it first, and open nothing if it is silent.
        self.cli.list(&gui).map_err(|e| {
            BackendError::Unavailable(format!("WezTerm GUI {}: {e}", gui.display()))
        })?;
        let mut record = Record {
            worker_id: spec.worker_id.clone(),
            task: spec.task.clone(),
            pane_id: None,
            gui_socket: gui.clone(),
            gui_instance: Some(instance),
            baseline_session_id: task::session_id(&file).unwrap_or_default(),
            created_at: rfc3339_secs(now_millis() / 1000),
            expires_at: spec.expires_at,
            metadata: spec.metadata.clone(),
            scope: spec.scope.clone(),
            template: spec.template.name.clone(),
        };
        {
            // Written before the tab opens (a crash while it opens leaves a trace to warn
            // about), together with its pending entry (a list meanwhile says `starting`).
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
        }
        // A template's workspace is the tab's working directory (else the task directory).
        let (workspace, fresh) = match &spec.template.workspace {
            Some(w) => {
                let (path, fresh) = self.workspaces.ensure(
                    &spec.scope,
                    &spec.task,
                    &spec.template.name,
                    &w.size,
                )?;
                (Some(path), fresh)
            }
            None => (None, false),
        };
        let argv = command::argv(
            &self.command,
            &spec.template,
            &spec.task,
            &file,
            &spec.worker_id,
            workspace.as_deref(),
        );
        spec.progress.step("opening a tab in WezTerm");
        let cwd = workspace.as_deref().unwrap_or(&dir);
        let pane = match self.cli.spawn_or_late(&gui, cwd, &argv) {
            Ok(pane) => pane,
            Err(SpawnError::Late(late)) => {
                // The GUI may still open the tab: its record stays, and a thread waits for the
                // pane id to record it (or to close the tab, if the worker is stopped first).
                let waited = late.waited();
                self.wait_for_late_tab(late, &record);
                return Err(BackendError::Unavailable(format!(
                    "WezTerm GUI {}: wezterm did not answer the spawn within {} ms (LOCAL_CLI_TIMEOUT); its tab may still open: the controller keeps waiting for WezTerm's answer (up to {} min) and records it as worker {}, listed starting until then",
                    gui.display(),
                    waited.as_millis(),
                    LATE_PATIENCE.as_secs() / 60,
                    record.worker_id
                )));
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
                return Err(BackendError::Unavailable(format!(
                    "WezTerm GUI {}: {e}",
                    gui.display()
                )));
            }
        };
        let recorded =
            LocalBackend::record_pane(&self.store, &self.pending, &spec.worker_id, Some(pane));
        let why = match recorded {
            Ok(true) => {
                record.pane_id = Some(pane);
                spec.progress.step(&format!("tab opened (pane {pane})"));
                return Ok(self.worker(&record, &Seen::Live));
            }
            Ok(false) => "it was stopped while its tab opened".to_string(),
            // Unrecorded, the tab could never be listed or stopped.
            Err(e) => format!("the tab opened but could not be recorded ({e})"),
        };
        let closed = match self.cli.kill_pane(&gui, pane) {
            Ok(_) => "the tab was closed".to_string(),
            Err(kill) => format!("closing the tab failed ({kill}): close pane {pane} by hand"),
        };
        Err(BackendError::NotReady(format!("{why}; {closed}")))
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
                    let mut w = self.worker(r, &Seen::Live);
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
                .find(|r| r.worker_id == worker_id && r.pane_id.is_some())
                .ok_or(BackendError::NotFound)?
        };
        let mut worker = self.worker(&target, &Seen::Live);
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

    fn check(&self) -> Vec<Finding> {
        let gui = match self.discovery.current() {
            Ok(gui) => gui,
            // launchd starts the controller at login, often before WezTerm: not an error.
            Err(why) => {
                return vec![Finding::ok(format!(
                    "configured; {why} (the controller starts anyway and creates once a GUI runs)"
                ))]
            }
        };
        let mut out = vec![match self.cli.list(&gui) {
            Ok(panes) => Finding::ok(format!(
                "WezTerm GUI {} answers ({} pane(s))",
                gui.display(),
                panes.len()
            )),
            Err(e) => Finding::failed(format!("WezTerm GUI {}: {e}", gui.display())),
        }];
        if let Err(why) = gui::instance(&gui) {
            out.push(Finding::failed(why));
        }
        out
    }

    /// The template's program must be usable as `LOCAL_COMMAND`'s is; its secrets cannot be
    /// given to a tab without showing in its command line.
    fn accepts(&self, template: &Template) -> Result<(), String> {
        if !template.env_files.is_empty() {
            return Err("env_files does not apply to local tabs: a tab gets its variables on its command line, where others could read a secret; let the program read the file itself".into());
        }
        if !template.command.is_empty() {
            command::check_command(&template.command).map_err(|e| match e {
                ConfigError::Command(why) => format!("command: {why}"),
                other => other.to_string(),
            })?;
        }
        Ok(())
    }

    fn workspaces(&self) -> Result<Vec<TaskWorkspace>, BackendError> {
        self.workspaces.list()
    }

    fn delete_workspace(&self, scope: &str, task: &str) -> Result<TaskWorkspace, BackendError> {
        self.workspaces.delete(scope, task)
    }

    fn workspace_released(&self, scope: &str, task: &str) -> Result<(), BackendError> {
        self.workspaces.released(scope, task)
    }

    fn check_template(&self, template: &Template) -> Finding {
        match self.accepts(template) {
            Ok(()) => Finding::ok(format!(
                "program {} is executable",
                template
                    .command
                    .first()
                    .or(self.command.first())
                    .map_or("", String::as_str)
            )),
            Err(why) => Finding::failed(why),
        }
    }

    fn atomic_task_uniqueness(&self) -> bool {
        false
    }

    fn workers_have_endpoints(&self) -> bool {
        false
    }
}
