//! A2A v1.0, as this controller speaks it: one service, two bindings.
//!
//! - [`types`]: the wire types (Task, Message, Part, ...) and the A2A error; a leaf that knows
//!   nothing of workers (the echo worker uses it too).
//! - `decode`: what a caller sent, checked field by field.
//! - `tasks`: the bounded in-memory store of recent tasks.
//! - `service`: the operations of §3.1 on the tasks and the control operations, typed, for
//!   any binding.
//! - `stream`: a task's events (`StreamResponse`s), framed by each binding.
//! - `card`: the Agent Card and the extended one.
//! - `jsonrpc`, `rest`: the JSON-RPC and HTTP+JSON bindings, which only translate.

pub(crate) mod card;
mod decode;
mod jsonrpc;
mod rest;
mod service;
mod stream;
pub(crate) mod tasks;
pub mod types;
mod updates;

pub use decode::{Credential, ServiceParams};
pub use jsonrpc::{Answer, JsonRpc};
pub use rest::{Rest, RestAnswer, RestBody};
pub use service::Service;
pub use tasks::TaskStore;
pub use types::{response_err, response_ok, rest_error_body, RpcError, PROTOCOL_VERSION};
