//! What both engine clients (Docker's over a Unix socket, Kubernetes' over TLS) need to make a
//! call: the method, one way to send a request with a per-call timeout, a capped body read,
//! query-value encoding, and one-line error texts.

use std::io::Read;
use std::time::Duration;

use ureq::http;

/// The HTTP methods the engine clients use. A typed method cannot silently become another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    Get,
    Post,
    Delete,
    /// A JSON merge patch (RFC 7386: `application/merge-patch+json`).
    Patch,
}

impl Method {
    fn as_http(self) -> http::Method {
        match self {
            Method::Get => http::Method::GET,
            Method::Post => http::Method::POST,
            Method::Delete => http::Method::DELETE,
            Method::Patch => http::Method::PATCH,
        }
    }
}

/// Sends one request through `agent` within `timeout` (the whole call): `headers`, and a JSON
/// `body` when given. The response comes back whatever its status.
pub fn send(
    agent: &ureq::Agent,
    method: Method,
    url: &str,
    headers: &[(&str, &str)],
    body: Option<&serde_json::Value>,
    timeout: Duration,
) -> Result<http::Response<ureq::Body>, ureq::Error> {
    let mut builder = http::Request::builder().method(method.as_http()).uri(url);
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    match body {
        Some(json) => {
            let media = if method == Method::Patch {
                "application/merge-patch+json"
            } else {
                "application/json"
            };
            let request = builder
                .header("Content-Type", media)
                .body(json.to_string())?;
            let request = agent
                .configure_request(request)
                .timeout_global(Some(timeout))
                .build();
            agent.run(request)
        }
        // A POST without a body still says `Content-Length: 0` (dockerd refuses a start whose
        // body length is unknown); GET and DELETE send no body at all.
        None if method == Method::Post => {
            let request = builder.body(Vec::<u8>::new())?;
            let request = agent
                .configure_request(request)
                .timeout_global(Some(timeout))
                .build();
            agent.run(request)
        }
        None => {
            let request = builder.body(())?;
            let request = agent
                .configure_request(request)
                .timeout_global(Some(timeout))
                .build();
            agent.run(request)
        }
    }
}

/// The whole body, refusing more than `limit` bytes. The buffer is sized once, from
/// `Content-Length` when the engine sends one (a chunked answer starts at [`BODY_START`]):
/// grown from empty, a 30-container list would be copied ten times on its way in.
pub fn read_body(
    response: &mut http::Response<ureq::Body>,
    limit: u64,
) -> Result<Vec<u8>, ureq::Error> {
    let hint = response
        .body()
        .content_length()
        .unwrap_or(BODY_START)
        .min(limit)
        .min(MAX_HINT);
    let mut body = Vec::with_capacity(hint as usize);
    response
        .body_mut()
        .with_config()
        .limit(limit)
        .reader()
        .read_to_end(&mut body)?;
    Ok(body)
}

/// Where a body of unknown length starts (a 30-container list is 31 KB).
const BODY_START: u64 = 16 << 10;
/// The most a stated length reserves before the bytes arrive.
const MAX_HINT: u64 = 1 << 20;

/// The last `lines` lines of a log response's body, read as a stream (see [`super::tail`]);
/// Docker's frames decoded when `framed`.
pub fn log_tail(
    response: &mut http::Response<ureq::Body>,
    lines: u32,
    framed: bool,
) -> std::io::Result<super::Logs> {
    let mut reader = response
        .body_mut()
        .with_config()
        .limit(super::tail::MAX_LOG_READ)
        .reader();
    super::tail::read_tail(&mut reader, lines, framed)
}

/// Percent-encodes everything but RFC 3986's unreserved characters (label selectors, filters,
/// names in query strings).
pub fn percent_encode(s: &str) -> String {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push('%');
            out.push(HEX[(b >> 4) as usize] as char);
            out.push(HEX[(b & 0xf) as usize] as char);
        }
    }
    out
}

/// The I/O buffer size of the engine clients, each way, and the most a response head may
/// take. ureq's defaults (128 KiB each way) cost 256 KiB per concurrent engine call.
pub const BUFFER_SIZE: usize = 16 * 1024;

/// What every engine client (Docker, Kubernetes) is configured with: statuses as answers, the
/// given deadlines, no proxy, no redirects, small buffers, our user agent. Each adds its own
/// transport (a Unix socket, TLS) before building.
pub fn agent_config(
    global: Duration,
    connect: Duration,
) -> ureq::config::ConfigBuilder<ureq::typestate::AgentScope> {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(global))
        .timeout_connect(Some(connect))
        .proxy(None)
        .max_redirects(0)
        // One engine call per request thread: buffers are per connection under load.
        .input_buffer_size(BUFFER_SIZE)
        .output_buffer_size(BUFFER_SIZE)
        .max_response_header_size(BUFFER_SIZE)
        .user_agent(concat!("a2a-worker-controller/", env!("CARGO_PKG_VERSION")))
}

/// An engine's error text as one line of at most 300 characters (control characters become
/// spaces), for messages people read.
pub fn one_line(text: &str) -> String {
    let line: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(300)
        .collect();
    line.trim().to_string()
}

/// ureq's own resolver, less its thread for a URL that names an address. With a timeout set,
/// ureq resolves on a thread of its own at every call, before it looks for a kept connection,
/// even when the host is an IP address (as a Kubernetes API server's, a pod's and a replica's
/// usually are): a thread started and ended per call. An address is answered here as it is; a
/// name still goes to ureq's resolver, with its timeout.
#[derive(Debug, Default)]
pub struct LiteralFirst<R = ureq::unversioned::resolver::DefaultResolver>(R);

/// The address `uri` names, when its host is an IP address (IPv6 in brackets) and its scheme
/// is http or https (the port, or the scheme's).
fn literal_address(uri: &http::Uri) -> Option<std::net::SocketAddr> {
    let authority = uri.authority()?;
    let host = authority.host();
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    let ip: std::net::IpAddr = host.parse().ok()?;
    let port = match (authority.port_u16(), uri.scheme_str()) {
        (Some(port), _) => port,
        (None, Some("https")) => 443,
        (None, Some("http")) => 80,
        (None, _) => return None,
    };
    Some(std::net::SocketAddr::new(ip, port))
}

impl<R: ureq::unversioned::resolver::Resolver> ureq::unversioned::resolver::Resolver
    for LiteralFirst<R>
{
    fn resolve(
        &self,
        uri: &http::Uri,
        config: &ureq::config::Config,
        timeout: ureq::unversioned::transport::NextTimeout,
    ) -> Result<ureq::unversioned::resolver::ResolvedSocketAddrs, ureq::Error> {
        match literal_address(uri) {
            Some(addr) if config.ip_family() == ureq::config::IpFamily::Any => {
                OneAddress(addr).resolve(uri, config, timeout)
            }
            _ => self.0.resolve(uri, config, timeout),
        }
    }
}

/// An agent of `config` whose resolver is [`LiteralFirst`].
pub fn agent(config: ureq::config::Config) -> ureq::Agent {
    ureq::Agent::with_parts(
        config,
        ureq::unversioned::transport::DefaultConnector::new(),
        LiteralFirst::<ureq::unversioned::resolver::DefaultResolver>::default(),
    )
}

/// What calls to a worker are made with (readiness probes, member cards, activations): plain
/// HTTP, statuses as answers, no proxy, no redirects, a second to connect and `timeout` for
/// the whole call.
pub fn worker_agent(timeout: Duration) -> ureq::Agent {
    agent(
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(timeout))
            .timeout_connect(Some(Duration::from_secs(1)))
            .proxy(None)
            .max_redirects(0)
            .build(),
    )
}

/// A resolver that answers one address whatever the URL names: the Docker socket's transport
/// (the path is the address) and a webhook delivery pinned to the address its guard checked.
#[derive(Debug)]
pub struct OneAddress(pub std::net::SocketAddr);

impl ureq::unversioned::resolver::Resolver for OneAddress {
    fn resolve(
        &self,
        _uri: &http::Uri,
        _config: &ureq::config::Config,
        _timeout: ureq::unversioned::transport::NextTimeout,
    ) -> Result<ureq::unversioned::resolver::ResolvedSocketAddrs, ureq::Error> {
        let mut addrs = self.empty();
        addrs.push(self.0);
        Ok(addrs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_in_the_url_is_answered_without_a_lookup() {
        let at = |url: &str| literal_address(&url.parse().unwrap()).map(|a| a.to_string());
        assert_eq!(
            at("https://10.0.0.1:6443/api"),
            Some("10.0.0.1:6443".into())
        );
        assert_eq!(at("https://10.0.0.1/api"), Some("10.0.0.1:443".into()));
        assert_eq!(at("http://10.0.0.1/a2a"), Some("10.0.0.1:80".into()));
        assert_eq!(at("http://[fd00::1]:8080/"), Some("[fd00::1]:8080".into()));
        assert_eq!(at("https://[::1]/"), Some("[::1]:443".into()));
        // A name is ureq's to resolve.
        assert_eq!(at("https://kubernetes.default.svc/api"), None);
        assert_eq!(at("https://localhost:6443/api"), None);
        assert_eq!(at("https://10.0.0.1.example/"), None);
    }

    #[test]
    fn only_a_name_goes_to_the_resolver_behind() {
        use ureq::unversioned::resolver::Resolver;
        // Behind it, a resolver that answers one address whatever it is asked.
        let first = LiteralFirst(OneAddress("127.0.0.1:9".parse().unwrap()));
        let config = agent_config(Duration::from_secs(5), Duration::from_secs(5)).build();
        let resolve = |url: &str| {
            first
                .resolve(&url.parse().unwrap(), &config, Default::default())
                .unwrap()
                .iter()
                .map(|a| a.to_string())
                .collect::<Vec<_>>()
        };
        assert_eq!(resolve("https://10.0.0.1:6443/api"), ["10.0.0.1:6443"]);
        assert_eq!(
            resolve("https://kubernetes.default.svc/api"),
            ["127.0.0.1:9"]
        );
    }

    #[test]
    fn an_agent_with_it_calls_an_address() {
        use std::io::{Read as _, Write as _};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut buf = [0u8; 1024];
            let _ = s.read(&mut buf);
            let _ = s.write_all(b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n");
        });
        let agent = agent(agent_config(Duration::from_secs(5), Duration::from_secs(5)).build());
        let url = format!("http://127.0.0.1:{port}/");
        let r = send(&agent, Method::Get, &url, &[], None, Duration::from_secs(5)).unwrap();
        assert_eq!(r.status(), 204);
        server.join().unwrap();
    }

    #[test]
    fn encodes_and_clips() {
        assert_eq!(percent_encode("a=b,c/d"), "a%3Db%2Cc%2Fd");
        assert_eq!(one_line(" etcd\nlost "), "etcd lost");
        assert_eq!(one_line(&"x".repeat(400)).len(), 300);
    }
}
