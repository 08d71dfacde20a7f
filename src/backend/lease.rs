//! A worker's lease: what may change about it after create (its expiry, whether it is
//! suspended), written as labels on a record the engine keeps beside the worker — where a
//! worker's own labels cannot change (Docker) or the worker is gone while suspended
//! (Kubernetes). The newest record wins (`at`, Unix ms); a worker without one is as created.
//! Shared by the container backends so the labels read the same everywhere.

use std::collections::HashMap;

use super::{Suspend, Worker, WorkerState};
use crate::time::rfc3339_secs;

/// On a lease record: the worker id it is of.
pub const LEASE: &str = "a2a-worker-controller/lease";
/// On a lease record: when it was written (Unix ms): the newest one is the worker's.
pub const LEASE_AT: &str = "a2a-worker-controller/lease-at";
/// On a lease record of a suspended worker: when it was suspended (Unix seconds).
pub const SUSPENDED_AT: &str = "a2a-worker-controller/suspended-at";
/// On a lease record of a suspended worker: the seconds of TTL it gets back on resume.
pub const TTL_LEFT: &str = "a2a-worker-controller/ttl-left";

/// One lease record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    /// When it was written (Unix ms).
    pub at: u64,
    /// The worker's expiry (Unix seconds; for a suspended one, when it is stopped for good).
    pub expires_at: Option<u64>,
    /// Set while the worker is suspended.
    pub suspended: Option<Suspend>,
}

impl Lease {
    /// A lease that renews: expiring at `expires_at`, running.
    pub fn running(at: u64, expires_at: Option<u64>) -> Lease {
        Lease {
            at,
            expires_at,
            suspended: None,
        }
    }

    /// A lease of a suspended worker.
    pub fn suspended(at: u64, how: Suspend) -> Lease {
        Lease {
            at,
            expires_at: how.until,
            suspended: Some(how),
        }
    }

    /// Its labels (beside the owner label, which each engine places).
    pub fn labels(&self, worker_id: &str) -> Vec<(&'static str, String)> {
        let mut out = vec![
            (LEASE, worker_id.to_string()),
            (LEASE_AT, self.at.to_string()),
        ];
        if let Some(at) = self.expires_at {
            out.push((super::labels::EXPIRES_AT, at.to_string()));
        }
        if let Some(s) = self.suspended {
            out.push((SUSPENDED_AT, s.at.to_string()));
            if let Some(left) = s.ttl_left {
                out.push((TTL_LEFT, left.to_string()));
            }
        }
        out
    }

    /// The lease these labels say, and whose (its worker id); `None` when they are not a
    /// lease's.
    pub fn of(labels: &HashMap<String, String>) -> Option<(String, Lease)> {
        let number = |k: &str| labels.get(k).and_then(|v| v.parse::<u64>().ok());
        let worker_id = labels.get(LEASE).filter(|w| !w.is_empty())?.clone();
        let expires_at = number(super::labels::EXPIRES_AT);
        let suspended = number(SUSPENDED_AT).map(|at| Suspend {
            at,
            until: expires_at,
            ttl_left: number(TTL_LEFT),
        });
        Some((
            worker_id,
            Lease {
                at: number(LEASE_AT)?,
                expires_at,
                suspended,
            },
        ))
    }

    /// Whether a worker in `state` (as its engine shows it) is suspended under this lease:
    /// the lease says so and the engine does not run it (a worker the lease says is
    /// suspended but that runs was resumed, or its suspend did not finish: it runs).
    pub fn suspends(&self, state: WorkerState) -> bool {
        self.suspended.is_some()
            && !matches!(
                state,
                WorkerState::Running | WorkerState::Starting | WorkerState::Stopping
            )
    }

    /// `worker`, as listed from its engine, under this lease: its expiry, and `suspended`
    /// when [`Lease::suspends`] says so.
    pub fn apply(&self, mut worker: Worker) -> Worker {
        match self.suspended {
            Some(s) if self.suspends(worker.state) => {
                worker.state = WorkerState::Suspended;
                worker.reason = format!("suspended at {}", rfc3339_secs(s.at));
                worker.expiring(self.expires_at)
            }
            Some(_) => worker,
            None => worker.expiring(self.expires_at),
        }
    }
}

/// The newest lease of each worker among `leases` (worker id, lease).
pub fn newest(leases: impl IntoIterator<Item = (String, Lease)>) -> HashMap<String, Lease> {
    let mut out: HashMap<String, Lease> = HashMap::new();
    for (id, lease) in leases {
        match out.get(&id) {
            Some(have) if have.at >= lease.at => {}
            _ => {
                out.insert(id, lease);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::BackendKind;

    fn map(pairs: Vec<(&'static str, String)>) -> HashMap<String, String> {
        pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
    }

    #[test]
    fn a_lease_reads_back_from_its_labels() {
        let running = Lease::running(1_000, Some(2_000_000_000));
        assert_eq!(
            Lease::of(&map(running.labels("w1"))),
            Some(("w1".into(), running))
        );
        let how = Suspend {
            at: 1_900_000_000,
            until: Some(1_900_600_000),
            ttl_left: Some(300),
        };
        let suspended = Lease::suspended(2_000, how);
        assert_eq!(
            Lease::of(&map(suspended.labels("w1"))),
            Some(("w1".into(), suspended))
        );
        assert_eq!(Lease::of(&HashMap::new()), None, "not a lease");
    }

    #[test]
    fn the_newest_lease_wins_and_suspends_only_what_does_not_run() {
        let old = Lease::running(1, Some(10));
        let new = Lease::suspended(
            2,
            Suspend {
                at: 5,
                until: None,
                ttl_left: None,
            },
        );
        let got = newest([("w".to_string(), new), ("w".to_string(), old)]);
        assert_eq!(got["w"], new);
        let w = Worker::new(BackendKind::Docker, "w", "t", WorkerState::Exited, "");
        let listed = new.apply(w.clone());
        assert_eq!(listed.state, WorkerState::Suspended);
        assert_eq!(listed.expires_at, "");
        let running = Worker {
            state: WorkerState::Running,
            ..w.clone()
        };
        assert_eq!(new.apply(running.clone()), running);
        assert_eq!(old.apply(w).expires_at, rfc3339_secs(10));
    }
}
