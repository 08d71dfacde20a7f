//! Renewal, an ability of its own: a backend whose workers' expiry can change after create
//! answers [`Backend::abilities`](super::Backend::abilities) with this. The control layer
//! bounds the new expiry (as a create's TTL) and decides who may ask; the backend only stores
//! it where ownership lives, so every replica, the reaper and a restart see it at once.

use super::{BackendError, Worker};

/// The engine's side of `renew`.
pub trait Renewal: Send + Sync {
    /// The worker `worker_id` this controller owns, as a list would show it (its scope, token
    /// hash, template and state, `suspended` included), looked up alone and as cheaply as the
    /// engine allows: what the control layer decides a renew with. [`BackendError::NotFound`]
    /// for any other id.
    fn find(&self, worker_id: &str) -> Result<Worker, BackendError>;

    /// Makes `expires_at` (Unix seconds; `None`: no TTL) the expiry of `worker` (as
    /// [`Renewal::find`] returned it just now), and returns it as a list shows it now;
    /// [`BackendError::NotFound`] for a worker that went meanwhile (a renew never answers for
    /// a worker that is gone).
    fn renew(&self, worker: &Worker, expires_at: Option<u64>) -> Result<Worker, BackendError>;
}
