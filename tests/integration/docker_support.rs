//! Harness for the Docker suite: the controller binary as a real process against a real
//! dockerd (`A2A_TEST_DOCKER_HOST`), engine access for setting up foreign containers and
//! checking what exists, and a Unix-socket relay that can make the engine disappear.

use std::fs::File;
use std::io::{Read, Write};
use std::net::SocketAddr;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use std::collections::HashMap;

use a2a_worker_controller::testing::{owner_selector, Engine};
use serde::Deserialize;
use serde_json::Value;

use crate::support::{request, Controls, HttpResponse, TOKEN};

/// The engine socket for the Docker suite, or `None` (after saying so) when it is not
/// configured. With `A2A_REQUIRE_DOCKER=1` a missing engine fails the test instead.
pub fn docker_socket() -> Option<PathBuf> {
    let host = crate::support::env_or_skip("A2A_TEST_DOCKER_HOST", "A2A_REQUIRE_DOCKER")?;
    let host = host.to_string_lossy().into_owned();
    Some(PathBuf::from(
        host.strip_prefix("unix://")
            .expect("A2A_TEST_DOCKER_HOST must be unix://PATH"),
    ))
}

pub fn worker_image() -> String {
    std::env::var("A2A_TEST_WORKER_IMAGE").unwrap_or_else(|_| "a2a-echo-worker:dev".into())
}

/// Runs the docker CLI against the test engine.
pub fn docker_cli(socket: &Path, args: &[&str], stdin: Option<&str>) -> String {
    let mut cmd = Command::new("docker");
    cmd.env("DOCKER_HOST", format!("unix://{}", socket.display()))
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("the docker CLI runs");
    if let Some(input) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "docker {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A variant of the worker image with other arguments (e.g. `--exit-code=3`), built once.
pub fn variant_image(socket: &Path, tag: &str, cmd: &str) -> String {
    static BUILT: OnceLock<std::sync::Mutex<Vec<String>>> = OnceLock::new();
    let built = BUILT.get_or_init(Default::default);
    let mut built = built.lock().unwrap();
    let image = format!("a2a-echo-worker:{tag}");
    if !built.contains(&image) {
        let dockerfile = format!("FROM {}\nCMD {cmd}\n", worker_image());
        docker_cli(
            socket,
            &["build", "-q", "-t", &image, "-"],
            Some(&dockerfile),
        );
        built.push(image.clone());
    }
    image
}

/// Whether the engine at `socket` is Podman's Docker-compatible API.
pub fn is_podman(socket: &Path) -> bool {
    docker_cli(
        socket,
        &["version", "--format", "{{json .Server.Components}}"],
        None,
    )
    .contains("Podman")
}

/// A unique controller id per test, so tests sharing one engine never see each other.
pub fn controller_id(test: &str) -> String {
    format!("t-{test}-{}", std::process::id())
}

/// Removes every container carrying this controller id (whatever happens to the test).
pub struct Cleanup {
    pub engine: Engine,
    pub controller_id: String,
    pub extra: Vec<String>,
}

impl Cleanup {
    pub fn new(socket: &Path, controller_id: &str) -> Cleanup {
        Cleanup {
            engine: Engine::new(socket.to_path_buf()),
            controller_id: controller_id.to_string(),
            extra: Vec::new(),
        }
    }

    /// Containers with this controller's owner label, as the engine has them (all their
    /// labels, read here rather than by the controller's own reader).
    pub fn owned(&self) -> Vec<Container> {
        let listing = self
            .engine
            .list(&owner_selector(&self.controller_id))
            .expect("engine list");
        serde_json::from_slice(listing.as_bytes()).expect("the engine's list is JSON")
    }
}

/// A container as the engine lists it: its id and every label.
#[derive(Debug, Deserialize)]
pub struct Container {
    #[serde(rename = "Id")]
    pub id: String,
    #[serde(rename = "Labels", default)]
    pub labels: Option<HashMap<String, String>>,
}

/// The ids of every container with `controller_id`'s owner label (none when the engine cannot
/// be asked).
pub fn owned_ids(engine: &Engine, controller_id: &str) -> Vec<String> {
    engine
        .list(&owner_selector(controller_id))
        .ok()
        .and_then(|l| serde_json::from_slice::<Vec<Container>>(l.as_bytes()).ok())
        .unwrap_or_default()
        .into_iter()
        .map(|c| c.id)
        .collect()
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        for id in owned_ids(&self.engine, &self.controller_id) {
            let _ = self.engine.remove(&id);
        }
        for id in &self.extra {
            let _ = self.engine.remove(id);
        }
    }
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
    /// Starts the controller with the docker backend on `socket`, plus `extra` flags.
    pub fn start(socket: &Path, controller_id: &str, extra: &[&str]) -> Proc {
        let mut args = vec![
            format!("-docker-host=unix://{}", socket.display()),
            format!("-worker-image={}", worker_image()),
            "-worker-ready-timeout=20s".to_string(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        Proc::launch(controller_id, args, Vec::new())
    }

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

/// A Unix-socket relay in front of the real engine socket. `down()` removes its socket
/// (as a stopped dockerd does) and cuts open connections; `up()` brings it back.
/// `fail_starts` answers that many container starts the way dockerd does when the host port
/// was taken meanwhile (500, "port is already allocated"; the container stays created).
pub struct Relay {
    pub path: PathBuf,
    target: PathBuf,
    stop: Arc<AtomicBool>,
    accept: Option<thread::JoinHandle<()>>,
    pub fail_starts: Arc<std::sync::atomic::AtomicUsize>,
    pub creates_seen: Arc<std::sync::atomic::AtomicUsize>,
    /// Container lists (`GET .../containers/json`, whatever their filters) relayed.
    pub lists_seen: Arc<std::sync::atomic::AtomicUsize>,
    /// The request line of every call relayed, in order.
    pub calls_seen: Arc<std::sync::Mutex<Vec<String>>>,
}

impl Relay {
    pub fn new(target: &Path, name: &str) -> Relay {
        let path = std::env::temp_dir().join(format!("{name}-{}.sock", std::process::id()));
        let mut r = Relay {
            path,
            target: target.to_path_buf(),
            stop: Arc::new(AtomicBool::new(false)),
            accept: None,
            fail_starts: Arc::default(),
            creates_seen: Arc::default(),
            lists_seen: Arc::default(),
            calls_seen: Arc::default(),
        };
        r.up();
        r
    }

    pub fn up(&mut self) {
        let _ = std::fs::remove_file(&self.path);
        let listener = UnixListener::bind(&self.path).unwrap();
        listener.set_nonblocking(true).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        self.stop = Arc::clone(&stop);
        let target = self.target.clone();
        let (fail_starts, creates_seen, lists_seen, calls_seen) = (
            Arc::clone(&self.fail_starts),
            Arc::clone(&self.creates_seen),
            Arc::clone(&self.lists_seen),
            Arc::clone(&self.calls_seen),
        );
        self.accept = Some(thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((mut client, _)) => {
                        client.set_nonblocking(false).unwrap();
                        // The controller sends one request per connection: read its head.
                        let mut head = Vec::new();
                        let mut byte = [0u8; 1];
                        while !head.ends_with(b"\r\n\r\n")
                            && client.read(&mut byte).map(|n| n == 1).unwrap_or(false)
                        {
                            head.push(byte[0]);
                        }
                        let line = String::from_utf8_lossy(&head)
                            .lines()
                            .next()
                            .unwrap_or("")
                            .to_string();
                        if line.starts_with("POST") && line.contains("/containers/create") {
                            creates_seen.fetch_add(1, Ordering::SeqCst);
                        }
                        if line.starts_with("GET") && line.contains("/containers/json") {
                            lists_seen.fetch_add(1, Ordering::SeqCst);
                        }
                        calls_seen
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .push(line.clone());
                        let is_start = line.starts_with("POST") && line.contains("/start ");
                        if is_start
                            && fail_starts
                                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                                    n.checked_sub(1)
                                })
                                .is_ok()
                        {
                            let body = r#"{"message":"driver failed programming external connectivity on endpoint w (abc): Bind for 127.0.0.1:40000 failed: port is already allocated"}"#;
                            let _ = write!(client, "HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}", body.len());
                            continue;
                        }
                        if let Ok(mut engine) = UnixStream::connect(&target) {
                            if engine.write_all(&head).is_ok() {
                                pipe(client, engine, Arc::clone(&stop));
                            }
                        }
                    }
                    Err(_) => thread::sleep(Duration::from_millis(5)),
                }
            }
        }));
    }

    pub fn down(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.accept.take() {
            t.join().unwrap();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.down();
    }
}

fn pipe(a: UnixStream, b: UnixStream, stop: Arc<AtomicBool>) {
    for (mut from, mut to) in [(a.try_clone().unwrap(), b.try_clone().unwrap()), (b, a)] {
        let stop = Arc::clone(&stop);
        thread::spawn(move || {
            from.set_read_timeout(Some(Duration::from_millis(100)))
                .unwrap();
            let mut buf = [0u8; 16384];
            loop {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                match from.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        if to.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                    Err(e)
                        if matches!(
                            e.kind(),
                            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                        ) => {}
                    Err(_) => break,
                }
            }
            let _ = to.shutdown(std::net::Shutdown::Both);
        });
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
