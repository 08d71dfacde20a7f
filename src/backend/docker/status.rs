//! The Docker backend's status: which container is which worker, in what state and why.
//! A list reads the labels (the worker's identity) and the list's own state; a container
//! that is not running (or shows no port) is inspected once for its reason and port, and that
//! record is kept while the list shows it the same way. A `die` the list does not show yet is
//! taken at its word (`ended.rs`).

use super::wire::{Inspect, State, Summary};
use super::{ended, engine_error, pool, workspace, DockerBackend};
use crate::backend::labels;
use crate::backend::{BackendError, BackendKind, Worker, WorkerState};

/// A container's inspected reason and port, and how the list showed it then.
#[derive(Debug, Clone)]
pub(super) struct Record {
    seen_as: String,
    reason: String,
    port: Option<(u16, Option<u16>)>,
}

/// How a list shows a container, as far as an inspect of it could differ: its state and, for
/// one that ended, its exit code (`exited|Exited (137)`; the rest of the engine's words is the
/// time since, which changes by itself). A container started again shows `running` in between,
/// so its next end is inspected anew, unless both its run and its end fell between two lists
/// and it ended with the same code again (then the reason kept may say OOM when it was not, or
/// the other way round; the state is always the list's own).
pub(super) fn seen_as(state: &str, status: &str) -> String {
    match state {
        "running" => state.to_string(),
        _ => {
            let head = match status.find(')') {
                Some(end) => &status[..=end],
                None => status,
            };
            format!("{state}|{head}")
        }
    }
}

/// A worker's container, as `stop` and `logs` find it.
pub(super) struct Found {
    pub container: String,
    pub worker: Worker,
    /// A pooled worker's binding volume.
    pub binding: Option<String>,
    /// Whether the container may mount its task's workspace (see `Summary::may_mount`).
    pub mounts_workspace: bool,
}

pub(super) fn state_of(engine_state: &str) -> WorkerState {
    match engine_state {
        "created" | "restarting" => WorkerState::Starting,
        "running" => WorkerState::Running,
        // Podman reports "stopped" for a container that exited and is not cleaned up yet.
        "exited" | "dead" | "stopped" => WorkerState::Exited,
        // Docker is removing it: gone soon, but it still holds its name (its task).
        "removing" => WorkerState::Stopping,
        _ => WorkerState::Unknown,
    }
}

/// Why a container is not running: OOM kill, exit code, engine error.
pub(super) fn exit_reason(state: &State) -> Option<String> {
    if state.running {
        return None;
    }
    let mut why = match (state.oom_killed, state.status.as_str()) {
        (true, _) | (false, "exited" | "dead" | "stopped") => {
            ended_reason(state.oom_killed, state.exit_code)
        }
        (false, "created") => return None,
        (false, other) => format!("is {other}"),
    };
    if !state.error.is_empty() {
        why.push_str(&format!(": {}", state.error));
    }
    Some(why)
}

/// Why a container ended: killed for memory, or its exit code.
pub(super) fn ended_reason(oom: bool, exit_code: i64) -> String {
    if oom {
        format!("was killed for running out of memory (exit code {exit_code})")
    } else {
        format!("exited with code {exit_code}")
    }
}

/// The worker's port and the host port it was published on, from a container's record: its
/// port binding (published), else its exposed port (on a network).
pub(super) fn recorded_port(i: &Inspect) -> Option<(u16, Option<u16>)> {
    let tcp_port = |key: &str| key.strip_suffix("/tcp")?.parse::<u16>().ok();
    let bound = i
        .host_config
        .as_ref()
        .and_then(|h| h.port_bindings.as_ref())
        .and_then(|b| {
            b.iter().find_map(|(key, bindings)| {
                let host = bindings.as_ref()?.first()?.host_port.parse().ok()?;
                Some((tcp_port(key)?, Some(host)))
            })
        });
    bound.or_else(|| {
        let exposed = i.config.as_ref()?.exposed_ports.as_ref()?;
        exposed.keys().find_map(|k| tcp_port(k)).map(|p| (p, None))
    })
}

impl DockerBackend {
    /// The container of a worker this controller owns; `NotFound` otherwise.
    pub(super) fn owned_container(&self, worker_id: &str) -> Result<Found, BackendError> {
        let listing = self
            .engine
            .list(&labels::worker_selector(&self.controller_id, worker_id))
            .map_err(engine_error)?;
        let containers = listing.containers().map_err(engine_error)?;
        let cold = containers.into_iter().find_map(|mut c| {
            let w = self
                .worker_of(&mut c)
                .ok()
                .flatten()
                .filter(|w| w.worker_id == worker_id)?;
            let workspace = workspace::name(&self.controller_id, &w.scope, &w.task);
            Some(Found {
                mounts_workspace: c.may_mount(&workspace),
                container: c.id.into_owned(),
                worker: w,
                binding: None,
            })
        });
        if let Some(found) = cold {
            return Ok(found);
        }
        match self.pooled_container(worker_id)? {
            Some((container, worker, binding)) => Ok(Found {
                container,
                worker,
                binding: Some(binding),
                mounts_workspace: true,
            }),
            None => Err(BackendError::NotFound),
        }
    }

    /// A listed container as a worker; `None` for containers this controller does not own.
    /// Its labels are taken out of the summary (they move into the worker).
    pub(super) fn worker_of(&self, c: &mut Summary) -> Result<Option<Worker>, BackendError> {
        match labels::owned(c.labels.take(), &self.controller_id) {
            Some(owned) => self.worker_from(c, owned).map(Some),
            None => Ok(None),
        }
    }

    /// The inspected reason and port of listed container `c`: kept from an earlier list that
    /// showed it the same way, else inspected now (and kept).
    pub(super) fn record(&self, c: &Summary) -> Result<Record, BackendError> {
        let seen = seen_as(&c.state, &c.status);
        if let Some(r) = self
            .records()
            .get(c.id.as_ref())
            .filter(|r| r.seen_as == seen)
        {
            return Ok(r.clone());
        }
        let record = match self.engine.inspect(&c.id).map_err(engine_error)? {
            Some(i) => Record {
                seen_as: seen,
                reason: i.state.as_ref().and_then(exit_reason).unwrap_or_default(),
                port: recorded_port(&i),
            },
            // Gone since the list: nothing to keep.
            None => {
                return Ok(Record {
                    seen_as: seen,
                    reason: String::new(),
                    port: None,
                })
            }
        };
        self.records().insert(c.id.to_string(), record.clone());
        Ok(record)
    }

    /// Listed container `c`, which died lately, as its `die` told: the list still says
    /// `running` for a moment after it. The end's reason is kept as `c`'s record for this one
    /// list (the caller forgets it after): the next list inspects the end as usual once the
    /// engine lists it.
    pub(super) fn as_died(&self, c: &mut Summary, died: &ended::Died) -> bool {
        if c.state != "running" {
            self.ended.settled(&c.id);
            return false;
        }
        let status = format!("Exited ({})", died.exit_code);
        let record = Record {
            seen_as: seen_as("exited", &status),
            reason: ended_reason(died.oom, died.exit_code),
            port: c
                .ports
                .iter()
                .flatten()
                .find(|p| p.kind == "tcp")
                .map(|p| (p.private_port, p.public_port)),
        };
        self.records().insert(c.id.to_string(), record);
        c.state = std::borrow::Cow::Borrowed("exited");
        c.status = std::borrow::Cow::Owned(status);
        c.ports = None;
        true
    }

    /// Listed container `c` as a worker (`None`: not one), taking the word of a `die` the
    /// engine does not list yet (`died`, from [`Ended::lately`](ended::Ended)).
    pub(super) fn listed_worker(
        &self,
        c: &mut Summary,
        died: &std::collections::HashMap<String, ended::Died>,
        bindings: &mut Option<Vec<pool::Binding>>,
    ) -> Result<Option<Worker>, BackendError> {
        let told = died.get(c.id.as_ref()).is_some_and(|d| self.as_died(c, d));
        let member = c
            .labels
            .as_ref()
            .and_then(|l| l.member(&self.controller_id));
        let worker = match member {
            Some(m) => self.pooled_worker(c, &m, bindings),
            None => self.worker_of(c),
        };
        if told {
            self.records().remove(c.id.as_ref());
        }
        worker
    }

    pub(super) fn records(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, Record>> {
        self.records.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Forgets the records of containers a whole list no longer shows.
    pub(super) fn keep_records_of(&self, listed: &std::collections::HashSet<String>) {
        self.records
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|id, _| listed.contains(id));
    }

    /// A listed container as the worker `owned` (its labels, or its binding's) says.
    pub(super) fn worker_from(
        &self,
        c: &Summary,
        owned: labels::Owned,
    ) -> Result<Worker, BackendError> {
        let name = c.name();
        let state = state_of(&c.state);
        // The worker's port as the engine lists it: published (a public port) or, on a
        // network, only exposed. Not running, the list shows none: the record says.
        let listed = c.ports.iter().flatten().find(|p| p.kind == "tcp");
        let mut reason = String::new();
        let mut port = listed.map(|p| (p.private_port, p.public_port));
        if state != WorkerState::Running || listed.is_none() {
            let record = self.record(c)?;
            reason = record.reason;
            port = port.or(record.port);
        }
        let (port, host_port) = port.unwrap_or((self.container.port, None));
        let created_at = labels::created_at(owned.claimed_ms, c.created.max(0) as u64 * 1000);
        let a2a_url = match c.ip_on(&self.docker.egress_network) {
            Some(ip) => super::fence::fenced_url(ip, port),
            None => self.url_for(name, port, host_port),
        };
        Ok(Worker {
            a2a_url,
            reason,
            ..Worker::new(
                BackendKind::Docker,
                owned.worker_id,
                owned.task,
                state,
                created_at,
            )
            .expiring(owned.expires_at)
            .tagged(owned.metadata)
            .scoped(owned.scope)
            .templated(owned.template)
            .hashed(owned.token_hash)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stopped(status: &str, code: i64, oom: bool) -> State {
        State {
            status: status.into(),
            running: false,
            exit_code: code,
            oom_killed: oom,
            error: String::new(),
        }
    }

    #[test]
    fn a_record_is_kept_while_the_list_shows_the_same_end() {
        let a = seen_as("exited", "Exited (137) 5 seconds ago");
        assert_eq!(a, "exited|Exited (137)");
        assert_eq!(a, seen_as("exited", "Exited (137) 2 hours ago"));
        assert_ne!(a, seen_as("exited", "Exited (0) 2 hours ago"));
        assert_eq!(
            seen_as("running", "Up 3 minutes"),
            seen_as("running", "Up 2 hours")
        );
        assert_ne!(seen_as("created", "Created"), seen_as("exited", "Created"));
    }

    #[test]
    fn engine_states_and_exit_reasons() {
        assert_eq!(state_of("running"), WorkerState::Running);
        assert_eq!(state_of("created"), WorkerState::Starting);
        // Docker's "exited", and Podman's "stopped" before its cleanup has run.
        for s in ["exited", "dead", "stopped"] {
            assert_eq!(state_of(s), WorkerState::Exited, "{s}");
            assert_eq!(
                exit_reason(&stopped(s, 3, false)).as_deref(),
                Some("exited with code 3")
            );
        }
        assert_eq!(state_of("paused"), WorkerState::Unknown);
        // Being removed: it still holds its name, and is on its way out.
        assert_eq!(state_of("removing"), WorkerState::Stopping);
        assert!(exit_reason(&stopped("exited", 137, true))
            .unwrap()
            .contains("out of memory"));
        assert_eq!(exit_reason(&stopped("created", 0, false)), None);
    }
}
