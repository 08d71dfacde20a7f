//! The bindings behind the door: what the door needs to know of a request (does it read
//! JSON, does it stream), how each binding writes the door's refusals, its handler, and how
//! its answer becomes a response. A new binding is a [`Binding`] and a line in the route table.

use serde_json::{json, Value};

use crate::a2a::card::REST_BASE;
use crate::a2a::{
    response_err, rest_error_body, Answer, JsonRpc, Rest, RestAnswer, RestBody, RpcError,
    ServiceParams,
};
use crate::auth;
use crate::http::{Request, Response, MAX_BODY};

/// The request media types both bindings accept (parameters such as `charset` allowed).
pub const JSON_MEDIA_TYPES: [&str; 2] = ["application/json", "application/a2a+json"];

/// Sends a request to the replica at the address, which holds its task (the route table's).
pub(super) type Relay<'a> = &'a dyn Fn(&Request, std::net::SocketAddr) -> Result<Response, String>;

/// Why the door refused a request before its binding read it; each binding writes it in
/// its own shape.
pub(super) enum Refused {
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
pub(super) trait Binding {
    /// What the handler answers, before it is a response.
    type Answer;
    /// Whether the request's body is read as JSON (then its `Content-Type` is checked).
    fn reads_json(&self, req: &Request, body: &[u8]) -> bool;
    /// Whether the request asks for a stream (then it takes a stream place too).
    fn streams(&self, req: &Request, body: &[u8]) -> bool;
    /// Whether the request is a plain `SendMessage` (the one call a worker's own token may
    /// make: its renew).
    fn sends(&self, req: &Request, body: &[u8]) -> bool;
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
    fn respond(&self, relay: Relay<'_>, req: &Request, answer: Self::Answer) -> Response;
}

/// JSON-RPC 2.0 at `/a2a`: every refusal a JSON-RPC error (the 401 the authenticator's own).
pub(super) struct JsonRpcBinding<'a>(pub &'a JsonRpc);

impl Binding for JsonRpcBinding<'_> {
    type Answer = Answer;

    fn reads_json(&self, _: &Request, _: &[u8]) -> bool {
        true
    }

    fn streams(&self, _: &Request, body: &[u8]) -> bool {
        peek(body).1
    }

    fn sends(&self, _: &Request, body: &[u8]) -> bool {
        peek_method(body).as_deref() == Some("SendMessage")
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

    fn respond(&self, relay: Relay<'_>, req: &Request, answer: Answer) -> Response {
        match answer {
            Answer::Json(text) => Response::new(200, "application/json", text),
            Answer::Events(events) => Response::streamed(200, "text/event-stream", events)
                .with_header("Cache-Control", "no-store"),
            Answer::Relay(to, relayed) => match relay(req, to) {
                Ok(response) => response,
                Err(why) => self.respond(relay, req, relayed.unanswered(&why)),
            },
        }
    }
}

/// The door's refusal as JSON-RPC answers it (the 401 the authenticator's own).
pub(super) fn rpc_refusal(refused: Refused, body: &[u8]) -> Response {
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
pub(super) struct RestBinding<'a>(pub &'a Rest);

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

    fn sends(&self, req: &Request, _: &[u8]) -> bool {
        req.method == "POST" && Self::path(req) == "/message:send"
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

    fn respond(&self, relay: Relay<'_>, req: &Request, answer: RestAnswer) -> Response {
        let path = Self::path(req);
        let response = match answer.body {
            RestBody::Relay(to, unanswered) => {
                return match relay(req, to) {
                    Ok(relayed) => relayed,
                    Err(why) => self.respond(relay, req, unanswered(&why)),
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
/// A JSON-RPC request's method, when its body says one.
fn peek_method(body: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Peek<'a> {
        #[serde(default, borrow)]
        method: Option<std::borrow::Cow<'a, str>>,
    }
    serde_json::from_slice::<Peek>(body)
        .ok()?
        .method
        .map(|m| m.into_owned())
}

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

/// Both A2A bindings carry JSON (specification §9.1, §11.1). A declared non-JSON media type
/// (`text/plain`, or the form encoding `curl -d` sends by default) is answered 415 naming the
/// accepted types (JSON-RPC: the error -32005; HTTP+JSON: its AIP-193 form); the body is never
/// parsed. A request without `Content-Type` is read as JSON: it declares nothing else, and
/// minimal clients omit the header.
pub(super) fn content_type_error(content_type: Option<&str>) -> Option<RpcError> {
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
