//! A route's request (`EGRESS_PROXY_URL/ROUTE/rest...`): called on the route's upstream
//! (`egress_routes`, or the model route from `EGRESS_MODEL_URL`) with the worker's
//! placeholder taken out and the route's secret header put in, its certificate verified
//! against the public roots or `EGRESS_CA_FILE`. The answer goes back as it arrives (chunked:
//! a model's server-sent events are not held), and the connection closes after it.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::Duration;

use super::{Proxy, Refused};
use crate::http::wire::{self, Framing, Head};
use crate::settings::egress::MODEL_ROUTE;

/// The largest request body a route takes (a model request with a long context is large).
const MAX_REQUEST_BODY: u64 = 32 << 20;
/// Headers the proxy never passes on: hop-by-hop, framing it redoes, and the worker's
/// credentials (its placeholder goes no further than here).
const DROPPED: [&str; 11] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "content-length",
    "authorization",
    "x-api-key",
];

/// The client for upstreams: public roots or `EGRESS_CA_FILE`, no redirects, no proxy, every
/// status passed back as it is.
pub(super) fn agent(ca_file: Option<&Path>) -> Result<ureq::Agent, String> {
    let roots = crate::pem::roots("setting EGRESS_CA_FILE", ca_file)?;
    let tls = ureq::tls::TlsConfig::builder().root_certs(roots).build();
    Ok(ureq::Agent::config_builder()
        .tls_config(tls)
        .http_status_as_error(false)
        .timeout_connect(Some(Duration::from_secs(10)))
        .timeout_send_body(Some(Duration::from_secs(60)))
        .proxy(None)
        .max_redirects(0)
        .allow_non_standard_methods(true)
        // Below the allocator's threshold for a mapping of its own: a request's buffers come
        // from the heap, not two fresh mappings per call.
        .input_buffer_size(64 * 1024)
        .output_buffer_size(16 * 1024)
        // Kept connections shorter than common servers keep them idle (Node's 5 s), so a
        // body (which cannot be sent twice) seldom meets one the upstream just closed.
        .max_idle_age(Duration::from_secs(4))
        .build()
        .new_agent())
}

/// Where a route sends: its upstream, and the header it adds (name, value).
struct Upstream {
    url: String,
    header: (String, String),
}

impl Proxy {
    /// Route `name` of `template`: its upstream and its secret, read now (a rotated file is
    /// used at once).
    fn route(&self, template: &str, name: &str) -> Result<Upstream, Refused> {
        if name == MODEL_ROUTE {
            let Some((url, key)) = &self.model else {
                return Err(Refused(
                    403,
                    "there is no model route: the proxy's EGRESS_MODEL_URL is not set".into(),
                ));
            };
            let Some(key) = key else {
                return Err(Refused(
                    503,
                    "the model route has no key: the proxy's ANTHROPIC_AUTH_TOKEN_FILE is not set"
                        .into(),
                ));
            };
            return Ok(Upstream {
                url: url.clone(),
                header: ("Authorization".into(), format!("Bearer {key}")),
            });
        }
        let templates = self.templates.current();
        let route = templates
            .get(template)
            .and_then(|t| t.egress_routes.iter().find(|r| r.name == name))
            .ok_or_else(|| Refused(403, format!("template {template} has no route {name:?}")))?;
        let secret = read_secret(&route.file).map_err(|_| {
            Refused(
                503,
                format!("route {name:?}'s secret file cannot be read now"),
            )
        })?;
        Ok(Upstream {
            url: route.url.clone(),
            header: (route.header.clone(), format!("{}{secret}", route.prefix)),
        })
    }
}

/// A route's secret, read at each call (a rotated file is used at once): at most 16 KiB,
/// trimmed. Who else may read the file is said once, when the proxy starts.
fn read_secret(path: &Path) -> std::io::Result<String> {
    let mut text = String::new();
    std::fs::File::open(path)?
        .take(16 * 1024)
        .read_to_string(&mut text)?;
    Ok(text.trim().to_string())
}

/// Serves one route request and its answer.
pub(super) fn serve(
    proxy: &Proxy,
    mut client: TcpStream,
    peer: SocketAddr,
    head: &Head,
    early: Vec<u8>,
) {
    let id = match proxy.identify(head, peer, false) {
        Ok(id) => id,
        Err(r) => return proxy.refuse(&mut client, peer, ("", ""), r),
    };
    let who = (id.template.as_str(), id.worker_id.as_str());
    let path = &head.target[1..];
    let (name, rest) = path
        .find(['/', '?'])
        .map_or((path, ""), |i| (&path[..i], &path[i..]));
    let upstream = match proxy.route(&id.template, name) {
        Ok(u) => u,
        Err(r) => return proxy.refuse(&mut client, peer, who, r),
    };
    // The body's length, or `None` for a chunked one (decoded here, sent on chunked).
    let framing = match body_length(head) {
        Ok(n) => n,
        Err(r) => return proxy.refuse(&mut client, peer, who, r),
    };
    let request = || upstream_request(head, &upstream, rest, framing);
    let raw = std::io::Cursor::new(early).chain(client.try_clone().map_or_else(
        |_| Box::new(std::io::empty()) as Box<dyn Read>,
        |c| Box::new(c) as Box<dyn Read>,
    ));
    let mut body: Box<dyn Read> = match framing {
        Some(n) => Box::new(raw.take(n)),
        None => Box::new(super::chunked::Chunked::new(
            std::io::BufReader::new(raw),
            MAX_REQUEST_BODY,
        )),
    };
    let idempotent = matches!(head.method.as_str(), "GET" | "HEAD" | "OPTIONS" | "DELETE");
    let sent = match framing {
        // An idempotent call without a body can be made again: once, when a kept connection
        // turned out closed by the upstream meanwhile (servers close idle ones when they like).
        Some(0) if idempotent => request().body(()).map(|r| match proxy.upstream.run(r) {
            Err(ureq::Error::Io(_)) => request()
                .body(())
                .map_err(ureq::Error::from)
                .and_then(|r| proxy.upstream.run(r)),
            other => other,
        }),
        Some(0) => request().body(()).map(|r| proxy.upstream.run(r)),
        _ => request()
            .body(ureq::SendBody::from_reader(&mut body))
            .map(|r| proxy.upstream.run(r)),
    };
    let answer = match sent {
        Ok(Ok(a)) => a,
        Ok(Err(e)) => {
            let r = Refused(
                502,
                format!("route {name:?}'s upstream could not be called: {e}"),
            );
            return proxy.refuse(&mut client, peer, who, r);
        }
        Err(e) => {
            let r = Refused(400, format!("the request cannot be passed on: {e}"));
            return proxy.refuse(&mut client, peer, who, r);
        }
    };
    proxy.count(who.0, who.1, "forwarded");
    log::debug!(
        "egress: worker {} called route {name:?}: {}",
        id.worker_id,
        answer.status()
    );
    let _ = pass_back(&mut client, head, answer);
}

/// The call on `upstream` for `head`: its method, the route's URL with `rest`, the worker's
/// headers but hop-by-hop ones and its credentials, the route's header, the body's length.
fn upstream_request(
    head: &Head,
    upstream: &Upstream,
    rest: &str,
    length: Option<u64>,
) -> ureq::http::request::Builder {
    let mut request = ureq::http::Request::builder()
        .method(head.method.as_str())
        .uri(format!("{}{rest}", upstream.url));
    for (k, v) in &head.headers {
        let lower = k.to_ascii_lowercase();
        if !DROPPED.contains(&lower.as_str()) && lower != "host" {
            request = request.header(k.as_str(), v.as_str());
        }
    }
    request = request.header(upstream.header.0.as_str(), upstream.header.1.as_str());
    if let Some(n) = length.filter(|n| *n > 0) {
        request = request.header("Content-Length", n.to_string());
    }
    request
}

/// The request body's declared length (at most [`MAX_REQUEST_BODY`]), or `None` for a chunked
/// body (bounded the same as it is read).
fn body_length(head: &Head) -> Result<Option<u64>, Refused> {
    match wire::framing(head) {
        Ok(Framing::Length(n)) => Ok(Some(n as u64)),
        Ok(Framing::Chunked) => Ok(None),
        Ok(Framing::TooLarge) => head
            .headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
            .and_then(|(_, v)| v.parse::<u64>().ok())
            .filter(|n| *n <= MAX_REQUEST_BODY)
            .map(Some)
            .ok_or_else(|| {
                Refused(
                    413,
                    format!(
                        "a route's request body is at most {} MiB",
                        MAX_REQUEST_BODY >> 20
                    ),
                )
            }),
        Err(r) => Err(Refused(r.status(), r.to_string())),
    }
}

/// The upstream's answer, status and headers as they are (framing redone), its body chunked
/// piece by piece as it arrives.
fn pass_back(
    client: &mut TcpStream,
    head: &Head,
    answer: ureq::http::Response<ureq::Body>,
) -> std::io::Result<()> {
    let status = answer.status();
    let mut out = format!(
        "HTTP/1.1 {} {}\r\n",
        status.as_u16(),
        status.canonical_reason().unwrap_or("")
    );
    for (k, v) in answer.headers() {
        let name = k.as_str();
        if DROPPED[..9].contains(&name) {
            continue;
        }
        if let Ok(v) = v.to_str() {
            out.push_str(&format!("{name}: {v}\r\n"));
        }
    }
    let bodyless = head.method == "HEAD" || status.as_u16() == 204 || status.as_u16() == 304;
    // A declared length is kept (the body is then copied as it is); otherwise chunked.
    let declared = answer
        .headers()
        .get("content-length")
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
        .map(str::to_string);
    if let Some(n) = &declared {
        out.push_str(&format!("Content-Length: {n}\r\n"));
    } else if !bodyless {
        out.push_str("Transfer-Encoding: chunked\r\n");
    }
    out.push_str("Connection: close\r\n\r\n");
    client.write_all(out.as_bytes())?;
    client.flush()?;
    if bodyless {
        return Ok(());
    }
    let mut reader = answer.into_body().into_reader();
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            // The upstream broke off: the client sees a body without its last chunk.
            Err(_) => return Ok(()),
        };
        if declared.is_some() {
            client.write_all(&buf[..n])?;
        } else {
            write!(client, "{n:x}\r\n")?;
            client.write_all(&buf[..n])?;
            client.write_all(b"\r\n")?;
        }
        client.flush()?;
    }
    if declared.is_none() {
        client.write_all(b"0\r\n\r\n")?;
    }
    client.flush()
}
