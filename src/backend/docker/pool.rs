//! Warm pools on Docker. A member is a container named after its slot
//! ([`labels::member_name`]), labelled as a member (owner, template, revision, key id,
//! nonce) and started with [`worker_env::member_environment`]: no task, worker id or token.
//!
//! A container's labels cannot change, so a claim writes the worker's identity beside it:
//! - first the **activation** ([`members::activate`]): a member takes one, so of claims
//!   racing for it (from any replica) one is answered 200 and the others 409 (they lost, and
//!   try another member). Docker's rename is no such test: a rename by name looks the
//!   container up before it locks it, so two renames of one name can both succeed. A member
//!   that does not answer in time, or refuses, is removed;
//! - a **binding**, a volume named `<member>-binding-<worker id>` whose labels are the ones a
//!   cold worker's container has (owner, worker id, task, scope, template, expiry, metadata)
//!   and [`labels::BINDING`]` = <member>/<nonce>`;
//! - then the **commit**, a rename (by id) to the task's container name
//!   ([`labels::container_name`]): the engine refuses it (409) when a cold container or another
//!   claim holds the name, so one task has one worker across replicas as before (the member,
//!   bound for nothing, is then removed with its binding). A look at that name first spares a
//!   member when the task plainly has its worker.
//!
//! A container with member labels whose name is not its member name is a worker when a
//! binding of its member and nonce names its task and scope; otherwise it is a claim that did
//! not finish (listed as `claiming` and removed by the pool after a deadline). A binding whose
//! member is gone is swept.

use serde_json::{json, Value};

use super::wire::Summary;
use super::{engine_error, is_name_conflict, DockerBackend};
use crate::backend::labels::{self, MemberLabels, Ours, Owned};
use crate::backend::members::{self, IMAGE_LABEL};
use crate::backend::{
    worker_env, Activation, BackendError, ClaimError, CreateSpec, MemberSpec, MemberState,
    PoolMember, Pools, Template, Worker, WorkerState,
};
use crate::settings::ContainerSettings;

/// A claimed member's binding: which member (and nonce) it binds, and the worker it makes.
pub(super) struct Binding {
    pub volume: String,
    /// `<member>/<nonce>`.
    pub key: String,
    pub owned: Owned,
}

/// What a binding's `binding` label says of a member.
fn key_of(member: &str, nonce: &str) -> String {
    format!("{member}/{nonce}")
}

impl DockerBackend {
    /// This controller's bindings, read from their volumes (`selectors` narrow them).
    pub(super) fn bindings(&self, selectors: &[String]) -> Result<Vec<Binding>, BackendError> {
        let volumes = self.engine.volumes(selectors).map_err(engine_error)?;
        Ok(volumes
            .into_iter()
            .filter_map(|v| {
                let map = serde_json::to_value(v.labels.unwrap_or_default()).ok()?;
                let ours: Ours = serde_json::from_value(map).ok()?;
                let key = ours.binding(&self.controller_id)?.to_string();
                let owned = labels::owned(Some(ours), &self.controller_id)?;
                Some(Binding {
                    volume: v.name,
                    key,
                    owned,
                })
            })
            .collect())
    }

    /// Selectors of this controller's bindings: all of them (`key` `None`), or those of one
    /// member (`<member>/<nonce>`).
    fn binding_selector(&self, key: Option<&str>) -> Vec<String> {
        vec![
            format!("{}={}", labels::OWNER, self.controller_id),
            match key {
                Some(key) => format!("{}={key}", labels::BINDING),
                None => labels::BINDING.to_string(),
            },
        ]
    }

    /// The binding that makes container `name` (a member `m` renamed) a worker, if one does.
    pub(super) fn binding_for<'b>(
        &self,
        m: &MemberLabels,
        name: &str,
        bindings: &'b [Binding],
    ) -> Option<&'b Binding> {
        let key = key_of(&m.member, &m.nonce);
        bindings.iter().find(|b| {
            b.key == key
                && labels::container_name(&self.controller_id, &b.owned.scope, &b.owned.task)
                    == name
        })
    }

    /// A listed container that carries member labels: the worker its binding makes, or
    /// `None` (an unclaimed member, or a claim that did not finish). `bindings` are read
    /// once, and only when a renamed member is met.
    pub(super) fn pooled_worker(
        &self,
        c: &mut Summary,
        m: &MemberLabels,
        bindings: &mut Option<Vec<Binding>>,
    ) -> Result<Option<Worker>, BackendError> {
        if c.name() == m.member {
            return Ok(None);
        }
        if bindings.is_none() {
            *bindings = Some(self.bindings(&self.binding_selector(None))?);
        }
        let found = bindings
            .as_deref()
            .and_then(|bs| self.binding_for(m, c.name(), bs))
            .map(|b| b.owned.clone());
        match found {
            Some(owned) => self.worker_from(c, owned).map(Some),
            None => Ok(None),
        }
    }

    /// The pooled worker `worker_id` (found through its binding): its container's id, the
    /// worker, and its binding's volume.
    pub(super) fn pooled_container(
        &self,
        worker_id: &str,
    ) -> Result<Option<(String, Worker, String)>, BackendError> {
        let mut selectors = labels::worker_selector(&self.controller_id, worker_id);
        selectors.push(labels::BINDING.to_string());
        // Looked at again: Podman answers what matches any one of several label filters.
        for b in self
            .bindings(&selectors)?
            .into_iter()
            .filter(|b| b.owned.worker_id == worker_id)
        {
            let Some((member, nonce)) = b.key.split_once('/') else {
                continue;
            };
            let listing = self
                .engine
                .list(&[
                    format!("{}={}", labels::OWNER, self.controller_id),
                    format!("{}={member}", labels::MEMBER),
                    format!("{}={nonce}", labels::NONCE),
                ])
                .map_err(engine_error)?;
            let mut containers = listing.containers().map_err(engine_error)?;
            let name = labels::container_name(&self.controller_id, &b.owned.scope, &b.owned.task);
            if let Some(c) = containers.iter_mut().find(|c| c.name() == name) {
                let id = c.id.to_string();
                let worker = self.worker_from(c, b.owned.clone())?;
                return Ok(Some((id, worker, b.volume)));
            }
        }
        Ok(None)
    }

    /// The worker id of the pooled worker named `name` (inspected as `found`), if it is one.
    pub(super) fn pooled_worker_id(&self, found: &Ours, name: &str) -> Option<String> {
        let m = found.member(&self.controller_id)?;
        let key = key_of(&m.member, &m.nonce);
        let bindings = self.bindings(&self.binding_selector(Some(&key))).ok()?;
        self.binding_for(&m, name, &bindings)
            .map(|b| b.owned.worker_id.clone())
    }

    fn member_config(&self, m: &MemberSpec, host_port: Option<u16>) -> Value {
        let t = &m.template;
        let mut config = self.host_config(t, host_port, None);
        let env = worker_env::member_environment(m, &self.container);
        config["Image"] = json!(t.image);
        config["Env"] = json!(worker_env::as_docker_env(&env));
        config["Labels"] = json!(labels::for_member(&self.controller_id, &m.labels()));
        config
    }

    /// Where the controller reaches a started container of `t` named `name` (published, or at
    /// its address on the template's network).
    fn reach(&self, id: &str, t: &Template, url: &str) -> Result<String, BackendError> {
        let Some(network) = &t.network else {
            return Ok(url.to_string());
        };
        let inspect = self
            .engine
            .inspect(id)
            .map_err(engine_error)?
            .ok_or_else(|| BackendError::NotReady("the member disappeared".into()))?;
        inspect
            .ip_on(network)
            .map(|ip| format!("http://{}", std::net::SocketAddr::new(ip, t.port)))
            .ok_or_else(|| {
                BackendError::NotReady(format!("the member has no address on {network}"))
            })
    }

    /// Whether image `t.image` says it speaks the activation contract: `Ok(None)` yes (or no
    /// pool asked), `Ok(Some(why))` no, `Err` the engine could not say.
    pub(super) fn pool_image_refusal(&self, t: &Template) -> Result<Option<String>, BackendError> {
        if !t.pool.is_kept() {
            return Ok(None);
        }
        match self.engine.image_labels(&t.image).map_err(engine_error)? {
            None => Ok(None),
            Some(l) if l.get(IMAGE_LABEL).map(String::as_str) == Some("v1") => Ok(None),
            Some(_) => Ok(Some(format!(
                "pool: image {} does not say it speaks the activation contract (image label {IMAGE_LABEL}=v1), so template {:?} cannot keep a pool",
                t.image, t.name
            ))),
        }
    }
}

impl Pools for DockerBackend {
    fn members(&self) -> Result<Vec<PoolMember>, BackendError> {
        let listing = self
            .engine
            .list(&labels::member_selector(&self.controller_id))
            .map_err(engine_error)?;
        let containers = listing.containers().map_err(engine_error)?;
        let mut bindings: Option<Vec<Binding>> = None;
        let mut out = Vec::new();
        for c in &containers {
            let Some(m) = c
                .labels
                .as_ref()
                .and_then(|l| l.member(&self.controller_id))
            else {
                continue;
            };
            let state = if c.name() == m.member {
                match c.state.as_ref() {
                    "running" => MemberState::Ready,
                    "created" | "restarting" => MemberState::Starting,
                    _ => MemberState::Ended,
                }
            } else {
                if bindings.is_none() {
                    bindings = Some(self.bindings(&self.binding_selector(None))?);
                }
                let bound = bindings
                    .as_deref()
                    .and_then(|bs| self.binding_for(&m, c.name(), bs));
                if bound.is_some() {
                    continue; // a worker now
                }
                MemberState::Claiming
            };
            let host_port = c
                .ports
                .iter()
                .flatten()
                .find(|p| p.kind == "tcp")
                .and_then(|p| p.public_port);
            let address = match host_port {
                Some(hp) => self.url_for(&m.member, 0, Some(hp)),
                None => String::new(),
            };
            out.push(PoolMember {
                name: m.member,
                id: c.id.to_string(),
                address,
                template: m.template,
                revision: m.revision,
                key_id: m.key_id,
                nonce: m.nonce,
                state,
                created_ms: c.created.max(0) as u64 * 1000,
            });
        }
        Ok(out)
    }

    fn start_member(&self, m: &MemberSpec) -> Result<(), BackendError> {
        let t = &m.template;
        let host_port = self.host_port(t)?;
        let url = self.url_for(&m.name, t.port, host_port);
        let id = match self
            .engine
            .create(&m.name, &self.member_config(m, host_port))
        {
            Ok(id) => id,
            Err(e) if e.status() == Some(404) => {
                return Err(BackendError::ImageNotFound(t.image.clone()))
            }
            Err(e) if is_name_conflict(&e) => {
                return Err(BackendError::WorkerExists {
                    worker_id: String::new(),
                    state: WorkerState::Starting,
                })
            }
            Err(e) => return Err(engine_error(e)),
        };
        let started = self.engine.start(&id).map_err(engine_error).and_then(|()| {
            if self.probe.disabled() {
                return Ok(());
            }
            self.wait_ready(&id, &url, t)?;
            let base = self.reach(&id, t, &url)?;
            members::check_member(&base, &t.image)
        });
        if let Err(e) = started {
            self.remove_quietly(&id);
            return Err(e);
        }
        Ok(())
    }

    fn claim_member(
        &self,
        member: &PoolMember,
        spec: &CreateSpec,
        activation: &Activation,
    ) -> Result<Worker, ClaimError> {
        members::claim(self, member, spec, activation)
    }

    /// Removes an unclaimed member by its name (if a claim renamed it meanwhile, it is that
    /// claim's now and stays), or a claim that did not finish by its id, with its bindings.
    fn remove_member(&self, m: &PoolMember) -> Result<(), BackendError> {
        let target = match m.state {
            MemberState::Claiming => m.id.as_str(),
            _ => m.name.as_str(),
        };
        self.engine.remove(target).map_err(engine_error)?;
        if m.state == MemberState::Claiming {
            let key = key_of(&m.name, &m.nonce);
            for b in self.bindings(&self.binding_selector(Some(&key)))? {
                let _ = self.engine.remove_volume(&b.volume);
            }
        }
        Ok(())
    }

    /// Removes bindings whose member is gone (volumes read first, then the containers, so a
    /// binding made meanwhile is not looked at).
    fn sweep(&self) -> Result<usize, BackendError> {
        let bindings = self.bindings(&self.binding_selector(None))?;
        if bindings.is_empty() {
            return Ok(0);
        }
        let listing = self
            .engine
            .list(&labels::member_selector(&self.controller_id))
            .map_err(engine_error)?;
        let containers = listing.containers().map_err(engine_error)?;
        let live: std::collections::HashSet<String> = containers
            .iter()
            .filter_map(|c| c.labels.as_ref()?.member(&self.controller_id))
            .map(|m| key_of(&m.member, &m.nonce))
            .collect();
        let mut swept = 0;
        for b in bindings.iter().filter(|b| !live.contains(&b.key)) {
            if self.engine.remove_volume(&b.volume).map_err(engine_error)? {
                swept += 1;
            }
        }
        Ok(swept)
    }
}

/// Docker's steps of the claim protocol: the task's container name is the commit (a
/// container's labels are fixed, so the worker's identity is a binding volume beside it).
impl members::ClaimSteps for DockerBackend {
    /// The binding volume.
    type Bound = String;

    fn worker_url(&self, member: &PoolMember, spec: &CreateSpec) -> Result<String, ClaimError> {
        let t = &spec.template;
        match &t.network {
            Some(_) => Ok(self.url_for(&task_container(self, spec), t.port, None)),
            None if member.address.is_empty() => Err(ClaimError::Broken(format!(
                "member {} has no published port",
                member.name
            ))),
            None => Ok(member.address.clone()),
        }
    }

    fn worker_settings(&self) -> (&ContainerSettings, Option<&str>) {
        (&self.container, self.anthropic_auth_token.as_deref())
    }

    fn task_free(&self, spec: &CreateSpec) -> Result<(), ClaimError> {
        let target = task_container(self, spec);
        let there = self
            .engine
            .inspect(&target)
            .map_err(|e| ClaimError::Task(engine_error(e)))?;
        match there {
            Some(_) => Err(ClaimError::Task(self.existing(&target))),
            None => Ok(()),
        }
    }

    /// Still named as its slot (a claim renames it) and running.
    fn still_unclaimed(&self, member: &PoolMember) -> Result<bool, ClaimError> {
        let current = self
            .engine
            .inspect(&member.id)
            .map_err(|e| ClaimError::Task(engine_error(e)))?;
        Ok(current.is_some_and(|i| {
            i.name.trim_start_matches('/') == member.name
                && i.state.as_ref().is_some_and(|s| s.running)
        }))
    }

    /// Its published port, or on a network, its address there.
    fn activation_base(
        &self,
        member: &PoolMember,
        spec: &CreateSpec,
        url: &str,
    ) -> Result<String, ClaimError> {
        match &spec.template.network {
            Some(_) => self
                .reach(&member.id, &spec.template, url)
                .map_err(|e| ClaimError::Broken(format!("member {}: {e}", member.name))),
            None => Ok(member.address.clone()),
        }
    }

    fn discard(&self, member: &PoolMember) {
        self.remove_quietly(&member.id);
    }

    /// The worker's labels on a volume named after the member and the worker.
    fn bind(&self, member: &PoolMember, spec: &CreateSpec) -> Result<String, ClaimError> {
        let volume = format!("{}-binding-{}", member.name, spec.worker_id);
        let mut binding = self.worker_labels(spec);
        binding.insert(
            labels::BINDING.to_string(),
            key_of(&member.name, &member.nonce),
        );
        let (claimed, at) = labels::claimed_now();
        binding.insert(claimed.to_string(), at);
        if let Err(e) = self.engine.create_volume(&volume, &json!(binding)) {
            self.remove_quietly(&member.id);
            return Err(ClaimError::Task(engine_error(e)));
        }
        Ok(volume)
    }

    /// The member renamed to the task's container name, which the engine gives one container.
    fn commit(
        &self,
        member: &PoolMember,
        spec: &CreateSpec,
        volume: String,
    ) -> Result<(), ClaimError> {
        let target = task_container(self, spec);
        let Err(e) = self.engine.rename(&member.id, &target) else {
            return Ok(());
        };
        self.remove_quietly(&member.id);
        if let Err(e) = self.engine.remove_volume(&volume) {
            log::warn!("the binding {volume} of a claim that did not happen was left (the pool sweeps it): {e}");
        }
        Err(ClaimError::Task(if is_name_conflict(&e) {
            self.existing(&target)
        } else {
            engine_error(e)
        }))
    }
}

/// The container name of `spec`'s task.
fn task_container(d: &DockerBackend, spec: &CreateSpec) -> String {
    labels::container_name(&d.controller_id, &spec.scope, &spec.task)
}
