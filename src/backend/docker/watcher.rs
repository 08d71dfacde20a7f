//! The Docker backend's change stream: the engine's `/events`, and what each means for the
//! watch source: which worker changed.
//!
//! Docker tells of a container's life (`create`, `start`, `die`, `oom`, `destroy`, ...) with
//! the container's labels and name in `Actor.Attributes`, so a cold worker's event names its
//! worker by its `worker-id` label, and the source reads that worker alone (one filtered
//! list, not a list of every worker). A pooled worker carries its member's labels, not its
//! own (its binding names it): its events ask for a whole list. An unclaimed member is not a
//! worker, and an exec or an attach changes nothing a list shows: those are not told.

use serde_json::Value;

use super::{engine_error, DockerBackend, EVENTS_CALL};
use crate::backend::{labels, BackendError, Change, Changes, Worker};

/// The actions after which a container may list differently (state, status, name, ports).
const CHANGES_A_LISTING: &[&str] = &[
    "create", "start", "restart", "die", "oom", "stop", "pause", "unpause", "destroy", "rename",
    "update",
];

/// What `event` (one of `/events`' container events, already filtered to this controller's
/// owner label) says changed; `None` when nothing a list shows did.
pub(super) fn change_of(event: &Value) -> Option<Change> {
    let action = event["Action"].as_str().or(event["status"].as_str())?;
    // `exec_start: sh -c ...`, `health_status: healthy`: the action is the word before `:`.
    let action = action.split(':').next().unwrap_or(action).trim();
    if !CHANGES_A_LISTING.contains(&action) {
        return None;
    }
    let attributes = &event["Actor"]["Attributes"];
    if let Some(id) = attributes[labels::WORKER_ID].as_str() {
        return Some(Change::Worker(id.to_string()));
    }
    match attributes[labels::MEMBER].as_str() {
        // Named as its member: not claimed, not a worker.
        Some(member) if attributes["name"].as_str() == Some(member) && action != "rename" => None,
        _ => Some(Change::Any),
    }
}

impl Changes for DockerBackend {
    /// Docker's `/events` for containers with this controller's owner label (create, start,
    /// die, oom, destroy, ...); a reconnect asks from the last event's time.
    fn follow(&self, changed: &mut dyn FnMut(Change) -> bool) -> Result<(), BackendError> {
        let since = *self.events_since.lock().unwrap_or_else(|p| p.into_inner());
        let selectors = labels::owner_selector(&self.controller_id);
        self.engine
            .events(&selectors, since, EVENTS_CALL, &mut |event| {
                self.ended.saw(event);
                if let Some(t) = event["time"].as_i64() {
                    *self.events_since.lock().unwrap_or_else(|p| p.into_inner()) = Some(t);
                }
                change_of(event).is_none_or(&mut *changed)
            })
            .map_err(engine_error)
    }

    /// A cold worker is one filtered list (and its record); a pooled one is found through its
    /// binding, as `stop` finds it.
    fn worker(&self, worker_id: &str) -> Result<Option<Worker>, BackendError> {
        let listing = self
            .engine
            .list(&labels::worker_selector(&self.controller_id, worker_id))
            .map_err(engine_error)?;
        let mut containers = listing.containers().map_err(engine_error)?;
        let died = self.ended.lately();
        for c in &mut containers {
            if let Some(w) = self.listed_worker(c, &died, &mut None)? {
                if w.worker_id == worker_id {
                    return self.leased(w).map(Some);
                }
            }
        }
        match self.pooled_container(worker_id)? {
            Some((_, w, _)) => self.leased(w).map(Some),
            None => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn event(action: &str, attributes: Value) -> Value {
        json!({"Type": "container", "Action": action, "Actor": {"ID": "c1", "Attributes": attributes}})
    }

    #[test]
    fn a_cold_workers_event_names_it_and_an_exec_is_not_told() {
        let worker = json!({labels::WORKER_ID: "w1", "name": "ctl-task-1", "exitCode": "137"});
        for action in ["die", "start", "destroy", "oom", "create"] {
            assert_eq!(
                change_of(&event(action, worker.clone())),
                Some(Change::Worker("w1".into()))
            );
        }
        assert_eq!(
            change_of(&event("exec_start: sh -c true", worker.clone())),
            None
        );
        assert_eq!(
            change_of(&event("health_status: healthy", worker.clone())),
            None
        );
        assert_eq!(change_of(&event("attach", worker)), None);
        // Older engines say `status` rather than `Action`.
        let old = json!({"status": "die", "id": "c1", "Actor": {"Attributes": {labels::WORKER_ID: "w2"}}});
        assert_eq!(change_of(&old), Some(Change::Worker("w2".into())));
    }

    #[test]
    fn an_unclaimed_member_is_not_told_and_a_pooled_worker_asks_for_a_list() {
        let member = json!({labels::MEMBER: "ctl-pool-default-0", "name": "ctl-pool-default-0"});
        assert_eq!(change_of(&event("die", member.clone())), None);
        // A claim renames the member to its task's name: from then on it is a worker.
        assert_eq!(change_of(&event("rename", member)), Some(Change::Any));
        let pooled = json!({labels::MEMBER: "ctl-pool-default-0", "name": "ctl-task-9"});
        assert_eq!(change_of(&event("die", pooled)), Some(Change::Any));
        assert_eq!(change_of(&event("die", json!({}))), Some(Change::Any));
    }
}
