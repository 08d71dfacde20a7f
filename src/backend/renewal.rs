//! Renewal, an ability of its own: a backend whose workers' expiry can change after create
//! answers [`Backend::abilities`](super::Backend::abilities) with this. The control layer
//! bounds the new expiry (as a create's TTL) and decides who may ask; the backend only stores
//! it where ownership lives, so every replica, the reaper and a restart see it at once.

use super::{BackendError, Worker};

/// The engine's side of `renew`.
pub trait Renewal: Send + Sync {
    /// Makes `expires_at` (Unix seconds; `None`: no TTL) the expiry of the worker `worker_id`
    /// this controller owns, and returns the worker as a list shows it now;
    /// [`BackendError::NotFound`] for any other id, and for a worker that went while it was
    /// renewed (a renew never answers for a worker that is gone).
    fn renew(&self, worker_id: &str, expires_at: Option<u64>) -> Result<Worker, BackendError>;
}
