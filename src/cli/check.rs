//! `check`: the controller's own settings read as it would read them, the backend it would
//! build asked what it can prove (the engine, each template), and the warm pools' line.

use std::collections::HashMap;
use std::io::Write;

use crate::settings::{self, Command};

/// `check`'s pool line: each pooled template's size and its members found now, and where the
/// members' key comes from (its id, never the key); `None` without pooled templates.
fn pool_line(
    settings: &settings::Settings,
    backend: &dyn crate::backend::Backend,
    templates: &crate::settings::templates::Templates,
) -> Result<Option<String>, String> {
    let pooled: Vec<_> = templates.all().filter(|t| t.pool.is_kept()).collect();
    if pooled.is_empty() {
        return Ok(None);
    }
    let (key, source) = crate::control::pool::PoolKey::from_settings(settings)?
        .ok_or("a pooled template needs POOL_KEY_FILE or A2A_AUTH_TOKEN")?;
    let pools = backend
        .abilities()
        .pools
        .ok_or_else(|| format!("the {} backend keeps no warm pools", backend.kind()))?;
    let members = pools.members().map_err(|e| e.to_string())?;
    let creates = if pooled.iter().any(|t| t.pool.follows_demand()) {
        crate::control::pool::demand::creates(backend).map_err(|e| e.to_string())?
    } else {
        HashMap::new()
    };
    let rule = crate::control::pool::demand::Rule::of(&settings.pool_demand);
    let now = crate::time::now_millis();
    let sizes: Vec<String> = pooled
        .iter()
        .map(|t| {
            let ready = members
                .iter()
                .filter(|m| m.template == t.name && m.state == crate::backend::MemberState::Ready)
                .count();
            if t.pool.follows_demand() {
                let times = creates.get(&t.name).map_or(&[][..], |v| v.as_slice());
                format!(
                    "{} keeps {} to {} after the demand, {} now ({ready} ready now)",
                    t.name,
                    t.pool.min,
                    t.pool.max,
                    rule.wanted(t.pool, times, now)
                )
            } else {
                format!("{} keeps {} ({ready} ready now)", t.name, t.pool)
            }
        })
        .collect();
    Ok(Some(format!(
        "{}; members' key {source}, id {}",
        sizes.join(", "),
        key.id()
    )))
}

/// `check`: the controller's settings as it would read them, then the backend it would build,
/// asked whether it answers. Prints what it found.
pub(super) fn check(
    args: &[String],
    env: &HashMap<String, String>,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> u8 {
    let settings = match settings::parse(args.iter().cloned(), env.clone()) {
        Ok(Command::Run(s)) => s,
        Ok(Command::Help(text) | Command::Version(text)) => {
            let _ = writeln!(out, "{text}");
            return 0;
        }
        Err(e) => {
            let _ = writeln!(err, "settings: {e}");
            return 2;
        }
    };
    let token_from = match (&settings.auth_token_file, &settings.auth_token) {
        (Some(f), _) => f.display().to_string(),
        (None, Some(_)) => "A2A_AUTH_TOKEN".into(),
        (None, None) => "callers only (no admin token)".into(),
    };
    let _ = writeln!(
        out,
        "settings: ok (listen {}, public URL {}, controller id {:?}, token from {token_from})",
        settings.listen, settings.public_url, settings.controller_id,
    );
    for w in &settings.warnings {
        let _ = writeln!(out, "warning: {w}");
    }
    // The callers file read and the issuer asked, as startup would.
    match crate::auth::Authenticator::new(&settings) {
        Ok((auth, warnings)) => {
            for w in warnings {
                let _ = writeln!(out, "warning: {w}");
            }
            for line in auth.describe() {
                let _ = writeln!(out, "callers: {line}");
            }
        }
        Err(why) => {
            let _ = writeln!(err, "callers: FAILED: {why}");
            return 1;
        }
    }
    let backend = match crate::build_backend_for_check(&settings) {
        Ok(b) => b,
        Err(e) => {
            let _ = writeln!(err, "backend: {e}");
            return 1;
        }
    };
    let kind = backend.kind();
    let findings = backend.check(crate::backend::Check::Engine);
    let mut failed = report(&format!("backend {kind}"), &findings, out, err);
    // Every template, as startup reads them, proved one by one.
    let templates = match crate::open_templates(&settings, &backend) {
        Ok(t) => t.current(),
        Err(e) => {
            let _ = writeln!(err, "templates: FAILED: {e}");
            return 1;
        }
    };
    for t in templates.all() {
        let findings = backend.check(crate::backend::Check::Template(t));
        failed |= report(&format!("template {}", t.name), &findings, out, err);
    }
    match pool_line(&settings, backend.as_ref(), &templates) {
        Ok(Some(line)) => {
            let _ = writeln!(out, "pool: {line}");
        }
        Ok(None) => {}
        Err(why) => {
            failed = true;
            let _ = writeln!(err, "pool: FAILED: {why}");
        }
    }
    u8::from(failed)
}

/// Each finding on a line of its own under `what` (a failure on stderr); whether one failed.
fn report(
    what: &str,
    findings: &[crate::backend::Finding],
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> bool {
    let mut failed = false;
    for f in findings {
        if f.ok {
            let _ = writeln!(out, "{what}: {}", f.what);
        } else {
            failed = true;
            let _ = writeln!(err, "{what}: FAILED: {}", f.what);
        }
    }
    failed
}
