//! What a template lets its workers reach (`egress`), the routes on which the egress proxy
//! adds a secret header (`egress_routes`), and the key each worker's placeholder credential
//! is derived from. Read here once; the controller (what a worker is given) and the proxy
//! (what it lets through) both judge by these types, so they cannot disagree.
//!
//! ```json
//! "egress": "open" | "none" | ["api.github.com:443", "*.pypi.org:443", "10.0.0.0/8:5432"],
//! "egress_routes": {"github": {"url": "https://api.github.com", "header": "Authorization",
//!                              "prefix": "Bearer ", "file": "/run/secrets/gh"}}
//! ```

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;
use std::path::PathBuf;

use ring::hmac;
use serde::Deserialize;
use serde_json::Value;

use crate::token::{self, Token};

/// The route every fenced worker's model calls take (`ANTHROPIC_BASE_URL` points at it).
pub const MODEL_ROUTE: &str = "model";
/// The most rules one policy may hold, and routes one template may name.
const MAX_RULES: usize = 256;
const MAX_ROUTES: usize = 32;

/// What a template's workers may reach.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Egress {
    /// Anything (no proxy, no fence): today's behaviour and the default.
    #[default]
    Open,
    /// Only the proxy's routes (secrets added); no destination of its own.
    None,
    /// The proxy's routes and these destinations (HTTP CONNECT).
    Allow(Vec<Rule>),
}

impl Egress {
    /// Whether the worker is fenced: its only way out is the proxy.
    pub fn fenced(&self) -> bool {
        !matches!(self, Egress::Open)
    }

    /// The rule that lets a connection to `host` (as asked) at `ip` (where it resolved) on
    /// `port` through, if one does. A name's rule never lets it reach a loopback, link-local
    /// or unspecified address (a name that resolves there is a way in, not out): only a rule
    /// naming that address or its range does.
    pub fn allows(&self, host: &str, ip: IpAddr, port: u16) -> Option<&Rule> {
        let Egress::Allow(rules) = self else {
            return None;
        };
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        rules.iter().find(|r| {
            r.port == port
                && match &r.host {
                    Host::Name(n) => *n == host && !inward(ip),
                    Host::Suffix(s) => {
                        host.len() > s.len() + 1
                            && host.ends_with(s.as_str())
                            && host.as_bytes()[host.len() - s.len() - 1] == b'.'
                            && !inward(ip)
                    }
                    Host::Net(net, bits) => within(ip, *net, *bits),
                }
        })
    }

    /// As the templates file says it (`"open"`, `"none"`, or the rules).
    pub fn describe(&self) -> String {
        match self {
            Egress::Open => "open".into(),
            Egress::None => "none".into(),
            Egress::Allow(rules) => rules
                .iter()
                .map(Rule::to_string)
                .collect::<Vec<_>>()
                .join(", "),
        }
    }
}

/// Loopback, link-local (cloud metadata lives there) or unspecified.
fn inward(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback() || v4.is_link_local() || v4.is_unspecified(),
        IpAddr::V6(v6) => {
            v6.is_loopback() || v6.is_unspecified() || (v6.segments()[0] & 0xffc0) == 0xfe80
        }
    }
}

fn within(ip: IpAddr, net: IpAddr, bits: u8) -> bool {
    match (ip, net) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(bits)).unwrap_or(0);
            u32::from(a) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(bits)).unwrap_or(0);
            u128::from(a) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}

/// One allowed destination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub host: Host,
    pub port: u16,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Host {
    /// One name, lower case.
    Name(String),
    /// Any name below this one (`*.pypi.org`: `files.pypi.org`, not `pypi.org`).
    Suffix(String),
    /// An address or a range (`10.0.0.0/8`; a plain address is its /32 or /128).
    Net(IpAddr, u8),
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.host {
            Host::Name(n) => write!(f, "{n}:{}", self.port),
            Host::Suffix(s) => write!(f, "*.{s}:{}", self.port),
            Host::Net(IpAddr::V6(ip), bits) => write!(f, "[{ip}/{bits}]:{}", self.port),
            Host::Net(ip, bits) => write!(f, "{ip}/{bits}:{}", self.port),
        }
    }
}

impl Rule {
    /// `host:port`, `*.suffix:port`, `CIDR:port` (IPv6 in brackets: `[fd00::/8]:443`).
    pub fn parse(text: &str) -> Result<Rule, String> {
        let bad = |why: &str| format!("{text:?} {why}");
        let (host, port) = text
            .rsplit_once(':')
            .ok_or_else(|| bad("has no port (host:port, *.suffix:port or CIDR:port)"))?;
        let port: u16 = port
            .parse()
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| bad("does not end in a port 1-65535"))?;
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        let host = if let Some(suffix) = host.strip_prefix("*.") {
            check_name(suffix).map_err(|why| bad(&why))?;
            Host::Suffix(suffix.to_ascii_lowercase())
        } else if let Some((addr, bits)) = host.split_once('/') {
            let ip: IpAddr = addr.parse().map_err(|_| bad("is not an address range"))?;
            let max = if ip.is_ipv4() { 32 } else { 128 };
            let bits = bits
                .parse::<u8>()
                .ok()
                .filter(|b| *b <= max)
                .ok_or_else(|| bad("has a prefix length out of range"))?;
            Host::Net(ip, bits)
        } else if let Ok(ip) = host.parse::<IpAddr>() {
            Host::Net(ip, if ip.is_ipv4() { 32 } else { 128 })
        } else {
            check_name(host).map_err(|why| bad(&why))?;
            Host::Name(host.trim_end_matches('.').to_ascii_lowercase())
        };
        Ok(Rule { host, port })
    }
}

/// A DNS name: labels of letters, digits, `-` and `_`, at most 253 characters, with a dot.
fn check_name(name: &str) -> Result<(), String> {
    let name = name.trim_end_matches('.');
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    if name.len() > 253 || !name.split('.').all(label_ok) {
        return Err("is not a host name".into());
    }
    Ok(())
}

/// `egress` as the templates file gives it.
pub fn parse_egress(v: &Value) -> Result<Egress, String> {
    match v {
        Value::String(s) if s == "open" => Ok(Egress::Open),
        Value::String(s) if s == "none" => Ok(Egress::None),
        Value::Array(items) if items.len() <= MAX_RULES => items
            .iter()
            .map(|i| match i {
                Value::String(s) => Rule::parse(s),
                other => Err(format!("{other} is not a rule such as \"host:443\"")),
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Egress::Allow),
        Value::Array(_) => Err(format!("more than {MAX_RULES} rules")),
        other => Err(format!(
            "{other} is not \"open\", \"none\" or a list such as [\"api.github.com:443\"]"
        )),
    }
}

/// A destination the proxy calls on a worker's behalf, adding a header whose value is read
/// from a file (so the worker never holds it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Route {
    pub name: String,
    /// `https://host[:port][/base]` (or `http://` for a gateway on a trusted network).
    pub url: String,
    pub header: String,
    /// Put before the file's value (`"Bearer "`).
    pub prefix: String,
    pub file: PathBuf,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RouteEntry {
    url: String,
    header: String,
    #[serde(default)]
    prefix: String,
    file: PathBuf,
}

/// `egress_routes`: names of `[a-z0-9-]` (not [`MODEL_ROUTE`], which the settings make),
/// each an http(s) URL, a header name and the absolute path of an existing file.
pub fn parse_routes(v: &Value) -> Result<Vec<Route>, String> {
    let entries: BTreeMap<String, RouteEntry> =
        serde_json::from_value(v.clone()).map_err(|e| e.to_string())?;
    if entries.len() > MAX_ROUTES {
        return Err(format!("more than {MAX_ROUTES} routes"));
    }
    entries
        .into_iter()
        .map(|(name, e)| route(&name, e).map_err(|why| format!("{name:?}: {why}")))
        .collect()
}

fn route(name: &str, e: RouteEntry) -> Result<Route, String> {
    let name_ok = (1..=32).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if !name_ok {
        return Err("a route name is 1 to 32 of a-z, 0-9 and '-'".into());
    }
    if name == MODEL_ROUTE {
        return Err(format!(
            "{MODEL_ROUTE:?} is the model route, made from EGRESS_MODEL_URL: choose another name"
        ));
    }
    check_upstream(&e.url)?;
    let header_ok = !e.header.is_empty()
        && e.header.len() <= 64
        && e.header
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-');
    if !header_ok {
        return Err(format!("header {:?} is not a header name", e.header));
    }
    if e.prefix.bytes().any(|b| b.is_ascii_control()) || e.prefix.len() > 64 {
        return Err("prefix: at most 64 printable characters".into());
    }
    if !e.file.is_absolute() {
        return Err(format!("file {} is not an absolute path", e.file.display()));
    }
    std::fs::metadata(&e.file).map_err(|err| format!("file {}: {err}", e.file.display()))?;
    Ok(Route {
        name: name.to_string(),
        url: e.url.trim_end_matches('/').to_string(),
        header: e.header,
        prefix: e.prefix,
        file: e.file,
    })
}

/// An upstream: `http://` or `https://`, a host, no query, fragment or credentials.
pub fn check_upstream(url: &str) -> Result<(), String> {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))
        .ok_or_else(|| format!("url {url:?} is not an http:// or https:// URL"))?;
    let authority = rest.split('/').next().unwrap_or("");
    if authority.is_empty()
        || authority.contains('@')
        || url.contains(['?', '#'])
        || url.bytes().any(|b| b.is_ascii_control() || b == b' ')
    {
        return Err(format!(
            "url {url:?} must be scheme://host[:port][/path], without credentials, query or fragment"
        ));
    }
    Ok(())
}

/// What each worker's placeholder credential is derived from: every replica of the
/// controller and every replica of the proxy hold it, nothing per worker is stored.
#[derive(Clone)]
pub struct EgressKey(hmac::Key);

impl fmt::Debug for EgressKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("EgressKey(..)")
    }
}

/// A placeholder starts with this (so a log scrubber and a reader can tell one).
const PLACEHOLDER_PREFIX: &str = "a2a-egress-v1";

impl EgressKey {
    /// A key of `secret`'s bytes (`EGRESS_KEY_FILE`).
    pub fn new(secret: &[u8]) -> EgressKey {
        EgressKey(hmac::Key::new(hmac::HMAC_SHA256, secret))
    }

    /// A key derived from the admin token, which every replica of one controller id and
    /// the proxy beside them hold.
    pub fn derived_from(admin_token: &str) -> EgressKey {
        let outer = hmac::Key::new(hmac::HMAC_SHA256, admin_token.as_bytes());
        EgressKey::new(hmac::sign(&outer, b"a2a-worker-controller egress key").as_ref())
    }

    fn tag(&self, worker_id: &str) -> hmac::Tag {
        hmac::sign(&self.0, format!("a2a-egress\n{worker_id}").as_bytes())
    }

    /// Worker `worker_id`'s placeholder: useless anywhere but at the proxy, and there only
    /// for that worker while it runs.
    pub fn placeholder(&self, worker_id: &str) -> Token {
        let tag = self.tag(worker_id);
        Token::from_secret(format!(
            "{PLACEHOLDER_PREFIX}.{worker_id}.{}",
            token::hex(&tag.as_ref()[..20])
        ))
    }

    /// The worker a placeholder was made for, when this key made it (compared in constant
    /// time).
    pub fn worker_of<'a>(&self, placeholder: &'a str) -> Option<&'a str> {
        let rest = placeholder
            .strip_prefix(PLACEHOLDER_PREFIX)?
            .strip_prefix('.')?;
        let (worker_id, mac) = rest.rsplit_once('.')?;
        let ok_id = !worker_id.is_empty()
            && worker_id.len() <= 64
            && worker_id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-');
        if !ok_id || mac.len() != 40 {
            return None;
        }
        let want = token::hex(&self.tag(worker_id).as_ref()[..20]);
        token::constant_time_eq(want.as_bytes(), mac.as_bytes()).then_some(worker_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn rules_read_as_written_and_say_themselves_back() {
        for text in [
            "api.github.com:443",
            "*.pypi.org:443",
            "10.0.0.0/8:5432",
            "192.0.2.7/32:80",
            "[fd00::/8]:443",
        ] {
            assert_eq!(Rule::parse(text).unwrap().to_string(), text);
        }
        assert_eq!(
            Rule::parse("192.0.2.7:80").unwrap().host,
            Host::Net(ip("192.0.2.7"), 32)
        );
        for bad in [
            "github.com",
            "github.com:0",
            "github.com:https",
            "git hub.com:443",
            "10.0.0.0/33:1",
            "*.:443",
            ":443",
        ] {
            assert!(Rule::parse(bad).is_err(), "{bad} was read");
        }
    }

    #[test]
    fn a_policy_lets_through_only_what_a_rule_names() {
        let policy = parse_egress(&json!([
            "api.github.com:443",
            "*.pypi.org:443",
            "10.0.0.0/8:5432"
        ]))
        .unwrap();
        let public = ip("140.82.112.5");
        assert!(policy.allows("api.github.com", public, 443).is_some());
        assert!(policy.allows("API.GitHub.com.", public, 443).is_some());
        assert!(policy.allows("api.github.com", public, 80).is_none());
        assert!(policy.allows("files.pypi.org", public, 443).is_some());
        assert!(policy.allows("pypi.org", public, 443).is_none());
        assert!(policy.allows("evilpypi.org", public, 443).is_none());
        assert!(policy.allows("db", ip("10.1.2.3"), 5432).is_some());
        assert!(policy.allows("db", ip("11.1.2.3"), 5432).is_none());
        assert!(Egress::None.allows("api.github.com", public, 443).is_none());
    }

    #[test]
    fn a_name_never_reaches_loopback_or_metadata_addresses() {
        let policy = parse_egress(&json!(["api.github.com:443", "127.0.0.1:8788"])).unwrap();
        assert!(policy
            .allows("api.github.com", ip("169.254.169.254"), 443)
            .is_none());
        assert!(policy
            .allows("api.github.com", ip("127.0.0.1"), 443)
            .is_none());
        assert!(policy.allows("localhost", ip("127.0.0.1"), 8788).is_some());
    }

    #[test]
    fn a_policy_that_cannot_be_read_says_why() {
        assert!(parse_egress(&json!("closed"))
            .unwrap_err()
            .contains("is not \"open\""));
        assert!(parse_egress(&json!(["x.com"]))
            .unwrap_err()
            .contains("has no port"));
        assert!(parse_egress(&json!([443]))
            .unwrap_err()
            .contains("not a rule"));
    }

    #[test]
    fn routes_are_checked_field_by_field() {
        let file = std::env::temp_dir().join(format!("a2a-egress-route-{}", std::process::id()));
        std::fs::write(&file, "s3cret").unwrap();
        let f = file.to_str().unwrap();
        let ok = parse_routes(&json!({"gh": {"url": "https://api.github.com/", "header": "Authorization", "prefix": "Bearer ", "file": f}})).unwrap();
        assert_eq!(ok[0].url, "https://api.github.com");
        for (v, why) in [
            (
                json!({"model": {"url": "https://x.io", "header": "A", "file": f}}),
                "model route",
            ),
            (
                json!({"gh": {"url": "ftp://x.io", "header": "A", "file": f}}),
                "http",
            ),
            (
                json!({"gh": {"url": "https://u:p@x.io", "header": "A", "file": f}}),
                "credentials",
            ),
            (
                json!({"gh": {"url": "https://x.io", "header": "A B", "file": f}}),
                "header name",
            ),
            (
                json!({"gh": {"url": "https://x.io", "header": "A", "file": "/nonexistent/x"}}),
                "/nonexistent/x",
            ),
            (
                json!({"Gh": {"url": "https://x.io", "header": "A", "file": f}}),
                "route name",
            ),
        ] {
            let err = parse_routes(&v).unwrap_err();
            assert!(err.contains(why), "{err}");
        }
        std::fs::remove_file(file).unwrap();
    }

    #[test]
    fn a_placeholder_names_its_worker_and_only_this_key_makes_it() {
        let key = EgressKey::new(b"0123456789abcdef0123");
        let a = key.placeholder("a1b2c3d4e5f6");
        assert_eq!(key.worker_of(a.expose()), Some("a1b2c3d4e5f6"));
        let other = EgressKey::derived_from("another-admin-token-of-length");
        assert_eq!(other.worker_of(a.expose()), None);
        // Another worker's id with A's tag is refused.
        let forged = a.expose().replace("a1b2c3d4e5f6", "ffffffffffff");
        assert_eq!(key.worker_of(&forged), None);
        assert_eq!(key.worker_of("a2a-egress-v1.x"), None);
        assert_eq!(key.worker_of(""), None);
    }
}
