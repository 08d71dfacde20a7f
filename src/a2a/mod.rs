//! A2A v1.0 over JSON-RPC 2.0, as this controller speaks it.
//!
//! - [`types`]: the wire types (Task, Message, Part, ...) and the JSON-RPC error object; a
//!   leaf that knows nothing of workers (the echo worker uses it too).
//! - `decode`: what a caller sent, checked field by field.
//! - `jsonrpc`: the methods, running control operations as A2A tasks.
//! - `tasks`: the bounded in-memory store of recent tasks.
//! - `card`: the Agent Card.

pub(crate) mod card;
mod decode;
mod jsonrpc;
pub(crate) mod tasks;
pub mod types;

pub use decode::ServiceParams;
pub use jsonrpc::{Answer, Protocol};
pub use tasks::TaskStore;
pub use types::{response_err, response_ok, RpcError, PROTOCOL_VERSION};
