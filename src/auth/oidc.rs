//! OIDC access tokens: `A2A_OIDC_ISSUER`'s discovery document read once at startup (an issuer
//! that cannot be reached stops startup), its JWKS cached, fetched again for a `kid` it does
//! not hold (at most once a minute) and every `A2A_OIDC_JWKS_REFRESH` (so a key the issuer
//! dropped stops verifying); while the issuer is down, the cached keys serve.
//! The discovery and JWKS URLs must be on the issuer's exact origin. The caller is the
//! token's `sub`, in the scope its `A2A_OIDC_SCOPE_CLAIM` claim names.

use std::sync::{Mutex, RwLock};
use std::time::{Duration, Instant};

use super::jwt::{self, Expect, KeySet};
use crate::control::Caller;
use crate::settings::OidcSettings;

/// The least time between two JWKS fetches for unseen `kid`s.
pub const REFETCH_INTERVAL: Duration = Duration::from_secs(60);
/// The largest discovery document or JWKS read.
const MAX_DOCUMENT: u64 = 1 << 20;

/// The issuer's JWKS as last fetched, and how to fetch it again (shared with the thread that
/// refreshes it every `A2A_OIDC_JWKS_REFRESH`, so a key the issuer dropped stops verifying).
struct Jwks {
    uri: String,
    agent: ureq::Agent,
    keys: RwLock<KeySet>,
    /// The last fetch failed (said once, and again when one works).
    failing: std::sync::atomic::AtomicBool,
}

impl Jwks {
    /// Fetches the JWKS again (`why`: for the log); true if new keys were taken. A failure,
    /// or a JWKS with no usable key, leaves the cached keys serving.
    fn refresh(&self, why: &str) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        match fetch(&self.agent, &self.uri).and_then(|b| jwt::key_set(&b)) {
            Ok(keys) if !keys.keys.is_empty() => {
                if self.failing.swap(false, Relaxed) {
                    log::info!("OIDC JWKS {} answers again", self.uri);
                }
                log::info!(
                    "OIDC JWKS {} fetched again ({why}): {} keys",
                    self.uri,
                    keys.keys.len()
                );
                *self.keys.write().unwrap_or_else(|p| p.into_inner()) = keys;
                true
            }
            Ok(_) => {
                log::warn!(
                    "OIDC JWKS {} now holds no usable key; the cached keys stay",
                    self.uri
                );
                false
            }
            Err(e) => {
                if !self.failing.swap(true, Relaxed) {
                    let held = self
                        .keys
                        .read()
                        .unwrap_or_else(|p| p.into_inner())
                        .keys
                        .len();
                    log::warn!(
                        "OIDC JWKS could not be fetched again ({e}); the {held} cached keys serve on (said once, until it answers)"
                    );
                }
                false
            }
        }
    }
}

pub struct Verifier {
    settings: OidcSettings,
    jwks: std::sync::Arc<Jwks>,
    /// When the JWKS was last fetched for an unseen kid (`None`: not since startup).
    last_refetch: Mutex<Option<Instant>>,
    /// When each kind of refusal was last logged, and how many went unsaid since.
    refusals: Mutex<std::collections::HashMap<&'static str, (Option<Instant>, u64)>>,
}

/// The HTTP client for the issuer: its CA (`A2A_OIDC_CA_FILE`, else the public roots), short
/// timeouts, no redirects.
fn agent(settings: &OidcSettings) -> Result<ureq::Agent, String> {
    let roots = crate::pem::roots("A2A_OIDC_CA_FILE", settings.ca_file.as_deref())?;
    let tls = ureq::tls::TlsConfig::builder().root_certs(roots).build();
    Ok(ureq::Agent::config_builder()
        .tls_config(tls)
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(10)))
        .timeout_connect(Some(Duration::from_secs(5)))
        .max_redirects(0)
        .user_agent(concat!("a2a-worker-controller/", env!("CARGO_PKG_VERSION")))
        .build()
        .new_agent())
}

/// Refreshes the JWKS every `every`, for as long as the verifier holds it.
fn refresh_every(jwks: &std::sync::Arc<Jwks>, every: Duration) {
    // Ends with the verifier: it holds the JWKS only weakly between refreshes.
    let held = std::sync::Arc::downgrade(jwks);
    let refresh = move || loop {
        std::thread::sleep(every);
        match held.upgrade() {
            Some(jwks) => {
                jwks.refresh("its refresh interval");
            }
            None => return,
        }
    };
    if let Err(e) = std::thread::Builder::new()
        .name("oidc-jwks".into())
        .spawn(refresh)
    {
        log::warn!("the OIDC JWKS will not be refreshed on its own (only for unseen kids): {e}");
    }
}

/// The least time between two log lines for the same kind of refused token.
const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(10);

impl Verifier {
    /// Discovery and the first JWKS: any failure is one line, and stops startup.
    pub fn discover(settings: &OidcSettings) -> Result<Verifier, String> {
        let agent = agent(settings)?;
        let issuer = settings.issuer.trim_end_matches('/');
        let discovery = format!("{issuer}/.well-known/openid-configuration");
        let doc = fetch(&agent, &discovery)?;
        let doc: serde_json::Value = serde_json::from_slice(&doc)
            .map_err(|e| format!("the OIDC discovery document {discovery} is not JSON: {e}"))?;
        if doc.get("issuer").and_then(|v| v.as_str()) != Some(settings.issuer.as_str()) {
            return Err(format!(
                "the OIDC discovery document {discovery} names another issuer than A2A_OIDC_ISSUER {}",
                settings.issuer
            ));
        }
        let jwks_uri = doc
            .get("jwks_uri")
            .and_then(|v| v.as_str())
            .ok_or_else(|| format!("the OIDC discovery document {discovery} has no jwks_uri"))?
            .to_string();
        if origin(&jwks_uri) != origin(&settings.issuer) || origin(&jwks_uri).is_none() {
            return Err(format!(
                "the OIDC jwks_uri {jwks_uri} is not on the issuer's origin ({}): refused",
                settings.issuer
            ));
        }
        let keys = jwt::key_set(&fetch(&agent, &jwks_uri)?)?;
        if keys.keys.is_empty() {
            return Err(format!(
                "the OIDC JWKS {jwks_uri} holds no signing key with a kid of a type this controller verifies (RSA, EC P-256, Ed25519)"
            ));
        }
        let jwks = std::sync::Arc::new(Jwks {
            uri: jwks_uri,
            agent,
            keys: RwLock::new(keys),
            failing: std::sync::atomic::AtomicBool::new(false),
        });
        if let Some(every) = settings.jwks_refresh.filter(|d| !d.is_zero()) {
            refresh_every(&jwks, every);
        }
        Ok(Verifier {
            settings: settings.clone(),
            jwks,
            last_refetch: Mutex::new(None),
            refusals: Mutex::default(),
        })
    }

    pub fn key_count(&self) -> usize {
        self.jwks
            .keys
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .keys
            .len()
    }

    pub fn jwks_uri(&self) -> &str {
        &self.jwks.uri
    }

    /// What the issuer's https certificate is checked against, for the startup log.
    pub fn roots(&self) -> String {
        match &self.settings.ca_file {
            Some(path) => format!("the CA in A2A_OIDC_CA_FILE {}", path.display()),
            None if self.settings.issuer.starts_with("https://") => {
                "the bundled public roots (webpki-roots)".into()
            }
            None => "no TLS (a loopback http issuer)".into(),
        }
    }

    /// The caller a token proves, or why not (logged here, at most once per
    /// [`REFUSAL_LOG_INTERVAL`] for each kind of refusal; the request hears only 401).
    pub fn verify(&self, token: &str, now: u64) -> Result<Caller, jwt::Refusal> {
        let verified = self.verify_quietly(token, now);
        if let Err(why) = &verified {
            self.said(why);
        }
        verified
    }

    fn said(&self, why: &jwt::Refusal) {
        let mut said = self.refusals.lock().unwrap_or_else(|p| p.into_inner());
        let entry = said.entry(why.kind()).or_insert((None, 0));
        if entry.0.is_some_and(|t| t.elapsed() < REFUSAL_LOG_INTERVAL) {
            entry.1 += 1;
            return;
        }
        let unsaid = std::mem::take(&mut entry.1);
        entry.0 = Some(Instant::now());
        drop(said);
        if unsaid > 0 {
            log::info!(
                "an OIDC access token was refused (401): {why} (and {unsaid} more refused so since the last such line)"
            );
        } else {
            log::info!("an OIDC access token was refused (401): {why}");
        }
    }

    fn verify_quietly(&self, token: &str, now: u64) -> Result<Caller, jwt::Refusal> {
        let expect = Expect {
            issuer: &self.settings.issuer,
            audience: &self.settings.audience,
            scope_claim: &self.settings.scope_claim,
            now,
        };
        let first = {
            let keys = self.jwks.keys.read().unwrap_or_else(|p| p.into_inner());
            jwt::verify(token, &keys, &expect)
        };
        let claims = match first {
            Err(jwt::Refusal::UnknownKey) if self.refetch_for(token) => {
                let keys = self.jwks.keys.read().unwrap_or_else(|p| p.into_inner());
                jwt::verify(token, &keys, &expect)?
            }
            other => other?,
        };
        Ok(Caller::oidc(&claims.subject, &claims.scope))
    }

    /// Fetches the JWKS again for a token naming a `kid` not held, at most once per
    /// [`REFETCH_INTERVAL`]; true if new keys were taken.
    fn refetch_for(&self, token: &str) -> bool {
        if !matches!(jwt::kid_of(token), Ok(Some(_))) {
            return false;
        }
        {
            let mut last = self.last_refetch.lock().unwrap_or_else(|p| p.into_inner());
            if last.is_some_and(|t| t.elapsed() < REFETCH_INTERVAL) {
                return false;
            }
            *last = Some(Instant::now());
        }
        self.jwks.refresh("a token named an unseen kid")
    }
}

fn fetch(agent: &ureq::Agent, url: &str) -> Result<Vec<u8>, String> {
    let mut response = agent
        .get(url)
        .header("Accept", "application/json")
        .call()
        .map_err(|e| format!("{url}: {e}"))?;
    let status = response.status().as_u16();
    if status != 200 {
        return Err(format!("{url} answered HTTP {status}"));
    }
    response
        .body_mut()
        .with_config()
        .limit(MAX_DOCUMENT)
        .read_to_vec()
        .map_err(|e| format!("{url}: {e}"))
}

/// `scheme://host[:port]` of an http(s) URL, lower-cased, with the default port made explicit.
pub fn origin(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let scheme = scheme.to_ascii_lowercase();
    let default = match scheme.as_str() {
        "https" => 443,
        "http" => 80,
        _ => return None,
    };
    let authority = rest.split(['/', '?', '#']).next()?;
    if authority.is_empty() || authority.contains('@') {
        return None;
    }
    let authority = authority.to_ascii_lowercase();
    let (host, port): (&str, u16) = match authority.find(']') {
        Some(end) => match &authority[end + 1..] {
            "" => (&authority[..=end], default),
            p => (&authority[..=end], p.strip_prefix(':')?.parse().ok()?),
        },
        None => match authority.rsplit_once(':') {
            Some((h, p)) => (h, p.parse().ok()?),
            None => (&authority, default),
        },
    };
    Some(format!("{scheme}://{host}:{port}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_issuers_origin_is_lowercase_with_its_port_always_said() {
        assert_eq!(
            origin("https://Id.Example/x").as_deref(),
            Some("https://id.example:443")
        );
        assert_eq!(
            origin("https://id.example:443/k"),
            origin("https://id.example")
        );
        assert_ne!(
            origin("https://id.example:8443/k"),
            origin("https://id.example")
        );
        assert_ne!(origin("http://id.example/k"), origin("https://id.example"));
        assert_ne!(
            origin("https://id.example.evil/k"),
            origin("https://id.example")
        );
        assert_eq!(origin("https://u@id.example/"), None);
        assert_eq!(origin("ftp://id.example/"), None);
        assert_eq!(
            origin("http://127.0.0.1:9/x").as_deref(),
            Some("http://127.0.0.1:9")
        );
    }
}
