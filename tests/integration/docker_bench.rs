//! Benchmark, not a timed test (scripts/bench.sh runs it in release against a real engine):
//! what the controller costs over its engine, as ratios measured in one run. Each figure is
//! printed as a `ROW|figure|measured|target` line, which bench.sh gathers into one table.
//! - `list` through the controller against the same engine call (the same label filter) made
//!   directly: bare bytes over a new connection to the engine's socket, read to the end and
//!   not parsed (so parsing the engine's answer counts as the controller's cost), at 0, 30 and
//!   300 workers, p50 of BENCH_ROUNDS. The controller is asked over one keep-alive connection
//!   and its reply read to the last byte (how an SDK client calls it); the same over a new
//!   connection per call, and the crate's engine client (which parses), are printed beside it.
//! - `create` + `stop` through the controller (readiness wait off) against the same engine
//!   calls made directly (create, start, inspect; list by label, stop, remove), interleaved.
//! - resident memory idle, peak (VmHWM) while 64 and then 256 keep-alive clients list for 8 s,
//!   at 0 and 30 workers, and what stays after they leave;
//! - start to the first `/healthz` answer, and the binary's size;
//! - how soon after the worker could first answer (the echo worker logs when it starts
//!   serving; read back with the `logs` operation) `create` returns, readiness wait on.
//!
//! It never fails on a slow machine: it reports.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use a2a_worker_controller::testing::{owner_selector, Engine};
use serde_json::json;

use crate::docker_support::*;
use crate::support::{p50, reply_data, rounds, Controls, TOKEN};

pub(crate) fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// CPU time all of `pid`'s live threads have used, in nanoseconds (`/proc/PID/task/*/schedstat`;
/// threads that have ended are not counted).
pub(crate) fn cpu_ns(pid: u32) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .filter_map(Result::ok)
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

pub(crate) fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

pub(crate) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// One row of bench.sh's table.
pub(crate) fn row(figure: &str, measured: &str, target: &str) {
    println!("ROW|{figure}|{measured}|{target}");
}

/// A `list` request as raw HTTP/1.1 on a keep-alive connection.
pub(crate) fn list_request() -> Vec<u8> {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message":
        {"messageId": "m", "role": "ROLE_USER", "parts": [{"data": {"operation": "list"}}]}}})
    .to_string();
    format!(
        "POST /a2a HTTP/1.1\r\nHost: bench\r\nAuthorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Sends `request` and reads one whole response (head, then exactly Content-Length bytes);
/// the body's length, or `None` when the connection broke.
pub(crate) fn exchange(s: &mut TcpStream, request: &[u8], buf: &mut Vec<u8>) -> Option<usize> {
    s.write_all(request).ok()?;
    buf.clear();
    let mut chunk = [0u8; 16384];
    let (head_end, length) = loop {
        let n = s.read(&mut chunk).ok().filter(|n| *n > 0)?;
        buf.extend_from_slice(&chunk[..n]);
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..at]).to_ascii_lowercase();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            break (at + 4, length);
        }
    };
    while buf.len() < head_end + length {
        let n = s.read(&mut chunk).ok().filter(|n| *n > 0)?;
        buf.extend_from_slice(&chunk[..n]);
    }
    Some(length)
}

pub(crate) fn connect(addr: SocketAddr) -> Option<TcpStream> {
    let s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(30))).ok()?;
    let _ = s.set_nodelay(true);
    Some(s)
}

/// One keep-alive client listing until `until`; the number of lists it made.
fn keep_alive_lister(addr: SocketAddr, until: Instant) -> usize {
    let request = list_request();
    let Some(mut s) = connect(addr) else {
        return 0;
    };
    let mut done = 0;
    let mut buf = Vec::new();
    while Instant::now() < until && exchange(&mut s, &request, &mut buf).is_some() {
        done += 1;
    }
    done
}

/// `clients` keep-alive clients listing for `secs`; the lists made.
fn load(addr: SocketAddr, clients: usize, secs: u64) -> usize {
    let until = Instant::now() + Duration::from_secs(secs);
    let threads: Vec<_> = (0..clients)
        .map(|_| std::thread::spawn(move || keep_alive_lister(addr, until)))
        .collect();
    threads.into_iter().map(|c| c.join().unwrap_or(0)).sum()
}

/// The engine's list call as bare bytes over a new connection to its socket (as the
/// controller's engine client makes it: one connection per call), read to the end and not
/// parsed: the least any client of the engine must do. Returns the bytes read.
pub(crate) fn raw_engine_list(socket: &std::path::Path, path: &str) -> usize {
    let mut s = std::os::unix::net::UnixStream::connect(socket).expect("engine socket");
    let request = format!("GET {path} HTTP/1.1\r\nHost: docker\r\nConnection: close\r\n\r\n");
    s.write_all(request.as_bytes()).expect("engine write");
    let mut out = Vec::with_capacity(64 << 10);
    s.read_to_end(&mut out).expect("engine read");
    assert!(
        out.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&out)
    );
    out.len()
}

/// `/containers/json` as the Docker backend asks for it (all containers, this owner's label).
pub(crate) fn list_path(controller_id: &str) -> String {
    let filters =
        json!({"label": [format!("a2a-worker-controller/owner={controller_id}")]}).to_string();
    let encoded: String = filters
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect();
    format!("/containers/json?all=1&filters={encoded}")
}

/// Creates workers through the controller (4 at a time) until it has `workers`.
fn fill(p: &Proc, cleanup: &Cleanup, workers: usize) {
    let have = cleanup.owned().len();
    let next = std::sync::atomic::AtomicUsize::new(have);
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                if i >= workers {
                    break;
                }
                reply_data(
                    &p.control(json!({"operation": "create", "task": format!("bench {i}")})),
                );
            });
        }
    });
}

#[test]
#[ignore = "a benchmark; scripts/bench.sh runs it"]
fn docker_bench_controller_against_its_engine() {
    let Some(socket) = docker_socket() else {
        return;
    };
    let rounds = rounds("BENCH_ROUNDS", 200);
    let create_rounds = rounds_of_create();

    // Start to first answer, five times, polled every millisecond.
    let id = controller_id("bench");
    let cleanup = Cleanup::new(&socket, &id);
    let mut starts = Vec::new();
    for _ in 0..5 {
        let port = free_port();
        let started = Instant::now();
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_a2a-worker-controller"))
            .args([
                format!("-listen=127.0.0.1:{port}"),
                format!("-a2a-public-url=http://127.0.0.1:{port}"),
                format!("-docker-host=unix://{}", socket.display()),
                format!("-worker-image={}", worker_image()),
            ])
            .env_clear()
            .env("A2A_AUTH_TOKEN", TOKEN)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("controller starts");
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        while TcpStream::connect(addr).is_err()
            || crate::support::request(addr, "GET", "/healthz", &[], b"").status != 200
        {
            assert!(started.elapsed() < Duration::from_secs(10), "no /healthz");
            std::thread::sleep(Duration::from_millis(1));
        }
        starts.push(started.elapsed());
        let _ = child.kill();
        let _ = child.wait();
    }
    row(
        "start to first `/healthz`",
        &format!("{:.1} ms", ms(p50(starts))),
        "≤ 20 ms",
    );
    let binary = std::fs::metadata(env!("CARGO_BIN_EXE_a2a-worker-controller"))
        .map(|m| m.len())
        .unwrap_or(0);
    row(
        "stripped binary",
        &format!(
            "{binary} bytes ({:.2} MiB)",
            binary as f64 / (1 << 20) as f64
        ),
        "≤ 3 MiB",
    );

    let p = Proc::start(&socket, &id, &["-worker-ready-timeout=0"]);
    let idle = status_kib(p.pid(), "VmRSS:");
    row(
        "resident memory idle",
        &format!("{:.1} MiB", mib(idle)),
        "≤ 5 MiB",
    );
    let engine = Engine::new(socket.clone());
    let selector = owner_selector(&id);
    let request = list_request();
    let counts: Vec<usize> = std::env::var("BENCH_WORKERS")
        .unwrap_or_else(|_| "0,30,300".into())
        .split(',')
        .filter_map(|n| n.trim().parse().ok())
        .collect();
    for workers in counts {
        fill(&p, &cleanup, workers);
        let mut conn = connect(p.addr).expect("connect to the controller");
        let mut buf = Vec::new();
        let (mut direct, mut client, mut via, mut fresh) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let (mut reply_bytes, mut engine_bytes) = (0, 0);
        let path = list_path(&id);
        for _ in 0..rounds {
            let started = Instant::now();
            engine_bytes = raw_engine_list(&socket, &path);
            direct.push(started.elapsed());
            let started = Instant::now();
            let listing = engine.list(&selector).expect("engine list");
            let listed = listing.containers().expect("a readable list").len();
            client.push(started.elapsed());
            assert_eq!(listed, workers);
            let started = Instant::now();
            reply_bytes = exchange(&mut conn, &request, &mut buf).expect("controller answers");
            via.push(started.elapsed());
            let started = Instant::now();
            let mut once = connect(p.addr).expect("connect to the controller");
            exchange(&mut once, &request, &mut buf).expect("controller answers");
            fresh.push(started.elapsed());
        }
        // The controller's own CPU per list, from its threads' run time (the keep-alive
        // connection's thread lives through all of these): steadier than a wall-clock ratio
        // on a machine whose engine runs at different speeds from one minute to the next.
        let before = cpu_ns(p.pid());
        for _ in 0..rounds {
            exchange(&mut conn, &request, &mut buf).expect("controller answers");
        }
        let cpu_us = cpu_ns(p.pid()).saturating_sub(before) as f64 / rounds as f64 / 1000.0;
        row(
            &format!("controller CPU per `list`, {workers} workers"),
            &format!("{cpu_us:.0} µs"),
            "(reference)",
        );
        let check = reply_data(&p.control(json!({"operation": "list"})));
        assert_eq!(check["workers"].as_array().map(Vec::len), Some(workers));
        let (d, c, v, f) = (p50(direct), p50(client), p50(via), p50(fresh));
        println!(
            "BENCH list, {workers} workers, p50 of {rounds}: engine directly {d:?} ({engine_bytes} bytes, not parsed; with the controller's engine client, parsed: {c:?}), through the controller {v:?} (new connection each: {f:?}), reply {reply_bytes} bytes"
        );
        let target = match workers {
            0 => "added ≤ 0.15 ms",
            30 => "≤ ×1.10",
            _ => "linear in workers, engine-dominated",
        };
        row(
            &format!("`list`, {workers} workers: controller ÷ engine directly"),
            &format!(
                "×{:.2} ({:.2} vs {:.2} ms, added {:+.2} ms; new connection each call ×{:.2})",
                v.as_secs_f64() / d.as_secs_f64(),
                ms(v),
                ms(d),
                ms(v) - ms(d),
                f.as_secs_f64() / d.as_secs_f64()
            ),
            target,
        );
        if workers == 300 {
            continue;
        }
        for clients in [64usize, 256] {
            if clients == 256 && workers == 0 {
                continue;
            }
            let before = status_kib(p.pid(), "VmRSS:");
            let lists = load(p.addr, clients, 8);
            std::thread::sleep(Duration::from_secs(1));
            let (peak, after) = (status_kib(p.pid(), "VmHWM:"), status_kib(p.pid(), "VmRSS:"));
            println!(
                "BENCH {clients} keep-alive clients listing 8 s, {workers} workers: {lists} lists; resident before {:.1} MiB, peak (VmHWM) {:.1} MiB, after {:.1} MiB",
                mib(before),
                mib(peak),
                mib(after)
            );
            row(
                &format!("resident memory peak, {clients} keep-alive clients listing 8 s, {workers} workers"),
                &format!(
                    "{:.1} MiB (after they leave {:.1} MiB; {lists} lists)",
                    mib(peak),
                    mib(after)
                ),
                if clients == 64 { "≤ 24 MiB" } else { "≤ 48 MiB" },
            );
        }
    }
    drop(cleanup);

    // Create + stop, interleaved: through the controller, then the same engine calls directly.
    if create_rounds == 0 {
        return;
    }
    let cleanup = Cleanup::new(&socket, &id);
    let (mut via, mut direct) = (Vec::new(), Vec::new());
    for i in 0..create_rounds {
        let started = Instant::now();
        let created =
            reply_data(&p.control(json!({"operation": "create", "task": format!("cs {i}")})));
        let worker_id = created["worker"]["worker_id"]
            .as_str()
            .unwrap_or("")
            .to_string();
        reply_data(&p.control(json!({"operation": "stop", "worker_id": worker_id})));
        via.push(started.elapsed());

        let started = Instant::now();
        direct_create_stop(&engine, &id, i);
        direct.push(started.elapsed());
    }
    let (v, d) = (p50(via), p50(direct));
    println!("BENCH create+stop, p50 of {create_rounds}: engine directly {d:?}, through the controller {v:?}");
    row(
        "`create` + `stop` (readiness wait off): controller ÷ engine directly",
        &format!(
            "×{:.3} ({:.1} vs {:.1} ms, p50 of {create_rounds})",
            v.as_secs_f64() / d.as_secs_f64(),
            ms(v),
            ms(d)
        ),
        "≤ ×1.05",
    );
    drop(cleanup);

    // Readiness: how soon after the worker could first answer (the echo worker logs the time
    // it starts serving) create returns, the readiness wait on.
    let ready_id = format!("{id}-ready");
    let cleanup = Cleanup::new(&socket, &ready_id);
    let q = Proc::start(&socket, &ready_id, &[]);
    let mut lags = Vec::new();
    for i in 0..create_rounds {
        let created =
            reply_data(&q.control(json!({"operation": "create", "task": format!("ready {i}")})));
        let returned = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let worker_id = created["worker"]["worker_id"].clone();
        let logs = reply_data(&q.control(json!({"operation": "logs", "worker_id": worker_id})));
        let first = logs["text"].as_str().unwrap_or("").lines().find_map(|l| {
            l.split_once("(answering from ")?
                .1
                .strip_suffix(" ms)")?
                .parse::<u64>()
                .ok()
        });
        if let Some(first) = first {
            lags.push(Duration::from_millis(returned.saturating_sub(first)));
        }
        reply_data(&q.control(json!({"operation": "stop", "worker_id": worker_id})));
    }
    let worst = lags.iter().max().copied().unwrap_or_default();
    let median = p50(lags.clone());
    println!("BENCH create returned after the worker could first answer: p50 {median:?}, max {worst:?} (n={})", lags.len());
    row(
        "`create` returns after the worker could first answer its Agent Card",
        &format!(
            "p50 {:.1} ms, max {:.1} ms (n={})",
            ms(median),
            ms(worst),
            lags.len()
        ),
        "≤ ~20 ms",
    );
    drop(cleanup);
}

fn rounds_of_create() -> usize {
    rounds("BENCH_CREATE_ROUNDS", 20)
}

/// What the Docker backend asks the engine for one create (readiness off) and one stop, with
/// a container of the same shape, made directly.
pub(crate) fn direct_create_stop(engine: &Engine, controller_id: &str, i: usize) {
    let worker_id = format!("d{i:05}");
    let task = format!("direct {i}");
    let port = free_port();
    let config = json!({
        "Image": worker_image(),
        "Env": ["A2A_TOKEN=0123456789abcdef", format!("A2A_PUBLIC_URL=http://127.0.0.1:{port}"), format!("TASK={task}")],
        "Labels": {
            "a2a-worker-controller/owner": controller_id,
            "a2a-worker-controller/worker-id": worker_id,
            "a2a-worker-controller/task": task,
        },
        "ExposedPorts": {"9090/tcp": {}},
        "HostConfig": {
            "RestartPolicy": {"Name": "no"},
            "Init": true,
            "SecurityOpt": ["no-new-privileges"],
            "ExtraHosts": ["host.docker.internal:host-gateway"],
            "PortBindings": {"9090/tcp": [{"HostIp": "127.0.0.1", "HostPort": port.to_string()}]},
        },
    });
    let name = format!("{controller_id}-direct-{i}");
    let id = engine.create(&name, &config).expect("engine create");
    engine.start(&id).expect("engine start");
    let _ = engine.inspect(&id).expect("engine inspect");
    let found = engine
        .list(&[
            format!("a2a-worker-controller/owner={controller_id}"),
            format!("a2a-worker-controller/worker-id={worker_id}"),
        ])
        .expect("engine list");
    assert_eq!(found.containers().expect("a readable list").len(), 1);
    engine.stop(&id, 10).expect("engine stop");
    engine.remove(&id).expect("engine remove");
}

/// The controller's connections to the engine's socket open now (long-lived ones are streams:
/// the watch source's `/events`), from `/proc/<pid>/fd` and `/proc/net/unix`.
fn engine_connections(pid: u32) -> usize {
    let unix = std::fs::read_to_string("/proc/net/unix").unwrap_or_default();
    let inodes: std::collections::HashSet<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
                .filter_map(|l| {
                    let l = l.to_string_lossy().into_owned();
                    Some(l.strip_prefix("socket:[")?.strip_suffix(']')?.to_string())
                })
                .collect()
        })
        .unwrap_or_default();
    unix.lines()
        .skip(1)
        .filter(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            cols.len() >= 7
                && inodes.contains(cols[6])
                && cols.get(7).is_none_or(|p| !p.contains("a2a"))
        })
        .count()
}

/// Watching, on the real engine: the latency from `docker kill` to the watch event, against
/// the engine's own `/events` stream read directly (the baseline); and what 64 idle watchers
/// cost: resident memory and threads against none, and the engine connections they hold.
#[test]
#[ignore = "a benchmark; scripts/bench.sh runs it"]
fn docker_bench_watch() {
    use crate::watch::Watch;
    let Some(socket) = docker_socket() else {
        return;
    };
    let id = controller_id("bench-watch");
    let cleanup = Cleanup::new(&socket, &id);
    let p = Proc::start(&socket, &id, &[]);
    let (rss_idle, threads_idle) = p.rss_and_threads();
    let conns_idle = engine_connections(p.pid());
    let mut watchers: Vec<Watch> = (0..64)
        .map(|_| Watch::start(p.addr, json!({"operation": "watch"})))
        .collect();
    for w in &mut watchers {
        w.task_id();
        assert!(w.snapshot().is_empty());
    }
    std::thread::sleep(Duration::from_secs(3));
    let (rss_64, threads_64) = p.rss_and_threads();
    let conns_64 = engine_connections(p.pid());
    println!(
        "BENCH watch: idle {rss_idle} KiB {threads_idle} threads {conns_idle} engine connections; 64 watchers {rss_64} KiB {threads_64} threads {conns_64} engine connections"
    );
    row(
        "resident memory with 64 idle watchers ÷ none",
        &format!(
            "×{:.2} ({rss_64} vs {rss_idle} KiB: {} KiB per watcher)",
            rss_64 as f64 / rss_idle.max(1) as f64,
            rss_64.saturating_sub(rss_idle) / 64
        ),
        "≤ 128 KiB per watcher",
    );
    row(
        "threads with 64 idle watchers (one stream thread and one task thread each, plus the source)",
        &format!("{threads_64} (vs {threads_idle} idle)"),
        "≈ idle + 2 × 64 + 2",
    );
    row(
        "engine connections held by 64 watchers",
        &format!("{} (vs {conns_idle} idle)", conns_64),
        "idle + 1 (/events)",
    );

    // Latency: kill a worker; time to the watcher's `changed` against the time to the engine's
    // own `die` event on a stream this test reads.
    let rounds = rounds("BENCH_WATCH_ROUNDS", 5);
    let mut ours = Vec::new();
    let mut engine = Vec::new();
    let first = &mut watchers[0];
    for i in 0..rounds {
        reply_data(&p.control(json!({"operation": "create", "task": format!("lat-{i}")})));
        while first.event().unwrap()["type"] != "added" {}
        let container = cleanup.owned()[0].id.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        let direct = Engine::new(socket.clone());
        let selectors = owner_selector(&id);
        let reader = std::thread::spawn(move || {
            let _ = direct.events(&selectors, None, Duration::from_secs(20), &mut |e| {
                if e["Action"] == "die" || e["status"] == "die" {
                    let _ = tx.send(Instant::now());
                    return false;
                }
                true
            });
        });
        std::thread::sleep(Duration::from_millis(200));
        // The kill is sent from another thread: the engine answers it only once it has
        // handled the exit, which is later than its `die` and the watcher's event.
        let killed = Instant::now();
        let killer = {
            let engine = Engine::new(socket.clone());
            std::thread::spawn(move || engine.kill(&container, "KILL").unwrap())
        };
        loop {
            let e = first.event().unwrap();
            if e["worker"]["state"] == "exited" {
                break;
            }
        }
        ours.push(killed.elapsed());
        if let Ok(at) = rx.recv_timeout(Duration::from_secs(10)) {
            engine.push(at - killed);
        }
        let _ = reader.join();
        killer.join().unwrap();
        p.control(json!({"operation": "stop", "worker_id": cleanup_worker(&p)}));
        while first.event().unwrap()["type"] != "removed" {}
    }
    let (ours, engine) = (p50(ours), p50(engine));
    println!(
        "BENCH watch latency p50: kill to watch event {} ms, kill to the engine's die event {} ms",
        ms(ours),
        ms(engine)
    );
    row(
        "docker kill → watch event, p50 (vs the engine's own /events)",
        &format!(
            "{:.1} ms vs {:.1} ms (+{:.1} ms)",
            ms(ours),
            ms(engine),
            ms(ours) - ms(engine)
        ),
        "≤ +50 ms",
    );
}

/// The one worker `p` lists.
fn cleanup_worker(p: &Proc) -> String {
    let data = reply_data(&p.control(json!({"operation": "list"})));
    data["workers"][0]["worker_id"]
        .as_str()
        .unwrap_or("")
        .to_string()
}
