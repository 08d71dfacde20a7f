//! The settings of who may call: the controller's own bearer token (or its file), OIDC, and
//! the check a bearer token must pass wherever it comes from (the callers file too).

use std::net::IpAddr;
use std::path::PathBuf;

use super::error::Error;
use super::raw::Raw;
use super::types::{OidcSettings, MIN_AUTH_TOKEN_LEN};
use super::values::{http_url, invalid};
use crate::secret_file::read_secret_file;
use crate::time::parse_duration;

impl Raw {
    /// `A2A_OIDC_ISSUER` and `A2A_OIDC_AUDIENCE` (both, or neither), `A2A_OIDC_SCOPE_CLAIM`.
    pub(super) fn oidc(&self) -> Result<Option<OidcSettings>, Error> {
        let Some(issuer) = self.optional("A2A_OIDC_ISSUER") else {
            if self.optional("A2A_OIDC_AUDIENCE").is_some() {
                return Err(Error::Missing {
                    name: "A2A_OIDC_ISSUER",
                    why: " (A2A_OIDC_AUDIENCE is set)",
                });
            }
            return Ok(None);
        };
        let url = http_url("A2A_OIDC_ISSUER", &issuer)?;
        let authority = url
            .split("://")
            .nth(1)
            .and_then(|r| r.split('/').next())
            .unwrap_or("");
        let host = match authority.strip_prefix('[') {
            Some(v6) => v6.split(']').next().unwrap_or(""),
            None => authority.split(':').next().unwrap_or(""),
        };
        let loopback =
            host == "localhost" || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback());
        if !url.starts_with("https://") && !loopback {
            return Err(invalid(
                "A2A_OIDC_ISSUER",
                format!("{issuer:?} must be https:// (http only on a loopback host): its keys decide who is let in"),
            ));
        }
        let audience = self.required("A2A_OIDC_AUDIENCE", " (A2A_OIDC_ISSUER is set)")?;
        let scope_claim = self.get("A2A_OIDC_SCOPE_CLAIM");
        if scope_claim.is_empty() {
            return Err(invalid("A2A_OIDC_SCOPE_CLAIM", "must name a claim".into()));
        }
        let ca_file = self.optional("A2A_OIDC_CA_FILE").map(PathBuf::from);
        if ca_file.is_some() && !url.starts_with("https://") {
            return Err(invalid(
                "A2A_OIDC_CA_FILE",
                format!("is for an https issuer; A2A_OIDC_ISSUER {issuer:?} is not"),
            ));
        }
        let refresh = self.get("A2A_OIDC_JWKS_REFRESH");
        let jwks_refresh = Some(parse_duration(&refresh).ok_or_else(|| {
            invalid(
                "A2A_OIDC_JWKS_REFRESH",
                format!(
                    "{refresh:?} is not a duration (such as 5m or 30s; 0 = only for unseen kids)"
                ),
            )
        })?);
        Ok(Some(OidcSettings {
            issuer,
            audience,
            scope_claim,
            ca_file,
            jwks_refresh,
        }))
    }

    /// `A2A_AUTH_TOKEN` or `A2A_AUTH_TOKEN_FILE`, at most one; the token and the file. Neither
    /// is only allowed when `others` (callers or OIDC) authenticate.
    /// The token is secret: its value never appears in an error.
    pub(super) fn auth_token(
        &self,
        warnings: &mut Vec<String>,
        others: bool,
    ) -> Result<(Option<String>, Option<PathBuf>), Error> {
        let file = self.optional_path("A2A_AUTH_TOKEN_FILE")?;
        match (self.optional("A2A_AUTH_TOKEN"), file) {
            (Some(_), Some(_)) => Err(invalid(
                "A2A_AUTH_TOKEN_FILE",
                "A2A_AUTH_TOKEN is set too: set one of them".into(),
            )),
            (Some(token), None) => {
                check_auth_token(&token).map_err(|why| invalid("A2A_AUTH_TOKEN", why))?;
                Ok((Some(token), None))
            }
            (None, Some(path)) => {
                let (token, warning) =
                    read_secret_file(&path).map_err(|why| invalid("A2A_AUTH_TOKEN_FILE", why))?;
                warnings.extend(warning);
                check_auth_token(&token).map_err(|why| {
                    invalid("A2A_AUTH_TOKEN_FILE", format!("{}: {why}", path.display()))
                })?;
                Ok((Some(token), Some(path)))
            }
            (None, None) if others => Ok((None, None)),
            (None, None) => Err(Error::Missing {
                name: "A2A_AUTH_TOKEN",
                why: " (or A2A_AUTH_TOKEN_FILE, A2A_CALLERS_FILE, A2A_OIDC_ISSUER)",
            }),
        }
    }
}

/// Whether `token` can be the controller's bearer token; why not, without quoting it.
pub fn check_auth_token(token: &str) -> Result<(), String> {
    let chars = token.chars().count();
    if chars < MIN_AUTH_TOKEN_LEN {
        return Err(format!(
            "it has {chars} characters; at least {MIN_AUTH_TOKEN_LEN} are required"
        ));
    }
    if token.bytes().any(|b| !(0x21..=0x7e).contains(&b)) {
        return Err(
            "it must be printable ASCII without spaces (it travels in an HTTP header)".into(),
        );
    }
    Ok(())
}
