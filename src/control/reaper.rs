//! The reaper: every controller stops its expired workers, through the same stop as a
//! caller's, without coordinating with other replicas.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use super::{completed, Control, Ids, OneWorker, Outcome};
use crate::backend::{BackendError, WorkerState};
use crate::time;

/// The reaper of one controller: every `interval` (and once at start, for workers that
/// expired while no controller ran) it stops the workers whose TTL has passed. Every replica
/// runs one; they need no coordination (a worker another replica stopped first is simply
/// gone). A list that fails is said once, and again when it works. Dropping this stops the
/// reaper before its next pass.
pub struct Reaper {
    /// Held only to be dropped: that ends the reaper.
    _stop: mpsc::Sender<()>,
}

impl Reaper {
    pub fn start(control: Arc<Control>, interval: Duration) -> Reaper {
        let (stop, stopped) = mpsc::channel::<()>();
        let run = move || {
            let mut failing = false;
            loop {
                match catch_unwind(AssertUnwindSafe(|| control.reap())) {
                    Ok(Ok(())) if failing => {
                        failing = false;
                        log::info!("reaper: listing workers works again");
                    }
                    Ok(Ok(())) => {}
                    Ok(Err(e)) if !failing => {
                        failing = true;
                        log::warn!(
                            "reaper: cannot list workers, trying again every {}s: {e}",
                            interval.as_secs()
                        );
                    }
                    Ok(Err(_)) => {}
                    Err(_) => log::error!(
                        "reaper: a pass stopped on an internal error; trying again next pass"
                    ),
                }
                match stopped.recv_timeout(interval) {
                    Err(mpsc::RecvTimeoutError::Timeout) => {}
                    Ok(()) | Err(mpsc::RecvTimeoutError::Disconnected) => return,
                }
            }
        };
        if let Err(e) = std::thread::Builder::new().name("reaper".into()).spawn(run) {
            log::error!("cannot start the reaper (expired workers will not be stopped): {e}");
        }
        Reaper { _stop: stop }
    }
}

impl Control {
    /// Stops every listed worker whose expiry has passed, through the same stop as a caller's
    /// (each logged and counted as operation `reap`). A worker that is already gone when its
    /// stop arrives (another replica reaped it first) is not an error; one already being
    /// removed (`stopping`) was stopped by an earlier pass, and is left alone.
    /// Fails only when the workers cannot be listed.
    pub fn reap(&self) -> Result<(), BackendError> {
        let pass = Instant::now();
        let workers = self.backend.list()?;
        let listed = workers.len();
        let now = time::now_millis();
        for w in workers {
            let Some(expiry) = time::parse_rfc3339_millis(&w.expires_at) else {
                continue;
            };
            if expiry > now || w.state == WorkerState::Stopping {
                continue;
            }
            let started = Instant::now();
            self.watch.stopping(
                &w.worker_id,
                &format!("reaped: its TTL ended at {}", w.expires_at),
            );
            let stopped = self.backend.stop(&w.worker_id);
            self.watch.stopped(&w.worker_id, stopped.is_ok());
            let outcome = match stopped {
                Ok(worker) => {
                    self.released(&worker);
                    log::info!(
                        "reaper: stopped worker {} (task {:?}): its TTL ended at {}",
                        w.worker_id,
                        w.task,
                        w.expires_at
                    );
                    completed(&OneWorker { worker }, None, 0)
                }
                Err(BackendError::NotFound) => {
                    log::debug!(
                        "reaper: worker {} was already gone (stopped elsewhere)",
                        w.worker_id
                    );
                    continue;
                }
                Err(e) => Outcome::Failed(e.into()),
            };
            let ids = Ids {
                task_id: "reaper",
                task: &w.task,
                worker_id: &w.worker_id,
                caller: "reaper",
            };
            self.record("reap", &ids, &outcome, started.elapsed());
        }
        // Workspaces on their own: a backend that cannot list them (a Role without claims)
        // does not stop the reaping of workers, and is said once, and again when it works.
        let failed = self.reap_workspaces().err();
        let was = self
            .workspaces_failing
            .swap(failed.is_some(), std::sync::atomic::Ordering::Relaxed);
        match (failed, was) {
            (Some(e), false) => log::warn!(
                "reaper: cannot list task workspaces (WORKSPACE_TTL is not applied until it can): {e}"
            ),
            (None, true) => log::info!("reaper: listing task workspaces works again"),
            _ => {}
        }
        self.metrics.reaper_pass(pass.elapsed(), listed);
        Ok(())
    }

    /// Deletes every workspace whose task has had no worker for `WORKSPACE_TTL`. Any replica
    /// may: a workspace another one deleted first is simply gone.
    fn reap_workspaces(&self) -> Result<(), BackendError> {
        let Some(ttl) = self.workspace_ttl else {
            return Ok(());
        };
        let now = time::now_millis();
        for s in self.workspaces()? {
            let last = time::parse_rfc3339_millis(&s.last_used)
                .or_else(|| time::parse_rfc3339_millis(&s.created_at));
            let Some(last) = last else { continue };
            if s.in_use || last + ttl.as_millis() as u64 > now {
                continue;
            }
            let started = Instant::now();
            let outcome = match self.backend.delete_workspace(&s.scope, &s.task) {
                Ok(space) => {
                    log::info!(
                        "reaper: deleted the workspace {} of task {:?} (scope {}): unused since {}",
                        space.name,
                        s.task,
                        s.scope,
                        s.last_used
                    );
                    completed(&space, None, 0)
                }
                Err(BackendError::NotFound) => continue,
                Err(e) => Outcome::Failed(e.into()),
            };
            let ids = Ids {
                task_id: "reaper",
                task: &s.task,
                worker_id: "",
                caller: "reaper",
            };
            self.record("reap_workspace", &ids, &outcome, started.elapsed());
        }
        Ok(())
    }
}
