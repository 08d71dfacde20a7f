//! Where a webhook may be delivered (SSRF, specification §13.2): the URL's form, and the
//! addresses it may reach. `https` only unless `PUSH_ALLOW_HTTP`; never a URL with user info;
//! and never an address that is loopback, private (RFC 1918, RFC 4193), link-local (incl. the
//! cloud metadata address 169.254.169.254), carrier-grade NAT, multicast, unspecified,
//! documentation, benchmarking, reserved or otherwise special — for IPv4, IPv6, and IPv4
//! embedded in IPv6 (mapped, compatible, NAT64, 6to4) — unless `PUSH_ALLOW` names its host or a
//! network holding it. The address checked is the one connected to: the name is resolved once
//! and the connection pinned to an address that passed.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};

use crate::settings::PushSettings;

/// A webhook URL, checked for form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub url: String,
    /// The URL as logs show it: without its query, which may carry a secret.
    pub shown: String,
    pub https: bool,
    /// Lower case; an IPv6 literal without brackets.
    pub host: String,
    pub port: u16,
}

/// Why a webhook is refused. `Display` is one line a caller can act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    Url(String),
    Address { host: String, why: String },
    Resolve { host: String, why: String },
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refused::Url(why) => write!(f, "webhook URL refused: {why}"),
            Refused::Address { host, why } => write!(
                f,
                "webhook {host} refused: {why} (PUSH_ALLOW can allow a host or network the operator trusts)"
            ),
            Refused::Resolve { host, why } => write!(f, "webhook {host} cannot be resolved: {why}"),
        }
    }
}

impl std::error::Error for Refused {}

pub struct Guard {
    settings: PushSettings,
}

impl Guard {
    pub fn new(settings: PushSettings) -> Guard {
        Guard { settings }
    }

    /// Checks a URL's form when a config is created; an IP literal is checked here too (a
    /// hostname only at delivery, when it is resolved).
    pub fn check_url(&self, url: &str) -> Result<Target, Refused> {
        let target = parse(url).map_err(Refused::Url)?;
        if !target.https && !self.settings.allow_http {
            return Err(Refused::Url(
                "it is plain http: webhooks are https (PUSH_ALLOW_HTTP=true allows http)".into(),
            ));
        }
        if let Ok(ip) = target.host.parse::<IpAddr>() {
            self.check_ip(&target.host, ip)?;
        }
        let localhost = target.host == "localhost" || target.host.ends_with(".localhost");
        if localhost && !self.host_allowed(&target.host) {
            return Err(Refused::Address {
                host: target.host.clone(),
                why: "localhost is loopback".into(),
            });
        }
        Ok(target)
    }

    /// Resolves the target once and returns the first address that may be reached; the
    /// delivery connects to exactly that address.
    pub fn resolve(&self, target: &Target) -> Result<SocketAddr, Refused> {
        let addrs: Vec<SocketAddr> = (target.host.as_str(), target.port)
            .to_socket_addrs()
            .map_err(|e| Refused::Resolve {
                host: target.host.clone(),
                why: e.to_string(),
            })?
            .collect();
        let mut refusal = None;
        for addr in &addrs {
            match self.check_ip(&target.host, addr.ip()) {
                Ok(()) => return Ok(*addr),
                Err(e) => refusal = refusal.or(Some(e)),
            }
        }
        Err(refusal.unwrap_or(Refused::Resolve {
            host: target.host.clone(),
            why: "no address".into(),
        }))
    }

    fn host_allowed(&self, host: &str) -> bool {
        self.settings.allow_hosts.iter().any(|h| h == host)
    }

    fn check_ip(&self, host: &str, ip: IpAddr) -> Result<(), Refused> {
        let Some(why) = special(ip) else {
            return Ok(());
        };
        if self.host_allowed(host)
            || self
                .settings
                .allow_nets
                .iter()
                .any(|(net, len)| contains(*net, *len, ip))
        {
            return Ok(());
        }
        Err(Refused::Address {
            host: host.to_string(),
            why: format!("{ip} is {why}"),
        })
    }
}

/// Parses `scheme://host[:port][/path][?query]` (fragment dropped), refusing what a webhook
/// must not be: another scheme, user info, no host, a bad port, control characters.
pub fn parse(url: &str) -> Result<Target, String> {
    if url.len() > 2048 {
        return Err("it is longer than 2048 bytes".into());
    }
    if url.chars().any(|c| c.is_control() || c == ' ') {
        return Err("it contains spaces or control characters".into());
    }
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| "it is not an absolute http(s) URL".to_string())?;
    let https = match scheme.to_ascii_lowercase().as_str() {
        "https" => true,
        "http" => false,
        other => return Err(format!("scheme {other:?} is not https")),
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..end];
    if authority.contains('@') {
        return Err("it carries user info (user@host): send credentials as authentication".into());
    }
    let (host, port) = host_and_port(authority, https)?;
    let host = checked_host(&host)?;
    let url = match url.find('#') {
        Some(at) => url[..at].to_string(),
        None => url.to_string(),
    };
    let shown = match url.find('?') {
        Some(at) => format!("{}?...", &url[..at]),
        None => url.clone(),
    };
    Ok(Target {
        url,
        shown,
        https,
        host,
        port,
    })
}

/// The authority's host (an IPv6 address without its brackets) and port (the scheme's by
/// default; 0 is no port).
fn host_and_port(authority: &str, https: bool) -> Result<(String, u16), String> {
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (host, after) = v6
            .split_once(']')
            .ok_or_else(|| "its IPv6 address has no closing ]".to_string())?;
        host.parse::<Ipv6Addr>()
            .map_err(|_| format!("[{host}] is not an IPv6 address"))?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':').ok_or("junk after the IPv6 address")?),
        };
        (host.to_string(), port)
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), Some(p)),
            None => (authority.to_string(), None),
        }
    };
    let port = match port {
        None => {
            if https {
                443
            } else {
                80
            }
        }
        Some(p) => p
            .parse::<u16>()
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| format!("port {p:?} is not a port number"))?,
    };
    Ok((host, port))
}

/// The host lowercased, its final dot dropped: a name or an address, never a numeric form
/// some resolvers read otherwise.
fn checked_host(host: &str) -> Result<String, String> {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    if host.is_empty() {
        return Err("it names no host".into());
    }
    if host.parse::<Ipv6Addr>().is_err()
        && !host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
    {
        return Err(format!("{host:?} is not a hostname"));
    }
    // Forms some resolvers read as IPv4 (`2130706433`, `0x7f.1`, `127.1`) are refused: the
    // address checked must be the address connected to.
    if host.parse::<Ipv4Addr>().is_err()
        && host
            .split('.')
            .all(|l| !l.is_empty() && l.bytes().all(|b| b.is_ascii_hexdigit() || b == b'x'))
        && host.bytes().next().is_some_and(|b| b.is_ascii_digit())
    {
        return Err(format!("{host:?} is a numeric host in a non-standard form"));
    }
    Ok(host)
}

/// What makes an address special (not a public unicast one), or `None`.
pub fn special(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => special_v4(v4),
        IpAddr::V6(v6) => special_v6(v6),
    }
}

fn special_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, _] = ip.octets();
    Some(match (a, b, c) {
        (0, _, _) => "unspecified (0.0.0.0/8)",
        (10, _, _) => "private (10.0.0.0/8)",
        (100, 64..=127, _) => "carrier-grade NAT (100.64.0.0/10)",
        (127, _, _) => "loopback (127.0.0.0/8)",
        (169, 254, _) => "link-local (169.254.0.0/16, incl. cloud metadata)",
        (172, 16..=31, _) => "private (172.16.0.0/12)",
        (192, 0, 0) => "IETF protocol assignments (192.0.0.0/24)",
        (192, 0, 2) | (198, 51, 100) | (203, 0, 113) => "documentation",
        (192, 88, 99) => "6to4 relay anycast (192.88.99.0/24)",
        (192, 168, _) => "private (192.168.0.0/16)",
        (198, 18..=19, _) => "benchmarking (198.18.0.0/15)",
        (224..=239, _, _) => "multicast (224.0.0.0/4)",
        (240..=255, _, _) => "reserved or broadcast (240.0.0.0/4)",
        _ => return None,
    })
}

fn special_v6(ip: Ipv6Addr) -> Option<&'static str> {
    let s = ip.segments();
    let embedded_v4 =
        |hi: u16, lo: u16| Ipv4Addr::new((hi >> 8) as u8, hi as u8, (lo >> 8) as u8, lo as u8);
    if ip.is_unspecified() {
        return Some("unspecified (::)");
    }
    if ip.is_loopback() {
        return Some("loopback (::1)");
    }
    // IPv4-mapped (::ffff:a.b.c.d) and IPv4-compatible (::a.b.c.d): the IPv4 address decides.
    if s[..5] == [0, 0, 0, 0, 0] && (s[5] == 0xffff || s[5] == 0) {
        if s[5] == 0 {
            return Some("IPv4-compatible (::/96, deprecated)");
        }
        return special_v4(embedded_v4(s[6], s[7])).map(|_| "IPv4-mapped special address");
    }
    // NAT64 (64:ff9b::/96) carries an IPv4 address too.
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return special_v4(embedded_v4(s[6], s[7])).map(|_| "NAT64 of a special IPv4 address");
    }
    if s[0] == 0x64 && s[1] == 0xff9b && s[2] == 1 {
        return Some("local-use NAT64 (64:ff9b:1::/48)");
    }
    if s[0] == 0x2002 {
        return special_v4(embedded_v4(s[1], s[2])).map(|_| "6to4 of a special IPv4 address");
    }
    Some(match s[0] {
        0x0100 if s[1..4] == [0, 0, 0] => "discard-only (100::/64)",
        0x2001 if s[1] < 0x0200 => "IETF protocol assignments (2001::/23, incl. Teredo)",
        0x2001 if s[1] == 0x0db8 => "documentation (2001:db8::/32)",
        0x3fff if s[1] < 0x1000 => "documentation (3fff::/20)",
        x if x & 0xfe00 == 0xfc00 => "unique local (fc00::/7)",
        x if x & 0xffc0 == 0xfe80 => "link-local (fe80::/10)",
        x if x & 0xffc0 == 0xfec0 => "site-local (fec0::/10)",
        x if x & 0xff00 == 0xff00 => "multicast (ff00::/8)",
        _ => return None,
    })
}

/// Whether `ip` lies in `net/len` (an IPv4 network holds IPv4-mapped forms of its members).
fn contains(net: IpAddr, len: u8, ip: IpAddr) -> bool {
    let ip = match (net, ip) {
        (IpAddr::V4(_), IpAddr::V6(v6)) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => return false,
        },
        _ => ip,
    };
    match (net, ip) {
        (IpAddr::V4(n), IpAddr::V4(i)) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
            u32::from(n) & mask == u32::from(i) & mask
        }
        (IpAddr::V6(n), IpAddr::V6(i)) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
            u128::from(n) & mask == u128::from(i) & mask
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(ip: &str) -> bool {
        special(ip.parse().unwrap()).is_some()
    }

    #[test]
    fn every_special_range_is_refused() {
        for ip in [
            "0.0.0.0",
            "0.1.2.3",
            "10.0.0.1",
            "100.64.0.1",
            "100.127.255.254",
            "127.0.0.1",
            "127.255.255.255",
            "169.254.169.254",
            "172.16.0.1",
            "172.31.255.255",
            "192.0.0.8",
            "192.0.2.1",
            "192.88.99.1",
            "192.168.1.1",
            "198.18.0.1",
            "198.51.100.7",
            "203.0.113.9",
            "224.0.0.1",
            "239.255.255.250",
            "240.0.0.1",
            "255.255.255.255",
            "::",
            "::1",
            "::ffff:127.0.0.1",
            "::ffff:10.1.2.3",
            "::ffff:169.254.169.254",
            "::127.0.0.1",
            "64:ff9b::7f00:1",
            "64:ff9b:1::1",
            "2002:7f00:1::1",
            "2002:a00:1::",
            "100::1",
            "2001::1",
            "2001:db8::1",
            "3fff::1",
            "fc00::1",
            "fd12:3456::1",
            "fe80::1",
            "febf::1",
            "fec0::1",
            "ff02::1",
        ] {
            assert!(refused(ip), "{ip} must be refused");
        }
        for ip in [
            "1.1.1.1",
            "8.8.8.8",
            "100.63.255.255",
            "100.128.0.0",
            "172.15.255.255",
            "172.32.0.0",
            "192.169.0.1",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
            "2002:808:808::1",
            "2001:4860::8888",
        ] {
            assert!(!refused(ip), "{ip} is public");
        }
    }

    #[test]
    fn urls_are_checked_for_form() {
        let t = parse("https://Hooks.Example.com./a?b=1#frag").unwrap();
        assert_eq!(
            (t.host.as_str(), t.port, t.https),
            ("hooks.example.com", 443, true)
        );
        assert_eq!(t.url, "https://Hooks.Example.com./a?b=1");
        assert_eq!(
            t.shown, "https://Hooks.Example.com./a?...",
            "no query in logs"
        );
        let t = parse("http://[::1]:8080/x").unwrap();
        assert_eq!((t.host.as_str(), t.port), ("::1", 8080));
        for bad in [
            "ftp://x/",
            "//x/",
            "x",
            "https://user:pw@example.com/",
            "https://example.com@evil.test/",
            "https:///path",
            "https://x:0/",
            "https://x:99999/",
            "https://[::1/",
            "https://ex ample.com/",
            "https://exa\nmple.com/",
            "http://2130706433/",
            "http://0x7f.1/",
            "http://127.1/",
            "http://0177.0.0.1/",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} must be refused");
        }
    }

    #[test]
    fn http_and_literals_are_refused_at_once_unless_allowed() {
        let strict = Guard::new(PushSettings::default());
        assert!(strict.check_url("http://example.com/").is_err());
        assert!(strict.check_url("https://127.0.0.1/").is_err());
        assert!(strict.check_url("https://[::ffff:127.0.0.1]/").is_err());
        assert!(strict.check_url("https://localhost:8443/").is_err());
        assert!(strict.check_url("https://example.com/").is_ok());
        let open = Guard::new(PushSettings {
            allow_http: true,
            allow_hosts: vec!["localhost".into()],
            allow_nets: vec![("127.0.0.0".parse().unwrap(), 8)],
        });
        assert!(open.check_url("http://127.0.0.1:9/").is_ok());
        assert!(open.check_url("http://[::ffff:127.0.0.1]:9/").is_ok());
        assert!(open.check_url("http://localhost:9/").is_ok());
        assert!(open.check_url("http://10.0.0.1/").is_err());
        assert!(
            open.check_url("http://[::1]/").is_err(),
            "an IPv4 net holds no IPv6 loopback"
        );
    }

    #[test]
    fn a_name_is_checked_on_the_addresses_it_resolves_to() {
        let strict = Guard::new(PushSettings {
            allow_http: true,
            ..PushSettings::default()
        });
        let t = strict.check_url("http://localhost.:1/").map(|_| ());
        assert!(t.is_err());
        // A name that passes the form check but resolves to loopback is refused at delivery.
        let target = Target {
            url: "http://loopback.test/".into(),
            shown: "http://loopback.test/".into(),
            https: false,
            host: "127.0.0.1".into(),
            port: 1,
        };
        let e = strict.resolve(&target).unwrap_err();
        assert!(e.to_string().contains("loopback"), "{e}");
    }
}
