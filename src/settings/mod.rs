//! Settings: every setting is an environment variable and a flag (`-name=v`, `--name v`,
//! `--name=v`); flags win over the environment. Validation happens here, once, at startup, and
//! each refusal is one line naming the setting.
//!
//! - `specs`: the table of settings (names, defaults, help, sections) and `--help`;
//! - `values`: parsers for one value (URLs, listen addresses, sizes, paths);
//! - `backends`: each backend's own settings, read only when that backend is selected;
//! - `error`: the one-line refusal.
//!
//! [`Settings::backend`] is a [`BackendSettings`]: a docker controller without docker
//! settings cannot be represented, and whoever adds a backend adds a variant that every
//! `match` on it (the backend factory in `lib.rs` first) must fill in.

mod backends;
mod error;
mod specs;
pub mod templates;
mod values;
mod watched;

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use self::specs::{spec_of_flag, spec_of_name};
use self::values::{expand_home, http_url, invalid};
use crate::time::parse_duration;

pub use self::error::Error;
pub use self::specs::{
    help_text, settings_markdown, DEFAULT_ANTHROPIC_BASE_URL, DEFAULT_ANTHROPIC_MODEL,
};
pub use self::values::parse_listen;
pub use self::watched::Watched;

/// What the command line asked for.
#[derive(Debug)]
pub enum Command {
    Run(Box<Settings>),
    Help(String),
    Version(String),
}

/// The controller's validated settings.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The admin caller's bearer token (from `A2A_AUTH_TOKEN`, or read from its file at
    /// startup); `None` when only `A2A_CALLERS_FILE` or OIDC authenticate.
    pub auth_token: Option<String>,
    /// `A2A_AUTH_TOKEN_FILE`: where the token is re-read from when the file changes.
    pub auth_token_file: Option<PathBuf>,
    /// How long the previous token is accepted after the file changed.
    pub auth_token_overlap: Duration,
    /// `A2A_CALLERS_FILE`: the callers, their scopes and credentials (read by `auth`).
    pub callers_file: Option<PathBuf>,
    /// `A2A_OIDC_*`: signed access tokens of one issuer.
    pub oidc: Option<OidcSettings>,
    /// What the operator should hear at startup (e.g. a secret file others can read).
    pub warnings: Vec<String>,
    pub public_url: String,
    pub listen: SocketAddr,
    pub agent_name: String,
    pub controller_id: String,
    pub sentry_dsn: Option<String>,
    pub sentry_proxy: Option<String>,
    pub max_workers: u32,
    pub max_watchers: usize,
    /// `MAX_CALLER_REQUESTS`, `MAX_CALLER_STREAMS`: what one caller may hold at once (0 = no
    /// bound).
    pub max_caller_requests: usize,
    pub max_caller_streams: usize,
    /// `MAX_ADMIN_REQUESTS`, `MAX_ADMIN_STREAMS`: the same for admin callers.
    pub max_admin_requests: usize,
    pub max_admin_streams: usize,
    pub worker_ready_timeout: Duration,
    pub lifetime: Lifetime,
    /// How often the reaper looks for expired workers.
    pub reap_interval: Duration,
    pub max_connections: usize,
    pub http_head_timeout: Duration,
    pub http_body_timeout: Duration,
    pub http_idle_timeout: Duration,
    /// `ANTHROPIC_AUTH_TOKEN` from the controller's own environment, forwarded to workers.
    pub anthropic_auth_token: Option<String>,
    /// Where push notifications may be delivered.
    pub push: PushSettings,
    /// Whether the status page is served at `/ui`.
    pub ui: bool,
    /// The selected backend with exactly the settings it needs.
    pub backend: BackendSettings,
    /// `WORKER_TEMPLATES_FILE`: named templates beside (or instead of) the settings' `default`.
    pub templates_file: Option<PathBuf>,
    /// `WORKSPACE_TTL`: how long a task's workspace outlives its last worker (`None`: until
    /// deleted).
    pub workspace_ttl: Option<Duration>,
    /// `WORKER_POOL`: the default template's warm pool (members kept started per controller id).
    pub pool: u32,
    /// `POOL_KEY_FILE`: the key pool members' activation secrets are derived from (every
    /// replica of one controller id reads the same); `None`: derived from `A2A_AUTH_TOKEN`.
    pub pool_key_file: Option<PathBuf>,
    /// `POOL_ACTIVATION_TIMEOUT`: how long a member has to answer its activation.
    pub pool_activation_timeout: Duration,
}

impl Settings {
    /// The template `default` as the settings describe it (what every worker was before
    /// templates existed).
    pub fn default_template(&self) -> templates::Template {
        let mut t = templates::Template::new(templates::DEFAULT_TEMPLATE, "", 0);
        t.lifetime = self.lifetime;
        t.pool = self.pool;
        match &self.backend {
            BackendSettings::Docker { container, docker } => {
                t.image = container.image.clone();
                t.port = container.port;
                t.memory_bytes = container.memory_bytes;
                t.nano_cpus = container.nano_cpus;
                t.pids_limit = docker.pids_limit;
                t.network = docker.network.clone();
            }
            BackendSettings::K8s { container, .. } => {
                t.image = container.image.clone();
                t.port = container.port;
                t.memory_bytes = container.memory_bytes;
                t.nano_cpus = container.nano_cpus;
            }
            BackendSettings::Local(local) => t.command = local.command.clone(),
        }
        t
    }
}

/// `A2A_OIDC_ISSUER`, `A2A_OIDC_AUDIENCE`, `A2A_OIDC_SCOPE_CLAIM`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OidcSettings {
    /// Exactly as the tokens' `iss` says it (https, or http on a loopback host).
    pub issuer: String,
    pub audience: String,
    /// The claim whose value is the caller's scope.
    pub scope_claim: String,
    /// `A2A_OIDC_CA_FILE`: the PEM roots the issuer's certificate must chain to (`None`: the
    /// bundled public roots).
    pub ca_file: Option<PathBuf>,
    /// `A2A_OIDC_JWKS_REFRESH`: how often the JWKS is fetched again on its own (`None` or
    /// zero: only for unseen kids).
    pub jwks_refresh: Option<Duration>,
}

/// `PUSH_ALLOW_HTTP` and `PUSH_ALLOW`: what webhook deliveries may reach beyond public
/// https addresses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PushSettings {
    pub allow_http: bool,
    /// Hostnames (lower case) whose addresses are all allowed.
    pub allow_hosts: Vec<String>,
    /// Networks (address, prefix length) whose addresses are allowed.
    pub allow_nets: Vec<(std::net::IpAddr, u8)>,
}

/// How long workers live: `WORKER_TTL` and `MAX_WORKER_TTL` (`None` for 0).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Lifetime {
    pub default_ttl: Option<Duration>,
    pub max_ttl: Option<Duration>,
}

/// The selected backend and its settings.
#[derive(Debug, Clone)]
pub enum BackendSettings {
    Docker {
        container: ContainerSettings,
        docker: DockerSettings,
    },
    K8s {
        container: ContainerSettings,
        k8s: K8sSettings,
    },
    Local(LocalSettings),
}

impl BackendSettings {
    /// The container-worker settings of the docker and k8s backends.
    pub fn container(&self) -> Option<&ContainerSettings> {
        match self {
            BackendSettings::Docker { container, .. } | BackendSettings::K8s { container, .. } => {
                Some(container)
            }
            BackendSettings::Local(_) => None,
        }
    }
}

/// Settings shared by the container and pod backends.
#[derive(Debug, Clone)]
pub struct ContainerSettings {
    pub image: String,
    pub port: u16,
    pub token_env: String,
    pub anthropic_base_url: String,
    pub anthropic_model: String,
    pub memory_bytes: Option<i64>,
    pub nano_cpus: Option<i64>,
}

#[derive(Debug, Clone)]
pub struct DockerSettings {
    /// Path of the engine's Unix socket (from `DOCKER_HOST=unix://...`).
    pub socket: PathBuf,
    pub network: Option<String>,
    pub publish_host: IpAddr,
    pub pids_limit: Option<i64>,
}

#[derive(Debug, Clone)]
pub struct K8sSettings {
    pub namespace: Option<String>,
    pub worker_service: String,
    pub cluster_domain: String,
    pub api_url: Option<String>,
    pub ca_file: Option<PathBuf>,
    pub token_file: Option<PathBuf>,
    pub client_cert_file: Option<PathBuf>,
    pub client_key_file: Option<PathBuf>,
    pub pod_template: Option<PathBuf>,
    /// `K8S_WORKER_URL`: a template with `{pod}`, `{namespace}`, `{port}`.
    pub worker_url: Option<String>,
    /// `K8S_REPLICA_IP` and `K8S_REPLICA_SELECTOR`: one replica of several.
    pub replica: Option<ReplicaSettings>,
}

/// One replica of several: its own pod IP, and the label selector of all of them.
#[derive(Debug, Clone)]
pub struct ReplicaSettings {
    pub ip: std::net::IpAddr,
    pub selector: String,
}

#[derive(Debug, Clone)]
pub struct LocalSettings {
    pub wezterm: PathBuf,
    pub state_file: PathBuf,
    pub task_dir: PathBuf,
    /// The program a worker's tab runs and its arguments, with `{task}`, `{task_file}`,
    /// `{worker_id}` placeholders.
    pub command: Vec<String>,
    /// How long one wezterm CLI call may take before it is killed.
    pub cli_timeout: Duration,
    /// The WezTerm workspace new tabs open in (`spawn --workspace`); WezTerm's current one
    /// (`default`) when unset.
    pub workspace: Option<String>,
    /// `LOCAL_WORKSPACES_DIR`: where task workspaces (templates with a workspace) are made.
    pub workspaces_dir: PathBuf,
}

pub const MIN_AUTH_TOKEN_LEN: usize = 16;

pub fn version_text() -> String {
    format!(
        "a2a-worker-controller {} (commit {})",
        env!("CARGO_PKG_VERSION"),
        env!("A2A_WC_GIT_COMMIT")
    )
}

/// Parses the command line (without the program name) over an environment.
pub fn parse<I, E>(args: I, env: E) -> Result<Command, Error>
where
    I: IntoIterator<Item = String>,
    E: IntoIterator<Item = (String, String)>,
{
    let mut raw: HashMap<&'static str, String> = HashMap::new();
    let mut anthropic_auth_token = None;
    for (key, value) in env {
        if key == "ANTHROPIC_AUTH_TOKEN" && !value.is_empty() {
            anthropic_auth_token = Some(value);
        } else if let Some(spec) = spec_of_name(&key) {
            raw.insert(spec.name, value);
        }
    }
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let Some(body) = arg
            .strip_prefix("--")
            .or_else(|| arg.strip_prefix('-'))
            .filter(|b| !b.is_empty())
        else {
            return Err(Error::UnknownFlag(arg));
        };
        let (name, inline) = match body.split_once('=') {
            Some((n, v)) => (n, Some(v.to_string())),
            None => (body, None),
        };
        match name {
            "help" | "h" if inline.is_none() => return Ok(Command::Help(help_text())),
            "version" if inline.is_none() => return Ok(Command::Version(version_text())),
            _ => {}
        }
        let Some(spec) = spec_of_flag(name) else {
            return Err(Error::UnknownFlag(format!("-{name}")));
        };
        let value = match inline {
            Some(v) => v,
            None => args
                .next()
                .ok_or_else(|| Error::FlagWithoutValue(arg.clone()))?,
        };
        raw.insert(spec.name, value);
    }
    let mut settings = Raw(raw).settings()?;
    settings.anthropic_auth_token = match (anthropic_auth_token, settings.anthropic_auth_token) {
        (Some(_), Some(_)) => {
            return Err(invalid(
                "ANTHROPIC_AUTH_TOKEN_FILE",
                "ANTHROPIC_AUTH_TOKEN is set too: set one of them".into(),
            ))
        }
        (from_env, from_file) => from_env.or(from_file),
    };
    Ok(Command::Run(Box::new(settings)))
}

pub(super) struct Raw(HashMap<&'static str, String>);

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
        Ok(Lifetime {
            default_ttl,
            max_ttl,
        })
    }

    pub(super) fn optional_path(&self, name: &'static str) -> Result<Option<PathBuf>, Error> {
        self.optional(name)
            .map(|p| expand_home(name, &p))
            .transpose()
    }

    fn settings(&self) -> Result<Settings, Error> {
        let mut warnings = Vec::new();
        let callers_file = self.optional_path("A2A_CALLERS_FILE")?;
        let oidc = self.oidc()?;
        let (auth_token, auth_token_file) =
            self.auth_token(&mut warnings, callers_file.is_some() || oidc.is_some())?;
        let anthropic_auth_token = match self.optional_path("ANTHROPIC_AUTH_TOKEN_FILE")? {
            Some(path) => {
                let (token, warning) = read_secret_file(&path)
                    .map_err(|why| invalid("ANTHROPIC_AUTH_TOKEN_FILE", why))?;
                warnings.extend(warning);
                if token.is_empty() {
                    return Err(invalid(
                        "ANTHROPIC_AUTH_TOKEN_FILE",
                        format!("{} is empty", path.display()),
                    ));
                }
                Some(token)
            }
            None => None,
        };
        let public_url = http_url("A2A_PUBLIC_URL", &self.required("A2A_PUBLIC_URL", "")?)?;
        let listen = parse_listen(&self.get("LISTEN"))?;
        let controller_id = self.get("CONTROLLER_ID");
        if controller_id.is_empty()
            || controller_id.len() > 63
            || !controller_id
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
            || !controller_id.as_bytes()[0].is_ascii_alphanumeric()
            || !controller_id.as_bytes()[controller_id.len() - 1].is_ascii_alphanumeric()
        {
            return Err(invalid(
                "CONTROLLER_ID",
                format!("{controller_id:?} must be 1-63 characters of [A-Za-z0-9_.-], starting and ending alphanumeric"),
            ));
        }
        let sentry_dsn = self.optional("SENTRY_DSN");
        if let Some(dsn) = &sentry_dsn {
            if !(dsn.starts_with("https://") || dsn.starts_with("http://")) || !dsn.contains('@') {
                return Err(invalid(
                    "SENTRY_DSN",
                    "it must look like https://KEY@HOST/PROJECT".into(),
                ));
            }
        }
        let sentry_proxy = self
            .optional("SENTRY_PROXY")
            .map(|p| http_url("SENTRY_PROXY", &p))
            .transpose()?;
        let max_connections: usize = self.number("MAX_CONNECTIONS", "a whole number")?;
        if !(1..=65536).contains(&max_connections) {
            return Err(invalid(
                "MAX_CONNECTIONS",
                "it must be between 1 and 65536".into(),
            ));
        }
        // The backend's own settings are read (and required) only for the backend selected.
        let backend = match self.get("BACKEND").as_str() {
            "docker" => BackendSettings::Docker {
                container: self.container()?,
                docker: self.docker()?,
            },
            "k8s" | "kubernetes" | "k3s" => {
                let mut container = self.container()?;
                // The compiled-in default (host.docker.internal) is Docker's name for the
                // host: no cluster has it. Pods get the variable only when it is set.
                if self
                    .0
                    .get("WORKER_ANTHROPIC_BASE_URL")
                    .is_none_or(|v| v.trim().is_empty())
                {
                    container.anthropic_base_url = String::new();
                    warnings.push(
                        "WORKER_ANTHROPIC_BASE_URL is not set: worker pods get no ANTHROPIC_BASE_URL (the default, http://host.docker.internal:8788, does not exist in a cluster); set it to the model gateway's in-cluster URL".into(),
                    );
                }
                BackendSettings::K8s {
                    container,
                    k8s: self.k8s()?,
                }
            }
            "local" => BackendSettings::Local(self.local()?),
            other => {
                return Err(invalid(
                    "BACKEND",
                    format!("{other:?} is not one of docker, k8s, local"),
                ))
            }
        };
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
            worker_ready_timeout: parse_duration(&self.get("WORKER_READY_TIMEOUT")).ok_or_else(
                || {
                    invalid(
                        "WORKER_READY_TIMEOUT",
                        format!(
                            "{:?} is not a duration such as 60s",
                            self.get("WORKER_READY_TIMEOUT")
                        ),
                    )
                },
            )?,
            lifetime: self.lifetime()?,
            reap_interval: self.duration("REAP_INTERVAL")?,
            max_connections,
            http_head_timeout: self.duration("HTTP_HEAD_TIMEOUT")?,
            http_body_timeout: self.duration("HTTP_BODY_TIMEOUT")?,
            http_idle_timeout: self.duration("HTTP_IDLE_TIMEOUT")?,
            anthropic_auth_token,
            push: self.push()?,
            ui: self.boolean("UI")?,
            backend,
            templates_file: self.optional_path("WORKER_TEMPLATES_FILE")?,
            workspace_ttl: self.optional_duration("WORKSPACE_TTL")?,
            pool: {
                let n: u32 = self.number("WORKER_POOL", "a member count such as 4")?;
                if n > templates::MAX_POOL {
                    return Err(invalid(
                        "WORKER_POOL",
                        format!("{n} is more than {} members", templates::MAX_POOL),
                    ));
                }
                n
            },
            pool_key_file: self.optional_path("POOL_KEY_FILE")?,
            pool_activation_timeout: self.duration("POOL_ACTIVATION_TIMEOUT")?,
        })
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

    /// `A2A_OIDC_ISSUER` and `A2A_OIDC_AUDIENCE` (both, or neither), `A2A_OIDC_SCOPE_CLAIM`.
    fn oidc(&self) -> Result<Option<OidcSettings>, Error> {
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
    fn auth_token(
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

/// This process's effective group on Linux (a group-readable secret of one's own group, as
/// Kubernetes mounts one with `fsGroup`, is not "others"); `None` elsewhere.
fn own_group() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("Gid:"))?;
    line.split_whitespace().nth(2)?.parse().ok()
}

/// The most a secret file may hold.
const SECRET_FILE_CAP: u64 = 64 << 10;

/// A secret from a file (surrounding whitespace and the final newline removed), and a warning
/// when others may read the file. Errors name the file, never its contents.
pub fn read_secret_file(path: &Path) -> Result<(String, Option<String>), String> {
    read_secret_file_up_to(path, SECRET_FILE_CAP)
}

/// The same for a file of at most `cap` bytes (a callers file is larger than a token).
pub fn read_secret_file_up_to(path: &Path, cap: u64) -> Result<(String, Option<String>), String> {
    use std::io::Read;
    use std::os::unix::fs::MetadataExt;

    let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let (mode, group) = file
        .metadata()
        .map(|m| (m.mode(), Some(m.gid())))
        .unwrap_or((0o600, None));
    let mut bytes = Vec::new();
    file.take(cap + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if bytes.len() as u64 > cap {
        return Err(format!(
            "{} is larger than {} KiB",
            path.display(),
            cap >> 10
        ));
    }
    let text =
        String::from_utf8(bytes).map_err(|_| format!("{} is not UTF-8 text", path.display()))?;
    let group_is_ours = own_group().is_some_and(|gid| Some(gid) == group);
    let wide = mode & 0o007 != 0 || (mode & 0o070 != 0 && !group_is_ours);
    let warning = wide.then(|| {
        format!(
            "{} holds a secret but its mode is {:04o}: others may read it; make it 0600",
            path.display(),
            mode & 0o7777
        )
    });
    Ok((text.trim().to_string(), warning))
}

#[cfg(test)]
mod tests {
    use super::specs::flag_of;
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn base() -> Vec<(String, String)> {
        env(&[
            ("A2A_AUTH_TOKEN", "0123456789abcdef"),
            ("A2A_PUBLIC_URL", "http://localhost:8080/"),
            ("WORKER_IMAGE", "a2a-echo-worker:dev"),
        ])
    }

    fn run(args: &[&str], env: Vec<(String, String)>) -> Result<Settings, Error> {
        match parse(args.iter().map(|s| s.to_string()), env)? {
            Command::Run(s) => Ok(*s),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn pods_get_no_docker_host_name_for_the_model_gateway() {
        let k8s = |extra: &[&str]| {
            let mut args = vec![
                "-backend=k8s",
                "-worker-image=w:1",
                "-k8s-api-url=https://127.0.0.1:6443",
                "-k8s-ca-file=/ca",
                "-k8s-token-file=/token",
            ];
            args.extend_from_slice(extra);
            run(&args, base()).unwrap()
        };
        let s = k8s(&[]);
        let BackendSettings::K8s { container, .. } = &s.backend else {
            panic!()
        };
        assert_eq!(container.anthropic_base_url, "");
        assert!(
            s.warnings
                .iter()
                .any(|w| w.contains("WORKER_ANTHROPIC_BASE_URL is not set")),
            "{:?}",
            s.warnings
        );
        let s = k8s(&["-worker-anthropic-base-url=http://gateway.models:8788"]);
        let BackendSettings::K8s { container, .. } = &s.backend else {
            panic!()
        };
        assert_eq!(container.anthropic_base_url, "http://gateway.models:8788");
        assert!(!s.warnings.iter().any(|w| w.contains("ANTHROPIC_BASE_URL")));
        // Docker keeps its default: there the name exists.
        let s = run(&["-worker-image=w:1"], base()).unwrap();
        let BackendSettings::Docker { container, .. } = &s.backend else {
            panic!()
        };
        assert_eq!(container.anthropic_base_url, DEFAULT_ANTHROPIC_BASE_URL);
    }

    #[test]
    fn the_anthropic_token_comes_from_the_variable_or_its_file() {
        let dir = std::env::temp_dir().join(format!("a2a-anthropic-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("anthropic");
        std::fs::write(&file, "router-key-1\n").unwrap();
        let flag = format!("-anthropic-auth-token-file={}", file.display());
        let s = run(&[&flag], base()).unwrap();
        assert_eq!(s.anthropic_auth_token.as_deref(), Some("router-key-1"));
        assert_eq!(s.warnings.len(), 1, "{:?}", s.warnings);
        let mut e = base();
        e.push(("ANTHROPIC_AUTH_TOKEN".into(), "from-env".into()));
        assert_eq!(
            run(&[], e.clone()).unwrap().anthropic_auth_token.as_deref(),
            Some("from-env")
        );
        let msg = run(&[&flag], e).unwrap_err().to_string();
        assert!(
            msg.contains("set one of them") && !msg.contains("from-env"),
            "{msg}"
        );
        std::fs::write(&file, "").unwrap();
        let msg = run(&[&flag], base()).unwrap_err().to_string();
        assert!(
            msg.contains("ANTHROPIC_AUTH_TOKEN_FILE") && msg.contains("empty"),
            "{msg}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn worker_lifetimes_default_to_none_and_stay_within_their_ceiling() {
        let s = run(&[], base()).unwrap();
        assert_eq!(s.lifetime, Lifetime::default());
        assert_eq!(s.reap_interval, Duration::from_secs(30));
        let s = run(
            &[
                "-worker-ttl=90m",
                "--max-worker-ttl",
                "2h",
                "-reap-interval=5s",
            ],
            base(),
        )
        .unwrap();
        assert_eq!(s.lifetime.default_ttl, Some(Duration::from_secs(5400)));
        assert_eq!(s.lifetime.max_ttl, Some(Duration::from_secs(7200)));
        assert_eq!(s.reap_interval, Duration::from_secs(5));
        let msg = run(&["-worker-ttl=3h", "-max-worker-ttl=2h"], base())
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("WORKER_TTL") && msg.contains("MAX_WORKER_TTL (2h)"),
            "{msg}"
        );
        let msg = run(&["-worker-ttl=soon"], base()).unwrap_err().to_string();
        assert!(
            msg.contains("WORKER_TTL") && msg.contains("\"soon\""),
            "{msg}"
        );
        assert!(
            run(&["-reap-interval=0"], base()).is_err(),
            "the reaper needs a pause"
        );
    }

    #[test]
    fn defaults_and_flag_forms() {
        let s = run(&[], base()).unwrap();
        assert_eq!(s.listen.to_string(), "127.0.0.1:8080");
        assert_eq!(s.public_url, "http://localhost:8080");
        assert!(matches!(s.backend, BackendSettings::Docker { .. }));
        assert_eq!(s.worker_ready_timeout, Duration::from_secs(60));
        let BackendSettings::Docker {
            container: c,
            docker,
        } = s.backend
        else {
            panic!("docker is the default backend")
        };
        assert_eq!(
            (c.port, c.token_env.as_str()),
            (9090, "INTERACTIVE_AUTH_TOKEN")
        );
        assert_eq!(docker.socket, PathBuf::from("/var/run/docker.sock"));

        let s = run(
            &[
                "-listen=:9000",
                "--max-workers",
                "3",
                "--controller-id=ci-1",
            ],
            base(),
        )
        .unwrap();
        assert_eq!(s.listen.to_string(), "0.0.0.0:9000");
        assert_eq!((s.max_workers, s.controller_id.as_str()), (3, "ci-1"));
    }

    #[test]
    fn flags_win_over_environment() {
        let mut e = base();
        e.push(("LISTEN".into(), "127.0.0.1:1".into()));
        let s = run(&["-listen", "127.0.0.1:2"], e).unwrap();
        assert_eq!(s.listen.port(), 2);
    }

    #[test]
    fn refusals_name_the_setting_and_never_the_token() {
        let e = env(&[
            ("A2A_AUTH_TOKEN", "short-secret"),
            ("A2A_PUBLIC_URL", "http://x"),
        ]);
        let msg = run(&[], e).unwrap_err().to_string();
        assert!(
            msg.contains("A2A_AUTH_TOKEN") && msg.contains("16"),
            "{msg}"
        );
        assert!(!msg.contains("short-secret"));

        let msg = run(&["-a2a-public-url=ftp://x"], base())
            .unwrap_err()
            .to_string();
        assert!(msg.contains("A2A_PUBLIC_URL"), "{msg}");
        let msg = run(&["-listen=nonsense"], base()).unwrap_err().to_string();
        assert!(msg.contains("LISTEN"), "{msg}");
        let msg = run(&["-no-such-flag=1"], base()).unwrap_err().to_string();
        assert!(msg.contains("unknown flag"), "{msg}");
        let msg = run(&["--listen"], base()).unwrap_err().to_string();
        assert!(msg.contains("needs a value"), "{msg}");
        let msg = run(&["-worker-image=repo/agent"], base())
            .unwrap_err()
            .to_string();
        assert!(
            msg.contains("WORKER_IMAGE") && msg.contains("no tag"),
            "{msg}"
        );
        let msg = run(&["-worker-image=localhost:5000/agent"], base())
            .unwrap_err()
            .to_string();
        assert!(msg.contains("no tag"), "{msg}");
        assert!(run(&["-worker-image=localhost:5000/agent:v1"], base()).is_ok());
        assert!(run(&["-worker-image=agent@sha256:abc"], base()).is_ok());
        let msg = run(&["-backend=swarm"], base()).unwrap_err().to_string();
        assert!(msg.contains("BACKEND"), "{msg}");
        let msg = run(&["-worker-memory=lots"], base())
            .unwrap_err()
            .to_string();
        assert!(msg.contains("WORKER_MEMORY"), "{msg}");
        assert_eq!(
            run(&[], env(&[("A2A_PUBLIC_URL", "http://x")])).unwrap_err(),
            Error::Missing {
                name: "A2A_AUTH_TOKEN",
                why: " (or A2A_AUTH_TOKEN_FILE, A2A_CALLERS_FILE, A2A_OIDC_ISSUER)"
            }
        );
    }

    #[test]
    fn callers_or_oidc_may_stand_in_for_the_admin_token() {
        let without_token = || env(&[("A2A_PUBLIC_URL", "http://x"), ("WORKER_IMAGE", "agent:v1")]);
        let mut e = without_token();
        e.push(("A2A_CALLERS_FILE".into(), "/etc/a2a/callers.json".into()));
        let s = run(&[], e).unwrap();
        assert_eq!(s.auth_token, None);
        assert_eq!(
            s.callers_file.as_deref(),
            Some(Path::new("/etc/a2a/callers.json"))
        );
        let mut e = without_token();
        e.push(("A2A_OIDC_ISSUER".into(), "https://id.example".into()));
        e.push(("A2A_OIDC_AUDIENCE".into(), "a2a".into()));
        let s = run(&[], e).unwrap();
        assert_eq!(
            s.oidc,
            Some(OidcSettings {
                issuer: "https://id.example".into(),
                audience: "a2a".into(),
                scope_claim: "tenant".into(),
                ca_file: None,
                jwks_refresh: Some(Duration::from_secs(300)),
            })
        );
        let mut e = without_token();
        e.push(("A2A_OIDC_ISSUER".into(), "http://id.example".into()));
        e.push(("A2A_OIDC_AUDIENCE".into(), "a2a".into()));
        let msg = run(&[], e).unwrap_err().to_string();
        assert!(
            msg.contains("A2A_OIDC_ISSUER") && msg.contains("https"),
            "{msg}"
        );
        let mut e = without_token();
        e.push(("A2A_OIDC_ISSUER".into(), "http://127.0.0.1:9000".into()));
        e.push(("A2A_OIDC_AUDIENCE".into(), "a2a".into()));
        assert!(run(&[], e).is_ok(), "http on loopback (a test issuer)");
        let mut e = without_token();
        e.push(("A2A_OIDC_ISSUER".into(), "http://[::1]:9000".into()));
        e.push(("A2A_OIDC_AUDIENCE".into(), "a2a".into()));
        assert!(run(&[], e).is_ok(), "http on IPv6 loopback");
        let mut e = without_token();
        e.push(("A2A_OIDC_ISSUER".into(), "https://id.example".into()));
        let msg = run(&[], e).unwrap_err().to_string();
        assert!(msg.contains("A2A_OIDC_AUDIENCE"), "{msg}");
    }

    #[test]
    fn backend_specific_settings_only_when_selected() {
        let e = env(&[
            ("A2A_AUTH_TOKEN", "0123456789abcdef"),
            ("A2A_PUBLIC_URL", "http://x"),
        ]);
        let msg = run(&[], e.clone()).unwrap_err().to_string();
        assert!(msg.contains("WORKER_IMAGE"), "{msg}");
        let msg = run(&["-backend=local"], e.clone()).unwrap_err().to_string();
        assert!(msg.contains("LOCAL_TASK_DIR"), "{msg}");
        let s = run(
            &[
                "-backend=local",
                "-local-task-dir=/tmp",
                "-local-command=claude",
            ],
            e.clone(),
        )
        .unwrap();
        assert!(s.backend.container().is_none() && matches!(s.backend, BackendSettings::Local(_)));
        let msg = run(
            &[
                "-backend=local",
                "-local-task-dir=/tmp",
                "-local-command=c",
                "-local-wezterm=wezterm",
            ],
            e,
        )
        .unwrap_err()
        .to_string();
        assert!(msg.contains("absolute"), "{msg}");
    }

    #[test]
    fn k8s_settings_carry_the_container_settings() {
        let s = run(
            &["-backend=k8s", "-worker-memory=512m", "-worker-cpus=1.5"],
            base(),
        )
        .unwrap();
        let BackendSettings::K8s { container, k8s } = &s.backend else {
            panic!("{:?}", s.backend)
        };
        assert_eq!(container.memory_bytes, Some(512 << 20));
        assert_eq!(container.nano_cpus, Some(1_500_000_000));
        assert_eq!(k8s.worker_service, "a2a-workers");
        assert_eq!(k8s.worker_url, None);
        let s = run(
            &[
                "-backend=k8s",
                "-k8s-worker-url=https://{pod}.workers.example.com/",
            ],
            base(),
        )
        .unwrap();
        let BackendSettings::K8s { k8s, .. } = &s.backend else {
            panic!()
        };
        assert_eq!(
            k8s.worker_url.as_deref(),
            Some("https://{pod}.workers.example.com")
        );
        for bad in [
            "https://fixed.example.com",
            "ftp://{pod}",
            "http://{pod}.{cluster}",
        ] {
            let msg = run(&["-backend=k8s", &format!("-k8s-worker-url={bad}")], base())
                .unwrap_err()
                .to_string();
            assert!(msg.contains("K8S_WORKER_URL"), "{bad}: {msg}");
        }
        assert_eq!(s.backend.container().map(|c| c.port), Some(9090));
    }

    #[test]
    fn local_command_is_an_argument_list() {
        let local = |cmd: &str| {
            run(
                &[
                    "-backend=local",
                    "-local-task-dir=/tmp",
                    &format!("-local-command={cmd}"),
                ],
                base(),
            )
            .map(|s| match s.backend {
                BackendSettings::Local(l) => l.command,
                other => panic!("{other:?}"),
            })
        };
        assert_eq!(
            local(r#"["/usr/local/bin/claude", "--task", "{task_file}", "two words"]"#).unwrap(),
            [
                "/usr/local/bin/claude",
                "--task",
                "{task_file}",
                "two words"
            ]
        );
        assert_eq!(
            local("/usr/local/bin/claude code").unwrap(),
            ["/usr/local/bin/claude code"]
        );
        for bad in ["[]", "[1]", "[\"a\"", r#"["  "]"#] {
            let msg = local(bad).unwrap_err().to_string();
            assert!(msg.contains("LOCAL_COMMAND"), "{bad}: {msg}");
        }
    }

    #[test]
    fn help_is_grouped_by_section() {
        let text = help_text();
        let at = |needle: &str| text.find(needle).unwrap_or_else(|| panic!("{needle}"));
        assert!(at("General:") < at("HTTP:"));
        assert!(at("HTTP:") < at("Container workers"));
        assert!(at("Container workers") < at("Docker (BACKEND=docker)"));
        assert!(at("Docker (BACKEND=docker)") < at("Kubernetes"));
        assert!(at("Kubernetes") < at("Local WezTerm"));
        // Each setting sits under its own section.
        assert!(at("Kubernetes") < at("K8S_API_URL") && at("K8S_API_URL") < at("Local WezTerm"));
        assert!(at("HTTP:") < at("-listen") && at("-listen") < at("Container workers"));
        assert!(at("Docker (BACKEND=docker)") < at("DOCKER_HOST"));
    }

    #[test]
    fn help_lists_every_setting_with_its_default() {
        let Command::Help(text) = parse(["--help".to_string()], Vec::new()).unwrap() else {
            panic!()
        };
        for spec in specs::SPECS {
            assert!(text.contains(spec.name), "{}", spec.name);
            assert!(text.contains(&format!("-{}", flag_of(spec.name))));
            if !spec.default.is_empty() {
                assert!(text.contains(spec.default), "{}", spec.name);
            }
            // No secret has a default that could leak.
            assert!(!spec.secret || spec.default.is_empty());
        }
    }
}
