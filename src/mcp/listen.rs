//! `subscriptions/listen` (2026-07-28): a long-lived SSE answer carrying the change
//! notifications the client opted into, fed by the controller's watch — the list of
//! resources changed when a worker of the caller's appears or goes, a record updated when
//! its worker changes state, is renewed, suspended or resumed. Nothing is kept beyond the
//! stream: a client that reconnects (to any replica) listens again. A 2025-11-25 session's
//! GET stream is the same, untagged: the resource list's changes.

use std::collections::HashSet;
use std::sync::mpsc::RecvTimeoutError;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};

use super::exchange::{Answer, Head};
use super::resources::{record_uri, Named};
use super::wire::{self, RpcError};
use crate::control::watch::Subscription;
use crate::control::{Caller, Control, Filter};
use crate::http::{Sink, Streamer};

const TICK: Duration = Duration::from_millis(250);
/// How long the stream may be silent before a comment line keeps it (and proxies) awake.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// Opens the stream, or refuses: the client must take one; the watch must have room.
pub fn open(
    control: &Arc<Control>,
    caller: &Caller,
    head: &Head,
    id: &Value,
    params: &Map<String, Value>,
) -> Answer {
    if !head.accepts_events {
        let e = RpcError::invalid_request(
            "subscriptions/listen answers with an SSE stream: send Accept: text/event-stream",
        );
        return Answer::error(id, &e);
    }
    let asked = params.get("notifications").and_then(Value::as_object);
    let list_changed = asked
        .and_then(|a| a.get("resourcesListChanged"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let uris: Vec<String> = asked
        .and_then(|a| a.get("resourceSubscriptions"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .filter(|u| matches!(Named::parse(u), Some(Named::Record(_))))
        .take(1024)
        .map(str::to_string)
        .collect();
    let subscription = match control.watch(caller, Filter::default()) {
        Ok(s) => s,
        Err(e) => {
            let e = RpcError::new(
                200,
                wire::INTERNAL_ERROR,
                format!("{:?}: {}", e.code, e.message),
            );
            return Answer::error(id, &e);
        }
    };
    let mut granted = json!({});
    if list_changed {
        granted["resourcesListChanged"] = json!(true);
    }
    if !uris.is_empty() {
        granted["resourceSubscriptions"] = json!(uris);
    }
    Answer::Events(Arc::new(Listen {
        subscription: Mutex::new(Some(subscription)),
        id: Some(id.clone()),
        granted,
        list_changed,
        uris: uris.into_iter().collect(),
    }))
}

/// A 2025-11-25 session's GET stream: `notifications/resources/list_changed` as the caller's
/// workers come and go (the one server-initiated message this server has for it).
pub fn session(control: &Arc<Control>, caller: &Caller) -> Answer {
    match control.watch(caller, Filter::default()) {
        Ok(subscription) => Answer::Events(Arc::new(Listen {
            subscription: Mutex::new(Some(subscription)),
            id: None,
            granted: Value::Null,
            list_changed: true,
            uris: HashSet::new(),
        })),
        Err(e) => {
            let why = format!("{:?}: {}", e.code, e.message);
            Answer::error(&Value::Null, &RpcError::new(503, wire::INTERNAL_ERROR, why))
        }
    }
}

struct Listen {
    subscription: Mutex<Option<Subscription>>,
    /// The `subscriptions/listen` request's id (2026-07-28); `None`: a session's GET stream.
    id: Option<Value>,
    granted: Value,
    list_changed: bool,
    uris: HashSet<String>,
}

impl Listen {
    /// A notification, tagged with its subscription where it has one.
    fn tagged(&self, method: &str, mut params: Value) -> Vec<u8> {
        if let Some(id) = &self.id {
            params["_meta"] = json!({ wire::META_SUBSCRIPTION: id });
        }
        super::wire::event(&wire::notification(method, params))
    }
}

impl Streamer for Listen {
    fn run(&self, sink: &mut dyn Sink) {
        let Some(subscription) = self.subscription.lock().ok().and_then(|mut s| s.take()) else {
            return;
        };
        if self.id.is_some() {
            let ack = json!({ "notifications": self.granted });
            if !sink.send(&self.tagged("notifications/subscriptions/acknowledged", ack)) {
                return;
            }
        }
        let mut quiet_since = Instant::now();
        loop {
            match subscription.recv_timeout(TICK) {
                Ok(event) => {
                    let mut out = Vec::new();
                    if self.list_changed && matches!(event.kind, "added" | "removed") {
                        out.extend(self.tagged("notifications/resources/list_changed", json!({})));
                    }
                    if let Some(seen) = &event.worker {
                        let uri = record_uri(&seen.worker_id);
                        if self.uris.contains(&uri) && event.kind != "synced" {
                            out.extend(
                                self.tagged("notifications/resources/updated", json!({"uri": uri})),
                            );
                        }
                    }
                    if !out.is_empty() {
                        if !sink.send(&out) {
                            return;
                        }
                        quiet_since = Instant::now();
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    if sink.gone() {
                        return;
                    }
                    if sink.closing() {
                        break;
                    }
                    if quiet_since.elapsed() >= KEEP_ALIVE {
                        if !sink.send(b":\n\n") {
                            return;
                        }
                        quiet_since = Instant::now();
                    }
                }
                Err(RecvTimeoutError::Disconnected) => break,
            }
        }
        // Ended by this side (shutting down, or the watch cut off): a graceful end says so.
        if let Some(id) = &self.id {
            let done = wire::result(
                id,
                json!({"resultType": "complete", "_meta": { wire::META_SUBSCRIPTION: id }}),
            );
            sink.send(&super::wire::event(&done));
        }
    }
}
