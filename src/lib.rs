//! a2a-worker-controller: creates, lists and stops A2A workers, one per task, on a backend
//! behind one seam. This file is the composition root: settings → backend (and, for one
//! replica of several, its discovery) → control → protocol → routes → http. The layers, from
//! the outside in (a module uses only what is below it; `tests/integration/architecture.rs`
//! checks it):
//!
//! ```text
//! lib.rs, main.rs, cli/     composition root; the command line for people
//! routes, ui/               the route table and the one door every binding comes through
//! a2a/ (bindings)           JSON-RPC and HTTP+JSON: they only translate
//! a2a/service, auth/        the A2A service; who is calling and their fair share
//! replicas/, push/          one replica of several; webhooks
//! control/                  the operations over the seam
//! backend/                  the seam, its abilities, one folder per backend
//! settings/, http/          flags and environment; the HTTP/1.1 server
//! metrics, time, token, ... leaf utilities (and replicas/discovery.rs, a seam of its own)
//! ```
//!
//! The map of every file is in docs/development.md (the architecture test holds it to the
//! tree). Nothing above `backend/` names a backend: [`build`] here is the one place that does.
//! The public surface is deliberate: the binary, the echo worker, integration tests and fuzz
//! targets use the `pub` modules below; everything else is crate-private.
#![forbid(unsafe_code)]

pub mod a2a;
pub mod auth;
pub mod backend;
mod base64;
pub mod cli;
pub mod control;
pub mod egress;
mod fork;
mod hash;
pub mod http;
mod json;
pub mod malloc;
pub mod mcp;
mod metrics;
mod pem;
mod process;
pub mod push;
pub mod replicas;
mod routes;
mod secret_file;
mod sentry;
pub mod settings;
#[doc(hidden)]
pub mod testing;
pub mod time;
pub mod token;
mod ui;

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::backend::docker::DockerBackend;
use crate::backend::k8s::K8sBackend;
use crate::backend::local::LocalBackend;
use crate::backend::Backend;
use crate::settings::{BackendSettings, Settings};

pub use self::process::{init_logging, run};

/// How long in-flight requests may take to finish after SIGTERM or SIGINT.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// Why the controller could not run.
#[derive(Debug)]
pub enum Error {
    Http(http::Error),
    /// The callers file or the OIDC issuer is unusable (one line naming the setting).
    Auth(String),
    /// The Kubernetes backend's credentials or pod template are unusable.
    K8s(backend::k8s::api::ConfigError),
    /// The local backend's program, task directory or state file is unusable.
    Local(backend::local::ConfigError),
    /// The backend's engine refuses the workers this configuration would start (the
    /// startup dry run): one line naming the setting.
    Refused(String),
    Sentry(sentry::Error),
    Signals(std::io::Error),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Http(e) => e.fmt(f),
            Error::Auth(why) => f.write_str(why),
            Error::K8s(e) => e.fmt(f),
            Error::Local(e) => e.fmt(f),
            Error::Refused(why) => f.write_str(why),
            Error::Sentry(e) => write!(f, "sentry: {e}"),
            Error::Signals(e) => write!(f, "cannot install signal handlers: {e}"),
        }
    }
}

impl std::error::Error for Error {}

/// What the settings select: the backend, and where the controller's replicas are when it is
/// one of several.
pub struct Built {
    pub backend: Arc<dyn Backend>,
    pub replicas: Option<Arc<dyn replicas::Discovery>>,
}

/// Builds the backend the settings select, and its replicas' discovery: the one place that
/// names a backend. The match is exhaustive, so a new [`BackendSettings`] variant does not
/// compile until it is built here.
pub fn build(settings: &Settings) -> Result<Built, Error> {
    match &settings.backend {
        BackendSettings::Docker { container, docker } => Ok(Built {
            backend: Arc::new(DockerBackend::new(
                &settings.controller_id,
                container.clone(),
                docker.clone(),
                settings.worker_ready_timeout,
                settings.anthropic_auth_token.clone(),
            )),
            replicas: None,
        }),
        BackendSettings::K8s { container, k8s } => {
            let backend = Arc::new(
                K8sBackend::new(
                    &settings.controller_id,
                    container.clone(),
                    k8s.clone(),
                    settings.worker_ready_timeout,
                    settings.anthropic_auth_token.clone(),
                    &process_env,
                    std::path::Path::new(backend::k8s::api::SERVICE_ACCOUNT_DIR),
                )
                .map_err(Error::K8s)?,
            );
            Ok(Built {
                replicas: backend.discovery(),
                backend,
            })
        }
        BackendSettings::Local(local) => Ok(Built {
            backend: Arc::new(LocalBackend::new(local, &process_env).map_err(Error::Local)?),
            replicas: None,
        }),
    }
}

/// The backend alone ([`build`]).
pub fn build_backend(settings: &Settings) -> Result<Arc<dyn Backend>, Error> {
    build(settings).map(|built| built.backend)
}

/// The backend `check` asks: the same, but one that only looks beside a controller that may
/// be running with these settings (the local backend reads its state file without its lock).
pub fn build_backend_for_check(settings: &Settings) -> Result<Arc<dyn Backend>, Error> {
    match &settings.backend {
        BackendSettings::Local(local) => Ok(Arc::new(
            LocalBackend::inspect(local, &process_env).map_err(Error::Local)?,
        )),
        _ => build_backend(settings),
    }
}

/// The worker templates: `WORKER_TEMPLATES_FILE` over the settings' `default` (or `default`
/// alone), each accepted by `backend` (a program that exists, a pod template by the rules);
/// an unusable file or template is one line naming the template and the field.
pub fn open_templates(
    settings: &Settings,
    backend: &Arc<dyn Backend>,
) -> Result<Arc<settings::templates::TemplatesFile>, Error> {
    use settings::templates::TemplatesFile;
    let judge = Arc::clone(backend);
    let keyed = settings.pool_key_file.is_some() || settings.auth_token.is_some();
    let accepts = Box::new(move |t: &backend::Template| {
        if t.pool.is_kept() && judge.abilities().pools.is_none() {
            return Err(format!(
                "pool: the {} backend keeps no warm pools; remove pool",
                judge.kind()
            ));
        }
        if t.pool.is_kept() && !keyed {
            return Err("pool: a warm pool needs a key its members' secrets come from: set POOL_KEY_FILE (or A2A_AUTH_TOKEN, from which it is derived otherwise)".into());
        }
        judge
            .validate(backend::Subject::Template(t))
            .map_err(|refused| refused.to_string())
    });
    let default = settings.default_template();
    let file = match &settings.templates_file {
        Some(path) => TemplatesFile::open(path.clone(), default, accepts).map_err(|why| {
            Error::Refused(format!("setting WORKER_TEMPLATES_FILE is invalid: {why}"))
        })?,
        None => TemplatesFile::fixed(default, accepts).map_err(Error::Refused)?,
    };
    Ok(Arc::new(file))
}

/// A variable of this process's environment; empty counts as unset. Backends read their
/// environment (in-cluster credentials, WezTerm's socket) through this, so tests can pass
/// their own.
fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// A controller that is serving.
pub struct Running {
    addr: SocketAddr,
    serving: http::Serving,
    /// Dropped at shutdown: the reaper stops before its next pass.
    _reaper: control::Reaper,
    /// Dropped at shutdown: the warm pool stops after its pass (its members stay, for the
    /// next start to adopt).
    _pool: Option<control::pool::PoolHandle>,
}

impl Running {
    /// The address actually bound (useful with port 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting, lets in-flight requests finish within [`SHUTDOWN_GRACE`]; returns
    /// whether they all did.
    pub fn shutdown(self) -> bool {
        self.serving.shutdown(SHUTDOWN_GRACE)
    }
}

/// Wires settings, a backend and the HTTP server together and starts serving.
pub fn start(settings: &Settings, backend: Arc<dyn Backend>) -> Result<Running, Error> {
    let templates = open_templates(settings, &backend)?;
    start_with(
        settings,
        Built {
            backend,
            replicas: None,
        },
        templates,
    )
}

/// The same, as one replica of several, found by `replicas`.
pub fn start_replica(
    settings: &Settings,
    backend: Arc<dyn Backend>,
    replicas: Arc<dyn replicas::Discovery>,
) -> Result<Running, Error> {
    let templates = open_templates(settings, &backend)?;
    let replicas = Some(replicas);
    start_with(settings, Built { backend, replicas }, templates)
}

/// The same, with the templates read already.
pub fn start_with(
    settings: &Settings,
    built: Built,
    templates: Arc<settings::templates::TemplatesFile>,
) -> Result<Running, Error> {
    let Built { backend, replicas } = built;
    let (credentials, warnings) = auth::Authenticator::new(settings).map_err(Error::Auth)?;
    for w in warnings {
        log::warn!("{w}");
    }
    for line in credentials.describe() {
        log::info!("callers authenticate by {line}");
    }
    let metrics = Arc::new(metrics::Metrics::new());
    let sentry = match &settings.sentry_dsn {
        Some(dsn) => Some(Arc::new(
            sentry::Sentry::start(dsn, settings.sentry_proxy.as_deref()).map_err(Error::Sentry)?,
        )),
        None => None,
    };
    let pool = start_pool(settings, &backend, &templates, &metrics)?;
    let whois = control::egress::Whois::of(settings, &backend);
    let mut control = control::Control::new(
        backend,
        Arc::clone(&metrics),
        sentry,
        settings.max_workers,
        templates,
    )
    .with_max_watchers(settings.max_watchers)
    .with_workspace_ttl(settings.workspace_ttl);
    if let Some(p) = &pool {
        control = control.with_pool(Arc::clone(p.pool()));
    }
    let control = Arc::new(control);
    let reaper = control::Reaper::start(Arc::clone(&control), settings.reap_interval);
    let replicas = replicas.map(|found| {
        let r = replicas::Replicas::new(
            found.own(),
            settings.listen.port(),
            Box::new(move || found.replicas()),
        );
        log::info!(
            "one replica of several, at {}: tasks of the others are relayed to them",
            r.own()
        );
        Arc::new(r)
    });
    let replica_ip = replicas.as_ref().map(|r| r.own());
    let service = a2a_service(settings, &control, &metrics, replicas);
    let mcp_control = Arc::clone(&control);
    let server = http::Server::bind(settings.listen).map_err(Error::Http)?;
    let addr = server.local_addr().unwrap_or(settings.listen);
    let routes = routes::Routes {
        jsonrpc: a2a::JsonRpc::new(Arc::clone(&service)),
        rest: a2a::Rest::new(service),
        control,
        card: a2a::card::AgentCard::new(&settings.agent_name, &settings.public_url, settings.mcp),
        metrics,
        ui: settings.ui,
        credentials,
        replica_ip,
        limits: caller_limits(settings),
        turns: auth::turns::Turns::per_core(),
        whois,
        mcp: settings.mcp.then(|| routes::McpDoor {
            service: mcp::Mcp::new(Arc::clone(&mcp_control), &settings.agent_name),
            origins: routes::Origins::new(
                &settings.public_url,
                addr.port(),
                &settings.mcp_allowed_origins,
            ),
        }),
    };
    let limits = http::Limits {
        max_connections: settings.max_connections,
        head_timeout: settings.http_head_timeout,
        body_timeout: settings.http_body_timeout,
        idle_timeout: settings.http_idle_timeout,
        ..http::Limits::default()
    };
    let serving = server
        .serve(Arc::new(routes), limits)
        .map_err(Error::Http)?;
    Ok(Running {
        addr,
        serving,
        _reaper: reaper,
        _pool: pool,
    })
}

/// The warm pools, started when the backend keeps them and a key is there (`None` else).
fn start_pool(
    settings: &Settings,
    backend: &Arc<dyn Backend>,
    templates: &Arc<settings::templates::TemplatesFile>,
    metrics: &Arc<metrics::Metrics>,
) -> Result<Option<control::pool::PoolHandle>, Error> {
    let (Some(_), Some((key, source))) = (
        backend.abilities().pools,
        control::pool::PoolKey::from_settings(settings).map_err(Error::Refused)?,
    ) else {
        return Ok(None);
    };
    let pooled: Vec<String> = templates
        .current()
        .all()
        .filter(|t| t.pool.is_kept())
        .map(|t| format!("{} ({})", t.name, t.pool))
        .collect();
    if !pooled.is_empty() {
        log::info!(
            "warm pools: {}; members' key {source}, id {}",
            pooled.join(", "),
            key.id()
        );
    }
    let pool = control::pool::Pool::new(
        Arc::clone(backend),
        Arc::clone(templates),
        Arc::clone(metrics),
        &settings.controller_id,
        key,
        settings.pool_activation_timeout,
        control::pool::demand::Rule::of(&settings.pool_demand),
    );
    Ok(Some(control::pool::Pool::start(&pool)))
}

/// The A2A service over `control`: its task store, its webhooks, its extended card, and the
/// other replicas when it is one of several.
fn a2a_service(
    settings: &Settings,
    control: &Arc<control::Control>,
    metrics: &Arc<metrics::Metrics>,
    replicas: Option<Arc<replicas::Replicas>>,
) -> Arc<a2a::Service> {
    let tasks = Arc::new(a2a::TaskStore::new(a2a::tasks::DEFAULT_CAPACITY));
    let deployment = a2a::card::Deployment {
        backend: control.backend().kind().as_str(),
        max_workers: settings.max_workers,
        default_ttl_secs: settings.lifetime.default_ttl.map(|t| t.as_secs()),
        max_ttl_secs: settings.lifetime.max_ttl.map(|t| t.as_secs()),
        ready_timeout_secs: settings.worker_ready_timeout.as_secs(),
        reap_interval_secs: settings.reap_interval.as_secs(),
        commit: env!("A2A_WC_GIT_COMMIT"),
        mcp: settings.mcp,
    };
    let extended =
        a2a::card::extended_card(&settings.agent_name, &settings.public_url, &deployment);
    let push = Arc::new(push::Pusher::start(
        settings.push.clone(),
        Arc::clone(metrics),
    ));
    Arc::new(a2a::Service::new(Arc::clone(control), tasks, push, extended).with_replicas(replicas))
}

/// What each caller may hold at once (admins their own).
fn caller_limits(settings: &Settings) -> Arc<auth::limits::CallerLimits> {
    auth::limits::CallerLimits::new(
        auth::limits::Bounds {
            requests: settings.max_caller_requests,
            streams: settings.max_caller_streams,
        },
        auth::limits::Bounds {
            requests: settings.max_admin_requests,
            streams: settings.max_admin_streams,
        },
    )
}
