//! Relaying one request to the replica that holds its task: the same method, path, query,
//! body and the caller's own headers that matter (its credentials, the A2A service
//! parameters, the media types), and the answer back as it comes, a stream piece by piece.

use std::io::Read;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use crate::http::{Body, Request, Response, Sink, Streamer};

use super::RELAYED_BY;

/// The request headers a relay carries; every other one (hop-by-hop, `Host`, cookies) stays.
const FORWARDED: [&str; 5] = [
    "Authorization",
    "Content-Type",
    "Accept",
    "A2A-Version",
    "A2A-Extensions",
];

/// The answer headers a relay brings back (besides its `Content-Type`, which is always set).
const RETURNED: [&str; 4] = ["Cache-Control", "Allow", "WWW-Authenticate", "Retry-After"];

/// The header naming the replica that answered a relayed call.
pub const ANSWERED_BY: &str = "A2A-Answered-By";

/// How long a replica may take to accept the connection and to answer (a stream's events
/// then take as long as they take).
const CONNECT: Duration = Duration::from_secs(3);
const ANSWER: Duration = Duration::from_secs(60);
/// How long a connection to a replica is kept for the next call.
const IDLE: Duration = Duration::from_secs(5);

/// Why a relay got no answer.
#[derive(Debug)]
pub struct Unanswered(pub String);

impl std::fmt::Display for Unanswered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Sends `req` to the replica at `to` on behalf of the replica at `own`.
pub fn forward(req: &Request, to: SocketAddr, own: IpAddr) -> Result<Response, Unanswered> {
    let body = match &req.body {
        Body::Complete(b) => b.clone(),
        Body::TooLarge => return Err(Unanswered("the request body is too large".into())),
    };
    let mut url = format!("http://{to}{}", req.path);
    if !req.query.is_empty() {
        url.push('?');
        url.push_str(&req.query);
    }
    let mut builder = ureq::http::Request::builder()
        .method(req.method.as_str())
        .uri(&url)
        .header(RELAYED_BY, own.to_string());
    for name in FORWARDED {
        for (k, v) in req
            .headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case(name))
        {
            builder = builder.header(k.as_str(), v.as_str());
        }
    }
    let request = builder
        .body(body)
        .map_err(|e| Unanswered(format!("cannot write the relayed request: {e}")))?;
    // A stream's events take as long as they take: only its answer's start is bounded.
    let answer = send(request, false)?;
    let status = answer.status().as_u16();
    let header = |name: &str| {
        answer
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let content_type = header("Content-Type").unwrap_or_else(|| "application/json".into());
    let returned: Vec<(String, String)> = RETURNED
        .iter()
        .filter_map(|name| header(name).map(|v| (name.to_string(), v)))
        .collect();
    let mut response = if content_type.starts_with("text/event-stream") {
        let reader = answer.into_body().into_reader();
        Response::streamed(
            status,
            &content_type,
            Arc::new(Relayed(Mutex::new(Some(Box::new(reader))))),
        )
    } else {
        Response::new(status, &content_type, read_all(answer)?)
    };
    response.headers.extend(returned);
    Ok(response.with_header(ANSWERED_BY, to.ip().to_string()))
}

/// One JSON-RPC call to the replica at `to` on behalf of a caller (its `authorization` as it
/// came), from the replica at `own`: the response object.
pub fn call(
    to: SocketAddr,
    own: IpAddr,
    authorization: &str,
    body: &serde_json::Value,
) -> Result<serde_json::Value, Unanswered> {
    let request = ureq::http::Request::builder()
        .method("POST")
        .uri(format!("http://{to}/a2a"))
        .header(RELAYED_BY, own.to_string())
        .header("Authorization", authorization)
        .header("Content-Type", "application/json")
        .body(body.to_string())
        .map_err(|e| Unanswered(format!("cannot write the call: {e}")))?;
    let answer = send(request, true)?;
    if answer.status() != 200 {
        return Err(Unanswered(format!("it answered HTTP {}", answer.status())));
    }
    serde_json::from_slice(&read_all(answer)?)
        .map_err(|e| Unanswered(format!("its answer is not JSON: {e}")))
}

/// Sends one request to a replica: within [`CONNECT`] to connect, and [`ANSWER`] for the
/// answer to start (`whole`: for all of it); no redirect is followed.
fn send(
    request: ureq::http::Request<impl ureq::AsSendBody>,
    whole: bool,
) -> Result<ureq::http::Response<ureq::Body>, Unanswered> {
    // One agent of each kind for the process: its connections to the replicas are kept, for
    // less time than any replica keeps an idle one (HTTP_IDLE_TIMEOUT, 60 s by default).
    static WHOLE: OnceLock<ureq::Agent> = OnceLock::new();
    static STREAM: OnceLock<ureq::Agent> = OnceLock::new();
    let make = |whole: bool| -> ureq::Agent {
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(CONNECT))
            .max_idle_age(IDLE)
            .max_redirects(0);
        let config = if whole {
            config.timeout_global(Some(ANSWER))
        } else {
            config.timeout_recv_response(Some(ANSWER))
        };
        crate::backend::api_call::agent(config.build())
    };
    let agent = if whole {
        WHOLE.get_or_init(|| make(true))
    } else {
        STREAM.get_or_init(|| make(false))
    };
    agent.run(request).map_err(|e| Unanswered(e.to_string()))
}

/// A (non-streamed) answer's body, capped.
fn read_all(answer: ureq::http::Response<ureq::Body>) -> Result<Vec<u8>, Unanswered> {
    let mut text = Vec::new();
    answer
        .into_body()
        .into_reader()
        .take(crate::http::MAX_BODY as u64 * 16)
        .read_to_end(&mut text)
        .map_err(|e| Unanswered(format!("its answer broke off: {e}")))?;
    Ok(text)
}

/// A relayed stream: the replica's bytes as they arrive, until either side ends.
struct Relayed(Mutex<Option<Box<dyn Read + Send>>>);

impl Streamer for Relayed {
    fn run(&self, sink: &mut dyn Sink) {
        let Some(mut reader) = self.0.lock().unwrap_or_else(|p| p.into_inner()).take() else {
            return;
        };
        let mut buf = [0u8; 8192];
        loop {
            match reader.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if !sink.send(&buf[..n]) || sink.closing() {
                        return;
                    }
                }
            }
        }
    }
}
