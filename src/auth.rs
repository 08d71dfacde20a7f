//! Bearer authentication around the protocol layer: checked before any JSON-RPC parsing,
//! compared in constant time, and credentials removed before the protocol sees the headers.

use serde_json::json;

use crate::http::Response;
use crate::token::constant_time_eq;

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

/// Checks an `Authorization` header against the expected token.
pub fn check(authorization: Option<&str>, expected: &str) -> Result<(), Failure> {
    let value = authorization.ok_or(Failure::Missing)?.trim();
    let (scheme, token) = value.split_once(' ').unwrap_or((value, ""));
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(Failure::WrongScheme);
    }
    if constant_time_eq(token.trim().as_bytes(), expected.as_bytes()) {
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
    fn bearer() {
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
    fn strips() {
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
