//! Routes: which path and method reach what, with authentication and the `Content-Type` rule
//! wrapped around both A2A bindings (JSON-RPC at `/a2a`, HTTP+JSON below `/a2a/rest`), in
//! the same order for both: the body's size, then the caller's token, then the media type,
//! and only then is anything parsed. Every answer is counted by route and status.

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
                only(method, &["POST"]).unwrap_or_else(|| self.a2a(&req)),
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
                ("a2a_rest", self.a2a_rest(&req, &path[REST_BASE.len()..]))
            }
            _ => ("not_found", Response::text(404, "not found")),
        }
    }

    /// The HTTP+JSON binding: the same checks, in the same order, as the JSON-RPC endpoint,
    /// with errors in the binding's own shape (AIP-193).
    fn a2a_rest(&self, req: &Request, path: &str) -> Response {
        let rest_error = |status: u16, code: &str, reason: &str, message: String| {
            Response::json(
                status,
                &rest_error_body(status, code, reason, &message, Default::default()),
            )
        };
        let body = match &req.body {
            Body::Complete(b) => b,
            Body::TooLarge => {
                return rest_error(
                    413,
                    "INVALID_ARGUMENT",
                    "PAYLOAD_TOO_LARGE",
                    format!("request bodies are limited to {MAX_BODY} bytes"),
                )
                .with_header("Connection", "close")
            }
        };
        let caller = match self.credentials.check(req.header("Authorization")) {
            Ok(caller) => caller,
            Err(failure) => {
                return rest_error(
                    401,
                    "UNAUTHENTICATED",
                    "UNAUTHENTICATED",
                    failure.message().to_string(),
                )
                .with_header("WWW-Authenticate", failure.challenge())
            }
        };
        if req.method == "POST" || !body.is_empty() {
            if let Some(e) = content_type_error(req.header("Content-Type")) {
                let accepted = JSON_MEDIA_TYPES.join(", ");
                return Response::json(415, &e.to_rest_json()).with_header("Accept", accepted);
            }
        }
        let streaming = path.ends_with(":stream") || path.ends_with(":subscribe");
        let places = match self.places(&caller, streaming) {
            Ok(p) => p,
            Err(refused) => {
                return rest_error(
                    429,
                    "RESOURCE_EXHAUSTED",
                    "CALLER_LIMIT",
                    refused.to_string(),
                )
                .with_header("Retry-After", RETRY_AFTER_SECS)
            }
        };
        let params = service_params(req);
        let answer = {
            let _turn = self.turns.turn(&caller.key);
            self.rest
                .handle(&caller, &params, &req.method, path, &req.query, body)
        };
        places.keep(self.rest_response(req, path, answer))
    }

    fn rest_response(&self, req: &Request, path: &str, answer: RestAnswer) -> Response {
        let response = match answer.body {
            RestBody::Relay(to, unanswered) => {
                return match self.relay(req, to) {
                    Ok(relayed) => relayed,
                    Err(why) => self.rest_response(req, path, unanswered(&why)),
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

    fn a2a(&self, req: &Request) -> Response {
        let body = match &req.body {
            Body::Complete(b) => b,
            Body::TooLarge => {
                return Response::json(
                    413,
                    &json!({"error": "payload_too_large", "message": format!("request bodies are limited to {MAX_BODY} bytes")}),
                )
                .with_header("Connection", "close")
            }
        };
        let caller = match self.credentials.check(req.header("Authorization")) {
            Ok(caller) => caller,
            Err(failure) => return failure.response(),
        };
        if let Some(refusal) = content_type_refusal(req.header("Content-Type")) {
            return refusal;
        }
        let (id, streaming) = peek(body);
        let places = match self.places(&caller, streaming) {
            Ok(p) => p,
            Err(refused) => {
                let error = RpcError::caller_limit(refused.to_string());
                return Response::json(429, &response_err(&id, &error))
                    .with_header("Retry-After", RETRY_AFTER_SECS);
            }
        };
        let params = service_params(req);
        let answer = {
            let _turn = self.turns.turn(&caller.key);
            self.jsonrpc.handle(&caller, &params, body)
        };
        places.keep(self.jsonrpc_response(req, answer))
    }

    fn jsonrpc_response(&self, req: &Request, answer: Answer) -> Response {
        match answer {
            Answer::Json(text) => Response::new(200, "application/json", text),
            Answer::Events(events) => Response::streamed(200, "text/event-stream", events)
                .with_header("Cache-Control", "no-store"),
            Answer::Relay(to, relayed) => match self.relay(req, to) {
                Ok(response) => response,
                Err(why) => self.jsonrpc_response(req, relayed.unanswered(&why)),
            },
        }
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

/// The JSON-RPC endpoint's 415.
fn content_type_refusal(content_type: Option<&str>) -> Option<Response> {
    let error = content_type_error(content_type)?;
    let accepted = JSON_MEDIA_TYPES.join(", ");
    Some(Response::json(415, &response_err(&Value::Null, &error)).with_header("Accept", accepted))
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
            assert!(content_type_refusal(ok).is_none(), "{ok:?}");
        }
        for bad in [
            "text/plain",
            "application/x-www-form-urlencoded",
            "application/jsonx",
            "multipart/form-data; boundary=x",
        ] {
            let r = content_type_refusal(Some(bad)).expect(bad);
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
