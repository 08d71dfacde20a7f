//! A file the controller re-reads when it changes (the token file, the callers file, the
//! templates file): requests look at it, at most once a second, with one `stat`.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use crate::time::now_millis;

/// How often, at most, a watched file is looked at (one `stat`).
const FILE_CHECK_INTERVAL_MS: u64 = 1000;

/// A file that requests look at (one `stat`, at most once a second) to learn that it changed:
/// its size, modification time or inode is not what it was when last seen.
pub struct Watched {
    pub path: PathBuf,
    /// What the file looked like when it was last seen changed (or at startup).
    seen: std::sync::Mutex<Option<Stamp>>,
    next_check_ms: AtomicU64,
}

impl Watched {
    /// `path` as it is now; the first look is a second from now.
    pub fn new(path: PathBuf) -> Watched {
        Watched {
            seen: std::sync::Mutex::new(stamp(&path)),
            path,
            next_check_ms: AtomicU64::new(now_millis() + FILE_CHECK_INTERVAL_MS),
        }
    }

    /// Whether the file changed since it was last seen. At most once a second, and to one
    /// request only: the others go on at once without a look.
    pub fn changed(&self) -> bool {
        let now = now_millis();
        let due = self.next_check_ms.load(Ordering::Relaxed);
        if now < due
            || self
                .next_check_ms
                .compare_exchange(
                    due,
                    now + FILE_CHECK_INTERVAL_MS,
                    Ordering::AcqRel,
                    Ordering::Relaxed,
                )
                .is_err()
        {
            return false;
        }
        let now_seen = stamp(&self.path);
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if *seen == now_seen {
            return false;
        }
        *seen = now_seen;
        true
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp {
    modified: Option<SystemTime>,
    len: u64,
    inode: u64,
}

fn stamp(path: &Path) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some(Stamp {
        modified: m.modified().ok(),
        len: m.len(),
        inode: m.ino(),
    })
}
