//! What the settings are, once read: the types every layer above is handed. Reading and
//! checking them is `raw.rs`'s (and `auth.rs`'s, `backends.rs`'s); `specs.rs` lists them.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

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
    /// `MCP`: whether `/mcp` is served.
    pub mcp: bool,
    /// `MCP_ALLOWED_ORIGINS`: browser origins that may call `/mcp` besides the controller's own.
    pub mcp_allowed_origins: Vec<String>,
    /// The selected backend with exactly the settings it needs.
    pub backend: BackendSettings,
    /// `WORKER_TEMPLATES_FILE`: named templates beside (or instead of) the settings' `default`.
    pub templates_file: Option<PathBuf>,
    /// `WORKSPACE_TTL`: how long a task's workspace outlives its last worker (`None`: until
    /// deleted).
    pub workspace_ttl: Option<Duration>,
    /// `WORKER_POOL`: the default template's warm pool (members kept started per controller id).
    pub pool: PoolSize,
    /// `POOL_DEMAND_*`: how a pool between a minimum and a maximum follows the demand.
    pub pool_demand: PoolDemand,
    /// `POOL_KEY_FILE`: the key pool members' activation secrets are derived from (every
    /// replica of one controller id reads the same); `None`: derived from `A2A_AUTH_TOKEN`.
    pub pool_key_file: Option<PathBuf>,
    /// `POOL_ACTIVATION_TIMEOUT`: how long a member has to answer its activation.
    pub pool_activation_timeout: Duration,
    /// `EGRESS_*`: the fence and the egress proxy (`a2a-worker-controller egress`).
    pub egress: EgressSettings,
}

/// How a pool that follows the demand sizes itself (`control::pool::demand` applies it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolDemand {
    /// `POOL_DEMAND_WINDOW`: the claim rate is taken over this window.
    pub window: Duration,
    /// `POOL_MEMBER_START`: how long a member takes to start (claims that come meanwhile
    /// would be cold without a member ready for each).
    pub member_start: Duration,
    /// `POOL_IDLE_AFTER`: with no create of the template for this long, its pool sinks to its
    /// minimum.
    pub idle_after: Duration,
}

/// `EGRESS_*`: what fenced workers are given (the controller's side) and how the egress
/// proxy runs (its side: the same settings, so both read one environment file).
#[derive(Debug, Clone)]
pub struct EgressSettings {
    /// Where fenced workers reach the proxy and the key of their placeholders; `None` when
    /// `EGRESS_PROXY_URL` is unset (a fenced template is then refused).
    pub fence: Option<Fence>,
    /// `EGRESS_KEY_FILE` or derived from `A2A_AUTH_TOKEN`; `None` with neither.
    pub key: Option<super::egress::EgressKey>,
    /// `EGRESS_NETWORK`: the internal Docker network fenced containers join.
    pub network: String,
    /// `EGRESS_LISTEN`: where the proxy listens.
    pub listen: SocketAddr,
    /// `EGRESS_CONTROLLER_URL`: the controller the proxy asks whether a worker runs, and where.
    pub controller_url: String,
    /// `EGRESS_MODEL_URL`: the model route's upstream (`None`: no model route).
    pub model_url: Option<String>,
    /// `EGRESS_CA_FILE`: PEM roots upstream certificates must chain to (`None`: public roots).
    pub ca_file: Option<PathBuf>,
    /// `EGRESS_MAX_CONNECTIONS`: connections (tunnels included) the proxy holds at once.
    pub max_connections: usize,
    /// `EGRESS_RECHECK`: how long the proxy trusts the controller's word that a worker runs.
    pub recheck: Duration,
}

/// What a fenced worker is given: the proxy's URL (as workers reach it) and the key its
/// placeholder credential is derived from.
#[derive(Debug, Clone)]
pub struct Fence {
    pub proxy_url: String,
    pub key: super::egress::EgressKey,
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

/// How long workers live: `WORKER_TTL` and `MAX_WORKER_TTL` (`None` for 0), what their TTL's
/// end does (`WORKER_ON_EXPIRY`), and how long one stays suspended (`SUSPENDED_TTL`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Lifetime {
    pub default_ttl: Option<Duration>,
    pub max_ttl: Option<Duration>,
    pub on_expiry: OnExpiry,
    /// How long a suspended worker is kept before the reaper stops it for good (`None`:
    /// until stopped).
    pub suspended_ttl: Option<Duration>,
}

/// What the end of a worker's TTL does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum OnExpiry {
    /// The reaper stops it for good.
    #[default]
    Stop,
    /// The reaper suspends it (it keeps its files and identity; resume runs it again).
    Suspend,
}

impl OnExpiry {
    /// As the settings and templates write it: `stop` or `suspend`.
    pub fn parse(text: &str) -> Option<OnExpiry> {
        match text {
            "stop" => Some(OnExpiry::Stop),
            "suspend" => Some(OnExpiry::Suspend),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            OnExpiry::Stop => "stop",
            OnExpiry::Suspend => "suspend",
        }
    }
}

/// The selected backend and its settings. Made once at startup and kept whole: the size
/// between its variants costs nothing, so they are not boxed.
#[derive(Debug, Clone)]
#[allow(clippy::large_enum_variant)]
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
    /// Fenced workers' proxy and key (`EGRESS_PROXY_URL`); `None`: no worker is fenced.
    pub fence: Option<Fence>,
    /// `WORKSPACE_COPY_IMAGE`: the image whose `copy-files` subcommand copies a workspace (the
    /// controller's own), in a container (Docker) or a Job (Kubernetes, a class that does not
    /// clone); `None`: such copies are refused.
    pub copy_image: Option<String>,
}

#[derive(Debug, Clone)]
pub struct DockerSettings {
    /// Path of the engine's Unix socket (from `DOCKER_HOST=unix://...`).
    pub socket: PathBuf,
    pub network: Option<String>,
    pub publish_host: IpAddr,
    pub pids_limit: Option<i64>,
    /// `EGRESS_NETWORK`: the internal network fenced workers join.
    pub egress_network: String,
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
    /// `EGRESS_NETWORK`: the NetworkPolicy that fences workers (checked, never made).
    pub egress_policy: String,
    /// `K8S_CLONE_STORAGE_CLASSES`: the storage classes whose provisioner clones a claim from
    /// another (`dataSource`): a workspace of one of them is copied by a clone.
    pub clone_storage_classes: Vec<String>,
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
    /// Fenced tabs' proxy and key (`EGRESS_PROXY_URL`): the tab holds its placeholder, not
    /// the model key (a tab cannot be fenced: its allowlist is advisory).
    pub fence: Option<Fence>,
}

pub const MIN_AUTH_TOKEN_LEN: usize = 16;

/// The largest warm pool one template may ask for.
pub const MAX_POOL: u32 = 64;

/// A template's warm pool: `min == max` is a fixed pool (`pool: N`), `min < max` one that
/// follows the demand (`pool: {"min", "max"}`), `max == 0` none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PoolSize {
    pub min: u32,
    pub max: u32,
}

impl PoolSize {
    /// No pool.
    pub const NONE: PoolSize = PoolSize { min: 0, max: 0 };

    /// A fixed pool of `n` members.
    pub fn fixed(n: u32) -> PoolSize {
        PoolSize { min: n, max: n }
    }

    /// Whether the template keeps a pool at all.
    pub fn is_kept(&self) -> bool {
        self.max > 0
    }

    /// Whether its size follows the demand (between `min` and `max`).
    pub fn follows_demand(&self) -> bool {
        self.min < self.max
    }

    /// Checks the bounds: `min` at most `max`, `max` at most [`MAX_POOL`].
    pub fn check(&self) -> Result<(), String> {
        if self.min > self.max {
            return Err(format!("min {} is more than max {}", self.min, self.max));
        }
        if self.max > MAX_POOL {
            return Err(format!("{} is more than {} members", self.max, MAX_POOL));
        }
        Ok(())
    }

    /// Reads `N`, or `MIN-MAX` (the default template's `WORKER_POOL`).
    pub fn parse(text: &str) -> Option<PoolSize> {
        let size = match text.trim().split_once('-') {
            Some((min, max)) => PoolSize {
                min: min.trim().parse().ok()?,
                max: max.trim().parse().ok()?,
            },
            None => PoolSize::fixed(text.trim().parse().ok()?),
        };
        Some(size)
    }
}

impl std::fmt::Display for PoolSize {
    /// `4`, or `0-8` for one that follows the demand.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.follows_demand() {
            write!(f, "{}-{}", self.min, self.max)
        } else {
            write!(f, "{}", self.max)
        }
    }
}
