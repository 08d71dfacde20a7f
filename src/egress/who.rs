//! Who is asking: the worker whose placeholder a request carries (in `Proxy-Authorization`
//! for a tunnel, as the proxy URL's password; in `Authorization: Bearer` or `x-api-key` for a
//! route), checked against the egress key, then against the controller's word that the
//! worker runs now and at which address (`GET /egress/v1/whois` with the placeholder). That
//! word is trusted for `EGRESS_RECHECK` and kept nowhere else: any replica asks the same.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::{Proxy, Refused};
use crate::http::wire::Head;

/// A worker the controller says runs.
#[derive(Debug, Clone)]
pub(super) struct Identity {
    pub worker_id: String,
    pub template: String,
    /// The host of its `a2a_url`: where its connections come from (an address, or a name).
    pub address: String,
}

/// The controller's answers, each for `recheck`.
pub(super) struct Who {
    controller: String,
    agent: ureq::Agent,
    recheck: Duration,
    known: Mutex<HashMap<String, (Identity, Instant)>>,
    /// Workers the controller said do not run, and when: asked again only after
    /// [`GONE_FOR`] (a stale placeholder's requests make no list each).
    gone: Mutex<HashMap<String, Instant>>,
}

/// How long the controller's "not running" is believed. A worker id is only ever refused so
/// after its worker is gone (a placeholder exists only once its worker does).
const GONE_FOR: Duration = Duration::from_secs(1);

/// The most answers kept at once (older ones go first when it is reached).
const MAX_KNOWN: usize = 16_384;

impl Who {
    pub(super) fn new(controller: &str, recheck: Duration) -> Who {
        Who {
            controller: controller.to_string(),
            agent: crate::backend::api_call::agent_config(
                Duration::from_secs(5),
                Duration::from_secs(2),
            )
            .build()
            .new_agent(),
            recheck,
            known: Mutex::default(),
            gone: Mutex::default(),
        }
    }

    /// The controller's word on `worker_id` (placeholder `placeholder`), fresh or recent.
    fn ask(&self, worker_id: &str, placeholder: &str) -> Result<Identity, Refused> {
        let not_running = || {
            Refused(
                403,
                format!("worker {worker_id} is not running: its placeholder is refused"),
            )
        };
        if let Some(at) = self
            .gone
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(worker_id)
        {
            if at.elapsed() < GONE_FOR {
                return Err(not_running());
            }
        }
        if let Some((id, at)) = self
            .known
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(worker_id)
        {
            if at.elapsed() < self.recheck {
                return Ok(id.clone());
            }
        }
        let url = format!("{}/egress/v1/whois", self.controller);
        let answer = self
            .agent
            .get(&url)
            .header("Authorization", &format!("Bearer {placeholder}"))
            .call()
            .map_err(|e| {
                Refused(
                    503,
                    format!(
                        "the controller could not be asked whether worker {worker_id} runs: {e}"
                    ),
                )
            })?;
        let status = answer.status().as_u16();
        let mut body = answer.into_body();
        match status {
            200 => {
                let id = body.read_json::<serde_json::Value>().ok().and_then(|v| {
                    let field = |k: &str| v.get(k)?.as_str().map(str::to_string);
                    Some(Identity {
                        worker_id: field("worker_id")?,
                        template: field("template")?,
                        address: field("address")?,
                    })
                });
                let id = id.ok_or_else(|| {
                    Refused(503, format!("the controller's answer about worker {worker_id} could not be read (worker_id, template, address)"))
                })?;
                let mut known = self.known.lock().unwrap_or_else(|p| p.into_inner());
                let recheck = self.recheck;
                keep(
                    &mut known,
                    worker_id,
                    (id.clone(), Instant::now()),
                    |(_, at)| at.elapsed() < recheck,
                );
                Ok(id)
            }
            404 => {
                self.forget(worker_id);
                let mut gone = self.gone.lock().unwrap_or_else(|p| p.into_inner());
                keep(&mut gone, worker_id, Instant::now(), |at| {
                    at.elapsed() < GONE_FOR
                });
                Err(not_running())
            }
            other => Err(Refused(
                503,
                format!(
                    "the controller answered {other} when asked whether worker {worker_id} runs"
                ),
            )),
        }
    }

    fn forget(&self, worker_id: &str) {
        self.known
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(worker_id);
    }
}

/// `value` kept for `key` in a map of at most [`MAX_KNOWN`] entries: when it is full, the
/// entries no longer `fresh` go first, and all of them if that is not enough.
fn keep<V>(map: &mut HashMap<String, V>, key: &str, value: V, fresh: impl Fn(&V) -> bool) {
    if map.len() >= MAX_KNOWN {
        map.retain(|_, v| fresh(v));
        if map.len() >= MAX_KNOWN {
            map.clear();
        }
    }
    map.insert(key.to_string(), value);
}

/// The placeholder a request carries, if any.
fn placeholder(head: &Head, tunnel: bool) -> Option<String> {
    let header = |name: &str| {
        head.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.trim())
    };
    if let Some(basic) = header("proxy-authorization").and_then(|v| strip_scheme(v, "basic")) {
        let standard = basic.replace('+', "-").replace('/', "_");
        let decoded = crate::auth::jwt::base64url(&standard).ok()?;
        let text = String::from_utf8(decoded).ok()?;
        return text.split_once(':').map(|(_, pass)| pass.to_string());
    }
    if tunnel {
        return None;
    }
    crate::auth::presented(header("authorization"))
        .ok()
        .filter(|t| !t.is_empty())
        .or_else(|| header("x-api-key"))
        .map(str::to_string)
}

fn strip_scheme<'a>(value: &'a str, scheme: &str) -> Option<&'a str> {
    let (s, rest) = value.split_once(' ')?;
    s.eq_ignore_ascii_case(scheme).then(|| rest.trim())
}

impl Proxy {
    /// The worker a request comes from, or why it is refused (407 without a placeholder of
    /// this key; 403 for a worker that does not run, or a placeholder from another address).
    pub(super) fn identify(
        &self,
        head: &Head,
        peer: SocketAddr,
        tunnel: bool,
    ) -> Result<Identity, Refused> {
        let Some(placeholder) = placeholder(head, tunnel) else {
            return Err(Refused(
                407,
                if tunnel {
                    "no credentials: a tunnel carries its worker's placeholder as the proxy's password (HTTPS_PROXY as the worker was given it)".into()
                } else {
                    "no credentials: a route's request carries its worker's placeholder (A2A_EGRESS_TOKEN) as a bearer token".into()
                },
            ));
        };
        let Some(worker_id) = self.key.worker_of(&placeholder) else {
            return Err(Refused(
                407,
                "the credentials are not a worker's placeholder of this proxy's key".into(),
            ));
        };
        let id = self.who.ask(worker_id, &placeholder)?;
        // A worker without an address of its own (a local tab) cannot be told by it.
        if id.address.is_empty() {
            return Ok(id);
        }
        let addresses: Vec<IpAddr> = match id.address.parse::<IpAddr>() {
            Ok(ip) => vec![ip],
            // A name (a pod's DNS name in the workers' Service): where it resolves now.
            Err(_) => (id.address.as_str(), 0)
                .to_socket_addrs()
                .map(|a| a.map(|s| s.ip()).collect())
                .unwrap_or_default(),
        };
        if addresses.iter().any(|ip| same_host(*ip, peer.ip())) {
            return Ok(id);
        }
        Err(Refused(
            403,
            format!("worker {worker_id}'s placeholder came from {}, not from the worker: a placeholder is its own worker's alone", peer.ip()),
        ))
    }
}

/// The same address (an IPv4 address and its IPv6-mapped form alike).
fn same_host(a: IpAddr, b: IpAddr) -> bool {
    let canon = |ip: IpAddr| match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    canon(a) == canon(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(headers: &[(&str, &str)]) -> Head {
        Head {
            method: "CONNECT".into(),
            target: "x:443".into(),
            minor: 1,
            headers: headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    #[test]
    fn a_placeholder_is_read_where_each_client_puts_it() {
        // `worker:secret` in Basic.
        let basic = head(&[("Proxy-Authorization", "Basic d29ya2VyOnNlY3JldA==")]);
        assert_eq!(placeholder(&basic, true).as_deref(), Some("secret"));
        let bearer = head(&[("Authorization", "Bearer ph")]);
        assert_eq!(placeholder(&bearer, false).as_deref(), Some("ph"));
        assert_eq!(placeholder(&bearer, true), None);
        let key = head(&[("x-api-key", "ph2")]);
        assert_eq!(placeholder(&key, false).as_deref(), Some("ph2"));
        assert_eq!(placeholder(&head(&[]), false), None);
    }

    #[test]
    fn a_mapped_address_is_the_same_host() {
        let v4: IpAddr = "10.1.2.3".parse().unwrap();
        let mapped: IpAddr = "::ffff:10.1.2.3".parse().unwrap();
        assert!(same_host(v4, mapped));
        assert!(!same_host(v4, "10.1.2.4".parse().unwrap()));
    }
}
