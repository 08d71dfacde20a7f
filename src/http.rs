//! The HTTP/1.1 layer behind a small internal interface ([`Request`], [`Response`],
//! [`Handler`]), so routes and protocol never see the wire. Written here (over `httparse`, a
//! dependency of ureq already) because tiny_http 0.12 cannot bound what a hostile client costs:
//! see the README's dependency section.
//!
//! What it guarantees, before any authentication:
//! - a request head is at most [`MAX_HEAD`] bytes (431), its request line at most
//!   [`MAX_REQUEST_LINE`] (414), at most [`MAX_HEADERS`] headers (431);
//! - a body is read through a cap of [`MAX_BODY`] bytes (413 without reading on when the
//!   declared length is larger); a declared `Content-Length` never sizes a buffer; malformed,
//!   duplicated or conflicting framing (`Content-Length` with `Transfer-Encoding`) is 400;
//! - each connection has deadlines: the head within [`Limits::head_timeout`], the body within
//!   [`Limits::body_timeout`], the next keep-alive request within [`Limits::idle_timeout`];
//! - at most [`Limits::max_connections`] connections are served at once, one thread each; a
//!   connection beyond that is answered 503 at once and closed. Threads stay bounded.

use std::fmt;
use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::time::{http_date, now_millis};

pub const MAX_BODY: usize = 1 << 20;
pub const MAX_HEAD: usize = 16 * 1024;
pub const MAX_REQUEST_LINE: usize = 8 * 1024;
pub const MAX_HEADERS: usize = 100;
/// Longest chunk-size or trailer line in a chunked body.
const MAX_CHUNK_LINE: usize = 4096;
/// How often a blocked read wakes up to notice a shutdown.
const SLICE: Duration = Duration::from_millis(250);
const THREAD_STACK: usize = 512 * 1024;

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
        header_of(&self.headers, name)
    }
}

fn header_of<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    pub fn new(status: u16, content_type: &str, body: impl Into<Vec<u8>>) -> Response {
        Response {
            status,
            headers: vec![("Content-Type".into(), content_type.into())],
            body: body.into(),
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
    /// bad framing, too many connections), so the refusal can be counted.
    fn refused(&self, _status: u16) {}
}

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

/// A bound, not yet serving, listener.
pub struct Server {
    listener: TcpListener,
}

impl Server {
    pub fn bind(addr: SocketAddr) -> Result<Server, Error> {
        let listener = TcpListener::bind(addr).map_err(|e| Error::Bind {
            addr,
            reason: e.to_string(),
        })?;
        Ok(Server { listener })
    }

    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.listener.local_addr().ok()
    }

    /// Starts accepting; each connection is served on its own thread.
    pub fn serve(self, handler: Arc<dyn Handler>, limits: Limits) -> Result<Serving, Error> {
        let local = self
            .listener
            .local_addr()
            .map_err(|e| Error::Thread(io::Error::other(e)))?;
        let shared = Arc::new(Shared {
            handler,
            limits,
            stopping: AtomicBool::new(false),
            active: Mutex::new(0),
            drained: Condvar::new(),
        });
        let accept_shared = Arc::clone(&shared);
        let listener = self.listener;
        let accept = thread::Builder::new()
            .name("http-accept".into())
            .spawn(move || accept_loop(&listener, &accept_shared))
            .map_err(Error::Thread)?;
        Ok(Serving {
            shared,
            accept: Some(accept),
            wake: wake_addr(local),
        })
    }
}

/// The address to connect to in order to wake the accept loop.
fn wake_addr(local: SocketAddr) -> SocketAddr {
    match local.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => {
            SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), local.port())
        }
        IpAddr::V6(ip) if ip.is_unspecified() => {
            SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), local.port())
        }
        _ => local,
    }
}

struct Shared {
    handler: Arc<dyn Handler>,
    limits: Limits,
    stopping: AtomicBool,
    active: Mutex<usize>,
    drained: Condvar,
}

impl Shared {
    fn stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    fn active(&self) -> std::sync::MutexGuard<'_, usize> {
        self.active.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn release(&self) {
        let mut n = self.active();
        *n = n.saturating_sub(1);
        self.drained.notify_all();
    }
}

/// A server that is serving; [`Serving::shutdown`] stops it.
pub struct Serving {
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
    wake: SocketAddr,
}

impl Serving {
    /// Stops accepting, lets requests in flight finish for at most `grace` (idle keep-alive
    /// connections are closed), and returns whether they all did.
    pub fn shutdown(mut self, grace: Duration) -> bool {
        self.shared.stopping.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect_timeout(&self.wake, Duration::from_secs(1));
        if let Some(accept) = self.accept.take() {
            let _ = accept.join();
        }
        let deadline = Instant::now() + grace;
        let mut active = self.shared.active();
        while *active > 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            active = self
                .shared
                .drained
                .wait_timeout(active, left)
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
        }
        true
    }
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    for stream in listener.incoming() {
        if shared.stopping() {
            break;
        }
        let stream = match stream {
            Ok(s) => s,
            Err(e) => {
                // Out of descriptors and similar: back off instead of spinning.
                log::warn!("http: accept failed: {e}");
                thread::sleep(Duration::from_millis(20));
                continue;
            }
        };
        {
            let mut active = shared.active();
            if *active >= shared.limits.max_connections {
                drop(active);
                reject_busy(stream, shared.handler.as_ref());
                continue;
            }
            *active += 1;
        }
        let conn_shared = Arc::clone(shared);
        let spawned = thread::Builder::new()
            .name("http-conn".into())
            .stack_size(THREAD_STACK)
            .spawn(move || {
                serve_connection(stream, &conn_shared);
                conn_shared.release();
            });
        if let Err(e) = spawned {
            log::warn!("http: cannot start a connection thread: {e}");
            shared.release();
        }
    }
}

/// 503 for a connection over the limit, without waiting on the client.
fn reject_busy(stream: TcpStream, handler: &dyn Handler) {
    handler.refused(503);
    let _ = stream.set_nonblocking(true);
    let mut s = &stream;
    let _ = s.write_all(
        b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 34\r\nRetry-After: 1\r\nConnection: close\r\n\r\ntoo many connections, retry later\n",
    );
    let _ = stream.shutdown(Shutdown::Write);
}

/// Why a connection ends without (or with) an error answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// Answer this status, then close.
    Status(u16),
    /// Close silently (peer closed, timed out while idle, shutting down).
    Close,
}

struct Conn<'a> {
    stream: TcpStream,
    buf: Vec<u8>,
    shared: &'a Shared,
}

impl Conn<'_> {
    /// Reads more bytes into the buffer before `deadline`. `interruptible`: a shutdown may
    /// end the wait (only while no request is under way).
    fn fill(&mut self, deadline: Instant, interruptible: bool) -> Result<(), Stop> {
        let mut chunk = [0u8; 8192];
        loop {
            if interruptible && self.shared.stopping() {
                return Err(Stop::Close);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Stop::Close);
            }
            let _ = self.stream.set_read_timeout(Some(left.min(SLICE)));
            match self.stream.read(&mut chunk) {
                Ok(0) => return Err(Stop::Close),
                Ok(n) => {
                    self.buf.extend_from_slice(&chunk[..n]);
                    return Ok(());
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock
                            | io::ErrorKind::TimedOut
                            | io::ErrorKind::Interrupted
                    ) => {}
                Err(_) => return Err(Stop::Close),
            }
        }
    }

    fn consume(&mut self, n: usize) -> Vec<u8> {
        let rest = self.buf.split_off(n);
        std::mem::replace(&mut self.buf, rest)
    }

    fn write(&mut self, bytes: &[u8]) -> bool {
        let _ = self
            .stream
            .set_write_timeout(Some(self.shared.limits.write_timeout));
        self.stream
            .write_all(bytes)
            .and_then(|()| self.stream.flush())
            .is_ok()
    }
}

/// A source of body bytes with a deadline (the connection, or a slice in tests and fuzzing).
pub trait Source {
    /// At least one more byte appended to the pending bytes, or why not.
    fn more(&mut self) -> Result<(), Stop>;
    fn pending(&self) -> &[u8];
    fn take(&mut self, n: usize) -> Vec<u8>;
}

struct BodySource<'a, 'b> {
    conn: &'a mut Conn<'b>,
    deadline: Instant,
}

impl Source for BodySource<'_, '_> {
    fn more(&mut self) -> Result<(), Stop> {
        self.conn.fill(self.deadline, false)
    }
    fn pending(&self) -> &[u8] {
        &self.conn.buf
    }
    fn take(&mut self, n: usize) -> Vec<u8> {
        self.conn.consume(n)
    }
}

/// Bytes already received (for tests and fuzzing); running out means the peer closed.
pub struct SliceSource<'a> {
    data: &'a [u8],
    pos: usize,
    visible: usize,
}

impl<'a> SliceSource<'a> {
    pub fn new(data: &'a [u8]) -> SliceSource<'a> {
        SliceSource {
            data,
            pos: 0,
            visible: 0,
        }
    }
}

impl Source for SliceSource<'_> {
    fn more(&mut self) -> Result<(), Stop> {
        if self.pos + self.visible >= self.data.len() {
            return Err(Stop::Close);
        }
        self.visible = (self.visible + 7).min(self.data.len() - self.pos);
        Ok(())
    }
    fn pending(&self) -> &[u8] {
        &self.data[self.pos..self.pos + self.visible]
    }
    fn take(&mut self, n: usize) -> Vec<u8> {
        let out = self.data[self.pos..self.pos + n].to_vec();
        self.pos += n;
        self.visible -= n;
        out
    }
}

/// A parsed request head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    pub method: String,
    pub target: String,
    /// 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub minor: u8,
    pub headers: Vec<(String, String)>,
}

/// Parses a request head from the start of `buf`: `Ok(None)` while incomplete (and within
/// the limits), `Ok(Some((head, length)))` once complete, `Err(status)` when it can never be
/// a valid head (400, 414, 431).
pub fn parse_head(buf: &[u8]) -> Result<Option<(Head, usize)>, u16> {
    // Leading empty lines before a request are tolerated (RFC 9112 section 2.2).
    let skip = buf
        .iter()
        .take_while(|b| **b == b'\r' || **b == b'\n')
        .count();
    let buf = &buf[skip..];
    let line_end = buf.iter().position(|b| *b == b'\n');
    match line_end {
        Some(end) if end > MAX_REQUEST_LINE => return Err(414),
        None if buf.len() > MAX_REQUEST_LINE => return Err(414),
        _ => {}
    }
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(buf) {
        Ok(httparse::Status::Complete(len)) => {
            if len > MAX_HEAD {
                return Err(431);
            }
            let method = req.method.ok_or(400u16)?.to_string();
            let target = req.path.ok_or(400u16)?.to_string();
            let minor = req.version.ok_or(400u16)?;
            let headers = req
                .headers
                .iter()
                .map(|h| {
                    std::str::from_utf8(h.value)
                        .map(|v| (h.name.to_string(), v.trim().to_string()))
                        .map_err(|_| 400u16)
                })
                .collect::<Result<Vec<_>, u16>>()?;
            Ok(Some((
                Head {
                    method,
                    target,
                    minor,
                    headers,
                },
                skip + len,
            )))
        }
        Ok(httparse::Status::Partial) if buf.len() > MAX_HEAD => Err(431),
        Ok(httparse::Status::Partial) => Ok(None),
        Err(httparse::Error::TooManyHeaders) => Err(431),
        Err(_) => Err(400),
    }
}

/// How the body is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    Length(usize),
    Chunked,
    /// Declared longer than [`MAX_BODY`].
    TooLarge,
}

/// The body framing of a head, refusing anything ambiguous (request smuggling shapes).
pub fn framing(head: &Head) -> Result<Framing, u16> {
    let lengths: Vec<&str> = head
        .headers
        .iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case("Content-Length"))
        .map(|(_, v)| v.as_str())
        .collect();
    let encodings: Vec<&str> = head
        .headers
        .iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case("Transfer-Encoding"))
        .map(|(_, v)| v.as_str())
        .collect();
    match (lengths.as_slice(), encodings.as_slice()) {
        ([], []) => Ok(Framing::Length(0)),
        ([], [te]) if te.eq_ignore_ascii_case("chunked") && head.minor == 1 => Ok(Framing::Chunked),
        ([], [_]) => Err(501),
        ([cl], []) => {
            if cl.is_empty() || cl.len() > 19 || !cl.bytes().all(|b| b.is_ascii_digit()) {
                return Err(400);
            }
            match cl.parse::<u64>() {
                Ok(n) if n > MAX_BODY as u64 => Ok(Framing::TooLarge),
                Ok(n) => Ok(Framing::Length(n as usize)),
                Err(_) => Err(400),
            }
        }
        _ => Err(400),
    }
}

/// Reads a `Content-Length` body (at most [`MAX_BODY`]).
pub fn read_length(src: &mut dyn Source, n: usize) -> Result<Vec<u8>, Stop> {
    while src.pending().len() < n {
        src.more()?;
    }
    Ok(src.take(n))
}

/// Decodes a chunked body through the cap: `Ok(None)` when it grows past [`MAX_BODY`].
pub fn read_chunked(src: &mut dyn Source) -> Result<Option<Vec<u8>>, Stop> {
    let mut body = Vec::new();
    loop {
        let line = read_line(src)?;
        let size_text = line.split(|b| *b == b';').next().unwrap_or(&[]);
        let size_text = std::str::from_utf8(size_text)
            .map_err(|_| Stop::Status(400))?
            .trim_matches([' ', '\t']);
        if size_text.is_empty()
            || size_text.len() > 16
            || !size_text.bytes().all(|b| b.is_ascii_hexdigit())
        {
            return Err(Stop::Status(400));
        }
        let size = usize::from_str_radix(size_text, 16).map_err(|_| Stop::Status(400))?;
        if size == 0 {
            // Trailer fields, then the empty line.
            let mut trailers = 0;
            loop {
                if read_line(src)?.is_empty() {
                    return Ok(Some(body));
                }
                trailers += 1;
                if trailers > MAX_HEADERS {
                    return Err(Stop::Status(431));
                }
            }
        }
        if body.len().saturating_add(size) > MAX_BODY {
            return Ok(None);
        }
        body.extend_from_slice(&read_length(src, size)?);
        if read_line(src)? != b"" {
            return Err(Stop::Status(400));
        }
    }
}

/// One line without its CRLF (or LF), at most [`MAX_CHUNK_LINE`] bytes.
fn read_line(src: &mut dyn Source) -> Result<Vec<u8>, Stop> {
    loop {
        if let Some(end) = src.pending().iter().position(|b| *b == b'\n') {
            let mut line = src.take(end + 1);
            line.pop();
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            return Ok(line);
        }
        if src.pending().len() > MAX_CHUNK_LINE {
            return Err(Stop::Status(400));
        }
        src.more()?;
    }
}

fn has_token(headers: &[(String, String)], name: &str, token: &str) -> bool {
    headers
        .iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case(name))
        .any(|(_, v)| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
}

fn serve_connection(stream: TcpStream, shared: &Shared) {
    let _ = stream.set_nodelay(true);
    let mut conn = Conn {
        stream,
        buf: Vec::new(),
        shared,
    };
    let mut first = true;
    loop {
        match serve_request(&mut conn, first) {
            Ok(true) => first = false,
            Ok(false) | Err(Stop::Close) => break,
            Err(Stop::Status(status)) => {
                shared.handler.refused(status);
                let r = Response::text(status, reason(status));
                let bytes = encode(&r, false, false);
                conn.write(&bytes);
                break;
            }
        }
    }
    let _ = conn.stream.shutdown(Shutdown::Both);
}

/// Serves one request; `Ok(true)` when the connection stays open for another.
fn serve_request(conn: &mut Conn<'_>, first: bool) -> Result<bool, Stop> {
    let limits = conn.shared.limits;
    // Wait for the request's first byte (idle), then for its whole head.
    let idle_deadline = Instant::now()
        + if first {
            limits.head_timeout
        } else {
            limits.idle_timeout
        };
    while conn.buf.iter().all(|b| *b == b'\r' || *b == b'\n') {
        conn.buf.clear();
        conn.fill(idle_deadline, true)?;
    }
    let head_deadline = Instant::now() + limits.head_timeout;
    let (head, head_len) = loop {
        match parse_head(&conn.buf).map_err(Stop::Status)? {
            Some(parsed) => break parsed,
            None => conn.fill(head_deadline, false).map_err(|_| Stop::Close)?,
        }
    };
    conn.consume(head_len);

    let keep_alive = !conn.shared.stopping()
        && if head.minor == 1 {
            !has_token(&head.headers, "Connection", "close")
        } else {
            has_token(&head.headers, "Connection", "keep-alive")
        };
    let framing = framing(&head).map_err(Stop::Status)?;
    let expects_continue = has_token(&head.headers, "Expect", "100-continue");
    let body_deadline = Instant::now() + limits.body_timeout;
    let body = match framing {
        Framing::TooLarge => Body::TooLarge,
        Framing::Length(0) => Body::Complete(Vec::new()),
        Framing::Length(n) => {
            if expects_continue && !conn.write(b"HTTP/1.1 100 Continue\r\n\r\n") {
                return Err(Stop::Close);
            }
            let mut src = BodySource {
                conn,
                deadline: body_deadline,
            };
            Body::Complete(read_length(&mut src, n).map_err(|_| Stop::Close)?)
        }
        Framing::Chunked => {
            if expects_continue && !conn.write(b"HTTP/1.1 100 Continue\r\n\r\n") {
                return Err(Stop::Close);
            }
            let mut src = BodySource {
                conn,
                deadline: body_deadline,
            };
            match read_chunked(&mut src)? {
                Some(b) => Body::Complete(b),
                None => Body::TooLarge,
            }
        }
    };
    let too_large = body == Body::TooLarge;
    let (path, query) = match head.target.split_once('?') {
        Some((p, q)) => (p.to_string(), q.to_string()),
        None => (head.target.clone(), String::new()),
    };
    let is_head = head.method == "HEAD";
    let request = Request {
        method: head.method,
        path,
        query,
        headers: head.headers,
        body,
    };
    let handler = &conn.shared.handler;
    let response = match catch_unwind(AssertUnwindSafe(|| handler.handle(request))) {
        Ok(r) => r,
        Err(_) => {
            log::error!("request handler panicked; answered 500");
            Response::text(500, "internal error")
        }
    };
    // After a refused body the rest of it is never read: the connection cannot continue.
    let keep = keep_alive && !too_large && !has_token(&response.headers, "Connection", "close");
    let bytes = encode(&response, keep, is_head);
    Ok(conn.write(&bytes) && keep)
}

fn encode(r: &Response, keep_alive: bool, head_only: bool) -> Vec<u8> {
    let mut out = format!("HTTP/1.1 {} {}\r\n", r.status, reason(r.status)).into_bytes();
    let mut push = |name: &str, value: &str| {
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    };
    push("Date", &http_date(now_millis() / 1000));
    for (name, value) in &r.headers {
        let managed = ["content-length", "connection", "transfer-encoding", "date"]
            .iter()
            .any(|m| name.eq_ignore_ascii_case(m));
        if managed {
            continue;
        }
        if header_safe(name, value) {
            push(name, value);
        } else {
            log::warn!("http: dropped an invalid response header {name:?}");
        }
    }
    let bodiless = r.status == 204 || r.status == 304 || (100..200).contains(&r.status);
    if !bodiless {
        push("Content-Length", &r.body.len().to_string());
    }
    push(
        "Connection",
        if keep_alive { "keep-alive" } else { "close" },
    );
    out.extend_from_slice(b"\r\n");
    if !bodiless && !head_only {
        out.extend_from_slice(&r.body);
    }
    out
}

/// A header that cannot split the response: a token name and a value without control
/// characters (no CR/LF injection).
pub fn header_safe(name: &str, value: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
        && value
            .bytes()
            .all(|b| b == b'\t' || (0x20..0x7f).contains(&b))
}

fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        201 => "Created",
        204 => "No Content",
        304 => "Not Modified",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        413 => "Content Too Large",
        414 => "URI Too Long",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        _ => "Status",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(raw: &str) -> Result<Option<(Head, usize)>, u16> {
        parse_head(raw.as_bytes())
    }

    #[test]
    fn heads() {
        let (h, len) = head("GET /a?b=1 HTTP/1.1\r\nHost: x\r\nX-A:  v \r\n\r\nBODY")
            .unwrap()
            .unwrap();
        assert_eq!(
            (h.method.as_str(), h.target.as_str(), h.minor),
            ("GET", "/a?b=1", 1)
        );
        assert_eq!(h.headers[1], ("X-A".to_string(), "v".to_string()));
        assert_eq!(len, 42);
        assert_eq!(head("GET / HTTP/1.1\r\nHost: x\r\n"), Ok(None));
        assert_eq!(
            head("\r\nGET / HTTP/1.0\r\n\r\n").unwrap().unwrap().0.minor,
            0
        );
        assert_eq!(head("G\u{e9}T / HTTP/1.1\r\n\r\n"), Err(400));
        assert_eq!(parse_head(b"GET /\xff HTTP/1.1\r\n\r\n"), Err(400));
        assert_eq!(parse_head(b"GET / HTTP/1.1\r\nX: \xff\r\n\r\n"), Err(400));
        assert_eq!(head("GET / HTTP/1.1\r\nBad Header\r\n\r\n"), Err(400));
    }

    #[test]
    fn head_limits() {
        let long_line = format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(MAX_REQUEST_LINE));
        assert_eq!(head(&long_line), Err(414));
        assert_eq!(
            head(&format!("GET /{}", "a".repeat(MAX_REQUEST_LINE + 1))),
            Err(414)
        );
        let many: String = (0..=MAX_HEADERS).map(|i| format!("X-{i}: v\r\n")).collect();
        assert_eq!(head(&format!("GET / HTTP/1.1\r\n{many}\r\n")), Err(431));
        let big = format!("GET / HTTP/1.1\r\nX: {}\r\n", "v".repeat(MAX_HEAD));
        assert_eq!(head(&big), Err(431));
        let big = format!(
            "GET / HTTP/1.1\r\nX: {}\r\nY: {}\r\n\r\n",
            "v".repeat(8000),
            "v".repeat(8500)
        );
        assert_eq!(head(&big), Err(431));
    }

    fn framing_of(headers: &[(&str, &str)], minor: u8) -> Result<Framing, u16> {
        framing(&Head {
            method: "POST".into(),
            target: "/".into(),
            minor,
            headers: headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        })
    }

    #[test]
    fn framings() {
        assert_eq!(framing_of(&[], 1), Ok(Framing::Length(0)));
        assert_eq!(
            framing_of(&[("Content-Length", "12")], 1),
            Ok(Framing::Length(12))
        );
        assert_eq!(
            framing_of(&[("content-length", "1000000000000")], 1),
            Ok(Framing::TooLarge)
        );
        assert_eq!(
            framing_of(&[("Content-Length", "18446744073709551615")], 1),
            Err(400)
        );
        for bad in ["-1", "abc", "", "1 2", "+5", "0x10", "99999999999999999999"] {
            assert_eq!(framing_of(&[("Content-Length", bad)], 1), Err(400), "{bad}");
        }
        assert_eq!(
            framing_of(&[("Content-Length", "1"), ("Content-Length", "1")], 1),
            Err(400)
        );
        assert_eq!(
            framing_of(
                &[("Content-Length", "1"), ("Transfer-Encoding", "chunked")],
                1
            ),
            Err(400)
        );
        assert_eq!(
            framing_of(&[("Transfer-Encoding", "chunked")], 1),
            Ok(Framing::Chunked)
        );
        assert_eq!(framing_of(&[("Transfer-Encoding", "chunked")], 0), Err(501));
        assert_eq!(
            framing_of(&[("Transfer-Encoding", "gzip, chunked")], 1),
            Err(501)
        );
    }

    #[test]
    fn chunked_bodies() {
        let ok = b"4\r\nWiki\r\n5;ext=1\r\npedia\r\n0\r\nTrailer: x\r\n\r\n";
        assert_eq!(
            read_chunked(&mut SliceSource::new(ok)),
            Ok(Some(b"Wikipedia".to_vec()))
        );
        assert_eq!(
            read_chunked(&mut SliceSource::new(b"4\r\nWik")),
            Err(Stop::Close)
        );
        assert_eq!(
            read_chunked(&mut SliceSource::new(b"zz\r\n")),
            Err(Stop::Status(400))
        );
        assert_eq!(
            read_chunked(&mut SliceSource::new(b"4\r\nWikiXX\r\n")),
            Err(Stop::Status(400))
        );
        let huge = b"ffffffffffffffff\r\n";
        assert_eq!(read_chunked(&mut SliceSource::new(huge)), Ok(None));
        let over = format!("{:x}\r\n", MAX_BODY + 1);
        assert_eq!(
            read_chunked(&mut SliceSource::new(over.as_bytes())),
            Ok(None)
        );
        let long = vec![b'1'; MAX_CHUNK_LINE + 10];
        assert_eq!(
            read_chunked(&mut SliceSource::new(&long)),
            Err(Stop::Status(400))
        );
    }

    #[test]
    fn responses_never_carry_injected_headers() {
        let r = Response::text(200, "x")
            .with_header("X-Evil", "a\r\nSet-Cookie: y")
            .with_header("Bad Name", "v")
            .with_header("Content-Length", "999");
        let text = String::from_utf8(encode(&r, true, false)).unwrap();
        assert!(
            !text.contains("Set-Cookie") && !text.contains("Bad Name") && !text.contains("999")
        );
        assert!(
            text.contains("Content-Length: 2\r\n") && text.contains("Connection: keep-alive\r\n")
        );
        let not_modified =
            String::from_utf8(encode(&Response::new(304, "x", "body"), false, false)).unwrap();
        assert!(!not_modified.contains("Content-Length") && !not_modified.ends_with("body"));
    }
}
