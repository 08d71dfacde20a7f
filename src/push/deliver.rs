//! One webhook POST: to the one address the guard passed (ureq's resolver replaced by one
//! that answers only that address, so a second DNS answer cannot redirect the connection),
//! no proxy, no redirects followed, a 10 s bound, TLS verified against the web PKI roots with
//! the URL's host name.

use std::net::SocketAddr;
use std::time::Duration;

use ureq::unversioned::transport::DefaultConnector;

use crate::backend::api_call::OneAddress;

/// How long one delivery may take, connect to answer (§13.2 recommends 10-30 s).
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// What one attempt came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt {
    Delivered,
    /// Worth trying again (no answer, or a 5xx, 408 or 429).
    Retry(String),
    /// Not worth trying again (a redirect, which is never followed, or another 4xx).
    GiveUp(String),
}

/// POSTs `body` (a `StreamResponse`) to `url`, connecting to `addr` only.
pub fn post(url: &str, addr: SocketAddr, headers: &[(&str, String)], body: &str) -> Attempt {
    let config = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(TIMEOUT))
        .proxy(None)
        .max_redirects(0)
        .user_agent(concat!("a2a-worker-controller/", env!("CARGO_PKG_VERSION")))
        .build();
    // The resolver knows one address: the one the guard checked.
    let agent = ureq::Agent::with_parts(config, DefaultConnector::new(), OneAddress(addr));
    let mut request = agent.post(url).header("Content-Type", "application/json");
    for (k, v) in headers {
        request = request.header(*k, v.as_str());
    }
    match request.send(body) {
        Ok(response) => {
            let status = response.status().as_u16();
            match status {
                200..=299 => Attempt::Delivered,
                300..=399 => Attempt::GiveUp(format!(
                    "it answered a redirect ({status}), which is never followed"
                )),
                408 | 429 | 500..=599 => Attempt::Retry(format!("it answered {status}")),
                _ => Attempt::GiveUp(format!("it answered {status}")),
            }
        }
        Err(e) => Attempt::Retry(e.to_string()),
    }
}
