//! The accept loop: one thread per connection, at most [`Limits::max_connections`] at once,
//! each serving its connection as `conn.rs` says (deadlines, the [`Handler`], the lingering
//! close). What goes over the wire is [`super::wire`]'s.
//!
//! A connection's thread, its connection ended, waits a moment as a spare ([`SPARES`],
//! [`SPARE_WAIT`]) and serves the next connection accepted meanwhile: a client that opens a
//! connection per call (curl, or a flood of them) costs no thread start and end each time, and
//! a new connection is served by a thread that is already there.

use std::collections::VecDeque;
use std::io::{self, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use super::conn::{serve_connection, Served};
use super::{Error, Handler, Limits};

const THREAD_STACK: usize = 512 * 1024;
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
                    serve_connection(
                        stream,
                        &Served {
                            handler: conn_shared.handler.as_ref(),
                            limits: &conn_shared.limits,
                            stopping: &conn_shared.stopping,
                        },
                    );
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
#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};

    use super::*;
    use crate::http::{Request, Response};

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
