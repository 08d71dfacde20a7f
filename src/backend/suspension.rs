//! Suspension, an ability of its own: a backend that can take a worker off its engine and
//! bring it back with its files and identity answers
//! [`Backend::abilities`](super::Backend::abilities) with this. A suspended worker is listed
//! with state `suspended` (its record is kept where ownership lives), still holds its task,
//! and costs no CPU or memory. The control layer decides when (callers, the reaper's
//! `on_expiry: "suspend"`) and for how long (`suspended_ttl`); the backend stores what it is
//! told.

use super::{BackendError, Progress, Template, Worker};

/// What a suspend stores with the worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Suspend {
    /// When (Unix seconds).
    pub at: u64,
    /// When the reaper stops it for good (Unix seconds): the `expires_at` a suspended worker
    /// is listed with. `None`: kept until stopped.
    pub until: Option<u64>,
    /// Seconds of TTL it gets on resume (its expiry becomes resume time + this); `None`: no
    /// TTL once resumed.
    pub ttl_left: Option<u64>,
}

/// The engine's side of `suspend` and `resume`.
pub trait Suspension: Send + Sync {
    /// Whether `worker`, made from `template` (`None`: no longer in the templates file), can
    /// be suspended on this backend and resumed again; a refusal says why in one line. Asked
    /// before [`Suspension::suspend`]. By default, every worker can.
    fn suspendable(&self, _worker: &Worker, _template: Option<&Template>) -> Result<(), String> {
        Ok(())
    }

    /// Suspends the running worker `worker_id` this controller owns, keeping `how` with it,
    /// and returns it as a list shows it now (state `suspended`); [`BackendError::NotFound`]
    /// for any other id.
    fn suspend(&self, worker_id: &str, how: &Suspend) -> Result<Worker, BackendError>;

    /// Runs the suspended worker `worker_id` again, waits until it is ready (as a create
    /// waits, by `template` as it is now: its ready path, its network; `None`: the defaults),
    /// saying how it goes through `progress`, and returns it with its expiry (resume time +
    /// the TTL left it was suspended with) and its current `a2a_url`.
    fn resume(
        &self,
        worker_id: &str,
        template: Option<&Template>,
        progress: &Progress,
    ) -> Result<Worker, BackendError>;
}
