//! A stand-in for the `wezterm` program, for the local backend's tests (CI has no WezTerm).
//! It answers the CLI calls the controller makes the way WezTerm's own CLI does — as
//! recorded from a real `wezterm` CLI with a real `wezterm-mux-server` and `wezterm-gui`
//! (`../shared/reference/wezterm-real/{mux,gui}/NN-*.{cmd,out,err,rc}`, "rec" below), and
//! its sources (`wezterm/src/cli/`, `mux/src/localpane.rs`, `pty/src/cmdbuilder.rs`):
//!
//! | behaviour | source |
//! |---|---|
//! | `list --format json`: keys in struct order, no `is_floating`, `cwd` a `file://` URL ending in `/`, no trailing newline | rec 03-list-json, 15-list-after-bad |
//! | a pane whose program ended but stays open (or never started): title `wezterm`, cwd `""`, `tty_name` null | rec 15-list-after-bad, 21-list-after-exit |
//! | a program that does not exist still gets a pane, holding WezTerm's exit message and then `Unable to spawn P because it doesn't exist on the filesystem (ENOENT: ...)`, hard-wrapped at 80 columns | rec 13-spawn-badprog; this session's run on a real mux server |
//! | errors: `HH:MM:SS.mmm  ERROR  wezterm > ...; terminating`, exit 1; a missing pane is `unexpected response Ok(ErrorResponse(ErrorResponse { reason: "Error: no such pane N" }))` | rec 10-get-text-missing, 11-kill-missing, 17-kill-again |
//! | a missing socket or a dead server: `failed to connect to Socket("P"): connecting to P` (no os error text) | rec 22-missing-socket |
//! | an unknown subcommand is a usage error: exit 2 | rec 23-bad-format |
//! | every failing call leaves `wezterm-log-<pid>.txt` in the runtime directory (the socket's) | rec README |
//! | `Exited with code N.` and `exit_behavior` (the tests' `Gui::program_exits` writes localpane.rs's lines) | rec README; localpane.rs |
//! | a stopped GUI (`hung`) answers nothing, then carries out the call when it resumes | rec README |
//! | `get-text` on a scrolled pane answers two more scrollback rows than the start line asks, keeps the trailing spaces the program wrote, leaves colours out; `--escapes` keeps them, drops trailing blanks, ends each row with CR LF and the text with one more LF | rec 05-get-text-default, 07-get-text-start-5, 08-get-text-escapes |
//!
//! And as before:
//!
//! - `wezterm cli [--no-auto-start] [--prefer-mux] [--class C] <subcommand>`; the GUI is the
//!   one whose socket `WEZTERM_UNIX_SOCKET` names. Each GUI has its own windows, tabs and pane
//!   ids (ids start at 0 and only grow, per GUI, as in WezTerm's mux).
//! - `spawn [--new-window | --window-id N] [--cwd DIR] [--workspace W] -- PROG ARGS...` prints
//!   the new pane id and a newline; without `--new-window` or `--window-id` (and no
//!   `WEZTERM_PANE`) it fails, as the real CLI does outside a WezTerm pane.
//! - `list [--format json|table]`: the real JSON shape (an array, one object per pane),
//!   written in one go. The real CLI writes it a line at a time (about 5,000 writes for 200
//!   panes, seen with strace on a real CLI and mux server on 2026-12-05, not in the
//!   recordings): the local backend's reader paces such an answer, and its unit test covers
//!   that path; the stand-in covers the answer read at once.
//! - `kill-pane --pane-id N`: prints nothing; an unknown id fails with "no such pane N".
//! - `get-text --pane-id N [--start-line L] [--end-line L] [--escapes]`: line 0 is the first
//!   row of the 24-row screen, negative lines reach back into the scrollback; the default
//!   range is the screen. Rows the program has not written are empty lines.
//! - A socket whose file is missing fails to connect; so does one named `gui-sock-<pid>`
//!   whose pid has ended (the real socket is left behind and refuses connections).
//! - Errors go to stderr as `ERROR  wezterm > <message>; terminating` with exit status 1.
//!
//! What the tests control, in `<socket>.standin.json` beside each GUI socket: `hung` (the
//! GUI accepts the call and never answers) and `spawn_delay_ms`. Every call is appended to
//! `standin-calls.log` in the socket's directory (argv and socket), so tests can see what
//! ran — and whether anything broke the rules a daemon must keep: the program called by a
//! relative path, or without `--no-auto-start` (which would start a headless mux server
//! behind the operator's back). Such a call is logged as a violation and fails.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

#[derive(Default, Serialize, Deserialize)]
struct Gui {
    #[serde(default)]
    hung: bool,
    #[serde(default)]
    spawn_delay_ms: u64,
    #[serde(default)]
    next_id: u64,
    #[serde(default)]
    panes: Vec<Pane>,
}

#[derive(Serialize, Deserialize)]
struct Pane {
    window_id: u64,
    tab_id: u64,
    pane_id: u64,
    workspace: String,
    cwd: String,
    argv: Vec<String>,
    /// What the pane's program printed, one entry per line, oldest first (tests write it).
    #[serde(default)]
    output: Vec<String>,
    /// Its program ended (or never started) and WezTerm holds the pane open.
    #[serde(default)]
    ended: bool,
}

/// Rows of the stand-in's 80x24 panes.
const ROWS: usize = 24;

/// The runtime directory of the call (the socket's), where a failing call leaves its log.
static LOG_DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

fn fail(message: &str) -> ExitCode {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let (s, ms) = (now.as_secs() % 86_400, now.subsec_millis());
    eprintln!(
        "{:02}:{:02}:{:02}.{ms:03}  ERROR  wezterm > {message}; terminating",
        s / 3600,
        s / 60 % 60,
        s % 60
    );
    if let Some(dir) = LOG_DIR.get() {
        let _ = fs::write(
            dir.join(format!("wezterm-log-{}.txt", std::process::id())),
            format!("ERROR  wezterm > {message}\n"),
        );
    }
    ExitCode::from(1)
}

fn no_such_pane(id: u64) -> ExitCode {
    fail(&format!(
        "unexpected response Ok(ErrorResponse(ErrorResponse {{ reason: \"Error: no such pane {id}\" }}))"
    ))
}

fn log_call(socket: Option<&Path>, argv: &[String], violation: Option<&str>) {
    let Some(dir) = socket.and_then(Path::parent) else {
        return;
    };
    let line = json!({"argv": argv, "socket": socket, "violation": violation});
    if let Ok(mut f) = OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("standin-calls.log"))
    {
        // One write per line: calls to several GUIs run at once and append to one file.
        let _ = f.write_all(format!("{line}\n").as_bytes());
    }
}

fn pid_alive(pid: u32) -> bool {
    if !Path::new("/proc/self").exists() {
        // macOS: ask the kernel.
        return std::process::Command::new("/bin/kill")
            .args(["-0", &pid.to_string()])
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
    }
    fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().to_string())
        })
        .is_some_and(|rest| !rest.starts_with(['Z', 'X']))
}

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().collect();
    let socket = std::env::var_os("WEZTERM_UNIX_SOCKET").map(PathBuf::from);
    if !argv.first().is_some_and(|p| Path::new(p).is_absolute()) {
        log_call(socket.as_deref(), &argv, Some("relative program path"));
        return fail("stand-in: called by a relative program path; a daemon has no PATH to trust");
    }
    let mut rest = argv.iter().skip(1).map(String::as_str).peekable();
    if rest.next() != Some("cli") {
        return fail("stand-in: only `wezterm cli` is mimicked");
    }
    let mut no_auto_start = false;
    while let Some(opt) = rest.peek().copied() {
        match opt {
            "--no-auto-start" => no_auto_start = true,
            "--prefer-mux" => {}
            "--class" => {
                rest.next();
            }
            _ => break,
        }
        rest.next();
    }
    if !no_auto_start {
        log_call(socket.as_deref(), &argv, Some("no --no-auto-start"));
        return fail("stand-in: called without --no-auto-start: the real CLI would start a headless mux server");
    }
    let Some(socket) = socket else {
        return fail(
            "stand-in: WEZTERM_UNIX_SOCKET is not set (the controller always names the GUI)",
        );
    };
    log_call(Some(&socket), &argv, None);
    if let Some(dir) = socket.parent() {
        let _ = LOG_DIR.set(dir.to_path_buf());
    }
    let name = socket.file_name().and_then(|n| n.to_str()).unwrap_or("");
    // A GUI's socket names its pid; a mux server's `sock` has its pid in the pid file beside
    // it: either way a server that has ended leaves a socket that refuses connections.
    let pid = name
        .strip_prefix("gui-sock-")
        .map(str::to_string)
        .or_else(|| fs::read_to_string(socket.parent()?.join("pid")).ok())
        .and_then(|p| p.trim().parse::<u32>().ok());
    let dead_pid = pid.is_some_and(|pid| !pid_alive(pid));
    if !socket.exists() || dead_pid {
        return fail(&format!(
            "failed to connect to Socket({socket:?}): connecting to {}",
            socket.display()
        ));
    }
    let state_path = PathBuf::from(format!("{}.standin.json", socket.display()));
    let read = || -> Gui {
        fs::read(&state_path)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default()
    };
    // A stopped GUI accepts the call and answers nothing; when it resumes it carries the call
    // out (rec README: a queued spawn or kill-pane happens even after the CLI was killed; here
    // only for a CLI still waiting).
    let hung_since = std::time::Instant::now();
    while read().hung {
        if hung_since.elapsed() > Duration::from_secs(3600) {
            return fail("stand-in: hung GUI never resumed");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let lock = File::create(format!("{}.standin.lock", socket.display()))
        .and_then(|f| f.lock().map(|()| f));
    let Ok(_lock) = lock else {
        return fail("stand-in: cannot lock its state");
    };
    let mut gui = read();
    let sub = rest.next().unwrap_or("");
    let args: Vec<&str> = rest.collect();
    let value_of = |flag: &str| {
        args.iter()
            .position(|a| *a == flag)
            .and_then(|i| args.get(i + 1).copied())
    };
    match sub {
        "spawn" => {
            let (opts, prog) = match args.iter().position(|a| *a == "--") {
                Some(i) => (&args[..i], args[i + 1..].to_vec()),
                None => (&args[..], Vec::new()),
            };
            let new_window = opts.contains(&"--new-window");
            let window = value_of("--window-id").and_then(|w| w.parse::<u64>().ok());
            if !new_window && window.is_none() && std::env::var_os("WEZTERM_PANE").is_none() {
                return fail("--pane-id was not specified and $WEZTERM_PANE is not set in the environment, and I couldn't determine which pane was currently focused");
            }
            std::thread::sleep(Duration::from_millis(gui.spawn_delay_ms));
            let pane_id = gui.next_id;
            gui.next_id += 1;
            let window_id = window.unwrap_or(pane_id);
            // WezTerm opens the pane whatever the program; one that cannot start leaves it
            // holding the error (cmdbuilder.rs), listed as ended.
            // The text a real mux server showed for it: the exit message, then the error,
            // hard-wrapped at the pane's 80 columns.
            let missing: Option<Vec<String>> = prog
                .first()
                .filter(|p| Path::new(p).is_absolute() && !Path::new(p).exists())
                .map(|p| {
                    let shown = prog.join(" ");
                    let error = format!("This message is shown because exit_behavior=\"CloseOnCleanExit\"Unable to spawn {p} because it doesn't exist on the filesystem (ENOENT: No such file or directory)");
                    let mut lines = vec![
                        format!("⚠️ Process \"{shown}\" in domain \"local\" didn't exit cleanly"),
                        "Exited with code 1.".to_string(),
                    ];
                    let chars: Vec<char> = error.chars().collect();
                    lines.extend(chars.chunks(80).map(|c| c.iter().collect::<String>()));
                    lines
                });
            gui.panes.push(Pane {
                window_id,
                tab_id: pane_id,
                pane_id,
                workspace: value_of("--workspace").unwrap_or("default").to_string(),
                cwd: value_of("--cwd").unwrap_or("").to_string(),
                argv: prog.iter().map(|s| s.to_string()).collect(),
                ended: missing.is_some(),
                output: missing.unwrap_or_default(),
            });
            if save(&state_path, &gui).is_err() {
                return fail("stand-in: cannot save its state");
            }
            println!("{pane_id}");
        }
        "list" => {
            let items: Vec<String> = gui
                .panes
                .iter()
                .map(|p| {
                    let title = p
                        .argv
                        .first()
                        .and_then(|a| Path::new(a).file_name())
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default();
                    let (title, cwd, tty) = if p.ended {
                        ("wezterm".to_string(), String::new(), Value::Null)
                    } else {
                        let cwd = format!("file://{}/", p.cwd.trim_end_matches('/'));
                        (title, cwd, json!(format!("/dev/pts/{}", p.pane_id + 7)))
                    };
                    // In the real CLI's key order (serde_json's own maps sort their keys).
                    let size = ordered(
                        &[
                            ("rows", "24".into()),
                            ("cols", "80".into()),
                            ("pixel_width", "800".into()),
                            ("pixel_height", "528".into()),
                            ("dpi", "96".into()),
                        ],
                        "    ",
                    );
                    let q = |v: &str| Value::from(v).to_string();
                    ordered(
                        &[
                            ("window_id", p.window_id.to_string()),
                            ("tab_id", p.tab_id.to_string()),
                            ("pane_id", p.pane_id.to_string()),
                            ("workspace", q(&p.workspace)),
                            ("size", size),
                            ("title", q(&title)),
                            ("cwd", q(&cwd)),
                            ("cursor_x", "0".into()),
                            ("cursor_y", "0".into()),
                            ("cursor_shape", q("Default")),
                            ("cursor_visibility", q("Visible")),
                            ("left_col", "0".into()),
                            ("top_row", "0".into()),
                            ("tab_title", q("")),
                            ("window_title", q("")),
                            ("is_active", "true".into()),
                            ("is_zoomed", "false".into()),
                            ("tty_name", tty.to_string()),
                        ],
                        "  ",
                    )
                })
                .collect();
            match value_of("--format").unwrap_or("table") {
                // No trailing newline (rec 03-list-json).
                "json" => {
                    if items.is_empty() {
                        print!("[]");
                    } else {
                        print!("[\n  {}\n]", items.join(",\n  "));
                    }
                }
                "table" => {
                    println!("WINID TABID PANEID WORKSPACE SIZE  TITLE CWD");
                    for p in &gui.panes {
                        println!(
                            "{} {} {} {} 80x24 {} {}",
                            p.window_id,
                            p.tab_id,
                            p.pane_id,
                            p.workspace,
                            p.argv.first().map(String::as_str).unwrap_or(""),
                            p.cwd
                        );
                    }
                }
                _ => return fail("unknown output format"),
            }
        }
        "kill-pane" => {
            let Some(id) = value_of("--pane-id").and_then(|p| p.parse::<u64>().ok()) else {
                return fail(
                    "--pane-id was not specified and $WEZTERM_PANE is not set in the environment",
                );
            };
            let before = gui.panes.len();
            gui.panes.retain(|p| p.pane_id != id);
            if gui.panes.len() == before {
                return no_such_pane(id);
            }
            if save(&state_path, &gui).is_err() {
                return fail("stand-in: cannot save its state");
            }
        }
        "get-text" => {
            let Some(id) = value_of("--pane-id").and_then(|p| p.parse::<u64>().ok()) else {
                return fail(
                    "--pane-id was not specified and $WEZTERM_PANE is not set in the environment",
                );
            };
            let Some(pane) = gui.panes.iter().find(|p| p.pane_id == id) else {
                return no_such_pane(id);
            };
            let line_of = |flag: &str, default: i64| -> Option<i64> {
                value_of(flag).map_or(Some(default), |v| v.parse().ok())
            };
            let (Some(start), Some(end)) = (
                line_of("--start-line", 0),
                line_of("--end-line", ROWS as i64 - 1),
            ) else {
                return fail("invalid line number");
            };
            // The screen shows the last rows written; what scrolled off is the scrollback.
            let scrollback = pane.output.len().saturating_sub(ROWS) as i64;
            let escapes = args.contains(&"--escapes");
            let row = |r: i64| -> String {
                let at = scrollback + r;
                if at < 0 {
                    return String::new();
                }
                let line = pane.output.get(at as usize).map_or("", String::as_str);
                if escapes {
                    // With escapes, a row ends where its last written cell does (rec 08).
                    line.trim_end_matches(' ').to_string()
                } else {
                    without_escapes(line)
                }
            };
            // Two more scrollback rows than the start line asks, where there are some (rec
            // 05, 07: `--start-line -5` on a scrolled 24-row pane answers 31 rows).
            let first = (start - 2).max(-scrollback);
            let last = end.min(ROWS as i64 - 1);
            let mut text = String::new();
            for r in first..=last {
                text.push_str(&row(r));
                text.push_str(if escapes { "\r\n" } else { "\n" });
            }
            if escapes {
                text.push('\n');
            }
            print!("{text}");
        }
        other => {
            eprintln!("error: unrecognized subcommand '{other}'");
            return ExitCode::from(2);
        }
    }
    ExitCode::SUCCESS
}

/// The line as `get-text` without `--escapes` gives it: CSI sequences (colours) left out,
/// trailing spaces kept (rec 05-get-text-default against 08-get-text-escapes).
fn without_escapes(line: &str) -> String {
    let mut out = String::new();
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c != '\u{1b}' {
            out.push(c);
            continue;
        }
        if chars.next() == Some('[') {
            for c in chars.by_ref() {
                if ('\u{40}'..='\u{7e}').contains(&c) {
                    break;
                }
            }
        }
    }
    out
}

/// A JSON object with its keys in the order given (values already JSON), pretty-printed as
/// the real CLI prints it; `indent` is the object's own indentation.
fn ordered(fields: &[(&str, String)], indent: &str) -> String {
    let inner: Vec<String> = fields
        .iter()
        .map(|(k, v)| format!("{indent}  \"{k}\": {v}"))
        .collect();
    format!("{{\n{}\n{indent}}}", inner.join(",\n"))
}

fn save(path: &Path, gui: &Gui) -> std::io::Result<()> {
    let tmp = PathBuf::from(format!("{}.tmp", path.display()));
    fs::write(&tmp, serde_json::to_vec_pretty(gui)?)?;
    fs::rename(tmp, path)
}
