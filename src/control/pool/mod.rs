//! Warm pools: each template with `pool: N` keeps N started, unbound members per controller
//! id, and a create of it takes one and binds it to its task (the backend's
//! [`Pools::claim_member`]); with none free it is made cold, as without a pool. `plan.rs`
//! decides what one look at the members does; `key.rs` is the key their secrets come from;
//! `demand.rs` sizes a pool of `pool: {"min", "max"}`.
//!
//! - **Sized by the demand.** A pool between bounds holds what its template's recent creates
//!   ask for (`demand.rs`), read from the workers the engine lists — the same for every
//!   replica — after its members (so a member another replica started for a create is never
//!   seen without that create). It fills its free slots up to that size and removes its
//!   oldest ready members above it, never one a create here is claiming.
//! - **Slots, not counts.** Member `i` of a template's revision has one name
//!   ([`labels::member_name`]) for every replica, and the engine keeps names unique: two
//!   replicas (or a restart) fill the same N slots, adopt what they find, and never make 2N.
//! - **Nothing secret kept or labelled.** A member's activation secret is derived from the pool
//!   key, its name and its nonce (a label): any replica with the key opens any member, one
//!   member's secret opens no other, and the member holds only its hash.
//! - **Drained on change.** The template's revision (a hash of what its workers are made from)
//!   and the key's id are in each member's labels; members of another revision or key, of a
//!   template gone or no longer pooled, or beyond N, are removed, and their slots refilled.
//! - **In the background.** One thread looks every second (at once after a claim), removes
//!   ended members and claims that did not finish, and refills free slots, up to eight at a time; an
//!   engine that refuses backs the template off (1 s doubling to 60 s), said once per streak.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::{Duration, Instant};

pub mod demand;
mod key;
mod plan;

pub use self::key::PoolKey;

use crate::backend::{
    Activation, Backend, BackendError, ClaimError, CreateSpec, MemberSpec, PoolMember, Pools,
    Template, Worker,
};
use crate::metrics::Metrics;
use crate::settings::templates::TemplatesFile;
use crate::token::{self};

/// How often the pool looks at its members without being asked.
const LOOK_EVERY: Duration = Duration::from_secs(1);
/// How many members are started at once (per pass), at most: a pass waits for its starts, so
/// a pool refills at most this many per member start (a burst against slow-starting members
/// needs several at once; the engine's own work is the bound).
const STARTS_AT_ONCE: usize = 8;
/// The longest back-off after the engine refused a member.
const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// How long a claim that did not finish (or a member made and never started) is left to its
/// claimer before the pool removes it, beyond the activation deadline.
const STUCK_GRACE: Duration = Duration::from_secs(30);
/// Every how many passes bindings of members that are gone are swept.
const SWEEP_EVERY: u64 = 10;

/// A template's revision: 12 hex digits of a hash of what its workers are made from (image,
/// program, environment, limits, port, readiness, pod template, network).
pub fn revision(t: &Template) -> String {
    let text = format!(
        "{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{:?}|{}|{:?}|{:?}|{:?}",
        t.image,
        t.command,
        t.env,
        t.env_files,
        t.memory_bytes,
        t.nano_cpus,
        t.pids_limit,
        t.port,
        t.ready_path,
        t.pod_template,
        t.network
    );
    token::hex(&crate::hash::sha256(text.as_bytes())[..6])
}

/// What the pool says of a template now (for `check`, the status page).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PoolStatus {
    pub template: String,
    /// The members it should hold now: its fixed size, or what the demand asks for.
    pub size: u32,
    /// The template's bounds (`min == max`: a fixed pool).
    pub min: u32,
    pub max: u32,
    pub ready: u32,
    pub starting: u32,
}

struct Shared {
    /// Members ready to be claimed, by template (of its current revision and key).
    ready: HashMap<String, Vec<PoolMember>>,
    status: Vec<PoolStatus>,
    /// When each claim that did not finish (by engine id) was first seen.
    stuck_since: HashMap<String, Instant>,
    /// When a claim here first lost a member that is still unclaimed (by engine id): one
    /// that stays so was activated by a claim that never finished, and is removed.
    lost_since: HashMap<String, Instant>,
    /// Per template: when it may be refilled again, the back-off, and whether it was said.
    backoff: HashMap<String, (Instant, Duration)>,
    poked: bool,
    /// Whether the last look found members (`None`: not looked yet). With no pooled template
    /// and none found, the pool does not ask the engine again until a template keeps one.
    found_members: Option<bool>,
    /// Members a create here is claiming now (by engine id): a shrink passes them over.
    claiming: HashSet<String>,
}

/// The pools of every pooled template of one controller.
pub struct Pool {
    backend: Arc<dyn Backend>,
    templates: Arc<TemplatesFile>,
    metrics: Arc<Metrics>,
    controller_id: String,
    key: PoolKey,
    activation_timeout: Duration,
    demand: demand::Rule,
    shared: Mutex<Shared>,
    wake: Condvar,
    stopping: AtomicBool,
}

/// The running pool; dropped, its thread ends after its pass.
pub struct PoolHandle(Arc<Pool>);

impl Drop for PoolHandle {
    fn drop(&mut self) {
        self.0.stopping.store(true, Ordering::SeqCst);
        self.0.wake.notify_all();
    }
}

impl PoolHandle {
    pub fn pool(&self) -> &Arc<Pool> {
        &self.0
    }
}

impl Pool {
    /// The backend's side of pools. A pool is started only for a backend that keeps them
    /// (`lib.rs`), so the error is one no caller sees unless that changes.
    fn engine(&self) -> Result<&dyn Pools, BackendError> {
        self.backend.abilities().pools.ok_or_else(|| {
            BackendError::Internal(format!(
                "the {} backend keeps no warm pools",
                self.backend.kind()
            ))
        })
    }

    pub fn new(
        backend: Arc<dyn Backend>,
        templates: Arc<TemplatesFile>,
        metrics: Arc<Metrics>,
        controller_id: &str,
        key: PoolKey,
        activation_timeout: Duration,
        demand: demand::Rule,
    ) -> Arc<Pool> {
        Arc::new(Pool {
            backend,
            templates,
            metrics,
            controller_id: controller_id.to_string(),
            key,
            activation_timeout,
            demand,
            shared: Mutex::new(Shared {
                ready: HashMap::new(),
                status: Vec::new(),
                stuck_since: HashMap::new(),
                lost_since: HashMap::new(),
                backoff: HashMap::new(),
                poked: false,
                found_members: None,
                claiming: HashSet::new(),
            }),
            wake: Condvar::new(),
            stopping: AtomicBool::new(false),
        })
    }

    /// Starts the pool's thread; it runs until the handle drops.
    pub fn start(pool: &Arc<Pool>) -> PoolHandle {
        let run = Arc::clone(pool);
        let spawned = thread::Builder::new()
            .name("pool".into())
            .spawn(move || run.run());
        if let Err(e) = spawned {
            log::error!("the pool's thread could not start: {e}; creates are made cold");
        }
        PoolHandle(Arc::clone(pool))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Asks for a look now (after a claim: its slot is free).
    pub fn poke(&self) {
        self.lock().poked = true;
        self.wake.notify_all();
    }

    /// Each pooled template's pool as last seen.
    pub fn status(&self) -> Vec<PoolStatus> {
        self.lock().status.clone()
    }

    /// A worker for `spec` from its template's pool: `None` when the template keeps none or
    /// none is free (the create is then made cold); the task's own refusal (it has a worker)
    /// is the answer.
    pub fn claim(&self, spec: &CreateSpec) -> Option<Result<Worker, BackendError>> {
        let size = spec.template.pool.max;
        if size == 0 {
            return None;
        }
        let revision = revision(&spec.template);
        // At most as many members as the pool holds are tried (members started meanwhile
        // are for later creates): a template whose members all fail is made cold. A member
        // found lost (another replica claimed it, someone removed it) costs one look, not a
        // try: this replica's view of the pool was a second old, the next member may be free.
        let mut tries = 0;
        for _ in 0..size.saturating_mul(4) {
            if tries == size {
                break;
            }
            let member = {
                let mut shared = self.lock();
                let ready = shared.ready.get_mut(&spec.template.name)?;
                ready.retain(|m| m.revision == revision && m.key_id == self.key.id);
                if ready.is_empty() {
                    None
                } else {
                    let at = pick(ready.len());
                    let member = ready.swap_remove(at);
                    shared.claiming.insert(member.id.clone());
                    Some(member)
                }
            };
            let Some(member) = member else {
                self.poke();
                return None;
            };
            let activation = Activation {
                secret: self.key.secret(&member.name, &member.nonce),
                timeout: self.activation_timeout,
            };
            let claimed = self
                .engine()
                .map_err(ClaimError::Task)
                .and_then(|pools| pools.claim_member(&member, spec, &activation));
            self.lock().claiming.remove(&member.id);
            match claimed {
                Ok(worker) => {
                    self.poke();
                    return Some(Ok(worker));
                }
                Err(ClaimError::Lost) => {
                    self.lock()
                        .lost_since
                        .entry(member.id.clone())
                        .or_insert_with(Instant::now);
                    continue;
                }
                Err(ClaimError::Broken(why)) => {
                    tries += 1;
                    log::warn!(
                        "pool of template {}: a member could not be bound and was removed: {why}",
                        spec.template.name
                    );
                    continue;
                }
                Err(ClaimError::Task(e)) => {
                    self.poke();
                    return Some(Err(e));
                }
            }
        }
        self.poke();
        None
    }

    fn run(&self) {
        let mut passes = 0u64;
        while !self.stopping.load(Ordering::SeqCst) {
            let again = match self.pass(passes.is_multiple_of(SWEEP_EVERY)) {
                Ok(started) => started,
                Err(e) => {
                    log::warn!("the pool could not look at its members: {e}");
                    false
                }
            };
            passes += 1;
            if again {
                continue;
            }
            let mut shared = self.lock();
            if !shared.poked && !self.stopping.load(Ordering::SeqCst) {
                shared = self
                    .wake
                    .wait_timeout(shared, LOOK_EVERY)
                    .map(|(g, _)| g)
                    .unwrap_or_else(|p| p.into_inner().0);
            }
            shared.poked = false;
        }
    }

    /// One look: the members as the engine has them, what is removed (`plan.rs` decides), the
    /// ready lists, then free slots refilled. Whether members were started (another look
    /// follows at once).
    fn pass(&self, sweep: bool) -> Result<bool, BackendError> {
        let templates = self.templates.current();
        let pooled = templates.all().any(|t| t.pool.is_kept());
        if !pooled && self.lock().found_members == Some(false) {
            return Ok(false);
        }
        // The members first, then the creates: a member another replica started for a create
        // is never seen here without that create.
        let members = self.engine()?.members()?;
        self.lock().found_members = Some(!members.is_empty());
        let creates = if templates.all().any(|t| t.pool.follows_demand()) {
            demand::creates(self.backend.as_ref())?
        } else {
            HashMap::new()
        };
        let now_ms = crate::time::now_millis();
        let wanted = plan::Wanted::of(&templates, &self.controller_id, |t| {
            let times = creates.get(&t.name).map_or(&[][..], |v| v.as_slice());
            self.demand.wanted(t.pool, times, now_ms)
        });
        let now = Instant::now();
        let seen = {
            let mut shared = self.lock();
            plan::Seen {
                stuck_since: std::mem::take(&mut shared.stuck_since),
                lost_since: shared.lost_since.clone(),
                now,
                stuck_after: self.activation_timeout + STUCK_GRACE,
                claiming: shared.claiming.clone(),
            }
        };
        let plan = plan::plan(members, &self.key.id, &wanted, &seen);
        for (m, why) in &plan.remove {
            log::info!("pool: removing member {} ({why})", m.name);
            if let Err(e) = self.engine().and_then(|pools| pools.remove_member(m)) {
                log::warn!("pool: member {} could not be removed: {e}", m.name);
            }
        }
        let starts: Vec<(&plan::Pooled<'_>, Vec<&String>)> = wanted
            .iter()
            .map(|p| (p, plan.to_start(p, STARTS_AT_ONCE)))
            .collect();
        self.metrics.pool_members(plan.counts(&wanted));
        self.metrics.pool_sizes(
            wanted
                .iter()
                .map(|p| (p.template.name.clone(), u64::from(p.size)))
                .collect(),
        );
        {
            let mut shared = self.lock();
            shared.status = plan.status(&wanted);
            shared.ready = plan.ready;
            shared.stuck_since = plan.still_stuck;
            // Lost since this pass's list began stay too.
            shared
                .lost_since
                .retain(|id, since| plan.still_lost.contains_key(id) || *since >= now);
            shared.backoff.retain(|t, _| wanted.has(t));
        }
        if sweep {
            match self.engine().and_then(|pools| pools.sweep()) {
                Ok(0) => {}
                Ok(n) => log::info!("pool: {n} bindings of claims that did not happen were swept"),
                Err(e) => log::warn!("pool: bindings could not be swept: {e}"),
            }
        }
        let mut started = false;
        for (p, free) in &starts {
            started |= self.refill(p.template, &p.revision, free);
        }
        Ok(started)
    }

    /// Starts members of template `t` in the slots `free`, unless it is backing off; whether
    /// any started.
    fn refill(&self, t: &Arc<Template>, rev: &str, free: &[&String]) -> bool {
        if let Some((until, _)) = self.lock().backoff.get(&t.name) {
            if Instant::now() < *until {
                return false;
            }
        }
        if free.is_empty() {
            return false;
        }
        let results: Vec<Result<(), BackendError>> = thread::scope(|s| {
            let handles: Vec<_> = free
                .iter()
                .map(|name| s.spawn(|| self.start_one(t, rev, name)))
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(BackendError::Internal("a member's start panicked".into()))
                    })
                })
                .collect()
        });
        let mut started = false;
        let mut refused = None;
        for r in results {
            match r {
                Ok(()) => started = true,
                // Another replica filled the slot first.
                Err(BackendError::WorkerExists { .. }) => {}
                Err(e) => refused = Some(e),
            }
        }
        let mut shared = self.lock();
        match refused {
            None => {
                if shared.backoff.remove(&t.name).is_some() {
                    log::info!("pool of template {}: members start again", t.name);
                }
            }
            Some(e) => {
                let (first, next) = match shared.backoff.get(&t.name) {
                    Some((_, d)) => (false, (*d * 2).min(MAX_BACKOFF)),
                    None => (true, Duration::from_secs(1)),
                };
                if first {
                    log::warn!(
                        "pool of template {}: a member could not be started: {e}; trying again with back-off (up to {}s)",
                        t.name,
                        MAX_BACKOFF.as_secs()
                    );
                }
                shared
                    .backoff
                    .insert(t.name.clone(), (Instant::now() + next, next));
            }
        }
        started
    }

    fn start_one(&self, t: &Arc<Template>, rev: &str, name: &str) -> Result<(), BackendError> {
        let nonce = token::random_hex(8)
            .map_err(|e| BackendError::Internal(format!("the random generator failed: {e}")))?;
        let secret = self.key.secret(name, &nonce);
        let spec = MemberSpec {
            name: name.to_string(),
            template: Arc::clone(t),
            revision: rev.to_string(),
            key_id: self.key.id.clone(),
            nonce,
            activation_sha256: token::hex(&crate::hash::sha256(secret.expose().as_bytes())),
        };
        self.engine()?.start_member(&spec)
    }
}

/// A random index below `len` (which member a claim tries first: replicas racing for one
/// pool then mostly try different ones).
fn pick(len: usize) -> usize {
    let mut b = [0u8; 8];
    match token::os_random(&mut b) {
        Ok(()) => (u64::from_le_bytes(b) % len as u64) as usize,
        Err(_) => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_per_member_and_ids_say_nothing_of_the_key() {
        let key = PoolKey::derived_from("an admin token of enough length");
        let a = key.secret("m-0", "n1");
        assert_eq!(a.expose(), key.secret("m-0", "n1").expose());
        assert_ne!(a.expose(), key.secret("m-1", "n1").expose());
        assert_ne!(a.expose(), key.secret("m-0", "n2").expose());
        assert_eq!(a.expose().len(), 64);
        assert_eq!(key.id().len(), 16);
        let other = PoolKey::derived_from("another admin token of enough length");
        assert_ne!(key.id(), other.id());
        assert_ne!(a.expose(), other.secret("m-0", "n1").expose());
    }

    #[test]
    fn a_revision_changes_with_what_workers_are_made_from() {
        let t = Template::new("coder", "img:1", 9090);
        let mut u = t.clone();
        assert_eq!(revision(&t), revision(&u));
        u.pool = crate::settings::templates::PoolSize { min: 1, max: 3 };
        u.description = "other words".into();
        assert_eq!(
            revision(&t),
            revision(&u),
            "neither the pool size nor words"
        );
        u.image = "img:2".into();
        assert_ne!(revision(&t), revision(&u));
        let mut v = t.clone();
        v.env.push(("A".into(), "b".into()));
        assert_ne!(revision(&t), revision(&v));
    }
}
