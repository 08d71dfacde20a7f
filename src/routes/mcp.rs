//! `/mcp` behind the door: Streamable HTTP's rules that live in HTTP (the `Origin` a browser
//! sends, `Accept`, the headers mirrored from the body, `Mcp-Session-Id`), the door's
//! refusals as JSON-RPC errors, and [`mcp::Answer`] as a response.

use std::sync::Arc;

use serde_json::{json, Value};

use super::bindings::{Binding, Refused, Relay};
use crate::a2a::ServiceParams;
use crate::http::{Request, Response, MAX_BODY};
use crate::mcp::{self, wire, Head, Mcp};

/// The MCP endpoint and the browser origins that may call it.
pub struct McpDoor {
    pub service: Mcp,
    pub origins: Origins,
}

/// Browser origins admitted, lowercased `scheme://host[:port]`: the public URL's origin,
/// loopback on the listen port, and `MCP_ALLOWED_ORIGINS`.
pub struct Origins(Vec<String>);

impl Origins {
    pub fn new(public_url: &str, port: u16, extra: &[String]) -> Origins {
        let mut origins: Vec<String> = extra.to_vec();
        if let Some(own) = origin_of(public_url) {
            origins.push(own);
        }
        for host in ["localhost", "127.0.0.1", "[::1]"] {
            for scheme in ["http", "https"] {
                origins.push(format!("{scheme}://{host}:{port}"));
            }
        }
        Origins(origins)
    }

    /// Whether a request with this `Origin` may be answered (none: not a browser's request).
    pub fn admit(&self, origin: Option<&str>) -> bool {
        origin.is_none_or(|o| {
            let o = o.trim_end_matches('/').to_ascii_lowercase();
            self.0.contains(&o)
        })
    }
}

impl McpDoor {
    /// The answer to a browser request from an origin not admitted.
    pub fn forbidden() -> Response {
        let e = wire::RpcError::new(
            403,
            wire::INVALID_REQUEST,
            "Forbidden: this Origin may not call /mcp (MCP_ALLOWED_ORIGINS lists the ones that may)",
        );
        Response::json(403, &e.response(&Value::Null))
    }
}

/// `scheme://host[:port]` of a URL, lowercased.
fn origin_of(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let authority = rest.split(['/', '?', '#']).next()?;
    (!authority.is_empty()).then(|| format!("{scheme}://{authority}").to_ascii_lowercase())
}

pub(super) struct McpBinding<'a>(pub &'a Mcp);

/// Whether an `Accept` header takes `media` (absent: anything, as HTTP says).
fn accepts(accept: Option<&str>, media: &str) -> bool {
    let Some(accept) = accept else { return true };
    let (kind, _) = media.split_once('/').unwrap_or((media, ""));
    accept.split(',').any(|item| {
        let range = item
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        range == media || range == "*/*" || range == format!("{kind}/*")
    })
}

fn head(req: &Request) -> Head {
    Head {
        version: req.header("MCP-Protocol-Version").map(str::to_string),
        method: req.header("Mcp-Method").map(str::to_string),
        name: req.header("Mcp-Name").map(wire::header_value),
        session: req.header("Mcp-Session-Id").map(str::to_string),
        accepts_events: accepts(req.header("Accept"), "text/event-stream"),
        params: req
            .headers
            .iter()
            .filter_map(|(k, v)| {
                let k = k.to_ascii_lowercase();
                let name = k.strip_prefix("mcp-param-")?;
                Some((name.to_string(), v.clone()))
            })
            .collect(),
    }
}

/// Whether the body asks for a call answered as a stream (create, resume, a listen).
fn streams(body: &[u8]) -> bool {
    #[derive(serde::Deserialize)]
    struct Peek<'a> {
        #[serde(borrow, default)]
        method: Option<&'a str>,
        #[serde(default)]
        params: Option<Params>,
    }
    #[derive(serde::Deserialize)]
    struct Params {
        #[serde(default)]
        name: Option<String>,
    }
    match serde_json::from_slice::<Peek<'_>>(body) {
        Ok(Peek {
            method: Some("subscriptions/listen"),
            ..
        }) => true,
        Ok(Peek {
            method: Some("tools/call"),
            params: Some(Params { name: Some(name) }),
        }) => mcp::tools::find(&name).is_some_and(|t| t.waits),
        _ => false,
    }
}

fn rpc(status: u16, code: i64, message: String) -> Response {
    Response::json(
        status,
        &wire::RpcError::new(status, code, message).response(&Value::Null),
    )
}

impl Binding for McpBinding<'_> {
    type Answer = mcp::Answer;

    fn reads_json(&self, req: &Request, _: &[u8]) -> bool {
        req.method == "POST"
    }

    fn streams(&self, req: &Request, body: &[u8]) -> bool {
        req.method == "GET" || (accepts(req.header("Accept"), "text/event-stream") && streams(body))
    }

    /// A worker's own token renews over A2A only.
    fn sends(&self, _: &Request, _: &[u8]) -> bool {
        false
    }

    fn refusal(&self, refused: Refused, _: &[u8]) -> Response {
        match refused {
            Refused::TooLarge => rpc(
                413,
                wire::INVALID_REQUEST,
                format!("request bodies are limited to {MAX_BODY} bytes"),
            ),
            Refused::Unauthenticated(failure) => {
                rpc(401, wire::INVALID_REQUEST, failure.message().to_string())
                    .with_header("WWW-Authenticate", failure.challenge())
            }
            Refused::MediaType(e) => rpc(415, wire::INVALID_REQUEST, e.message.clone()),
            Refused::Busy(refused) => rpc(429, -32000, refused.to_string()),
        }
    }

    fn handle(
        &self,
        caller: &crate::control::Caller,
        _: &ServiceParams,
        req: &Request,
        body: &[u8],
    ) -> mcp::Answer {
        if req.method == "GET" {
            return self.0.session_stream(caller, &head(req));
        }
        let accept = req.header("Accept");
        if !accepts(accept, "application/json") || !accepts(accept, "text/event-stream") {
            return mcp::Answer::Json {
                status: 406,
                body: wire::RpcError::invalid_request(
                    "Not Acceptable: a client of /mcp accepts both application/json and text/event-stream",
                )
                .response(&Value::Null),
                session: None,
            };
        }
        self.0.handle(caller, &head(req), body)
    }

    fn respond(&self, _: Relay<'_>, _: &Request, answer: mcp::Answer) -> Response {
        match answer {
            mcp::Answer::Json {
                status,
                body,
                session,
            } => {
                let response = Response::json(status, &body);
                match session {
                    Some(id) => response.with_header("Mcp-Session-Id", id),
                    None => response,
                }
            }
            mcp::Answer::Text { status, body } => Response::new(status, "application/json", body),
            mcp::Answer::Accepted => Response::new(202, "application/json", Vec::new()),
            mcp::Answer::Events(streamer) => streamed(streamer),
        }
    }
}

fn streamed(streamer: Arc<dyn crate::http::Streamer>) -> Response {
    Response::streamed(200, "text/event-stream", streamer)
        .with_header("Cache-Control", "no-store")
        .with_header("X-Accel-Buffering", "no")
}

/// A method `/mcp` does not take: `DELETE` (a session ends when its client forgets it), `GET`
/// without a 2025-11-25 session (2026-07-28 has no GET stream: its change notifications come
/// from `subscriptions/listen`), anything else. Both revisions let a server say so with 405.
pub(super) fn not_posted(method: &str) -> Response {
    let body = json!({"jsonrpc": "2.0", "id": null, "error": {"code": wire::INVALID_REQUEST, "message": format!("method {method} not allowed: /mcp takes POST, and GET with a 2025-11-25 Mcp-Session-Id")}});
    Response::json(405, &body).with_header("Allow", "GET, POST")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_ranges_and_wildcards() {
        assert!(accepts(None, "text/event-stream"));
        assert!(accepts(
            Some("application/json, text/event-stream"),
            "text/event-stream"
        ));
        assert!(accepts(Some("*/*"), "application/json"));
        assert!(accepts(Some("text/*;q=0.5"), "text/event-stream"));
        assert!(!accepts(Some("application/json"), "text/event-stream"));
    }

    #[test]
    fn origins_admitted_are_the_controllers_own_and_those_listed() {
        let door = Origins::new(
            "https://Controller.example.com/a2a",
            8080,
            &["https://console.example.com".into()],
        );
        assert!(door.admit(None));
        assert!(door.admit(Some("https://controller.example.com")));
        assert!(door.admit(Some("http://localhost:8080")));
        assert!(door.admit(Some("https://console.example.com/")));
        assert!(!door.admit(Some("http://evil.example.com")));
        assert!(!door.admit(Some("http://localhost:3000")));
        assert!(!door.admit(Some("null")));
    }
}
