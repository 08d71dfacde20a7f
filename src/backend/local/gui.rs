//! Which WezTerm GUI a call is for. Each running GUI listens on its own socket,
//! `<runtime dir>/gui-sock-<pid>`, and pane ids mean something only within one GUI. New
//! workers go to the current GUI: the one `WEZTERM_UNIX_SOCKET` names, else the newest live
//! `gui-sock-<pid>`. A GUI that exits leaves its socket file behind, so "gone" is judged by
//! the file and by the pid in its name — never by a GUI merely not answering.
//!
//! A socket path without a pid in its name (the mux server's `<runtime dir>/sock`, the GUI's
//! symlink `x11-$DISPLAY-org.wezfurlong.wezterm` / `default-org.wezfurlong.wezterm`) can be
//! bound again by a later server whose pane ids start again at 0 (recorded with the real
//! WezTerm): a pane id there cannot be proven to be the worker's. So a record names the
//! server *instance*, not the path: a symlink is resolved to the `gui-sock-<pid>` it names
//! before anything is recorded, and a mux server's `sock` is named by the pid file
//! `wezterm-mux-server --daemonize` writes beside it (`<runtime dir>/pid`) — not by the
//! socket's device and inode, which a restarted mux server was seen to keep. The instance is
//! the pid and, where the system says, the process's start time (a pid can be reused). A path
//! that names no instance is never recorded; a record without one (an earlier version wrote
//! them) is never acted on.

use std::fs;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

const SOCKET_PREFIX: &str = "gui-sock-";

/// Whether a GUI can still be there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Liveness {
    /// Not proven gone (it may still not answer).
    Alive,
    /// Provably gone, and why.
    Gone(String),
    /// Its socket names no server instance (no pid): whoever listens there now may not be
    /// the server that opened the pane.
    Unprovable(String),
}

/// The socket a GUI really listens on: a symlink (the GUI's `x11-...` / `default-...`
/// name) resolved to the `gui-sock-<pid>` it points at.
pub fn resolve(socket: &Path) -> PathBuf {
    fs::canonicalize(socket).unwrap_or_else(|_| socket.to_path_buf())
}

/// The server instance listening at `socket`, as recorded: `pid N` (and `started T` where the
/// system says when the process started), from the socket's name or, for a name without a
/// pid, from the mux server's pid file beside it. `Err`: one line why it cannot be named.
pub fn instance(socket: &Path) -> Result<String, String> {
    let pid = match pid_of(socket) {
        Some(pid) => pid,
        None => {
            let file = socket.parent().map(|d| d.join("pid"));
            let pid = file
                .as_ref()
                .and_then(|f| fs::read_to_string(f).ok())
                .and_then(|t| t.trim().parse::<u32>().ok());
            match pid {
                Some(pid) if process_alive(pid) => pid,
                Some(pid) => {
                    return Err(format!(
                        "the WezTerm mux server at {} has ended (pid {pid}, from its pid file, is gone); start it again",
                        socket.display()
                    ))
                }
                None => {
                    return Err(format!(
                        "the WezTerm socket {} names no server instance: no pid in its name, and no live pid in {} (wezterm-mux-server --daemonize writes one); a later server listening there could not be told from this one (its pane ids start again at 0). Point WEZTERM_UNIX_SOCKET at a GUI's gui-sock-<pid>, or unset it",
                        socket.display(),
                        file.map(|f| f.display().to_string()).unwrap_or_default()
                    ))
                }
            }
        }
    };
    Ok(match start_time(pid) {
        Some(t) => format!("pid {pid} started {t}"),
        None => format!("pid {pid}"),
    })
}

/// When process `pid` started, in the kernel's clock ticks since boot (Linux `/proc`); `None`
/// elsewhere or when it cannot be read.
fn start_time(pid: u32) -> Option<String> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After "pid (comm)": state is field 3, starttime field 22.
    let rest = stat.rsplit_once(')')?.1;
    rest.split_whitespace().nth(19).map(str::to_string)
}

/// What is listening at one socket now, read once for all the records that name it.
pub struct Server<'a> {
    socket: &'a Path,
    by_path: Liveness,
    now: Result<String, String>,
}

impl<'a> Server<'a> {
    pub fn at(socket: &'a Path) -> Server<'a> {
        Server {
            socket,
            by_path: liveness(socket),
            now: instance(socket),
        }
    }

    /// Whether the server that opened a record's pane (`recorded`, its instance) can still
    /// be this one. Without a recorded instance only a pid in the socket's name can say.
    pub fn of(&self, recorded: Option<&str>) -> Liveness {
        let Some(recorded) = recorded else {
            return self.by_path.clone();
        };
        if let Liveness::Gone(why) = &self.by_path {
            return Liveness::Gone(why.clone());
        }
        match &self.now {
            Ok(now) if now == recorded => Liveness::Alive,
            Ok(now) => Liveness::Gone(format!(
                "another WezTerm server now listens at {} ({now}; the worker's was {recorded})",
                self.socket.display()
            )),
            Err(_) => Liveness::Gone(format!(
                "its WezTerm server ({recorded}) at {} has ended",
                self.socket.display()
            )),
        }
    }
}

/// [`Server::of`] for one record.
pub fn liveness_of(socket: &Path, recorded: Option<&str>) -> Liveness {
    Server::at(socket).of(recorded)
}

/// The GUI's process id, from a socket named `gui-sock-<pid>`.
pub fn pid_of(socket: &Path) -> Option<u32> {
    socket
        .file_name()?
        .to_str()?
        .strip_prefix(SOCKET_PREFIX)?
        .parse()
        .ok()
}

/// Gone when its socket file is missing or the process its name carries has ended.
pub fn liveness(socket: &Path) -> Liveness {
    match fs::symlink_metadata(socket) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Liveness::Gone(format!("its socket {} no longer exists", socket.display()))
        }
        _ => {}
    }
    match pid_of(socket) {
        Some(pid) if !process_alive(pid) => Liveness::Gone(format!(
            "its process {pid} has ended (socket {} left behind)",
            socket.display()
        )),
        Some(_) => Liveness::Alive,
        None => Liveness::Unprovable(format!(
            "its socket {} names no server instance: the server listening there may not be the one that opened the pane",
            socket.display()
        )),
    }
}

/// Whether process `pid` exists and has not ended. Linux reads `/proc` (a zombie has ended);
/// elsewhere `kill -0` asks the kernel (the GUI belongs to the same user as the controller).
fn process_alive(pid: u32) -> bool {
    if pid == 0 {
        return false;
    }
    if cfg!(target_os = "linux") {
        match fs::read_to_string(format!("/proc/{pid}/stat")) {
            // "pid (comm) S ...": the state follows the last ')'.
            Ok(stat) => stat
                .rsplit_once(')')
                .map(|(_, rest)| !rest.trim_start().starts_with(['Z', 'X']))
                .unwrap_or(true),
            Err(_) => false,
        }
    } else {
        std::process::Command::new("/bin/kill")
            .args(["-0", &pid.to_string()])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(true)
    }
}

/// Finds the current GUI.
#[derive(Debug, Clone)]
pub struct Discovery {
    /// `WEZTERM_UNIX_SOCKET` from the controller's environment, when set.
    explicit: Option<PathBuf>,
    /// Where GUIs put their sockets.
    runtime_dir: Option<PathBuf>,
}

impl Discovery {
    /// From the environment the way the WezTerm CLI reads it: `WEZTERM_UNIX_SOCKET`, else the
    /// runtime directory (macOS `~/.local/share/wezterm`; elsewhere
    /// `$XDG_RUNTIME_DIR/wezterm`, else `~/.local/share/wezterm`).
    pub fn from_env(env: &dyn Fn(&str) -> Option<String>) -> Discovery {
        let home_dir = || env("HOME").map(|h| PathBuf::from(h).join(".local/share/wezterm"));
        let runtime_dir = if cfg!(target_os = "macos") {
            home_dir()
        } else {
            env("XDG_RUNTIME_DIR")
                .map(|d| PathBuf::from(d).join("wezterm"))
                .or_else(home_dir)
        };
        Discovery {
            explicit: env("WEZTERM_UNIX_SOCKET").map(PathBuf::from),
            runtime_dir,
        }
    }

    /// Where the CLI leaves its log files (its runtime directory).
    pub fn runtime_dir(&self) -> Option<&Path> {
        self.runtime_dir.as_deref()
    }

    /// The socket of the GUI new workers go to (symlinks resolved), or one line saying why
    /// there is none.
    pub fn current(&self) -> Result<PathBuf, String> {
        if let Some(socket) = &self.explicit {
            if fs::symlink_metadata(socket).is_err() {
                return Err(format!(
                    "no WezTerm GUI at WEZTERM_UNIX_SOCKET: its socket {} does not exist; start WezTerm or unset WEZTERM_UNIX_SOCKET",
                    socket.display()
                ));
            }
            let socket = resolve(socket);
            return match liveness(&socket) {
                Liveness::Alive => Ok(socket),
                Liveness::Gone(why) => Err(format!(
                    "no WezTerm GUI at WEZTERM_UNIX_SOCKET: {why}; start WezTerm or unset WEZTERM_UNIX_SOCKET"
                )),
                Liveness::Unprovable(_) => match instance(&socket) {
                    Ok(_) => Ok(socket),
                    Err(why) => Err(format!("WEZTERM_UNIX_SOCKET: {why}")),
                },
            };
        }
        let Some(dir) = &self.runtime_dir else {
            return Err(
                "no WezTerm GUI can be found: neither XDG_RUNTIME_DIR nor HOME is set".into(),
            );
        };
        let none = || {
            format!(
                "no WezTerm GUI is running (no live {SOCKET_PREFIX}<pid> in {}); start WezTerm",
                dir.display()
            )
        };
        let entries = fs::read_dir(dir).map_err(|_| none())?;
        let mut newest: Option<(SystemTime, u32, PathBuf)> = None;
        for entry in entries.flatten() {
            let path = entry.path();
            let Some(pid) = pid_of(&path) else { continue };
            let Ok(meta) = entry.metadata() else { continue };
            if !meta.file_type().is_socket() || liveness(&path) != Liveness::Alive {
                continue;
            }
            let when = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
            if newest
                .as_ref()
                .is_none_or(|(t, p, _)| (when, pid) > (*t, *p))
            {
                newest = Some((when, pid, path));
            }
        }
        newest.map(|(_, _, path)| path).ok_or_else(none)
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::net::UnixListener;

    use super::*;

    fn dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("a2a-gui-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    fn socket(path: &Path) {
        drop(UnixListener::bind(path).unwrap());
    }

    #[test]
    fn the_newest_live_gui_is_current() {
        let d = dir("current");
        let me = std::process::id();
        let env = |name: &str| match name {
            "XDG_RUNTIME_DIR" | "HOME" => Some(d.to_string_lossy().into_owned()),
            _ => None,
        };
        let found = Discovery::from_env(&env);
        let runtime = found.runtime_dir.clone().unwrap();
        fs::create_dir_all(&runtime).unwrap();
        assert!(found.current().unwrap_err().contains("start WezTerm"));
        // A dead GUI's socket (pid 0 never names a live GUI) and files that are not sockets.
        socket(&runtime.join("gui-sock-0"));
        fs::write(runtime.join(format!("gui-sock-{me}x")), "").unwrap();
        socket(&runtime.join("sock"));
        assert!(found.current().is_err());
        socket(&runtime.join(format!("gui-sock-{me}")));
        assert_eq!(
            found.current().unwrap(),
            runtime.join(format!("gui-sock-{me}"))
        );
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn an_explicit_socket_wins_and_gone_means_missing_or_dead() {
        let d = dir("explicit");
        let live = d.join(format!("gui-sock-{}", std::process::id()));
        socket(&live);
        let env = |name: &str| {
            (name == "WEZTERM_UNIX_SOCKET").then(|| live.to_string_lossy().into_owned())
        };
        assert_eq!(Discovery::from_env(&env).current().unwrap(), live);
        assert_eq!(liveness(&live), Liveness::Alive);
        assert!(
            matches!(liveness(&d.join("gui-sock-1234567")), Liveness::Gone(w) if w.contains("no longer exists"))
        );
        let dead = d.join("gui-sock-0");
        socket(&dead);
        assert!(matches!(liveness(&dead), Liveness::Gone(w) if w.contains("has ended")));
        let _ = fs::remove_dir_all(&d);
    }
}
