//! Routes: which path and method reach what. Every binding (JSON-RPC at `/a2a`, HTTP+JSON
//! below `/a2a/rest`) is reached through one door ([`Routes::door`]), which checks in the
//! same order for all: the body's size, then the caller's token, then the media type, then
//! the caller's fair share; only then is anything parsed, by the binding (`bindings.rs`), which
//! writes the door's refusals in its own shape. Every answer is counted by route and status.

use std::sync::Arc;

mod bindings;
mod mcp;

pub use self::bindings::JSON_MEDIA_TYPES;
use self::bindings::{content_type_error, Binding, JsonRpcBinding, Refused, RestBinding};
pub use self::mcp::{McpDoor, Origins};
use crate::a2a::card::{AgentCard, CACHE_CONTROL, REST_BASE};
use crate::a2a::{Credential, JsonRpc, Rest, ServiceParams};
use crate::auth;
use crate::control::Control;
use crate::http::{Body, Handler, Request, Response};
use crate::metrics::Metrics;
use crate::replicas;

pub struct Routes {
    pub jsonrpc: JsonRpc,
    pub rest: Rest,
    pub control: Arc<Control>,
    pub card: AgentCard,
    pub metrics: Arc<Metrics>,
    pub credentials: auth::Authenticator,
    /// Whether the status page is served (`UI`).
    pub ui: bool,
    /// This replica's IP, when it is one of several (calls on others' tasks are relayed).
    pub replica_ip: Option<std::net::IpAddr>,
    /// What each caller may hold at once.
    pub limits: Arc<auth::limits::CallerLimits>,
    /// Which requests run now, while callers share.
    pub turns: auth::turns::Turns,
    /// The egress proxy's whois (`None` without an egress key).
    pub whois: Option<crate::control::egress::Whois>,
    /// `/mcp` (`None`: `MCP=false`).
    pub mcp: Option<McpDoor>,
}

/// How long a caller past its bound is asked to wait (`Retry-After`, seconds).
const RETRY_AFTER_SECS: &str = "1";

/// A streamed answer that holds its caller's stream place until it ends.
struct Held {
    inner: Arc<dyn crate::http::Streamer>,
    _slot: auth::limits::Slot,
}

impl crate::http::Streamer for Held {
    fn run(&self, sink: &mut dyn crate::http::Sink) {
        self.inner.run(sink)
    }
}

/// The places a request holds: its own, and a stream's when it asks for one.
struct Places {
    _request: auth::limits::Slot,
    stream: Option<auth::limits::Slot>,
}

impl Places {
    /// `response`, holding the stream place for as long as its stream runs.
    fn keep(self, mut response: Response) -> Response {
        if let (Some(slot), Some(stream)) = (self.stream, response.stream.take()) {
            response.stream = Some(crate::http::Stream(Arc::new(Held {
                inner: stream.0,
                _slot: slot,
            })));
        }
        response
    }
}

impl Handler for Routes {
    fn handle(&self, request: Request) -> Response {
        let (route, response) = self.route(request);
        self.metrics.http_request(route, response.status);
        response
    }

    fn refused(&self, status: u16) {
        self.metrics.http_request("http", status);
    }
}

impl Routes {
    fn route(&self, req: Request) -> (&'static str, Response) {
        let method = req.method.as_str();
        match req.path.as_str() {
            "/a2a" | "/a2a/" => (
                "a2a",
                only(method, &["POST"])
                    .unwrap_or_else(|| self.door(&JsonRpcBinding(&self.jsonrpc), &req)),
            ),
            "/.well-known/agent-card.json" => (
                "agent_card",
                only(method, &["GET", "HEAD"]).unwrap_or_else(|| self.agent_card(&req)),
            ),
            "/healthz" => (
                "healthz",
                only(method, &["GET", "HEAD"]).unwrap_or_else(|| Response::text(200, "ok")),
            ),
            "/readiness" => (
                "readiness",
                only(method, &["GET", "HEAD"]).unwrap_or_else(|| self.readiness()),
            ),
            "/metrics" => (
                "metrics",
                only(method, &["GET", "HEAD"]).unwrap_or_else(|| {
                    Response::new(200, "text/plain; version=0.0.4", self.metrics.render())
                }),
            ),
            "/egress/v1/whois" => (
                "egress_whois",
                only(method, &["GET"]).unwrap_or_else(|| self.whois(&req)),
            ),
            "/mcp" | "/mcp/" if self.mcp.is_some() => ("mcp", self.mcp(&req)),
            path if self.ui && (path == "/ui" || path.starts_with("/ui/")) => (
                "ui",
                only(method, &["GET", "HEAD"]).unwrap_or_else(|| ui_page(&req)),
            ),
            path if path.starts_with(REST_BASE) && path[REST_BASE.len()..].starts_with('/') => {
                ("a2a_rest", self.door(&RestBinding(&self.rest), &req))
            }
            _ => ("not_found", Response::text(404, "not found")),
        }
    }

    /// `/mcp`: a browser's request from an origin not admitted gets nothing (403, before its
    /// credentials are looked at); a POST goes through the door like every binding.
    fn mcp(&self, req: &Request) -> Response {
        let Some(door) = &self.mcp else {
            return Response::text(404, "not found");
        };
        if !door.origins.admit(req.header("Origin")) {
            return McpDoor::forbidden();
        }
        match req.method.as_str() {
            "POST" => self.door(&mcp::McpBinding(&door.service), req),
            "GET" if req.header("Mcp-Session-Id").is_some() => {
                self.door(&mcp::McpBinding(&door.service), req)
            }
            other => mcp::not_posted(other),
        }
    }

    /// The door every binding is reached through: the body's size, then the caller's token,
    /// then the media type, then the caller's places (a stream's too, when it asks for one);
    /// only then does the binding read the request, while the caller holds its turn. A
    /// refusal is written in the binding's own shape; the credentials are stripped from what
    /// the binding is handed.
    fn door<B: Binding>(&self, binding: &B, req: &Request) -> Response {
        let body = match &req.body {
            Body::Complete(b) => b,
            Body::TooLarge => {
                return binding
                    .refusal(Refused::TooLarge, &[])
                    .with_header("Connection", "close")
            }
        };
        let authorization = req.header("Authorization");
        let caller = match self.credentials.check(authorization) {
            Ok(caller) => caller,
            // A worker's own token, sending the one message it may: its renew (the control
            // layer refuses anything else it asks, and any worker but its own).
            Err(auth::Failure::WrongToken)
                if binding.sends(req, body) && is_worker_token(authorization) =>
            {
                crate::control::Caller::worker(auth::presented(authorization).unwrap_or(""))
            }
            Err(failure) => return binding.refusal(Refused::Unauthenticated(failure), body),
        };
        if binding.reads_json(req, body) {
            if let Some(e) = content_type_error(req.header("Content-Type")) {
                let accepted = JSON_MEDIA_TYPES.join(", ");
                return binding
                    .refusal(Refused::MediaType(e), body)
                    .with_header("Accept", accepted);
            }
        }
        let places = match self.places(&caller, binding.streams(req, body)) {
            Ok(p) => p,
            Err(refused) => {
                return binding
                    .refusal(Refused::Busy(refused), body)
                    .with_header("Retry-After", RETRY_AFTER_SECS)
            }
        };
        let params = service_params(req);
        let answer = {
            let _turn = self.turns.turn(&caller.key);
            binding.handle(&caller, &params, req, body)
        };
        places.keep(binding.respond(&|req, to| self.relay(req, to), req, answer))
    }

    /// The request's place, and a stream's when `streaming`, for `caller`; or why not (logged
    /// and counted by caller).
    fn places(
        &self,
        caller: &crate::control::Caller,
        streaming: bool,
    ) -> Result<Places, auth::limits::Refused> {
        use auth::limits::Kind;
        let taken = self.limits.take(caller, Kind::Request).and_then(|request| {
            let stream = match streaming {
                true => Some(self.limits.take(caller, Kind::Stream)?),
                false => None,
            };
            Ok(Places {
                _request: request,
                stream,
            })
        });
        if let Err(refused) = &taken {
            self.metrics
                .caller_refused(&caller.name, refused.kind.as_str());
            log::debug!("refused (429): {refused}");
        }
        taken
    }

    /// Sends `req` to the replica at `to`, which holds its task.
    fn relay(&self, req: &Request, to: std::net::SocketAddr) -> Result<Response, String> {
        let own = self
            .replica_ip
            .ok_or_else(|| "this controller is not one of several replicas".to_string())?;
        replicas::relay::forward(req, to, own).map_err(|e| {
            log::warn!("replica {} did not answer a relayed call: {e}", to.ip());
            e.to_string()
        })
    }

    fn agent_card(&self, req: &Request) -> Response {
        let validators = |r: Response| {
            r.with_header("Cache-Control", CACHE_CONTROL)
                .with_header("ETag", self.card.etag.clone())
                .with_header("Last-Modified", self.card.last_modified.clone())
        };
        if req
            .header("If-None-Match")
            .is_some_and(|v| self.card.matches(v))
        {
            let mut not_modified = validators(Response::new(304, "application/json", Vec::new()));
            not_modified.headers.retain(|(k, _)| k != "Content-Type");
            return not_modified;
        }
        validators(Response::new(
            200,
            "application/json",
            self.card.body.clone(),
        ))
    }

    /// The egress proxy asks who a placeholder's worker is (the placeholder is the bearer
    /// token: it can only ask about its own worker).
    fn whois(&self, req: &Request) -> Response {
        use crate::control::egress::WhoisError;
        let Some(whois) = &self.whois else {
            return Response::text(404, "no egress key: set EGRESS_KEY_FILE or A2A_AUTH_TOKEN");
        };
        let placeholder = auth::presented(req.header("authorization")).unwrap_or("");
        match whois.ask(placeholder) {
            Ok(id) => Response::json(200, &serde_json::json!(id)),
            Err(e @ WhoisError::NotAPlaceholder) => Response::text(401, &e.to_string())
                .with_header("WWW-Authenticate", "Bearer realm=\"a2a-egress\""),
            Err(e @ WhoisError::NotRunning(_)) => Response::text(404, &e.to_string()),
            Err(e @ WhoisError::Unavailable(_)) => Response::text(503, &e.to_string()),
        }
    }

    fn readiness(&self) -> Response {
        match self.control.backend().health() {
            Ok(()) => Response::text(200, "ready"),
            Err(e) => Response::text(503, &format!("not ready: {e}")),
        }
    }
}

/// Whether the bearer token has the shape of a worker's token (64 lowercase hex characters,
/// as [`crate::token::Token::generate`] makes them).
fn is_worker_token(authorization: Option<&str>) -> bool {
    auth::presented(authorization).is_ok_and(|t| {
        t.len() == 64
            && t.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

fn service_params(req: &Request) -> ServiceParams {
    let headers = auth::strip_credentials(&req.headers);
    let mut params = ServiceParams::from_request(&headers, &req.query);
    params.authorization = Credential(req.header("Authorization").map(str::to_string));
    params
}

/// A file of the status page, with its security headers and validators.
fn ui_page(req: &Request) -> Response {
    let Some(asset) = crate::ui::asset(&req.path) else {
        return Response::text(404, "not found");
    };
    let secure = |r: Response| {
        r.with_header(
            "Content-Security-Policy",
            crate::ui::CONTENT_SECURITY_POLICY,
        )
        .with_header("X-Content-Type-Options", "nosniff")
        .with_header("Referrer-Policy", "no-referrer")
        .with_header("X-Frame-Options", "DENY")
        .with_header("Cache-Control", "no-cache")
        .with_header("ETag", asset.etag.clone())
    };
    if req
        .header("If-None-Match")
        .is_some_and(|v| crate::http::etag_matches(v, &asset.etag))
    {
        return secure(Response::new(304, asset.content_type, Vec::new()));
    }
    secure(Response::new(
        200,
        asset.content_type,
        asset.body.as_bytes().to_vec(),
    ))
}

/// `None` when the method is allowed; otherwise the 405 answer naming the allowed ones.
fn only(method: &str, allowed: &[&str]) -> Option<Response> {
    if allowed.contains(&method) {
        None
    } else {
        Some(
            Response::text(405, &format!("method {method} not allowed"))
                .with_header("Allow", allowed.join(", ")),
        )
    }
}
