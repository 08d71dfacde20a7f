//! Creating a worker's container: its configuration (labels, limits, environment, the
//! host port or network), the create and start (a name conflict is the task's worker already;
//! a host port taken in between is tried again), and the wait until it answers its card.

use super::status::{exit_reason, state_of};
use super::wire::EngineError;
use super::{engine_error, fence, is_name_conflict, short, workspace, DockerBackend};
use crate::backend::{labels, worker_env};
use crate::backend::{BackendError, BackendKind, CreateSpec, Template, Worker, WorkerState};
use crate::time::{now_millis, parse_rfc3339_millis, rfc3339_secs};
use serde_json::{json, Value};
use std::net::{IpAddr, SocketAddr, TcpListener};
use std::thread;
use std::time::{Duration, Instant};

/// Host-port clashes ("port is already allocated") are retried this many times.
pub(super) const PORT_ATTEMPTS: usize = 8;

/// A start failure caused by the host port being taken. The status code alone (500) does not
/// say so; the port being unbindable now, or the engine's well-known text, does.
pub(super) fn is_port_clash(e: &EngineError, host: IpAddr, port: u16) -> bool {
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
pub(super) fn free_port(host: IpAddr) -> std::io::Result<u16> {
    Ok(TcpListener::bind(SocketAddr::new(host, 0))?
        .local_addr()?
        .port())
}

impl DockerBackend {
    /// Where callers reach a worker: its name on its network (`host_port` `None`), or the port
    /// published for it on `WORKER_PUBLISH_HOST`.
    pub(super) fn url_for(&self, name: &str, port: u16, host_port: Option<u16>) -> String {
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
    pub(super) fn host_port(&self, t: &Template) -> Result<Option<u16>, BackendError> {
        if t.network.is_some() || t.egress.fenced() {
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
    pub(super) fn host_config(
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
        if let Some(r) = &t.runtime {
            host_config["Runtime"] = json!(r);
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
    pub(super) fn worker_labels(
        &self,
        spec: &CreateSpec,
    ) -> std::collections::BTreeMap<String, String> {
        let own = labels::identity(
            &spec.worker_id,
            spec.task.clone(),
            &spec.scope,
            &spec.template.name,
            spec.expires_at,
            &spec.token.hash(),
        );
        labels::for_worker(&self.controller_id, own, &spec.metadata)
    }

    pub(super) fn container_config(
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
    pub(super) fn remove_quietly(&self, id: &str) {
        if let Err(e) = self.engine.remove(id) {
            log::warn!("could not remove half-created container {}: {e}", short(id));
        }
    }

    /// The answer to a name conflict: the task's existing worker, if this controller owns it.
    /// dockerd reserves a name before the container it names can be inspected, so a racing
    /// create may briefly see the conflict without the container: look again for a moment.
    pub(super) fn existing(&self, name: &str) -> BackendError {
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
                        (Some(Some(worker_id)), _) => BackendError::WorkerExists {
                            state: self.state_under_lease(&worker_id, state),
                            worker_id,
                        },
                        (None, Some(owned)) => BackendError::WorkerExists {
                            state: self.state_under_lease(&owned.worker_id, state),
                            worker_id: owned.worker_id,
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
    pub(super) fn wait_ready(&self, id: &str, url: &str, t: &Template) -> Result<(), BackendError> {
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

    /// The egress network a fenced template's containers join (`None`: not fenced).
    fn fence_of(&self, t: &Template) -> Result<Option<fence::EgressNet>, BackendError> {
        if !t.egress.fenced() {
            return Ok(None);
        }
        let net = self.egress_net().map_err(engine_error)?;
        net.map(Some).ok_or_else(|| {
            BackendError::Internal(format!(
                "the egress network {} does not exist",
                self.docker.egress_network
            ))
        })
    }

    /// Where one attempt's container is reached: its host port (published), or its fixed
    /// address on the egress network (fenced), and the URL that makes.
    fn reached_at(
        &self,
        name: &str,
        t: &Template,
        egress_net: Option<fence::EgressNet>,
    ) -> Result<(Option<u16>, Option<std::net::Ipv4Addr>, String), BackendError> {
        let host_port = self.host_port(t)?;
        let address = egress_net.map(|n| n.random_address()).transpose()?;
        let url = match address {
            Some(a) => fence::fenced_url(a.into(), t.port),
            None => self.url_for(name, t.port, host_port),
        };
        Ok((host_port, address, url))
    }

    /// The container of a create: made, started, and waited for until it answers.
    pub(super) fn create_container(&self, spec: &CreateSpec) -> Result<Worker, BackendError> {
        let name = labels::container_name(&self.controller_id, &spec.scope, &spec.task);
        let redact = |e: BackendError| e.redact(&spec.token);
        let t = &spec.template;
        let egress_net = self.fence_of(t)?;
        for attempt in 1..=PORT_ATTEMPTS {
            let (host_port, address, url) = self.reached_at(&name, t, egress_net)?;
            let mut config = self.container_config(spec, &url, host_port)?;
            if let Some(a) = address {
                self.fence_config(&mut config, a);
            }
            let id = match self.engine.create(&name, &config) {
                Ok(id) => id,
                Err(e) if e.status() == Some(404) => {
                    return Err(BackendError::ImageNotFound(t.image.clone()))
                }
                Err(e) if is_name_conflict(&e) => return Err(self.existing(&name)),
                Err(e) if fence::is_unfixable(&e) => {
                    return Err(BackendError::Internal(format!(
                        "the egress network {} was made without a subnet of its own, so a fenced worker cannot be given its address: make it with `docker network create --internal --subnet 10.231.0.0/24 {}`",
                        self.docker.egress_network, self.docker.egress_network
                    )))
                }
                Err(e) => return Err(redact(engine_error(e))),
            };
            spec.progress.step("container created");
            if let Err(e) = self.engine.start(&id) {
                self.remove_quietly(&id);
                if address.is_some() && fence::is_address_clash(&e) {
                    log::info!("the worker's address on the egress network was taken before it started (attempt {attempt}); retrying with another");
                    continue;
                }
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
                .hashed(spec.token.hash())
            });
        }
        Err(BackendError::Internal(format!(
            "every host port tried on {} was taken before the worker could start ({PORT_ATTEMPTS} attempts)",
            self.docker.publish_host
        )))
    }
}
