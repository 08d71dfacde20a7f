//! The controller binary as a process of its own, for every suite that runs it (Docker,
//! Kubernetes, local, the hostile-input and observability tests): started on a free port with
//! a cleared environment, logging to a file, waited for on `/healthz`, stopped with SIGTERM or
//! SIGKILL, and checked on drop for tokens in its log and metrics.

use std::fs::File;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{request, Controls, HttpResponse, TOKEN};

/// A unique controller id per test, so tests sharing one engine never see each other.
pub fn controller_id(test: &str) -> String {
    format!("t-{test}-{}", std::process::id())
}

/// The controller binary running as its own process.
/// The controller binary as its own process, on a free port, logging to a file.
pub struct Proc {
    child: Option<Child>,
    pub addr: SocketAddr,
    pub log: PathBuf,
    args: Vec<String>,
    env: Vec<(String, String)>,
}

/// One `GET /healthz` on one connection; false on any failure (not up yet).
fn healthz_ok(addr: SocketAddr) -> bool {
    let Ok(mut s) = std::net::TcpStream::connect(addr) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    let mut out = Vec::new();
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .is_ok()
        && s.read_to_end(&mut out).is_ok()
        && out.starts_with(b"HTTP/1.1 200")
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Proc {
    /// Starts the controller with `args` (after the listen address, public URL and controller
    /// id, so they may override them) and `env` on top of a cleared environment; waits for
    /// `/healthz`.
    pub fn launch(controller_id: &str, extra: Vec<String>, env: Vec<(String, String)>) -> Proc {
        let mut p = Proc::prepare(controller_id, extra, env);
        p.start_now();
        p
    }

    /// The same, not started yet (for runs that are expected to refuse).
    pub fn prepare(controller_id: &str, extra: Vec<String>, env: Vec<(String, String)>) -> Proc {
        let port = free_port();
        let mut args = vec![
            format!("-listen=127.0.0.1:{port}"),
            format!("-a2a-public-url=http://127.0.0.1:{port}"),
            format!("-controller-id={controller_id}"),
        ];
        let port = extra
            .iter()
            .rev()
            .filter_map(|a| a.strip_prefix("-listen="))
            .find_map(|l| l.rsplit(':').next()?.parse().ok())
            .unwrap_or(port);
        args.extend(extra);
        let log = std::env::temp_dir().join(format!("{controller_id}-{port}.log"));
        Proc {
            child: None,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            log,
            args,
            env,
        }
    }

    /// Runs the controller to its exit (for settings it must refuse); exit code and log.
    pub fn run_to_exit(&self) -> (Option<i32>, String) {
        let out = self
            .command()
            .stdin(Stdio::null())
            .output()
            .expect("controller runs");
        let mut text = String::from_utf8_lossy(&out.stderr).into_owned();
        text.push_str(&String::from_utf8_lossy(&out.stdout));
        (out.status.code(), text)
    }

    fn command(&self) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_a2a-worker-controller"));
        c.args(&self.args)
            .env_clear()
            .env("HOME", std::env::temp_dir())
            .env("RUST_LOG", "debug")
            .envs(self.env.iter().map(|(k, v)| (k, v)));
        if !self
            .args
            .iter()
            .any(|a| a.starts_with("-a2a-auth-token-file="))
        {
            c.env("A2A_AUTH_TOKEN", TOKEN);
        }
        c
    }

    /// Starts a prepared controller and waits for `/healthz`.
    pub fn start_now(&mut self) {
        let log = File::options()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let child = self
            .command()
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("controller starts");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline {
            if healthz_ok(self.addr) {
                return;
            }
            thread::sleep(Duration::from_millis(50));
        }
        panic!("controller did not come up; log:\n{}", self.log_text());
    }

    /// SIGTERM, wait for exit; returns the exit code.
    pub fn terminate(&mut self) -> Option<i32> {
        let mut child = self.child.take()?;
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status.code();
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                return None;
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(Child::id).unwrap_or(0)
    }

    /// Resident memory in KiB and thread count, from /proc.
    pub fn rss_and_threads(&self) -> (u64, usize) {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap_or_default();
        let field = |name: &str| -> u64 {
            status
                .lines()
                .find(|l| l.starts_with(name))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        };
        (field("VmRSS:"), field("Threads:") as usize)
    }

    /// SIGKILL, no chance to clean up.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn restart(&mut self) {
        assert_eq!(self.terminate(), Some(0));
        self.start_now();
    }

    pub fn log_text(&self) -> String {
        let mut s = String::new();
        if let Ok(mut f) = File::open(&self.log) {
            let _ = f.read_to_string(&mut s);
        }
        s
    }

    pub fn get(&self, path: &str) -> HttpResponse {
        request(self.addr, "GET", path, &[], b"")
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.child.is_some() && !thread::panicking() {
            crate::secrets::assert_none_in(&self.get("/metrics").text(), "/metrics");
        }
        if !thread::panicking() {
            crate::secrets::assert_none_in(&self.log_text(), "the controller log");
        }
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_file(&self.log);
    }
}

impl Controls for Proc {
    fn control(&self, data: Value) -> Value {
        let r = crate::support::send_control(self.addr, data);
        assert_eq!(r.status, 200, "{}", r.text());
        let v = r.json();
        assert!(v.get("error").is_none(), "{v}");
        v["result"]["task"].clone()
    }
}
