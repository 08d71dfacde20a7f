//! `A2A_CALLERS_FILE`: the callers a controller knows, each with a name, a scope, optional
//! `max_workers` and `admin`, and a credential — the SHA-256 of its bearer token (so the file
//! holds no token) or the path of a file holding the token. The file is JSON:
//!
//! ```json
//! {"callers": [
//!   {"name": "ci", "token_sha256": "<64 hex digits>", "scope": "team-a", "max_workers": 4},
//!   {"name": "ops", "token_file": "/run/secrets/ops-token", "scope": "ops", "admin": true},
//!   {"name": "review-bot", "token_sha256": "<...>", "scope": "team-a", "templates": ["reviewer"]}
//! ]}
//! ```
//!
//! A token is found by its SHA-256 in a table (constant work whatever the number of callers,
//! and the table holds no token); the hash found is compared again in constant time. The file
//! is looked at, at most once a second, on requests, and re-read when it changed; a file that
//! changed into something malformed is said once in the log, and the callers read before stay.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::RwLock;

use serde::Deserialize;

use crate::control::caller::check_scope;
use crate::control::Caller;
use crate::hash::sha256;
use crate::secret_file::{read_secret_file, read_secret_file_up_to};
use crate::settings::templates::check_name as check_template_name;
use crate::settings::{check_auth_token, Watched};
use crate::token::constant_time_eq;

/// The most callers a file may list.
pub const MAX_CALLERS: usize = 100_000;
/// The largest callers file read (10,000 callers take about 1.3 MB).
const MAX_FILE_BYTES: u64 = 32 << 20;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileContents {
    callers: Vec<Entry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    name: String,
    #[serde(default)]
    token_sha256: Option<String>,
    #[serde(default)]
    token_file: Option<PathBuf>,
    scope: String,
    #[serde(default)]
    max_workers: Option<u32>,
    #[serde(default)]
    admin: bool,
    /// The templates it may create from (absent: every one).
    #[serde(default)]
    templates: Option<Vec<String>>,
    /// The most task workspaces its scope may keep (absent: no bound).
    #[serde(default)]
    max_workspaces: Option<u32>,
}

/// The callers as read: SHA-256 of a token → the caller.
#[derive(Debug, Default)]
pub struct Table {
    by_hash: HashMap<[u8; 32], Caller>,
    /// The token files its callers were read from (watched: a change re-reads the table).
    token_files: Vec<PathBuf>,
}

impl Table {
    pub fn len(&self) -> usize {
        self.by_hash.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_hash.is_empty()
    }

    /// The caller whose token this is.
    pub fn find(&self, token: &str) -> Option<&Caller> {
        let hash = sha256(token.as_bytes());
        let (stored, caller) = self.by_hash.get_key_value(&hash)?;
        constant_time_eq(stored, &hash).then_some(caller)
    }
}

/// Reads and checks a callers file; `reserved` are names taken already (`admin` when
/// `A2A_AUTH_TOKEN` is set). Returns the table and warnings (files others may read). Errors
/// are one line naming the entry, never a token.
pub fn load(path: &Path, reserved: &[&str]) -> Result<(Table, Vec<String>), String> {
    let shown = path.display();
    let (text, mode_warning) = read_secret_file_up_to(path, MAX_FILE_BYTES)?;
    let mut warnings: Vec<String> = mode_warning
        .map(|w| format!("A2A_CALLERS_FILE {w} (it decides who may do what)"))
        .into_iter()
        .collect();
    let contents: FileContents = serde_json::from_str(&text)
        .map_err(|e| format!("{shown} is not a callers file ({{\"callers\": [...]}}): {e}"))?;
    if contents.callers.len() > MAX_CALLERS {
        return Err(format!("{shown} lists more than {MAX_CALLERS} callers"));
    }
    let mut table = Table {
        by_hash: HashMap::with_capacity(contents.callers.len()),
        token_files: Vec::new(),
    };
    let mut names: HashSet<String> = reserved.iter().map(|n| n.to_string()).collect();
    for (i, e) in contents.callers.into_iter().enumerate() {
        let at = format!("{shown}: caller {} ({:?})", i + 1, truncated(&e.name));
        check_name(&e.name).map_err(|why| format!("{at}: {why}"))?;
        if !names.insert(e.name.clone()) {
            return Err(format!("{at}: the name is taken already"));
        }
        check_scope(&e.scope).map_err(|why| format!("{at}: {why}"))?;
        if e.max_workers == Some(0) {
            return Err(format!(
                "{at}: max_workers must be at least 1 (leave it out for no bound)"
            ));
        }
        let hash = match (&e.token_sha256, &e.token_file) {
            (Some(hex), None) => parse_hash(hex).ok_or_else(|| {
                format!("{at}: token_sha256 must be 64 hexadecimal digits (sha256sum of the token)")
            })?,
            (None, Some(file)) => {
                let (token, warning) =
                    read_secret_file(file).map_err(|why| format!("{at}: token_file {why}"))?;
                warnings.extend(warning);
                check_auth_token(&token)
                    .map_err(|why| format!("{at}: token_file {}: {why}", file.display()))?;
                table.token_files.push(file.clone());
                sha256(token.as_bytes())
            }
            _ => {
                return Err(format!(
                    "{at}: give exactly one of token_sha256 and token_file"
                ))
            }
        };
        if let Some(names) = &e.templates {
            for name in names {
                check_template_name(name)
                    .map_err(|why| format!("{at}: templates {:?}: {why}", truncated(name)))?;
            }
        }
        if e.max_workspaces == Some(0) {
            return Err(format!(
                "{at}: max_workspaces must be at least 1 (leave it out for no bound)"
            ));
        }
        let caller = Caller::named(&e.name, &e.scope, e.admin, e.max_workers)
            .limited_to(e.templates)
            .with_max_workspaces(e.max_workspaces);
        if table.by_hash.insert(hash, caller).is_some() {
            return Err(format!(
                "{at}: its token is another caller's too: every caller needs its own"
            ));
        }
    }
    Ok((table, warnings))
}

/// A caller's name: 1 to 64 of `[A-Za-z0-9._-]` (it goes into logs and a metric label).
fn check_name(name: &str) -> Result<(), String> {
    let ok = (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err("a name is 1 to 64 of A-Z, a-z, 0-9, '.', '_' and '-'".into())
    }
}

fn truncated(s: &str) -> String {
    s.chars().take(40).collect()
}

fn parse_hash(hex: &str) -> Option<[u8; 32]> {
    let hex = hex.trim();
    if hex.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, pair) in hex.as_bytes().chunks(2).enumerate() {
        let digit = |b: u8| (b as char).to_digit(16);
        out[i] = (digit(pair[0])? * 16 + digit(pair[1])?) as u8;
    }
    Some(out)
}

/// The callers file as it is now: re-read when it, or a token file it names, changes.
pub struct CallersFile {
    file: Watched,
    /// The token files of the table now.
    token_files: RwLock<Vec<Watched>>,
    reserved: Vec<&'static str>,
    table: RwLock<Table>,
}

fn watched(files: &[PathBuf]) -> Vec<Watched> {
    files.iter().cloned().map(Watched::new).collect()
}

impl CallersFile {
    /// The file read at startup (its warnings are the caller's to log).
    pub fn open(
        path: PathBuf,
        reserved: Vec<&'static str>,
    ) -> Result<(CallersFile, Vec<String>), String> {
        let file = Watched::new(path);
        let (table, warnings) = load(&file.path, &reserved)?;
        Ok((
            CallersFile {
                file,
                token_files: RwLock::new(watched(&table.token_files)),
                reserved,
                table: RwLock::new(table),
            },
            warnings,
        ))
    }

    /// How many callers it holds now.
    pub fn count(&self) -> usize {
        self.table.read().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// The caller whose token this is, with the file as it is now.
    pub fn find(&self, token: &str) -> Option<Caller> {
        self.refresh();
        let table = self.table.read().unwrap_or_else(|p| p.into_inner());
        table.find(token).cloned()
    }

    fn refresh(&self) {
        let token_file = {
            let files = self.token_files.read().unwrap_or_else(|p| p.into_inner());
            // Each looked at (so each sees its own change once), not only up to the first.
            files
                .iter()
                .filter(|f| f.changed())
                .map(|f| f.path.display().to_string())
                .last()
        };
        let own = self.file.changed();
        if !own && token_file.is_none() {
            return;
        }
        let path = &self.file.path;
        let (changed, what) = match (&token_file, own) {
            (Some(file), false) => (
                format!(": its token file {file} changed"),
                format!("'s token file {file} changed"),
            ),
            _ => (" changed".to_string(), " changed".to_string()),
        };
        let read = load(path, &self.reserved);
        let mut table = self.table.write().unwrap_or_else(|p| p.into_inner());
        match read {
            Ok((read_table, warnings)) => {
                for w in warnings {
                    log::warn!("{w}");
                }
                log::info!(
                    "A2A_CALLERS_FILE {}{changed}: {} callers now",
                    path.display(),
                    read_table.len()
                );
                *self.token_files.write().unwrap_or_else(|p| p.into_inner()) =
                    watched(&read_table.token_files);
                *table = read_table;
            }
            Err(why) => log::warn!(
                "A2A_CALLERS_FILE{what} but cannot be used ({why}); the {} callers read before stay",
                table.len()
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::token::hex;

    fn file(name: &str, text: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("a2a-callers-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("callers.json");
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        path
    }

    fn h(token: &str) -> String {
        hex(&sha256(token.as_bytes()))
    }

    #[test]
    fn hashes_find_their_callers() {
        let text = format!(
            r#"{{"callers": [
                {{"name": "ci", "token_sha256": "{}", "scope": "team-a", "max_workers": 2}},
                {{"name": "ops", "token_sha256": "{}", "scope": "ops", "admin": true}}
            ]}}"#,
            h("token-of-ci-0123456789"),
            h("token-of-ops-0123456789").to_uppercase()
        );
        let (table, warnings) = load(&file("find", &text), &["admin"]).unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
        let ci = table.find("token-of-ci-0123456789").unwrap();
        assert_eq!(
            (ci.name.as_str(), ci.scope.as_str(), ci.admin),
            ("ci", "team-a", false)
        );
        assert_eq!(ci.max_workers, Some(2));
        assert!(table.find("token-of-ops-0123456789").unwrap().admin);
        assert!(table.find("token-of-ci-012345678").is_none());
        assert!(table.find("").is_none());
    }

    #[test]
    fn malformed_files_say_which_entry() {
        let hash = h("x-0123456789abcdef");
        for (text, says) in [
            ("[]".to_string(), "not a callers file"),
            (
                r#"{"callers": [{"name": "a", "scope": "s"}]}"#.to_string(),
                "exactly one of",
            ),
            (
                format!(
                    r#"{{"callers": [{{"name": "a", "token_sha256": "{hash}", "scope": "S"}}]}}"#
                ),
                "a scope is",
            ),
            (
                format!(
                    r#"{{"callers": [{{"name": "a b", "token_sha256": "{hash}", "scope": "s"}}]}}"#
                ),
                "a name is",
            ),
            (
                format!(
                    r#"{{"callers": [{{"name": "admin", "token_sha256": "{hash}", "scope": "s"}}]}}"#
                ),
                "taken already",
            ),
            (
                format!(
                    r#"{{"callers": [{{"name": "a", "token_sha256": "{hash}", "scope": "s"}}, {{"name": "b", "token_sha256": "{hash}", "scope": "t"}}]}}"#
                ),
                "another caller's too",
            ),
            (
                r#"{"callers": [{"name": "a", "token_sha256": "abc", "scope": "s"}]}"#.to_string(),
                "64 hexadecimal",
            ),
            (
                format!(
                    r#"{{"callers": [{{"name": "a", "token_sha256": "{hash}", "scope": "s", "max_workers": 0}}]}}"#
                ),
                "at least 1",
            ),
            (
                format!(
                    r#"{{"callers": [{{"name": "a", "token_sha256": "{hash}", "scope": "s", "role": "x"}}]}}"#
                ),
                "unknown field",
            ),
        ] {
            let err = load(&file("bad", &text), &["admin"]).unwrap_err();
            assert!(err.contains(says), "{text}: {err}");
        }
    }

    #[test]
    fn token_files_and_modes() {
        use std::os::unix::fs::PermissionsExt;
        let path = file("modes", "");
        let token = path.with_file_name("token");
        std::fs::write(&token, "file-token-0123456789\n").unwrap();
        std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
        let text = format!(
            r#"{{"callers": [{{"name": "a", "token_file": "{}", "scope": "s"}}]}}"#,
            token.display()
        );
        std::fs::write(&path, &text).unwrap();
        let (table, warnings) = load(&path, &[]).unwrap();
        assert!(warnings.is_empty());
        assert_eq!(table.find("file-token-0123456789").unwrap().name, "a");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let (_, warnings) = load(&path, &[]).unwrap();
        assert!(warnings[0].contains("mode is 0644"), "{warnings:?}");
    }
}
