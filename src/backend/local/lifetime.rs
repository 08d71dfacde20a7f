//! Renew on the local backend: the new expiry is written to the worker's record in the state
//! file (under its lock, as it is on disk now), where the reaper and a restart read it.

use super::{state_error, LocalBackend};
use crate::backend::{Backend, BackendError, Renewal, Worker};

impl Renewal for LocalBackend {
    fn find(&self, worker_id: &str) -> Result<Worker, BackendError> {
        self.list()?
            .into_iter()
            .find(|w| w.worker_id == worker_id)
            .ok_or(BackendError::NotFound)
    }

    fn renew(&self, worker: &Worker, expires_at: Option<u64>) -> Result<Worker, BackendError> {
        let worker_id = worker.worker_id.as_str();
        {
            let store = self.store();
            let mut records = store.load().map_err(state_error)?;
            let record = records
                .iter_mut()
                .find(|r| r.worker_id == worker_id)
                .ok_or(BackendError::NotFound)?;
            record.expires_at = expires_at;
            store.save(&records).map_err(state_error)?;
        }
        self.list()?
            .into_iter()
            .find(|w| w.worker_id == worker_id)
            .ok_or(BackendError::NotFound)
    }
}
