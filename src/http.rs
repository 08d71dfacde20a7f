//! The HTTP layer behind a small internal interface ([`Request`], [`Response`], [`Handler`]),
//! so that the server underneath can be hardened or replaced without touching the routes or
//! the protocol. Today it is tiny_http with a fixed set of worker threads, each looping
//! `recv()`; shutdown stops them with `unblock()` once per thread.
//!
//! Request bodies are read here, through a cap of [`MAX_BODY`] bytes: a declared
//! `Content-Length` is never used to size a buffer.

use std::fmt;
use std::io::Read;
use std::net::SocketAddr;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

pub const MAX_BODY: usize = 1 << 20;

/// The body as the HTTP layer could read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    Complete(Vec<u8>),
    /// Longer than [`MAX_BODY`] (declared or actual); reading stopped at the cap.
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
}

#[derive(Debug)]
pub enum Error {
    Bind { addr: SocketAddr, reason: String },
    Thread(std::io::Error),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Bind { addr, reason } => write!(f, "cannot listen on {addr}: {reason}"),
            Error::Thread(e) => write!(f, "cannot start an HTTP thread: {e}"),
        }
    }
}

impl std::error::Error for Error {}

/// A bound, not yet serving, listener.
pub struct Server {
    inner: Arc<tiny_http::Server>,
}

impl Server {
    pub fn bind(addr: SocketAddr) -> Result<Server, Error> {
        let inner = tiny_http::Server::http(addr).map_err(|e| Error::Bind {
            addr,
            reason: e.to_string(),
        })?;
        Ok(Server {
            inner: Arc::new(inner),
        })
    }

    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.inner.server_addr().to_ip()
    }

    /// Starts `threads` workers serving `handler`.
    pub fn serve(self, handler: Arc<dyn Handler>, threads: usize) -> Result<Serving, Error> {
        let stopping = Arc::new(AtomicBool::new(false));
        let mut workers = Vec::with_capacity(threads);
        for i in 0..threads.max(1) {
            let server = Arc::clone(&self.inner);
            let handler = Arc::clone(&handler);
            let flag = Arc::clone(&stopping);
            let worker = thread::Builder::new()
                .name(format!("http-{i}"))
                .spawn(move || worker_loop(&server, handler.as_ref(), &flag));
            match worker {
                Ok(w) => workers.push(w),
                Err(e) => {
                    let partial = Serving {
                        server: self.inner,
                        workers,
                        stopping,
                    };
                    partial.shutdown(Duration::from_secs(1));
                    return Err(Error::Thread(e));
                }
            }
        }
        Ok(Serving {
            server: self.inner,
            workers,
            stopping,
        })
    }
}

/// A server that is serving; [`Serving::shutdown`] stops it.
pub struct Serving {
    server: Arc<tiny_http::Server>,
    workers: Vec<JoinHandle<()>>,
    stopping: Arc<AtomicBool>,
}

impl Serving {
    /// Stops taking new requests, lets requests in flight finish for at most `grace`, and
    /// returns whether they all did.
    pub fn shutdown(self, grace: Duration) -> bool {
        self.stopping.store(true, Ordering::SeqCst);
        for _ in &self.workers {
            self.server.unblock();
        }
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline && self.workers.iter().any(|w| !w.is_finished()) {
            thread::sleep(Duration::from_millis(20));
        }
        let all = self.workers.iter().all(JoinHandle::is_finished);
        if all {
            for w in self.workers {
                let _ = w.join();
            }
        }
        all
    }
}

fn worker_loop(server: &tiny_http::Server, handler: &dyn Handler, stopping: &AtomicBool) {
    while !stopping.load(Ordering::SeqCst) {
        match server.recv() {
            Ok(request) => serve_one(request, handler),
            Err(e) if stopping.load(Ordering::SeqCst) => {
                log::debug!("http worker stopping: {e}");
                break;
            }
            Err(e) => log::debug!("http: connection error: {e}"),
        }
    }
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

fn serve_one(mut raw: tiny_http::Request, handler: &dyn Handler) {
    let (path, query) = match raw.url().split_once('?') {
        Some((p, q)) => (p.to_string(), q.to_string()),
        None => (raw.url().to_string(), String::new()),
    };
    let headers: Vec<(String, String)> = raw
        .headers()
        .iter()
        .map(|h| {
            (
                h.field.as_str().as_str().to_string(),
                h.value.as_str().to_string(),
            )
        })
        .collect();
    let declared = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("Content-Length"))
        .map(|(_, v)| v.trim().parse::<u64>());
    let body = match declared {
        Some(Ok(n)) if n > MAX_BODY as u64 => Body::TooLarge,
        _ => {
            let mut buf = Vec::new();
            match raw
                .as_reader()
                .take(MAX_BODY as u64 + 1)
                .read_to_end(&mut buf)
            {
                Ok(_) if buf.len() > MAX_BODY => Body::TooLarge,
                Ok(_) => Body::Complete(buf),
                Err(e) => {
                    log::debug!("http: cannot read request body: {e}");
                    return;
                }
            }
        }
    };
    let request = Request {
        method: raw.method().as_str().to_string(),
        path,
        query,
        headers,
        body,
    };
    let response = match catch_unwind(AssertUnwindSafe(|| handler.handle(request))) {
        Ok(r) => r,
        Err(_) => {
            log::error!("request handler panicked; answered 500");
            Response::text(500, "internal error")
        }
    };
    let mut out = tiny_http::Response::from_data(response.body).with_status_code(response.status);
    for (name, value) in &response.headers {
        let header = Some(())
            .filter(|()| header_safe(name, value))
            .and_then(|()| tiny_http::Header::from_bytes(name.as_bytes(), value.as_bytes()).ok());
        match header {
            Some(h) => out.add_header(h),
            None => log::warn!("http: dropped an invalid response header {name:?}"),
        }
    }
    if let Err(e) = raw.respond(out) {
        log::debug!("http: cannot write response: {e}");
    }
}
