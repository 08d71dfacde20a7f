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
//! the state file; the file's lock keeps a second controller off it.

pub(crate) mod gui;
pub(crate) mod store;
pub(crate) mod task;
pub(crate) mod wezterm;

use std::collections::BTreeMap;
use std::collections::HashMap;
use std::fmt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use self::gui::{Discovery, Liveness};
use self::store::{Record, Store, StoreError};
use self::wezterm::{ended_reason, Cli, CliError, Killed, LateSpawn, SpawnError};
use super::tail::{Tail, MAX_LOG_BYTES};
use super::{Backend, BackendError, BackendKind, CreateSpec, Finding, Logs, Worker, WorkerState};
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
    store: Arc<Mutex<Store>>,
    /// Creates whose spawn the GUI has not answered yet (worker id → since when, and whether
    /// it was stopped meanwhile): their records have no pane yet, and a thread waits for it.
    pending: Arc<Mutex<HashMap<String, Pending>>>,
}

/// A spawn still waiting for its GUI's answer.
#[derive(Debug, Clone)]
struct Pending {
    since: String,
    gui: PathBuf,
    /// Stopped before its tab opened: the tab is closed as soon as its id is known.
    cancelled: bool,
}

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
        check_program(&local.wezterm)?;
        check_command(&local.command)?;
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
            store: Arc::new(Mutex::new(store)),
            pending: Arc::new(Mutex::new(HashMap::new())),
        })
    }

    fn store(&self) -> MutexGuard<'_, Store> {
        self.store.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The records on disk, reconciled with the live panes; saved when anything was dropped.
    fn reconciled(&self, store: &Store) -> Result<Vec<(Record, Seen)>, BackendError> {
        let records = store.load().map_err(state_error)?;
        let before = records.len();
        let kept = self.reconcile(records);
        if kept.len() != before {
            let records: Vec<Record> = kept.iter().map(|(r, _)| r.clone()).collect();
            store.save(&records).map_err(state_error)?;
        }
        Ok(kept)
    }

    fn reconcile(&self, records: Vec<Record>) -> Vec<(Record, Seen)> {
        let mut by_gui: BTreeMap<PathBuf, Vec<Record>> = BTreeMap::new();
        let mut kept = Vec::new();
        let pending = self
            .pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
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
                continue;
            }
            by_gui.entry(r.gui_socket.clone()).or_default().push(r);
        }
        for (socket, all) in by_gui {
            // Each record against the server instance it names: one socket path may have had
            // several servers.
            let server = gui::Server::at(&socket);
            let mut records = Vec::new();
            for r in all {
                match server.of(r.gui_instance.as_deref()) {
                    Liveness::Gone(why) => log::info!(
                        "local worker {} (task {:?}) dropped: its WezTerm GUI is gone: {why}",
                        r.worker_id,
                        r.task
                    ),
                    Liveness::Unprovable(why) => kept.push((r, Seen::Unanswered(why))),
                    Liveness::Alive => records.push(r),
                }
            }
            if records.is_empty() {
                continue;
            }
            match self.cli.list(&socket) {
                Ok(panes) => {
                    for r in records {
                        let listed = r
                            .pane_id
                            .and_then(|p| panes.iter().find(|l| l.pane_id == p));
                        if let Some(l) = listed.filter(|l| l.ended()) {
                            let why = self
                                .cli
                                .get_text(&socket, l.pane_id, 20)
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
        }
        kept.sort_by(|a, b| oldest_first(&a.0, &b.0));
        kept
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
        .expiring(record.expires_at);
        w.pane_id = pane_text(record);
        w.reason = reason;
        w.session_id = task::task_file(&self.task_dir, &record.task)
            .ok()
            .and_then(|file| task::session_id(&file))
            .filter(|id| *id != record.baseline_session_id)
            .unwrap_or_default();
        w
    }

    /// The tab's program and arguments with the placeholders filled in, each argument whole.
    fn argv(&self, task: &str, task_file: &Path, worker_id: &str) -> Vec<String> {
        let task_file = task_file.to_string_lossy();
        self.command
            .iter()
            .map(|arg| {
                substitute(
                    arg,
                    &[
                        ("{task}", task),
                        ("{task_file}", &task_file),
                        ("{worker_id}", worker_id),
                    ],
                )
            })
            .collect()
    }
}

impl LocalBackend {
    /// Waits in the background for a spawn the GUI did not answer in time, then records its
    /// pane (or closes it, if the worker was stopped meanwhile); a spawn never answered drops
    /// its record. Either way one task never has two tabs: until then the record stands.
    fn wait_for_late_tab(&self, late: LateSpawn, record: &Record) {
        let (store, pending, cli) = (
            Arc::clone(&self.store),
            Arc::clone(&self.pending),
            Arc::clone(&self.cli),
        );
        let (worker_id, gui) = (record.worker_id.clone(), record.gui_socket.clone());
        pending.lock().unwrap_or_else(|p| p.into_inner()).insert(
            worker_id.clone(),
            Pending {
                since: record.created_at.clone(),
                gui: gui.clone(),
                cancelled: false,
            },
        );
        let spawned = std::thread::Builder::new()
            .name("wezterm-late-spawn".into())
            .spawn(move || {
                let outcome = late.finish(LATE_PATIENCE);
                let store = store.lock().unwrap_or_else(|p| p.into_inner());
                let cancelled = pending
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&worker_id)
                    .is_some_and(|p| p.cancelled);
                let mut records = match store.load() {
                    Ok(r) => r,
                    Err(e) => return log::warn!("{e}"),
                };
                let at = records.iter().position(|r| r.worker_id == worker_id);
                match (outcome, at) {
                    (Ok(pane), Some(at)) if !cancelled => {
                        records[at].pane_id = Some(pane);
                        log::info!("the late tab of local worker {worker_id} opened (pane {pane} in WezTerm GUI {}): recorded", gui.display());
                    }
                    (Ok(pane), at) => {
                        if let Some(at) = at {
                            records.remove(at);
                        }
                        match cli.kill_pane(&gui, pane) {
                            Ok(_) => log::info!("the late tab of stopped local worker {worker_id} (pane {pane}) was closed"),
                            Err(e) => log::warn!("the late tab of stopped local worker {worker_id} (pane {pane} in WezTerm GUI {}) could not be closed ({e}): close it by hand", gui.display()),
                        }
                    }
                    (Err(e), at) => {
                        if let Some(at) = at {
                            records.remove(at);
                        }
                        log::warn!("WezTerm GUI {} never answered the spawn of local worker {worker_id} ({e}); its record was dropped: if a tab opens for it, close it by hand", gui.display());
                    }
                }
                if let Err(e) = store.save(&records) {
                    log::warn!("{e}");
                }
            });
        if let Err(e) = spawned {
            log::warn!(
                "cannot wait for the late tab of local worker {}: {e}",
                record.worker_id
            );
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

/// `LOCAL_WEZTERM` must name an executable file: launchd gives no PATH to find one by.
fn check_program(path: &Path) -> Result<(), ConfigError> {
    let fail = |why: String| Err(ConfigError::Wezterm(format!("{} {why}", path.display())));
    match std::fs::metadata(path) {
        Err(e) => fail(format!(
            "cannot be used ({e}): install WezTerm or set LOCAL_WEZTERM to the absolute path of its wezterm program"
        )),
        Ok(m) if !m.is_file() => fail("is not a file: name the wezterm program itself".into()),
        Ok(m) if m.permissions().mode() & 0o111 == 0 => fail("is not executable".into()),
        Ok(_) => Ok(()),
    }
}

/// `LOCAL_COMMAND`'s program must be an absolute path to an executable file: WezTerm keeps
/// the tab of a program it cannot start open with its error, which would look like a worker.
fn check_command(command: &[String]) -> Result<(), ConfigError> {
    let Some(program) = command.first() else {
        return Err(ConfigError::Command("it names no program".into()));
    };
    let path = Path::new(program);
    if !path.is_absolute() {
        return Err(ConfigError::Command(format!(
            "its program {program:?} is not an absolute path (a LaunchAgent has no PATH to find it by)"
        )));
    }
    match std::fs::metadata(path) {
        Err(e) => Err(ConfigError::Command(format!(
            "its program {program} cannot be used ({e})"
        ))),
        Ok(m) if !m.is_file() => Err(ConfigError::Command(format!(
            "its program {program} is not a file"
        ))),
        Ok(m) if m.permissions().mode() & 0o111 == 0 => Err(ConfigError::Command(format!(
            "its program {program} is not executable"
        ))),
        Ok(_) => Ok(()),
    }
}

/// Replaces each placeholder in one pass, so a value that looks like a placeholder is kept
/// as it is.
fn substitute(arg: &str, values: &[(&str, &str)]) -> String {
    let mut out = String::with_capacity(arg.len());
    let mut rest = arg;
    'scan: while let Some(at) = rest.find('{') {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        for (name, value) in values {
            if let Some(after) = rest.strip_prefix(name) {
                out.push_str(value);
                rest = after;
                continue 'scan;
            }
        }
        out.push('{');
        rest = &rest[1..];
    }
    out.push_str(rest);
    out
}

impl Backend for LocalBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Local
    }

    fn check_task(&self, task: &str) -> Result<(), String> {
        task::task_file(&self.task_dir, task).map(|_| ())
    }

    fn create(&self, spec: &CreateSpec) -> Result<Worker, BackendError> {
        let file = task::task_file(&self.task_dir, &spec.task).map_err(BackendError::Internal)?;
        let store = self.store();
        let kept = self.reconciled(&store)?;
        if let Some((r, seen)) = kept.iter().find(|(r, _)| r.task == spec.task) {
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
        // resumes: ask it first (unless it just answered), and open nothing if it is silent.
        let answered = kept
            .iter()
            .any(|(r, seen)| r.gui_socket == gui && matches!(seen, Seen::Live | Seen::Ended(_)));
        if let Some((_, Seen::Unanswered(why))) = kept.iter().find(|(r, _)| r.gui_socket == gui) {
            return Err(BackendError::Unavailable(why.clone()));
        }
        if !answered {
            self.cli.list(&gui).map_err(|e| {
                BackendError::Unavailable(format!("WezTerm GUI {}: {e}", gui.display()))
            })?;
        }
        let mut record = Record {
            worker_id: spec.worker_id.clone(),
            task: spec.task.clone(),
            pane_id: None,
            gui_socket: gui.clone(),
            gui_instance: Some(instance),
            baseline_session_id: task::session_id(&file).unwrap_or_default(),
            created_at: rfc3339_secs(now_millis() / 1000),
            expires_at: spec.expires_at,
        };
        let mut records: Vec<Record> = kept.into_iter().map(|(r, _)| r).collect();
        // Written before the tab opens: a crash while it opens leaves a trace to warn about.
        records.push(record.clone());
        store.save(&records).map_err(state_error)?;
        let argv = self.argv(&spec.task, &file, &spec.worker_id);
        spec.progress.step("opening a tab in WezTerm");
        let pane = match self.cli.spawn_or_late(&gui, &self.task_dir, &argv) {
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
                records.pop();
                if let Err(save) = store.save(&records) {
                    log::warn!("{save}");
                }
                return Err(BackendError::Unavailable(format!(
                    "WezTerm GUI {}: {e}",
                    gui.display()
                )));
            }
        };
        record.pane_id = Some(pane);
        spec.progress.step(&format!("tab opened (pane {pane})"));
        if let Some(last) = records.last_mut() {
            *last = record.clone();
        }
        if let Err(e) = store.save(&records) {
            // Unrecorded, the tab could never be listed or stopped: close it again.
            let closed = match self.cli.kill_pane(&gui, pane) {
                Ok(_) => "it was closed again".to_string(),
                Err(kill) => format!("closing it failed too ({kill}): close pane {pane} by hand"),
            };
            return Err(BackendError::Internal(format!(
                "the tab opened but could not be recorded ({e}); {closed}"
            )));
        }
        Ok(self.worker(&record, &Seen::Live))
    }

    fn list(&self) -> Result<Vec<Worker>, BackendError> {
        let store = self.store();
        let kept = self.reconciled(&store)?;
        Ok(kept.iter().map(|(r, seen)| self.worker(r, seen)).collect())
    }

    fn stop(&self, worker_id: &str) -> Result<Worker, BackendError> {
        let store = self.store();
        let mut records = store.load().map_err(state_error)?;
        // A tab still being opened is closed when its GUI answers.
        if let Some(p) = self
            .pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_mut(worker_id)
        {
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
        let Some(at) = records
            .iter()
            .position(|r| r.worker_id == worker_id && r.pane_id.is_some())
        else {
            return Err(BackendError::NotFound);
        };
        let target = records.remove(at);
        let mut kept: Vec<Record> = self
            .reconcile(records)
            .into_iter()
            .map(|(r, _)| r)
            .collect();
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
                Err(e) => {
                    // Stopping failed: the record stays, the worker is still ours.
                    kept.push(target.clone());
                    kept.sort_by(oldest_first);
                    store.save(&kept).map_err(state_error)?;
                    return Err(BackendError::Unavailable(format!(
                        "WezTerm GUI {}: {e}",
                        target.gui_socket.display()
                    )));
                }
            },
        };
        if let Err(why) = closed {
            worker.state = WorkerState::Exited;
            worker.reason = why;
        }
        store.save(&kept).map_err(state_error)?;
        Ok(worker)
    }

    /// The pane's text: the last `lines` lines of scrollback and screen, the screen's unwritten
    /// rows left out.
    fn logs(&self, worker_id: &str, lines: u32) -> Result<Logs, BackendError> {
        let store = self.store();
        let records = store.load().map_err(state_error)?;
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

    fn atomic_task_uniqueness(&self) -> bool {
        false
    }

    fn workers_have_endpoints(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_filled_once_per_argument() {
        let v = [
            ("{task}", "{worker_id}"),
            ("{task_file}", "/t/x.md"),
            ("{worker_id}", "w1"),
        ];
        assert_eq!(substitute("--task={task}", &v), "--task={worker_id}");
        assert_eq!(substitute("{task_file}:{worker_id}", &v), "/t/x.md:w1");
        assert_eq!(substitute("{other} {", &v), "{other} {");
        assert_eq!(substitute("{{task}}", &v), "{{worker_id}}");
    }
}
