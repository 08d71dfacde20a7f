//! How containers ended lately, as the engine's `/events` told it, for `list`.
//!
//! Docker (28 here) lists a container `running` for about 100 ms after its `die` event, and an
//! inspect of it waits that long too (the engine is still handling the exit; measured on this
//! machine). The `die` itself says how the container ended (its `exitCode`, and an `oom` event
//! before it when the kernel killed it for memory), so a list takes that word for a container
//! it still shows running: the watch source's look right after the `die` sees the end, with no
//! wait and no inspect. Events of one container arrive in order: its `start` (run again) or
//! `destroy` forgets the `die`, so a `die` of an earlier run never hides a later run.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

/// How long a `die` is remembered when no list shows the container ended or gone.
const KEEP: Duration = Duration::from_secs(10);

/// How a container ended, as its events said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Died {
    pub exit_code: i64,
    pub oom: bool,
    at: Instant,
}

#[derive(Default)]
struct Seen {
    died: HashMap<String, Died>,
    /// An `oom` came; its `die` has not yet.
    oom: HashSet<String>,
}

#[derive(Default)]
pub(super) struct Ended {
    seen: Mutex<Seen>,
}

impl Ended {
    fn lock(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.seen.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Notes an engine event of a container: `oom`, `die`, `start`, `destroy`.
    pub(super) fn saw(&self, event: &Value) {
        let action = event["Action"].as_str().or(event["status"].as_str());
        let id = event["Actor"]["ID"].as_str().or(event["id"].as_str());
        let (Some(action), Some(id)) = (action, id.filter(|id| !id.is_empty())) else {
            return;
        };
        let mut seen = self.lock();
        match action {
            "oom" => {
                seen.oom.insert(id.to_string());
            }
            "die" => {
                let exit_code = event["Actor"]["Attributes"]["exitCode"]
                    .as_str()
                    .and_then(|c| c.parse().ok());
                let oom = seen.oom.remove(id);
                // A `die` without its code says nothing a list can use.
                if let Some(exit_code) = exit_code {
                    let died = Died {
                        exit_code,
                        oom,
                        at: Instant::now(),
                    };
                    seen.died.insert(id.to_string(), died);
                }
            }
            "start" | "destroy" => {
                seen.died.remove(id);
                seen.oom.remove(id);
            }
            _ => {}
        }
    }

    /// The containers that died lately (usually none), and how.
    pub(super) fn lately(&self) -> HashMap<String, Died> {
        let mut seen = self.lock();
        if seen.died.is_empty() {
            return HashMap::new();
        }
        seen.died.retain(|_, d| d.at.elapsed() < KEEP);
        seen.died.clone()
    }

    /// The engine's own list shows container `id` ended now.
    pub(super) fn settled(&self, id: &str) {
        self.lock().died.remove(id);
    }

    /// Forgets the containers a whole list no longer shows.
    pub(super) fn keep_only(&self, listed: &HashSet<String>) {
        let mut seen = self.lock();
        if !seen.died.is_empty() || !seen.oom.is_empty() {
            seen.died.retain(|id, _| listed.contains(id));
            seen.oom.retain(|id| listed.contains(id));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event(action: &str, id: &str, code: Option<&str>) -> Value {
        let mut e =
            json!({"Type": "container", "Action": action, "Actor": {"ID": id, "Attributes": {}}});
        if let Some(code) = code {
            e["Actor"]["Attributes"]["exitCode"] = json!(code);
        }
        e
    }

    #[test]
    fn a_die_is_kept_with_its_code_until_run_again_settled_or_gone() {
        let ended = Ended::default();
        ended.saw(&event("kill", "a", None));
        assert!(ended.lately().is_empty());
        ended.saw(&event("die", "a", Some("137")));
        ended.saw(&event("oom", "b", None));
        ended.saw(&event("die", "b", Some("137")));
        ended.saw(&event("die", "c", None));
        let lately = ended.lately();
        assert_eq!(lately.len(), 2, "{lately:?}");
        assert_eq!((lately["a"].exit_code, lately["a"].oom), (137, false));
        assert_eq!((lately["b"].exit_code, lately["b"].oom), (137, true));
        // Run again: the earlier run's end says nothing of this one.
        ended.saw(&event("start", "a", None));
        assert!(!ended.lately().contains_key("a"));
        ended.saw(&event("die", "a", Some("0")));
        assert!(!ended.lately()["a"].oom, "an oom is of one run");
        ended.settled("a");
        assert_eq!(ended.lately().len(), 1);
        ended.keep_only(&HashSet::new());
        assert!(ended.lately().is_empty());
    }
}
