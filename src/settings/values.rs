//! Parsers for one setting's value. Each refusal names the setting.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;

use super::error::Error;

pub(super) fn invalid(name: &'static str, reason: String) -> Error {
    Error::Invalid { name, reason }
}

/// An `http://` or `https://` URL with a host; returned without a trailing slash.
pub(super) fn http_url(name: &'static str, value: &str) -> Result<String, Error> {
    let rest = value
        .strip_prefix("http://")
        .or_else(|| value.strip_prefix("https://"));
    let host = rest.map(|r| r.split(['/', '?', '#']).next().unwrap_or(""));
    match host {
        Some(h)
            if !h.is_empty()
                && !value.contains(char::is_whitespace)
                && !value.contains(['?', '#']) =>
        {
            Ok(value.trim_end_matches('/').to_string())
        }
        _ => Err(invalid(
            name,
            format!("{value:?} is not an http:// or https:// URL with a host"),
        )),
    }
}

/// `host:port`, `[v6]:port`, `:port` (all interfaces, as Go spells it) or `localhost:port`.
pub fn parse_listen(value: &str) -> Result<SocketAddr, Error> {
    let err = || {
        invalid(
            "LISTEN",
            format!("{value:?} is not host:port, :port or [ipv6]:port"),
        )
    };
    if let Some(port) = value.strip_prefix(':') {
        let port = port.parse().map_err(|_| err())?;
        return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port));
    }
    if let Some(port) = value.strip_prefix("localhost:") {
        let port = port.parse().map_err(|_| err())?;
        return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port));
    }
    value.parse().map_err(|_| err())
}

/// An image reference must name a tag or a digest: an untagged one silently means `:latest`.
pub(super) fn check_image(image: &str) -> Result<(), Error> {
    let last = image.rsplit('/').next().unwrap_or(image);
    let ok = !image.contains(char::is_whitespace)
        && !image.is_empty()
        && (image.contains('@')
            || last
                .split_once(':')
                .is_some_and(|(n, t)| !n.is_empty() && !t.is_empty()));
    if ok {
        Ok(())
    } else {
        Err(invalid(
            "WORKER_IMAGE",
            format!("{image:?} has no tag; name one explicitly (e.g. {image}:v1), it is never assumed to be :latest"),
        ))
    }
}

/// `1073741824`, `512m`, `2g`, `64k` (Docker's binary units).
pub(super) fn parse_bytes(text: &str) -> Option<i64> {
    let t = text.trim().to_ascii_lowercase();
    let t = t.strip_suffix('b').unwrap_or(&t);
    let (num, mult) = match t.as_bytes().last()? {
        b'k' => (&t[..t.len() - 1], 1i64 << 10),
        b'm' => (&t[..t.len() - 1], 1 << 20),
        b'g' => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    let n: i64 = num.parse().ok()?;
    n.checked_mul(mult).filter(|v| *v >= 6 << 20)
}

pub(super) fn expand_home(name: &'static str, path: &str) -> Result<PathBuf, Error> {
    match path.strip_prefix("~/") {
        Some(rest) => match std::env::var_os("HOME") {
            Some(home) if !home.is_empty() => Ok(PathBuf::from(home).join(rest)),
            _ => Err(invalid(
                name,
                format!("{path:?} starts with ~ but HOME is not set"),
            )),
        },
        None => Ok(PathBuf::from(path)),
    }
}

/// `10.1.0.0/16` or `fd00::/8`: the network's address and prefix length.
pub(super) fn parse_cidr(s: &str) -> Option<(std::net::IpAddr, u8)> {
    let (addr, len) = s.split_once('/')?;
    let addr: std::net::IpAddr = addr.parse().ok()?;
    let len: u8 = len.parse().ok()?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    (len <= max).then_some((addr, len))
}

/// A DNS name: labels of letters, digits and hyphens, not starting or ending with a hyphen.
pub(super) fn is_hostname(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.trim_end_matches('.').split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

/// A controller id: 1-63 characters of `[A-Za-z0-9_.-]`, starting and ending alphanumeric
/// (it is part of every label and name the controller gives).
pub(super) fn controller_id(name: &'static str, id: String) -> Result<String, Error> {
    let edge_ok = |b: Option<&u8>| b.is_some_and(|b| b.is_ascii_alphanumeric());
    let fits = !id.is_empty()
        && id.len() <= 63
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && edge_ok(id.as_bytes().first())
        && edge_ok(id.as_bytes().last());
    if !fits {
        return Err(invalid(
            name,
            format!("{id:?} must be 1-63 characters of [A-Za-z0-9_.-], starting and ending alphanumeric"),
        ));
    }
    Ok(id)
}

/// A Sentry DSN: `https://KEY@HOST/PROJECT` (or http).
pub(super) fn sentry_dsn(name: &'static str, dsn: String) -> Result<String, Error> {
    if !(dsn.starts_with("https://") || dsn.starts_with("http://")) || !dsn.contains('@') {
        return Err(invalid(
            name,
            "it must look like https://KEY@HOST/PROJECT".into(),
        ));
    }
    Ok(dsn)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_docker_units_at_least_6_mib() {
        assert_eq!(parse_bytes("512m"), Some(512 << 20));
        assert_eq!(parse_bytes("2g"), Some(2 << 30));
        assert_eq!(parse_bytes("1k"), None); // below Docker's 6 MiB minimum
        assert_eq!(parse_bytes("x"), None);
    }

    #[test]
    fn listen_addresses() {
        assert_eq!(parse_listen(":9090").unwrap().to_string(), "0.0.0.0:9090");
        assert_eq!(
            parse_listen("localhost:1").unwrap().to_string(),
            "127.0.0.1:1"
        );
        assert_eq!(parse_listen("[::1]:2").unwrap().to_string(), "[::1]:2");
        assert!(parse_listen("nonsense")
            .unwrap_err()
            .to_string()
            .contains("LISTEN"));
    }
}
