//! The MCP front door: the control operations as tools, the workers as resources, over
//! Streamable HTTP at `/mcp`. Two eras on one endpoint:
//!
//! - 2026-07-28, stateless: each request carries its revision and the client's capabilities
//!   in `_meta`, mirrored in headers the transport checks (`MCP-Protocol-Version`,
//!   `Mcp-Method`, `Mcp-Name`); `server/discover` says what is served.
//! - 2025-11-25 (and 2025-06-18, 2025-03-26): an `initialize`, then an `Mcp-Session-Id` that
//!   any replica reads back with nothing kept ([`session`]).
//!
//! MCP is another way to ask for create/list/stop, never a way to talk to workers: a tool
//! call becomes the control request an A2A data part would, for the same [`Caller`], through
//! the same [`Control`]. What the transport reads from the HTTP request is [`Head`]; what it
//! writes back is [`Answer`] (the route layer turns it into a response).

mod call;
mod era;
mod exchange;
mod listen;
mod resources;
pub mod session;
pub mod tools;
pub mod wire;

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use serde_json::{json, Map, Value};

use self::era::Era;
pub use self::exchange::{Answer, Head};
use self::exchange::{Cancels, Registered};
use self::wire::{Message, RpcError};
use crate::control::{Caller, Control};

/// The MCP service over the control layer.
pub struct Mcp {
    control: Arc<Control>,
    name: String,
    cancels: Arc<Cancels>,
    /// `tools/list`'s result as JSON text, for each era (the tools never change while the
    /// controller runs: written once, not on every call).
    tools: [String; 2],
    /// What a 2026-07-28 tool result ends with: `,"resultType":...,"_meta":{serverInfo}`.
    stamp: Arc<str>,
}

impl Mcp {
    pub fn new(control: Arc<Control>, name: &str) -> Mcp {
        let mut mcp = Mcp {
            control,
            name: name.to_string(),
            cancels: Arc::default(),
            tools: Default::default(),
            stamp: Arc::from(""),
        };
        let stamped = mcp.stamped(&Era::Modern, json!({})).to_string();
        mcp.stamp = Arc::from(format!(",{}", &stamped[1..stamped.len() - 1]));
        mcp.tools = [Era::Modern, Era::legacy_any()].map(|era| {
            let result = mcp.stamped(&era, mcp.tools_list(&era));
            result.to_string()
        });
        mcp
    }

    /// Answers one POST body from `caller`.
    pub fn handle(&self, caller: &Caller, head: &Head, body: &[u8]) -> Answer {
        match Message::read(body) {
            Err((id, e)) => Answer::error(&id, &e),
            Ok(Message::Notification { method, params }) => {
                if method == "notifications/cancelled" {
                    self.cancelled(caller, head, &params);
                }
                Answer::Accepted
            }
            Ok(Message::Request { id, method, params }) => {
                self.request(caller, head, &id, &method, params)
            }
        }
    }

    fn request(
        &self,
        caller: &Caller,
        head: &Head,
        id: &Value,
        method: &str,
        params: Map<String, Value>,
    ) -> Answer {
        if method == "initialize" {
            // 2026-07-28 removed the handshake: a modern request for it is an unknown method.
            let modern = head.version.as_deref() == Some(wire::MODERN)
                || params
                    .get("_meta")
                    .is_some_and(|m| m.get(wire::META_VERSION).is_some());
            if modern {
                return Answer::error(id, &RpcError::no_method(method, true));
            }
            return self.initialize(caller, head, id, &params);
        }
        let era = match Era::of(caller, head, method, &params) {
            Ok(era) => era,
            Err(e) => return Answer::error(id, &e),
        };
        let done = |result: Result<Value, RpcError>| match result {
            Ok(result) => Answer::Json {
                status: 200,
                body: wire::result(id, self.stamped(&era, result)),
                session: None,
            },
            Err(e) => Answer::error(id, &e),
        };
        match method {
            "server/discover" if era.modern() => done(Ok(self.discover())),
            "ping" if !era.modern() => done(Ok(json!({}))),
            "tools/list" => Answer::Text {
                status: 200,
                body: wire::result_text(id, &self.tools[usize::from(!era.modern())]),
            },
            "tools/call" => self.tools_call(caller, head, &era, id, &params),
            "prompts/list" => done(Ok(self.prompts(&era))),
            "prompts/get" => done(Err(RpcError::params(
                "Unknown prompt: this server has none (prompts/list is empty)",
            ))),
            "resources/list" => done(resources::list(&self.control, caller, &era)),
            "resources/templates/list" => done(Ok(resources::templates(&era))),
            "resources/read" => done(resources::read(&self.control, caller, &era, &params)),
            "subscriptions/listen" if era.modern() => {
                listen::open(&self.control, caller, head, id, &params)
            }
            other => Answer::error(id, &RpcError::no_method(other, era.modern())),
        }
    }

    /// A result as its era writes it: 2026-07-28's carry `resultType` and the server's name.
    fn stamped(&self, era: &Era, mut result: Value) -> Value {
        if era.modern() {
            result["resultType"] = json!("complete");
            result["_meta"] = json!({ wire::META_SERVER_INFO: self.info() });
        }
        result
    }

    fn info(&self) -> Value {
        json!({
            "name": "a2a-worker-controller",
            "title": self.name,
            "version": env!("CARGO_PKG_VERSION"),
        })
    }

    /// What is served: a changing resource list is announced (2026-07-28 on
    /// `subscriptions/listen`, 2025-11-25 on the session's GET stream).
    fn capabilities() -> Value {
        json!({
            "tools": {"listChanged": false},
            "resources": {"listChanged": true, "subscribe": false},
            "prompts": {"listChanged": false},
        })
    }

    /// `GET /mcp` with a 2025-11-25 session: its stream of the resource list's changes.
    pub fn session_stream(&self, caller: &Caller, head: &Head) -> Answer {
        let known = head
            .session
            .as_deref()
            .and_then(|s| session::read(s, &caller.key));
        if known.is_none() {
            let e = RpcError::new(
                404,
                wire::INVALID_REQUEST,
                "Session not found: start a new one with initialize",
            );
            return Answer::error(&Value::Null, &e);
        }
        if !head.accepts_events {
            let e = RpcError::new(
                406,
                wire::INVALID_REQUEST,
                "Not Acceptable: the session's GET stream is text/event-stream",
            );
            return Answer::error(&Value::Null, &e);
        }
        listen::session(&self.control, caller)
    }

    fn instructions() -> &'static str {
        "Creates, lists and stops isolated AI-agent workers, one per task. create returns a worker's a2a_url and its bearer token (a secret): talk to the worker directly over A2A with them; this server is never in the message path. Stop workers you no longer need, or renew a busy one before its expires_at."
    }

    /// `prompts/list`: none. Served (empty) so that a client listing every kind of thing,
    /// and caching the answer, is told so rather than refused.
    fn prompts(&self, era: &Era) -> Value {
        wire::cacheable(era.modern(), json!({ "prompts": [] }), wire::Cache::Public)
    }

    /// `server/discover` (2026-07-28).
    fn discover(&self) -> Value {
        let result = json!({
            "supportedVersions": wire::supported(),
            "capabilities": Mcp::capabilities(),
            "instructions": Mcp::instructions(),
        });
        wire::cacheable(true, result, wire::Cache::Public)
    }

    /// `initialize` (the handshake revisions): the revision asked for when served here, else
    /// the newest handshake one; and a session id.
    fn initialize(
        &self,
        caller: &Caller,
        head: &Head,
        id: &Value,
        params: &Map<String, Value>,
    ) -> Answer {
        if head.session.is_some() {
            return Answer::error(
                id,
                &RpcError::invalid_request(
                    "initialize starts a session: send it without Mcp-Session-Id",
                ),
            );
        }
        let asked = params.get("protocolVersion").and_then(Value::as_str);
        let version = wire::LEGACY
            .into_iter()
            .find(|v| Some(*v) == asked)
            .unwrap_or(wire::LEGACY[0]);
        let session = match session::mint(version, &caller.key) {
            Ok(s) => s,
            Err(e) => {
                return Answer::error(
                    id,
                    &RpcError::new(500, wire::INTERNAL_ERROR, format!("no session id: {e}")),
                )
            }
        };
        let result = json!({
            "protocolVersion": version,
            "capabilities": Mcp::capabilities(),
            "serverInfo": self.info(),
            "instructions": Mcp::instructions(),
        });
        Answer::Json {
            status: 200,
            body: wire::result(id, result),
            session: Some(session),
        }
    }

    /// The tools this backend has, always in the same order.
    fn tools_list(&self, era: &Era) -> Value {
        let abilities = self.control.backend().abilities();
        let tools: Vec<Value> = tools::all()
            .iter()
            .filter(|t| t.available(&abilities))
            .map(|t| t.described.clone())
            .collect();
        wire::cacheable(era.modern(), json!({ "tools": tools }), wire::Cache::Public)
    }

    fn tools_call(
        &self,
        caller: &Caller,
        head: &Head,
        era: &Era,
        id: &Value,
        params: &Map<String, Value>,
    ) -> Answer {
        let call = match call::Call::read(&self.control, caller, era, id, params) {
            Ok(call) => call,
            Err(e) => return Answer::error(id, &e),
        };
        let stamp = match era.modern() {
            true => Arc::clone(&self.stamp),
            false => Arc::from(""),
        };
        // Only a call that waits can be cancelled while it runs: the others are not registered.
        let (cancel, registered) = match era.session() {
            Some(session) if call.waits() => self.cancellable(session, id),
            _ => Default::default(),
        };
        call.run(head.accepts_events, cancel, registered, stamp)
    }

    /// The cancellation flag of the call `id` of `session`, registered until the returned
    /// guard is dropped (when the call has answered).
    fn cancellable(&self, session: &str, id: &Value) -> (Arc<AtomicBool>, Option<Registered>) {
        let flag = Arc::new(AtomicBool::new(false));
        let key = (session.to_string(), id.to_string());
        if let Ok(mut cancels) = self.cancels.lock() {
            cancels.insert(key.clone(), Arc::clone(&flag));
        }
        let guard = Registered::new(Arc::clone(&self.cancels), key);
        (flag, Some(guard))
    }

    /// A 2025-11-25 `notifications/cancelled`: the call it names, of this caller's session,
    /// is told to stop.
    fn cancelled(&self, caller: &Caller, head: &Head, params: &Map<String, Value>) {
        let Some(session) = head
            .session
            .as_deref()
            .filter(|s| session::read(s, &caller.key).is_some())
        else {
            return;
        };
        let Some(request) = params.get("requestId") else {
            return;
        };
        let key = (session.to_string(), request.to_string());
        let flag = self.cancels.lock().ok().and_then(|mut c| c.remove(&key));
        if let Some(flag) = flag {
            flag.store(true, std::sync::atomic::Ordering::SeqCst);
            log::info!("mcp: call {request} of a session cancelled by its client");
        }
    }
}
