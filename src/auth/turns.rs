//! Turns: the requests that run at once, shared fairly between callers. The places of
//! [`super::limits`] bound what one caller holds; they do not stop its 32 requests in flight
//! from taking every core while another caller's one request waits behind them. So, while
//! more than one caller has asked something within [`ACTIVE`], at most `width` requests (the
//! cores) run their handlers at once, and a freed turn goes to the waiting caller that runs
//! the fewest now (the oldest first among equals): a caller listing once every 100 ms waits for
//! one turn to end, not for a flood's queue. A caller alone is never held back (nothing to be
//! fair to). A request that has run for [`YOUNG`] no longer counts (it is waiting on an engine,
//! a worker or another replica, not on a core), so a slow create never holds a turn.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

/// How long a caller counts as active after its last request.
pub const ACTIVE: Duration = Duration::from_secs(1);
/// How long a running request counts against the turns.
pub const YOUNG: Duration = Duration::from_millis(20);

struct Waiting {
    ticket: u64,
    key: String,
    thread: Thread,
}

#[derive(Default)]
struct State {
    next: u64,
    /// Running now: ticket, caller key, since when.
    running: Vec<(u64, String, Instant)>,
    waiting: VecDeque<Waiting>,
    /// Each caller's last request.
    seen: HashMap<String, Instant>,
}

impl State {
    fn young(&self, now: Instant, key: Option<&str>, young: Duration) -> usize {
        self.running
            .iter()
            .filter(|(_, k, at)| key.is_none_or(|key| k == key) && now - *at < young)
            .count()
    }

    /// Whether another caller than the one alone here asked within `active`.
    fn shared(&mut self, now: Instant, active: Duration) -> bool {
        if self.seen.len() > 1 {
            self.seen.retain(|_, at| now - *at < active);
        }
        self.seen.len() > 1
    }

    /// Gives turns to waiters while there are turns to give.
    fn admit(&mut self, t: &Turns, now: Instant) {
        let (width, young) = (t.width, t.young);
        while !self.waiting.is_empty() {
            let shared = self.shared(now, t.active);
            if shared && self.young(now, None, young) >= width {
                return;
            }
            let pick = match shared {
                false => 0,
                true => (0..self.waiting.len())
                    .min_by_key(|&i| (self.young(now, Some(&self.waiting[i].key), young), i))
                    .unwrap_or(0),
            };
            let Some(w) = self.waiting.remove(pick) else {
                return;
            };
            self.running.push((w.ticket, w.key, now));
            w.thread.unpark();
        }
    }
}

pub struct Turns {
    width: usize,
    young: Duration,
    active: Duration,
    state: Mutex<State>,
}

/// A turn held; the next one is given when it drops.
pub struct Turn<'a> {
    turns: &'a Turns,
    ticket: u64,
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        let mut state = self.turns.lock();
        state.running.retain(|(t, _, _)| *t != self.ticket);
        state.admit(self.turns, Instant::now());
    }
}

impl Turns {
    /// At most `width` requests at once (0 is taken as 1) while more than one caller asked
    /// within `active`, each request counted for its first `young`.
    pub fn new(width: usize, young: Duration, active: Duration) -> Turns {
        Turns {
            width: width.max(1),
            young,
            active,
            state: Mutex::default(),
        }
    }

    /// One per core (at least 2), each request counted for its first [`YOUNG`], callers
    /// sharing for [`ACTIVE`] after they asked.
    pub fn per_core() -> Turns {
        let cores = thread::available_parallelism().map_or(2, |n| n.get());
        Turns::new(cores.max(2), YOUNG, ACTIVE)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits for a turn for the caller `key`; it is held until the [`Turn`] drops.
    pub fn turn(&self, key: &str) -> Turn<'_> {
        let mut state = self.lock();
        let now = Instant::now();
        state.seen.insert(key.to_string(), now);
        let ticket = state.next;
        state.next += 1;
        state.waiting.push_back(Waiting {
            ticket,
            key: key.to_string(),
            thread: thread::current(),
        });
        state.admit(self, now);
        // Given at a release, or when a running request grows old (looked at every `young`).
        while state.waiting.iter().any(|w| w.ticket == ticket) {
            drop(state);
            thread::park_timeout(self.young);
            state = self.lock();
            state.admit(self, Instant::now());
        }
        Turn {
            turns: self,
            ticket,
        }
    }

    /// Requests running now and waiting now (for tests).
    pub fn counts(&self) -> (usize, usize) {
        let state = self.lock();
        (state.running.len(), state.waiting.len())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    const LONG: Duration = Duration::from_secs(600);

    fn waiting(turns: &Turns, n: usize) {
        while turns.counts().1 < n {
            thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn a_caller_alone_is_never_held_back() {
        let turns = Turns::new(1, LONG, LONG);
        let held: Vec<Turn> = (0..10).map(|_| turns.turn("alice")).collect();
        assert_eq!(turns.counts(), (10, 0));
        drop(held);
        assert_eq!(turns.counts(), (0, 0));
    }

    #[test]
    fn while_callers_share_a_freed_turn_goes_to_the_caller_running_fewest() {
        let turns = Arc::new(Turns::new(2, LONG, LONG));
        // Bob asked a moment ago: from now on the callers share.
        drop(turns.turn("bob"));
        let a1 = turns.turn("alice");
        let a2 = turns.turn("alice");
        let order = Arc::new(Mutex::new(Vec::new()));
        let spawn = |key: &'static str| {
            let (turns, order) = (Arc::clone(&turns), Arc::clone(&order));
            thread::spawn(move || {
                let _turn = turns.turn(key);
                order.lock().unwrap().push(key);
            })
        };
        // Two more of alice's wait, then bob's one: both turns are alice's.
        let mut waiters = vec![spawn("alice"), spawn("alice")];
        waiting(&turns, 2);
        waiters.push(spawn("bob"));
        waiting(&turns, 3);
        assert!(
            order.lock().unwrap().is_empty(),
            "nobody ran past the turns"
        );
        // One of alice's ends: bob's goes next, ahead of alice's older ones; then hers, one
        // at a time beside a2.
        drop(a1);
        for w in waiters {
            w.join().unwrap();
        }
        assert_eq!(*order.lock().unwrap(), ["bob", "alice", "alice"]);
        drop(a2);
        assert_eq!(turns.counts(), (0, 0));
    }

    #[test]
    fn a_request_running_long_no_longer_holds_its_turn() {
        let young = Duration::from_millis(30);
        let turns = Turns::new(1, young, LONG);
        drop(turns.turn("bob"));
        let started = Instant::now();
        let slow = turns.turn("alice");
        let next = turns.turn("bob");
        assert!(started.elapsed() >= young);
        assert_eq!(turns.counts(), (2, 0));
        drop((slow, next));
    }
}
