//! The accept loop and the connections: one thread per connection, at most
//! [`Limits::max_connections`] at once, each reading with deadlines and answering through the
//! [`Handler`]. What goes over the wire is [`super::wire`]'s.
//!
//! A connection's thread, its connection ended, waits a moment as a spare ([`SPARES`],
//! [`SPARE_WAIT`]) and serves the next connection accepted meanwhile: a client that opens a
//! connection per call (curl, or a flood of them) costs no thread start and end each time, and
//! a new connection is served by a thread that is already there.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use super::wire::{self, Framing, Source, Stop};
use super::{Body, Error, Handler, Limits, Request, Response, Sink};

/// How often a blocked read wakes up to notice a shutdown.
const SLICE: Duration = Duration::from_millis(250);
const THREAD_STACK: usize = 512 * 1024;
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
/// At most this many connection threads wait for a next connection ...
const SPARES: usize = 16;
/// ... each for at most this long, then it ends.
const SPARE_WAIT: Duration = Duration::from_secs(1);

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
        let shared = Arc::new(Shared::new(handler, limits));
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
    spares: Mutex<Spares>,
    /// Told when a connection is handed to the spares, and at shutdown.
    handed: Condvar,
}

/// The connection threads waiting for a next connection, and the connections handed to them
/// not yet taken (never more than the threads waiting).
#[derive(Default)]
struct Spares {
    waiting: usize,
    handed: VecDeque<TcpStream>,
}

impl Shared {
    fn new(handler: Arc<dyn Handler>, limits: Limits) -> Shared {
        Shared {
            handler,
            limits,
            stopping: AtomicBool::new(false),
            active: Mutex::new(0),
            drained: Condvar::new(),
            spares: Mutex::default(),
            handed: Condvar::new(),
        }
    }

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

    fn spares(&self) -> std::sync::MutexGuard<'_, Spares> {
        self.spares.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Hands `stream` to a waiting spare thread, or gives it back when none is free.
    fn hand_to_spare(&self, stream: TcpStream) -> Option<TcpStream> {
        let mut spares = self.spares();
        if spares.waiting > spares.handed.len() {
            spares.handed.push_back(stream);
            self.handed.notify_one();
            return None;
        }
        Some(stream)
    }

    /// Wakes the waiting spares at a shutdown: they end (after taking what was handed to
    /// them). The lock is taken first, so no spare is between its look and its wait.
    fn end_spares(&self) {
        drop(self.spares());
        self.handed.notify_all();
    }

    /// Waits as a spare for a next connection, at most [`SPARE_WAIT`]; `None` when none came,
    /// when [`SPARES`] threads wait already, or at shutdown. A connection handed over is always
    /// taken, also at shutdown (it is counted as active: it is served, and closes at once).
    fn next_connection(&self) -> Option<TcpStream> {
        let mut spares = self.spares();
        if spares.waiting >= SPARES || self.stopping() {
            return None;
        }
        spares.waiting += 1;
        let until = Instant::now() + SPARE_WAIT;
        loop {
            if let Some(stream) = spares.handed.pop_front() {
                spares.waiting -= 1;
                return Some(stream);
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() || self.stopping() {
                spares.waiting -= 1;
                return None;
            }
            spares = self
                .handed
                .wait_timeout(spares, left)
                .map(|(g, _)| g)
                .unwrap_or_else(|p| p.into_inner().0);
        }
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
        self.shared.end_spares();
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
        let Some(stream) = shared.hand_to_spare(stream) else {
            continue;
        };
        let conn_shared = Arc::clone(shared);
        let spawned = thread::Builder::new()
            .name("http-conn".into())
            .stack_size(THREAD_STACK)
            .spawn(move || {
                let mut next = Some(stream);
                while let Some(stream) = next {
                    serve_connection(stream, &conn_shared);
                    conn_shared.release();
                    next = conn_shared.next_connection();
                }
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

    /// Waits until `until` before the next request is read ([`HOLD_AFTER_429`]); what the
    /// client sends meanwhile is kept for it. Its close (or a shutdown) ends the wait.
    fn hold(&mut self, until: Instant) -> Result<(), Stop> {
        let mut chunk = [0u8; 8192];
        loop {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() || self.shared.stopping() {
                return Ok(());
            }
            if self.buf.len() >= HOLD_BYTES {
                thread::sleep(left.min(SLICE));
                continue;
            }
            let _ = self.stream.set_read_timeout(Some(left.min(SLICE)));
            match self.stream.read(&mut chunk) {
                Ok(0) => return Err(Stop::Close),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
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

fn serve_connection(stream: TcpStream, shared: &Shared) {
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
        match wire::parse_head(&conn.buf)? {
            Some(parsed) => break parsed,
            None => conn.fill(head_deadline, false).map_err(|_| Stop::Close)?,
        }
    };
    conn.consume(head_len);
    wire::check_host(&head)?;

    let keep_alive = !conn.shared.stopping()
        && if head.minor == 1 {
            !wire::has_token(&head.headers, "Connection", "close")
        } else {
            wire::has_token(&head.headers, "Connection", "keep-alive")
        };
    let framing = wire::framing(&head)?;
    let expects_continue = wire::has_token(&head.headers, "Expect", "100-continue");
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
            Body::Complete(wire::read_length(&mut src, n).map_err(|_| Stop::Close)?)
        }
        Framing::Chunked => {
            if expects_continue && !conn.write(b"HTTP/1.1 100 Continue\r\n\r\n") {
                return Err(Stop::Close);
            }
            let mut src = BodySource {
                conn,
                deadline: body_deadline,
            };
            match wire::read_chunked(&mut src)? {
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

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};

    use super::*;

    /// Answers each request with the id of the thread that served it.
    struct WhichThread;

    impl Handler for WhichThread {
        fn handle(&self, _: Request) -> Response {
            Response::text(200, &format!("{:?}", thread::current().id()))
        }
    }

    fn shared() -> Shared {
        Shared::new(Arc::new(WhichThread), Limits::default())
    }

    #[test]
    fn connections_one_after_another_are_served_by_the_threads_already_there() {
        let server = Server::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = server.local_addr().unwrap();
        let serving = server
            .serve(Arc::new(WhichThread), Limits::default())
            .unwrap();
        let mut threads = std::collections::HashSet::new();
        for _ in 0..30 {
            let mut s = TcpStream::connect(addr).unwrap();
            s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                .unwrap();
            let mut answer = String::new();
            s.read_to_string(&mut answer).unwrap();
            let body = answer.split("\r\n\r\n").nth(1).unwrap().trim().to_string();
            threads.insert(body);
        }
        // A thread started for each would be 30; a new one is started only when the spare
        // has not yet seen the last connection's end as the next one comes.
        assert!(
            threads.len() <= 10,
            "30 connections, {} threads",
            threads.len()
        );
        assert!(serving.shutdown(Duration::from_secs(5)));
    }

    #[test]
    fn at_most_spares_threads_wait_and_each_takes_one_connection() {
        let shared = Arc::new(shared());
        let waiters: Vec<_> = (0..SPARES)
            .map(|_| {
                let shared = Arc::clone(&shared);
                thread::spawn(move || shared.next_connection().is_some())
            })
            .collect();
        while shared.spares().waiting < SPARES {
            thread::sleep(Duration::from_millis(1));
        }
        // One more does not wait.
        let started = Instant::now();
        assert!(shared.next_connection().is_none());
        assert!(
            started.elapsed() < SPARE_WAIT / 2,
            "{:?}",
            started.elapsed()
        );
        // Each waiting spare is handed one connection; past them, the accept loop gets it back.
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let clients: Vec<_> = (0..=SPARES)
            .map(|_| TcpStream::connect(addr).unwrap())
            .collect();
        for i in 0..=SPARES {
            let (stream, _) = listener.accept().unwrap();
            let back = shared.hand_to_spare(stream);
            assert_eq!(back.is_some(), i == SPARES, "connection {i}");
        }
        for w in waiters {
            assert!(w.join().unwrap(), "a spare took no connection");
        }
        assert_eq!(shared.spares().waiting, 0);
        assert!(shared.spares().handed.is_empty());
        drop(clients);
    }

    #[test]
    fn a_shutdown_ends_the_waiting_spares() {
        let shared = Arc::new(shared());
        let spare = {
            let shared = Arc::clone(&shared);
            thread::spawn(move || shared.next_connection().is_none())
        };
        while shared.spares().waiting < 1 {
            thread::sleep(Duration::from_millis(1));
        }
        let started = Instant::now();
        shared.stopping.store(true, Ordering::SeqCst);
        shared.end_spares();
        assert!(spare.join().unwrap());
        assert!(
            started.elapsed() < SPARE_WAIT / 2,
            "{:?}",
            started.elapsed()
        );
    }
}
