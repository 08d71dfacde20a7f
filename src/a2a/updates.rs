//! A running task's changes on their way to its streams: one channel per stream, its unread
//! changes counted (a stream that does not read is let go after [`STREAM_BACKLOG`]), and a
//! sender of many changes paced to its slowest stream ([`PACE_HIGH`], [`PACE_LOW`]).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use serde_json::value::RawValue;

use super::types::{Artifact, TaskStatus};

/// A change of a running task, as its subscribers hear it.
#[derive(Debug, Clone)]
pub enum Update {
    Status(TaskStatus),
    Artifact(Artifact),
    /// A status update its task does not keep ([`TaskStore::pass`]), already written out as
    /// the JSON text of the `StreamResponse` a stream sends: framed as it is, one block to free.
    Written(Box<RawValue>),
}

/// Changes a stream may leave unread before it is let go.
pub const STREAM_BACKLOG: usize = 1024;

/// A task sending many changes at once (a watch's snapshot) waits while one of its streams
/// has this many unread ([`TaskStore::wait_for_room`]), and goes on when it is down to
/// [`PACE_LOW`]: the stream is fed at its reader's pace, a few dozen changes held at a time,
/// and its writer wakes the sender once per batch, not once per change.
pub const PACE_HIGH: usize = 64;
/// See [`PACE_HIGH`].
pub const PACE_LOW: usize = 32;

/// A stream's count of unread changes, which a paced sender waits on.
#[derive(Default)]
pub(super) struct Room {
    pending: AtomicUsize,
    /// The stream's reader is gone: nobody will make room.
    gone: std::sync::atomic::AtomicBool,
    lock: Mutex<()>,
    read: Condvar,
}

impl Room {
    fn full(&self) -> bool {
        self.pending.load(Ordering::SeqCst) >= PACE_HIGH && !self.gone.load(Ordering::SeqCst)
    }

    /// Wakes a paced sender (under the lock, so a sender between its look and its wait is
    /// not missed).
    fn wake(&self) {
        let _held = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        self.read.notify_all();
    }

    /// Waits until this stream has room, or `until`, or `ended` says the task is over;
    /// false if it had to stop waiting without room.
    pub(super) fn wait(&self, until: Instant, ended: &Mutex<Option<String>>) -> bool {
        let mut held = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        while self.full() {
            let now = Instant::now();
            if now >= until || ended.lock().unwrap_or_else(|p| p.into_inner()).is_some() {
                return false;
            }
            let slice = (until - now).min(Duration::from_millis(100));
            held = match self.read.wait_timeout(held, slice) {
                Ok((held, _)) => held,
                Err(p) => p.into_inner().0,
            };
        }
        true
    }
}

/// One stream's end of a task's changes: sent ones counted, so a stream that does not read
/// is let go after [`STREAM_BACKLOG`] without its queue being reserved up front.
pub(super) struct Watcher {
    tx: Sender<Update>,
    room: Arc<Room>,
}

impl Watcher {
    /// Whether its stream has [`PACE_HIGH`] unread: a paced sender waits for room.
    pub(super) fn full(&self) -> bool {
        self.room.full()
    }

    /// Its stream's count, for a sender to wait on.
    pub(super) fn room(&self) -> Arc<Room> {
        Arc::clone(&self.room)
    }

    /// `false` when the stream is gone or left too much unread (it is then let go).
    pub(super) fn send(&self, update: Update, id: &str) -> bool {
        if self.room.pending.load(Ordering::SeqCst) >= STREAM_BACKLOG {
            log::warn!("a stream of task {id} left {STREAM_BACKLOG} updates unread and was let go");
            return false;
        }
        self.room.pending.fetch_add(1, Ordering::SeqCst);
        self.tx.send(update).is_ok()
    }
}

/// What a stream reads a task's changes from.
pub struct Updates {
    rx: Receiver<Update>,
    room: Arc<Room>,
}

impl Updates {
    pub fn recv_timeout(&self, timeout: Duration) -> Result<Update, RecvTimeoutError> {
        let update = self.rx.recv_timeout(timeout)?;
        self.taken();
        Ok(update)
    }

    /// The next change if one is there already (a stream writes what has queued up in one
    /// go); `None` when there is none now, or the task's changes have ended.
    pub fn try_recv(&self) -> Option<Update> {
        let update = self.rx.try_recv().ok()?;
        self.taken();
        Some(update)
    }

    /// One change read: the task waiting for room is woken when its stream is down to
    /// [`PACE_LOW`].
    fn taken(&self) {
        if self.room.pending.fetch_sub(1, Ordering::SeqCst) == PACE_LOW + 1 {
            self.room.wake();
        }
    }

    /// A stream of nothing (a task that had ended before it was subscribed to).
    pub fn ended() -> Updates {
        Updates {
            rx: std::sync::mpsc::channel().1,
            room: Arc::default(),
        }
    }
}

impl Drop for Updates {
    fn drop(&mut self) {
        self.room.gone.store(true, Ordering::SeqCst);
        self.room.wake();
    }
}

/// A new stream of a task's changes: the task's end, and the stream's.
pub(super) fn channel() -> (Watcher, Updates) {
    let (tx, rx) = std::sync::mpsc::channel();
    let room = Arc::new(Room::default());
    let updates = Updates {
        rx,
        room: Arc::clone(&room),
    };
    (Watcher { tx, room }, updates)
}
