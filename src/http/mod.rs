//! The HTTP/1.1 layer behind a small internal interface ([`Request`], [`Response`],
//! [`Handler`]), so routes and protocol never see the wire. Written here (over `httparse`, a
//! dependency of ureq already) because tiny_http 0.12 cannot bound what a hostile client costs:
//! see the README's dependency section.
//!
//! - [`wire`]: bytes to requests and responses to bytes: head parsing, body framing, chunked
//!   bodies, response encoding. Pure functions over buffers, fuzzed.
//! - [`server`]: the accept loop and one thread per connection, with the deadlines and bounds.
//!
//! What it guarantees, before any authentication:
//! - a request head is at most [`MAX_HEAD`] bytes (431), its request line at most
//!   [`MAX_REQUEST_LINE`] (414), at most [`MAX_HEADERS`] headers (431); an HTTP/1.1 request
//!   carries exactly one `Host` (400, RFC 9112 section 3.2);
//! - a body is read through a cap of [`MAX_BODY`] bytes (413 without reading on when the
//!   declared length is larger); a declared `Content-Length` never sizes a buffer; malformed,
//!   duplicated or conflicting framing (`Content-Length` with `Transfer-Encoding`) is 400;
//! - each connection has deadlines: the head within [`Limits::head_timeout`], the body within
//!   [`Limits::body_timeout`], the next keep-alive request within [`Limits::idle_timeout`];
//! - after an early answer (the body left unread), the connection closes its write side and
//!   discards input for a bounded time and byte count (a lingering close, as nginx does), so a
//!   client that sends its whole body before reading still sees the status;
//! - at most [`Limits::max_connections`] connections are served at once, one thread each; a
//!   connection beyond that is answered 503 at once and closed. A thread whose connection
//!   ended waits up to a second for the next one (at most 16 wait), so a connection per call
//!   does not start and end a thread per call. Threads stay bounded;
//! - a handler that panics is answered 500 and the connection's thread goes on (the release
//!   profile keeps `panic = "unwind"` for this).

mod conn;
mod server;
pub mod wire;

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

pub use server::{Server, Serving};
pub use wire::Refusal;

pub const MAX_BODY: usize = 1 << 20;
pub const MAX_HEAD: usize = 16 * 1024;
pub const MAX_REQUEST_LINE: usize = 8 * 1024;
pub const MAX_HEADERS: usize = 100;

/// Per-connection bounds.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub head_timeout: Duration,
    pub body_timeout: Duration,
    pub idle_timeout: Duration,
    pub write_timeout: Duration,
    pub max_connections: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            head_timeout: Duration::from_secs(10),
            body_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(60),
            write_timeout: Duration::from_secs(10),
            max_connections: 1024,
        }
    }
}

/// The body as the HTTP layer could read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    Complete(Vec<u8>),
    /// Longer than [`MAX_BODY`] (declared or actual); reading stopped at the cap and the
    /// connection closes after the answer.
    TooLarge,
}

#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    /// The path without the query string.
    pub path: String,
    pub query: String,
    pub headers: Vec<(String, String)>,
    pub body: Body,
}

impl Request {
    /// The first header of that name (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// A body written while it is produced (`body` is then unused): sent chunked on this
    /// connection's thread, and the connection closes after it.
    pub stream: Option<Stream>,
}

/// Where a streamed body goes, piece by piece. `send` returns `false` once the client is gone
/// (or stopped reading for the write timeout): the producer should stop.
/// Whether an `If-None-Match` value matches `etag`: `*`, or a list holding it (weak or strong).
pub fn etag_matches(if_none_match: &str, etag: &str) -> bool {
    if_none_match
        .split(',')
        .map(str::trim)
        .any(|tag| tag == "*" || tag.strip_prefix("W/").unwrap_or(tag) == etag)
}

pub trait Sink {
    fn send(&mut self, bytes: &[u8]) -> bool;

    /// Whether the server is shutting down: a long stream should end now rather than hold
    /// the shutdown's grace period.
    fn closing(&self) -> bool {
        false
    }

    /// Whether the client has hung up (its side of the connection is closed), asked between
    /// events: a stream can end without waiting for a write to fail (the first write after a
    /// hang-up still succeeds; only the next one fails, two heartbeats later).
    fn gone(&mut self) -> bool {
        false
    }
}

/// Produces a streamed body (server-sent events), on the connection's own thread: a stream
/// counts as a connection against `max_connections` like any other.
pub trait Streamer: Send + Sync {
    fn run(&self, sink: &mut dyn Sink);
}

/// A [`Streamer`] in a response.
#[derive(Clone)]
pub struct Stream(pub std::sync::Arc<dyn Streamer>);

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Stream")
    }
}

impl PartialEq for Stream {
    fn eq(&self, other: &Stream) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for Stream {}

impl Response {
    pub fn new(status: u16, content_type: &str, body: impl Into<Vec<u8>>) -> Response {
        Response {
            status,
            headers: vec![("Content-Type".into(), content_type.into())],
            body: body.into(),
            stream: None,
        }
    }

    /// A streamed answer of `content_type` (e.g. `text/event-stream`).
    pub fn streamed(
        status: u16,
        content_type: &str,
        streamer: std::sync::Arc<dyn Streamer>,
    ) -> Response {
        Response {
            stream: Some(Stream(streamer)),
            ..Response::new(status, content_type, Vec::new())
        }
    }

    pub fn json(status: u16, value: &serde_json::Value) -> Response {
        Response::new(status, "application/json", value.to_string())
    }

    pub fn text(status: u16, text: &str) -> Response {
        Response::new(status, "text/plain; charset=utf-8", format!("{text}\n"))
    }

    pub fn with_header(mut self, name: &str, value: impl Into<String>) -> Response {
        self.headers.push((name.into(), value.into()));
        self
    }
}

/// What the layer above implements. Called from several threads at once.
pub trait Handler: Send + Sync + 'static {
    fn handle(&self, request: Request) -> Response;

    /// Told when this layer answered a connection by itself (malformed or oversized head,
    /// bad framing, too many connections, a panicking handler), so the refusal can be counted.
    fn refused(&self, _status: u16) {}
}

/// Why the server could not start.
#[derive(Debug)]
pub enum Error {
    Bind { addr: SocketAddr, reason: String },
    Thread(io::Error),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Bind { addr, reason } => write!(f, "cannot listen on {addr}: {reason}"),
            Error::Thread(e) => write!(f, "cannot start the HTTP accept thread: {e}"),
        }
    }
}

impl std::error::Error for Error {}
