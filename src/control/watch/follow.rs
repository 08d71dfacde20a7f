//! The engine's change stream, followed for the watch source: each change that names a
//! worker reads that worker alone (one engine call) and tells what became of it; any other
//! change, or a worker that cannot be read now, has the source list instead. After the stream
//! breaks off or ends, the source lists too (what happened meanwhile) and follows again.

use super::{Event, Hub, Seen, State, INTERVAL};
use crate::backend::{Change, Changes};
use std::thread;

impl Hub {
    /// Follows the engine's change stream while someone watches: a change the engine ties to
    /// one worker is read at once (that worker alone, under the source's lock, so it is never
    /// older than a list made before it nor overtakes one made after); any other change makes
    /// the source list. After a reconnect it lists too (what happened meanwhile).
    pub(super) fn follow(&self) {
        loop {
            let changes = match self.backend.abilities().changes {
                Some(changes) if self.lock().running => changes,
                _ => {
                    self.lock().following = false;
                    return;
                }
            };
            let followed = changes.follow(&mut |change| {
                let mut state = self.lock();
                if !state.running {
                    return false;
                }
                let looked = match change {
                    Change::Worker(id) if state.known.is_some() => {
                        self.look_at(changes, &mut state, &id)
                    }
                    _ => Err(String::new()),
                };
                if let Err(why) = looked {
                    if !why.is_empty() {
                        log::debug!("watch: a changed worker cannot be read now: {why}");
                    }
                    state.poked = true;
                    drop(state);
                    self.wake.notify_all();
                }
                true
            });
            if let Err(e) = followed {
                log::debug!("watch: the engine's events broke off ({e}); following again");
                thread::sleep(INTERVAL);
            }
            self.poke();
        }
    }

    /// Reads one worker the engine said changed, and tells the watchers what did.
    pub(super) fn look_at(
        &self,
        changes: &dyn Changes,
        state: &mut State,
        worker_id: &str,
    ) -> Result<usize, String> {
        let now = changes.worker(worker_id).map_err(|e| e.to_string())?;
        let known = state.known.as_mut().ok_or_else(String::new)?;
        let event = match now {
            Some(w) => {
                let kind = match known.get(worker_id) {
                    None => "added",
                    Some(old) if **old != w => super::change_of(old, &w),
                    Some(_) => return Ok(0),
                };
                let reason = if kind != "added" {
                    w.reason.clone()
                } else {
                    String::new()
                };
                let w = Seen::new(w);
                known.insert(worker_id.to_string(), w.clone());
                Event::new(kind, Some(w), reason)
            }
            None => {
                let Some(gone) = known.remove(worker_id) else {
                    return Ok(0);
                };
                let reason = self.removal_reason(state, worker_id);
                Event::new("removed", Some(gone), reason)
            }
        };
        self.tell(state, vec![event]);
        Ok(1)
    }
}
