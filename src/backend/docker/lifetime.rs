//! Renew, suspend and resume on Docker. A container's labels are fixed at create, so what
//! changes later is a lease record (`lease.rs`): an empty named volume per change,
//! `a2a-lease-<worker id>-<Unix ms>`, labelled with the owner and the lease; the newest is
//! the worker's, the older ones are removed after it is made (the worker is never without its
//! lease in between). A suspended worker is its container, stopped (SIGTERM, then the grace),
//! with a lease that says so: its writable layer, volumes, labels and environment (its token)
//! stay, and the engine's own state is the record, so every replica and a restarted
//! controller list it as suspended. Resume starts the same container and waits for its card.

use serde_json::{json, Map, Value};

use super::{engine_error, DockerBackend, STOP_GRACE_SECS};
use crate::backend::lease::{self, Lease};
use crate::backend::{
    labels, BackendError, Progress, Renewal, Suspend, Suspension, Template, Worker, WorkerState,
};
use crate::time::now_millis;

/// A lease record older than this whose worker no list shows is removed (a renew that raced
/// its worker's stop, a container removed by hand).
const ORPHAN_AFTER_MS: u64 = 60_000;

/// One lease volume: its name, whose, and what it says.
pub(super) struct Record {
    name: String,
    worker_id: String,
    lease: Lease,
}

impl DockerBackend {
    /// The lease volumes of this controller (of one worker, when given).
    pub(super) fn leases(&self, worker_id: Option<&str>) -> Result<Vec<Record>, BackendError> {
        let which = match worker_id {
            Some(id) => format!("{}={id}", lease::LEASE),
            None => lease::LEASE.to_string(),
        };
        let selectors = [format!("{}={}", labels::OWNER, self.controller_id), which];
        let volumes = self.engine.volumes(&selectors).map_err(engine_error)?;
        // Looked at again here: Podman answers volumes matching any one of several label
        // filters, not all of them.
        let owner = self.controller_id.as_str();
        Ok(volumes
            .into_iter()
            .filter_map(|v| {
                let labels = v.labels.as_ref()?;
                if labels.get(labels::OWNER).map(String::as_str) != Some(owner) {
                    return None;
                }
                let (id, lease) = Lease::of(labels)?;
                if worker_id.is_some_and(|w| w != id) {
                    return None;
                }
                let worker_id = id;
                Some(Record {
                    name: v.name,
                    worker_id,
                    lease,
                })
            })
            .collect())
    }

    /// `workers` (a whole list) under their newest leases (`records`, every lease, read beside
    /// the containers); the leases of workers no longer listed are removed once old enough.
    pub(super) fn with_leases(
        &self,
        workers: Vec<Worker>,
        records: Vec<Record>,
    ) -> Result<Vec<Worker>, BackendError> {
        if records.is_empty() {
            return Ok(workers);
        }
        let listed: std::collections::HashSet<&str> =
            workers.iter().map(|w| w.worker_id.as_str()).collect();
        let now = now_millis();
        for r in records
            .iter()
            .filter(|r| !listed.contains(r.worker_id.as_str()))
        {
            if r.lease.at + ORPHAN_AFTER_MS < now {
                log::debug!("removing the lease {} of a worker that is gone", r.name);
                let _ = self.engine.remove_volume(&r.name);
            }
        }
        let newest = lease::newest(records.iter().map(|r| (r.worker_id.clone(), r.lease)));
        // A lease a newer one replaced (a renew leaves its older ones to this).
        for r in &records {
            if newest.get(&r.worker_id).is_some_and(|n| n.at > r.lease.at) {
                let _ = self.engine.remove_volume(&r.name);
            }
        }
        Ok(workers
            .into_iter()
            .map(|w| match newest.get(&w.worker_id) {
                Some(l) => l.apply(w),
                None => w,
            })
            .collect())
    }

    /// The newest lease of `worker_id`, if it has one.
    fn newest_lease(&self, worker_id: &str) -> Result<Option<Lease>, BackendError> {
        Ok(self
            .leases(Some(worker_id))?
            .into_iter()
            .map(|r| r.lease)
            .max_by_key(|l| l.at))
    }

    /// One worker under its newest lease.
    pub(super) fn leased(&self, worker: Worker) -> Result<Worker, BackendError> {
        Ok(match self.newest_lease(&worker.worker_id)? {
            Some(l) => l.apply(worker),
            None => worker,
        })
    }

    /// `state`, as the engine shows worker `worker_id`, under its newest lease; the engine's
    /// state when the leases cannot be read.
    pub(super) fn state_under_lease(&self, worker_id: &str, state: WorkerState) -> WorkerState {
        match self.newest_lease(worker_id) {
            Ok(Some(l)) if l.suspends(state) => WorkerState::Suspended,
            _ => state,
        }
    }

    /// Writes `lease` for `worker_id` (its older leases stay until a list removes them).
    fn put_lease(&self, worker_id: &str, lease: Lease) -> Result<(), BackendError> {
        let mut labels: Map<String, Value> = Map::new();
        labels.insert(labels::OWNER.into(), json!(self.controller_id));
        for (k, v) in lease.labels(worker_id) {
            labels.insert(k.into(), json!(v));
        }
        let name = format!("a2a-lease-{worker_id}-{}", lease.at);
        self.engine
            .create_volume(&name, &Value::Object(labels))
            .map_err(engine_error)?;
        Ok(())
    }

    /// Writes the lease `make` gives for a time after every lease `worker_id` has (two changes
    /// in one millisecond stay ordered), then removes those older ones: one read of its
    /// leases.
    fn replace_lease(
        &self,
        worker_id: &str,
        make: impl FnOnce(u64) -> Lease,
    ) -> Result<Lease, BackendError> {
        let older = self.leases(Some(worker_id))?;
        let newest = older.iter().map(|r| r.lease.at).max().unwrap_or(0);
        let lease = make(now_millis().max(newest + 1));
        self.put_lease(worker_id, lease)?;
        for old in older {
            if let Err(e) = self.engine.remove_volume(&old.name) {
                log::debug!("an older lease {} stays for now: {e}", old.name);
            }
        }
        Ok(lease)
    }

    /// Removes every lease of `worker_id` (its container is gone).
    pub(super) fn remove_leases(&self, worker_id: &str) {
        match self.leases(Some(worker_id)) {
            Ok(records) => {
                for r in records {
                    let _ = self.engine.remove_volume(&r.name);
                }
            }
            Err(e) => log::debug!("the leases of worker {worker_id} stay for the sweep: {e}"),
        }
    }

    /// The worker `worker_id` as a list shows it now; `NotFound` when it is gone.
    fn current(&self, worker_id: &str) -> Result<Worker, BackendError> {
        self.leased(self.owned_container(worker_id)?.worker)
    }
}

impl Renewal for DockerBackend {
    /// One list by the worker's labels; its leases only when its container does not run (a
    /// running worker is never suspended, whatever its lease says).
    fn find(&self, worker_id: &str) -> Result<Worker, BackendError> {
        let found = self.owned_container(worker_id)?;
        if matches!(
            found.worker.state,
            WorkerState::Running | WorkerState::Starting
        ) {
            return Ok(found.worker);
        }
        self.leased(found.worker)
    }

    /// A new lease (its older ones are removed by the next list); then the task's container
    /// is looked at again, so a renew never answers for a worker stopped while it ran (its
    /// lease is removed then).
    fn renew(&self, worker: &Worker, expires_at: Option<u64>) -> Result<Worker, BackendError> {
        let id = worker.worker_id.as_str();
        self.put_lease(id, Lease::running(now_millis(), expires_at))?;
        let name = labels::container_name(&self.controller_id, &worker.scope, &worker.task);
        let there = match self.engine.inspect(&name).map_err(engine_error)? {
            Some(c) => {
                let state = c.state.as_ref().map_or("", |s| s.status.as_str());
                let removing = state == "removing";
                let theirs = c
                    .config
                    .and_then(|c| labels::owned(c.labels, &self.controller_id))
                    .map(|o| o.worker_id);
                // A claimed member carries its worker id on its binding, not itself.
                !removing && theirs.is_none_or(|w| w == id)
            }
            None => false,
        };
        if !there {
            self.remove_leases(id);
            return Err(BackendError::NotFound);
        }
        Ok(worker.clone().expiring(expires_at))
    }
}

impl Suspension for DockerBackend {
    /// A claimed pool member is refused: its worker's identity and token were given to its
    /// running process at activation (the controller keeps only the token's hash), and would
    /// not survive a stop.
    fn suspendable(&self, worker: &Worker, _template: Option<&Template>) -> Result<(), String> {
        match self.owned_container(&worker.worker_id) {
            Ok(found) if found.binding.is_some() => Err(
                "it was a warm pool member: its identity lives in its running process (given at activation), which a stop would lose".into(),
            ),
            _ => Ok(()),
        }
    }

    /// The lease first (a suspend cut short leaves a running worker with a suspended lease,
    /// which lists as running, and a second suspend finishes it), then the stop.
    fn suspend(&self, worker_id: &str, how: &Suspend) -> Result<Worker, BackendError> {
        let found = self.owned_container(worker_id)?;
        self.replace_lease(worker_id, |at| Lease::suspended(at, *how))?;
        self.engine
            .stop(&found.container, STOP_GRACE_SECS)
            .map_err(engine_error)?;
        self.records().remove(&found.container);
        self.current(worker_id)
    }

    /// The container started again, then waited for as a create waits; its new lease (the
    /// TTL it had left, from now) once it answers. A start the engine refuses (its host port
    /// taken meanwhile) leaves it suspended and says why.
    fn resume(
        &self,
        worker_id: &str,
        template: Option<&Template>,
        progress: &Progress,
    ) -> Result<Worker, BackendError> {
        let found = self.owned_container(worker_id)?;
        let (container, worker) = (found.container, found.worker);
        let left = self
            .newest_lease(worker_id)?
            .and_then(|l| l.suspended)
            .and_then(|s| s.ttl_left);
        self.engine.start(&container).map_err(|e| {
            BackendError::Internal(format!(
                "the engine did not start the suspended worker's container, which stays suspended: {}",
                engine_error(e)
            ))
        })?;
        self.records().remove(&container);
        progress.step("container started");
        if !self.probe.disabled() {
            progress.step("waiting for the worker's Agent Card");
            // As its template is now (its ready path, its network), else the defaults.
            let fallback;
            let t = match template {
                Some(t) => t,
                None => {
                    let port = port_of(&worker.a2a_url).unwrap_or(self.container.port);
                    fallback = Template::new(&worker.template, "", port);
                    &fallback
                }
            };
            self.wait_ready(&container, &worker.a2a_url, t)?;
            progress.step("the worker answers: ready");
        }
        let expires_at = left.map(|l| now_millis().div_ceil(1000) + l);
        self.replace_lease(worker_id, |at| Lease::running(at, expires_at))?;
        self.current(worker_id)
    }
}

/// The port of a worker's `a2a_url` (`http://host:port`).
fn port_of(url: &str) -> Option<u16> {
    url.rsplit(':').next()?.trim_end_matches('/').parse().ok()
}
