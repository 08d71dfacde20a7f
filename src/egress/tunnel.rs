//! `CONNECT host:port`: a tunnel to a destination the worker's template allows, judged on
//! the name asked and on the address it resolved to (a name never reaches a loopback or
//! link-local address unless a rule names that address). Bytes are relayed both ways as they
//! come; TLS inside is the worker's and the destination's alone.

use std::io::{Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

use super::{Proxy, Refused};
use crate::http::wire::Head;
use crate::settings::egress::Egress;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Each direction's buffer, made on its first bytes (an idle tunnel holds none).
const BUFFER: usize = 64 * 1024;

/// `host:port` of a CONNECT's target (`[v6]:port` too).
fn authority(target: &str) -> Option<(String, u16)> {
    let (host, port) = target.rsplit_once(':')?;
    let port = port.parse().ok().filter(|p| *p != 0)?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    (!host.is_empty() && host.len() <= 253).then(|| (host.to_ascii_lowercase(), port))
}

/// Where `host:port` may be reached under `policy`: the first address it resolves to that a
/// rule allows, or why not.
fn destination(
    policy: &Egress,
    template: &str,
    host: &str,
    port: u16,
) -> Result<SocketAddr, Refused> {
    let denied = || {
        Refused(
            403,
            format!(
                "egress to {host}:{port} is not allowed: template {template} allows {}",
                match policy {
                    Egress::Allow(_) => policy.describe(),
                    Egress::None => "no destination (egress \"none\": only its routes)".into(),
                    // Changed to open since: its workers made before stay fenced, as they were.
                    Egress::Open => "no destination through the proxy (egress is \"open\" now; a worker fenced before the change stays fenced)".into(),
                }
            ),
        )
    };
    if !matches!(policy, Egress::Allow(_)) {
        return Err(denied());
    }
    let addrs: Vec<SocketAddr> = match host.parse::<IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, port)],
        Err(_) => (host, port)
            .to_socket_addrs()
            .map_err(|e| Refused(502, format!("{host} could not be resolved: {e}")))?
            .collect(),
    };
    addrs
        .into_iter()
        .find(|a| policy.allows(host, a.ip(), port).is_some())
        .ok_or_else(denied)
}

/// Serves one CONNECT: who, where, then the relay until either side ends.
pub(super) fn serve(
    proxy: &Proxy,
    mut client: TcpStream,
    peer: SocketAddr,
    head: &Head,
    early: Vec<u8>,
) {
    let Some((host, port)) = authority(&head.target) else {
        let r = Refused(
            400,
            format!("CONNECT {:?} does not name host:port", head.target),
        );
        return proxy.refuse(&mut client, peer, ("", ""), r);
    };
    let id = match proxy.identify(head, peer, true) {
        Ok(id) => id,
        Err(r) => return proxy.refuse(&mut client, peer, ("", ""), r),
    };
    let who = (id.template.as_str(), id.worker_id.as_str());
    let templates = proxy.templates.current();
    let Some(template) = templates.get(&id.template) else {
        let r = Refused(403, format!("template {} is not in the proxy's templates (WORKER_TEMPLATES_FILE must be the controller's)", id.template));
        return proxy.refuse(&mut client, peer, who, r);
    };
    let to = match destination(&template.egress, &id.template, &host, port) {
        Ok(to) => to,
        Err(r) => return proxy.refuse(&mut client, peer, who, r),
    };
    let upstream = match TcpStream::connect_timeout(&to, CONNECT_TIMEOUT) {
        Ok(s) => s,
        Err(e) => {
            let r = Refused(
                502,
                format!("{host}:{port} ({}) could not be reached: {e}", to.ip()),
            );
            return proxy.refuse(&mut client, peer, who, r);
        }
    };
    let _ = upstream.set_nodelay(true);
    log::debug!(
        "egress: tunnel for worker {} to {host}:{port}",
        id.worker_id
    );
    proxy.count(who.0, who.1, "tunnel");
    if client
        .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
        .is_err()
    {
        return;
    }
    let _ = client.set_write_timeout(None);
    relay(client, upstream, early);
}

/// Copies both ways until each side has ended: `early` (bytes the client sent after its
/// head) first. One direction on a thread of its own.
pub(crate) fn relay(client: TcpStream, upstream: TcpStream, early: Vec<u8>) {
    let (Ok(client_r), Ok(mut upstream_w)) = (client.try_clone(), upstream.try_clone()) else {
        return;
    };
    if !early.is_empty() && upstream_w.write_all(&early).is_err() {
        return;
    }
    let back = std::thread::Builder::new()
        .name("egress-back".into())
        .stack_size(64 * 1024)
        .spawn(move || pump(upstream, client));
    pump(client_r, upstream_w);
    if let Ok(back) = back {
        let _ = back.join();
    }
}

/// `from` into `to` until `from` ends; then `to`'s write side is closed (the other way may
/// still be talking) and `from`'s read side.
fn pump(mut from: TcpStream, mut to: TcpStream) {
    let mut first = [0u8; 1024];
    let mut buf: Vec<u8> = Vec::new();
    loop {
        let n = if buf.is_empty() {
            match from.read(&mut first) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if to.write_all(&first[..n]).is_err() {
                        break;
                    }
                    buf = vec![0u8; BUFFER];
                    continue;
                }
            }
        } else {
            match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            }
        };
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
    let _ = from.shutdown(Shutdown::Read);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::egress::parse_egress;
    use serde_json::json;

    #[test]
    fn a_connect_target_is_host_and_port() {
        assert_eq!(
            authority("api.github.com:443"),
            Some(("api.github.com".into(), 443))
        );
        assert_eq!(authority("[::1]:8443"), Some(("::1".into(), 8443)));
        assert_eq!(authority("api.github.com"), None);
        assert_eq!(authority(":443"), None);
        assert_eq!(authority("x:0"), None);
    }

    #[test]
    fn a_refusal_names_what_the_template_allows() {
        let policy = parse_egress(&json!(["192.0.2.1:443"])).unwrap();
        let Refused(status, line) = destination(&policy, "coder", "198.51.100.1", 443).unwrap_err();
        assert_eq!(status, 403);
        assert_eq!(
            line,
            "egress to 198.51.100.1:443 is not allowed: template coder allows 192.0.2.1/32:443"
        );
        assert!(destination(&policy, "coder", "192.0.2.1", 443).is_ok());
        let Refused(_, none) = destination(&Egress::None, "t", "192.0.2.1", 443).unwrap_err();
        assert!(none.contains("egress \"none\""), "{none}");
    }
}
