//! The controller as a process: its startup (warnings, the backend and templates built, each
//! template's startup check, the server started), its run until SIGTERM or SIGINT, and its
//! logging.

use std::sync::Arc;

use crate::settings::{self, Settings};
use crate::{backend, build, open_templates, start_with, time, Error, SHUTDOWN_GRACE};

/// Runs the controller until SIGTERM or SIGINT.
pub fn run(settings: &Settings) -> Result<(), Error> {
    use signal_hook::consts::{SIGINT, SIGTERM};

    warn_about(settings);
    let mut signals =
        signal_hook::iterator::Signals::new([SIGTERM, SIGINT]).map_err(Error::Signals)?;
    let built = build(settings)?;
    let backend = Arc::clone(&built.backend);
    let templates = open_templates(settings, &backend)?;
    let current = templates.current();
    for t in current.all() {
        let refused = backend.check(backend::Check::Startup(t));
        if let Some(f) = refused.into_iter().find(|f| !f.ok) {
            // One line that names the template, once.
            let named = f.what.contains(&format!("template {:?}", t.name))
                || f.what.contains(&format!("template {} ", t.name));
            return Err(Error::Refused(if named {
                f.what
            } else {
                format!("template {:?}: {}", t.name, f.what)
            }));
        }
    }
    log::info!(
        "worker templates: {}",
        current
            .all()
            .map(|t| t.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let kind = backend.kind();
    let running = start_with(settings, built, templates)?;
    log::info!(
        "{} listening on {} (backend {kind}, controller id {:?}, public URL {})",
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
    for warning in &settings.warnings {
        log::warn!("{warning}");
    }
    if !settings.listen.ip().is_loopback() {
        log::warn!(
            "LISTEN {} is not loopback: the endpoint carries bearer tokens in clear text and belongs behind TLS",
            settings.listen
        );
    }
    if settings.backend.container().is_some() && settings.anthropic_auth_token.is_none() {
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
