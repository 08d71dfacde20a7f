//! Settings: every setting is an environment variable and a flag (`-name=v`, `--name v`,
//! `--name=v`); flags win over the environment. Validation happens here, once, at startup, and
//! each refusal is one line naming the setting.

use std::collections::HashMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use crate::time::parse_duration;

/// What the command line asked for.
#[derive(Debug)]
pub enum Command {
    Run(Box<Settings>),
    Help(String),
    Version(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendKind {
    Docker,
    K8s,
    Local,
}

impl BackendKind {
    pub fn as_str(self) -> &'static str {
        match self {
            BackendKind::Docker => "docker",
            BackendKind::K8s => "k8s",
            BackendKind::Local => "local",
        }
    }
}

/// The controller's validated settings. Backend-specific groups are `Some` only when that
/// backend is selected.
#[derive(Debug, Clone)]
pub struct Settings {
    pub auth_token: String,
    pub public_url: String,
    pub listen: SocketAddr,
    pub backend: BackendKind,
    pub agent_name: String,
    pub controller_id: String,
    pub sentry_dsn: Option<String>,
    pub sentry_proxy: Option<String>,
    pub max_workers: u32,
    pub worker_ready_timeout: Duration,
    pub max_connections: usize,
    pub http_head_timeout: Duration,
    pub http_body_timeout: Duration,
    pub http_idle_timeout: Duration,
    /// `ANTHROPIC_AUTH_TOKEN` from the controller's own environment, forwarded to workers.
    pub anthropic_auth_token: Option<String>,
    pub container: Option<ContainerSettings>,
    pub docker: Option<DockerSettings>,
    pub k8s: Option<K8sSettings>,
    pub local: Option<LocalSettings>,
}

/// Settings shared by the container and pod backends.
#[derive(Debug, Clone)]
pub struct ContainerSettings {
    pub image: String,
    pub port: u16,
    pub token_env: String,
    pub anthropic_base_url: String,
    pub anthropic_model: String,
}

#[derive(Debug, Clone)]
pub struct DockerSettings {
    /// Path of the engine's Unix socket (from `DOCKER_HOST=unix://...`).
    pub socket: PathBuf,
    pub network: Option<String>,
    pub publish_host: IpAddr,
    pub memory_bytes: Option<i64>,
    pub nano_cpus: Option<i64>,
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
}

#[derive(Debug, Clone)]
pub struct LocalSettings {
    pub wezterm: PathBuf,
    pub state_file: PathBuf,
    pub task_dir: PathBuf,
    pub command: String,
}

/// One refusal at startup. `Display` is the one line the operator reads; it never contains the
/// value of a secret setting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    Missing {
        name: &'static str,
        why: &'static str,
    },
    Invalid {
        name: &'static str,
        reason: String,
    },
    UnknownFlag(String),
    FlagWithoutValue(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Missing { name, why } => {
                write!(
                    f,
                    "setting {name} is required{why} (flag -{}=...)",
                    flag_of(name)
                )
            }
            Error::Invalid { name, reason } => write!(f, "setting {name} is invalid: {reason}"),
            Error::UnknownFlag(flag) => write!(f, "unknown flag {flag:?} (see --help)"),
            Error::FlagWithoutValue(flag) => write!(f, "flag {flag:?} needs a value"),
        }
    }
}

impl std::error::Error for Error {}

struct Spec {
    name: &'static str,
    default: &'static str,
    help: &'static str,
    secret: bool,
}

const fn s(name: &'static str, default: &'static str, help: &'static str) -> Spec {
    Spec {
        name,
        default,
        help,
        secret: false,
    }
}

pub const DEFAULT_ANTHROPIC_BASE_URL: &str = "http://host.docker.internal:8788";
pub const DEFAULT_ANTHROPIC_MODEL: &str = "MiniMax-M2.7-highspeed";
pub const MIN_AUTH_TOKEN_LEN: usize = 16;

/// Every setting, in `--help` order. Defaults live here and nowhere else.
const SPECS: &[Spec] = &[
    Spec {
        name: "A2A_AUTH_TOKEN",
        default: "",
        help: "bearer token callers must send to /a2a (required, at least 16 characters)",
        secret: true,
    },
    s(
        "A2A_PUBLIC_URL",
        "",
        "public base URL of this controller, http(s) (required)",
    ),
    s(
        "LISTEN",
        "127.0.0.1:8080",
        "address to listen on (host:port or :port)",
    ),
    s("BACKEND", "docker", "worker backend: docker | k8s | local"),
    s(
        "A2A_AGENT_NAME",
        "a2a-worker-controller",
        "name in the Agent Card",
    ),
    s(
        "CONTROLLER_ID",
        "a2a-worker-controller",
        "owner label value; workers without it are never listed or stopped",
    ),
    Spec {
        name: "SENTRY_DSN",
        default: "",
        help: "Sentry DSN; failed operations are reported there when set",
        secret: true,
    },
    s("SENTRY_PROXY", "", "HTTP(S) proxy URL for reaching Sentry"),
    s("MAX_WORKERS", "0", "most workers at once (0 = no limit)"),
    s(
        "WORKER_READY_TIMEOUT",
        "60s",
        "how long create waits for a worker to answer (0 = do not wait)",
    ),
    s(
        "HTTP_HEAD_TIMEOUT",
        "10s",
        "a request head must arrive within this",
    ),
    s(
        "HTTP_BODY_TIMEOUT",
        "30s",
        "a request body must arrive within this",
    ),
    s(
        "HTTP_IDLE_TIMEOUT",
        "60s",
        "an idle keep-alive connection is closed after this",
    ),
    s(
        "MAX_CONNECTIONS",
        "1024",
        "most connections served at once (one thread each); more are answered 503",
    ),
    s(
        "WORKER_IMAGE",
        "",
        "worker image with an explicit tag or digest (required for docker and k8s)",
    ),
    s(
        "WORKER_PORT",
        "9090",
        "port the worker serves A2A on inside its container or pod",
    ),
    s(
        "WORKER_TOKEN_ENV",
        "INTERACTIVE_AUTH_TOKEN",
        "environment variable that carries the worker's token",
    ),
    s(
        "WORKER_ANTHROPIC_BASE_URL",
        DEFAULT_ANTHROPIC_BASE_URL,
        "ANTHROPIC_BASE_URL given to workers",
    ),
    s(
        "WORKER_ANTHROPIC_MODEL",
        DEFAULT_ANTHROPIC_MODEL,
        "ANTHROPIC_MODEL given to workers",
    ),
    s(
        "DOCKER_HOST",
        "unix:///var/run/docker.sock",
        "Docker engine socket (unix:// only)",
    ),
    s(
        "DOCKER_NETWORK",
        "",
        "network workers join; a2a_url then uses the container name",
    ),
    s(
        "WORKER_PUBLISH_HOST",
        "127.0.0.1",
        "host address worker ports are published on",
    ),
    s(
        "WORKER_MEMORY",
        "",
        "worker memory limit (bytes, or with k/m/g suffix)",
    ),
    s("WORKER_CPUS", "", "worker CPU limit (e.g. 1.5)"),
    s("WORKER_PIDS_LIMIT", "", "worker process limit"),
    s(
        "K8S_NAMESPACE",
        "",
        "namespace for worker pods (default: the service account's)",
    ),
    s(
        "K8S_WORKER_SERVICE",
        "a2a-workers",
        "headless service that gives workers DNS names",
    ),
    s("K8S_CLUSTER_DOMAIN", "cluster.local", "cluster DNS domain"),
    s("K8S_API_URL", "", "API server URL (default: in-cluster)"),
    s("K8S_CA_FILE", "", "CA bundle for K8S_API_URL"),
    s("K8S_TOKEN_FILE", "", "bearer token file for K8S_API_URL"),
    s(
        "K8S_CLIENT_CERT_FILE",
        "",
        "client certificate for K8S_API_URL",
    ),
    s("K8S_CLIENT_KEY_FILE", "", "client key for K8S_API_URL"),
    s(
        "K8S_POD_TEMPLATE",
        "",
        "JSON file merged into every worker pod",
    ),
    s(
        "LOCAL_WEZTERM",
        "/Applications/WezTerm.app/Contents/MacOS/wezterm",
        "absolute path of the wezterm program",
    ),
    s(
        "LOCAL_STATE_FILE",
        "~/.local/state/a2a-worker-controller/local-workers.json",
        "local backend's state file",
    ),
    s(
        "LOCAL_TASK_DIR",
        "",
        "directory of task files (required for local)",
    ),
    s(
        "LOCAL_COMMAND",
        "",
        "command a local worker's tab runs (required for local)",
    ),
];

fn flag_of(name: &str) -> String {
    name.to_ascii_lowercase().replace('_', "-")
}

fn spec_of_flag(flag: &str) -> Option<&'static Spec> {
    SPECS.iter().find(|s| flag_of(s.name) == flag)
}

/// The `--help` text: every setting with its flag and default.
pub fn help_text() -> String {
    let mut out = String::from(
        "a2a-worker-controller: create, list and stop A2A workers (docker, k8s, local)\n\n\
         Usage: a2a-worker-controller [flags]\n\n\
         Every setting is an environment variable and a flag: -name=v, --name v or --name=v.\n\
         Flags win over the environment.\n\n",
    );
    for spec in SPECS {
        let default = if spec.secret {
            String::from("(none; secret, never printed)")
        } else if spec.default.is_empty() {
            String::from("(none)")
        } else {
            spec.default.to_string()
        };
        out.push_str(&format!(
            "  -{:<27} {}\n      {}; default {}\n",
            flag_of(spec.name),
            spec.name,
            spec.help,
            default
        ));
    }
    out.push_str("\n  -help       this text\n  -version    version and git commit\n");
    out
}

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
        } else if let Some(spec) = SPECS.iter().find(|s| s.name == key) {
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
    settings.anthropic_auth_token = anthropic_auth_token;
    Ok(Command::Run(Box::new(settings)))
}

struct Raw(HashMap<&'static str, String>);

impl Raw {
    /// The value set by flag or environment, else the default; `""` means unset.
    fn get(&self, name: &'static str) -> String {
        match self.0.get(name) {
            Some(v) if !v.trim().is_empty() => v.trim().to_string(),
            _ => SPECS
                .iter()
                .find(|s| s.name == name)
                .map(|s| s.default.to_string())
                .unwrap_or_default(),
        }
    }

    fn optional(&self, name: &'static str) -> Option<String> {
        Some(self.get(name)).filter(|v| !v.is_empty())
    }

    fn required(&self, name: &'static str, why: &'static str) -> Result<String, Error> {
        self.optional(name).ok_or(Error::Missing { name, why })
    }

    fn number<T: std::str::FromStr>(&self, name: &'static str, what: &str) -> Result<T, Error> {
        let v = self.get(name);
        v.parse()
            .map_err(|_| invalid(name, format!("{v:?} is not {what}")))
    }

    /// A positive duration such as `10s` or `500ms`.
    fn duration(&self, name: &'static str) -> Result<Duration, Error> {
        let v = self.get(name);
        parse_duration(&v).filter(|d| !d.is_zero()).ok_or_else(|| {
            invalid(
                name,
                format!("{v:?} is not a positive duration such as 10s"),
            )
        })
    }

    fn optional_path(&self, name: &'static str) -> Result<Option<PathBuf>, Error> {
        self.optional(name)
            .map(|p| expand_home(name, &p))
            .transpose()
    }

    fn settings(&self) -> Result<Settings, Error> {
        // A2A_AUTH_TOKEN is secret: its value never appears in an error.
        let auth_token = self.required("A2A_AUTH_TOKEN", "")?;
        if auth_token.chars().count() < MIN_AUTH_TOKEN_LEN {
            return Err(invalid(
                "A2A_AUTH_TOKEN",
                format!(
                    "it has {} characters; at least {MIN_AUTH_TOKEN_LEN} are required",
                    auth_token.chars().count()
                ),
            ));
        }
        if auth_token.bytes().any(|b| !(0x21..=0x7e).contains(&b)) {
            return Err(invalid(
                "A2A_AUTH_TOKEN",
                "it must be printable ASCII without spaces (it travels in an HTTP header)".into(),
            ));
        }
        let public_url = http_url("A2A_PUBLIC_URL", &self.required("A2A_PUBLIC_URL", "")?)?;
        let listen = parse_listen(&self.get("LISTEN"))?;
        let backend = match self.get("BACKEND").as_str() {
            "docker" => BackendKind::Docker,
            "k8s" | "kubernetes" | "k3s" => BackendKind::K8s,
            "local" => BackendKind::Local,
            other => {
                return Err(invalid(
                    "BACKEND",
                    format!("{other:?} is not one of docker, k8s, local"),
                ))
            }
        };
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
        let mut settings = Settings {
            auth_token,
            public_url,
            listen,
            backend,
            agent_name: self.get("A2A_AGENT_NAME"),
            controller_id,
            sentry_dsn,
            sentry_proxy,
            max_workers: self.number("MAX_WORKERS", "a whole number")?,
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
            max_connections,
            http_head_timeout: self.duration("HTTP_HEAD_TIMEOUT")?,
            http_body_timeout: self.duration("HTTP_BODY_TIMEOUT")?,
            http_idle_timeout: self.duration("HTTP_IDLE_TIMEOUT")?,
            anthropic_auth_token: None,
            container: None,
            docker: None,
            k8s: None,
            local: None,
        };
        match backend {
            BackendKind::Docker => {
                settings.container = Some(self.container()?);
                settings.docker = Some(self.docker()?);
            }
            BackendKind::K8s => {
                settings.container = Some(self.container()?);
                settings.k8s = Some(self.k8s()?);
            }
            BackendKind::Local => settings.local = Some(self.local()?),
        }
        Ok(settings)
    }

    fn container(&self) -> Result<ContainerSettings, Error> {
        let image = self.required("WORKER_IMAGE", " for the docker and k8s backends")?;
        check_image(&image)?;
        let port: u16 = self.number("WORKER_PORT", "a port number")?;
        if port == 0 {
            return Err(invalid("WORKER_PORT", "0 is not a port".into()));
        }
        let token_env = self.get("WORKER_TOKEN_ENV");
        if token_env.is_empty()
            || token_env.as_bytes()[0].is_ascii_digit()
            || !token_env
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_')
        {
            return Err(invalid(
                "WORKER_TOKEN_ENV",
                format!("{token_env:?} is not an environment variable name"),
            ));
        }
        Ok(ContainerSettings {
            image,
            port,
            token_env,
            anthropic_base_url: self.get("WORKER_ANTHROPIC_BASE_URL"),
            anthropic_model: self.get("WORKER_ANTHROPIC_MODEL"),
        })
    }

    fn docker(&self) -> Result<DockerSettings, Error> {
        let host = self.get("DOCKER_HOST");
        let socket = match host.strip_prefix("unix://") {
            Some(path) if path.starts_with('/') => PathBuf::from(path),
            _ => {
                return Err(invalid(
                    "DOCKER_HOST",
                    format!(
                        "{host:?} is not unix:///absolute/path (only Unix sockets are supported)"
                    ),
                ))
            }
        };
        let publish_host: IpAddr = self.number("WORKER_PUBLISH_HOST", "an IP address")?;
        if publish_host.is_unspecified() {
            return Err(invalid(
                "WORKER_PUBLISH_HOST",
                format!("{publish_host} means all interfaces; workers are published on one address only (e.g. 127.0.0.1)"),
            ));
        }
        let network = self.optional("DOCKER_NETWORK");
        if let Some(n) = &network {
            if n.bytes()
                .any(|b| !(b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.')))
            {
                return Err(invalid(
                    "DOCKER_NETWORK",
                    format!("{n:?} is not a network name"),
                ));
            }
        }
        let memory_bytes = self
            .optional("WORKER_MEMORY")
            .map(|m| {
                parse_bytes(&m).ok_or_else(|| {
                    invalid(
                        "WORKER_MEMORY",
                        format!("{m:?} is not a size such as 512m or 2g"),
                    )
                })
            })
            .transpose()?;
        let nano_cpus = self
            .optional("WORKER_CPUS")
            .map(|c| match c.parse::<f64>() {
                Ok(v) if v > 0.0 && v <= 1024.0 => Ok((v * 1e9).round() as i64),
                _ => Err(invalid(
                    "WORKER_CPUS",
                    format!("{c:?} is not a CPU count such as 1.5"),
                )),
            })
            .transpose()?;
        let pids_limit = self
            .optional("WORKER_PIDS_LIMIT")
            .map(|p| match p.parse::<i64>() {
                Ok(v) if v > 0 => Ok(v),
                _ => Err(invalid(
                    "WORKER_PIDS_LIMIT",
                    format!("{p:?} is not a positive number"),
                )),
            })
            .transpose()?;
        Ok(DockerSettings {
            socket,
            network,
            publish_host,
            memory_bytes,
            nano_cpus,
            pids_limit,
        })
    }

    fn k8s(&self) -> Result<K8sSettings, Error> {
        let api_url = self
            .optional("K8S_API_URL")
            .map(|u| http_url("K8S_API_URL", &u))
            .transpose()?;
        let k = K8sSettings {
            namespace: self.optional("K8S_NAMESPACE"),
            worker_service: self.get("K8S_WORKER_SERVICE"),
            cluster_domain: self.get("K8S_CLUSTER_DOMAIN"),
            ca_file: self.optional_path("K8S_CA_FILE")?,
            token_file: self.optional_path("K8S_TOKEN_FILE")?,
            client_cert_file: self.optional_path("K8S_CLIENT_CERT_FILE")?,
            client_key_file: self.optional_path("K8S_CLIENT_KEY_FILE")?,
            pod_template: self.optional_path("K8S_POD_TEMPLATE")?,
            api_url,
        };
        if k.api_url.is_some() {
            if k.ca_file.is_none() {
                return Err(Error::Missing {
                    name: "K8S_CA_FILE",
                    why: " when K8S_API_URL is set",
                });
            }
            let cert_pair = k.client_cert_file.is_some() && k.client_key_file.is_some();
            if k.token_file.is_none() && !cert_pair {
                return Err(Error::Missing {
                    name: "K8S_TOKEN_FILE",
                    why: " (or K8S_CLIENT_CERT_FILE with K8S_CLIENT_KEY_FILE) when K8S_API_URL is set",
                });
            }
        }
        Ok(k)
    }

    fn local(&self) -> Result<LocalSettings, Error> {
        let wezterm = PathBuf::from(self.get("LOCAL_WEZTERM"));
        if !wezterm.is_absolute() {
            return Err(invalid(
                "LOCAL_WEZTERM",
                format!(
                    "{:?} must be an absolute path (under launchd wezterm is not on PATH)",
                    wezterm
                ),
            ));
        }
        let state_file = expand_home("LOCAL_STATE_FILE", &self.get("LOCAL_STATE_FILE"))?;
        let task_dir = expand_home(
            "LOCAL_TASK_DIR",
            &self.required("LOCAL_TASK_DIR", " for the local backend")?,
        )?;
        Ok(LocalSettings {
            wezterm,
            state_file,
            task_dir,
            command: self.required("LOCAL_COMMAND", " for the local backend")?,
        })
    }
}

fn invalid(name: &'static str, reason: String) -> Error {
    Error::Invalid { name, reason }
}

/// An `http://` or `https://` URL with a host; returned without a trailing slash.
fn http_url(name: &'static str, value: &str) -> Result<String, Error> {
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
fn parse_listen(value: &str) -> Result<SocketAddr, Error> {
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
fn check_image(image: &str) -> Result<(), Error> {
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
fn parse_bytes(text: &str) -> Option<i64> {
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

fn expand_home(name: &'static str, path: &str) -> Result<PathBuf, Error> {
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

#[cfg(test)]
mod tests {
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
    fn defaults_and_flag_forms() {
        let s = run(&[], base()).unwrap();
        assert_eq!(s.listen.to_string(), "127.0.0.1:8080");
        assert_eq!(s.public_url, "http://localhost:8080");
        assert_eq!(s.backend, BackendKind::Docker);
        assert_eq!(s.worker_ready_timeout, Duration::from_secs(60));
        let c = s.container.unwrap();
        assert_eq!(
            (c.port, c.token_env.as_str()),
            (9090, "INTERACTIVE_AUTH_TOKEN")
        );
        assert_eq!(
            s.docker.unwrap().socket,
            PathBuf::from("/var/run/docker.sock")
        );

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
                why: ""
            }
        );
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
        assert!(s.container.is_none() && s.local.is_some());
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
    fn help_lists_every_setting_with_its_default() {
        let Command::Help(text) = parse(["--help".to_string()], Vec::new()).unwrap() else {
            panic!()
        };
        for spec in SPECS {
            assert!(text.contains(spec.name), "{}", spec.name);
            assert!(text.contains(&format!("-{}", flag_of(spec.name))));
            if !spec.default.is_empty() {
                assert!(text.contains(spec.default), "{}", spec.name);
            }
            // No secret has a default that could leak.
            assert!(!spec.secret || spec.default.is_empty());
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_bytes("512m"), Some(512 << 20));
        assert_eq!(parse_bytes("2g"), Some(2 << 30));
        assert_eq!(parse_bytes("1k"), None); // below Docker's 6 MiB minimum
        assert_eq!(parse_bytes("x"), None);
    }
}
