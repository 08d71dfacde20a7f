//! The bounded in-memory store of recent control tasks (for `GetTask`, `ListTasks`,
//! `CancelTask`). Lost on restart by design: workers are never recorded here.
//!
//! A create's token is kept beside its task, never inside it, until the first reply that
//! shows the task's artifacts; that reply takes it, so it is delivered exactly once.
//!
//! Bounded twice: at most `capacity` tasks, and at most [`MAX_DATA_BYTES`] of reply data (a
//! `list` of many workers is large). Reply data is JSON text from the start (see
//! [`super::types::Artifact`]): several times smaller than a parsed value, and sent as it is.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde_json::value::RawValue;
use serde_json::Value;

use super::types::{Artifact, Task, TaskState, TaskStatus};
use super::updates::{self, Room, Watcher};
pub use super::updates::{Update, Updates};
use crate::token::Token;

pub const DEFAULT_CAPACITY: usize = 1024;

/// The most reply data (as JSON text) the store keeps; older terminal tasks go first.
pub const MAX_DATA_BYTES: usize = 2 << 20;

struct Entry {
    task: Task,
    /// The key of the caller whose request made it: the only caller that reaches it.
    owner: String,
    /// Length of the task's reply data (JSON text).
    data_bytes: usize,
    token: Option<Token>,
    /// Order of the latest status change (larger = newer).
    seq: u64,
    status_millis: u64,
}

impl Entry {
    /// A copy of the task (its reply data is text: copied as bytes, not as a tree). Its `seq`
    /// is given when it is stored.
    fn new(task: &Task, token: Option<Token>, status_millis: u64) -> Entry {
        Entry {
            owner: String::new(),
            data_bytes: task.data_bytes(),
            task: task.clone(),
            token,
            seq: 0,
            status_millis,
        }
    }
}

struct Inner {
    /// Entries are boxed, so the table itself is small (tens of KiB at the default capacity)
    /// and allocated once, at its full size, when the store is made: a table that grew by
    /// doubling past 128 KiB would be mmap'd, and freeing the old one raises glibc's trim
    /// threshold for good, so every thread's malloc arena kept ~1 MiB it no longer used.
    tasks: HashMap<String, Box<Entry>>,
    /// Task ids, oldest first.
    order: VecDeque<String>,
    next_seq: u64,
    data_bytes: usize,
    /// Who listens to which running task (streams); dropped when it ends.
    watchers: HashMap<String, Vec<Watcher>>,
}

pub struct TaskStore {
    inner: Mutex<Inner>,
    capacity: usize,
    max_data_bytes: usize,
}

/// Which tasks `ListTasks` wants.
#[derive(Debug, Default)]
pub struct Filter {
    /// Whose tasks: only the caller's own are ever listed.
    pub owner: String,
    pub context_id: Option<String>,
    pub state: Option<TaskState>,
    pub status_after_millis: Option<u64>,
    /// Only tasks whose status sequence is below this (the page token).
    pub before_seq: Option<u64>,
}

pub struct Page {
    pub tasks: Vec<Task>,
    pub total: usize,
    /// Sequence of the last task on the page when more follow.
    pub next_seq: Option<u64>,
    /// Each task's sequence (the page token that continues after it).
    pub seqs: Vec<u64>,
}

impl TaskStore {
    pub fn new(capacity: usize) -> TaskStore {
        TaskStore::with_data_limit(capacity, MAX_DATA_BYTES)
    }

    pub fn with_data_limit(capacity: usize, max_data_bytes: usize) -> TaskStore {
        TaskStore {
            inner: Mutex::new(Inner {
                tasks: HashMap::with_capacity(capacity.max(1) + 1),
                order: VecDeque::with_capacity(capacity.max(1) + 1),
                next_seq: 1,
                data_bytes: 0,
                watchers: HashMap::new(),
            }),
            capacity: capacity.max(1),
            max_data_bytes,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds a task of caller `owner`, evicting the oldest terminal task (else the oldest) when
    /// full.
    pub fn insert(&self, task: &Task, owner: &str, token: Option<Token>, status_millis: u64) {
        // Written out before the lock is taken: every request stores its task.
        let mut entry = Box::new(Entry::new(task, token, status_millis));
        entry.owner = owner.to_string();
        let mut inner = self.lock();
        self.put(&mut inner, entry, true);
    }

    /// Replaces a task (a status change). Returns false if it was evicted meanwhile.
    /// Subscribers hear its artifacts, then its status; a terminal status ends their streams.
    /// A create's token goes to the first subscriber that takes the artifacts (it is then
    /// delivered), else it stays for the first `GetTask` / `ListTasks` that shows them.
    pub fn update(&self, task: &Task, token: Option<Token>, status_millis: u64) -> bool {
        let mut entry = Box::new(Entry::new(task, token, status_millis));
        let mut inner = self.lock();
        let Some(owner) = inner.tasks.get(&task.id).map(|e| e.owner.clone()) else {
            inner.watchers.remove(&task.id);
            return false;
        };
        entry.owner = owner;
        self.put(&mut inner, entry, false);
        let mut watchers = inner.watchers.remove(&task.id).unwrap_or_default();
        let Some(entry) = inner.tasks.get_mut(&task.id) else {
            return true;
        };
        watchers.retain(|w| {
            let mut heard = true;
            for artifact in &task.artifacts {
                let mut artifact = artifact.clone();
                if let Some(token) = entry.token.as_ref() {
                    with_token_in(&mut artifact, token);
                }
                heard = w.send(Update::Artifact(artifact), &task.id);
                if heard {
                    entry.token = None;
                } else {
                    break;
                }
            }
            heard && w.send(Update::Status(task.status.clone()), &task.id)
        });
        // Streams of a task still running listen on.
        if !task.status.state.is_terminal() && !watchers.is_empty() {
            inner.watchers.insert(task.id.clone(), watchers);
        }
        true
    }

    /// A step of a running task: its status (still working) says what happened, and its
    /// subscribers hear it. Nothing for a task that is gone or already finished.
    pub fn progress(&self, id: &str, status: TaskStatus) {
        let mut inner = self.lock();
        let next = inner.next_seq;
        let Some(entry) = inner.tasks.get_mut(id) else {
            return;
        };
        if entry.task.status.state.is_terminal() {
            return;
        }
        entry.seq = next;
        inner.next_seq += 1;
        if let Some(watchers) = inner.watchers.get_mut(id) {
            // A stream that left STREAM_BACKLOG changes unread is let go (it ends when
            // it has read what it has): memory stays bounded, the task goes on.
            watchers.retain(|w| w.send(Update::Status(status.clone()), id));
        }
        if let Some(entry) = inner.tasks.get_mut(id) {
            entry.task.status = status;
        }
    }

    /// A step of a running task that its subscribers hear but its status does not keep (a
    /// watch's snapshot: a thousand `added` before the `synced` it keeps), written out as its
    /// `StreamResponse`. It is moved to the last subscriber, copied only for the others.
    pub fn pass(&self, id: &str, status: Box<RawValue>) {
        let mut inner = self.lock();
        let running = inner
            .tasks
            .get(id)
            .is_some_and(|e| !e.task.status.state.is_terminal());
        let Some(watchers) = inner.watchers.get_mut(id).filter(|_| running) else {
            return;
        };
        let mut status = Some(status);
        let last = watchers.len().saturating_sub(1);
        let mut i = 0;
        watchers.retain(|w| {
            let update = match i == last {
                true => status.take(),
                false => status.clone(),
            };
            i += 1;
            update.is_some_and(|u| w.send(Update::Written(u), id))
        });
    }

    /// Waits while one of task `id`'s streams has [`PACE_HIGH`] changes unread, until it is
    /// down to [`PACE_LOW`], `until` passes, or `ended` is set: a task that sends many at once
    /// (a watch's snapshot) is paced to its slowest stream, so a stream that reads is never
    /// let go for what arrived all at once.
    pub fn wait_for_room(&self, id: &str, until: Instant, ended: &Mutex<Option<String>>) {
        let rooms: Vec<Arc<Room>> = {
            let inner = self.lock();
            match inner.watchers.get(id) {
                Some(ws) => ws.iter().filter(|w| w.full()).map(Watcher::room).collect(),
                None => return,
            }
        };
        for room in rooms {
            if !room.wait(until, ended) {
                return;
            }
        }
    }

    /// The task as it is now (without artifacts: a running task has none) and a receiver of
    /// its changes until it ends; `None` for an unknown task or another caller's.
    pub fn subscribe(&self, id: &str, owner: &str) -> Option<(Task, Updates)> {
        let mut inner = self.lock();
        let task = view(owned_by(inner.tasks.get_mut(id), owner)?, false);
        let (tx, updates) = updates::channel();
        if !task.status.state.is_terminal() {
            inner.watchers.entry(id.to_string()).or_default().push(tx);
        }
        Some((task, updates))
    }

    /// Stores `entry` as the newest status change; a new task also goes to the end of the
    /// eviction order. Then evicts what is over a bound.
    fn put(&self, inner: &mut Inner, mut entry: Box<Entry>, new: bool) {
        entry.seq = inner.next_seq;
        inner.next_seq += 1;
        let id = entry.task.id.clone();
        inner.data_bytes += entry.data_bytes;
        if let Some(old) = inner.tasks.insert(id.clone(), entry) {
            inner.data_bytes -= old.data_bytes;
            if new {
                inner.order.retain(|o| *o != id);
            }
        }
        if new {
            inner.order.push_back(id.clone());
        }
        self.evict(inner, &id);
    }

    /// Drops the oldest terminal tasks (else the oldest) while over a bound; never `keep`.
    fn evict(&self, inner: &mut Inner, keep: &str) {
        while inner.tasks.len() > self.capacity || inner.data_bytes > self.max_data_bytes {
            let victim = inner
                .order
                .iter()
                .position(|id| {
                    id != keep
                        && inner
                            .tasks
                            .get(id)
                            .is_some_and(|e| e.task.status.state.is_terminal())
                })
                .or_else(|| inner.order.iter().position(|id| id != keep));
            let Some(id) = victim.and_then(|v| inner.order.remove(v)) else {
                break;
            };
            // Its streams end with it.
            inner.watchers.remove(&id);
            if let Some(e) = inner.tasks.remove(&id) {
                inner.data_bytes -= e.data_bytes;
            }
        }
    }

    /// The task as a reply shows it; with artifacts, a pending token is delivered now. `None`
    /// for an unknown task or another caller's (the same answer).
    pub fn get(&self, id: &str, owner: &str, with_artifacts: bool) -> Option<Task> {
        let mut inner = self.lock();
        let entry = owned_by(inner.tasks.get_mut(id), owner)?;
        Some(view(entry, with_artifacts))
    }

    /// Context id and state of a task of `owner`, without delivering anything.
    pub fn peek(&self, id: &str, owner: &str) -> Option<(String, TaskState)> {
        let inner = self.lock();
        inner
            .tasks
            .get(id)
            .filter(|e| e.owner == owner)
            .map(|e| (e.task.context_id.clone(), e.task.status.state))
    }

    /// Newest status first, `page_size` at most.
    pub fn list(&self, filter: &Filter, page_size: usize, with_artifacts: bool) -> Page {
        let mut inner = self.lock();
        let mut matching: Vec<(u64, String)> = inner
            .tasks
            .values()
            .filter(|e| {
                e.owner == filter.owner
                    && filter
                        .context_id
                        .as_ref()
                        .is_none_or(|c| &e.task.context_id == c)
                    && filter.state.is_none_or(|s| e.task.status.state == s)
                    && filter
                        .status_after_millis
                        .is_none_or(|after| e.status_millis > after)
            })
            .map(|e| (e.seq, e.task.id.clone()))
            .collect();
        let total = matching.len();
        matching.sort_unstable_by_key(|(seq, _)| std::cmp::Reverse(*seq));
        let rest: Vec<(u64, String)> = matching
            .into_iter()
            .filter(|(seq, _)| filter.before_seq.is_none_or(|b| *seq < b))
            .collect();
        let more = rest.len() > page_size;
        let page: Vec<(u64, String)> = rest.into_iter().take(page_size).collect();
        let next_seq = if more { page.last().map(|p| p.0) } else { None };
        let (seqs, tasks) = page
            .iter()
            .filter_map(|(seq, id)| {
                inner
                    .tasks
                    .get_mut(id)
                    .map(|e| (*seq, view(e, with_artifacts)))
            })
            .unzip();
        Page {
            tasks,
            total,
            next_seq,
            seqs,
        }
    }

    pub fn len(&self) -> usize {
        self.lock().tasks.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The entry if it belongs to `owner` (a caller's key: a name, never a secret).
fn owned_by<'a>(entry: Option<&'a mut Box<Entry>>, owner: &str) -> Option<&'a mut Box<Entry>> {
    entry.filter(|e| e.owner == owner)
}

fn view(entry: &mut Entry, with_artifacts: bool) -> Task {
    let mut task = Task {
        artifacts: Vec::new(),
        ..entry.task.clone()
    };
    if !with_artifacts {
        return task;
    }
    task.artifacts = entry.task.artifacts.clone();
    if let Some(token) = entry.token.take() {
        with_token(&mut task, &token);
    }
    task
}

/// Puts a create's token into its reply data (`artifacts[0].parts[0].data.token`): the one
/// reply whose data is read back and written again (a create's data is one small worker).
pub fn with_token(task: &mut Task, token: &Token) {
    if let Some(artifact) = task.artifacts.first_mut() {
        with_token_in(artifact, token);
    }
}

fn with_token_in(artifact: &mut Artifact, token: &Token) {
    let Ok(Value::Object(mut data)) = serde_json::from_str::<Value>(artifact.data().get()) else {
        return;
    };
    data.insert("token".into(), Value::String(token.expose().to_string()));
    if let Ok(raw) = serde_json::value::to_raw_value(&data) {
        artifact.parts[0].data = raw;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const O: &str = "static:admin";
    use crate::a2a::types::{Artifact, DataPart, TaskStatus};
    use serde_json::json;

    fn task(id: &str, state: TaskState) -> Task {
        Task {
            id: id.into(),
            context_id: "ctx".into(),
            status: TaskStatus {
                state,
                timestamp: String::new(),
                message: None,
            },
            artifacts: vec![artifact(json!({"worker": {}}))],
            history: vec![],
            metadata: None,
        }
    }

    fn artifact(data: Value) -> Artifact {
        Artifact {
            artifact_id: "a".into(),
            name: "result".into(),
            parts: [DataPart {
                data: serde_json::value::to_raw_value(&data).unwrap(),
            }],
        }
    }

    fn data(task: &Task) -> Value {
        serde_json::from_str(task.artifacts[0].data().get()).unwrap()
    }

    #[test]
    fn reply_data_is_bounded_in_bytes_and_comes_back_as_it_went_in() {
        let big = |id: &str| {
            let mut t = task(id, TaskState::Completed);
            t.artifacts = vec![artifact(
                json!({"workers": [{"worker_id": id, "pad": "p".repeat(400)}]}),
            )];
            t
        };
        let store = TaskStore::with_data_limit(100, 1500);
        for i in 0..10 {
            store.insert(&big(&format!("t{i}")), O, None, i);
        }
        assert_eq!(store.len(), 3, "about 450 bytes each, 1500 at most");
        assert!(store.get("t6", O, true).is_none());
        let back = store.get("t9", O, true).unwrap();
        assert_eq!(
            serde_json::to_value(&back).unwrap(),
            serde_json::to_value(big("t9")).unwrap(),
            "parts, order and data unchanged"
        );
        // A working task is never evicted for a newer one's data.
        let store = TaskStore::with_data_limit(100, 500);
        store.insert(&task("working", TaskState::Working), O, None, 0);
        store.insert(&big("done1"), O, None, 1);
        store.insert(&big("done2"), O, None, 2);
        assert!(store.get("working", O, false).is_some());
        assert!(store.get("done2", O, true).is_some() && store.get("done1", O, false).is_none());
    }

    #[test]
    fn token_is_delivered_once_and_only_with_artifacts() {
        let store = TaskStore::new(4);
        let token = Token::from_secret("s3cr3t".into());
        store.insert(&task("t1", TaskState::Completed), O, Some(token), 1);
        let without = store.get("t1", O, false).unwrap();
        assert!(without.artifacts.is_empty());
        let first = store.get("t1", O, true).unwrap();
        assert_eq!(data(&first)["token"], "s3cr3t");
        assert_eq!(
            data(&first)["worker"],
            json!({}),
            "the rest of the data kept"
        );
        let second = store.get("t1", O, true).unwrap();
        assert!(data(&second).get("token").is_none());
    }

    #[test]
    fn a_passed_update_reaches_every_stream_and_is_not_kept() {
        let store = TaskStore::new(4);
        let mut t = task("w", TaskState::Working);
        t.artifacts.clear();
        store.insert(&t, O, None, 1);
        let (_, a) = store.subscribe("w", O).unwrap();
        let (_, b) = store.subscribe("w", O).unwrap();
        let raw = |t: &str| RawValue::from_string(t.into()).unwrap();
        store.pass("w", raw(r#"{"statusUpdate":{}}"#));
        for s in [&a, &b] {
            match s.try_recv() {
                Some(Update::Written(text)) => assert_eq!(text.get(), r#"{"statusUpdate":{}}"#),
                other => panic!("{other:?}"),
            }
        }
        let kept = store.get("w", O, false).unwrap();
        assert_eq!(kept.status, t.status, "the task's status is as it was");
        // A finished task passes nothing on.
        let mut done = t.clone();
        done.status.state = TaskState::Completed;
        store.update(&done, None, 2);
        while a.try_recv().is_some() {}
        store.pass("w", raw("{}"));
        assert!(a.try_recv().is_none());
    }

    #[test]
    fn bounded_evicting_terminal_tasks_first() {
        let store = TaskStore::new(2);
        store.insert(&task("working", TaskState::Working), O, None, 1);
        store.insert(&task("done", TaskState::Completed), O, None, 2);
        store.insert(&task("new", TaskState::Completed), O, None, 3);
        assert_eq!(store.len(), 2);
        assert!(store.peek("working", O).is_some());
        assert!(store.peek("done", O).is_none());
    }

    #[test]
    fn pages_newest_first() {
        let store = TaskStore::new(10);
        for i in 0..5 {
            store.insert(&task(&format!("t{i}"), TaskState::Completed), O, None, i);
        }
        let p1 = store.list(
            &Filter {
                owner: O.into(),
                ..Filter::default()
            },
            2,
            false,
        );
        assert_eq!(p1.total, 5);
        let ids: Vec<_> = p1.tasks.iter().map(|t| t.id.as_str()).collect();
        assert_eq!(ids, ["t4", "t3"]);
        let p2 = store.list(
            &Filter {
                owner: O.into(),
                before_seq: p1.next_seq,
                ..Filter::default()
            },
            2,
            false,
        );
        let ids: Vec<_> = p2.tasks.iter().map(|t| t.id.as_str()).collect();
        assert_eq!(ids, ["t2", "t1"]);
        let p3 = store.list(
            &Filter {
                owner: O.into(),
                before_seq: p2.next_seq,
                ..Filter::default()
            },
            2,
            false,
        );
        assert_eq!(p3.tasks.len(), 1);
        assert!(p3.next_seq.is_none());
    }

    #[test]
    fn another_callers_task_is_not_there() {
        let store = TaskStore::new(4);
        store.insert(&task("mine", TaskState::Working), O, None, 1);
        let other = "static:bob";
        assert!(store.get("mine", other, true).is_none());
        assert!(store.peek("mine", other).is_none());
        assert!(store.subscribe("mine", other).is_none());
        let theirs = Filter {
            owner: other.into(),
            ..Filter::default()
        };
        assert_eq!(store.list(&theirs, 10, false).total, 0);
        // A status change keeps the task its owner's.
        store.update(&task("mine", TaskState::Completed), None, 2);
        assert!(store.get("mine", other, true).is_none());
        assert!(store.get("mine", O, true).is_some());
    }
}
