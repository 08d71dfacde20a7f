//! The local backend's harness: the controller binary with `-backend=local`, driving the
//! stand-in `wezterm` program (`tests/examples/wezterm_standin.rs`, which mimics the real CLI:
//! see its header) against GUIs made here. A GUI is a live process (a `sleep`) and a Unix
//! socket named `gui-sock-<its pid>` in the runtime directory, as a real GUI leaves them;
//! killing the process leaves the socket behind, as a real GUI's exit does.

use std::fs;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::{json, Value};

use crate::support::Proc;

/// Text that appears in every task file's body and must never leave it.
pub const BODY_MARKER: &str = "PRIVATE-TASK-BODY-9f3c";

/// The stand-in, built once per test run; its absolute path.
pub fn standin() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let path = crate::support::build_example("wezterm-standin", false);
            fs::canonicalize(&path).unwrap_or(path)
        })
        .clone()
}

pub struct Gui {
    pub socket: PathBuf,
    process: Option<Child>,
}

impl Gui {
    fn state_file(&self) -> PathBuf {
        PathBuf::from(format!("{}.standin.json", self.socket.display()))
    }

    pub fn state(&self) -> Value {
        serde_json::from_slice(&fs::read(self.state_file()).unwrap()).unwrap()
    }

    fn edit(&self, f: impl FnOnce(&mut Value)) {
        let mut v = self.state();
        f(&mut v);
        fs::write(self.state_file(), v.to_string()).unwrap();
    }

    /// The pane ids this GUI has.
    pub fn panes(&self) -> Vec<u64> {
        self.state()["panes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["pane_id"].as_u64().unwrap())
            .collect()
    }

    /// The operator closes a tab by hand.
    pub fn close_by_hand(&self, pane: u64) {
        self.edit(|v| {
            v["panes"]
                .as_array_mut()
                .unwrap()
                .retain(|p| p["pane_id"] != pane)
        });
    }

    /// The pane's program prints `lines` (they scroll past the 24-row screen).
    pub fn print(&self, pane: u64, lines: &[String]) {
        self.edit(|v| {
            for p in v["panes"].as_array_mut().unwrap() {
                if p["pane_id"] == pane {
                    let out = p["output"].as_array().cloned().unwrap_or_default();
                    let mut out: Vec<Value> = out;
                    out.extend(lines.iter().map(|l| json!(l)));
                    p["output"] = json!(out);
                }
            }
        });
    }

    /// The GUI accepts calls but never answers (or answers again).
    pub fn hang(&self, hung: bool) {
        self.edit(|v| v["hung"] = json!(hung));
    }

    pub fn spawn_delay(&self, ms: u64) {
        self.edit(|v| v["spawn_delay_ms"] = json!(ms));
    }

    /// The program in `pane` exits with `code`, and WezTerm does what its `exit_behavior`
    /// says (`Close`, the default: the pane closes; `CloseOnCleanExit` with a failure, or
    /// `Hold`: the pane stays with WezTerm's message, as localpane.rs words it).
    pub fn program_exits(&self, pane: u64, code: i32, exit_behavior: &str) {
        let stays = exit_behavior == "Hold" || (exit_behavior == "CloseOnCleanExit" && code != 0);
        if !stays {
            return self.close_by_hand(pane);
        }
        self.edit(|v| {
            for p in v["panes"].as_array_mut().unwrap() {
                if p["pane_id"] == pane {
                    let mut out = p["output"].as_array().cloned().unwrap_or_default();
                    let name = p["argv"][0]
                        .as_str()
                        .unwrap_or("")
                        .rsplit('/')
                        .next()
                        .unwrap_or("")
                        .to_string();
                    out.push(json!(""));
                    out.push(json!(format!("⚠️  Process {name} didn't exit cleanly")));
                    out.push(json!(format!("Exited with code {code}.")));
                    out.push(json!(format!(
                        "This message is shown because exit_behavior=\"{exit_behavior}\""
                    )));
                    p["output"] = json!(out);
                    p["ended"] = json!(true);
                }
            }
        });
    }

    /// The GUI's process ends; its socket stays behind.
    pub fn exit(&mut self) {
        if let Some(mut p) = self.process.take() {
            let _ = p.kill();
            let _ = p.wait();
        }
    }
}

impl Drop for Gui {
    fn drop(&mut self) {
        self.exit();
    }
}

pub struct Wez {
    pub root: PathBuf,
    pub runtime: PathBuf,
    pub tasks: PathBuf,
    pub state_file: PathBuf,
    pub cli_timeout: &'static str,
    tag: String,
}

impl Wez {
    pub fn new(tag: &str) -> Wez {
        let root = std::env::temp_dir().join(format!("a2a-local-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let runtime = root.join("run/wezterm");
        let tasks = root.join("tasks");
        fs::create_dir_all(&runtime).unwrap();
        fs::create_dir_all(&tasks).unwrap();
        // LOCAL_COMMAND's program must exist (startup refuses one that does not); the
        // stand-in never runs it.
        let agent = root.join("agent/bin/claude");
        fs::create_dir_all(agent.parent().unwrap()).unwrap();
        fs::write(&agent, "#!/bin/sh\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&agent, fs::Permissions::from_mode(0o755)).unwrap();
        Wez {
            state_file: root.join("state/local-workers.json"),
            root,
            runtime,
            tasks,
            cli_timeout: "3s",
            tag: tag.to_string(),
        }
    }

    /// A new GUI (newer than every earlier one), with the operator's own shell as pane 0.
    pub fn gui(&self) -> Gui {
        let process = Command::new("sleep")
            .arg("3600")
            .stdin(Stdio::null())
            .spawn()
            .expect("sleep runs");
        let socket = self.runtime.join(format!("gui-sock-{}", process.id()));
        drop(UnixListener::bind(&socket).unwrap());
        let gui = Gui {
            socket,
            process: Some(process),
        };
        fs::write(
            gui.state_file(),
            json!({"next_id": 1, "panes": [{"window_id": 0, "tab_id": 0, "pane_id": 0,
                "workspace": "default", "cwd": "/home/operator", "argv": ["/bin/zsh"]}]})
            .to_string(),
        )
        .unwrap();
        // Newest by modification time: make sure the next GUI's socket is strictly newer.
        std::thread::sleep(Duration::from_millis(20));
        gui
    }

    /// A task file with front matter (`claude_session_id` when given) and a private body.
    pub fn task(&self, name: &str, session_id: Option<&str>) {
        let front = match session_id {
            Some(id) => format!("---\ntitle: {name}\nclaude_session_id: {id}\n---\n"),
            None => "---\ntitle: x\n---\n".to_string(),
        };
        fs::write(
            self.tasks.join(format!("{name}.md")),
            format!("{front}\n{BODY_MARKER}\nsteps and notes\n"),
        )
        .unwrap();
    }

    /// The program LOCAL_COMMAND names.
    pub fn agent(&self) -> PathBuf {
        self.root.join("agent/bin/claude")
    }

    pub fn args(&self, extra: &[&str]) -> Vec<String> {
        let command = json!([
            self.agent().display().to_string(),
            "--task-file",
            "{task_file}",
            "--name",
            "worker {worker_id} for {task}"
        ]);
        let mut args = vec![
            "-backend=local".to_string(),
            format!("-local-wezterm={}", standin().display()),
            format!("-local-task-dir={}", self.tasks.display()),
            format!("-local-state-file={}", self.state_file.display()),
            format!("-local-command={command}"),
            format!("-local-cli-timeout={}", self.cli_timeout),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        args
    }

    pub fn env(&self) -> Vec<(String, String)> {
        vec![(
            "XDG_RUNTIME_DIR".into(),
            self.runtime.parent().unwrap().display().to_string(),
        )]
    }

    pub fn controller(&self) -> Proc {
        Proc::launch(&format!("local-{}", self.tag), self.args(&[]), self.env())
    }

    pub fn prepared(&self, extra: &[&str]) -> Proc {
        Proc::prepare(&format!("local-{}", self.tag), self.args(extra), self.env())
    }

    /// Every call the stand-in received.
    pub fn calls(&self) -> Vec<Value> {
        fs::read_to_string(self.runtime.join("standin-calls.log"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    /// The calls with subcommand `sub` (`spawn`, `list`, `kill-pane`).
    pub fn calls_of(&self, sub: &str) -> Vec<Value> {
        self.calls()
            .into_iter()
            .filter(|c| c["argv"][3] == sub)
            .collect()
    }

    pub fn state_text(&self) -> String {
        fs::read_to_string(&self.state_file).unwrap_or_default()
    }

    /// The records in the state file.
    pub fn records(&self) -> Vec<Value> {
        let text = self.state_text();
        if text.is_empty() {
            return Vec::new();
        }
        let v: Value = serde_json::from_str(&text).unwrap();
        v["workers"].as_array().unwrap().clone()
    }
}

impl Drop for Wez {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            for call in self.calls() {
                assert!(
                    call["violation"].is_null(),
                    "the stand-in was misused: {call}"
                );
                assert_eq!(call["argv"][0], json!(standin()), "{call}");
                assert_eq!(call["argv"][1], "cli", "{call}");
                assert_eq!(call["argv"][2], "--no-auto-start", "{call}");
            }
            let state = self.state_text();
            assert!(
                !state.contains(BODY_MARKER),
                "task content in the state file"
            );
            assert!(!state.contains("token"), "a token field in the state file");
        }
        let _ = fs::remove_dir_all(&self.root);
    }
}

/// The pane id of a reported worker, as a number.
pub fn pane_of(worker: &Value) -> u64 {
    worker["pane_id"].as_str().unwrap().parse().unwrap()
}

/// Whether a path is the socket of `gui`.
pub fn socket_of(call: &Value) -> &Path {
    Path::new(call["socket"].as_str().unwrap())
}
