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

use serde::Deserialize;
use serde_json::Value;

use super::entry;
pub use super::template::{
    PodTemplate, PoolSize, Template, Workspace, DEFAULT_READY_PATH, DEFAULT_TEMPLATE, MAX_POOL,
};
use super::types::{BackendSettings, Settings};
use super::watched::Watched;

/// The most templates one file may hold.
pub const MAX_TEMPLATES: usize = 256;
/// The largest templates file read.
const MAX_FILE_BYTES: u64 = 1 << 20;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileContents {
    templates: BTreeMap<String, Value>,
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
        Some(v) => entry::resolve(DEFAULT_TEMPLATE, v, default)
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
            entry::resolve(name, v, &base).map_err(|why| format!("{at}: {why}"))?
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
    use std::time::Duration;

    use super::entry::parse_quantity;
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
    fn a_pool_is_a_fixed_count_or_bounds_to_follow_the_demand() {
        let p = file(
            "pools",
            r#"{"templates": {"fixed": {"image": "a:1", "pool": 3},
                              "demand": {"image": "a:1", "pool": {"min": 0, "max": 8}},
                              "floor": {"image": "a:1", "pool": {"max": 4}}}}"#,
        );
        let t = load(&p, &base(), &ok).unwrap();
        let fixed = t.get("fixed").unwrap().pool;
        assert_eq!((fixed, fixed.follows_demand()), (PoolSize::fixed(3), false));
        let demand = t.get("demand").unwrap().pool;
        assert_eq!((demand.min, demand.max), (0, 8));
        assert!(demand.follows_demand() && demand.is_kept());
        assert_eq!(demand.to_string(), "0-8");
        assert_eq!(t.get("floor").unwrap().pool, PoolSize { min: 0, max: 4 });
        for (text, says) in [
            (r#"{"min": 5, "max": 2}"#, "pool: min 5 is more than max 2"),
            (r#"{"min": 1}"#, "pool: \"max\" is missing"),
            (
                r#"{"min": 0, "max": 99}"#,
                "pool: 99 is more than 64 members",
            ),
            (r#"{"min": 0, "most": 9}"#, "pool: unknown field \"most\""),
            (r#"-1"#, "pool: pool must be a member count"),
            (
                r#"{"min": "a", "max": 2}"#,
                "pool: min must be a member count",
            ),
        ] {
            let p = file(
                "bad-pool",
                &format!(r#"{{"templates": {{"a": {{"image": "a:1", "pool": {text}}}}}}}"#),
            );
            let e = load(&p, &base(), &ok).unwrap_err();
            assert!(e.contains(says), "{text}: {e}");
        }
        assert_eq!(PoolSize::parse("2-8"), Some(PoolSize { min: 2, max: 8 }));
        assert_eq!(PoolSize::parse("4"), Some(PoolSize::fixed(4)));
        assert_eq!(PoolSize::parse("four"), None);
    }

    #[test]
    fn quantities_read_kubernetes_units_at_least_1_mib() {
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
