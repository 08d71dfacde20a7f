//! One connection, served: requests read with deadlines (a head, then its body as it
//! arrives), each answered through the [`Handler`] — at once, streamed, or after a hold when
//! the caller was just refused — until the client or a shutdown ends it, then a lingering
//! close. What goes over the wire is [`super::wire`]'s; the accept loop is `server.rs`'s.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

use super::wire::{self, Framing, Source, Stop};
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;

use super::{Body, Handler, Limits, Request, Response, Sink};

/// How often a blocked read wakes up to notice a shutdown.
const SLICE: Duration = Duration::from_millis(250);
/// A lingering close (after an answer that left input unread) lasts at most this long ...
const LINGER_TIME: Duration = Duration::from_secs(5);
/// ... ends when the client has sent nothing for this long ...
const LINGER_IDLE: Duration = Duration::from_secs(1);
/// ... and discards at most this many bytes.
const LINGER_BYTES: usize = 8 << 20;
/// After a 429 on a kept-alive connection, the next request on it is read no sooner than this:
/// a client that ignores `Retry-After` and asks again at once waits here, idle, instead of
/// taking the cores from everyone else. A client that closes is let go at once.
const HOLD_AFTER_429: Duration = Duration::from_millis(100);
/// What a held connection may send meanwhile before it is no longer read until the hold ends.
const HOLD_BYTES: usize = 64 * 1024;

/// What a connection is served with: the handler, the limits, and whether the server is
/// shutting down.
pub(super) struct Served<'a> {
    pub handler: &'a dyn Handler,
    pub limits: &'a Limits,
    pub stopping: &'a AtomicBool,
}

impl Served<'_> {
    fn stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }
}

struct Conn<'a> {
    stream: TcpStream,
    buf: Vec<u8>,
    shared: &'a Served<'a>,
}

impl Conn<'_> {
    /// Reads more bytes into the buffer before `deadline`. `interruptible`: a shutdown may
    /// end the wait (only while no request is under way).
    fn fill(&mut self, deadline: Instant, interruptible: bool) -> Result<(), Stop> {
        loop {
            if interruptible && self.shared.stopping() {
                return Err(Stop::Close);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Stop::Close);
            }
            if self.read_some(left)? {
                return Ok(());
            }
        }
    }

    /// Waits until `until` before the next request is read ([`HOLD_AFTER_429`]); what the
    /// client sends meanwhile is kept for it. Its close (or a shutdown) ends the wait.
    fn hold(&mut self, until: Instant) -> Result<(), Stop> {
        loop {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() || self.shared.stopping() {
                return Ok(());
            }
            if self.buf.len() >= HOLD_BYTES {
                thread::sleep(left.min(SLICE));
                continue;
            }
            self.read_some(left)?;
        }
    }

    /// One read of what the client sent, waiting at most `left` (and a [`SLICE`], so a
    /// shutdown is noticed): whether bytes came (kept in the buffer); its close, or a broken
    /// connection, is the end.
    fn read_some(&mut self, left: Duration) -> Result<bool, Stop> {
        let mut chunk = [0u8; 8192];
        let _ = self.stream.set_read_timeout(Some(left.min(SLICE)));
        match self.stream.read(&mut chunk) {
            Ok(0) => Err(Stop::Close),
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                Ok(true)
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) =>
            {
                Ok(false)
            }
            Err(_) => Err(Stop::Close),
        }
    }

    fn consume(&mut self, n: usize) -> Vec<u8> {
        let rest = self.buf.split_off(n);
        std::mem::replace(&mut self.buf, rest)
    }

    fn write(&mut self, bytes: &[u8]) -> bool {
        self.stream
            .write_all(bytes)
            .and_then(|()| self.stream.flush())
            .is_ok()
    }
}

/// A streamed body's pieces as chunks on the connection.
struct ChunkSink<'a, 'b> {
    conn: &'a mut Conn<'b>,
    /// False once a write failed: nothing more is sent.
    open: bool,
}

impl Sink for ChunkSink<'_, '_> {
    fn send(&mut self, bytes: &[u8]) -> bool {
        if self.open && !bytes.is_empty() {
            self.open = self.conn.write(&wire::chunk(bytes));
        }
        self.open
    }

    fn closing(&self) -> bool {
        self.conn.shared.stopping()
    }

    /// A look without waiting: the end of what the client sends (it closed its side), or a
    /// broken connection. Bytes the client sent are left where they are.
    fn gone(&mut self) -> bool {
        let stream = &self.conn.stream;
        if !self.open || stream.set_nonblocking(true).is_err() {
            return !self.open;
        }
        let looked = stream.peek(&mut [0u8; 1]);
        let _ = stream.set_nonblocking(false);
        match looked {
            Ok(0) => true,
            Ok(_) => false,
            Err(e) => !matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
            ),
        }
    }
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

/// What happens to a connection after an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum After {
    /// Read the next request.
    KeepAlive,
    /// Close: the request was read whole.
    Close,
    /// Close after a lingering wait: the client may still be sending what was never read.
    Linger,
}

pub(super) fn serve_connection(stream: TcpStream, shared: &Served<'_>) {
    let _ = stream.set_nodelay(true);
    // Once for the connection (a stream writes often); nothing changes it later.
    let _ = stream.set_write_timeout(Some(shared.limits.write_timeout));
    let mut conn = Conn {
        stream,
        buf: Vec::new(),
        shared,
    };
    let mut first = true;
    let after = loop {
        match serve_request(&mut conn, first) {
            Ok(After::KeepAlive) => first = false,
            Ok(after) => break after,
            Err(Stop::Close) => break After::Close,
            Err(Stop::Refuse(refusal)) => {
                let status = refusal.status();
                shared.handler.refused(status);
                let r = Response::text(status, &refusal.to_string());
                conn.write(&wire::encode(&r, false, false));
                break After::Linger;
            }
        }
    };
    if after == After::Linger {
        linger(&mut conn.stream);
    }
    let _ = conn.stream.shutdown(Shutdown::Both);
}

/// A lingering close: the answer is out; shut down the write side (the client sees the end
/// of the response) and discard what the client still sends, so closing does not reset the
/// connection under a client that writes its whole body before reading. Bounded by
/// [`LINGER_TIME`], [`LINGER_IDLE`] and [`LINGER_BYTES`], so it cannot hold a slot for long.
fn linger(stream: &mut TcpStream) {
    if stream.shutdown(Shutdown::Write).is_err() {
        return;
    }
    let deadline = Instant::now() + LINGER_TIME;
    let mut discarded = 0usize;
    let mut chunk = [0u8; 16 * 1024];
    while discarded < LINGER_BYTES {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        let _ = stream.set_read_timeout(Some(left.min(LINGER_IDLE)));
        match stream.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => discarded += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
}

/// Serves one request and says what becomes of the connection.
fn serve_request(conn: &mut Conn<'_>, first: bool) -> Result<After, Stop> {
    let head = read_head(conn, first)?;
    let keep_alive = !conn.shared.stopping()
        && if head.minor == 1 {
            !wire::has_token(&head.headers, "Connection", "close")
        } else {
            wire::has_token(&head.headers, "Connection", "keep-alive")
        };
    let body = read_body(conn, &head)?;
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
            log::error!("request handler panicked; answered 500 and serving on");
            handler.refused(500);
            Response::text(500, "internal error")
        }
    };
    // After a refused body the rest of it is never read: the connection cannot continue.
    let keep =
        keep_alive && !too_large && !wire::has_token(&response.headers, "Connection", "close");
    let bytes = wire::encode(&response, keep, is_head);
    if let (Some(stream), false) = (&response.stream, is_head) {
        if conn.write(&bytes) {
            let mut sink = ChunkSink { conn, open: true };
            stream.0.run(&mut sink);
            if sink.open {
                sink.conn.write(wire::LAST_CHUNK);
            }
        }
        return Ok(After::Close);
    }
    let written = conn.write(&bytes);
    if written && keep && response.status == 429 {
        conn.hold(Instant::now() + HOLD_AFTER_429)?;
    }
    Ok(match (written, keep, too_large) {
        (true, true, _) => After::KeepAlive,
        (true, false, true) => After::Linger,
        _ => After::Close,
    })
}

/// Waits for a request's first byte (idle: the head timeout for a connection's first
/// request, the idle timeout after), then for its whole head, parsed and its `Host` checked.
fn read_head(conn: &mut Conn<'_>, first: bool) -> Result<wire::Head, Stop> {
    let limits = conn.shared.limits;
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
        match wire::parse_head(&conn.buf)? {
            Some(parsed) => break parsed,
            None => conn.fill(head_deadline, false).map_err(|_| Stop::Close)?,
        }
    };
    conn.consume(head_len);
    wire::check_host(&head)?;
    Ok(head)
}

/// The body `head` announces, read within the body timeout (a `100 Continue` first when the
/// client waits for one); `TooLarge` past the bound, without reading it.
fn read_body(conn: &mut Conn<'_>, head: &wire::Head) -> Result<Body, Stop> {
    let framing = wire::framing(head)?;
    let expects_continue = wire::has_token(&head.headers, "Expect", "100-continue");
    let deadline = Instant::now() + conn.shared.limits.body_timeout;
    if matches!(framing, Framing::Length(1..) | Framing::Chunked)
        && expects_continue
        && !conn.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    {
        return Err(Stop::Close);
    }
    let mut src = BodySource { conn, deadline };
    Ok(match framing {
        Framing::TooLarge => Body::TooLarge,
        Framing::Length(0) => Body::Complete(Vec::new()),
        Framing::Length(n) => {
            Body::Complete(wire::read_length(&mut src, n).map_err(|_| Stop::Close)?)
        }
        Framing::Chunked => match wire::read_chunked(&mut src)? {
            Some(b) => Body::Complete(b),
            None => Body::TooLarge,
        },
    })
}
