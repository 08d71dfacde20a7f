//! a2a-worker-controller: creates, lists and stops A2A workers, one per task, on a backend
//! behind one seam. Read top to bottom, the modules go from the outside in.

/// A2A v1.0 wire types and the JSON-RPC error object.
pub mod a2a;
/// Bearer authentication and credential stripping.
pub mod auth;
/// The backend seam: the trait every backend implements.
pub mod backend;
/// The Agent Card.
pub mod card;
/// Control operations over the backend seam.
pub mod control;
/// The Docker backend.
pub mod docker;
/// The Docker Engine API client.
pub mod docker_engine;
/// The HTTP layer behind a small request/response interface.
pub mod http;
/// Ownership labels on containers and pods.
pub mod labels;
/// Prometheus metrics.
pub mod metrics;
/// A2A v1.0 JSON-RPC: envelope, service parameters, methods.
pub mod protocol;
/// Which route reaches what; authentication wrapped around `/a2a`.
pub mod routes;
/// Error events to Sentry.
pub mod sentry;
/// Settings from flags and environment, validated once at startup.
pub mod settings;
/// Recent control tasks, bounded, in memory.
pub mod tasks;
/// UTC timestamps and durations.
pub mod time;
/// Tokens, random ids and constant-time comparison.
pub mod token;
/// A ureq transport over a Unix socket (for the Docker Engine).
pub mod unix_socket;
/// The environment a container or pod worker receives.
pub mod worker_env;

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::backend::Backend;
use crate::settings::Settings;

/// How long in-flight requests may take to finish after SIGTERM or SIGINT.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// Why the controller could not run.
#[derive(Debug)]
pub enum Error {
    Settings(settings::Error),
    Http(http::Error),
    Backend(String),
    Sentry(String),
    Signals(std::io::Error),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Settings(e) => e.fmt(f),
            Error::Http(e) => e.fmt(f),
            Error::Backend(e) => f.write_str(e),
            Error::Sentry(e) => write!(f, "sentry: {e}"),
            Error::Signals(e) => write!(f, "cannot install signal handlers: {e}"),
        }
    }
}

impl std::error::Error for Error {}

/// A controller that is serving.
pub struct Running {
    addr: SocketAddr,
    serving: http::Serving,
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
    let metrics = Arc::new(metrics::Metrics::new());
    let sentry = match &settings.sentry_dsn {
        Some(dsn) => Some(Arc::new(
            sentry::Sentry::start(dsn, settings.sentry_proxy.as_deref()).map_err(Error::Sentry)?,
        )),
        None => None,
    };
    let control = Arc::new(control::Control::new(
        backend,
        Arc::clone(&metrics),
        sentry,
        settings.max_workers,
    ));
    let tasks = Arc::new(tasks::TaskStore::new(tasks::DEFAULT_CAPACITY));
    let routes = routes::Routes {
        protocol: protocol::Protocol::new(Arc::clone(&control), tasks),
        control,
        card: card::AgentCard::new(&settings.agent_name, &settings.public_url),
        metrics,
        auth_token: settings.auth_token.clone(),
    };
    let server = http::Server::bind(settings.listen).map_err(Error::Http)?;
    let addr = server.local_addr().unwrap_or(settings.listen);
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
    Ok(Running { addr, serving })
}

/// Runs the controller until SIGTERM or SIGINT.
pub fn run(settings: &Settings) -> Result<(), Error> {
    use signal_hook::consts::{SIGINT, SIGTERM};

    warn_about(settings);
    let mut signals =
        signal_hook::iterator::Signals::new([SIGTERM, SIGINT]).map_err(Error::Signals)?;
    let backend = backend::from_settings(settings).map_err(Error::Backend)?;
    let name = backend.name();
    let running = start(settings, backend)?;
    log::info!(
        "{} listening on {} (backend {name}, controller id {:?}, public URL {})",
        settings::version_text(),
        running.addr(),
        settings.controller_id,
        settings.public_url
    );
    if let Some(signal) = signals.forever().next() {
        log::info!("signal {signal} received: finishing requests in flight");
    }
    if running.shutdown() {
        log::info!("stopped");
    } else {
        log::warn!(
            "stopped with requests still in flight after {}s",
            SHUTDOWN_GRACE.as_secs()
        );
    }
    Ok(())
}

fn warn_about(settings: &Settings) {
    if !settings.listen.ip().is_loopback() {
        log::warn!(
            "LISTEN {} is not loopback: the endpoint carries bearer tokens in clear text and belongs behind TLS",
            settings.listen
        );
    }
    if settings.container.is_some() && settings.anthropic_auth_token.is_none() {
        log::warn!(
            "ANTHROPIC_AUTH_TOKEN is not set in the controller's environment: workers will start but answer every turn with \"Not logged in\""
        );
    }
}

/// env_logger from `RUST_LOG` (default `info`). The HTTP client crates are held at `info`
/// whatever `RUST_LOG` says: their debug output would show request bodies' neighbourhood
/// (headers, URLs) of engine calls, and nothing of theirs is worth that risk.
pub fn init_logging() {
    let mut builder =
        env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info"));
    for module in ["ureq", "ureq_proto", "rustls"] {
        builder.filter_module(module, log::LevelFilter::Info);
    }
    builder.format(|buf, record| {
        use std::io::Write;
        writeln!(
            buf,
            "{} {:<5} {}: {}",
            time::rfc3339_millis(time::now_millis()),
            record.level(),
            record.target(),
            record.args()
        )
    });
    let _ = builder.try_init();
}
