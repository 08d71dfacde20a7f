//! The WezTerm CLI, run as a program: `<LOCAL_WEZTERM> cli --no-auto-start <subcommand>` with
//! `WEZTERM_UNIX_SOCKET` naming the GUI the call is for. `--no-auto-start` is never left out:
//! without it a CLI that finds no GUI silently starts a headless mux server, behind the
//! operator's back. Every call has a deadline; a CLI that does not finish by then is killed
//! (and reaped), so a hung GUI costs one timeout, never a hung request.

use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use serde::Deserialize;

use crate::backend::api_call::one_line;

/// The most of one stream a call keeps (a `list` of a few hundred panes is well below).
const OUTPUT_CAP: u64 = 4 << 20;

/// Why a CLI call did not do what was asked. `Display` is one line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CliError {
    /// The program could not be started at all.
    Launch(String),
    /// It did not finish in time and was killed.
    TimedOut(Duration),
    /// It exited unsuccessfully; the last line it wrote to stderr.
    Failed(String),
    /// It succeeded but printed something the CLI does not print.
    Output(String),
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CliError::Launch(why) => write!(f, "wezterm cannot be run: {why}"),
            CliError::TimedOut(after) => write!(
                f,
                "wezterm did not answer within {} ms and was stopped (LOCAL_CLI_TIMEOUT)",
                after.as_millis()
            ),
            CliError::Failed(why) => write!(f, "wezterm failed: {why}"),
            CliError::Output(why) => write!(f, "wezterm printed something unexpected: {why}"),
        }
    }
}

/// The log file of one CLI call, removed when the call is over: a failing call leaves one,
/// and a reaper pass every 30 s against a dead GUI would leave thousands a day.
struct CallLog {
    path: PathBuf,
}

impl Drop for CallLog {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// What a pane's text says of a program that ended: `exited with code N`, or why it could not
/// start (WezTerm's `Unable to spawn ...`); `None` when the text says neither.
pub fn ended_reason(text: &str) -> Option<String> {
    // WezTerm writes the spawn error last, right after its exit message, hard-wrapped at
    // the pane's width (seen on a real mux server): the rest of the text, unwrapped.
    if let Some(at) = text.rfind("Unable to spawn") {
        let message: String = text[at..].lines().map(str::trim_end).collect();
        return Some(format!("could not start: {}", one_line(&message)));
    }
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let code = lines.iter().rev().find_map(|l| {
        let rest = l.split("Exited with code ").nth(1)?;
        let digits: String = rest
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '-')
            .collect();
        digits.parse::<i64>().ok()
    });
    if let Some(code) = code {
        return Some(format!("exited with code {code}"));
    }
    lines
        .iter()
        .rev()
        .find(|l| l.contains("completed."))
        .map(|_| "exited with code 0".to_string())
}

/// What `kill-pane` found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Killed {
    Closed,
    /// The GUI has no such pane (closed by hand, or its program ended).
    AlreadyGone,
}

pub struct Cli {
    program: PathBuf,
    timeout: Duration,
    /// Where the CLI leaves `wezterm-log-<pid>.txt` after a failing call (its runtime
    /// directory); each call's file is removed after it.
    log_dir: Option<PathBuf>,
    /// `LOCAL_WORKSPACE`: the workspace new windows go to.
    workspace: Option<String>,
}

/// One pane of `list --format json`, as far as the backend reads it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Listed {
    pub pane_id: u64,
    #[serde(default)]
    pub title: String,
    #[serde(default)]
    pub cwd: String,
}

impl Listed {
    /// Whether the pane's program has ended (or never started) and WezTerm holds the pane
    /// open: the real CLI lists such a pane with title `wezterm` and cwd `""` (recordings
    /// `15-list-after-bad`, `21-list-after-exit`); a running program has its own title and a
    /// `file://` cwd.
    pub fn ended(&self) -> bool {
        self.title == "wezterm" && self.cwd.is_empty()
    }
}

impl Cli {
    pub fn new(program: PathBuf, timeout: Duration) -> Cli {
        Cli {
            program,
            timeout,
            log_dir: None,
            workspace: None,
        }
    }

    /// Removes the log file a failing call leaves in `dir`.
    pub fn with_log_dir(mut self, dir: Option<PathBuf>) -> Cli {
        self.log_dir = dir;
        self
    }

    /// New windows go to `workspace` (`spawn --workspace`).
    pub fn with_workspace(mut self, workspace: Option<String>) -> Cli {
        self.workspace = workspace;
        self
    }

    /// The arguments of `spawn --new-window --cwd <cwd> [--workspace W] -- <argv>`.
    fn spawn_args<'a>(&'a self, cwd: &'a Path, argv: &'a [String]) -> Vec<&'a std::ffi::OsStr> {
        let mut args: Vec<&std::ffi::OsStr> =
            vec!["spawn".as_ref(), "--new-window".as_ref(), "--cwd".as_ref()];
        args.push(cwd.as_os_str());
        if let Some(w) = &self.workspace {
            args.push("--workspace".as_ref());
            args.push(w.as_ref());
        }
        args.push("--".as_ref());
        args.extend(argv.iter().map(|a| std::ffi::OsStr::new(a.as_str())));
        args
    }

    /// `list --format json`: every pane the GUI has.
    pub fn list(&self, gui: &Path) -> Result<Vec<Listed>, CliError> {
        let out = self.run(
            gui,
            &["list".as_ref(), "--format".as_ref(), "json".as_ref()],
        )?;
        serde_json::from_str(&out)
            .map_err(|e| CliError::Output(format!("pane list is not JSON ({e})")))
    }

    /// `kill-pane --pane-id N`.
    pub fn kill_pane(&self, gui: &Path, pane_id: u64) -> Result<Killed, CliError> {
        let id = pane_id.to_string();
        match self.run(
            gui,
            &["kill-pane".as_ref(), "--pane-id".as_ref(), id.as_ref()],
        ) {
            Ok(_) => Ok(Killed::Closed),
            Err(CliError::Failed(why)) if why.contains("no such pane") => Ok(Killed::AlreadyGone),
            Err(e) => Err(e),
        }
    }

    /// `get-text --pane-id N --start-line -<back>`: the pane's text from `back` lines into the
    /// scrollback to the bottom of its screen (rows not yet written are empty lines).
    pub fn get_text(&self, gui: &Path, pane_id: u64, back: u32) -> Result<String, CliError> {
        let id = pane_id.to_string();
        let start = format!("-{back}");
        self.run(
            gui,
            &[
                "get-text".as_ref(),
                "--pane-id".as_ref(),
                id.as_ref(),
                "--start-line".as_ref(),
                start.as_ref(),
            ],
        )
    }

    /// Runs `<program> cli --no-auto-start <args>` for the GUI at `gui`; its stdout. A call
    /// that does not finish by the deadline is killed.
    fn run(&self, gui: &Path, args: &[&std::ffi::OsStr]) -> Result<String, CliError> {
        let call = self.start(gui, args)?;
        match call.wait(Instant::now() + self.timeout) {
            Waited::Done(result) => result,
            Waited::Late(call) => {
                call.kill();
                Err(CliError::TimedOut(self.timeout))
            }
        }
    }

    /// `spawn --new-window --cwd <cwd> -- <argv>`: a new window running `argv`; its pane id.
    /// Unlike every other call, one that does not finish in time is handed back, not killed: a stopped GUI carries out a queued spawn when it resumes (even
    /// for a CLI that was killed), so the caller keeps waiting for the pane id it will print.
    pub fn spawn_or_late(
        &self,
        gui: &Path,
        cwd: &Path,
        argv: &[String],
    ) -> Result<u64, SpawnError> {
        let args = self.spawn_args(cwd, argv);
        let call = self.start(gui, &args).map_err(SpawnError::Failed)?;
        match call.wait(Instant::now() + self.timeout) {
            Waited::Done(out) => out.and_then(|o| pane_id(&o)).map_err(SpawnError::Failed),
            Waited::Late(call) => Err(SpawnError::Late(LateSpawn {
                call,
                timeout: self.timeout,
            })),
        }
    }

    fn start(&self, gui: &Path, args: &[&std::ffi::OsStr]) -> Result<Call, CliError> {
        let mut child = Command::new(&self.program)
            .arg("cli")
            .arg("--no-auto-start")
            .args(args)
            .env("WEZTERM_UNIX_SOCKET", gui)
            // Spawned from a WezTerm pane, the CLI would otherwise take that pane as "current".
            .env_remove("WEZTERM_PANE")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| CliError::Launch(format!("{}: {e}", self.program.display())))?;
        let log = self.log_dir.as_ref().map(|dir| CallLog {
            path: dir.join(format!("wezterm-log-{}.txt", child.id())),
        });
        // Both pipes are drained by threads so a chatty child never blocks on a full pipe.
        let (tx, rx) = mpsc::channel();
        for (which, stream) in [
            (
                0,
                child
                    .stdout
                    .take()
                    .map(|s| Box::new(s) as Box<dyn Read + Send>),
            ),
            (
                1,
                child
                    .stderr
                    .take()
                    .map(|s| Box::new(s) as Box<dyn Read + Send>),
            ),
        ] {
            let Some(mut stream) = stream else { continue };
            let tx = tx.clone();
            thread::spawn(move || {
                let _ = tx.send((which, drain(&mut stream)));
            });
        }
        drop(tx);
        Ok(Call {
            child,
            rx,
            read: Vec::new(),
            _log: log,
        })
    }
}

/// Reads this short, three in a row, mean the CLI is writing its answer a line at a time.
const TRICKLE: usize = 512;
/// How long the pipe is left to fill once the CLI is seen writing a little at a time.
const TRICKLE_PAUSE: Duration = Duration::from_millis(1);

/// A CLI stream read to its end, the first [`OUTPUT_CAP`] bytes kept. The real CLI writes
/// `list --format json` a line at a time (some 5,000 writes for 200 panes), and a reader
/// waiting on the pipe is woken by every one of them, which slows each write: 200 tabs were
/// listed ×1.27-1.32 of the CLI run alone. So once three reads in a row find only a line, the
/// reader lets the pipe fill for a millisecond before each next read (the pipe holds 64 KiB,
/// more than that CLI writes in one); an answer written at once is read at once.
fn drain(stream: &mut dyn Read) -> Vec<u8> {
    drain_pacing(stream, &mut || thread::sleep(TRICKLE_PAUSE))
}

/// [`drain`], with `pause` called where it lets the pipe fill.
fn drain_pacing(stream: &mut dyn Read, pause: &mut dyn FnMut()) -> Vec<u8> {
    // On the reader thread's stack: no heap block allocated and zeroed per stream per call.
    let (mut kept, mut buf) = (Vec::new(), [0u8; 16 << 10]);
    let mut short_reads = 0;
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return kept,
            Ok(n) => {
                let room = (OUTPUT_CAP as usize).saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
                short_reads = if n < TRICKLE { short_reads + 1 } else { 0 };
                if short_reads >= 3 {
                    pause();
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return kept,
        }
    }
}

/// One CLI call under way.
pub struct Call {
    child: std::process::Child,
    rx: mpsc::Receiver<(u8, Vec<u8>)>,
    /// The streams read to their end so far (stdout 0, stderr 1).
    read: Vec<(u8, Vec<u8>)>,
    _log: Option<CallLog>,
}

/// How waiting for a call ended.
enum Waited {
    Done(Result<String, CliError>),
    /// Still running at the deadline.
    Late(Call),
}

/// Why `spawn_or_late` has no pane id (yet).
pub enum SpawnError {
    Failed(CliError),
    /// The GUI has not answered in time; the call goes on.
    Late(LateSpawn),
}

/// A spawn whose GUI did not answer in time, still waiting for its answer.
pub struct LateSpawn {
    call: Call,
    timeout: Duration,
}

impl LateSpawn {
    /// How long it was waited for before it was found late.
    pub fn waited(&self) -> Duration {
        self.timeout
    }

    /// Waits up to `patience` more for the pane id; then the call is killed.
    pub fn finish(self, patience: Duration) -> Result<u64, CliError> {
        match self.call.wait(Instant::now() + patience) {
            Waited::Done(out) => out.and_then(|o| pane_id(&o)),
            Waited::Late(call) => {
                call.kill();
                Err(CliError::TimedOut(patience))
            }
        }
    }
}

/// A pane id as `spawn` prints it.
fn pane_id(out: &str) -> Result<u64, CliError> {
    out.trim()
        .parse()
        .map_err(|_| CliError::Output(format!("{:?} is not a pane id", one_line(out.trim()))))
}

impl Call {
    fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Waits for the call until `deadline`: its stdout, or the failure. The end of its
    /// output is waited on, not a timer (a CLI that answers in 7 ms was seen at 14 ms when
    /// its exit was looked for at 2, 6 and 14 ms); once both streams are read, its exit is
    /// looked for every millisecond.
    fn wait(mut self, deadline: Instant) -> Waited {
        let mut pause = Duration::from_millis(2);
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if Instant::now() >= deadline => return Waited::Late(self),
                Ok(None) if self.read.len() < 2 => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    match self.rx.recv_timeout(pause.min(left)) {
                        Ok(stream) => self.read.push(stream),
                        Err(mpsc::RecvTimeoutError::Timeout) => {
                            pause = (pause * 2).min(Duration::from_millis(25));
                        }
                        // Both readers are done (or gone): only the exit is left.
                        Err(mpsc::RecvTimeoutError::Disconnected) => {
                            while self.read.len() < 2 {
                                self.read.push((2, Vec::new()));
                            }
                        }
                    }
                }
                Ok(None) => {
                    thread::sleep(
                        Duration::from_millis(1)
                            .min(deadline.saturating_duration_since(Instant::now())),
                    );
                }
                Err(e) => {
                    self.kill();
                    return Waited::Done(Err(CliError::Launch(e.to_string())));
                }
            }
        };
        Waited::Done(self.output(status, deadline))
    }

    fn output(
        &self,
        status: std::process::ExitStatus,
        deadline: Instant,
    ) -> Result<String, CliError> {
        let rx = &self.rx;
        // A grandchild still holding a pipe must not hold the caller: the streams get what is
        // left of the deadline (at least a moment).
        let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
        let mut put = |(which, bytes): (u8, Vec<u8>)| match which {
            0 => stdout = bytes,
            1 => stderr = bytes,
            _ => {}
        };
        let already = self.read.len();
        for stream in self.read.iter().cloned() {
            put(stream);
        }
        for _ in already..2 {
            let wait = deadline
                .saturating_duration_since(Instant::now())
                .max(Duration::from_millis(100));
            match rx.recv_timeout(wait) {
                Ok(stream) => put(stream),
                Err(_) => break,
            }
        }
        if status.success() {
            return String::from_utf8(stdout)
                .map_err(|_| CliError::Output("output is not UTF-8".into()));
        }
        let stderr = String::from_utf8_lossy(&stderr);
        let line = stderr
            .lines()
            .map(str::trim)
            .rfind(|l| !l.is_empty())
            .unwrap_or("no message");
        Err(CliError::Failed(format!("{status}: {}", one_line(line))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stream that gives `pieces` one per read, then its end.
    struct Pieces(std::collections::VecDeque<Vec<u8>>);

    impl Read for Pieces {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let Some(piece) = self.0.pop_front() else {
                return Ok(0);
            };
            let n = piece.len().min(buf.len());
            buf[..n].copy_from_slice(&piece[..n]);
            if n < piece.len() {
                self.0.push_front(piece[n..].to_vec());
            }
            Ok(n)
        }
    }

    #[test]
    fn a_stream_is_read_whole_a_line_at_a_time_or_at_once_and_kept_up_to_its_cap() {
        let read = |pieces: &[Vec<u8>]| {
            let mut pauses = 0;
            let read = drain_pacing(&mut Pieces(pieces.iter().cloned().collect()), &mut || {
                pauses += 1
            });
            (read, pauses)
        };
        // A line at a time, as the real CLI writes `list`: every byte, in order, paced after
        // the third short read.
        let lines: Vec<Vec<u8>> = (0..12)
            .map(|i| format!("line {i}\n").into_bytes())
            .collect();
        assert_eq!(read(&lines), (lines.concat(), 10));
        // At once, or in large pieces: never paused.
        let big = vec![b'x'; 100_000];
        assert_eq!(read(std::slice::from_ref(&big)), (big, 0));
        let halves = [
            vec![b'a'; 600],
            vec![b'b'; 600],
            vec![b'c'; 600],
            vec![b'd'; 10],
        ];
        assert_eq!(read(&halves), (halves.concat(), 0));
        // More than the cap: the first OUTPUT_CAP bytes kept, the rest read and dropped.
        let chunks: Vec<Vec<u8>> = (0..80).map(|i| vec![i as u8; 64 << 10]).collect();
        let (read, pauses) = read(&chunks);
        assert_eq!((read.len() as u64, pauses), (OUTPUT_CAP, 0));
        assert_eq!(read[..], chunks.concat()[..OUTPUT_CAP as usize]);
    }

    /// A `wezterm` made of a shell script: `body` sees the CLI's arguments as `$@`.
    ///
    /// Written by a child process, never through a file descriptor of this one: a test thread
    /// that forks (any `Command::spawn`) while this process holds the script open for writing
    /// hands that descriptor to its child until the child's exec, and executing the script
    /// meanwhile fails with ETXTBSY ("Text file busy"). A pipe to the writer is harmless.
    fn program(tag: &str, body: &str) -> PathBuf {
        use std::io::Write;
        let dir = std::env::temp_dir().join(format!("a2a-cli-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("wezterm");
        let mut writer = std::process::Command::new("/bin/sh")
            .args(["-c", "cat > \"$1\" && chmod 755 \"$1\"", "sh"])
            .arg(&path)
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = writer.stdin.take().unwrap();
        stdin
            .write_all(format!("#!/bin/sh\n{body}\n").as_bytes())
            .unwrap();
        drop(stdin);
        assert!(writer.wait().unwrap().success());
        path
    }

    #[test]
    fn calls_say_no_auto_start_and_name_the_gui() {
        let p = program(
            "args",
            r#"echo "$1 $2 $3 $WEZTERM_UNIX_SOCKET" >&2; exit 3"#,
        );
        let cli = Cli::new(p, Duration::from_secs(5));
        let e = cli.list(Path::new("/run/gui-sock-1")).unwrap_err();
        assert_eq!(
            e,
            CliError::Failed("exit status: 3: cli --no-auto-start list /run/gui-sock-1".into())
        );
    }

    #[test]
    fn answers_are_parsed_and_a_missing_pane_is_not_an_error() {
        let p = program(
            "answers",
            r#"case "$3" in
  spawn) echo 42 ;;
  list) echo '[{"window_id":0,"tab_id":0,"pane_id":3,"title":"x"},{"pane_id":9}]' ;;
  kill-pane) [ "$5" = 3 ] && exit 0; echo "ERROR  wezterm > no such pane $5; terminating" >&2; exit 1 ;;
esac"#,
        );
        let cli = Cli::new(p, Duration::from_secs(5));
        let gui = Path::new("/g");
        assert!(matches!(
            cli.spawn_or_late(gui, Path::new("/t"), &["a".into()]),
            Ok(42)
        ));
        let ids: Vec<u64> = cli.list(gui).unwrap().iter().map(|p| p.pane_id).collect();
        assert_eq!(ids, vec![3, 9]);
        assert_eq!(cli.kill_pane(gui, 3), Ok(Killed::Closed));
        assert_eq!(cli.kill_pane(gui, 4), Ok(Killed::AlreadyGone));
    }

    #[test]
    fn ended_panes_and_their_reasons_as_wezterm_writes_them() {
        // localpane.rs's messages for exit_behavior CloseOnCleanExit / Hold, and cmdbuilder's.
        let exited = "bye\r\n⚠️  Process sh didn't exit cleanly\r\nExited with code 3.\r\nThis message is shown because exit_behavior=\"CloseOnCleanExit\"\n";
        assert_eq!(ended_reason(exited).as_deref(), Some("exited with code 3"));
        // As a real mux server showed it (80 columns): exit message, then the error, wrapped.
        let missing = "⚠️ Process \"/work/x/agent 3600\" in domain \"local\" didn't exit cleanly\nExited with code 1.\nThis message is shown because exit_behavior=\"CloseOnCleanExit\"Unable to spawn /w\nork/x/agent because it doesn't exist on the filesystem (ENOENT: No such fi\nle or directory)\n";
        assert_eq!(
            ended_reason(missing).as_deref(),
            Some("could not start: Unable to spawn /work/x/agent because it doesn't exist on the filesystem (ENOENT: No such file or directory)")
        );
        assert_eq!(
            ended_reason(
                "👍 Process sh completed.\nThis message is shown because exit_behavior=\"Hold\""
            )
            .as_deref(),
            Some("exited with code 0")
        );
        assert_eq!(ended_reason("still working\n$ "), None);
        let dead = Listed {
            pane_id: 2,
            title: "wezterm".into(),
            cwd: String::new(),
        };
        assert!(dead.ended());
        let live = Listed {
            pane_id: 1,
            title: "dash".into(),
            cwd: "file:///run/tasks/".into(),
        };
        assert!(!live.ended());
    }

    #[test]
    fn a_failing_call_leaves_no_log_file() {
        let dir = std::env::temp_dir().join(format!("a2a-cli-logs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let d = dir.display().to_string();
        // As the real CLI does: every failing call writes wezterm-log-<its pid>.txt.
        let p = program(
            "logs",
            &format!(r#"echo x > "{d}/wezterm-log-$$.txt"; exit 1"#),
        );
        let cli = Cli::new(p, Duration::from_secs(5)).with_log_dir(Some(dir.clone()));
        assert!(cli.list(Path::new("/g")).is_err());
        let left: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("wezterm-log-"))
            .collect();
        assert!(left.is_empty(), "{left:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn unexpected_output_is_an_error() {
        let p = program("garbage", "echo 'Error: something else'");
        let cli = Cli::new(p, Duration::from_secs(5));
        let gui = Path::new("/g");
        assert!(matches!(
            cli.spawn_or_late(gui, Path::new("/t"), &[]),
            Err(SpawnError::Failed(CliError::Output(_)))
        ));
        assert!(matches!(cli.list(gui), Err(CliError::Output(_))));
    }

    #[test]
    fn a_call_that_hangs_is_killed_at_its_deadline() {
        let p = program("hang", "exec sleep 5");
        let cli = Cli::new(p, Duration::from_millis(300));
        let started = Instant::now();
        assert_eq!(
            cli.list(Path::new("/g")),
            Err(CliError::TimedOut(Duration::from_millis(300)))
        );
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
        let missing = Cli::new("/nonexistent/wezterm".into(), Duration::from_secs(1));
        assert!(matches!(
            missing.list(Path::new("/g")),
            Err(CliError::Launch(_))
        ));
    }
}
