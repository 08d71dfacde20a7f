//! The local backend's state file: the record of its workers (a WezTerm pane cannot carry a
//! label). One controller per file — a lock file beside it, held for the process's lifetime,
//! names the holder to a second controller, which refuses to start. Saved wholesale: written
//! to a temporary file, synced, renamed over the old one and the directory synced, so a crash
//! at any point leaves the old file or the new one, never a mix. A file that cannot be parsed
//! stops startup and is never overwritten: its records are the only handle on running tabs.

use std::fmt;
use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// One local worker as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub worker_id: String,
    pub task: String,
    /// `None` only while the tab is being opened: found in a file at startup, it marks a
    /// create that a crash interrupted.
    pub pane_id: Option<u64>,
    /// The socket of the WezTerm GUI the pane belongs to (pane ids mean something only there).
    pub gui_socket: PathBuf,
    /// Which server instance listened there when the pane opened (`pid N started T`): a
    /// later server on the same path is not it. Absent in files of earlier versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gui_instance: Option<String>,
    /// The task file's `claude_session_id` when the worker was created: never reported as its.
    pub baseline_session_id: String,
    /// RFC 3339 UTC.
    pub created_at: String,
    /// When the reaper stops it (Unix seconds); absent in files written before TTLs existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<u64>,
    /// The caller's metadata; absent when none (and in files of earlier versions).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub metadata: crate::backend::Metadata,
    /// The creating caller's scope; absent in files from before scopes (the admin scope's).
    #[serde(default = "admin_scope")]
    pub scope: String,
    /// The template it was made from; absent in files from before templates (`default`).
    #[serde(default = "default_template")]
    pub template: String,
    /// Set while the worker is suspended (its tab closed; `expires_at` is then when it is
    /// stopped for good); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suspended: Option<Suspended>,
}

/// A suspended local worker: what opens its tab again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Suspended {
    /// When (Unix seconds).
    pub at: u64,
    /// Seconds of TTL it gets back on resume; absent: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_left: Option<u64>,
    /// The Claude Code session its tab had: what `resume_command`'s `{session_id}` becomes.
    pub session_id: String,
}

fn default_template() -> String {
    crate::backend::DEFAULT_TEMPLATE.to_string()
}

fn admin_scope() -> String {
    crate::backend::ADMIN_SCOPE.to_string()
}

#[derive(Serialize, Deserialize)]
struct Contents {
    version: u32,
    workers: Vec<Record>,
}

const VERSION: u32 = 1;

/// Why the state file cannot be used. `Display` is one line naming `LOCAL_STATE_FILE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreError {
    /// Another controller holds the file.
    Held {
        path: PathBuf,
        holder: String,
    },
    /// It exists but is not a state file; it is left as it is.
    Corrupt {
        path: PathBuf,
        why: String,
    },
    Io {
        path: PathBuf,
        why: String,
    },
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::Held { path, holder } => write!(
                f,
                "setting LOCAL_STATE_FILE: {} is in use by another controller ({holder}); one state file belongs to one controller",
                path.display()
            ),
            StoreError::Corrupt { path, why } => write!(
                f,
                "setting LOCAL_STATE_FILE: {} cannot be read ({why}); it was left untouched: its records are the only handle on running tabs, so repair or move it",
                path.display()
            ),
            StoreError::Io { path, why } => {
                write!(f, "setting LOCAL_STATE_FILE: {}: {why}", path.display())
            }
        }
    }
}

impl std::error::Error for StoreError {}

pub struct Store {
    path: PathBuf,
    /// Held (locked) for as long as the store lives; `None` for a store only looked at
    /// ([`Store::peek`]), which never writes.
    _lock: Option<File>,
}

fn io(path: &Path, e: std::io::Error) -> StoreError {
    StoreError::Io {
        path: path.to_path_buf(),
        why: e.to_string(),
    }
}

impl Store {
    /// Takes the file for this process (creating its directory, mode 0700) and reads it.
    pub fn open(path: &Path) -> Result<(Store, Vec<Record>), StoreError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            private_dir(dir).map_err(|e| io(dir, e))?;
        }
        let lock_path = lock_path(path);
        let mut lock = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&lock_path)
            .map_err(|e| io(&lock_path, e))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut holder = String::new();
                let _ = lock.read_to_string(&mut holder);
                let holder = match holder.trim() {
                    "" => "holder unknown".to_string(),
                    pid => format!("pid {pid}, per {}", lock_path.display()),
                };
                return Err(StoreError::Held {
                    path: path.to_path_buf(),
                    holder,
                });
            }
            Err(TryLockError::Error(e)) => return Err(io(&lock_path, e)),
        }
        lock.set_len(0).map_err(|e| io(&lock_path, e))?;
        writeln!(lock, "{}", std::process::id()).map_err(|e| io(&lock_path, e))?;
        let store = Store {
            path: path.to_path_buf(),
            _lock: Some(lock),
        };
        let records = store.load()?;
        Ok((store, records))
    }

    /// Reads the file without taking it (for `check` beside a running controller): the
    /// returned store never writes.
    pub fn peek(path: &Path) -> Result<(Store, Vec<Record>), StoreError> {
        let store = Store {
            path: path.to_path_buf(),
            _lock: None,
        };
        let records = store.load()?;
        Ok((store, records))
    }

    /// The records on disk (none when the file does not exist yet).
    pub fn load(&self) -> Result<Vec<Record>, StoreError> {
        let text = match fs::read(&self.path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io(&self.path, e)),
        };
        let contents: Contents =
            serde_json::from_slice(&text).map_err(|e| StoreError::Corrupt {
                path: self.path.clone(),
                why: e.to_string(),
            })?;
        if contents.version != VERSION {
            return Err(StoreError::Corrupt {
                path: self.path.clone(),
                why: format!("version {} is not {VERSION}", contents.version),
            });
        }
        Ok(contents.workers)
    }

    /// Replaces the file with `records`: temporary file (0600), fsync, rename, fsync dir.
    pub fn save(&self, records: &[Record]) -> Result<(), StoreError> {
        if self._lock.is_none() {
            return Ok(());
        }
        let body = serde_json::to_vec_pretty(&Contents {
            version: VERSION,
            workers: records.to_vec(),
        })
        .map_err(|e| io(&self.path, std::io::Error::other(e)))?;
        let tmp = temp_path(&self.path);
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(|e| io(&tmp, e))?;
        file.write_all(&body)
            .and_then(|()| file.write_all(b"\n"))
            .and_then(|()| file.sync_all())
            .map_err(|e| io(&tmp, e))?;
        drop(file);
        fs::rename(&tmp, &self.path).map_err(|e| io(&self.path, e))?;
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(|e| io(dir, e))?;
        }
        Ok(())
    }
}

/// A directory (and its missing parents) only its owner can enter (mode 0700), made if it is
/// not there.
pub fn private_dir(dir: &Path) -> std::io::Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(suffix);
    path.with_file_name(name)
}

fn lock_path(path: &Path) -> PathBuf {
    with_suffix(path, ".lock")
}

fn temp_path(path: &Path) -> PathBuf {
    with_suffix(path, ".tmp")
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("a2a-store-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        d
    }

    fn record(id: &str) -> Record {
        Record {
            worker_id: id.into(),
            task: "a task".into(),
            pane_id: Some(7),
            gui_socket: "/run/user/1/wezterm/gui-sock-123".into(),
            gui_instance: Some("pid 123 started 456".into()),
            baseline_session_id: String::new(),
            created_at: "2026-11-30T00:00:00Z".into(),
            expires_at: None,
            metadata: [("team".to_string(), "infra".to_string())].into(),
            scope: "team-a".into(),
            template: "coder".into(),
            suspended: None,
        }
    }

    #[test]
    fn round_trip_with_private_mode_and_a_created_directory() {
        let d = dir("roundtrip");
        let path = d.join("state").join("local-workers.json");
        let (store, records) = Store::open(&path).unwrap();
        assert!(records.is_empty());
        store.save(&[record("w1"), record("w2")]).unwrap();
        assert_eq!(store.load().unwrap(), [record("w1"), record("w2")]);
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let dir_mode = fs::metadata(path.parent().unwrap())
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(dir_mode, 0o700);
        assert!(!temp_path(&path).exists());
        drop(store);
        // Another test thread that forks in the moment the lock file is open holds a copy of
        // its descriptor (and the lock) until its child execs: try again for a moment.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        let again = loop {
            match Store::open(&path) {
                Ok((_, again)) => break again,
                Err(StoreError::Held { .. }) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(10))
                }
                Err(e) => panic!("{e}"),
            }
        };
        assert_eq!(again.len(), 2);
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn one_controller_per_file() {
        let d = dir("held");
        let path = d.join("local-workers.json");
        let (first, _) = Store::open(&path).unwrap();
        let Err(e) = Store::open(&path) else {
            panic!("a second store on the same file")
        };
        let line = e.to_string();
        assert!(
            line.contains("LOCAL_STATE_FILE") && line.contains(&std::process::id().to_string()),
            "{line}"
        );
        drop(first);
        assert!(
            Store::open(&path).is_ok(),
            "free again once the holder is gone"
        );
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn a_corrupt_file_refuses_and_stays_untouched() {
        let d = dir("corrupt");
        fs::create_dir_all(&d).unwrap();
        let path = d.join("local-workers.json");
        for bad in [&b"{not json"[..], br#"{"version": 99, "workers": []}"#] {
            fs::write(&path, bad).unwrap();
            let Err(e) = Store::open(&path) else {
                panic!("accepted {bad:?}")
            };
            assert!(matches!(e, StoreError::Corrupt { .. }), "{e}");
            assert!(e.to_string().contains("left untouched"));
            assert_eq!(fs::read(&path).unwrap(), bad);
        }
        let _ = fs::remove_dir_all(&d);
    }
}
