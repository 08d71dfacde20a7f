//! Routes: which path and method reach what. Every binding (JSON-RPC at `/a2a`, HTTP+JSON
//! below `/a2a/rest`) is reached through one door ([`Routes::door`]), which checks in the
//! same order for all: the body's size, then the caller's token, then the media type, then
//! the caller's fair share; only then is anything parsed, by the binding ([`Binding`]), which
//! writes the door's refusals in its own shape. Every answer is counted by route and status.

use std::sync::Arc;

use serde_json::{json, Value};

use crate::a2a::card::{AgentCard, CACHE_CONTROL, REST_BASE};
use crate::a2a::{
    response_err, rest_error_body, Answer, Credential, JsonRpc, Rest, RestAnswer, RestBody,
    RpcError, ServiceParams,
};
use crate::auth;
use crate::control::Control;
use crate::http::{Body, Handler, Request, Response, MAX_BODY};
use crate::metrics::Metrics;
use crate::replicas;

/// The request media types both bindings accept (parameters such as `charset` allowed).
pub const JSON_MEDIA_TYPES: [&str; 2] = ["application/json", "application/a2a+json"];

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
        let caller = match self.credentials.check(req.header("Authorization")) {
            Ok(caller) => caller,
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
        places.keep(binding.respond(self, req, answer))
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

    fn readiness(&self) -> Response {
        match self.control.backend().health() {
            Ok(()) => Response::text(200, "ready"),
            Err(e) => Response::text(503, &format!("not ready: {e}")),
        }
    }
}

/// Why the door refused a request before its binding read it; each binding writes it in
/// its own shape.
enum Refused {
    /// The body is over [`MAX_BODY`].
    TooLarge,
    /// No credentials, or wrong ones.
    Unauthenticated(auth::Failure),
    /// A declared media type that is not JSON.
    MediaType(RpcError),
    /// The caller holds all it may at once.
    Busy(auth::limits::Refused),
}

/// A binding behind the door: what the door needs to know of a request, how the binding
/// writes the door's refusals, and its handler. A new binding is one of these and a line in
/// the route table.
trait Binding {
    /// What the handler answers, before it is a response.
    type Answer;
    /// Whether the request's body is read as JSON (then its `Content-Type` is checked).
    fn reads_json(&self, req: &Request, body: &[u8]) -> bool;
    /// Whether the request asks for a stream (then it takes a stream place too).
    fn streams(&self, req: &Request, body: &[u8]) -> bool;
    /// The door's refusal in this binding's shape (`body` is empty for one too large).
    fn refusal(&self, refused: Refused, body: &[u8]) -> Response;
    /// The admitted request, handled while its caller holds its turn.
    fn handle(
        &self,
        caller: &crate::control::Caller,
        params: &ServiceParams,
        req: &Request,
        body: &[u8],
    ) -> Self::Answer;
    /// The answer as a response, after the turn (a relay to another replica happens here).
    fn respond(&self, routes: &Routes, req: &Request, answer: Self::Answer) -> Response;
}

/// JSON-RPC 2.0 at `/a2a`: every refusal a JSON-RPC error (the 401 the authenticator's own).
struct JsonRpcBinding<'a>(&'a JsonRpc);

impl Binding for JsonRpcBinding<'_> {
    type Answer = Answer;

    fn reads_json(&self, _: &Request, _: &[u8]) -> bool {
        true
    }

    fn streams(&self, _: &Request, body: &[u8]) -> bool {
        peek(body).1
    }

    fn refusal(&self, refused: Refused, body: &[u8]) -> Response {
        rpc_refusal(refused, body)
    }

    fn handle(
        &self,
        caller: &crate::control::Caller,
        params: &ServiceParams,
        _: &Request,
        body: &[u8],
    ) -> Answer {
        self.0.handle(caller, params, body)
    }

    fn respond(&self, routes: &Routes, req: &Request, answer: Answer) -> Response {
        match answer {
            Answer::Json(text) => Response::new(200, "application/json", text),
            Answer::Events(events) => Response::streamed(200, "text/event-stream", events)
                .with_header("Cache-Control", "no-store"),
            Answer::Relay(to, relayed) => match routes.relay(req, to) {
                Ok(response) => response,
                Err(why) => self.respond(routes, req, relayed.unanswered(&why)),
            },
        }
    }
}

/// The door's refusal as JSON-RPC answers it (the 401 the authenticator's own).
fn rpc_refusal(refused: Refused, body: &[u8]) -> Response {
    match refused {
        Refused::TooLarge => Response::json(
            413,
            &json!({"error": "payload_too_large", "message": format!("request bodies are limited to {MAX_BODY} bytes")}),
        ),
        Refused::Unauthenticated(failure) => failure.response(),
        Refused::MediaType(e) => Response::json(415, &response_err(&Value::Null, &e)),
        Refused::Busy(refused) => {
            let error = RpcError::caller_limit(refused.to_string());
            Response::json(429, &response_err(&peek(body).0, &error))
        }
    }
}

/// HTTP+JSON below `/a2a/rest`: every refusal in the binding's AIP-193 shape.
struct RestBinding<'a>(&'a Rest);

impl RestBinding<'_> {
    /// The route below [`REST_BASE`] (the route table only sends requests that have one).
    fn path(req: &Request) -> &str {
        req.path.get(REST_BASE.len()..).unwrap_or("")
    }
}

fn rest_error(status: u16, code: &str, reason: &str, message: String) -> Response {
    Response::json(
        status,
        &rest_error_body(status, code, reason, &message, Default::default()),
    )
}

impl Binding for RestBinding<'_> {
    type Answer = RestAnswer;

    /// A `POST`, or a body sent with another method.
    fn reads_json(&self, req: &Request, body: &[u8]) -> bool {
        req.method == "POST" || !body.is_empty()
    }

    fn streams(&self, req: &Request, _: &[u8]) -> bool {
        let path = Self::path(req);
        path.ends_with(":stream") || path.ends_with(":subscribe")
    }

    fn refusal(&self, refused: Refused, _: &[u8]) -> Response {
        match refused {
            Refused::TooLarge => rest_error(
                413,
                "INVALID_ARGUMENT",
                "PAYLOAD_TOO_LARGE",
                format!("request bodies are limited to {MAX_BODY} bytes"),
            ),
            Refused::Unauthenticated(failure) => rest_error(
                401,
                "UNAUTHENTICATED",
                "UNAUTHENTICATED",
                failure.message().to_string(),
            )
            .with_header("WWW-Authenticate", failure.challenge()),
            Refused::MediaType(e) => Response::json(415, &e.to_rest_json()),
            Refused::Busy(refused) => rest_error(
                429,
                "RESOURCE_EXHAUSTED",
                "CALLER_LIMIT",
                refused.to_string(),
            ),
        }
    }

    fn handle(
        &self,
        caller: &crate::control::Caller,
        params: &ServiceParams,
        req: &Request,
        body: &[u8],
    ) -> RestAnswer {
        self.0.handle(
            caller,
            params,
            &req.method,
            Self::path(req),
            &req.query,
            body,
        )
    }

    fn respond(&self, routes: &Routes, req: &Request, answer: RestAnswer) -> Response {
        let path = Self::path(req);
        let response = match answer.body {
            RestBody::Relay(to, unanswered) => {
                return match routes.relay(req, to) {
                    Ok(relayed) => relayed,
                    Err(why) => self.respond(routes, req, unanswered(&why)),
                }
            }
            // The extended card is for this caller only (§13.3): no shared cache keeps it.
            RestBody::Json(text) if path == "/extendedAgentCard" && answer.status == 200 => {
                Response::new(200, "application/json", text)
                    .with_header("Cache-Control", "private, max-age=300")
            }
            RestBody::Json(text) => Response::new(answer.status, "application/json", text),
            RestBody::Events(events) => Response::streamed(200, "text/event-stream", events)
                .with_header("Cache-Control", "no-store"),
        };
        match answer.allow {
            Some(allow) => response.with_header("Allow", allow),
            None => response,
        }
    }
}

/// The A2A service parameters of a request; the caller's credential is kept apart from the
/// headers, for the calls a replica makes to the others on the caller's behalf.
/// A JSON-RPC body's `id` and whether its method streams, read before anything of it runs
/// (what is not a single request object streams not: the handler answers it).
fn peek(body: &[u8]) -> (Value, bool) {
    #[derive(serde::Deserialize)]
    struct Peek<'a> {
        #[serde(default)]
        id: Value,
        #[serde(default, borrow)]
        method: Option<std::borrow::Cow<'a, str>>,
    }
    match serde_json::from_slice::<Peek>(body) {
        Ok(p) => {
            let streaming = matches!(
                p.method.as_deref(),
                Some("SendStreamingMessage" | "SubscribeToTask")
            );
            (p.id, streaming)
        }
        Err(_) => (Value::Null, false),
    }
}

fn service_params(req: &Request) -> ServiceParams {
    let headers = auth::strip_credentials(&req.headers);
    let mut params = ServiceParams::from_request(&headers, &req.query);
    params.authorization = Credential(req.header("Authorization").map(str::to_string));
    params
}

/// Both A2A bindings carry JSON (specification §9.1, §11.1). A declared non-JSON media type
/// (`text/plain`, or the form encoding `curl -d` sends by default) is answered 415 naming the
/// accepted types (JSON-RPC: the error -32005; HTTP+JSON: its AIP-193 form); the body is never
/// parsed. A request without `Content-Type` is read as JSON: it declares nothing else, and
/// minimal clients omit the header.
fn content_type_error(content_type: Option<&str>) -> Option<RpcError> {
    let value = content_type.map(str::trim).filter(|v| !v.is_empty())?;
    let media_type = value.split(';').next().unwrap_or("").trim();
    if JSON_MEDIA_TYPES
        .iter()
        .any(|t| media_type.eq_ignore_ascii_case(t))
    {
        return None;
    }
    let shown: String = media_type
        .chars()
        .filter(|c| !c.is_control())
        .take(64)
        .collect();
    let accepted = JSON_MEDIA_TYPES.join(", ");
    Some(
        RpcError::content_type_not_supported(&format!(
            "the request body must be JSON: send Content-Type {} (got {shown:?})",
            JSON_MEDIA_TYPES.join(" or ")
        ))
        .with("supportedContentTypes", accepted),
    )
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_content_types_pass_and_others_are_415() {
        for ok in [
            None,
            Some(""),
            Some("application/json"),
            Some("Application/JSON; charset=utf-8"),
            Some("application/a2a+json"),
            Some(" application/a2a+json ;v=1"),
        ] {
            assert!(content_type_error(ok).is_none(), "{ok:?}");
        }
        for bad in [
            "text/plain",
            "application/x-www-form-urlencoded",
            "application/jsonx",
            "multipart/form-data; boundary=x",
        ] {
            let error = content_type_error(Some(bad)).expect(bad);
            let r = rpc_refusal(Refused::MediaType(error), &[]);
            assert_eq!(r.status, 415);
            let body: Value = serde_json::from_slice(&r.body).unwrap();
            assert_eq!(body["error"]["code"], -32005);
            let message = body["error"]["message"].as_str().unwrap();
            assert!(
                message.contains("application/json") && message.contains("application/a2a+json"),
                "{message}"
            );
        }
    }
}
