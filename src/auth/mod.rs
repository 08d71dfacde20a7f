//! Bearer authentication around the protocol layer: checked before any JSON-RPC parsing,
//! compared in constant time, and credentials removed before the protocol sees the headers.
//! A request's token is one of (tried in this order): the admin caller's (`A2A_AUTH_TOKEN` or
//! its file, below), a caller of `A2A_CALLERS_FILE` ([`callers`]), or a signed OIDC access
//! token ([`oidc`], [`jwt`]). The [`Authenticator`] answers which [`Caller`] it is; an
//! unknown token is 401 with no hint which callers exist.

pub mod callers;
pub mod jwt;
pub mod limits;
pub mod oidc;
pub mod turns;

use std::path::PathBuf;
use std::sync::RwLock;
use std::time::Duration;

use serde_json::json;

use crate::control::Caller;
use crate::http::Response;
use crate::secret_file::read_secret_file;
use crate::settings::{check_auth_token, Settings, Watched};
use crate::time::now_millis;
use crate::token::constant_time_eq;

/// The tokens callers may present: one, or — from `A2A_AUTH_TOKEN_FILE` — the file's current
/// token plus, for a bounded overlap after the file changed, the previous one. A rotation
/// needs no restart: the file is looked at (at most once a second, on requests) and re-read
/// when its size, modification time or inode changed. A file that now holds no valid token
/// (half-written, emptied) changes nothing and is said once in the log.
pub struct Credentials {
    file: Option<Watched>,
    overlap: Duration,
    state: RwLock<State>,
}

struct State {
    current: String,
    /// The token before the last rotation, and until when (Unix ms) it is accepted.
    previous: Option<(String, u64)>,
}

impl Credentials {
    /// One token, fixed for the process's lifetime.
    pub fn fixed(token: String) -> Credentials {
        Credentials {
            file: None,
            overlap: Duration::ZERO,
            state: RwLock::new(State {
                current: token,
                previous: None,
            }),
        }
    }

    /// `token` as read from `file` at startup; the file is watched from now on.
    pub fn from_file(token: String, file: PathBuf, overlap: Duration) -> Credentials {
        Credentials {
            file: Some(Watched::new(file)),
            overlap,
            state: RwLock::new(State {
                current: token,
                previous: None,
            }),
        }
    }

    /// Whether `presented` is a token accepted now.
    fn matches(&self, presented: &str) -> bool {
        self.refresh();
        let state = self.state.read().unwrap_or_else(|p| p.into_inner());
        let current = constant_time_eq(presented.as_bytes(), state.current.as_bytes());
        let previous = state.previous.as_ref().is_some_and(|(token, until)| {
            now_millis() < *until && constant_time_eq(presented.as_bytes(), token.as_bytes())
        });
        current || previous
    }

    /// Re-reads the file if it changed since it was last read (at most once a second).
    fn refresh(&self) {
        let Some(watched) = &self.file else { return };
        if !watched.changed() {
            return;
        }
        let (file, now) = (&watched.path, now_millis());
        let read = read_secret_file(file).and_then(|(token, warning)| {
            check_auth_token(&token)?;
            Ok((token, warning))
        });
        let mut state = self.state.write().unwrap_or_else(|p| p.into_inner());
        match read {
            Ok((token, warning)) => {
                if let Some(w) = warning {
                    log::warn!("A2A_AUTH_TOKEN_FILE {w}");
                }
                if token != state.current {
                    let old = std::mem::replace(&mut state.current, token);
                    let until = now + self.overlap.as_millis() as u64;
                    state.previous = (!self.overlap.is_zero()).then_some((old, until));
                    log::info!(
                        "A2A_AUTH_TOKEN_FILE {} changed: the new token is in use; the previous one is accepted for {} s more",
                        file.display(),
                        self.overlap.as_secs()
                    );
                }
            }
            Err(why) => log::warn!(
                "A2A_AUTH_TOKEN_FILE changed but holds no usable token ({why}); the current token stays in use"
            ),
        }
    }
}

/// The longest bearer token looked at (a JWT with many claims is a few KiB); longer ones are
/// refused before any work.
pub const MAX_TOKEN_BYTES: usize = 8 << 10;

/// Who a request's token says it is: the admin token, the callers file, OIDC — whichever
/// the settings give.
pub struct Authenticator {
    admin: Option<Credentials>,
    callers: Option<callers::CallersFile>,
    oidc: Option<oidc::Verifier>,
}

impl Authenticator {
    /// Everything the settings name, read and checked now: a malformed callers file or an
    /// issuer that cannot be reached is one line, and stops startup. Also returns warnings
    /// for the log (files others may read).
    pub fn new(settings: &Settings) -> Result<(Authenticator, Vec<String>), String> {
        let admin = settings
            .auth_token
            .clone()
            .map(|token| match &settings.auth_token_file {
                Some(file) => {
                    Credentials::from_file(token, file.clone(), settings.auth_token_overlap)
                }
                None => Credentials::fixed(token),
            });
        let mut warnings = Vec::new();
        let callers = match &settings.callers_file {
            Some(path) => {
                // With the admin token set, its caller is `admin`: no file caller may take it.
                let reserved = if admin.is_some() {
                    vec!["admin"]
                } else {
                    Vec::new()
                };
                let (file, w) = callers::CallersFile::open(path.clone(), reserved)
                    .map_err(|why| format!("A2A_CALLERS_FILE: {why}"))?;
                warnings.extend(w);
                Some(file)
            }
            None => None,
        };
        let oidc = match &settings.oidc {
            Some(o) => {
                Some(oidc::Verifier::discover(o).map_err(|why| format!("A2A_OIDC_ISSUER: {why}"))?)
            }
            None => None,
        };
        Ok((
            Authenticator {
                admin,
                callers,
                oidc,
            },
            warnings,
        ))
    }

    /// One line per source, for `check` and the startup log: what authenticates callers.
    pub fn describe(&self) -> Vec<String> {
        let mut lines = Vec::new();
        if self.admin.is_some() {
            lines.push("admin token (caller admin, every scope)".to_string());
        }
        if let Some(c) = &self.callers {
            lines.push(format!("callers file: {} callers", c.count()));
        }
        if let Some(o) = &self.oidc {
            lines.push(format!(
                "OIDC: {} keys from {}, its certificate checked against {}",
                o.key_count(),
                o.jwks_uri(),
                o.roots()
            ));
        }
        lines
    }

    /// The caller an `Authorization` header proves.
    pub fn check(&self, authorization: Option<&str>) -> Result<Caller, Failure> {
        let token = presented(authorization)?;
        if token.is_empty() || token.len() > MAX_TOKEN_BYTES {
            return Err(Failure::WrongToken);
        }
        if self.admin.as_ref().is_some_and(|a| a.matches(token)) {
            return Ok(Caller::admin());
        }
        if let Some(caller) = self.callers.as_ref().and_then(|c| c.find(token)) {
            return Ok(caller);
        }
        if let Some(oidc) = &self.oidc {
            // Only what looks like a JWT is parsed at all.
            if token.bytes().filter(|b| *b == b'.').count() == 2 {
                // A refusal is logged, with its reason, by the verifier.
                if let Ok(caller) = oidc.verify(token, now_millis() / 1000) {
                    return Ok(caller);
                }
            }
        }
        Err(Failure::WrongToken)
    }
}

/// The token in an `Authorization: Bearer <token>` header.
pub(crate) fn presented(authorization: Option<&str>) -> Result<&str, Failure> {
    let value = authorization.ok_or(Failure::Missing)?.trim();
    let (scheme, token) = value.split_once(' ').unwrap_or((value, ""));
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(Failure::WrongScheme);
    }
    Ok(token.trim())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    Missing,
    WrongScheme,
    WrongToken,
}

impl Failure {
    pub fn message(self) -> &'static str {
        match self {
            Failure::Missing => "missing Authorization header: send Authorization: Bearer <token>",
            Failure::WrongScheme => "the Authorization scheme must be Bearer",
            Failure::WrongToken => "the bearer token is not valid",
        }
    }

    /// The `WWW-Authenticate` challenge (RFC 6750 section 3).
    pub fn challenge(self) -> &'static str {
        match self {
            Failure::Missing | Failure::WrongScheme => "Bearer realm=\"a2a-worker-controller\"",
            Failure::WrongToken => {
                "Bearer realm=\"a2a-worker-controller\", error=\"invalid_token\""
            }
        }
    }
}

impl Failure {
    /// The 401 answer: the challenge in `WWW-Authenticate` and a small JSON body.
    pub fn response(self) -> Response {
        Response::json(
            401,
            &json!({"error": "unauthorized", "message": self.message()}),
        )
        .with_header("WWW-Authenticate", self.challenge())
    }
}

/// Checks an `Authorization` header against one expected token.
pub fn check(authorization: Option<&str>, expected: &str) -> Result<(), Failure> {
    if constant_time_eq(presented(authorization)?.as_bytes(), expected.as_bytes()) {
        Ok(())
    } else {
        Err(Failure::WrongToken)
    }
}

/// Headers that carry credentials; the protocol layer never sees them.
pub const CREDENTIAL_HEADERS: [&str; 3] = ["authorization", "cookie", "proxy-authorization"];

pub fn strip_credentials(headers: &[(String, String)]) -> Vec<(String, String)> {
    headers
        .iter()
        .filter(|(k, _)| !CREDENTIAL_HEADERS.iter().any(|c| k.eq_ignore_ascii_case(c)))
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: &str = "0123456789abcdef";

    #[test]
    fn only_a_bearer_token_of_the_right_value_passes_whatever_its_case_and_spacing() {
        assert_eq!(check(None, T), Err(Failure::Missing));
        assert_eq!(check(Some("Basic abc"), T), Err(Failure::WrongScheme));
        assert_eq!(check(Some(T), T), Err(Failure::WrongScheme));
        assert_eq!(check(Some("Bearer wrong"), T), Err(Failure::WrongToken));
        assert_eq!(check(Some("Bearer "), T), Err(Failure::WrongToken));
        assert_eq!(check(Some(&format!("Bearer {T}")), T), Ok(()));
        assert_eq!(check(Some(&format!("bearer  {T} ")), T), Ok(()));
    }

    #[test]
    fn refusals_are_401_with_a_challenge() {
        let r = Failure::WrongToken.response();
        assert_eq!(r.status, 401);
        assert!(r
            .headers
            .iter()
            .any(|(k, v)| k == "WWW-Authenticate" && v.contains("invalid_token")));
        assert!(String::from_utf8_lossy(&r.body).contains("not valid"));
    }

    #[test]
    fn credentials_are_stripped_from_what_the_service_is_handed() {
        let h = vec![
            ("Authorization".to_string(), "x".to_string()),
            ("COOKIE".to_string(), "y".to_string()),
            ("Proxy-Authorization".to_string(), "z".to_string()),
            ("A2A-Version".to_string(), "1.0".to_string()),
        ];
        assert_eq!(
            strip_credentials(&h),
            vec![("A2A-Version".to_string(), "1.0".to_string())]
        );
    }
}
