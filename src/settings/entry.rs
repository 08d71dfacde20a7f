//! One entry of the templates file read into a template: each field read and checked by its
//! own reader (a refusal names the field), over the template it inherits from.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use super::egress::{parse_egress, parse_routes};
use super::template::{PodTemplate, PoolSize, Template, Workspace};
use super::types::OnExpiry;
use super::values::parse_bytes;
use crate::time::{duration_text, parse_duration};

/// Variables the controller sets itself: a template cannot set them.
const CONTROLLER_VARIABLES: [&str; 10] = [
    "A2A_PUBLIC_URL",
    "A2A_AGENT_NAME",
    "AGENT_TYPE",
    "LISTEN",
    "WORKER_ID",
    "WORKER_TASK",
    "ANTHROPIC_AUTH_TOKEN",
    "A2A_WORKSPACE",
    "A2A_POOL_MEMBER",
    "A2A_ACTIVATION_SHA256",
];

/// Parts of a variable name that say it holds a secret: such a value belongs in a file.
const SECRET_WORDS: [&str; 7] = [
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "API_KEY",
    "PRIVATE_KEY",
    "CREDENTIAL",
];

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct Entry {
    description: Option<String>,
    image: Option<String>,
    command: Option<Vec<String>>,
    env: Option<BTreeMap<String, String>>,
    env_files: Option<BTreeMap<String, PathBuf>>,
    memory: Option<String>,
    cpus: Option<f64>,
    pids_limit: Option<i64>,
    ttl: Option<Value>,
    max_ttl: Option<Value>,
    on_expiry: Option<String>,
    suspended_ttl: Option<Value>,
    resume_command: Option<Vec<String>>,
    port: Option<u16>,
    ready_path: Option<String>,
    pod_template: Option<PathBuf>,
    network: Option<String>,
    workspace: Option<WorkspaceEntry>,
    pool: Option<Value>,
    egress: Option<Value>,
    egress_routes: Option<Value>,
    runtime: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WorkspaceEntry {
    path: Option<String>,
    size: String,
    storage_class: Option<String>,
}

/// One entry of the file over `base`: the complete template, or why not (naming the field).
/// Each field is read and checked by its own reader below; this only assembles.
pub(super) fn resolve(name: &str, value: &Value, base: &Template) -> Result<Template, String> {
    let e: Entry = serde_json::from_value(value.clone()).map_err(|e| e.to_string())?;
    let mut t = Template {
        name: name.to_string(),
        ..base.clone()
    };
    if let Some(d) = e.description {
        t.description = description(d)?;
    }
    if let Some(image) = e.image {
        check_image(&image).map_err(|why| format!("image: {why}"))?;
        t.image = image;
    }
    if let Some(argv) = e.command {
        check_command(&argv).map_err(|why| format!("command: {why}"))?;
        t.command = argv;
    }
    if let Some(env) = e.env {
        t.env = environment(env)?;
    }
    if let Some(files) = e.env_files {
        t.env_files = env_files(files)?;
    }
    if let Some((k, _)) = t
        .env
        .iter()
        .find(|(k, _)| t.env_files.iter().any(|(f, _)| f == k))
    {
        return Err(format!("env {k:?} is in env_files too: give it once"));
    }
    limits(&mut t, e.memory, e.cpus, e.pids_limit)?;
    lifetime(&mut t, e.ttl, e.max_ttl)?;
    if let Some(v) = e.on_expiry {
        t.lifetime.on_expiry = OnExpiry::parse(&v)
            .ok_or_else(|| format!("on_expiry: {v:?} is neither \"stop\" nor \"suspend\""))?;
    }
    if let Some(v) = e.suspended_ttl {
        t.lifetime.suspended_ttl = duration(&v).map_err(|why| format!("suspended_ttl: {why}"))?;
    }
    if let Some(argv) = e.resume_command {
        check_command(&argv).map_err(|why| format!("resume_command: {why}"))?;
        if !argv.iter().any(|a| a.contains("{session_id}")) {
            return Err(
                "resume_command: no argument holds {session_id} (where the tab's session id goes)"
                    .into(),
            );
        }
        t.resume_command = argv;
    }
    if let Some(p) = e.port {
        if p == 0 {
            return Err("port: 0 is not a port".into());
        }
        t.port = p;
    }
    if let Some(p) = e.ready_path {
        t.ready_path = ready_path(p)?;
    }
    if let Some(path) = e.pod_template {
        t.pod_template = Some(pod_template(path)?);
    }
    if let Some(n) = e.network {
        check_network(&n).map_err(|why| format!("network: {why}"))?;
        t.network = Some(n);
    }
    if let Some(w) = e.workspace {
        t.workspace = Some(workspace(w).map_err(|why| format!("workspace: {why}"))?);
    }
    if let Some(v) = e.pool {
        t.pool = pool_size(&v).map_err(|why| format!("pool: {why}"))?;
    }
    isolation(&mut t, e.egress, e.egress_routes, e.runtime)?;
    check_pool(&t)?;
    Ok(t)
}

/// `egress`, `egress_routes` and `runtime`: a policy, its routes (only for a fenced
/// template: an open one reaches its destinations itself), an OCI runtime's name.
fn isolation(
    t: &mut Template,
    egress: Option<Value>,
    routes: Option<Value>,
    runtime: Option<String>,
) -> Result<(), String> {
    if let Some(v) = egress {
        t.egress = parse_egress(&v).map_err(|why| format!("egress: {why}"))?;
    }
    if let Some(v) = routes {
        t.egress_routes = parse_routes(&v).map_err(|why| format!("egress_routes: {why}"))?;
    }
    if !t.egress.fenced() && !t.egress_routes.is_empty() {
        return Err("egress_routes: only a template whose egress is \"none\" or a list has routes (an \"open\" worker reaches its destinations itself, with no proxy between)".into());
    }
    if let Some(r) = runtime {
        check_network(&r).map_err(|_| format!("runtime: {r:?} is not a runtime name"))?;
        t.runtime = Some(r);
    }
    Ok(())
}

/// At most 200 printable characters.
fn description(d: String) -> Result<String, String> {
    if d.chars().count() > 200 || d.chars().any(char::is_control) {
        return Err("description: at most 200 printable characters".into());
    }
    Ok(d)
}

/// `env`: names the controller does not set, none that says it holds a secret, no NUL.
fn environment(env: BTreeMap<String, String>) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::with_capacity(env.len());
    for (k, v) in env {
        check_variable(&k).map_err(|why| format!("env {k:?}: {why}"))?;
        let upper = k.to_ascii_uppercase();
        if let Some(word) = SECRET_WORDS.iter().find(|w| upper.contains(**w)) {
            return Err(format!(
                "env {k:?}: the name says {word}: a secret never sits in the templates file; give the path of a file holding it in env_files instead"
            ));
        }
        if v.contains('\0') {
            return Err(format!("env {k:?}: the value contains a NUL byte"));
        }
        out.push((k, v));
    }
    Ok(out)
}

/// `env_files`: each an absolute path to a file that exists now (read at each create).
fn env_files(files: BTreeMap<String, PathBuf>) -> Result<Vec<(String, PathBuf)>, String> {
    let mut out = Vec::with_capacity(files.len());
    for (k, p) in files {
        check_variable(&k).map_err(|why| format!("env_files {k:?}: {why}"))?;
        if !p.is_absolute() {
            return Err(format!(
                "env_files {k:?}: {} is not an absolute path",
                p.display()
            ));
        }
        std::fs::metadata(&p).map_err(|err| format!("env_files {k:?}: {}: {err}", p.display()))?;
        out.push((k, p));
    }
    Ok(out)
}

/// `memory`, `cpus`, `pids_limit`.
fn limits(
    t: &mut Template,
    memory: Option<String>,
    cpus: Option<f64>,
    pids: Option<i64>,
) -> Result<(), String> {
    if let Some(m) = memory {
        t.memory_bytes = Some(parse_bytes(&m).ok_or_else(|| {
            format!("memory: {m:?} is not a size such as 512m or 2g (at least 6m)")
        })?);
    }
    if let Some(c) = cpus {
        if !(c > 0.0 && c <= 1024.0) {
            return Err(format!("cpus: {c} is not a CPU count such as 1.5"));
        }
        t.nano_cpus = Some((c * 1e9).round() as i64);
    }
    if let Some(p) = pids {
        if p <= 0 {
            return Err(format!("pids_limit: {p} is not a positive number"));
        }
        t.pids_limit = Some(p);
    }
    Ok(())
}

/// `ttl` within `max_ttl` (each over the base's when not given).
fn lifetime(t: &mut Template, ttl: Option<Value>, max_ttl: Option<Value>) -> Result<(), String> {
    if let Some(v) = ttl {
        t.lifetime.default_ttl = duration(&v).map_err(|why| format!("ttl: {why}"))?;
    }
    if let Some(v) = max_ttl {
        t.lifetime.max_ttl = duration(&v).map_err(|why| format!("max_ttl: {why}"))?;
    }
    if let (Some(d), Some(m)) = (t.lifetime.default_ttl, t.lifetime.max_ttl) {
        if d > m {
            return Err(format!(
                "ttl {} is longer than its max_ttl ({})",
                duration_text(d),
                duration_text(m)
            ));
        }
    }
    Ok(())
}

/// `ready_path`: an absolute path of printable characters, no fragment.
fn ready_path(p: String) -> Result<String, String> {
    if !p.starts_with('/') || p.bytes().any(|b| !(0x21..=0x7e).contains(&b) || b == b'#') {
        return Err(format!(
            "ready_path: {p:?} must be an absolute path such as /healthz"
        ));
    }
    Ok(p)
}

/// `pod_template`: a file of JSON, read now (the backend judges it).
fn pod_template(path: PathBuf) -> Result<PodTemplate, String> {
    let bytes =
        std::fs::read(&path).map_err(|err| format!("pod_template: {}: {err}", path.display()))?;
    let value = serde_json::from_slice(&bytes)
        .map_err(|err| format!("pod_template: {} is not JSON: {err}", path.display()))?;
    Ok(PodTemplate { path, value })
}

/// `pool`: a member count (a fixed pool), or `{"min", "max"}` (one that follows the demand).
fn pool_size(v: &Value) -> Result<PoolSize, String> {
    let count = |v: &Value, what: &str| {
        v.as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| format!("{what} must be a member count such as 4, not {v}"))
    };
    match v {
        Value::Object(o) => {
            if let Some(other) = o.keys().find(|k| *k != "min" && *k != "max") {
                return Err(format!(
                    "unknown field {other:?}: a pool that follows the demand is {{\"min\": a, \"max\": b}}"
                ));
            }
            let max = o
                .get("max")
                .ok_or("\"max\" is missing: {\"min\": a, \"max\": b}")?;
            Ok(PoolSize {
                min: o.get("min").map_or(Ok(0), |m| count(m, "min"))?,
                max: count(max, "max")?,
            })
        }
        v => Ok(PoolSize::fixed(count(v, "pool")?)),
    }
}

/// A pool is at most [`super::template::MAX_POOL`] members, `min` at most `max`, of a template
/// without a per-task workspace (a member is started before its task is known, so it cannot
/// mount the task's volume).
pub fn check_pool(t: &Template) -> Result<(), String> {
    t.pool.check().map_err(|why| format!("pool: {why}"))?;
    let pooled = t.pool.is_kept();
    if pooled && t.egress.fenced() {
        return Err(
            "pool: a template whose egress is not \"open\" cannot have a pool (a member starts before its worker id is known, so it cannot be given its egress placeholder)"
                .into(),
        );
    }
    if pooled && t.workspace.is_some() {
        return Err(
            "pool: a template with a workspace cannot have a pool (a member starts before its task is known, so it cannot mount the task's workspace)"
                .into(),
        );
    }
    Ok(())
}

fn duration(v: &Value) -> Result<Option<Duration>, String> {
    let d = match v {
        Value::String(s) => parse_duration(s),
        Value::Number(n) => n.as_u64().map(Duration::from_secs),
        _ => None,
    }
    .ok_or_else(|| format!("{v} is not a duration such as \"2h\" or \"90m\" (0 = none)"))?;
    Ok(Some(d).filter(|d| !d.is_zero()))
}

fn workspace(w: WorkspaceEntry) -> Result<Workspace, String> {
    let path = w.path.unwrap_or_else(|| "/workspace".into());
    if !path.starts_with('/')
        || path == "/"
        || path.contains(':')
        || path.bytes().any(|b| b.is_ascii_control())
    {
        return Err(format!(
            "path {path:?} must be an absolute path other than / (e.g. /workspace)"
        ));
    }
    let size_bytes = parse_quantity(&w.size).ok_or_else(|| {
        format!(
            "size {:?} is not a size such as 2Gi or 500Mi (Kubernetes' units)",
            w.size
        )
    })?;
    if let Some(class) = &w.storage_class {
        check_network(class).map_err(|_| format!("storage_class {class:?} is not a name"))?;
    }
    Ok(Workspace {
        path,
        size: w.size,
        size_bytes,
        storage_class: w.storage_class,
    })
}

/// A Kubernetes quantity of bytes: digits and one of `Ki Mi Gi Ti k M G T` (or none), at
/// least 1 MiB.
pub fn parse_quantity(text: &str) -> Option<u64> {
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    let n: u64 = text[..digits].parse().ok()?;
    let mult: u64 = match &text[digits..] {
        "" => 1,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "Ti" => 1 << 40,
        "k" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        "T" => 1_000_000_000_000,
        _ => return None,
    };
    n.checked_mul(mult).filter(|b| *b >= 1 << 20)
}

fn check_image(image: &str) -> Result<(), String> {
    super::values::check_image(image).map_err(|e| match e {
        super::error::Error::Invalid { reason, .. } => reason,
        other => other.to_string(),
    })
}

fn check_command(argv: &[String]) -> Result<(), String> {
    match argv.first() {
        None => Err("the array is empty: name a program".into()),
        Some(p) if !p.starts_with('/') => Err(format!(
            "the program {p:?} is not an absolute path (a LaunchAgent has no PATH to find it by)"
        )),
        Some(_) if argv.iter().any(|a| a.contains('\0')) => {
            Err("an argument contains a NUL byte".into())
        }
        Some(_) => Ok(()),
    }
}

fn check_variable(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && !name.as_bytes()[0].is_ascii_digit()
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if !ok {
        return Err("not an environment variable name".into());
    }
    if CONTROLLER_VARIABLES.contains(&name) {
        return Err("the controller sets this one itself".into());
    }
    Ok(())
}

fn check_network(n: &str) -> Result<(), String> {
    if n.is_empty()
        || n.len() > 128
        || n.bytes()
            .any(|b| !(b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.')))
    {
        return Err(format!("{n:?} is not a name"));
    }
    Ok(())
}
