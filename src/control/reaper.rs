//! The reaper: every controller stops its expired workers, through the same stop as a
//! caller's, without coordinating with other replicas.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use super::{completed, Control, Ids, OneWorker, Outcome};
use crate::backend::{BackendError, Worker, WorkerState};
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
        let every = workspace_sweep(interval, control.workspace_ttl);
        let run = move || {
            let mut failing = false;
            let mut swept: Option<Instant> = None;
            loop {
                let sweep = swept.is_none_or(|at| at.elapsed() >= every);
                if sweep {
                    swept = Some(Instant::now());
                }
                match catch_unwind(AssertUnwindSafe(|| control.reap(sweep))) {
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

/// How many of `workers` are in each state (every state named).
fn by_state(workers: &[Worker]) -> std::collections::BTreeMap<&'static str, u64> {
    let mut out: std::collections::BTreeMap<&'static str, u64> =
        WorkerState::ALL.iter().map(|s| (s.as_str(), 0)).collect();
    for w in workers {
        *out.entry(w.state.as_str()).or_default() += 1;
    }
    out
}

/// How often a reaper looks at the task workspaces: a tenth of `WORKSPACE_TTL`, at most a
/// minute apart and never more often than its passes. A workspace outlives its TTL by at most
/// that; a pass in between is one list of the workers and nothing more (1,000 workers and a
/// TTL of days do not pay a volume list every second).
pub fn workspace_sweep(interval: Duration, ttl: Option<Duration>) -> Duration {
    const AT_MOST: Duration = Duration::from_secs(60);
    ttl.map_or(AT_MOST, |ttl| (ttl / 10).min(AT_MOST))
        .max(interval)
}

impl Control {
    /// Stops every listed worker whose expiry has passed, through the same stop as a caller's
    /// (each logged and counted as operation `reap`), and with `workspaces` also deletes the
    /// workspaces past `WORKSPACE_TTL`. A worker that is
    /// already gone when its stop arrives (another replica reaped it first) is not an error;
    /// one already being removed (`stopping`) was stopped by an earlier pass, and is left
    /// alone. Fails only when the workers cannot be listed.
    pub fn reap(&self, workspaces: bool) -> Result<(), BackendError> {
        let pass = Instant::now();
        let workers = self.backend.list()?;
        let listed = workers.len();
        self.metrics.workers_by_state(by_state(&workers));
        let expired = |w: &Worker, now: u64| {
            time::parse_rfc3339_millis(&w.expires_at)
                .is_some_and(|at| at <= now && w.state != WorkerState::Stopping)
        };
        let now = time::now_millis();
        if workers.iter().any(|w| expired(w, now)) {
            // Looked at again under the lock a renew takes: one renewed since the first
            // list is left alone.
            let _serial = self.lifetimes.lock().unwrap_or_else(|p| p.into_inner());
            let now = time::now_millis();
            for w in self.backend.list()?.into_iter().filter(|w| expired(w, now)) {
                self.reap_one(w);
            }
        }
        if !workspaces {
            self.metrics.reaper_pass(pass.elapsed(), listed);
            return Ok(());
        }
        self.tidy_copies();
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

    /// What the end of `w`'s TTL does: a suspended worker (its `suspended_ttl` over) is
    /// stopped for good; one whose template says `on_expiry: "suspend"` is suspended; any other
    /// is stopped. Logged and counted as operation `reap`.
    fn reap_one(&self, w: Worker) {
        let started = Instant::now();
        let ids = Ids {
            task_id: "reaper",
            task: &w.task,
            worker_id: &w.worker_id,
            caller: "reaper",
        };
        // Suspended when its template says so and the backend can (a refusal, such as a
        // worker the backend cannot suspend, falls back to the stop).
        if self.suspends_at_expiry(&w) {
            let outcome = match self.suspend_worker(&w, true) {
                Ok(worker) => {
                    log::info!(
                        "reaper: suspended worker {} (task {:?}): its TTL ended at {}",
                        w.worker_id,
                        w.task,
                        w.expires_at
                    );
                    Some(completed(&OneWorker { worker }, None, 0))
                }
                Err(Outcome::Rejected(e)) => {
                    log::debug!(
                        "reaper: worker {} is stopped instead: {}",
                        w.worker_id,
                        e.message
                    );
                    None
                }
                Err(outcome) => Some(outcome),
            };
            if let Some(outcome) = outcome {
                self.record("reap", &ids, &outcome, started.elapsed());
                return;
            }
        }
        let why = if w.state == WorkerState::Suspended {
            format!(
                "reaped: suspended past its suspended_ttl, which ended at {}",
                w.expires_at
            )
        } else {
            format!("reaped: its TTL ended at {}", w.expires_at)
        };
        self.watch.stopping(&w.worker_id, &why);
        let stopped = self.backend.stop(&w.worker_id);
        self.watch.stopped(&w.worker_id, stopped.is_ok());
        let outcome = match stopped {
            Ok(worker) => {
                self.released(&worker);
                log::info!(
                    "reaper: stopped worker {} (task {:?}): {why}",
                    w.worker_id,
                    w.task
                );
                completed(&OneWorker { worker }, None, 0)
            }
            Err(BackendError::NotFound) => {
                log::debug!(
                    "reaper: worker {} was already gone (stopped elsewhere)",
                    w.worker_id
                );
                return;
            }
            Err(e) => Outcome::Failed(e.into()),
        };
        self.record("reap", &ids, &outcome, started.elapsed());
    }

    /// Deletes every workspace whose task has had no worker for `WORKSPACE_TTL`: one list of
    /// the workspaces, and a list of the workers only when one is past its TTL (looked at
    /// then, just before the deletion, so a worker created meanwhile keeps its workspace).
    /// Any replica may: a workspace another one deleted first is simply gone.
    fn reap_workspaces(&self) -> Result<(), BackendError> {
        let Some(ttl) = self.workspace_ttl else {
            return Ok(());
        };
        let now = time::now_millis();
        let past: Vec<_> = self
            .owned_workspaces()?
            .into_iter()
            .filter(|s| {
                time::parse_rfc3339_millis(&s.last_used)
                    .or_else(|| time::parse_rfc3339_millis(&s.created_at))
                    .is_some_and(|last| last + ttl.as_millis() as u64 <= now)
            })
            .collect();
        if past.is_empty() {
            return Ok(());
        }
        let workers = self.backend.list()?;
        for s in past {
            if workers
                .iter()
                .any(|w| w.task == s.task && w.scope == s.scope)
            {
                continue;
            }
            let started = Instant::now();
            let outcome = match self.remove_workspace(&s.scope, &s.task) {
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

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use super::*;
    use crate::backend::fake::FakeBackend;
    use crate::backend::TaskWorkspace;
    use crate::metrics::Metrics;
    use crate::settings::templates::{Template, TemplatesFile};

    /// One running worker (task `busy`), two workspaces unused for a day (`busy`'s and
    /// `idle`'s); every call counted.
    fn counted() -> Arc<FakeBackend> {
        let backend = Arc::new(FakeBackend::default());
        backend.add_by_hand("busy", "s");
        *backend.workspaces.lock().unwrap() =
            vec![unused_for_a_day("busy"), unused_for_a_day("idle")];
        backend
    }

    fn unused_for_a_day(task: &str) -> TaskWorkspace {
        let day_ago = time::rfc3339_millis(time::now_millis() - 86_400_000);
        TaskWorkspace {
            task: task.into(),
            scope: "s".into(),
            template: "default".into(),
            size: String::new(),
            created_at: day_ago.clone(),
            last_used: day_ago,
            in_use: false,
            name: format!("{task}-ws"),
        }
    }

    fn control(backend: Arc<FakeBackend>, ttl: Option<Duration>) -> Control {
        let templates = TemplatesFile::fixed(
            Template::new("default", "img", 8080),
            Box::new(|_: &Template| Ok(())),
        )
        .unwrap();
        Control::new(
            backend,
            Arc::new(Metrics::new()),
            None,
            0,
            Arc::new(templates),
        )
        .with_workspace_ttl(ttl)
    }

    #[test]
    fn a_pass_between_sweeps_is_one_list_and_a_sweep_spares_a_used_workspace() {
        let backend = counted();
        let c = control(Arc::clone(&backend), Some(Duration::from_secs(3600)));
        c.reap(false).unwrap();
        assert_eq!(backend.lists.load(Ordering::SeqCst), 1);
        assert_eq!(backend.workspace_lists.load(Ordering::SeqCst), 0);
        // A sweep: the workspaces, then the workers once more (one is past its TTL), and
        // only the one no worker has is deleted.
        c.reap(true).unwrap();
        assert_eq!(backend.lists.load(Ordering::SeqCst), 3);
        assert_eq!(backend.workspace_lists.load(Ordering::SeqCst), 1);
        assert_eq!(*backend.deleted_workspaces.lock().unwrap(), ["idle"]);
    }

    #[test]
    fn workspaces_are_swept_every_tenth_of_their_ttl_at_most_a_minute_apart() {
        let s = Duration::from_secs;
        assert_eq!(workspace_sweep(s(1), Some(s(7 * 86_400))), s(60));
        assert_eq!(workspace_sweep(s(1), Some(s(300))), s(30));
        assert_eq!(workspace_sweep(s(1), Some(s(2))), s(1));
        assert_eq!(workspace_sweep(s(90), Some(s(86_400))), s(90));
        assert_eq!(workspace_sweep(s(1), None), s(60));
    }
}
