//! The Docker backend: one container per worker, owned by its three labels, named
//! deterministically from (controller id, task) so the engine itself refuses a second
//! container for a task. Nothing about workers is kept in memory.
//!
//! - `engine`: the Docker Engine API client (typed answers and errors);
//! - `unix_socket`: the ureq transport it runs over;
//! - `workspace`: task workspaces as named volumes;
//! - `pool`: warm pools (members, claims through a binding and a rename).

mod ended;
pub(crate) mod engine;
mod pool;
mod unix_socket;
mod watcher;
mod workspace;

use std::net::{IpAddr, SocketAddr, TcpListener};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use self::engine::{Engine, EngineError, Inspect, State, Summary};
use super::probe::Probe;
use super::{labels, worker_env};
use super::{
    Activation, Backend, BackendError, BackendKind, Change, ClaimError, CreateSpec, Finding, Logs,
    MemberSpec, PoolMember, TaskWorkspace, Template, Worker, WorkerState,
};
use crate::settings::{ContainerSettings, DockerSettings};
use crate::time::{now_millis, parse_rfc3339_millis, rfc3339_secs};

/// Host-port clashes ("port is already allocated") are retried this many times.
const PORT_ATTEMPTS: usize = 8;
/// Grace period a worker gets between SIGTERM and SIGKILL on stop.
const STOP_GRACE_SECS: u64 = 10;

pub struct DockerBackend {
    engine: Engine,
    controller_id: String,
    container: ContainerSettings,
    docker: DockerSettings,
    anthropic_auth_token: Option<String>,
    probe: Probe,
    /// The time of the last engine event followed (Unix seconds): a reconnect asks from it.
    events_since: std::sync::Mutex<Option<i64>>,
    /// What an inspect said of a listed container that is not running (or shows no port), by
    /// container id, kept while the list shows it the same way ([`seen_as`]): a list of many
    /// exited workers inspects each once, not every time.
    records: std::sync::Mutex<std::collections::HashMap<String, Record>>,
    /// Containers whose `die` came lately: a list inspects them rather than trust its state.
    ended: ended::Ended,
}

/// A container's inspected reason and port, and how the list showed it then.
#[derive(Debug, Clone)]
struct Record {
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
fn seen_as(state: &str, status: &str) -> String {
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

/// How long one `/events` call runs before it is made again (a quiet stream has no
/// heartbeat; the watch source re-checks that someone still watches).
const EVENTS_CALL: Duration = Duration::from_secs(30);

impl DockerBackend {
    pub fn new(
        controller_id: &str,
        container: ContainerSettings,
        docker: DockerSettings,
        ready_timeout: Duration,
        anthropic_auth_token: Option<String>,
    ) -> DockerBackend {
        DockerBackend {
            engine: Engine::new(docker.socket.clone()),
            controller_id: controller_id.to_string(),
            container,
            docker,
            anthropic_auth_token,
            probe: Probe::new(ready_timeout),
            events_since: std::sync::Mutex::new(None),
            records: std::sync::Mutex::new(std::collections::HashMap::new()),
            ended: ended::Ended::default(),
        }
    }

    /// Where callers reach a worker: its name on its network (`host_port` `None`), or the port
    /// published for it on `WORKER_PUBLISH_HOST`.
    fn url_for(&self, name: &str, port: u16, host_port: Option<u16>) -> String {
        use std::fmt::Write;
        // One allocation: this runs for every worker of every list.
        let mut url = String::with_capacity(name.len() + 56);
        let _ = match host_port {
            None => write!(url, "http://{name}:{port}"),
            Some(hp) => write!(
                url,
                "http://{}",
                SocketAddr::new(self.docker.publish_host, hp)
            ),
        };
        url
    }

    /// The host port a container of `t` is published on now: none on a network, else one the
    /// OS considers free on `WORKER_PUBLISH_HOST`.
    fn host_port(&self, t: &Template) -> Result<Option<u16>, BackendError> {
        if t.network.is_some() {
            return Ok(None);
        }
        free_port(self.docker.publish_host).map(Some).map_err(|e| {
            BackendError::Internal(format!(
                "no free port on {} to publish a worker: {e}",
                self.docker.publish_host
            ))
        })
    }

    /// What every container of template `t` is made with: its port, its host settings
    /// (network or published port, limits) and, for a worker with a workspace, its mount.
    fn host_config(
        &self,
        t: &Template,
        host_port: Option<u16>,
        workspace: Option<String>,
    ) -> Value {
        let port_key = format!("{}/tcp", t.port);
        let mut host_config = json!({
            "RestartPolicy": {"Name": "no"},
            "Init": true,
            "SecurityOpt": ["no-new-privileges"],
            "ExtraHosts": ["host.docker.internal:host-gateway"],
        });
        match (&t.network, host_port) {
            (Some(network), _) => host_config["NetworkMode"] = json!(network),
            (None, Some(hp)) => {
                host_config["PortBindings"] = json!({ port_key.clone(): [{
                    "HostIp": self.docker.publish_host.to_string(),
                    "HostPort": hp.to_string(),
                }]})
            }
            (None, None) => {}
        }
        if let Some(m) = t.memory_bytes {
            host_config["Memory"] = json!(m);
        }
        if let Some(c) = t.nano_cpus {
            host_config["NanoCpus"] = json!(c);
        }
        if let Some(p) = t.pids_limit {
            host_config["PidsLimit"] = json!(p);
        }
        if let (Some(w), Some(source)) = (&t.workspace, workspace) {
            host_config["Mounts"] = json!([{
                "Type": "volume",
                "Source": source,
                "Target": w.path,
            }]);
        }
        json!({
            "ExposedPorts": { port_key: {} },
            "HostConfig": host_config,
        })
    }

    /// The labels of `spec`'s worker: its container's, or a pooled worker's binding's.
    fn worker_labels(&self, spec: &CreateSpec) -> std::collections::BTreeMap<String, String> {
        labels::for_worker(
            &self.controller_id,
            &spec.worker_id,
            &spec.task,
            &spec.scope,
            &spec.template.name,
            spec.expires_at,
            &spec.metadata,
        )
    }

    fn container_config(
        &self,
        spec: &CreateSpec,
        url: &str,
        host_port: Option<u16>,
    ) -> Result<Value, BackendError> {
        let t = &spec.template;
        let source = workspace::name(&self.controller_id, &spec.scope, &spec.task);
        let mut config = self.host_config(t, host_port, Some(source));
        let env = worker_env::environment(
            spec,
            url,
            &self.container,
            self.anthropic_auth_token.as_deref(),
        )?;
        config["Image"] = json!(t.image);
        config["Env"] = json!(worker_env::as_docker_env(&env));
        config["Labels"] = json!(self.worker_labels(spec));
        Ok(config)
    }

    /// Removes a container on a failure path; a failure to remove is logged (the container
    /// keeps its labels, so it stays listed and stoppable).
    fn remove_quietly(&self, id: &str) {
        if let Err(e) = self.engine.remove(id) {
            log::warn!("could not remove half-created container {}: {e}", short(id));
        }
    }

    /// The answer to a name conflict: the task's existing worker, if this controller owns it.
    /// dockerd reserves a name before the container it names can be inspected, so a racing
    /// create may briefly see the conflict without the container: look again for a moment.
    fn existing(&self, name: &str) -> BackendError {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            match self.engine.inspect(name) {
                Ok(Some(found)) => {
                    let state = state_of(found.state.as_ref().map_or("", |s| s.status.as_str()));
                    let labels = found.config.and_then(|c| c.labels);
                    // A member claimed for the task: its binding names the worker (made before
                    // the rename, so a moment's look again finds it).
                    let pooled = labels.as_ref().and_then(|l| {
                        l.member(&self.controller_id)?;
                        Some(self.pooled_worker_id(l, name))
                    });
                    return match (pooled, labels::owned(labels, &self.controller_id)) {
                        (Some(None), _) if Instant::now() < deadline => {
                            thread::sleep(Duration::from_millis(50));
                            continue;
                        }
                        (Some(Some(worker_id)), _) => BackendError::WorkerExists { worker_id, state },
                        (None, Some(owned)) => BackendError::WorkerExists {
                            worker_id: owned.worker_id,
                            state,
                        },
                        _ => BackendError::Internal(format!(
                            "the container name {name} is taken by a container this controller does not own"
                        )),
                    };
                }
                Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(50)),
                Ok(None) => {
                    return BackendError::Internal(format!(
                        "container {name} was being created or removed by someone else while this create ran; try again"
                    ))
                }
                Err(e) => return engine_error(e),
            }
        }
    }

    /// Waits until the worker answers its Agent Card, or fails with why it did not.
    /// In network mode the worker is probed at its address on that network (the controller
    /// must share it): its `a2a_url` names the container, which needs the engine's DNS.
    fn wait_ready(&self, id: &str, url: &str, t: &Template) -> Result<(), BackendError> {
        self.probe.wait(url, &t.ready_path, || {
            let Some(inspect) = self.engine.inspect(id).map_err(engine_error)? else {
                return Err(BackendError::NotReady(
                    "the container disappeared while starting".into(),
                ));
            };
            let base = match &t.network {
                Some(network) => inspect
                    .ip_on(network)
                    .map(|ip| format!("http://{}", SocketAddr::new(ip, t.port))),
                None => Some(url.to_string()),
            };
            let state = inspect.state.unwrap_or_default();
            if !state.running {
                return Err(BackendError::NotReady(format!(
                    "the worker {} before it answered",
                    exit_reason(&state).unwrap_or_else(|| format!("is {}", state.status))
                )));
            }
            Ok(base)
        })
    }

    /// The container of a worker this controller owns; `NotFound` otherwise.
    fn owned_container(&self, worker_id: &str) -> Result<Found, BackendError> {
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
    fn worker_of(&self, c: &mut Summary) -> Result<Option<Worker>, BackendError> {
        match labels::owned(c.labels.take(), &self.controller_id) {
            Some(owned) => self.worker_from(c, owned).map(Some),
            None => Ok(None),
        }
    }

    /// The inspected reason and port of listed container `c`: kept from an earlier list that
    /// showed it the same way, else inspected now (and kept).
    fn record(&self, c: &Summary) -> Result<Record, BackendError> {
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
    fn as_died(&self, c: &mut Summary, died: &ended::Died) -> bool {
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
    fn listed_worker(
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

    fn records(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, Record>> {
        self.records.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Forgets the records of containers a whole list no longer shows.
    fn keep_records_of(&self, listed: &std::collections::HashSet<String>) {
        self.records
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|id, _| listed.contains(id));
    }

    /// A listed container as the worker `owned` (its labels, or its binding's) says.
    fn worker_from(&self, c: &Summary, owned: labels::Owned) -> Result<Worker, BackendError> {
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
        let created_at = rfc3339_secs(c.created.max(0) as u64);
        Ok(Worker {
            a2a_url: self.url_for(name, port, host_port),
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
        })
    }
}

/// A worker's container, as `stop` and `logs` find it.
struct Found {
    container: String,
    worker: Worker,
    /// A pooled worker's binding volume.
    binding: Option<String>,
    /// Whether the container may mount its task's workspace (see `Summary::may_mount`).
    mounts_workspace: bool,
}

impl DockerBackend {
    /// The container of a create: made, started, and waited for until it answers.
    fn create_container(&self, spec: &CreateSpec) -> Result<Worker, BackendError> {
        let name = labels::container_name(&self.controller_id, &spec.scope, &spec.task);
        let redact = |e: BackendError| e.redact(&spec.token);
        let t = &spec.template;
        for attempt in 1..=PORT_ATTEMPTS {
            let host_port = self.host_port(t)?;
            let url = self.url_for(&name, t.port, host_port);
            let config = self.container_config(spec, &url, host_port)?;
            let id = match self.engine.create(&name, &config) {
                Ok(id) => id,
                Err(e) if e.status() == Some(404) => {
                    return Err(BackendError::ImageNotFound(t.image.clone()))
                }
                Err(e) if is_name_conflict(&e) => return Err(self.existing(&name)),
                Err(e) => return Err(redact(engine_error(e))),
            };
            spec.progress.step("container created");
            if let Err(e) = self.engine.start(&id) {
                self.remove_quietly(&id);
                if let Some(hp) =
                    host_port.filter(|hp| is_port_clash(&e, self.docker.publish_host, *hp))
                {
                    log::info!("host port {hp} was taken before the worker started (attempt {attempt}); retrying with another");
                    continue;
                }
                return Err(redact(engine_error(e)));
            }
            spec.progress.step("container started");
            let state = if self.probe.disabled() {
                WorkerState::Starting
            } else {
                spec.progress.step("waiting for the worker's Agent Card");
                if let Err(e) = self.wait_ready(&id, &url, t) {
                    self.remove_quietly(&id);
                    return Err(redact(e));
                }
                spec.progress.step("the worker answers: ready");
                WorkerState::Running
            };
            // The engine's creation time, as list will report it.
            let created = match self.engine.inspect(&id) {
                Ok(Some(i)) => parse_rfc3339_millis(&i.created),
                _ => None,
            }
            .unwrap_or_else(now_millis);
            let created_at = rfc3339_secs(created / 1000);
            return Ok(Worker {
                a2a_url: url,
                ..Worker::new(
                    BackendKind::Docker,
                    &spec.worker_id,
                    &spec.task,
                    state,
                    created_at,
                )
                .expiring(spec.expires_at)
                .tagged(spec.metadata.clone())
                .scoped(spec.scope.clone())
                .templated(t.name.clone())
            });
        }
        Err(BackendError::Internal(format!(
            "every host port tried on {} was taken before the worker could start ({PORT_ATTEMPTS} attempts)",
            self.docker.publish_host
        )))
    }
}

impl Backend for DockerBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Docker
    }

    /// The task's workspace first (a new one is removed again if the create fails), then the
    /// container.
    fn create(&self, spec: &CreateSpec) -> Result<Worker, BackendError> {
        let fresh = self.ensure_workspace(spec)?;
        if spec.template.workspace.is_some() {
            spec.progress.step(if fresh {
                "the task's workspace was made"
            } else {
                "the task's workspace is there"
            });
        }
        match self.create_container(spec) {
            Err(e) if fresh => {
                let note = self.remove_fresh_workspace(spec);
                Err(match e {
                    e @ BackendError::WorkerExists { .. } => e,
                    e => e.with_note(&note),
                })
            }
            other => other,
        }
    }

    fn list(&self) -> Result<Vec<Worker>, BackendError> {
        let listing = self
            .engine
            .list(&labels::owner_selector(&self.controller_id))
            .map_err(engine_error)?;
        let mut containers = listing.containers().map_err(engine_error)?;
        let listed: std::collections::HashSet<String> =
            containers.iter().map(|c| c.id.to_string()).collect();
        let mut workers = Vec::with_capacity(containers.len());
        let mut bindings = None;
        let died = self.ended.lately();
        for c in &mut containers {
            if let Some(w) = self.listed_worker(c, &died, &mut bindings)? {
                let c: &Summary = c;
                workers.push((c.created, c.name(), w));
            }
        }
        self.keep_records_of(&listed);
        self.ended.keep_only(&listed);
        workers.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        Ok(workers.into_iter().map(|(_, _, w)| w).collect())
    }

    /// A cold worker is one filtered list (and its record); a pooled one is found through its
    /// binding, as `stop` finds it.
    fn worker(&self, worker_id: &str) -> Result<Option<Worker>, BackendError> {
        let listing = self
            .engine
            .list(&labels::worker_selector(&self.controller_id, worker_id))
            .map_err(engine_error)?;
        let mut containers = listing.containers().map_err(engine_error)?;
        let died = self.ended.lately();
        for c in &mut containers {
            if let Some(w) = self.listed_worker(c, &died, &mut None)? {
                if w.worker_id == worker_id {
                    return Ok(Some(w));
                }
            }
        }
        Ok(self.pooled_container(worker_id)?.map(|(_, w, _)| w))
    }

    fn stop(&self, worker_id: &str) -> Result<Worker, BackendError> {
        let Found {
            container,
            worker,
            binding,
            mounts_workspace,
        } = self.owned_container(worker_id)?;
        // Its workspace's last use, while the worker still holds it (see `workspace`); a
        // container the engine lists without that volume has none to stamp.
        if mounts_workspace {
            if let Err(e) = self.workspace_released(&worker.scope, &worker.task) {
                log::debug!(
                    "the workspace of worker {worker_id} was not stamped before its stop: {e}"
                );
            }
        }
        self.engine
            .stop(&container, STOP_GRACE_SECS)
            .map_err(engine_error)?;
        self.engine.remove(&container).map_err(engine_error)?;
        if let Some(volume) = binding {
            if let Err(e) = self.engine.remove_volume(&volume) {
                log::warn!(
                    "the binding {volume} of a stopped worker was left (the pool sweeps it): {e}"
                );
            }
        }
        Ok(worker)
    }

    fn logs(&self, worker_id: &str, lines: u32) -> Result<Logs, BackendError> {
        let found = self.owned_container(worker_id)?;
        self.engine
            .logs(&found.container, lines)
            .map_err(engine_error)
    }

    fn has_change_stream(&self) -> bool {
        true
    }

    /// Docker's `/events` for containers with this controller's owner label (create, start,
    /// die, oom, destroy, ...); a reconnect asks from the last event's time.
    fn follow_changes(&self, changed: &mut dyn FnMut(Change) -> bool) -> Result<(), BackendError> {
        let since = *self.events_since.lock().unwrap_or_else(|p| p.into_inner());
        let selectors = labels::owner_selector(&self.controller_id);
        self.engine
            .events(&selectors, since, EVENTS_CALL, &mut |event| {
                self.ended.saw(event);
                if let Some(t) = event["time"].as_i64() {
                    *self.events_since.lock().unwrap_or_else(|p| p.into_inner()) = Some(t);
                }
                watcher::change_of(event).is_none_or(&mut *changed)
            })
            .map_err(engine_error)
    }

    fn health(&self) -> Result<(), BackendError> {
        self.engine.ping().map_err(engine_error)
    }

    fn accepts(&self, template: &Template) -> Result<(), String> {
        if template.image.is_empty() {
            return Err("image: a docker template needs an image (or WORKER_IMAGE)".into());
        }
        Ok(())
    }

    fn workspaces(&self) -> Result<Vec<TaskWorkspace>, BackendError> {
        self.workspace_volumes()
    }

    /// An image present that does not say it speaks the activation contract stops startup
    /// for a pooled template (one not there yet is `check`'s to say).
    fn validate(&self, t: &Template) -> Result<(), String> {
        match self.pool_image_refusal(t) {
            Ok(Some(why)) => Err(why),
            _ => Ok(()),
        }
    }

    fn pools(&self) -> bool {
        true
    }

    fn pool_members(&self) -> Result<Vec<PoolMember>, BackendError> {
        self.pool_member_list()
    }

    fn start_member(&self, member: &MemberSpec) -> Result<(), BackendError> {
        self.start_pool_member(member)
    }

    fn claim_member(
        &self,
        member: &PoolMember,
        spec: &CreateSpec,
        activation: &Activation,
    ) -> Result<Worker, ClaimError> {
        self.claim_pool_member(member, spec, activation)
    }

    fn remove_member(&self, member: &PoolMember) -> Result<(), BackendError> {
        self.remove_pool_member(member)
    }

    fn sweep_pool(&self) -> Result<usize, BackendError> {
        self.sweep_bindings()
    }

    fn delete_workspace(&self, scope: &str, task: &str) -> Result<TaskWorkspace, BackendError> {
        // By what its labels say, as `workspaces` lists it.
        let found = self
            .workspace_volumes()?
            .into_iter()
            .find(|w| w.scope == scope && w.task == task)
            .ok_or(BackendError::NotFound)?;
        let name = found.name.clone();
        match self.engine.remove_volume(&name) {
            Ok(_) => {}
            Err(e) if e.status() == Some(409) => {
                return Err(BackendError::Internal(format!(
                    "the workspace volume {name} is in use by a container (a worker of the task being created?): {}",
                    engine_error(e)
                )))
            }
            Err(e) => return Err(engine_error(e)),
        }
        if let Err(e) = self.remove_stamps(&name, u64::MAX) {
            log::warn!("a last-use stamp of workspace {name} was left: {e}");
        }
        Ok(found)
    }

    fn workspace_released(&self, scope: &str, task: &str) -> Result<(), BackendError> {
        let name = workspace::name(&self.controller_id, scope, task);
        // One look at that volume, not a list of all of them.
        if self.engine.volume(&name).map_err(engine_error)?.is_some() {
            self.stamp(&name, scope, task)?;
        }
        Ok(())
    }

    /// The image is on the engine (creates never pull: a missing image fails every create).
    fn check_template(&self, t: &Template) -> Finding {
        if let Err(why) = self.accepts(t) {
            return Finding::failed(why);
        }
        let limits = limits_text(t);
        match self.pool_image_refusal(t) {
            Ok(Some(why)) => return Finding::failed(why),
            Err(e) => {
                return Finding::failed(format!("image {} could not be looked up: {e}", t.image))
            }
            Ok(None) => {}
        }
        let pool = match t.pool {
            0 => String::new(),
            n => format!(", speaks the activation contract, pool of {n}"),
        };
        match self.engine.image_present(&t.image) {
            Ok(true) => Finding::ok(format!("image {} is present{limits}{pool}", t.image)),
            Ok(false) => Finding::failed(format!(
                "image {} is not on the engine: creates do not pull; `docker pull {}` (or build it) first",
                t.image, t.image
            )),
            Err(e) => Finding::failed(format!(
                "image {} could not be looked up: {}",
                t.image,
                engine_error(e)
            )),
        }
    }
}

/// `, memory 512 MiB, 1.5 CPUs, 64 pids` (what is set), for `check`.
fn limits_text(t: &Template) -> String {
    let mut parts = Vec::new();
    if let Some(m) = t.memory_bytes {
        parts.push(format!("memory {} MiB", m >> 20));
    }
    if let Some(c) = t.nano_cpus {
        parts.push(format!("{} CPUs", c as f64 / 1e9));
    }
    if let Some(p) = t.pids_limit {
        parts.push(format!("{p} pids"));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!(" ({})", parts.join(", "))
    }
}

fn engine_error(e: EngineError) -> BackendError {
    match e {
        EngineError::Unreachable(why) => BackendError::Unavailable(why),
        EngineError::Status { status, message } if status >= 500 => {
            BackendError::Internal(format!("docker engine error {status}: {message}"))
        }
        EngineError::Status { status, message } => {
            BackendError::Internal(format!("docker engine refused ({status}): {message}"))
        }
        EngineError::Protocol(why) => BackendError::Unavailable(why),
    }
}

/// 409 is Docker's name conflict; Podman answers 500 with "already in use" to a create, and
/// with `name "X" is in use: container already exists` to a rename.
fn is_name_conflict(e: &EngineError) -> bool {
    match e {
        EngineError::Status { status: 409, .. } => true,
        EngineError::Status {
            status: 500,
            message,
        } => message.contains("already in use") || message.contains("container already exists"),
        _ => false,
    }
}

/// A start failure caused by the host port being taken. The status code alone (500) does not
/// say so; the port being unbindable now, or the engine's well-known text, does.
fn is_port_clash(e: &EngineError, host: IpAddr, port: u16) -> bool {
    match e {
        EngineError::Status { status, message } if *status >= 500 => {
            TcpListener::bind(SocketAddr::new(host, port)).is_err()
                || message.contains("port is already allocated")
                || message.contains("address already in use")
        }
        _ => false,
    }
}

/// A port the OS considers free on `host` right now.
fn free_port(host: IpAddr) -> std::io::Result<u16> {
    Ok(TcpListener::bind(SocketAddr::new(host, 0))?
        .local_addr()?
        .port())
}

fn state_of(engine_state: &str) -> WorkerState {
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
fn exit_reason(state: &State) -> Option<String> {
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
fn ended_reason(oom: bool, exit_code: i64) -> String {
    if oom {
        format!("was killed for running out of memory (exit code {exit_code})")
    } else {
        format!("exited with code {exit_code}")
    }
}

/// The worker's port and the host port it was published on, from a container's record: its
/// port binding (published), else its exposed port (on a network).
fn recorded_port(i: &Inspect) -> Option<(u16, Option<u16>)> {
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

fn short(id: &str) -> &str {
    id.get(..12).unwrap_or(id)
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
