//! The raw reader: each setting's value as given by flag or environment (else its default),
//! read as the type it is, each refusal one line naming the setting; and the settings
//! assembled from them.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use super::egress::{check_upstream, EgressKey};
use super::error::Error;
use super::table::spec_of_name;
use super::template as templates;
use super::types::{EgressSettings, Fence, Lifetime, OnExpiry, PushSettings, Settings};
use super::values::{self, expand_home, http_url, invalid, parse_listen};
use crate::secret_file::read_secret_file;
use crate::time::parse_duration;

/// The values given, by setting name.
pub(super) struct Raw(pub(super) HashMap<&'static str, String>);

impl Raw {
    /// The value set by flag or environment, else the default; `""` means unset.
    pub(super) fn get(&self, name: &'static str) -> String {
        match self.0.get(name) {
            Some(v) if !v.trim().is_empty() => v.trim().to_string(),
            _ => spec_of_name(name)
                .map(|s| s.default.to_string())
                .unwrap_or_default(),
        }
    }

    pub(super) fn optional(&self, name: &'static str) -> Option<String> {
        Some(self.get(name)).filter(|v| !v.is_empty())
    }

    pub(super) fn required(&self, name: &'static str, why: &'static str) -> Result<String, Error> {
        self.optional(name).ok_or(Error::Missing { name, why })
    }

    pub(super) fn number<T: std::str::FromStr>(
        &self,
        name: &'static str,
        what: &str,
    ) -> Result<T, Error> {
        let v = self.get(name);
        v.parse()
            .map_err(|_| invalid(name, format!("{v:?} is not {what}")))
    }

    /// A positive duration such as `10s` or `500ms`.
    pub(super) fn duration(&self, name: &'static str) -> Result<Duration, Error> {
        let v = self.get(name);
        parse_duration(&v).filter(|d| !d.is_zero()).ok_or_else(|| {
            invalid(
                name,
                format!("{v:?} is not a positive duration such as 10s"),
            )
        })
    }

    /// A duration where 0 means "none".
    fn optional_duration(&self, name: &'static str) -> Result<Option<Duration>, Error> {
        let v = self.get(name);
        let d = parse_duration(&v).ok_or_else(|| {
            invalid(
                name,
                format!("{v:?} is not a duration such as 2h or 90m (0 = none)"),
            )
        })?;
        Ok(Some(d).filter(|d| !d.is_zero()))
    }

    /// `WORKER_TTL` within `MAX_WORKER_TTL` when both are set.
    fn lifetime(&self) -> Result<Lifetime, Error> {
        let default_ttl = self.optional_duration("WORKER_TTL")?;
        let max_ttl = self.optional_duration("MAX_WORKER_TTL")?;
        if let (Some(d), Some(m)) = (default_ttl, max_ttl) {
            if d > m {
                return Err(invalid(
                    "WORKER_TTL",
                    format!(
                        "{} is longer than MAX_WORKER_TTL ({})",
                        crate::time::duration_text(d),
                        crate::time::duration_text(m)
                    ),
                ));
            }
        }
        let on_expiry = self.optional("WORKER_ON_EXPIRY");
        let on_expiry = match on_expiry.as_deref() {
            None => OnExpiry::Stop,
            Some(v) => OnExpiry::parse(v).ok_or_else(|| {
                invalid(
                    "WORKER_ON_EXPIRY",
                    format!("{v:?} is neither stop nor suspend"),
                )
            })?,
        };
        Ok(Lifetime {
            default_ttl,
            max_ttl,
            on_expiry,
            suspended_ttl: self.optional_duration("SUSPENDED_TTL")?,
        })
    }

    pub(super) fn optional_path(&self, name: &'static str) -> Result<Option<PathBuf>, Error> {
        self.optional(name)
            .map(|p| expand_home(name, &p))
            .transpose()
    }

    /// Every setting, assembled: each is read and checked by its own reader.
    pub(super) fn settings(&self) -> Result<Settings, Error> {
        let mut warnings = Vec::new();
        let callers_file = self.optional_path("A2A_CALLERS_FILE")?;
        let oidc = self.oidc()?;
        let (auth_token, auth_token_file) =
            self.auth_token(&mut warnings, callers_file.is_some() || oidc.is_some())?;
        let anthropic_auth_token = self.model_key(&mut warnings)?;
        // In the order a refusal is told: one setting's, then the next.
        let public_url = http_url("A2A_PUBLIC_URL", &self.required("A2A_PUBLIC_URL", "")?)?;
        let listen = parse_listen(&self.get("LISTEN"))?;
        let controller_id = values::controller_id("CONTROLLER_ID", self.get("CONTROLLER_ID"))?;
        let sentry_dsn = self
            .optional("SENTRY_DSN")
            .map(|dsn| values::sentry_dsn("SENTRY_DSN", dsn))
            .transpose()?;
        let sentry_proxy = self
            .optional("SENTRY_PROXY")
            .map(|p| http_url("SENTRY_PROXY", &p))
            .transpose()?;
        let max_connections = self.number_within("MAX_CONNECTIONS", 1..=65536)?;
        let mut backend = self.backend(&mut warnings)?;
        let egress = self.egress(auth_token.as_deref())?;
        match &mut backend {
            super::types::BackendSettings::Docker { container, docker } => {
                container.fence = egress.fence.clone();
                docker.egress_network = egress.network.clone();
            }
            super::types::BackendSettings::K8s { container, k8s } => {
                container.fence = egress.fence.clone();
                k8s.egress_policy = egress.network.clone();
            }
            super::types::BackendSettings::Local(local) => local.fence = egress.fence.clone(),
        }
        Ok(Settings {
            auth_token,
            auth_token_file,
            auth_token_overlap: self.duration("A2A_AUTH_TOKEN_OVERLAP")?,
            callers_file,
            oidc,
            warnings,
            public_url,
            listen,
            agent_name: self.get("A2A_AGENT_NAME"),
            controller_id,
            sentry_dsn,
            sentry_proxy,
            max_workers: self.number("MAX_WORKERS", "a whole number")?,
            max_watchers: self.number("MAX_WATCHERS", "a whole number")?,
            max_caller_requests: self.number("MAX_CALLER_REQUESTS", "a whole number")?,
            max_caller_streams: self.number("MAX_CALLER_STREAMS", "a whole number")?,
            max_admin_requests: self.number("MAX_ADMIN_REQUESTS", "a whole number")?,
            max_admin_streams: self.number("MAX_ADMIN_STREAMS", "a whole number")?,
            worker_ready_timeout: self.any_duration("WORKER_READY_TIMEOUT", "60s")?,
            lifetime: self.lifetime()?,
            reap_interval: self.duration("REAP_INTERVAL")?,
            max_connections,
            http_head_timeout: self.duration("HTTP_HEAD_TIMEOUT")?,
            http_body_timeout: self.duration("HTTP_BODY_TIMEOUT")?,
            http_idle_timeout: self.duration("HTTP_IDLE_TIMEOUT")?,
            anthropic_auth_token,
            push: self.push()?,
            ui: self.boolean("UI")?,
            mcp: self.boolean("MCP")?,
            mcp_allowed_origins: self.origins("MCP_ALLOWED_ORIGINS")?,
            backend,
            templates_file: self.optional_path("WORKER_TEMPLATES_FILE")?,
            workspace_ttl: self.optional_duration("WORKSPACE_TTL")?,
            pool: self.pool_size("WORKER_POOL")?,
            pool_key_file: self.optional_path("POOL_KEY_FILE")?,
            pool_activation_timeout: self.duration("POOL_ACTIVATION_TIMEOUT")?,
            pool_demand: super::types::PoolDemand {
                window: self.duration("POOL_DEMAND_WINDOW")?,
                member_start: self.duration("POOL_MEMBER_START")?,
                idle_after: self.duration("POOL_IDLE_AFTER")?,
            },
            egress,
        })
    }

    /// A comma-separated list of browser origins (`scheme://host[:port]`), lowercased.
    fn origins(&self, name: &'static str) -> Result<Vec<String>, Error> {
        let mut out = Vec::new();
        for item in self.get(name).split(',').map(str::trim) {
            if item.is_empty() {
                continue;
            }
            let origin = item.trim_end_matches('/').to_ascii_lowercase();
            let host = origin
                .strip_prefix("https://")
                .or_else(|| origin.strip_prefix("http://"));
            match host {
                Some(h) if !h.is_empty() && !h.contains(['/', '?', '#', '@', ' ']) => {
                    out.push(origin)
                }
                _ => {
                    return Err(invalid(
                        name,
                        format!("{item:?} is not an origin such as https://console.example.com"),
                    ))
                }
            }
        }
        Ok(out)
    }

    /// `EGRESS_*`. The key: `EGRESS_KEY_FILE` (at least 16 characters), else derived from the
    /// admin token; a proxy URL without either is refused.
    fn egress(&self, admin_token: Option<&str>) -> Result<EgressSettings, Error> {
        let key = match self.optional_path("EGRESS_KEY_FILE")? {
            Some(path) => {
                let (secret, _) =
                    read_secret_file(&path).map_err(|why| invalid("EGRESS_KEY_FILE", why))?;
                if secret.chars().count() < 16 {
                    return Err(invalid(
                        "EGRESS_KEY_FILE",
                        format!("{} holds fewer than 16 characters", path.display()),
                    ));
                }
                Some(EgressKey::new(secret.as_bytes()))
            }
            None => admin_token.map(EgressKey::derived_from),
        };
        let fence = match self.optional("EGRESS_PROXY_URL") {
            Some(url) => {
                let proxy_url = http_url("EGRESS_PROXY_URL", &url)?;
                let key = key.clone().ok_or_else(|| invalid(
                    "EGRESS_PROXY_URL",
                    "fenced workers' placeholders need a key: set EGRESS_KEY_FILE or A2A_AUTH_TOKEN".into(),
                ))?;
                Some(Fence {
                    proxy_url: proxy_url.trim_end_matches('/').to_string(),
                    key,
                })
            }
            None => None,
        };
        let network = self.get("EGRESS_NETWORK");
        if network.is_empty()
            || !network
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        {
            return Err(invalid(
                "EGRESS_NETWORK",
                format!("{network:?} is not a network name"),
            ));
        }
        let model_url = self
            .optional("EGRESS_MODEL_URL")
            .map(|u| {
                check_upstream(&u)
                    .map(|()| u.trim_end_matches('/').to_string())
                    .map_err(|why| invalid("EGRESS_MODEL_URL", why))
            })
            .transpose()?;
        Ok(EgressSettings {
            fence,
            key,
            network,
            listen: parse_listen(&self.get("EGRESS_LISTEN")).map_err(|e| match e {
                Error::Invalid { reason, .. } => invalid("EGRESS_LISTEN", reason),
                other => other,
            })?,
            controller_url: http_url("EGRESS_CONTROLLER_URL", &self.get("EGRESS_CONTROLLER_URL"))?
                .trim_end_matches('/')
                .to_string(),
            model_url,
            ca_file: self.optional_path("EGRESS_CA_FILE")?,
            max_connections: self.number_within("EGRESS_MAX_CONNECTIONS", 1..=65536)?,
            recheck: self.duration("EGRESS_RECHECK")?,
        })
    }

    /// A duration where 0 is allowed (`example` shows its form).
    fn any_duration(&self, name: &'static str, example: &str) -> Result<Duration, Error> {
        let v = self.get(name);
        parse_duration(&v)
            .ok_or_else(|| invalid(name, format!("{v:?} is not a duration such as {example}")))
    }

    /// A whole number within `range`.
    fn number_within(
        &self,
        name: &'static str,
        range: std::ops::RangeInclusive<usize>,
    ) -> Result<usize, Error> {
        let n: usize = self.number(name, "a whole number")?;
        if !range.contains(&n) {
            return Err(invalid(
                name,
                format!("it must be between {} and {}", range.start(), range.end()),
            ));
        }
        Ok(n)
    }

    /// A warm pool's size: `N` members, or `MIN-MAX` after the demand; at most
    /// [`templates::MAX_POOL`].
    fn pool_size(&self, name: &'static str) -> Result<templates::PoolSize, Error> {
        let v = self.get(name);
        let size = templates::PoolSize::parse(&v).ok_or_else(|| {
            invalid(
                name,
                format!("{v:?} is not a member count such as 4, or bounds such as 0-8"),
            )
        })?;
        size.check().map_err(|why| invalid(name, why))?;
        Ok(size)
    }

    /// The model route's key from `ANTHROPIC_AUTH_TOKEN_FILE` (the variable itself is read
    /// apart, by `parse`, which refuses both).
    fn model_key(&self, warnings: &mut Vec<String>) -> Result<Option<String>, Error> {
        let Some(path) = self.optional_path("ANTHROPIC_AUTH_TOKEN_FILE")? else {
            return Ok(None);
        };
        let (token, warning) =
            read_secret_file(&path).map_err(|why| invalid("ANTHROPIC_AUTH_TOKEN_FILE", why))?;
        warnings.extend(warning);
        if token.is_empty() {
            return Err(invalid(
                "ANTHROPIC_AUTH_TOKEN_FILE",
                format!("{} is empty", path.display()),
            ));
        }
        Ok(Some(token))
    }

    /// `true` or `false` (also `1`/`0`, `yes`/`no`).
    fn boolean(&self, name: &'static str) -> Result<bool, Error> {
        match self.get(name).to_ascii_lowercase().as_str() {
            "true" | "1" | "yes" => Ok(true),
            "false" | "0" | "no" => Ok(false),
            other => Err(invalid(name, format!("{other:?} is not true or false"))),
        }
    }

    fn push(&self) -> Result<PushSettings, Error> {
        let allow_http = self.boolean("PUSH_ALLOW_HTTP")?;
        let mut push = PushSettings {
            allow_http,
            ..PushSettings::default()
        };
        for item in self.get("PUSH_ALLOW").split(',').map(str::trim) {
            if item.is_empty() {
                continue;
            }
            if let Some(net) = values::parse_cidr(item) {
                push.allow_nets.push(net);
            } else if let Ok(ip) = item.parse::<std::net::IpAddr>() {
                push.allow_nets
                    .push((ip, if ip.is_ipv4() { 32 } else { 128 }));
            } else if values::is_hostname(item) {
                push.allow_hosts.push(item.to_ascii_lowercase());
            } else {
                return Err(invalid(
                    "PUSH_ALLOW",
                    format!(
                        "{item:?} is neither a hostname, an address nor a CIDR such as 10.1.0.0/16"
                    ),
                ));
            }
        }
        Ok(push)
    }
}
