//! Worker templates: what one kind of worker is started from (its image or program, extra
//! environment, limits, lifetime, port, readiness path, pod template, network, workspace).
//!
//! `WORKER_TEMPLATES_FILE` names a JSON file of templates; without it there is one template,
//! `default`, made from the settings (`WORKER_IMAGE`, `WORKER_MEMORY`, `LOCAL_COMMAND`, ...),
//! so nothing changes for anyone who does not use the file. A template of the file inherits
//! every field it leaves out from that `default` (and may redefine `default` itself):
//!
//! ```json
//! {"templates": {
//!   "coder":    {"image": "ghcr.io/acme/coder:1.4", "memory": "2g", "cpus": 2, "ttl": "4h",
//!                "env": {"LOG_LEVEL": "debug"}, "env_files": {"GITHUB_TOKEN": "/run/secrets/gh"},
//!                "workspace": {"path": "/workspace", "size": "2Gi"}},
//!   "reviewer": {"image": "ghcr.io/acme/reviewer:0.9", "memory": "512m", "max_ttl": "1h"}
//! }}
//! ```
//!
//! The file is re-read when it changes ([`TemplatesFile`]); one that changed into something
//! unusable keeps the templates read before and says why in the log; at startup it stops the
//! controller with one line naming the template and the field. Secret values never sit in the
//! file: `env` refuses names that look secret, `env_files` names files read at each create.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use super::types::{BackendSettings, Lifetime, Settings};
use super::values::parse_bytes;
use super::watched::Watched;
use crate::time::{duration_text, parse_duration};

/// The template a create without `"template"` gets.
pub const DEFAULT_TEMPLATE: &str = "default";
/// The most templates one file may hold.
pub const MAX_TEMPLATES: usize = 256;
/// The largest templates file read.
const MAX_FILE_BYTES: u64 = 1 << 20;
/// What a worker probes for readiness unless its template says otherwise.
pub const DEFAULT_READY_PATH: &str = "/.well-known/agent-card.json";

/// One template, complete: every field the file left out is the default template's.
#[derive(Debug, Clone, PartialEq)]
pub struct Template {
    pub name: String,
    /// For people (the status page, `templates`); not used otherwise.
    pub description: String,
    /// The worker image (docker, k8s); `""` for the local backend.
    pub image: String,
    /// The tab's program and arguments (local); empty for the container backends.
    pub command: Vec<String>,
    /// Extra, non-secret environment, after the contract's variables.
    pub env: Vec<(String, String)>,
    /// Extra environment whose values are read from files at each create (secrets).
    pub env_files: Vec<(String, PathBuf)>,
    pub memory_bytes: Option<i64>,
    pub nano_cpus: Option<i64>,
    pub pids_limit: Option<i64>,
    /// The TTL a create of this template gets, and its ceiling.
    pub lifetime: Lifetime,
    /// The port the worker listens on.
    pub port: u16,
    /// What readiness probes (`GET`, answered 200).
    pub ready_path: String,
    /// A pod template of its own (k8s; checked by the backend), else `K8S_POD_TEMPLATE`.
    pub pod_template: Option<PodTemplate>,
    /// The Docker network workers of this template join, else `DOCKER_NETWORK`.
    pub network: Option<String>,
    /// The task's workspace: a volume that outlives its workers.
    pub workspace: Option<Workspace>,
    /// How many started, unbound members of this template each controller id keeps ready
    /// (a warm pool; 0: none). A create takes one and binds it to its task.
    pub pool: u32,
}

impl Template {
    /// A template named `name` that starts `image` listening on `port`, with nothing else set
    /// (no limits, no TTL, the Agent Card for readiness, no workspace).
    pub fn new(name: &str, image: &str, port: u16) -> Template {
        Template {
            name: name.to_string(),
            description: String::new(),
            image: image.to_string(),
            command: Vec::new(),
            env: Vec::new(),
            env_files: Vec::new(),
            memory_bytes: None,
            nano_cpus: None,
            pids_limit: None,
            lifetime: Lifetime::default(),
            port,
            ready_path: DEFAULT_READY_PATH.to_string(),
            pod_template: None,
            network: None,
            workspace: None,
            pool: 0,
        }
    }
}

/// The largest warm pool one template may ask for.
pub const MAX_POOL: u32 = 64;

/// A template's own pod template: where it was read from, and what it holds.
#[derive(Debug, Clone, PartialEq)]
pub struct PodTemplate {
    pub path: PathBuf,
    pub value: Value,
}

/// A template's workspace: where it is mounted and how large it may grow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Workspace {
    /// Absolute path in the worker (container backends; a local tab starts in it).
    pub path: String,
    /// As written (`2Gi`): a Kubernetes quantity and a label value.
    pub size: String,
    pub size_bytes: u64,
    /// The Kubernetes storage class; the cluster's default without it.
    pub storage_class: Option<String>,
}

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

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileContents {
    templates: BTreeMap<String, Value>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Entry {
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
    port: Option<u16>,
    ready_path: Option<String>,
    pod_template: Option<PathBuf>,
    network: Option<String>,
    workspace: Option<WorkspaceEntry>,
    pool: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WorkspaceEntry {
    path: Option<String>,
    size: String,
    storage_class: Option<String>,
}

/// The templates a controller knows, by name (`default` always among them).
#[derive(Debug, Clone)]
pub struct Templates {
    by_name: BTreeMap<String, Arc<Template>>,
}

impl Templates {
    /// Only `default`.
    pub fn only(default: Template) -> Templates {
        Templates {
            by_name: BTreeMap::from([(default.name.clone(), Arc::new(default))]),
        }
    }

    pub fn get(&self, name: &str) -> Option<&Arc<Template>> {
        self.by_name.get(name)
    }

    /// Every template, by name.
    pub fn all(&self) -> impl Iterator<Item = &Arc<Template>> {
        self.by_name.values()
    }

    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }
}

/// What the backend says of a template before it is used (the program exists, the pod
/// template is acceptable): `Err` is one line why not.
pub type Accepts = dyn Fn(&Template) -> Result<(), String> + Send + Sync;

/// A template name: 1 to 32 of `[a-z0-9-]`, a letter or digit at both ends (a label value).
pub fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 32
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err("a template name is 1 to 32 of a-z, 0-9 and '-', starting and ending with a letter or digit".into())
    }
}

/// Reads a templates file over `default` (the settings' template); every template is also
/// passed to `accepts`. Errors are one line naming the file, the template and the field.
pub fn load(
    path: &std::path::Path,
    default: &Template,
    accepts: &Accepts,
) -> Result<Templates, String> {
    let shown = path.display();
    let text = read_capped(path)?;
    let contents: FileContents = serde_json::from_str(&text).map_err(|e| {
        format!("{shown} is not a templates file ({{\"templates\": {{\"NAME\": {{...}}}}}}): {e}")
    })?;
    if contents.templates.len() > MAX_TEMPLATES {
        return Err(format!("{shown} holds more than {MAX_TEMPLATES} templates"));
    }
    // `default` first: the others inherit from it as the file defines it.
    let base = match contents.templates.get(DEFAULT_TEMPLATE) {
        Some(v) => resolve(DEFAULT_TEMPLATE, v, default)
            .map_err(|why| format!("{shown}: template {DEFAULT_TEMPLATE:?}: {why}"))?,
        None => default.clone(),
    };
    let mut by_name = BTreeMap::new();
    for (name, v) in &contents.templates {
        let at = format!(
            "{shown}: template {:?}",
            name.chars().take(40).collect::<String>()
        );
        check_name(name).map_err(|why| format!("{at}: {why}"))?;
        let t = if name == DEFAULT_TEMPLATE {
            base.clone()
        } else {
            resolve(name, v, &base).map_err(|why| format!("{at}: {why}"))?
        };
        by_name.insert(name.clone(), Arc::new(t));
    }
    by_name
        .entry(DEFAULT_TEMPLATE.to_string())
        .or_insert_with(|| Arc::new(base));
    for t in by_name.values() {
        accepts(t).map_err(|why| format!("{shown}: template {:?}: {why}", t.name))?;
    }
    Ok(Templates { by_name })
}

fn read_capped(path: &std::path::Path) -> Result<String, String> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(format!(
            "{} is larger than {} KiB",
            path.display(),
            MAX_FILE_BYTES >> 10
        ));
    }
    String::from_utf8(bytes).map_err(|_| format!("{} is not UTF-8 text", path.display()))
}

/// One entry of the file over `base`: the complete template, or why not (naming the field).
fn resolve(name: &str, value: &Value, base: &Template) -> Result<Template, String> {
    let e: Entry = serde_json::from_value(value.clone()).map_err(|e| e.to_string())?;
    let mut t = Template {
        name: name.to_string(),
        ..base.clone()
    };
    if let Some(d) = e.description {
        if d.chars().count() > 200 || d.chars().any(char::is_control) {
            return Err("description: at most 200 printable characters".into());
        }
        t.description = d;
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
        t.env = Vec::with_capacity(env.len());
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
            t.env.push((k, v));
        }
    }
    if let Some(files) = e.env_files {
        t.env_files = Vec::with_capacity(files.len());
        for (k, p) in files {
            check_variable(&k).map_err(|why| format!("env_files {k:?}: {why}"))?;
            if !p.is_absolute() {
                return Err(format!(
                    "env_files {k:?}: {} is not an absolute path",
                    p.display()
                ));
            }
            std::fs::metadata(&p)
                .map_err(|err| format!("env_files {k:?}: {}: {err}", p.display()))?;
            t.env_files.push((k, p));
        }
    }
    if let Some((k, _)) = t
        .env
        .iter()
        .find(|(k, _)| t.env_files.iter().any(|(f, _)| f == k))
    {
        return Err(format!("env {k:?} is in env_files too: give it once"));
    }
    if let Some(m) = e.memory {
        t.memory_bytes = Some(parse_bytes(&m).ok_or_else(|| {
            format!("memory: {m:?} is not a size such as 512m or 2g (at least 6m)")
        })?);
    }
    if let Some(c) = e.cpus {
        if !(c > 0.0 && c <= 1024.0) {
            return Err(format!("cpus: {c} is not a CPU count such as 1.5"));
        }
        t.nano_cpus = Some((c * 1e9).round() as i64);
    }
    if let Some(p) = e.pids_limit {
        if p <= 0 {
            return Err(format!("pids_limit: {p} is not a positive number"));
        }
        t.pids_limit = Some(p);
    }
    if let Some(v) = e.ttl {
        t.lifetime.default_ttl = duration(&v).map_err(|why| format!("ttl: {why}"))?;
    }
    if let Some(v) = e.max_ttl {
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
    if let Some(p) = e.port {
        if p == 0 {
            return Err("port: 0 is not a port".into());
        }
        t.port = p;
    }
    if let Some(p) = e.ready_path {
        if !p.starts_with('/') || p.bytes().any(|b| !(0x21..=0x7e).contains(&b) || b == b'#') {
            return Err(format!(
                "ready_path: {p:?} must be an absolute path such as /healthz"
            ));
        }
        t.ready_path = p;
    }
    if let Some(path) = e.pod_template {
        let bytes = std::fs::read(&path)
            .map_err(|err| format!("pod_template: {}: {err}", path.display()))?;
        let value = serde_json::from_slice(&bytes)
            .map_err(|err| format!("pod_template: {} is not JSON: {err}", path.display()))?;
        t.pod_template = Some(PodTemplate { path, value });
    }
    if let Some(n) = e.network {
        check_network(&n).map_err(|why| format!("network: {why}"))?;
        t.network = Some(n);
    }
    if let Some(w) = e.workspace {
        t.workspace = Some(workspace(w).map_err(|why| format!("workspace: {why}"))?);
    }
    if let Some(n) = e.pool {
        t.pool = n;
    }
    check_pool(&t)?;
    Ok(t)
}

/// A pool is at most [`MAX_POOL`] members, of a template without a per-task workspace (a
/// member is started before its task is known, so it cannot mount the task's volume).
pub fn check_pool(t: &Template) -> Result<(), String> {
    if t.pool > MAX_POOL {
        return Err(format!("pool: {} is more than {MAX_POOL} members", t.pool));
    }
    if t.pool > 0 && t.workspace.is_some() {
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

/// The environment a template adds, secrets read from their files now (the contract's
/// variables come first and cannot be overridden: the file cannot name them).
pub fn extra_env(t: &Template) -> Result<Vec<(String, String)>, String> {
    let mut env = t.env.clone();
    for (name, path) in &t.env_files {
        let (value, _) = crate::secret_file::read_secret_file(path)
            .map_err(|why| format!("template {:?}: env_files {name}: {why}", t.name))?;
        env.push((name.clone(), value));
    }
    Ok(env)
}

/// The templates as they are now: `WORKER_TEMPLATES_FILE` re-read when it changed (looked at,
/// at most once a second, on creates and reads of the templates), or the settings' `default`.
pub struct TemplatesFile {
    file: Option<Watched>,
    default: Template,
    accepts: Box<Accepts>,
    current: RwLock<Arc<Templates>>,
}

impl TemplatesFile {
    /// Only the settings' `default` (no file), accepted by `accepts`.
    pub fn fixed(default: Template, accepts: Box<Accepts>) -> Result<TemplatesFile, String> {
        accepts(&default).map_err(|why| format!("template {DEFAULT_TEMPLATE:?}: {why}"))?;
        Ok(TemplatesFile {
            file: None,
            current: RwLock::new(Arc::new(Templates::only(default.clone()))),
            default,
            accepts,
        })
    }

    /// The file read now; an unusable file is the error (one line).
    pub fn open(
        path: PathBuf,
        default: Template,
        accepts: Box<Accepts>,
    ) -> Result<TemplatesFile, String> {
        let file = Watched::new(path);
        let templates = load(&file.path, &default, &accepts)?;
        Ok(TemplatesFile {
            file: Some(file),
            current: RwLock::new(Arc::new(templates)),
            default,
            accepts,
        })
    }

    /// The templates now.
    pub fn current(&self) -> Arc<Templates> {
        self.refresh();
        Arc::clone(&self.current.read().unwrap_or_else(|p| p.into_inner()))
    }

    fn refresh(&self) {
        let Some(file) = self.file.as_ref().filter(|f| f.changed()) else {
            return;
        };
        let read = load(&file.path, &self.default, &self.accepts);
        let mut current = self.current.write().unwrap_or_else(|p| p.into_inner());
        match read {
            Ok(templates) => {
                log::info!(
                    "WORKER_TEMPLATES_FILE {} changed: {} templates now ({}); workers made before keep theirs",
                    file.path.display(),
                    templates.len(),
                    templates.all().map(|t| t.name.as_str()).collect::<Vec<_>>().join(", ")
                );
                *current = Arc::new(templates);
            }
            Err(why) => log::warn!(
                "WORKER_TEMPLATES_FILE changed but cannot be used ({why}); the {} templates read before stay",
                current.len()
            ),
        }
    }
}

/// The settings' own template: `default`.
impl Settings {
    /// The template `default` as the settings describe it (what every worker was before
    /// templates existed).
    pub fn default_template(&self) -> Template {
        let mut t = Template::new(DEFAULT_TEMPLATE, "", 0);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> Template {
        Template::new(DEFAULT_TEMPLATE, "w:1", 9090)
    }

    fn file(name: &str, text: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("a2a-templates-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("templates.json");
        std::fs::write(&path, text).unwrap();
        path
    }

    fn ok(_: &Template) -> Result<(), String> {
        Ok(())
    }

    #[test]
    fn templates_inherit_from_default_and_name_what_is_wrong() {
        let p = file(
            "inherit",
            r#"{"templates": {
                "default": {"memory": "256m"},
                "coder": {"image": "coder:2", "cpus": 1.5, "ttl": "2h", "max_ttl": 28800,
                          "env": {"LOG_LEVEL": "debug"},
                          "workspace": {"size": "2Gi"}}
            }}"#,
        );
        let t = load(&p, &base(), &ok).unwrap();
        assert_eq!(t.len(), 2);
        let coder = t.get("coder").unwrap();
        assert_eq!(coder.image, "coder:2");
        assert_eq!(
            coder.memory_bytes,
            Some(256 << 20),
            "from the file's default"
        );
        assert_eq!(coder.nano_cpus, Some(1_500_000_000));
        assert_eq!(coder.port, 9090, "from the settings");
        assert_eq!(coder.lifetime.default_ttl, Some(Duration::from_secs(7200)));
        assert_eq!(coder.lifetime.max_ttl, Some(Duration::from_secs(28800)));
        assert_eq!(coder.env, vec![("LOG_LEVEL".into(), "debug".into())]);
        let ws = coder.workspace.as_ref().unwrap();
        assert_eq!((ws.path.as_str(), ws.size_bytes), ("/workspace", 2 << 30));
        assert_eq!(t.get("default").unwrap().image, "w:1");

        for (text, says) in [
            (
                r#"{"templates": {"Bad": {}}}"#,
                "template \"Bad\": a template name",
            ),
            (
                r#"{"templates": {"a": {"image": "x"}}}"#,
                "template \"a\": image: \"x\" has no tag",
            ),
            (
                r#"{"templates": {"a": {"memory": "lots"}}}"#,
                "template \"a\": memory:",
            ),
            (
                r#"{"templates": {"a": {"env": {"GH_TOKEN": "x"}}}}"#,
                "env_files instead",
            ),
            (
                r#"{"templates": {"a": {"env": {"WORKER_ID": "x"}}}}"#,
                "sets this one itself",
            ),
            (
                r#"{"templates": {"a": {"ttl": "3h", "max_ttl": "1h"}}}"#,
                "longer than its max_ttl",
            ),
            (
                r#"{"templates": {"a": {"imag": "x:1"}}}"#,
                "template \"a\": unknown field `imag`",
            ),
            (
                r#"{"templates": {"a": {"workspace": {"size": "2 GB"}}}}"#,
                "workspace: size",
            ),
            (
                r#"{"templates": {"a": {"command": ["claude"]}}}"#,
                "command: the program",
            ),
            (
                r#"{"templates": {"a": {"env_files": {"K": "/nonexistent/k"}}}}"#,
                "env_files \"K\": /nonexistent/k",
            ),
            (r#"{"templates": []}"#, "is not a templates file"),
        ] {
            let p = file("bad", text);
            let e = load(&p, &base(), &ok).unwrap_err();
            assert!(e.contains(says), "{text}: {e}");
            assert!(e.starts_with(&p.display().to_string()), "{e}");
        }
        let refuse = |t: &Template| {
            if t.name == "coder" {
                Err("no".to_string())
            } else {
                Ok(())
            }
        };
        let p = file("refused", r#"{"templates": {"coder": {}}}"#);
        assert!(load(&p, &base(), &refuse)
            .unwrap_err()
            .ends_with("template \"coder\": no"));
    }

    #[test]
    fn quantities() {
        assert_eq!(parse_quantity("2Gi"), Some(2 << 30));
        assert_eq!(parse_quantity("500M"), Some(500_000_000));
        assert_eq!(parse_quantity("1048576"), Some(1 << 20));
        for bad in ["", "2GB", "1Ki", "-1Gi", "1.5Gi", "Gi"] {
            assert_eq!(parse_quantity(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_changed_file_is_reread_and_a_broken_one_keeps_the_last_good() {
        let p = file("reread", r#"{"templates": {"a": {"image": "a:1"}}}"#);
        let f = TemplatesFile::open(p.clone(), base(), Box::new(ok)).unwrap();
        assert_eq!(f.current().get("a").unwrap().image, "a:1");
        std::thread::sleep(Duration::from_millis(1100));
        std::fs::write(&p, r#"{"templates": {"a": {"image": "a:2"}, "b": {}}}"#).unwrap();
        assert_eq!(f.current().get("a").unwrap().image, "a:2");
        assert!(f.current().get("b").is_some());
        std::thread::sleep(Duration::from_millis(1100));
        std::fs::write(&p, r#"{"templates": {"a": {"image": "untagged"}}}"#).unwrap();
        assert_eq!(
            f.current().get("a").unwrap().image,
            "a:2",
            "the last good file stays"
        );
    }
}
