//! The egress proxy (`a2a-worker-controller egress`): a fenced worker's only way out. Its own
//! process (and image, and Deployment), so it scales apart from the controller; it keeps
//! nothing between requests that another replica would need:
//!
//! - who: each request carries its worker's placeholder (`who.rs`), checked against the
//!   egress key, then the controller is asked whether that worker runs and where (its word
//!   trusted for `EGRESS_RECHECK`): a stopped worker's placeholder is refused within that, and
//!   one worker's placeholder from another worker's address is refused;
//! - where: `CONNECT host:port` to a destination the worker's template allows
//!   (`tunnel.rs`: a byte relay, no TLS interception); a request to `/ROUTE/...` is called on
//!   that route's upstream with its secret header added (`forward.rs`), the answer streamed
//!   back as it arrives;
//! - every refusal is one line, 403 (a rule said no) or 407 (no or a wrong placeholder),
//!   logged without secrets and counted by template, worker and outcome (`/metrics`).
//!
//! Requests are read with the controller's HTTP layer's parser and bounds (`http::wire`): the
//! same head limits, framing checks and deadlines answer hostile input alike.

mod chunked;
mod forward;
mod tunnel;
mod who;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::http::wire::{self, Head};
use crate::http::{MAX_HEAD, MAX_REQUEST_LINE};
use crate::settings::egress::EgressKey;
use crate::settings::templates::TemplatesFile;
use crate::settings::Settings;

/// A connection thread's stack: as the controller's HTTP threads (a route's call may make a
/// TLS handshake, which takes more than 128 KiB in a debug build).
const STACK: usize = 512 * 1024;

/// The proxy: what every connection consults.
pub struct Proxy {
    key: EgressKey,
    templates: Arc<TemplatesFile>,
    who: who::Who,
    upstream: ureq::Agent,
    /// The model route's upstream and key (`EGRESS_MODEL_URL`, `ANTHROPIC_AUTH_TOKEN(_FILE)`).
    model: Option<(String, Option<String>)>,
    counts: Mutex<BTreeMap<(String, String, &'static str), u64>>,
    open: AtomicUsize,
    max_connections: usize,
    /// `HTTP_HEAD_TIMEOUT`: the whole head within this, or the connection closes (as the
    /// controller's HTTP layer closes it: a slow client holds a thread no longer).
    head_timeout: Duration,
}

/// Why the proxy could not start: one line naming the setting.
#[derive(Debug)]
pub struct Error(pub String);

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl Proxy {
    /// The proxy these settings describe (nothing bound yet).
    pub fn new(settings: &Settings) -> Result<Proxy, Error> {
        let key = settings.egress.key.clone().ok_or_else(|| {
            Error("the egress proxy needs the placeholders' key: set EGRESS_KEY_FILE (or A2A_AUTH_TOKEN, from which it is derived otherwise)".into())
        })?;
        let accepts: Box<crate::settings::templates::Accepts> = Box::new(|_| Ok(()));
        let default = settings.default_template();
        let templates = match &settings.templates_file {
            Some(path) => TemplatesFile::open(path.clone(), default, accepts)
                .map_err(|why| Error(format!("setting WORKER_TEMPLATES_FILE is invalid: {why}")))?,
            None => TemplatesFile::fixed(default, accepts).map_err(Error)?,
        };
        // Said once: a route's secret file others may read (its reads later say nothing).
        for t in templates.current().all() {
            for r in &t.egress_routes {
                match crate::secret_file::read_secret_file(&r.file) {
                    Ok((_, Some(warning))) => {
                        log::warn!("route {:?} of template {}: {warning}", r.name, t.name)
                    }
                    Ok(_) => {}
                    Err(why) => log::warn!("route {:?} of template {}: {why}", r.name, t.name),
                }
            }
        }
        Ok(Proxy {
            key,
            templates: Arc::new(templates),
            who: who::Who::new(&settings.egress.controller_url, settings.egress.recheck),
            upstream: forward::agent(settings.egress.ca_file.as_deref()).map_err(Error)?,
            model: settings
                .egress
                .model_url
                .clone()
                .map(|u| (u, settings.anthropic_auth_token.clone())),
            counts: Mutex::default(),
            open: AtomicUsize::new(0),
            max_connections: settings.egress.max_connections,
            head_timeout: settings.http_head_timeout,
        })
    }

    /// Counts one outcome of `template`'s `worker`.
    fn count(&self, template: &str, worker: &str, outcome: &'static str) {
        let mut counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        *counts
            .entry((template.to_string(), worker.to_string(), outcome))
            .or_default() += 1;
    }

    /// The Prometheus text of the counts.
    fn metrics(&self) -> String {
        let counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = String::from(
            "# HELP a2a_egress_requests_total Requests and tunnels through the egress proxy, by template, worker and outcome.\n# TYPE a2a_egress_requests_total counter\n",
        );
        for ((template, worker, outcome), n) in counts.iter() {
            out.push_str(&format!(
                "a2a_egress_requests_total{{template=\"{template}\",worker=\"{worker}\",outcome=\"{outcome}\"}} {n}\n"
            ));
        }
        out.push_str(&format!(
            "# HELP a2a_egress_connections Connections held now, tunnels included.\n# TYPE a2a_egress_connections gauge\na2a_egress_connections {}\n",
            self.open.load(Ordering::Relaxed)
        ));
        out
    }
}

/// Serves `proxy` on `listener` until the process ends: a thread per connection, at most
/// `EGRESS_MAX_CONNECTIONS` at once (one more is answered 503 and closed). A thread whose
/// connection ended waits up to a second for the next one (one waits at a time), so a
/// connection per request does not start a thread per request.
pub fn serve(proxy: Arc<Proxy>, listener: TcpListener) {
    let spare = Arc::new(Spare::default());
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        if proxy.open.fetch_add(1, Ordering::AcqRel) >= proxy.max_connections {
            proxy.open.fetch_sub(1, Ordering::AcqRel);
            let mut stream = stream;
            let _ = reply(
                &mut stream,
                503,
                "the egress proxy holds as many connections as EGRESS_MAX_CONNECTIONS allows",
            );
            continue;
        }
        // A thread waiting for work takes it; otherwise a new one.
        let Some(stream) = spare.hand_over(stream) else {
            continue;
        };
        let (p, spare) = (Arc::clone(&proxy), Arc::clone(&spare));
        let spawned = std::thread::Builder::new()
            .name("egress".into())
            .stack_size(STACK)
            .spawn(move || {
                connection(&p, stream);
                p.open.fetch_sub(1, Ordering::AcqRel);
                while let Some(next) = spare.wait() {
                    connection(&p, next);
                    p.open.fetch_sub(1, Ordering::AcqRel);
                }
            });
        if let Err(e) = spawned {
            proxy.open.fetch_sub(1, Ordering::AcqRel);
            log::warn!("egress: no thread for a connection: {e}");
        }
    }
}

/// Where a thread whose connection ended waits (one at a time) for the next.
#[derive(Default)]
struct Spare {
    slot: Mutex<(bool, Option<TcpStream>)>,
    handed: std::sync::Condvar,
}

impl Spare {
    /// Gives `stream` to the waiting thread; back when none waits.
    fn hand_over(&self, stream: TcpStream) -> Option<TcpStream> {
        let mut slot = self.slot.lock().unwrap_or_else(|p| p.into_inner());
        if !slot.0 || slot.1.is_some() {
            return Some(stream);
        }
        slot.1 = Some(stream);
        self.handed.notify_one();
        None
    }

    /// The next connection, if one comes within a second and no other thread waits already.
    fn wait(&self) -> Option<TcpStream> {
        let mut slot = self.slot.lock().unwrap_or_else(|p| p.into_inner());
        if slot.0 {
            return None;
        }
        slot.0 = true;
        let deadline = std::time::Instant::now() + Duration::from_secs(1);
        while slot.1.is_none() {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                break;
            }
            slot = self
                .handed
                .wait_timeout(slot, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        slot.0 = false;
        slot.1.take()
    }
}

/// Runs the proxy these settings describe (the `egress` subcommand).
pub fn run(settings: &Settings) -> Result<(), Error> {
    let proxy = Arc::new(Proxy::new(settings)?);
    let listener = TcpListener::bind(settings.egress.listen).map_err(|e| {
        Error(format!(
            "setting EGRESS_LISTEN: cannot listen on {}: {e}",
            settings.egress.listen
        ))
    })?;
    log::info!(
        "egress proxy listening on {}; asking {} which workers run; model route: {}",
        settings.egress.listen,
        settings.egress.controller_url,
        settings
            .egress
            .model_url
            .as_deref()
            .unwrap_or("none (EGRESS_MODEL_URL unset)")
    );
    serve(proxy, listener);
    Ok(())
}

/// One connection: its head read and bounded as the controller's HTTP layer bounds it, then
/// a tunnel, a route's call, or the proxy's own `/healthz` and `/metrics`.
fn connection(proxy: &Proxy, mut stream: TcpStream) {
    let Ok(peer) = stream.peer_addr() else { return };
    let _ = stream.set_write_timeout(Some(Duration::from_secs(30)));
    let _ = stream.set_nodelay(true);
    let deadline = std::time::Instant::now() + proxy.head_timeout;
    let (head, rest) = match read_head(&mut stream, deadline) {
        Ok(Some(read)) => read,
        Ok(None) => return,
        Err(refusal) => {
            let _ = reply(&mut stream, refusal.status(), &refusal.to_string());
            return;
        }
    };
    let _ = stream.set_read_timeout(None);
    match (head.method.as_str(), head.target.as_str()) {
        ("GET" | "HEAD", "/healthz") => {
            let _ = reply(&mut stream, 200, "ok");
        }
        ("GET" | "HEAD", "/metrics") => {
            let body = proxy.metrics();
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
        ("CONNECT", _) => tunnel::serve(proxy, stream, peer, &head, rest),
        (_, target) if target.starts_with('/') => forward::serve(proxy, stream, peer, &head, rest),
        _ => {
            let _ = reply(&mut stream, 403, "plain http:// through the proxy is refused: use https (CONNECT), or a route of your template (EGRESS_PROXY_URL/ROUTE/...)");
        }
    }
}

/// The head, and the bytes read after it; `None` when the peer left before a head, or did
/// not send it all before `deadline` (however slowly its bytes came).
fn read_head(
    stream: &mut TcpStream,
    deadline: std::time::Instant,
) -> Result<Option<(Head, Vec<u8>)>, wire::Refusal> {
    let mut buf = Vec::with_capacity(2048);
    let mut chunk = [0u8; 4096];
    loop {
        match wire::parse_head(&buf)? {
            Some((head, used)) => {
                wire::check_host(&head).or_else(|r| match head.method.as_str() {
                    // A CONNECT's authority is its target (RFC 9110 9.3.6): no Host needed.
                    "CONNECT" => Ok(()),
                    _ => Err(r),
                })?;
                return Ok(Some((head, buf[used..].to_vec())));
            }
            None if buf.len() >= MAX_HEAD => return Err(wire::Refusal::HeadTooLarge),
            None if !buf.contains(&b'\n') && buf.len() > MAX_REQUEST_LINE => {
                return Err(wire::Refusal::RequestLineTooLong)
            }
            None => {}
        }
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            return Ok(None);
        }
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return Ok(None),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// A one-line answer, and the connection closes.
fn reply(stream: &mut TcpStream, status: u16, line: &str) -> std::io::Result<()> {
    let mut extra = String::new();
    if status == 407 {
        extra.push_str("Proxy-Authenticate: Basic realm=\"a2a-egress\"\r\n");
    }
    write!(
        stream,
        "HTTP/1.1 {status} {}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\n{extra}Connection: close\r\n\r\n{line}\n",
        wire::reason(status),
        line.len() + 1
    )?;
    stream.flush()
}

/// A refusal of a worker's request: its status and one line.
pub(crate) struct Refused(pub u16, pub String);

impl Proxy {
    /// Answers `refused`, logs it (no secret is in it) and counts it.
    fn refuse(&self, stream: &mut TcpStream, peer: SocketAddr, who: (&str, &str), r: Refused) {
        log::info!(
            "egress: refused {} from {} (template {}, worker {}): {}",
            r.0,
            peer.ip(),
            if who.0.is_empty() { "-" } else { who.0 },
            if who.1.is_empty() { "-" } else { who.1 },
            r.1
        );
        self.count(
            who.0,
            who.1,
            if r.0 == 407 {
                "unauthenticated"
            } else {
                "refused"
            },
        );
        let _ = reply(stream, r.0, &r.1);
    }
}
