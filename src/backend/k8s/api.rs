//! The Kubernetes API client: ureq over rustls, trusting only the cluster's CA, authenticated
//! by a bearer token that is re-read when its file changes (bound service-account tokens
//! rotate about hourly) and once more on a 401, or by a client certificate. Every call has an
//! explicit timeout; error answers are `Status` objects, mapped by `reason`.
//! Its configuration (where the API is, the CA, the credentials) is `config.rs`'s.

use std::fmt;
use std::fs;
use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use serde_json::Value;
use ureq::tls::{RootCerts, TlsConfig};

use super::config::read_token;
pub use super::config::{ApiConfig, Auth, ConfigError, SERVICE_ACCOUNT_DIR};
pub use crate::backend::api_call::Method;
use crate::backend::api_call::{self, one_line};
use crate::backend::Logs;

const CALL_TIMEOUT: Duration = Duration::from_secs(15);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
const MAX_RESPONSE: u64 = 32 << 20;
const LOG_TIMEOUT: Duration = Duration::from_secs(30);
/// The longest `Retry-After` honoured (once) before giving up with `TooManyRequests`.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(10);
/// The longest watch event line read (a pod is a few KiB).
const MAX_EVENT: u64 = 4 << 20;
/// The `reason` of a `Status` answer, for the ones the backend branches on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reason {
    AlreadyExists,
    NotFound,
    Forbidden,
    Unauthorized,
    Invalid,
    Conflict,
    TooManyRequests,
    Other(String),
}

impl Reason {
    fn of(reason: &str, code: u16) -> Reason {
        match (reason, code) {
            ("AlreadyExists", _) => Reason::AlreadyExists,
            ("NotFound", _) => Reason::NotFound,
            ("Forbidden", _) => Reason::Forbidden,
            ("Unauthorized", _) => Reason::Unauthorized,
            ("Invalid", _) => Reason::Invalid,
            ("Conflict", _) => Reason::Conflict,
            ("TooManyRequests", _) => Reason::TooManyRequests,
            // No (known) reason: fall back to the code.
            (_, 401) => Reason::Unauthorized,
            (_, 403) => Reason::Forbidden,
            (_, 404) => Reason::NotFound,
            (_, 409) => Reason::Conflict,
            (_, 422) => Reason::Invalid,
            (_, 429) => Reason::TooManyRequests,
            (other, _) => Reason::Other(other.to_string()),
        }
    }
}

/// A failed API call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiError {
    /// The API server cannot be reached (connection, TLS, timeout).
    Unreachable(String),
    /// It answered with a `Status` failure.
    Status {
        code: u16,
        reason: Reason,
        message: String,
    },
    /// It answered something this client cannot read.
    Protocol(String),
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ApiError::Unreachable(why) => write!(f, "Kubernetes API unreachable: {why}"),
            ApiError::Status { code, message, .. } => {
                write!(f, "Kubernetes API answered {code}: {message}")
            }
            ApiError::Protocol(why) => write!(f, "unexpected Kubernetes API answer: {why}"),
        }
    }
}

impl std::error::Error for ApiError {}

/// The token, re-read when its file's modification time changes, or when forced (after a 401).
struct TokenFile {
    path: PathBuf,
    cached: Mutex<Option<(Option<SystemTime>, String)>>,
}

impl TokenFile {
    fn current(&self, force: bool) -> Result<String, ApiError> {
        let modified = fs::metadata(&self.path).and_then(|m| m.modified()).ok();
        let mut cached = self.cached.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((seen, token)) = cached.as_ref() {
            if !force && *seen == modified && modified.is_some() {
                return Ok(token.clone());
            }
        }
        let token = read_token("K8S_TOKEN_FILE", &self.path)
            .map_err(|e| ApiError::Unreachable(e.to_string()))?;
        if let Some((seen, old)) = cached.as_ref() {
            if *seen != modified && *old != token {
                // The kubelet rotates a projected service-account token well before it expires.
                log::info!(
                    "the API token file {} changed: using the new token",
                    self.path.display()
                );
            }
        }
        *cached = Some((modified, token.clone()));
        Ok(token)
    }
}

pub struct Api {
    agent: ureq::Agent,
    base: String,
    token: Option<TokenFile>,
    /// `Warning` header texts already logged (each is logged once; at most [`MAX_WARNINGS`]).
    warned: Mutex<std::collections::HashSet<String>>,
}

/// How many distinct `Warning` texts are remembered (and so logged once each).
const MAX_WARNINGS: usize = 256;

impl Api {
    pub fn new(config: &ApiConfig) -> Api {
        let client_cert = match &config.auth {
            Auth::ClientCert(c) => Some(c.clone()),
            Auth::TokenFile(_) => None,
        };
        let tls = TlsConfig::builder()
            .root_certs(RootCerts::new_with_certs(&config.roots))
            .client_cert(client_cert)
            .build();
        let agent = api_call::agent(
            api_call::agent_config(CALL_TIMEOUT, CONNECT_TIMEOUT)
                .tls_config(tls)
                .build(),
        );
        let token = match &config.auth {
            Auth::TokenFile(path) => Some(TokenFile {
                path: path.clone(),
                cached: Mutex::new(None),
            }),
            Auth::ClientCert(_) => None,
        };
        Api {
            agent,
            base: config.base.clone(),
            token,
            warned: Mutex::new(std::collections::HashSet::new()),
        }
    }

    /// The API server's address (for `check`).
    pub fn base(&self) -> &str {
        &self.base
    }

    /// Logs each `Warning: 299 - "text"` header the API sent (deprecations, unknown fields
    /// under `fieldValidation=Warn`), once per distinct text.
    fn log_warnings(&self, response: &ureq::http::Response<ureq::Body>) {
        for value in response.headers().get_all("Warning") {
            let Some(text) = value.to_str().ok().and_then(warning_text) else {
                continue;
            };
            let mut warned = self.warned.lock().unwrap_or_else(|p| p.into_inner());
            if warned.len() < MAX_WARNINGS && warned.insert(text.clone()) {
                log::warn!("the Kubernetes API warns: {text}");
            }
        }
    }

    /// One request with the current token; a 401 re-reads the token file once and tries
    /// again. The response comes back whatever its status.
    fn respond(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        timeout: Duration,
    ) -> Result<ureq::http::Response<ureq::Body>, ApiError> {
        let url = format!("{}{path}", self.base);
        let mut reread_token = false;
        loop {
            let bearer = match &self.token {
                Some(t) => Some(format!("Bearer {}", t.current(reread_token)?)),
                None => None,
            };
            let mut headers = vec![("Accept", "application/json")];
            if let Some(b) = &bearer {
                headers.push(("Authorization", b));
            }
            let response = api_call::send(&self.agent, method, &url, &headers, body, timeout)
                .map_err(|e| self.unreachable(e))?;
            if response.status().as_u16() == 401 && self.token.is_some() && !reread_token {
                reread_token = true;
                continue;
            }
            return Ok(response);
        }
    }

    fn unreachable(&self, e: impl fmt::Display) -> ApiError {
        ApiError::Unreachable(format!("{} ({e})", self.base))
    }

    /// One call: the status and body of a success (2xx), or the mapped failure. A 401 re-reads
    /// the token and tries once more; a 429 waits its `Retry-After` (at most
    /// [`MAX_RETRY_AFTER`]) and tries once more.
    pub fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<(u16, Vec<u8>), ApiError> {
        let mut waited = false;
        loop {
            let mut response = self.respond(method, path, body, CALL_TIMEOUT)?;
            self.log_warnings(&response);
            let status = response.status().as_u16();
            let retry_after = response
                .headers()
                .get("Retry-After")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(Duration::from_secs);
            let bytes = api_call::read_body(&mut response, MAX_RESPONSE)
                .map_err(|e| self.unreachable(e))?;
            if (200..300).contains(&status) {
                return Ok((status, bytes));
            }
            if status == 429 && !waited {
                if let Some(wait) = retry_after.filter(|w| *w <= MAX_RETRY_AFTER) {
                    waited = true;
                    thread::sleep(wait);
                    continue;
                }
            }
            return Err(status_error(status, &bytes));
        }
    }

    /// A `pods/log` read: the last `lines` lines (the path carries `tailLines`), read as a
    /// stream and kept within [`crate::backend::tail::MAX_LOG_BYTES`]. `None`: the API
    /// answered 204, as it does for a pod that has no node yet (so no container, no output).
    pub fn log_tail(&self, path: &str, lines: u32) -> Result<Option<Logs>, ApiError> {
        let mut response = self.respond(Method::Get, path, None, LOG_TIMEOUT)?;
        let status = response.status().as_u16();
        if status == 204 {
            return Ok(None);
        }
        if !(200..300).contains(&status) {
            let body = api_call::read_body(&mut response, MAX_RESPONSE)
                .map_err(|e| self.unreachable(e))?;
            return Err(status_error(status, &body));
        }
        api_call::log_tail(&mut response, lines, false)
            .map(Some)
            .map_err(|e| self.unreachable(format!("reading the log: {e}")))
    }

    /// One watch (`path` carries `watch=1`): `on_event(type, object)` sees each event until it
    /// returns `Some`, the server ends the stream (`Ok(None)`), or `until` passes (`Ok(None)`).
    /// An `ERROR` event is returned as its `Status`.
    pub fn watch<T>(
        &self,
        path: &str,
        until: Instant,
        mut on_event: impl FnMut(&str, &Value) -> Option<T>,
    ) -> Result<Option<T>, ApiError> {
        let left = until.saturating_duration_since(Instant::now());
        let mut response = self.respond(Method::Get, path, None, left + CONNECT_TIMEOUT)?;
        let status = response.status().as_u16();
        if !(200..300).contains(&status) {
            let body = api_call::read_body(&mut response, MAX_RESPONSE)
                .map_err(|e| self.unreachable(e))?;
            return Err(status_error(status, &body));
        }
        let mut reader = BufReader::new(response.body_mut().as_reader());
        loop {
            if Instant::now() >= until {
                return Ok(None);
            }
            let mut line = Vec::new();
            let n = (&mut reader)
                .take(MAX_EVENT)
                .read_until(b'\n', &mut line)
                .map_err(|e| self.unreachable(format!("watch: {e}")))?;
            if n == 0 {
                return Ok(None);
            }
            if line.trim_ascii().is_empty() {
                continue;
            }
            let event: Value = serde_json::from_slice(&line)
                .map_err(|e| ApiError::Protocol(format!("watch event: {e}")))?;
            let kind = event["type"].as_str().unwrap_or("");
            if kind == "BOOKMARK" {
                continue;
            }
            if kind == "ERROR" {
                let code = event["object"]["code"].as_u64().unwrap_or(500) as u16;
                return Err(status_error(code, event["object"].to_string().as_bytes()));
            }
            if let Some(done) = on_event(kind, &event["object"]) {
                return Ok(Some(done));
            }
        }
    }
}

/// The text of a `Warning` header (`299 - "text"`, RFC 7234's form, which the API uses).
fn warning_text(value: &str) -> Option<String> {
    let quoted = value.split_once('"')?.1;
    let text = quoted.strip_suffix('"').unwrap_or(quoted);
    let text = one_line(&text.replace("\\\"", "\""));
    (!text.is_empty()).then_some(text)
}

/// A failure answer as an [`ApiError`]: its `Status` reason and message, else the code.
pub fn status_error(code: u16, body: &[u8]) -> ApiError {
    let status: Option<Value> = serde_json::from_slice(body).ok();
    let text = |key: &str| {
        status
            .as_ref()
            .and_then(|s| s.get(key))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let reason = text("reason");
    let mut message = text("message");
    if message.is_empty() {
        message = String::from_utf8_lossy(body).into_owned();
    }
    ApiError::Status {
        code,
        reason: Reason::of(&reason, code),
        message: one_line(&message),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn warning_headers_give_their_text() {
        // As the real server sends an unknown field's warning (s15b-template-typo.txt).
        assert_eq!(
            warning_text(r#"299 - "unknown field \"spec.nodeSelectr\"""#).as_deref(),
            Some(r#"unknown field "spec.nodeSelectr""#)
        );
        assert_eq!(warning_text("299 - no quotes"), None);
    }

    #[test]
    fn plain_text_throttling_maps_by_its_code() {
        // API priority and fairness answers 429 in plain text (s26-apf429.txt).
        let ApiError::Status {
            reason, message, ..
        } = status_error(429, b"Too many requests, please try again later.\n")
        else {
            panic!()
        };
        assert_eq!(reason, Reason::TooManyRequests);
        assert_eq!(message, "Too many requests, please try again later.");
    }

    #[test]
    fn status_bodies_map_by_reason_then_code() {
        let body = br#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"pods \"x\" already exists","reason":"AlreadyExists","code":409}"#;
        assert_eq!(
            status_error(409, body),
            ApiError::Status {
                code: 409,
                reason: Reason::AlreadyExists,
                message: "pods \"x\" already exists".into()
            }
        );
        let ApiError::Status { reason, .. } = status_error(403, b"not json") else {
            panic!()
        };
        assert_eq!(reason, Reason::Forbidden);
        let ApiError::Status {
            reason, message, ..
        } = status_error(500, br#"{"reason":"InternalError","message":"etcd\nlost"}"#)
        else {
            panic!()
        };
        assert_eq!(reason, Reason::Other("InternalError".into()));
        assert_eq!(message, "etcd lost");
    }
}
