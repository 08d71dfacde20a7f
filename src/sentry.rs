//! Error reporting to Sentry (when `SENTRY_DSN` is set) without a Sentry crate: one envelope
//! per event, posted by one background thread from a bounded queue, so a slow or unreachable
//! Sentry never blocks or fails a request. Events carry the same texts as the log lines,
//! which never contain a token.

use std::fmt;
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::thread;
use std::time::Duration;

use serde_json::json;

use crate::time::{now_millis, rfc3339_millis};
use crate::token;

const QUEUE: usize = 64;

/// A parsed DSN: `https://PUBLIC_KEY@HOST[/PATH]/PROJECT_ID`.
#[derive(Clone, PartialEq, Eq)]
pub struct Dsn {
    pub envelope_url: String,
    pub public_key: String,
    dsn: String,
}

impl fmt::Debug for Dsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Dsn({})", self.envelope_url)
    }
}

impl Dsn {
    pub fn parse(dsn: &str) -> Option<Dsn> {
        let (scheme, rest) = dsn.split_once("://")?;
        if scheme != "https" && scheme != "http" {
            return None;
        }
        let (key, host_path) = rest.split_once('@')?;
        let public_key = key.split(':').next()?.to_string();
        let (host_path, project) = host_path.trim_end_matches('/').rsplit_once('/')?;
        if public_key.is_empty() || host_path.is_empty() || project.is_empty() {
            return None;
        }
        if !project.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return None;
        }
        Some(Dsn {
            envelope_url: format!("{scheme}://{host_path}/api/{project}/envelope/"),
            public_key,
            dsn: dsn.to_string(),
        })
    }
}

pub struct Sentry {
    queue: SyncSender<(String, String)>,
}

/// Why Sentry reporting could not start.
#[derive(Debug)]
pub enum Error {
    /// `SENTRY_DSN` does not have the DSN shape.
    Dsn,
    /// `SENTRY_PROXY` is not a proxy URL ureq accepts.
    Proxy(String),
    /// The sender thread could not start.
    Thread(std::io::Error),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Dsn => f.write_str("SENTRY_DSN is not https://KEY@HOST/PROJECT"),
            Error::Proxy(why) => write!(f, "SENTRY_PROXY: {why}"),
            Error::Thread(e) => write!(f, "cannot start the Sentry thread: {e}"),
        }
    }
}

impl std::error::Error for Error {}

impl Sentry {
    /// Starts the sender thread. `proxy` is an http(s) proxy URL.
    pub fn start(dsn: &str, proxy: Option<&str>) -> Result<Sentry, Error> {
        let dsn = Dsn::parse(dsn).ok_or(Error::Dsn)?;
        let proxy = match proxy {
            Some(p) => Some(ureq::Proxy::new(p).map_err(|e| Error::Proxy(e.to_string()))?),
            None => None,
        };
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(10)))
            .timeout_connect(Some(Duration::from_secs(5)))
            .proxy(proxy)
            .max_redirects(0)
            .user_agent(concat!("a2a-worker-controller/", env!("CARGO_PKG_VERSION")))
            .build()
            .new_agent();
        let (tx, rx) = sync_channel::<(String, String)>(QUEUE);
        thread::Builder::new()
            .name("sentry".into())
            .spawn(move || {
                for (message, tags) in rx {
                    send(&agent, &dsn, &message, &tags);
                }
            })
            .map_err(Error::Thread)?;
        Ok(Sentry { queue: tx })
    }

    /// Queues an error event; drops it (with a log line) when the queue is full.
    pub fn report(&self, message: &str, operation: &str, backend: &str) {
        let tags = json!({"operation": operation, "backend": backend}).to_string();
        match self.queue.try_send((message.to_string(), tags)) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => log::warn!("sentry queue full; event dropped"),
            Err(TrySendError::Disconnected(_)) => {
                log::warn!("sentry sender stopped; event dropped")
            }
        }
    }
}

/// The envelope body: envelope header, item header, event — one JSON document a line.
pub fn envelope(dsn: &Dsn, event_id: &str, message: &str, tags: &str) -> String {
    let now = rfc3339_millis(now_millis());
    let tags: serde_json::Value = serde_json::from_str(tags).unwrap_or_else(|_| json!({}));
    let event = json!({
        "event_id": event_id,
        "timestamp": now,
        "platform": "other",
        "level": "error",
        "logger": "a2a-worker-controller",
        "message": {"formatted": message},
        "release": concat!("a2a-worker-controller@", env!("CARGO_PKG_VERSION")),
        "environment": "production",
        "server_name": "a2a-worker-controller",
        "tags": tags,
    })
    .to_string();
    let header = json!({"event_id": event_id, "dsn": dsn.dsn, "sent_at": now});
    let item = json!({"type": "event", "length": event.len()});
    format!("{header}\n{item}\n{event}\n")
}

fn send(agent: &ureq::Agent, dsn: &Dsn, message: &str, tags: &str) {
    let event_id = match token::random_hex(16) {
        Ok(id) => id,
        Err(e) => {
            log::warn!("sentry: no event id: {e}");
            return;
        }
    };
    let auth = format!(
        "Sentry sentry_version=7, sentry_key={}, sentry_client=a2a-worker-controller/{}",
        dsn.public_key,
        env!("CARGO_PKG_VERSION")
    );
    let result = agent
        .post(&dsn.envelope_url)
        .header("X-Sentry-Auth", &auth)
        .header("Content-Type", "application/x-sentry-envelope")
        .send(envelope(dsn, &event_id, message, tags));
    match result {
        Ok(resp) if resp.status().is_success() => {}
        Ok(resp) => log::warn!("sentry answered HTTP {}", resp.status().as_u16()),
        Err(e) => log::warn!("sentry unreachable: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dsn_to_envelope_url() {
        let d = Dsn::parse("https://abc@o1.ingest.sentry.io/42").unwrap();
        assert_eq!(
            d.envelope_url,
            "https://o1.ingest.sentry.io/api/42/envelope/"
        );
        assert_eq!(d.public_key, "abc");
        let d = Dsn::parse("http://k:secret@localhost:9000/sub/7").unwrap();
        assert_eq!(d.envelope_url, "http://localhost:9000/sub/api/7/envelope/");
        assert_eq!(d.public_key, "k");
        assert!(Dsn::parse("https://o1.ingest.sentry.io/42").is_none());
        assert!(Dsn::parse("ftp://a@b/1").is_none());
    }

    #[test]
    fn an_envelope_is_three_lines_its_item_length_that_of_the_event() {
        let d = Dsn::parse("https://abc@host/1").unwrap();
        let body = envelope(&d, "0123", "create failed", r#"{"operation":"create"}"#);
        let lines: Vec<&str> = body.lines().collect();
        assert_eq!(lines.len(), 3);
        let item: serde_json::Value = serde_json::from_str(lines[1]).unwrap();
        assert_eq!(item["length"].as_u64().unwrap() as usize, lines[2].len());
        let event: serde_json::Value = serde_json::from_str(lines[2]).unwrap();
        assert_eq!(event["message"]["formatted"], "create failed");
        assert_eq!(event["tags"]["operation"], "create");
    }
}
