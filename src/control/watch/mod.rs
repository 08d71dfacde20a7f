//! What happens to workers, for watchers (`watch`): one source per controller shared by every
//! watcher — the backend's own list, asked every [`INTERVAL`] while someone watches and at once
//! after this controller's own create and stop — diffed into events: `added`, `changed` (state
//! or reason moved), `suspended`, `resumed`, `renewed` (its expiry alone), `removed` (with why, when this controller stopped or reaped it). A watcher
//! first hears one `added` per existing worker (oldest first) and `synced`, then events as they
//! happen, in order per worker. Memory is bounded: a watcher that does not read [`BACKLOG`]
//! events is cut off (its stream ends saying so), never the source slowed; at most
//! `MAX_WATCHERS` watch at once.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use serde::Serialize;

mod follow;
use serde_json::value::RawValue;

use super::Filter;
use crate::backend::{Backend, Worker};
use crate::time::{now_millis, rfc3339_millis};

/// How often the workers are listed while someone watches.
pub const INTERVAL: Duration = Duration::from_secs(1);
/// Events a watcher may leave unread before it is cut off.
pub const BACKLOG: usize = 1024;
/// How long a stop's reason is kept for the removal it explains.
const REASON_TTL: Duration = Duration::from_secs(120);

/// A worker as the source last saw it, shared by every watcher's events: a snapshot of a
/// thousand workers for 64 watchers copies no worker, and each worker is written out as JSON
/// once (when the first event naming it is sent), not once per watcher.
#[derive(Debug, Clone)]
pub struct Seen(Arc<(Worker, OnceLock<Option<Box<RawValue>>>)>);

impl Seen {
    pub fn new(worker: Worker) -> Seen {
        Seen(Arc::new((worker, OnceLock::new())))
    }

    /// The worker written out as JSON (once, by whoever asks first).
    fn text(&self) -> Option<&RawValue> {
        self.0
             .1
            .get_or_init(|| serde_json::value::to_raw_value(&**self).ok())
            .as_deref()
    }
}

impl std::ops::Deref for Seen {
    type Target = Worker;
    fn deref(&self) -> &Worker {
        &self.0 .0
    }
}

impl PartialEq for Seen {
    fn eq(&self, other: &Seen) -> bool {
        **self == **other
    }
}

impl Eq for Seen {}

impl Serialize for Seen {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.text() {
            Some(text) => text.serialize(s),
            None => (**self).serialize(s),
        }
    }
}

/// One thing that happened to a worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Event {
    /// `added`, `changed`, `suspended`, `resumed`, `renewed`, `removed`, or `synced` (the
    /// end of the first snapshot).
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The worker as `list` shows it (never a token); `null` for `synced`.
    pub worker: Option<Seen>,
    /// Why, when known: the new reason of a `changed` worker, how a `removed` one went.
    pub reason: String,
    /// RFC 3339 UTC, milliseconds.
    pub at: String,
}

impl Event {
    fn new(kind: &'static str, worker: Option<Seen>, reason: String) -> Event {
        Event {
            kind,
            worker,
            reason,
            at: rfc3339_millis(now_millis()),
        }
    }
}

/// Why a watch cannot start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchError {
    /// `MAX_WATCHERS` watch already.
    Full(usize),
    /// The first list failed.
    Backend(String),
}

/// A watcher's side: the first snapshot, then events until it ends.
pub struct Subscription {
    pub snapshot: Vec<Event>,
    events: Receiver<Event>,
    /// Events sent and not read yet (counted, not reserved: an idle watcher costs little).
    pending: Arc<AtomicUsize>,
    /// Set when the source cut this watcher off (it did not read).
    pub cut_off: Arc<AtomicBool>,
    /// Set when this side goes: the source forgets the watcher at its next look.
    gone: Arc<AtomicBool>,
}

impl Subscription {
    pub fn recv_timeout(&self, timeout: Duration) -> Result<Event, RecvTimeoutError> {
        let event = self.events.recv_timeout(timeout)?;
        self.pending.fetch_sub(1, Ordering::SeqCst);
        Ok(event)
    }

    pub fn try_recv(&self) -> Result<Event, TryRecvError> {
        let event = self.events.try_recv()?;
        self.pending.fetch_sub(1, Ordering::SeqCst);
        Ok(event)
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.gone.store(true, Ordering::SeqCst);
    }
}

struct Watcher {
    filter: Filter,
    tx: Sender<Event>,
    pending: Arc<AtomicUsize>,
    cut_off: Arc<AtomicBool>,
    gone: Arc<AtomicBool>,
}

impl Watcher {
    fn ended(&self) -> bool {
        self.cut_off.load(Ordering::SeqCst) || self.gone.load(Ordering::SeqCst)
    }
}

#[derive(Default)]
struct State {
    /// The workers as last listed (`None` until the first list).
    known: Option<BTreeMap<String, Seen>>,
    watchers: Vec<Watcher>,
    /// Why this controller stopped a worker, until its removal is seen.
    reasons: HashMap<String, (String, Instant)>,
    /// A list was asked for before the next interval.
    poked: bool,
    running: bool,
    /// A thread follows the engine's change stream.
    following: bool,
    /// Look once more shortly: a poked look found no change (an engine may tell of one a
    /// moment before its list shows it).
    settle: bool,
}

/// How soon the source looks once more after a poked look that found no change.
const SETTLE: Duration = Duration::from_millis(150);

pub struct Hub {
    backend: Arc<dyn Backend>,
    max_watchers: usize,
    state: Mutex<State>,
    wake: Condvar,
}

impl Hub {
    pub fn new(backend: Arc<dyn Backend>, max_watchers: usize) -> Arc<Hub> {
        Arc::new(Hub {
            backend,
            max_watchers,
            state: Mutex::new(State::default()),
            wake: Condvar::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts watching: the workers as they are now (matching `filter`) and `synced`, then
    /// events. The source starts with the first watcher and stops after the last.
    pub fn subscribe(self: &Arc<Hub>, filter: Filter) -> Result<Subscription, WatchError> {
        let mut state = self.lock();
        state.watchers.retain(|w| !w.ended());
        if state.watchers.len() >= self.max_watchers {
            return Err(WatchError::Full(self.max_watchers));
        }
        // The source's last list when it runs (a hundred watchers cost one list per
        // interval, not one each), a fresh one when it does not.
        if state.known.is_none() {
            self.refresh(&mut state).map_err(WatchError::Backend)?;
        }
        let snapshot = snapshot_of(&state, &filter);
        let (tx, events) = channel();
        let pending = Arc::new(AtomicUsize::new(0));
        let cut_off = Arc::new(AtomicBool::new(false));
        let gone = Arc::new(AtomicBool::new(false));
        state.watchers.push(Watcher {
            filter,
            tx,
            pending: Arc::clone(&pending),
            cut_off: Arc::clone(&cut_off),
            gone: Arc::clone(&gone),
        });
        if !state.running {
            self.start_source(&mut state)?;
        }
        Ok(Subscription {
            snapshot,
            events,
            pending,
            cut_off,
            gone,
        })
    }

    /// Starts the source: the lister, and the follower of the engine's change stream when it
    /// has one (without, listing alone).
    fn start_source(self: &Arc<Hub>, state: &mut State) -> Result<(), WatchError> {
        state.running = true;
        let hub = Arc::clone(self);
        if let Err(e) = thread::Builder::new()
            .name("watch".into())
            .spawn(move || hub.run())
        {
            state.running = false;
            state.watchers.pop();
            return Err(WatchError::Backend(format!(
                "cannot start the watch source: {e}"
            )));
        }
        if self.backend.abilities().changes.is_some() && !state.following {
            state.following = true;
            let hub = Arc::clone(self);
            let spawned = thread::Builder::new()
                .name("watch-events".into())
                .spawn(move || hub.follow());
            if let Err(e) = spawned {
                state.following = false;
                log::warn!(
                    "watch: cannot follow the engine's events ({e}); listing every second only"
                );
            }
        }
        Ok(())
    }

    /// This controller is about to stop (or reap) a worker: its removal will say `reason`
    /// (said before the stop, since the engine may tell of the removal before the stop returns).
    pub fn stopping(&self, worker_id: &str, reason: &str) {
        let mut state = self.lock();
        if state.running {
            state
                .reasons
                .insert(worker_id.to_string(), (reason.to_string(), Instant::now()));
        }
    }

    /// The stop said by [`Hub::stopping`] is over: done, the source looks again now; failed,
    /// the reason is forgotten.
    pub fn stopped(&self, worker_id: &str, done: bool) {
        let mut state = self.lock();
        if !done {
            state.reasons.remove(worker_id);
            return;
        }
        if state.running {
            state.poked = true;
            drop(state);
            self.wake.notify_all();
        }
    }

    /// Something changed (a create): look again now, if anyone watches.
    pub fn poke(&self) {
        let mut state = self.lock();
        if state.running {
            state.poked = true;
            drop(state);
            self.wake.notify_all();
        }
    }

    /// Why worker `id` is gone: this controller's stop or reap, else someone else's.
    fn removal_reason(&self, state: &mut State, id: &str) -> String {
        state
            .reasons
            .remove(id)
            .map(|(r, _)| r)
            .unwrap_or_else(|| "it is gone (removed outside this controller)".into())
    }

    /// The source: a list every interval (or when poked) while someone watches.
    fn run(&self) {
        let mut state = self.lock();
        loop {
            state.watchers.retain(|w| !w.ended());
            if state.watchers.is_empty() {
                state.running = false;
                state.known = None;
                state.reasons.clear();
                return;
            }
            if !state.poked {
                let wait = if state.settle { SETTLE } else { INTERVAL };
                let (s, _) = self
                    .wake
                    .wait_timeout(state, wait)
                    .unwrap_or_else(|p| p.into_inner());
                state = s;
            }
            // A poked look that found no change is followed by one more, a moment later.
            let poked = std::mem::take(&mut state.poked);
            let found = match self.refresh(&mut state) {
                Ok(n) => n,
                Err(why) => {
                    log::debug!("watch: the workers cannot be listed now: {why}");
                    0
                }
            };
            state.settle = poked && found == 0;
        }
    }

    /// Lists the workers and tells every watcher what changed since the last list; how many
    /// changes.
    fn refresh(&self, state: &mut State) -> Result<usize, String> {
        let listed = self.backend.list().map_err(|e| e.to_string())?;
        // A worker listed as it was keeps its shared self (and the JSON written of it).
        let before = state.known.take();
        let now: BTreeMap<String, Seen> = listed
            .into_iter()
            .map(|w| {
                let seen = match before.as_ref().and_then(|b| b.get(&w.worker_id)) {
                    Some(old) if **old == w => old.clone(),
                    _ => Seen::new(w),
                };
                (seen.worker_id.clone(), seen)
            })
            .collect();
        state.known = Some(now.clone());
        let Some(before) = before else {
            return Ok(0);
        };
        state.reasons.retain(|_, (_, at)| at.elapsed() < REASON_TTL);
        let mut events = Vec::new();
        for (id, w) in &now {
            match before.get(id) {
                None => events.push(Event::new("added", Some(w.clone()), String::new())),
                Some(old) if old != w => events.push(Event::new(
                    change_of(old, w),
                    Some(w.clone()),
                    w.reason.clone(),
                )),
                Some(_) => {}
            }
        }
        for (id, w) in &before {
            if !now.contains_key(id) {
                let reason = self.removal_reason(state, id);
                events.push(Event::new("removed", Some(w.clone()), reason));
            }
        }
        let found = events.len();
        self.tell(state, events);
        Ok(found)
    }

    /// Sends `events` to every watcher they concern, in order.
    fn tell(&self, state: &mut State, events: Vec<Event>) {
        for event in events {
            for watcher in &state.watchers {
                let relevant = event
                    .worker
                    .as_ref()
                    .is_none_or(|w| watcher.filter.matches(w));
                if !relevant || watcher.ended() {
                    continue;
                }
                if watcher.pending.load(Ordering::SeqCst) >= BACKLOG {
                    log::warn!("watch: a watcher left {BACKLOG} events unread and was cut off");
                    watcher.cut_off.store(true, Ordering::SeqCst);
                    continue;
                }
                watcher.pending.fetch_add(1, Ordering::SeqCst);
                if watcher.tx.send(event.clone()).is_err() {
                    watcher.gone.store(true, Ordering::SeqCst);
                }
            }
        }
        // A cut-off watcher's sender goes, so its reader sees the end after the backlog.
        state.watchers.retain(|w| !w.ended());
    }
}

/// What moved between two looks at one worker: `suspended` and `resumed` (into and out of
/// that state), `renewed` (only its expiry), else `changed`.
fn change_of(old: &Worker, new: &Worker) -> &'static str {
    use crate::backend::WorkerState::Suspended;
    match (old.state == Suspended, new.state == Suspended) {
        (false, true) => "suspended",
        (true, false) => "resumed",
        _ if old.state == new.state
            && old.reason == new.reason
            && old.expires_at != new.expires_at =>
        {
            "renewed"
        }
        _ => "changed",
    }
}

/// The workers known now that match `filter`, oldest first, as `added` events, then `synced`:
/// one time for the whole snapshot, what the workers were at that moment.
fn snapshot_of(state: &State, filter: &Filter) -> Vec<Event> {
    // Ordered by reference (no key copied per comparison).
    let mut matching: Vec<&Seen> = state
        .known
        .as_ref()
        .map(|k| k.values().filter(|w| filter.matches(w)).collect())
        .unwrap_or_default();
    matching.sort_by(|a, b| (&a.created_at, &a.worker_id).cmp(&(&b.created_at, &b.worker_id)));
    let at = rfc3339_millis(now_millis());
    let mut snapshot: Vec<Event> = matching
        .into_iter()
        .map(|w| Event {
            kind: "added",
            worker: Some(w.clone()),
            reason: String::new(),
            at: at.clone(),
        })
        .collect();
    snapshot.push(Event {
        kind: "synced",
        worker: None,
        reason: String::new(),
        at,
    });
    snapshot
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::fake::FakeBackend;
    use crate::backend::{BackendKind, Change, WorkerState};

    #[test]
    fn a_suspend_a_resume_and_a_renew_are_told_by_name() {
        let w = Worker::new(BackendKind::Docker, "w", "t", WorkerState::Running, "");
        let suspended = Worker {
            state: WorkerState::Suspended,
            reason: "suspended at x".into(),
            ..w.clone()
        };
        assert_eq!(change_of(&w, &suspended), "suspended");
        assert_eq!(change_of(&suspended, &w), "resumed");
        assert_eq!(change_of(&w, &w.clone().expiring(Some(1))), "renewed");
        let exited = Worker {
            state: WorkerState::Exited,
            ..w.clone()
        };
        assert_eq!(change_of(&w, &exited), "changed");
    }

    #[test]
    fn a_watcher_that_does_not_read_is_cut_off_and_the_others_go_on() {
        // Every list holds one more worker than the last.
        let backend = Arc::new(FakeBackend::default());
        let hub = Hub::new(backend.clone(), 4);
        let idle = hub.subscribe(Filter::default()).unwrap();
        let reader = hub.subscribe(Filter::default()).unwrap();
        let mut heard = 0;
        for i in 0..BACKLOG + 10 {
            backend.add_by_hand(&format!("t{i}"), "s");
            let mut state = hub.lock();
            hub.refresh(&mut state).unwrap();
            drop(state);
            while reader.try_recv().is_ok() {
                heard += 1;
            }
        }
        assert!(
            idle.cut_off.load(Ordering::SeqCst),
            "the idle watcher is cut off"
        );
        assert!(!reader.cut_off.load(Ordering::SeqCst));
        assert!(
            heard >= BACKLOG + 9,
            "the reader heard every event: {heard}"
        );
        // What the idle one has is bounded, and then its stream ends.
        let mut backlog = 0;
        while idle.try_recv().is_ok() {
            backlog += 1;
        }
        assert_eq!(backlog, BACKLOG);
        assert!(matches!(idle.try_recv(), Err(TryRecvError::Disconnected)));
        assert_eq!(hub.lock().watchers.len(), 1);
    }

    #[test]
    fn at_most_max_watchers_and_a_gone_one_frees_its_place() {
        let hub = Hub::new(Arc::new(FakeBackend::default()), 2);
        let a = hub.subscribe(Filter::default()).unwrap();
        let _b = hub.subscribe(Filter::default()).unwrap();
        assert!(matches!(
            hub.subscribe(Filter::default()),
            Err(WatchError::Full(2))
        ));
        drop(a);
        assert!(hub.subscribe(Filter::default()).is_ok());
    }

    fn worker(id: &str, state: WorkerState) -> Worker {
        Worker::new(
            BackendKind::Docker,
            id,
            format!("task {id}"),
            state,
            "2026-12-01T00:00:00Z",
        )
    }

    #[test]
    fn a_change_tied_to_one_worker_reads_that_worker_and_tells_it_in_order() {
        // A change stream the test drives: its workers are what the test put in, and it
        // records which workers it was asked for one by one.
        let backend = Arc::new(FakeBackend::default());
        backend.streaming.store(true, Ordering::SeqCst);
        let (tell, changes) = std::sync::mpsc::channel();
        *backend.changes.lock().unwrap() = Some(changes);
        backend.put(worker("w1", WorkerState::Running));
        let hub = Hub::new(backend.clone(), 4);
        let sub = hub.subscribe(Filter::default()).unwrap();
        assert_eq!(sub.snapshot.len(), 2, "w1 and synced");
        let next = || sub.recv_timeout(Duration::from_secs(10)).unwrap();

        // It ends: the one worker is read, and its change told.
        let set = |id: &str, w: Option<Worker>| match w {
            Some(w) => backend.put(w),
            None => backend.remove_by_hand(id),
        };
        let mut exited = worker("w1", WorkerState::Exited);
        exited.reason = "exited with code 137".into();
        set("w1", Some(exited));
        tell.send(Change::Worker("w1".into())).unwrap();
        let e = next();
        assert_eq!(
            (e.kind, e.reason.as_str()),
            ("changed", "exited with code 137")
        );
        assert_eq!(
            backend
                .looked_at
                .lock()
                .unwrap()
                .first()
                .map(String::as_str),
            Some("w1")
        );

        // A change that names no worker lists them all: w2 is added.
        set("w2", Some(worker("w2", WorkerState::Running)));
        tell.send(Change::Any).unwrap();
        let e = next();
        assert_eq!(
            (e.kind, e.worker.unwrap().worker_id.as_str()),
            ("added", "w2")
        );

        // Gone: removed, with why; told once, though its change is told twice.
        set("w1", None);
        tell.send(Change::Worker("w1".into())).unwrap();
        tell.send(Change::Worker("w1".into())).unwrap();
        let e = next();
        assert_eq!(e.kind, "removed");
        assert_eq!(e.reason, "it is gone (removed outside this controller)");

        // A worker that cannot be read now is listed instead: nothing is lost.
        backend.refuse_looks.store(true, Ordering::SeqCst);
        set("w2", Some(worker("w2", WorkerState::Exited)));
        tell.send(Change::Worker("w2".into())).unwrap();
        let e = next();
        assert_eq!(
            (e.kind, e.worker.unwrap().state),
            ("changed", WorkerState::Exited)
        );
        assert!(sub.try_recv().is_err(), "nothing invented");
    }
}
