//! Harness for the Docker suite: the controller binary (`support::Proc`) started against a
//! real dockerd (`A2A_TEST_DOCKER_HOST`), engine access for setting up foreign containers and
//! checking what exists, and a Unix-socket relay that can make the engine disappear.

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread;
use std::time::Duration;

use std::collections::HashMap;

use a2a_worker_controller::testing::{owner_selector, Engine};
use serde::Deserialize;

pub use crate::support::{controller_id, free_port, Proc};

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

/// The controller with the Docker backend, as a process.
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
