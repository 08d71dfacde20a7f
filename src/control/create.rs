//! A create, from the caller's request to the backend's worker: the task name the backend
//! takes, room for a workspace, the TTL within its ceiling, a new id and token, a place under
//! `MAX_WORKERS` and the caller's own bound (held while the create runs), then a member of the
//! template's warm pool when one is free, else a worker made cold.

use std::sync::Arc;
use std::time::Duration;

use super::caller::Caller;
use super::error::{ControlError, ErrorCode, Outcome};
use super::request::ttl_for;
use super::{completed, Control, OneWorker};
use crate::backend::{
    CreateSpec, Metadata, Progress, Subject, Template, WorkerState, DEFAULT_TEMPLATE,
};
use crate::time;
use crate::token::{self, Token};

impl Control {
    pub(super) fn create(
        &self,
        caller: &Caller,
        task: String,
        ttl: Option<Duration>,
        metadata: Metadata,
        template: Arc<Template>,
        progress: Progress,
    ) -> (Outcome, String) {
        let failed = |e: ControlError| (Outcome::Failed(e), String::new());
        if let Err(refused) = self.backend.validate(Subject::Task(&task)) {
            return (
                Outcome::Rejected(ControlError::invalid(refused.why)),
                String::new(),
            );
        }
        if let Err(e) = self.workspace_room(caller, &task, &template) {
            return failed(e);
        }
        if let Err(e) = self.copy_settled(caller, &task, &template) {
            return failed(e);
        }
        let ttl = match template_ttl(&template, ttl) {
            Ok(ttl) => ttl,
            Err(e) => return (Outcome::Rejected(e), String::new()),
        };
        let can = self.backend.capabilities();
        let (worker_id, token) = match new_identity(can.endpoints) {
            Ok(v) => v,
            Err(e) => return failed(e),
        };
        let _serial = if can.atomic_task_uniqueness {
            None
        } else {
            Some(self.create_lock.lock().unwrap_or_else(|p| p.into_inner()))
        };
        let admitted = match self.admit(caller) {
            Ok(a) => a,
            Err(e) => return failed(e),
        };
        // Whole seconds, rounded up: a worker never goes before its TTL has passed.
        let expires_at =
            ttl.map(|t| time::now_millis().div_ceil(1000) + t.as_secs_f64().ceil() as u64);
        let spec = CreateSpec {
            worker_id: worker_id.clone(),
            task,
            scope: caller.scope.clone(),
            token,
            expires_at,
            metadata,
            template,
            progress,
        };
        // From the template's pool when it keeps one with a member free; made cold otherwise.
        let pooled = self.pool.as_ref().and_then(|p| p.claim(&spec));
        let result = pooled.unwrap_or_else(|| self.backend.create(&spec));
        drop(admitted);
        match result {
            Ok(worker) => {
                let worker_id = worker.worker_id.clone();
                self.watch.poke();
                (
                    completed(&OneWorker { worker }, Some(spec.token), 0),
                    worker_id,
                )
            }
            Err(e) => (Outcome::Failed(e.into()), worker_id),
        }
    }

    /// Reserves a place under `MAX_WORKERS` and the caller's `max_workers` (which counts its
    /// scope's workers): listed workers plus creates in flight. The place is given back when
    /// the returned guard drops, also if the backend panics.
    pub(super) fn admit(&self, caller: &Caller) -> Result<Admitted<'_>, ControlError> {
        let mut in_flight = self.in_flight.lock().unwrap_or_else(|p| p.into_inner());
        let scope_in_flight = in_flight.by_scope.get(&caller.scope).copied().unwrap_or(0);
        let scope_max = caller.max_workers.filter(|m| *m > 0);
        if self.max_workers > 0 || scope_max.is_some() {
            // A worker being removed (`stopping`) is on its way out, a suspended one holds
            // nothing running: each holds its task, not a place.
            let workers = self.backend.list().map_err(ControlError::from)?;
            let counted = workers
                .iter()
                .filter(|w| !matches!(w.state, WorkerState::Stopping | WorkerState::Suspended));
            let (existing, in_scope) = counted.fold((0u64, 0u64), |(all, mine), w| {
                (all + 1, mine + u64::from(w.scope == caller.scope))
            });
            if self.max_workers > 0
                && existing + u64::from(in_flight.total) >= u64::from(self.max_workers)
            {
                return Err(ControlError::new(
                    ErrorCode::Capacity,
                    format!(
                        "MAX_WORKERS ({}) reached: stop a worker first",
                        self.max_workers
                    ),
                ));
            }
            if let Some(max) = scope_max {
                if in_scope + u64::from(scope_in_flight) >= u64::from(max) {
                    return Err(ControlError::new(
                        ErrorCode::Capacity,
                        format!(
                            "caller {}'s max_workers ({max}) reached in scope {}: stop one of its workers first",
                            caller.name, caller.scope
                        ),
                    ));
                }
            }
        }
        in_flight.total += 1;
        *in_flight.by_scope.entry(caller.scope.clone()).or_default() += 1;
        Ok(Admitted(self, caller.scope.clone()))
    }
}

/// A create counted in flight (in its scope); dropping it gives the place back.
pub(super) struct Admitted<'a>(&'a Control, String);

impl Drop for Admitted<'_> {
    fn drop(&mut self) {
        let mut in_flight = self.0.in_flight.lock().unwrap_or_else(|p| p.into_inner());
        in_flight.total = in_flight.total.saturating_sub(1);
        if let Some(n) = in_flight.by_scope.get_mut(&self.1) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                in_flight.by_scope.remove(&self.1);
            }
        }
    }
}

/// A new worker's id, and its token (empty for a backend whose workers have no endpoint).
fn new_identity(endpoints: bool) -> Result<(String, Token), ControlError> {
    token::random_hex(6)
        .and_then(|id| {
            let token = if endpoints {
                Token::generate()?
            } else {
                Token::from_secret(String::new())
            };
            Ok((id, token))
        })
        .map_err(|e| {
            ControlError::new(
                ErrorCode::Internal,
                format!("the system random generator failed: {e}"),
            )
        })
}

/// The TTL a create of `template` gets: the caller's, else the template's default, within
/// its ceiling (`MAX_WORKER_TTL` for `default`, else the template's `max_ttl`).
pub(super) fn template_ttl(
    template: &Template,
    asked: Option<Duration>,
) -> Result<Option<Duration>, ControlError> {
    let ceiling = if template.name == DEFAULT_TEMPLATE {
        "MAX_WORKER_TTL".to_string()
    } else {
        format!("template {}'s max_ttl", template.name)
    };
    ttl_for(&template.lifetime, asked, &ceiling)
}
