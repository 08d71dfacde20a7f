//! The one test double of the seam, for unit, integration and fuzz tests: workers in a map,
//! kept by the trait's contract (one worker per task and scope, refused with `WorkerExists`;
//! `NotFound` for unknown ids), so the layers above can be tested against it. Each ability is
//! there as the real backends have it: workspaces always (none until a test puts some; they work while it is down),
//! pools and a change stream when a test turns them on. Knobs a test turns are public fields;
//! every call it may want to count is counted.
//!
//! Not a backend anyone runs: no settings build it, and `lib.rs` never names it. It is
//! compiled into the library (integration tests and fuzz targets are other crates), and the
//! controller's binary links none of it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::Mutex;
use std::time::Duration;

use super::tail::{Tail, MAX_LOG_BYTES};
use super::{
    Abilities, Activation, Backend, BackendError, BackendKind, Capabilities, Change, Changes,
    ClaimError, Copies, CreateSpec, Logs, MemberSpec, MemberState, Metadata, PoolMember, Pools,
    Progress, Renewal, Suspend, Suspension, TaskWorkspace, Worker, WorkerState, Workspaces,
};

/// The test double. `Default` is an empty one that is up, creates at once and keeps no pools.
#[derive(Default)]
pub struct FakeBackend {
    workers: Mutex<BTreeMap<String, Worker>>,
    /// Every call fails `Unavailable` while set.
    pub down: AtomicBool,
    /// How long each create takes.
    pub create_delay: Mutex<Duration>,
    /// The next create fails with this.
    pub next_create_error: Mutex<Option<BackendError>>,
    /// Every create fails `Unavailable` while set (nothing is ever created).
    pub refuse_creates: AtomicBool,
    /// The next create panics (a bug in a backend), to test the panic policy.
    pub panic_next_create: AtomicBool,
    /// Every token handed to `create`, to check where tokens go.
    pub tokens: Mutex<Vec<String>>,
    /// How many times the workers were listed.
    pub lists: AtomicU64,
    /// How many creates have begun (counted as each one enters, before its delay): a test
    /// waits on this to know a create is in flight.
    pub creates_started: AtomicU64,
    /// Whether it keeps warm pools: then members "started" are held here, always ready, and
    /// a claim of one is refused (the create is made cold), for the layers above the seam.
    pub pooling: AtomicBool,
    members: Mutex<Vec<PoolMember>>,
    /// The task workspaces it keeps (a test puts them here).
    pub workspaces: Mutex<Vec<TaskWorkspace>>,
    /// How many times the workspaces were listed.
    pub workspace_lists: AtomicU64,
    /// The tasks whose workspace was deleted, in order.
    pub deleted_workspaces: Mutex<Vec<String>>,
    /// Tasks whose workspace copy is under way (a test puts them here): a copy's record is
    /// the source's under the new task's name.
    pub copying: Mutex<Vec<String>>,
    /// Its change stream, when a test gives it one: the changes it tells, in order, until
    /// the sender is dropped. Without, [`Backend::changes`] is `None`.
    pub changes: Mutex<Option<Receiver<Change>>>,
    /// Whether it has a change stream at all.
    pub streaming: AtomicBool,
    /// The workers the change stream was asked for one by one ([`Changes::worker`]).
    pub looked_at: Mutex<Vec<String>>,
    /// [`Changes::worker`] fails `Unavailable` while set.
    pub refuse_looks: AtomicBool,
    clock: Mutex<u64>,
    /// The TTL each suspended worker gets back on resume.
    ttl_left: Mutex<BTreeMap<String, Option<u64>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl FakeBackend {
    fn check_up(&self) -> Result<(), BackendError> {
        if self.down.load(Ordering::SeqCst) {
            Err(BackendError::Unavailable("test double is down".into()))
        } else {
            Ok(())
        }
    }

    /// How many workers it holds.
    pub fn count(&self) -> usize {
        lock(&self.workers).len()
    }

    /// What happens to a worker outside the controller: its state moves (`reason` says why).
    pub fn set_state(&self, worker_id: &str, state: WorkerState, reason: &str) {
        if let Some(w) = lock(&self.workers).get_mut(worker_id) {
            w.state = state;
            w.reason = reason.to_string();
        }
    }

    /// A worker another caller made, in `scope` (as a second supervisor would); its id.
    pub fn add_by_hand(&self, task: &str, scope: &str) -> String {
        let n = *lock(&self.clock) + 1;
        let worker = self.running_worker(&format!("byhand{n:04}"), task, scope, Metadata::new());
        let worker_id = worker.worker_id.clone();
        lock(&self.workers).insert(worker_id.clone(), worker);
        worker_id
    }

    /// A worker exactly as given, put in (or replaced) by hand.
    pub fn put(&self, worker: Worker) {
        lock(&self.workers).insert(worker.worker_id.clone(), worker);
    }

    /// Someone else removes a worker (by hand, on the engine).
    pub fn remove_by_hand(&self, worker_id: &str) {
        lock(&self.workers).remove(worker_id);
    }

    /// A running worker as this double makes one, created at the next tick of its clock.
    fn running_worker(
        &self,
        worker_id: &str,
        task: &str,
        scope: &str,
        metadata: Metadata,
    ) -> Worker {
        let mut clock = lock(&self.clock);
        *clock += 1;
        Worker {
            worker_id: worker_id.to_string(),
            task: task.to_string(),
            a2a_url: format!("http://127.0.0.1:1/{worker_id}"),
            backend: BackendKind::Docker,
            state: WorkerState::Running,
            pane_id: String::new(),
            session_id: String::new(),
            created_at: format!("2026-11-29T00:00:{:02}Z", *clock % 60),
            reason: String::new(),
            expires_at: String::new(),
            metadata,
            scope: scope.to_string(),
            template: "default".to_string(),
            token_hash: String::new(),
        }
    }
}

impl Backend for FakeBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Docker
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::CONTAINERS
    }

    fn create(&self, spec: &CreateSpec) -> Result<Worker, BackendError> {
        self.creates_started.fetch_add(1, Ordering::SeqCst);
        self.check_up()?;
        if self.refuse_creates.load(Ordering::SeqCst) {
            return Err(BackendError::Unavailable(
                "the test double refuses creates".into(),
            ));
        }
        let delay = *lock(&self.create_delay);
        spec.progress.step("fake: starting");
        std::thread::sleep(delay);
        if self.panic_next_create.swap(false, Ordering::SeqCst) {
            panic!("a bug in the backend's create");
        }
        if let Some(e) = lock(&self.next_create_error).take() {
            return Err(e);
        }
        lock(&self.tokens).push(spec.token.expose().to_string());
        let mut workers = lock(&self.workers);
        if let Some(w) = workers
            .values()
            .find(|w| w.task == spec.task && w.scope == spec.scope)
        {
            return Err(BackendError::WorkerExists {
                worker_id: w.worker_id.clone(),
                state: w.state,
            });
        }
        let worker = self
            .running_worker(
                &spec.worker_id,
                &spec.task,
                &spec.scope,
                spec.metadata.clone(),
            )
            .expiring(spec.expires_at)
            .templated(spec.template.name.clone())
            .hashed(spec.token.hash());
        workers.insert(worker.worker_id.clone(), worker.clone());
        spec.progress.step("fake: ready");
        Ok(worker)
    }

    fn list(&self) -> Result<Vec<Worker>, BackendError> {
        self.check_up()?;
        self.lists.fetch_add(1, Ordering::SeqCst);
        Ok(lock(&self.workers).values().cloned().collect())
    }

    fn stop(&self, worker_id: &str) -> Result<Worker, BackendError> {
        self.check_up()?;
        lock(&self.workers)
            .remove(worker_id)
            .ok_or(BackendError::NotFound)
    }

    /// Three lines per worker: `<worker_id> line 1` .. `line 3`.
    fn logs(&self, worker_id: &str, lines: u32) -> Result<Logs, BackendError> {
        self.check_up()?;
        if !lock(&self.workers).contains_key(worker_id) {
            return Err(BackendError::NotFound);
        }
        let mut tail = Tail::new(MAX_LOG_BYTES);
        for i in 1..=3 {
            tail.push(format!("{worker_id} line {i}\n").as_bytes());
        }
        Ok(tail.finish(lines))
    }

    fn health(&self) -> Result<(), BackendError> {
        self.check_up()
    }

    fn abilities(&self) -> Abilities<'_> {
        Abilities {
            changes: self.streaming.load(Ordering::SeqCst).then_some(self as _),
            workspaces: Some(self),
            pools: self.pooling.load(Ordering::SeqCst).then_some(self as _),
            renewal: Some(self),
            suspension: Some(self),
            copies: Some(self),
        }
    }
}

impl Changes for FakeBackend {
    /// Tells what the test sends until it drops its sender; without a stream given (or after
    /// one ended), a call returns after a short while, as a quiet stream's call does.
    fn follow(&self, changed: &mut dyn FnMut(Change) -> bool) -> Result<(), BackendError> {
        let Some(changes) = lock(&self.changes).take() else {
            std::thread::sleep(Duration::from_millis(50));
            return Ok(());
        };
        for c in changes.iter() {
            if !changed(c) {
                break;
            }
        }
        Ok(())
    }

    fn worker(&self, worker_id: &str) -> Result<Option<Worker>, BackendError> {
        lock(&self.looked_at).push(worker_id.to_string());
        if self.refuse_looks.load(Ordering::SeqCst) {
            return Err(BackendError::Unavailable("not now".into()));
        }
        Ok(lock(&self.workers).get(worker_id).cloned())
    }
}

impl Renewal for FakeBackend {
    fn find(&self, worker_id: &str) -> Result<Worker, BackendError> {
        self.check_up()?;
        lock(&self.workers)
            .get(worker_id)
            .cloned()
            .ok_or(BackendError::NotFound)
    }

    fn renew(&self, worker: &Worker, expires_at: Option<u64>) -> Result<Worker, BackendError> {
        self.check_up()?;
        let mut workers = lock(&self.workers);
        let w = workers
            .get_mut(&worker.worker_id)
            .ok_or(BackendError::NotFound)?;
        *w = w.clone().expiring(expires_at);
        Ok(w.clone())
    }
}

impl Suspension for FakeBackend {
    fn suspend(&self, worker_id: &str, how: &Suspend) -> Result<Worker, BackendError> {
        self.check_up()?;
        let mut workers = lock(&self.workers);
        let w = workers.get_mut(worker_id).ok_or(BackendError::NotFound)?;
        w.state = WorkerState::Suspended;
        w.reason = format!("suspended at {}", crate::time::rfc3339_secs(how.at));
        *w = w.clone().expiring(how.until);
        lock(&self.ttl_left).insert(worker_id.to_string(), how.ttl_left);
        Ok(w.clone())
    }

    fn resume(
        &self,
        worker_id: &str,
        _template: Option<&crate::backend::Template>,
        progress: &Progress,
    ) -> Result<Worker, BackendError> {
        self.check_up()?;
        let mut workers = lock(&self.workers);
        let w = workers.get_mut(worker_id).ok_or(BackendError::NotFound)?;
        let left = lock(&self.ttl_left).remove(worker_id).flatten();
        let now = crate::time::now_millis() / 1000;
        w.state = WorkerState::Running;
        w.reason = String::new();
        *w = w.clone().expiring(left.map(|l| now + l));
        progress.step("fake: resumed");
        Ok(w.clone())
    }
}

impl Workspaces for FakeBackend {
    fn owned(&self) -> Result<Vec<TaskWorkspace>, BackendError> {
        self.workspace_lists.fetch_add(1, Ordering::SeqCst);
        Ok(lock(&self.workspaces).clone())
    }

    fn delete(&self, scope: &str, task: &str) -> Result<TaskWorkspace, BackendError> {
        let mut spaces = lock(&self.workspaces);
        let at = spaces
            .iter()
            .position(|w| w.scope == scope && w.task == task)
            .ok_or(BackendError::NotFound)?;
        lock(&self.deleted_workspaces).push(task.to_string());
        Ok(spaces.remove(at))
    }

    fn released(&self, _scope: &str, _task: &str) -> Result<(), BackendError> {
        Ok(())
    }
}

impl Copies for FakeBackend {
    fn copy(
        &self,
        source: &TaskWorkspace,
        to: &str,
        progress: &Progress,
    ) -> Result<TaskWorkspace, BackendError> {
        self.check_up()?;
        let mut spaces = lock(&self.workspaces);
        if spaces
            .iter()
            .any(|w| w.scope == source.scope && w.task == to)
        {
            return Err(BackendError::Refused(format!(
                "task {to:?} has a workspace already"
            )));
        }
        let copy = TaskWorkspace {
            task: to.to_string(),
            name: format!("{}-copy", source.name),
            ..source.clone()
        };
        progress.step(&format!("copying the workspace of task {:?}", source.task));
        spaces.push(copy.clone());
        Ok(copy)
    }

    fn unfinished(&self, _scope: &str, task: &str) -> Result<bool, BackendError> {
        Ok(lock(&self.copying).iter().any(|t| t == task))
    }

    fn tidy(&self) -> Result<usize, BackendError> {
        Ok(std::mem::take(&mut *lock(&self.copying)).len())
    }
}

impl Pools for FakeBackend {
    fn members(&self) -> Result<Vec<PoolMember>, BackendError> {
        self.check_up()?;
        Ok(lock(&self.members).clone())
    }

    fn start_member(&self, m: &MemberSpec) -> Result<(), BackendError> {
        self.check_up()?;
        let mut members = lock(&self.members);
        if members.iter().any(|x| x.name == m.name) {
            return Err(BackendError::WorkerExists {
                worker_id: String::new(),
                state: WorkerState::Starting,
            });
        }
        members.push(PoolMember {
            name: m.name.clone(),
            id: m.name.clone(),
            address: String::new(),
            template: m.template.name.clone(),
            revision: m.revision.clone(),
            key_id: m.key_id.clone(),
            nonce: m.nonce.clone(),
            state: MemberState::Ready,
            created_ms: 0,
        });
        Ok(())
    }

    /// Refused as broken: the create is made cold.
    fn claim_member(
        &self,
        member: &PoolMember,
        _spec: &CreateSpec,
        _activation: &Activation,
    ) -> Result<Worker, ClaimError> {
        Err(ClaimError::Broken(format!(
            "the test double does not claim members (member {})",
            member.name
        )))
    }

    fn remove_member(&self, m: &PoolMember) -> Result<(), BackendError> {
        lock(&self.members).retain(|x| x.id != m.id);
        Ok(())
    }

    fn sweep(&self) -> Result<usize, BackendError> {
        Ok(0)
    }
}
