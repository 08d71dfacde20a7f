//! Lifetimes after create: `renew` (a new expiry, bounded as a create's TTL; a worker may ask
//! with its own token), `suspend` (the worker stops running and keeps its files and identity)
//! and `resume` (it runs again, ready before the reply). Each goes through the backend's
//! ability ([`Renewal`](crate::backend::Renewal), [`Suspension`](crate::backend::Suspension));
//! without one the operation is refused in one line. What the reaper does at a TTL's end
//! (`on_expiry`, `suspended_ttl`) is here too, beside what it decides with.

use std::sync::Arc;
use std::time::Duration;

use super::caller::Caller;
use super::create::template_ttl;
use super::error::{ControlError, ErrorCode, Outcome};
use super::{completed, Control, OneWorker};
use crate::backend::{BackendError, Progress, Suspend, Template, Worker, WorkerState};
use crate::time;

/// Now, in whole seconds rounded up (a TTL never ends before it has passed).
fn now_secs() -> u64 {
    time::now_millis().div_ceil(1000)
}

fn refused(message: String) -> Outcome {
    Outcome::Rejected(ControlError::invalid(message))
}

fn wrong_state(message: String) -> Outcome {
    Outcome::Failed(ControlError::new(ErrorCode::InvalidState, message))
}

impl Control {
    /// The worker `worker_id` as `caller` may reach it (another scope's, or a worker token's
    /// other worker, is `not_found`, as one that does not exist), from one list.
    fn reachable_worker(&self, caller: &Caller, worker_id: &str) -> Result<Worker, BackendError> {
        self.backend
            .list()?
            .into_iter()
            .find(|w| w.worker_id == worker_id && caller.sees(w))
            .ok_or(BackendError::NotFound)
    }

    /// The template `worker` was made from, as the templates file has it now (`None`: it is
    /// no longer there).
    fn template_of(&self, worker: &Worker) -> Option<Arc<Template>> {
        self.templates.current().get(&worker.template).cloned()
    }

    /// The `default` template as the file has it now (always there).
    fn default_template(&self) -> Arc<Template> {
        let templates = self.templates.current();
        match templates.get(crate::backend::DEFAULT_TEMPLATE) {
            Some(t) => Arc::clone(t),
            None => Arc::new(Template::new(crate::backend::DEFAULT_TEMPLATE, "", 0)),
        }
    }

    /// `renew`: the worker's expiry becomes now + `ttl`, within its template's ceiling.
    pub(super) fn renew(&self, caller: &Caller, worker_id: &str, ttl: Duration) -> Outcome {
        let Some(renewal) = self.backend.abilities().renewal else {
            return refused(format!(
                "the {} backend cannot renew workers",
                self.backend.kind()
            ));
        };
        let _serial = self.lifetimes.lock().unwrap_or_else(|p| p.into_inner());
        // One worker looked up alone (a renew is a busy worker's heartbeat: it costs about
        // what a list of one worker does); another scope's is as one that does not exist.
        let worker = match renewal.find(worker_id) {
            Ok(w) if caller.sees(&w) => w,
            Ok(_) | Err(BackendError::NotFound) => {
                return Outcome::Failed(BackendError::NotFound.into())
            }
            Err(e) => return Outcome::Failed(e.into()),
        };
        match worker.state {
            WorkerState::Suspended => {
                return wrong_state(format!(
                    "worker {worker_id} is suspended (its TTL does not run): resume it, then renew"
                ))
            }
            WorkerState::Stopping => return Outcome::Failed(BackendError::NotFound.into()),
            _ => {}
        }
        // Bounded as a create of its template would be (the default's bounds when the
        // template is gone from the file).
        let template = self
            .template_of(&worker)
            .unwrap_or_else(|| self.default_template());
        let ttl = match template_ttl(&template, Some(ttl)) {
            Ok(ttl) => ttl,
            Err(e) => return Outcome::Rejected(e),
        };
        let expires_at = ttl.map(|t| now_secs() + t.as_secs_f64().ceil() as u64);
        match renewal.renew(&worker, expires_at) {
            Ok(worker) => {
                self.watch.poke();
                completed(&OneWorker { worker }, None, 0)
            }
            Err(e) => Outcome::Failed(e.into()),
        }
    }

    /// `suspend`: a running worker stops running and keeps its files and identity. A
    /// suspended one is answered as it is (nothing to do).
    pub(super) fn suspend(&self, caller: &Caller, worker_id: &str) -> Outcome {
        let worker = match self.reachable_worker(caller, worker_id) {
            Ok(w) => w,
            Err(e) => return Outcome::Failed(e.into()),
        };
        match self.suspend_worker(&worker, false) {
            Ok(worker) => completed(&OneWorker { worker }, None, 0),
            Err(outcome) => outcome,
        }
    }

    /// Suspends `worker` (listed just now); `expired`: its TTL ended (it gets its template's
    /// default TTL back on resume, not the nothing it had left).
    pub(super) fn suspend_worker(&self, worker: &Worker, expired: bool) -> Result<Worker, Outcome> {
        let Some(suspension) = self.backend.abilities().suspension else {
            return Err(refused(format!(
                "the {} backend cannot suspend workers",
                self.backend.kind()
            )));
        };
        let id = &worker.worker_id;
        match worker.state {
            WorkerState::Suspended => return Ok(worker.clone()),
            WorkerState::Running | WorkerState::Starting => {}
            other => {
                return Err(wrong_state(format!(
                    "worker {id} is {}: only a running worker can be suspended",
                    other.as_str()
                )))
            }
        }
        let template = self.template_of(worker);
        if let Err(why) = suspension.suspendable(worker, template.as_deref()) {
            return Err(refused(format!("worker {id} cannot be suspended: {why}")));
        }
        let lifetime = template.map(|t| t.lifetime).unwrap_or_default();
        let now = now_secs();
        let left = time::parse_rfc3339_millis(&worker.expires_at)
            .map(|at| at.div_ceil(1000).saturating_sub(now))
            .filter(|left| *left > 0 && !expired);
        let how = Suspend {
            at: now,
            until: lifetime.suspended_ttl.map(|d| now + d.as_secs()),
            ttl_left: match (worker.expires_at.is_empty(), left) {
                (true, _) => None,
                (false, Some(left)) => Some(left),
                // Its TTL is over: it gets the template's default again when it comes back.
                (false, None) => lifetime
                    .default_ttl
                    .or(lifetime.max_ttl)
                    .map(|d| d.as_secs()),
            },
        };
        let done = suspension
            .suspend(id, &how)
            .map_err(|e| Outcome::Failed(e.into()))?;
        self.watch.poke();
        Ok(done)
    }

    /// `resume`: a suspended worker runs again, ready before the reply, with its current
    /// `a2a_url`. A running one is answered as it is (nothing to do). It takes a place under
    /// `MAX_WORKERS` again, as a create does.
    pub(super) fn resume(&self, caller: &Caller, worker_id: &str, progress: Progress) -> Outcome {
        let Some(suspension) = self.backend.abilities().suspension else {
            return refused(format!(
                "the {} backend cannot suspend or resume workers",
                self.backend.kind()
            ));
        };
        let worker = match self.reachable_worker(caller, worker_id) {
            Ok(w) => w,
            Err(e) => return Outcome::Failed(e.into()),
        };
        match worker.state {
            WorkerState::Suspended => {}
            WorkerState::Running | WorkerState::Starting => {
                return completed(&OneWorker { worker }, None, 0)
            }
            other => {
                return wrong_state(format!(
                "worker {worker_id} is {}, not suspended: only a suspended worker can be resumed",
                other.as_str()
            ))
            }
        }
        let admitted = match self.admit(caller) {
            Ok(a) => a,
            Err(e) => return Outcome::Failed(e),
        };
        let template = self.template_of(&worker);
        let resumed = suspension.resume(worker_id, template.as_deref(), &progress);
        drop(admitted);
        match resumed {
            Ok(worker) => {
                self.watch.poke();
                completed(&OneWorker { worker }, None, 0)
            }
            Err(e) => Outcome::Failed(e.into()),
        }
    }

    /// Whether the reaper suspends `worker`, whose expiry has passed, rather than stop it: it
    /// runs (an exited one is stopped), its template says `on_expiry: "suspend"` and the
    /// backend suspends workers (whether it can suspend this one, [`Control::suspend_worker`]
    /// asks).
    pub(super) fn suspends_at_expiry(&self, worker: &Worker) -> bool {
        matches!(worker.state, WorkerState::Running | WorkerState::Starting)
            && self.backend.abilities().suspension.is_some()
            && self
                .template_of(worker)
                .is_some_and(|t| t.lifetime.on_expiry == crate::settings::OnExpiry::Suspend)
    }
}
