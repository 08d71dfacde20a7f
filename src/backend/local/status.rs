//! The local backend's status: its records (the state file) reconciled against the live
//! panes of each record's own GUI — a pane listed is live, one held open after its program
//! ended is ended, a GUI that does not answer is asked again next time and its records kept
//! — and each kept record as the worker callers see (with its Claude Code session id).

use super::gui::Liveness;
use super::store::Record;
use super::wezterm::ended_reason;
use super::{gui, task, LocalBackend, MAX_SESSIONS_KEPT};
use crate::backend::{BackendError, BackendKind, Worker, WorkerState};
use std::collections::BTreeMap;
use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

/// A spawn still waiting for its GUI's answer.
#[derive(Debug, Clone)]
pub(super) struct Pending {
    pub since: String,
    pub gui: PathBuf,
    /// Stopped before its tab opened: the tab is closed as soon as its id is known.
    pub cancelled: bool,
}

/// What reconciling some records found: those kept (with what was seen) and those to drop.
pub(super) type Verdict = (Vec<(Record, Seen)>, Vec<Record>);

/// What reconciliation found out about a kept record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Seen {
    /// Its GUI listed the pane.
    Live,
    /// Its GUI did not answer (or cannot be trusted to be the pane's); why.
    Unanswered(String),
    /// Its pane is held open by WezTerm after its program ended; why it ended.
    Ended(String),
    /// Its spawn has not been answered yet.
    Opening(String),
    /// Suspended: its tab was closed on purpose and its record kept (no GUI is asked).
    Suspended(String),
}

/// The order workers are reported in: by creation, then id.
pub(super) fn oldest_first(a: &Record, b: &Record) -> std::cmp::Ordering {
    (&a.created_at, &a.worker_id).cmp(&(&b.created_at, &b.worker_id))
}

/// Whether the record's create finished (it has a pane). One without is a create a crash
/// interrupted: said in the log, because its tab may be open, unrecorded.
pub(super) fn finished(r: &Record) -> bool {
    if r.pane_id.is_none() && r.suspended.is_none() {
        log::warn!(
            "local worker {} (task {:?}) was being created when the controller stopped; if WezTerm GUI {} opened a tab for it, close that tab by hand (record dropped)",
            r.worker_id,
            r.task,
            r.gui_socket.display()
        );
    }
    r.pane_id.is_some() || r.suspended.is_some()
}

pub(super) fn pane_text(record: &Record) -> String {
    record.pane_id.map(|p| p.to_string()).unwrap_or_default()
}

impl LocalBackend {
    /// Reconciles `records` with the live panes, each GUI asked once and all GUIs at the same
    /// time, so a list costs at most one `LOCAL_CLI_TIMEOUT` however many GUIs hang. Returns
    /// the records kept, with what was seen, oldest first, and the records to drop.
    pub(super) fn reconcile(
        &self,
        records: Vec<Record>,
        pending: &HashMap<String, Pending>,
    ) -> Verdict {
        let mut by_gui: BTreeMap<PathBuf, Vec<Record>> = BTreeMap::new();
        let mut kept = Vec::new();
        let mut dropped = Vec::new();
        for r in records {
            if let Some(s) = &r.suspended {
                let why = format!("suspended at {}", crate::time::rfc3339_secs(s.at));
                kept.push((r, Seen::Suspended(why)));
                continue;
            }
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
    pub(super) fn reconcile_gui(&self, socket: &Path, all: Vec<Record>) -> Verdict {
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
    pub(super) fn reconciled(&self) -> Result<Vec<(Record, Seen)>, BackendError> {
        let (records, pending) = self.snapshot()?;
        let (kept, dropped) = self.reconcile(records, &pending);
        self.forget(&dropped)?;
        Ok(kept)
    }

    /// A record as callers see it: the session id only once it differs from the baseline.
    pub(super) fn worker(&self, record: &Record, seen: &Seen) -> Worker {
        let (state, reason) = match seen {
            Seen::Live => (WorkerState::Running, String::new()),
            Seen::Unanswered(why) => (WorkerState::Unknown, why.clone()),
            Seen::Ended(why) => (WorkerState::Exited, why.clone()),
            Seen::Opening(why) => (WorkerState::Starting, why.clone()),
            Seen::Suspended(why) => (WorkerState::Suspended, why.clone()),
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
        w.reason = reason;
        if let Some(s) = &record.suspended {
            // Its tab is closed: no pane; the session it is resumed with.
            w.session_id = s.session_id.clone();
            return w;
        }
        w.pane_id = pane_text(record);
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
    pub(super) fn session_of(&self, record: &Record) -> Option<String> {
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
}
