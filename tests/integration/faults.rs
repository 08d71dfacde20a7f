//! Faults with nothing lost, against real engines: the controller SIGKILLed in the middle of
//! creates, and the engine itself SIGKILLed in the middle of creates. Afterwards every
//! container that exists is listed and stoppable, no task has two workers, and nothing
//! lingers unlisted.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::docker_support::*;
use crate::support::{control_error, reply_data, Controls, PATIENCE};

fn list(p: &Proc) -> Vec<Value> {
    reply_data(&p.control(json!({"operation": "list"})))["workers"]
        .as_array()
        .unwrap()
        .clone()
}

/// The controller's view equals the engine's, one worker per task, and all of it stops.
fn assert_consistent_and_clean_up(p: &Proc, cleanup: &Cleanup) {
    let workers = list(p);
    let listed: HashSet<String> = workers
        .iter()
        .map(|w| w["worker_id"].as_str().unwrap().to_string())
        .collect();
    let engine: HashSet<String> = cleanup
        .owned()
        .iter()
        .map(|c| c.labels.as_ref().unwrap()["a2a-worker-controller/worker-id"].clone())
        .collect();
    assert_eq!(listed, engine, "every container that exists is listed");
    let mut per_task: HashMap<String, usize> = HashMap::new();
    for w in &workers {
        *per_task
            .entry(w["task"].as_str().unwrap().to_string())
            .or_default() += 1;
    }
    assert!(
        per_task.values().all(|n| *n == 1),
        "a task has two workers: {per_task:?}"
    );
    for w in &workers {
        reply_data(&p.control(json!({"operation": "stop", "worker_id": w["worker_id"]})));
    }
    assert!(
        cleanup.owned().is_empty(),
        "everything listed was stoppable"
    );
}

fn fire_creates(
    addr: std::net::SocketAddr,
    tasks: Vec<String>,
) -> Vec<std::thread::JoinHandle<Option<Value>>> {
    tasks
        .into_iter()
        .map(|task| {
            std::thread::spawn(move || {
                let body = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
                    "params": {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"data": {"operation": "create", "task": task}}]}}});
                let auth = format!("Bearer {}", crate::support::TOKEN);
                let mut s = std::net::TcpStream::connect(addr).ok()?;
                s.set_read_timeout(Some(Duration::from_secs(60))).ok()?;
                let raw = format!("POST /a2a HTTP/1.1\r\nHost: x\r\nAuthorization: {auth}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.to_string().len());
                std::io::Write::write_all(&mut s, raw.as_bytes()).ok()?;
                let mut out = Vec::new();
                std::io::Read::read_to_end(&mut s, &mut out).ok()?;
                if !out.windows(4).any(|w| w == b"\r\n\r\n") {
                    return None; // the controller died before answering
                }
                let r = crate::support::parse_response(&out);
                let v = r.json();
                if let Some(t) = v["result"]["task"]["artifacts"][0]["parts"][0]["data"]["token"].as_str() {
                    crate::secrets::remember(t);
                }
                Some(v["result"]["task"].clone())
            })
        })
        .collect()
}

#[test]
fn controller_killed_mid_create_loses_nothing() {
    let Some(socket) = docker_socket() else {
        return;
    };
    let id = controller_id("sigkill");
    let cleanup = Cleanup::new(&socket, &id);
    for (round, delay_ms) in [0u64, 15, 40, 80, 150, 300].into_iter().enumerate() {
        let mut p = Proc::start(&socket, &id, &[]);
        let tasks: Vec<String> = (0..4).map(|j| format!("round {round} task {j}")).collect();
        let inflight = fire_creates(p.addr, tasks);
        std::thread::sleep(Duration::from_millis(delay_ms));
        p.kill();
        for h in inflight {
            let _ = h.join();
        }
    }
    let p = Proc::start(&socket, &id, &[]);
    // Creates for tasks that already have a (possibly half-made) worker are still refused.
    let existing = list(&p);
    if let Some(w) = existing.first() {
        p.expect_failure(
            json!({"operation": "create", "task": w["task"]}),
            "worker_exists",
        );
    }
    eprintln!(
        "after 6 SIGKILLs: {} workers survived, all listed",
        existing.len()
    );
    assert_consistent_and_clean_up(&p, &cleanup);
}

/// A private engine of this test's own (the shared one keeps serving other tests), with the
/// worker image copied in.
struct PrivateEngine {
    dir: PathBuf,
}

impl PrivateEngine {
    fn script() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/dockerd.sh")
    }

    fn start(dir: &Path) {
        // Its own bridge and no iptables: beside the suite's engine, a second one on the
        // default bridge would rebuild the host's nat DOCKER chain under it (a concurrent
        // test's port publishing failed so: "iptables ... -j DNAT ... failed").
        let out = Command::new(Self::script())
            .env("DOCKERD_OWN_BRIDGE", "a2afault0:172.31.254.1/24")
            .arg("start")
            .arg(dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn socket(&self) -> PathBuf {
        self.dir.join("docker.sock")
    }

    fn kill9(&self) {
        let pid = std::fs::read_to_string(self.dir.join("docker.pid")).unwrap();
        Command::new("kill")
            .arg("-9")
            .arg(pid.trim())
            .status()
            .unwrap();
    }
}

impl Drop for PrivateEngine {
    fn drop(&mut self) {
        let _ = Command::new(Self::script())
            .arg("stop")
            .arg(&self.dir)
            .status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn engine_killed_mid_create_then_back() {
    let Some(shared) = docker_socket() else {
        return;
    };
    let root = Command::new("id")
        .arg("-u")
        .output()
        .map(|o| o.stdout == b"0\n")
        .unwrap_or(false);
    if !root || Command::new("dockerd").arg("--version").output().is_err() {
        assert!(
            std::env::var("A2A_REQUIRE_DOCKER").as_deref() != Ok("1"),
            "this test needs root and dockerd"
        );
        eprintln!("SKIPPED: killing an engine needs root and dockerd to start a private one");
        return;
    }
    let engine = PrivateEngine {
        dir: PathBuf::from(format!("/tmp/a2a-fault-{}", std::process::id())),
    };
    PrivateEngine::start(&engine.dir);
    let copy = format!(
        "docker -H unix://{} save {img} | docker -H unix://{} load -q",
        shared.display(),
        engine.socket().display(),
        img = worker_image()
    );
    assert!(Command::new("sh")
        .arg("-c")
        .arg(&copy)
        .status()
        .unwrap()
        .success());

    let id = controller_id("enginekill");
    let p = Proc::start(&engine.socket(), &id, &[]);
    // A watcher through it all: what it hears must add up to what list shows at the end.
    let mut watch = crate::watch::Watch::start(p.addr, json!({"operation": "watch"}));
    let watch_id = watch.task_id();
    let heard = std::thread::spawn(move || {
        let mut events = Vec::new();
        while let Some(e) = watch.event() {
            if e["type"] == "end" {
                break;
            }
            events.push(e);
        }
        events
    });
    let inflight = fire_creates(p.addr, (0..6).map(|j| format!("engine task {j}")).collect());
    // Mid-create: the engine has the first of their containers when it dies.
    let on_engine = a2a_worker_controller::testing::Engine::new(engine.socket());
    crate::support::wait_until("a create's container made", PATIENCE, || {
        !owned_ids(&on_engine, &id).is_empty()
    });
    engine.kill9();
    let started = Instant::now();
    let mut outcomes = Vec::new();
    for h in inflight {
        let task = h.join().unwrap().expect("every create is answered");
        let outcome = match task["status"]["state"].as_str() {
            Some("TASK_STATE_COMPLETED") => "completed".to_string(),
            _ => control_error(&task, "TASK_STATE_FAILED")["code"]
                .as_str()
                .unwrap()
                .to_string(),
        };
        outcomes.push(outcome);
    }
    eprintln!(
        "creates while the engine died: {outcomes:?} (answered within {:?})",
        started.elapsed()
    );
    assert!(
        outcomes
            .iter()
            .all(|o| o == "completed" || o == "backend_unavailable"),
        "{outcomes:?}"
    );
    p.expect_failure(json!({"operation": "list"}), "backend_unavailable");
    assert_eq!(p.get("/readiness").status, 503);
    assert_eq!(p.get("/healthz").status, 200);

    PrivateEngine::start(&engine.dir);
    let deadline = Instant::now() + Duration::from_secs(15);
    while p.get("/readiness").status != 200 {
        assert!(Instant::now() < deadline, "engine back");
        std::thread::sleep(Duration::from_millis(100));
    }
    let cleanup = Cleanup::new(&engine.socket(), &id);
    // The watch, across the engine's death and return: each worker added once (no removal
    // between), and the workers it knows are the ones list shows.
    std::thread::sleep(Duration::from_millis(1500));
    let listed: std::collections::BTreeSet<String> = list(&p)
        .iter()
        .map(|w| w["worker_id"].as_str().unwrap().to_string())
        .collect();
    crate::watch::cancel(p.addr, &watch_id);
    let events = heard.join().unwrap();
    let mut known = std::collections::BTreeSet::new();
    for e in &events {
        let Some(w) = e["worker"]["worker_id"].as_str() else {
            continue;
        };
        match e["type"].as_str().unwrap() {
            "added" => assert!(known.insert(w.to_string()), "{w} added twice: {events:#?}"),
            "changed" => assert!(known.contains(w), "{w} changed before it was added"),
            "removed" => assert!(known.remove(w), "{w} removed but never added"),
            other => panic!("{other}"),
        }
    }
    assert_eq!(known, listed, "the watch adds up to the list: {events:#?}");
    eprintln!(
        "watch across the engine's restart: {} events, {} workers",
        events.len(),
        listed.len()
    );
    assert_consistent_and_clean_up(&p, &cleanup);
    // And the same tasks can be created again.
    for j in 0..2 {
        reply_data(&p.control(json!({"operation": "create", "task": format!("engine task {j}")})));
    }
    assert_eq!(cleanup.owned().len(), 2);
}
