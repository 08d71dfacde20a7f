//! Routes: which path and method reach what, with authentication wrapped around the
//! protocol endpoint. Every answer is counted by route and status.

use std::sync::Arc;

use serde_json::json;

use crate::auth;
use crate::card::{AgentCard, CACHE_CONTROL};
use crate::control::Control;
use crate::http::{Body, Handler, Request, Response, MAX_BODY};
use crate::metrics::Metrics;
use crate::protocol::{Protocol, ServiceParams};

pub struct Routes {
    pub protocol: Protocol,
    pub control: Arc<Control>,
    pub card: AgentCard,
    pub metrics: Arc<Metrics>,
    pub auth_token: String,
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
            _ => ("not_found", Response::text(404, "not found")),
        }
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
        if let Err(failure) = auth::check(req.header("Authorization"), &self.auth_token) {
            return Response::json(
                401,
                &json!({"error": "unauthorized", "message": failure.message()}),
            )
            .with_header("WWW-Authenticate", failure.challenge());
        }
        let headers = auth::strip_credentials(&req.headers);
        let params = ServiceParams::from_request(&headers, &req.query);
        Response::json(200, &self.protocol.handle(&params, body))
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
