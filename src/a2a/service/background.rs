//! Operations in the background: a `returnImmediately` request or a stream's operation runs
//! on a thread of its own (at most [`MAX_BACKGROUND`] at once), its steps recorded as they
//! happen, a panic caught and its task marked failed.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;

use super::super::types::Task;
use super::record::{finish, working_status};
use super::Service;
use crate::backend::Progress;
use crate::control::{Caller, ControlError, ControlRequest, ErrorCode, Outcome};
use crate::time::{now_millis, rfc3339_millis};

/// Most `returnImmediately` operations running in the background at once; beyond it a request
/// is served as if it had not asked (the reply then simply arrives finished).
const MAX_BACKGROUND: usize = 64;

impl Service {
    /// Stores the caller's task as it starts (WORKING, stamped now); returns that copy.
    pub(super) fn store_working(&self, caller: &Caller, base: &Task) -> Task {
        let now = now_millis();
        let mut working = base.clone();
        working.status.timestamp = rfc3339_millis(now);
        self.record.started(&working, &caller.key, now);
        working
    }

    pub(super) fn reserve_background(&self) -> bool {
        self.background
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < MAX_BACKGROUND).then_some(n + 1)
            })
            .is_ok()
    }

    pub(super) fn spawn_background(
        &self,
        caller: &Caller,
        base: Task,
        request: Result<ControlRequest, ControlError>,
        task_id: String,
    ) {
        let control = Arc::clone(&self.control);
        let caller = caller.clone();
        let record = self.record.clone();
        let slot = BackgroundSlot(Arc::clone(&self.background));
        let fallback = base.clone();
        let progress_base = base.clone();
        let run = move || {
            let _slot = slot;
            // A bug in the operation must not leave its task WORKING forever: the panic is
            // caught here as the HTTP layer catches a request handler's.
            // Each step the backend reports becomes the task's WORKING status, which
            // subscribers hear as it happens.
            let progress = {
                let (record, base) = (record.clone(), progress_base);
                Progress::new(move |step: &str| {
                    record.progress(&base, working_status(&base, step));
                })
            };
            let outcome = catch_unwind(AssertUnwindSafe(|| {
                control.execute_reporting(&caller, request, &task_id, progress)
            }))
                .unwrap_or_else(|_| {
                    log::error!("background operation for task {task_id} panicked; the task is marked failed");
                    Outcome::Failed(ControlError::new(
                        ErrorCode::Internal,
                        "the operation stopped on an internal error; list shows whether a worker was created",
                    ))
                });
            let (task, token, status_millis) = finish(base, outcome);
            if !record.finished(&task, token, status_millis) {
                log::warn!(
                    "task {task_id} was evicted before its operation finished; its result (and any worker token) was not kept"
                );
            }
        };
        if let Err(e) = thread::Builder::new().name("control-bg".into()).spawn(run) {
            // Nothing ran (and the slot was released with the closure): the stored task must
            // not stay WORKING forever.
            log::error!("cannot start a background operation: {e}");
            let failure = ControlError::new(
                ErrorCode::Internal,
                "the operation could not be started; nothing was done",
            );
            let (task, _, status_millis) = finish(fallback, Outcome::Failed(failure));
            self.record.finished(&task, None, status_millis);
        }
    }
}

/// One of the [`MAX_BACKGROUND`] places, given back when dropped (also when the operation
/// panics, or its thread never starts).
struct BackgroundSlot(Arc<AtomicUsize>);

impl Drop for BackgroundSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}
