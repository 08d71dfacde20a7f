//! What one exchange at `/mcp` reads and writes: the request's MCP headers ([`Head`]), the
//! answer before it is a response ([`Answer`]), and the calls a 2025-11-25 cancellation can
//! reach.

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use serde_json::Value;

use super::wire::{self, RpcError};
use crate::http::Streamer;

/// What the transport read from the request's headers.
#[derive(Debug, Default, Clone)]
pub struct Head {
    /// `MCP-Protocol-Version`.
    pub version: Option<String>,
    /// `Mcp-Method`.
    pub method: Option<String>,
    /// `Mcp-Name`, its Base64 sentinel decoded (`Err`: a value that does not decode).
    pub name: Option<Result<String, wire::BadEncoding>>,
    /// `Mcp-Session-Id`.
    pub session: Option<String>,
    /// Whether the client takes an SSE stream as the answer.
    pub accepts_events: bool,
    /// The `Mcp-Param-*` headers: (the name after the prefix, lowercased; the raw value).
    pub params: Vec<(String, String)>,
}

impl Head {
    /// The raw value of `Mcp-Param-{name}`.
    pub fn param(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.params
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// What `/mcp` answers, before it is a response.
pub enum Answer {
    /// A JSON-RPC message (a result or an error) with its status, and a new session's id.
    Json {
        status: u16,
        body: Value,
        session: Option<String>,
    },
    /// A JSON-RPC message already written as JSON text.
    Text { status: u16, body: String },
    /// A notification taken: `202 Accepted`, no body.
    Accepted,
    /// An SSE stream: a waiting call's progress and its result, or a subscription.
    Events(Arc<dyn Streamer>),
}

impl Answer {
    pub fn error(id: &Value, e: &RpcError) -> Answer {
        Answer::Json {
            status: e.status,
            body: e.response(id),
            session: None,
        }
    }
}

/// Calls that may be cancelled by a 2025-11-25 `notifications/cancelled`: (session, request
/// id) → the flag the call looks at. Only this replica's: a cancellation that reaches another
/// finds nothing there (the revision lets a receiver ignore one it cannot act on).
pub type Cancels = Mutex<HashMap<(String, String), Arc<AtomicBool>>>;

/// A call's place in [`Cancels`], given up when dropped.
pub struct Registered {
    cancels: Arc<Cancels>,
    key: (String, String),
}

impl Registered {
    pub fn new(cancels: Arc<Cancels>, key: (String, String)) -> Registered {
        Registered { cancels, key }
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        if let Ok(mut cancels) = self.cancels.lock() {
            cancels.remove(&self.key);
        }
    }
}
