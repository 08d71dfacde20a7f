//! The scale benchmark (`scripts/bench.sh --scale`; ignored, never in the default suite): what
//! 1,000 workers cost, each figure a ratio against its baseline measured in the same run, and
//! printed as a `ROW|figure|measured|target` line.
//!
//! Docker (`docker_at_scale`): BENCH_SCALE_WORKERS (default 1,000) workers made through the
//! controller, all but BENCH_SCALE_RUNNING (default 200) killed through the engine as they are
//! made (so they list `exited`, as most of a busy controller's workers do, and this 2-core
//! machine holds the rest running). Then: `list` against the engine's own filtered call;
//! create + stop against the same engine calls, and under `MAX_WORKERS` against none; one
//! reaper pass (its own metric) against one list; 64 watchers joining at once (their time to
//! `synced`, the engine lists made for them, resident memory with them and after); a `docker
//! kill` to the watcher's `changed` against the engine's own `die`. Every container is removed
//! at the end, also when the run fails (a guard's `Drop`, four at a time).
//!
//! Kubernetes (`k8s_at_scale`): 1,000 pods made through the controller on the stand-in; `list`
//! against the same paged calls (`limit=500`, `continue`) made directly and not parsed.
//! Local (`local_at_scale`): 200 tabs on the WezTerm stand-in; `list` against one `wezterm cli
//! list` run the way the controller runs it.

use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use a2a_worker_controller::testing::{owner_selector, Engine};
use serde_json::json;

use crate::docker_bench::{
    connect, direct_create_stop, exchange, list_path, list_request, mib, ms, raw_engine_list, row,
    status_kib,
};
use crate::docker_support::*;
use crate::support::{p50, reply_data, rounds, Controls};

fn ratio(a: Duration, b: Duration) -> f64 {
    a.as_secs_f64() / b.as_secs_f64().max(1e-9)
}

/// Removes every container of one controller id when dropped (also on a panic), four at a
/// time, and says how many.
struct Sweep {
    socket: PathBuf,
    id: String,
}

impl Drop for Sweep {
    fn drop(&mut self) {
        let ids = owned_ids(&Engine::new(self.socket.clone()), &self.id);
        let next = AtomicUsize::new(0);
        std::thread::scope(|scope| {
            for _ in 0..4 {
                scope.spawn(|| {
                    let engine = Engine::new(self.socket.clone());
                    while let Some(id) = ids.get(next.fetch_add(1, Ordering::SeqCst)) {
                        let _ = engine.remove(id);
                    }
                });
            }
        });
        println!("BENCH scale: removed {} containers", ids.len());
    }
}

/// The container of worker `worker_id`, from the engine.
fn container_of(engine: &Engine, id: &str, worker_id: &str) -> String {
    let listing = engine
        .list(&[
            format!("a2a-worker-controller/owner={id}"),
            format!("a2a-worker-controller/worker-id={worker_id}"),
        ])
        .expect("engine list");
    let found: Vec<Container> = serde_json::from_slice(listing.as_bytes()).expect("JSON");
    found.into_iter().next().expect("the worker's container").id
}

/// Makes `total` workers through `p`, four at a time; each one past the first `running` is
/// killed through the engine as soon as it is made. Returns the running workers' ids.
fn populate(p: &Proc, socket: &Path, id: &str, total: usize, running: usize) -> Vec<String> {
    let next = AtomicUsize::new(0);
    let alive = std::sync::Mutex::new(Vec::new());
    let started = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| {
                let engine = Engine::new(socket.to_path_buf());
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    if i >= total {
                        break;
                    }
                    let made = reply_data(
                        &p.control(json!({"operation": "create", "task": format!("scale {i}")})),
                    );
                    let worker_id = made["worker"]["worker_id"].as_str().unwrap().to_string();
                    if i < running {
                        alive.lock().unwrap().push(worker_id);
                    } else {
                        let c = container_of(&engine, id, &worker_id);
                        engine.kill(&c, "KILL").expect("engine kill");
                    }
                }
            });
        }
    });
    println!(
        "BENCH scale: {total} workers made ({running} running) in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    alive.into_inner().unwrap()
}

/// p50 of `rounds` lists through the controller (one keep-alive connection, read to the last
/// byte) and of the engine's own filtered call made directly (bare bytes, not parsed),
/// interleaved; and the reply's size.
fn list_figures(p: &Proc, socket: &Path, id: &str, rounds: usize) -> (Duration, Duration, usize) {
    let request = list_request();
    let mut conn = connect(p.addr).expect("connect to the controller");
    let mut buf = Vec::new();
    let path = list_path(id);
    let (mut via, mut direct) = (Vec::new(), Vec::new());
    let mut bytes = 0;
    for _ in 0..rounds {
        let started = Instant::now();
        raw_engine_list(socket, &path);
        direct.push(started.elapsed());
        let started = Instant::now();
        bytes = exchange(&mut conn, &request, &mut buf).expect("the controller answers");
        via.push(started.elapsed());
    }
    (p50(via), p50(direct), bytes)
}

/// A raw watch: sends the request, then reads until the snapshot's `synced` has come (the
/// bytes are searched, not parsed: the client's own cost stays out of the figure). The stream
/// stays open until the returned connection is dropped.
fn join_watch(addr: SocketAddr) -> (TcpStream, Duration) {
    use std::io::{Read, Write};
    let body = json!({"jsonrpc": "2.0", "id": "w", "method": "SendStreamingMessage",
        "params": {"message": {"messageId": "m", "role": "ROLE_USER",
            "parts": [{"data": {"operation": "watch"}}]}}})
    .to_string();
    let started = Instant::now();
    let mut s = connect(addr).expect("connect to the controller");
    write!(
        s,
        "POST /a2a HTTP/1.1\r\nHost: bench\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        crate::support::TOKEN,
        body.len()
    )
    .unwrap();
    // Searched as text (std's substring search, not a window compared at every byte: that
    // took a quarter of the CPU of a run with 64 watchers, on the cores the controller uses).
    let needle = r#""type":"synced""#;
    let mut tail: Vec<u8> = Vec::new();
    let mut chunk = vec![0u8; 64 << 10];
    loop {
        let n = s.read(&mut chunk).expect("the watch stream");
        assert!(n > 0, "the watch ended before synced");
        tail.extend_from_slice(&chunk[..n]);
        let text = match std::str::from_utf8(&tail) {
            Ok(t) => t,
            // A character cut by the read's end: what comes before it.
            Err(e) => std::str::from_utf8(&tail[..e.valid_up_to()]).unwrap_or(""),
        };
        if text.contains(needle) {
            return (s, started.elapsed());
        }
        let keep = tail.len().saturating_sub(needle.len() + 4);
        tail.drain(..keep);
    }
}

/// The value of an unlabelled metric on `p`'s `/metrics`.
fn metric(p: &Proc, name: &str) -> Option<f64> {
    let text = String::from_utf8_lossy(&p.get("/metrics").body).into_owned();
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

#[test]
#[ignore = "the scale benchmark; scripts/bench.sh --scale runs it"]
fn docker_at_scale() {
    let Some(socket) = docker_socket() else {
        return;
    };
    let total = rounds("BENCH_SCALE_WORKERS", 1000);
    let running = rounds("BENCH_SCALE_RUNNING", 200).min(total);
    let list_rounds = rounds("BENCH_SCALE_ROUNDS", 20);
    let create_rounds = rounds("BENCH_SCALE_CREATE_ROUNDS", 16);
    let id = controller_id("scale");
    let _sweep = Sweep {
        socket: socket.clone(),
        id: id.clone(),
    };
    let p = Proc::start(&socket, &id, &["-worker-ready-timeout=0"]);
    let mut alive = populate(&p, &socket, &id, total, running);
    let listed = reply_data(&p.control(json!({"operation": "list"})));
    let workers = listed["workers"].as_array().map_or(0, Vec::len);
    let exited = listed["workers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|w| w["state"] == "exited")
        .count();
    assert_eq!(workers, total, "every worker is listed");
    println!("BENCH scale: listed {workers} workers, {exited} exited");

    // list.
    let (via, direct, bytes) = list_figures(&p, &socket, &id, list_rounds);
    row(
        &format!("`list`, {total} workers ({exited} exited), Docker: controller ÷ the engine's own filtered `/containers/json`"),
        &format!(
            "×{:.2} ({:.1} vs {:.1} ms, p50 of {list_rounds}; reply {bytes} bytes)",
            ratio(via, direct),
            ms(via),
            ms(direct)
        ),
        "≤ ×1.10",
    );

    // create + stop with them present: the controller, the same engine calls, and a second
    // controller of the same id under MAX_WORKERS (its admission lists every worker once).
    let q = Proc::start(
        &socket,
        &id,
        &["-worker-ready-timeout=0", "-max-workers=100000"],
    );
    let engine = Engine::new(socket.clone());
    let churn = |c: &Proc, task: String| {
        let started = Instant::now();
        let made = reply_data(&c.control(json!({"operation": "create", "task": task})));
        reply_data(
            &c.control(json!({"operation": "stop", "worker_id": made["worker"]["worker_id"]})),
        );
        started.elapsed()
    };
    let (mut plain, mut bounded, mut by_hand, mut lists) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    // The order within a round alternates, so neither side always runs just after a list.
    for i in 0..create_rounds {
        let direct = |by_hand: &mut Vec<Duration>| {
            let started = Instant::now();
            direct_create_stop(&engine, &id, i);
            by_hand.push(started.elapsed());
        };
        if i % 2 == 1 {
            direct(&mut by_hand);
        }
        plain.push(churn(&p, format!("churn {i}")));
        bounded.push(churn(&q, format!("bounded {i}")));
        if i % 2 == 0 {
            direct(&mut by_hand);
        }
        let started = Instant::now();
        raw_engine_list(&socket, &list_path(&id));
        lists.push(started.elapsed());
    }
    let (plain, bounded, by_hand, one_list) = (p50(plain), p50(bounded), p50(by_hand), p50(lists));
    row(
        &format!(
            "`create` + `stop` with {total} workers present: controller ÷ the same engine calls"
        ),
        &format!(
            "×{:.3} ({:.1} vs {:.1} ms, p50 of {create_rounds})",
            ratio(plain, by_hand),
            ms(plain),
            ms(by_hand)
        ),
        "≤ ×1.05",
    );
    let added = bounded.saturating_sub(plain);
    row(
        &format!("`MAX_WORKERS` admission with {total} present: what it adds to a create ÷ one engine list"),
        &format!(
            "×{:.2} (+{:.1} ms; create+stop {:.1} vs {:.1} ms without; one engine list {:.1} ms)",
            ratio(added, one_list),
            ms(added),
            ms(bounded),
            ms(plain),
            ms(one_list)
        ),
        "≤ one engine list",
    );
    drop(q);

    // One reaper pass (none expired), from the reaper's own metric, against one list through
    // the same controller, and the engine calls its passes make (behind a relay that records
    // them). The first pass of a new controller inspects every ended worker once (its list
    // keeps what it read after): it is said, and left out.
    let reaper_relay = Relay::new(&socket, "a2a-scale-reaper");
    let r = Proc::start(&reaper_relay.path, &id, &["-reap-interval=1s"]);
    let mut first = None;
    let until = Instant::now() + Duration::from_secs(60);
    while first.is_none() && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(200));
        first = metric(&r, "a2a_reaper_last_pass_seconds");
    }
    // Passes alone for a while: every engine call made then is the reaper's (or the watch
    // source's one long /events call, made before).
    let calls = |relay: &Relay| relay.calls_seen.lock().unwrap().len();
    let window_start = calls(&reaper_relay);
    let window = Instant::now();
    std::thread::sleep(Duration::from_secs(8));
    let window = window.elapsed();
    let in_window: Vec<String> = reaper_relay.calls_seen.lock().unwrap()[window_start..].to_vec();
    // Request lines carry the API version before the path: `GET /v1.41/containers/json?...`.
    let full_list = list_path(&id);
    let reaper_lists = in_window.iter().filter(|l| l.contains(&full_list)).count();
    let workspace_lists = in_window
        .iter()
        .filter(|l| l.starts_with("GET ") && l.contains("/volumes?"))
        .count();
    let other: Vec<&String> = in_window
        .iter()
        .filter(|l| !l.contains(&full_list) && !l.contains("/volumes?") && !l.contains("/_ping"))
        .collect();
    let (mut passes, mut r_lists) = (Vec::new(), Vec::new());
    let mut r_conn = connect(r.addr).expect("connect to the controller");
    let until = Instant::now() + Duration::from_secs(40);
    while passes.len() < 9 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(1300));
        if let Some(secs) = metric(&r, "a2a_reaper_last_pass_seconds") {
            passes.push(Duration::from_secs_f64(secs));
            // A list through the same controller, between its passes.
            let started = Instant::now();
            exchange(&mut r_conn, &list_request(), &mut Vec::new())
                .expect("the controller answers");
            r_lists.push(started.elapsed());
        }
    }
    assert_eq!(
        metric(&r, "a2a_reaper_last_pass_workers"),
        Some(total as f64)
    );
    drop(r_conn);
    drop(r);
    drop(reaper_relay);
    let (pass, r_list) = (p50(passes.clone()), p50(r_lists));
    row(
        &format!("one reaper pass at {total} workers (none expired) ÷ one `list` through the same controller"),
        &format!(
            "×{:.2} ({:.1} vs {:.1} ms, p50 of {} passes, a list after each; its first pass {:.0} ms); \
             its engine calls in {:.1} s of passes: {reaper_lists} lists of all workers, {workspace_lists} of the workspaces, {} other{}",
            ratio(pass, r_list),
            ms(pass),
            ms(r_list),
            passes.len(),
            first.unwrap_or(0.0) * 1000.0,
            window.as_secs_f64(),
            other.len(),
            other.first().map_or(String::new(), |l| format!(" (first: {l})")),
        ),
        "≤ one list",
    );

    // 64 watchers joining at once, on a controller of their own behind a relay that counts
    // the engine lists: time to `synced` against one list, memory before, with, after.
    let relay = Relay::new(&socket, "a2a-scale-relay");
    let m = Proc::start(&relay.path, &id, &["-worker-ready-timeout=0"]);
    let (m_list, _, _) = list_figures(&m, &relay.path, &id, 5);
    watchers_join(&m, m_list, total, "Docker", Some(&relay.lists_seen));
    drop(m);
    drop(relay);

    // docker kill → the watcher's `changed`, against the engine's own `die` on a stream read
    // here, with every worker present (one of the running ones killed each round).
    let watch_rounds = rounds("BENCH_WATCH_ROUNDS", 5).min(alive.len());
    let mut w = crate::watch::Watch::start(p.addr, json!({"operation": "watch"}));
    w.task_id();
    assert_eq!(w.snapshot().len(), total);
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for _ in 0..watch_rounds {
        let worker_id = alive.pop().unwrap();
        let container = container_of(&engine, &id, &worker_id);
        let (tx, rx) = std::sync::mpsc::channel();
        let reader = {
            let (direct, selectors) = (Engine::new(socket.clone()), owner_selector(&id));
            std::thread::spawn(move || {
                let _ = direct.events(&selectors, None, Duration::from_secs(20), &mut |e| {
                    if e["Action"] == "die" {
                        let _ = tx.send(Instant::now());
                        return false;
                    }
                    true
                });
            })
        };
        std::thread::sleep(Duration::from_millis(300));
        let killed = Instant::now();
        let killer = {
            let engine = Engine::new(socket.clone());
            std::thread::spawn(move || engine.kill(&container, "KILL").unwrap())
        };
        loop {
            let e = w.event().expect("the watch goes on");
            if e["worker"]["worker_id"] == worker_id.as_str() && e["worker"]["state"] == "exited" {
                break;
            }
        }
        ours.push(killed.elapsed());
        if let Ok(at) = rx.recv_timeout(Duration::from_secs(10)) {
            theirs.push(at - killed);
        }
        let _ = reader.join();
        killer.join().unwrap();
    }
    let (ours, theirs) = (p50(ours), p50(theirs));
    row(
        &format!("event latency, Docker, {total} workers: `docker kill` → the watcher's `changed`, p50 of {watch_rounds}"),
        &format!(
            "{:.1} ms vs the engine's own `die` {:.1} ms (+{:.1} ms)",
            ms(ours),
            ms(theirs),
            ms(ours) - ms(theirs)
        ),
        "≤ +50 ms",
    );
}

/// 64 watchers joining `m` at once (it has `total` workers, and one list through it takes
/// `one_list`): each one's time to `synced` against one list, the engine lists made meanwhile
/// (when `lists` counts them), resident memory idle, with them, and after they left.
fn watchers_join(
    m: &Proc,
    one_list: Duration,
    total: usize,
    on: &str,
    lists: Option<&AtomicUsize>,
) {
    std::thread::sleep(Duration::from_secs(1));
    let idle = status_kib(m.pid(), "VmRSS:");
    // What it is made of: the heap and stacks, and pages of the program's own file (and
    // libc's), read in once its code ran and shared with the page cache.
    let split = |pid: u32| (status_kib(pid, "RssAnon:"), status_kib(pid, "RssFile:"));
    let idle_split = split(m.pid());
    let threads_idle = m.rss_and_threads().1;
    let before = lists.map(|l| l.load(Ordering::SeqCst));
    let (cpu_before, started) = (cpu_ticks(m.pid()), Instant::now());
    let joined: Vec<(TcpStream, Duration)> = {
        let addr = m.addr;
        let threads: Vec<_> = (0..64)
            .map(|_| std::thread::spawn(move || join_watch(addr)))
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    };
    println!(
        "BENCH scale, {on}: 64 watchers joined in {:.0} ms; the controller's CPU meanwhile {} ms",
        ms(started.elapsed()),
        (cpu_ticks(m.pid()) - cpu_before) * 10
    );
    let engine_lists = match (lists, before) {
        (Some(l), Some(b)) => format!(
            "; engine lists made meanwhile: {}",
            l.load(Ordering::SeqCst) - b
        ),
        _ => String::new(),
    };
    let mut times: Vec<Duration> = joined.iter().map(|(_, d)| *d).collect();
    times.sort();
    let (median, last) = (times[times.len() / 2], times[times.len() - 1]);
    std::thread::sleep(Duration::from_secs(2));
    let with = status_kib(m.pid(), "VmRSS:");
    let threads_with = m.rss_and_threads().1;
    drop(joined);
    // A stream looks whether its client is gone four times a second.
    std::thread::sleep(Duration::from_secs(3));
    let (peak, after) = (status_kib(m.pid(), "VmHWM:"), status_kib(m.pid(), "VmRSS:"));
    let after_split = split(m.pid());
    let threads_after = m.rss_and_threads().1;
    println!("BENCH scale, {on}: threads idle {threads_idle}, with 64 watchers {threads_with}, after {threads_after}");
    println!(
        "BENCH scale, {on}: resident idle {:.1} MiB anonymous + {:.1} MiB of files (the program, libc); after the watchers {:.1} + {:.1} MiB",
        mib(idle_split.0),
        mib(idle_split.1),
        mib(after_split.0),
        mib(after_split.1)
    );
    row(
        &format!("64 watchers joining at once, {total} workers, {on}: each one's snapshot (to `synced`) ÷ one `list`"),
        &format!(
            "p50 ×{:.2}, last ×{:.2} ({:.0} / {:.0} ms vs {:.0} ms){engine_lists}",
            ratio(median, one_list),
            ratio(last, one_list),
            ms(median),
            ms(last),
            ms(one_list)
        ),
        "≤ ×2, one engine list shared",
    );
    row(
        &format!("resident memory, {total} workers and 64 watchers, {on}"),
        &format!(
            "peak (VmHWM) {:.1} MiB; idle {:.1}, with the watchers {:.1}, after they left {:.1} MiB (×{:.2} of idle)",
            mib(peak),
            mib(idle),
            mib(with),
            mib(after),
            after as f64 / idle.max(1) as f64
        ),
        "≤ 64 MiB peak; after ≤ ×1.5 of idle",
    );
}

/// CPU time process `pid` has used, its ended threads' included (`/proc/PID/stat`'s utime and
/// stime), in clock ticks (10 ms each here).
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or("", |(_, rest)| rest)
        .split_whitespace()
        .collect();
    let field = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    field(11) + field(12)
}

/// Percent-encodes a query value (every byte but the unreserved ones).
fn encoded(v: &str) -> String {
    v.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Makes `total` workers through `p`, four at a time.
fn fill(p: &Proc, total: usize) {
    let next = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= total {
                    break;
                }
                reply_data(
                    &p.control(json!({"operation": "create", "task": format!("scale {i}")})),
                );
            });
        }
    });
}

#[test]
#[ignore = "the scale benchmark; scripts/bench.sh --scale runs it"]
fn k8s_at_scale() {
    use crate::k8s_e2e::{api_at, flags_at, NS};
    use crate::k8s_support::{configured, Pki, Standin};
    use a2a_worker_controller::testing::K8sMethod;
    // A real API server when one is named (BENCH_K8S_API_URL, and BENCH_K8S_PKI: a directory
    // with its ca.crt and an admin's client.crt and client.key; the namespace `a2a` made and
    // nodes to run 1,000 pods on), else the stand-in. The real one is not kept here: it is
    // built and started by hand (docs/performance.md says how it was run).
    let real = std::env::var("BENCH_K8S_API_URL")
        .ok()
        .zip(std::env::var_os("BENCH_K8S_PKI"));
    if real.is_none() && !configured() {
        return;
    }
    let total = rounds("BENCH_SCALE_PODS", 1000);
    let list_rounds = rounds("BENCH_SCALE_ROUNDS", 20);
    let (standin_pki, real_pki);
    let (pki, _standin, url, on): (&Pki, Option<Standin>, String, &str) = match real {
        Some((url, dir)) => {
            // The server's own files: kept when this test ends.
            real_pki = std::mem::ManuallyDrop::new(Pki { dir: dir.into() });
            (&real_pki, None, url, "real kube-apiserver")
        }
        None => {
            standin_pki = Pki::new("scale");
            let standin = Standin::start(&standin_pki, &["--ready-after", "0"]);
            let url = standin.url.clone();
            (&standin_pki, Some(standin), url, "Kubernetes stand-in")
        }
    };
    let id = controller_id("k8s-scale");
    let mut args = flags_at(&url, pki);
    args.push("-worker-ready-timeout=0".into());
    args.push(format!("-worker-image={}", worker_image()));
    let env: Vec<(String, String)> = std::env::var("BENCH_CONTROLLER_ENV")
        .unwrap_or_default()
        .split(',')
        .filter_map(|kv| {
            kv.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
        })
        .collect();
    let api = api_at(&url, pki);
    let selector = encoded(&owner_selector(&id).join(","));
    // A real server's pods outlive this test unless they are deleted (the stand-in's go with
    // it): all of this controller's at once, also when the test fails.
    struct Sweep<'a>(Option<(&'a a2a_worker_controller::testing::K8sApi, String)>);
    impl Drop for Sweep<'_> {
        fn drop(&mut self) {
            if let Some((api, path)) = &self.0 {
                if let Err(e) = api.call(K8sMethod::Delete, path, None) {
                    eprintln!("the pods made could not be deleted: {e}");
                }
            }
        }
    }
    let _sweep = Sweep(_standin.is_none().then(|| {
        (
            &api,
            format!("/api/v1/namespaces/{NS}/pods?labelSelector={selector}"),
        )
    }));
    let p = Proc::launch(&id, args, env);
    let started = Instant::now();
    fill(&p, total);
    println!(
        "BENCH scale: {total} pods made on the {on} in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    let base = format!("/api/v1/namespaces/{NS}/pods?limit=500&labelSelector={selector}");
    // The same pages the controller asks for, read and not parsed (the `continue` token is
    // found by its bytes).
    let direct_list = || {
        let mut next: Option<String> = None;
        let mut pages = 0;
        loop {
            let path = match &next {
                Some(t) => format!("{base}&continue={}", encoded(t)),
                None => base.clone(),
            };
            let (_, body) = api.call(K8sMethod::Get, &path, None).expect("a page");
            pages += 1;
            let text = String::from_utf8_lossy(&body);
            next = text
                .split_once(r#""continue""#)
                .and_then(|(_, rest)| rest.trim_start().strip_prefix(':'))
                .and_then(|rest| rest.trim_start().strip_prefix('"'))
                .and_then(|rest| rest.split_once('"'))
                .map(|(t, _)| t.to_string())
                .filter(|t| !t.is_empty());
            if next.is_none() {
                return pages;
            }
        }
    };
    let request = list_request();
    let mut conn = connect(p.addr).expect("connect to the controller");
    let mut buf = Vec::new();
    let (mut via, mut direct) = (Vec::new(), Vec::new());
    let mut pages = 0;
    for _ in 0..list_rounds {
        let started = Instant::now();
        pages = direct_list();
        direct.push(started.elapsed());
        let started = Instant::now();
        exchange(&mut conn, &request, &mut buf).expect("the controller answers");
        via.push(started.elapsed());
    }
    let listed = reply_data(&p.control(json!({"operation": "list"})));
    assert_eq!(listed["workers"].as_array().map(Vec::len), Some(total));
    let (via, direct) = (p50(via), p50(direct));
    row(
        &format!("`list`, {total} pods, {on}: controller ÷ the same paged API calls made directly"),
        &format!(
            "×{:.2} ({:.1} vs {:.1} ms, {pages} pages, p50 of {list_rounds})",
            ratio(via, direct),
            ms(via),
            ms(direct)
        ),
        "≤ ×1.10",
    );
    watchers_join(&p, via, total, on, None);
}

#[test]
#[ignore = "the scale benchmark; scripts/bench.sh --scale runs it"]
fn local_at_scale() {
    use crate::local_support::{socket_of, standin, Wez};
    let tabs = rounds("BENCH_SCALE_TABS", 200);
    let list_rounds = rounds("BENCH_SCALE_ROUNDS", 20);
    let wez = Wez::new("scale");
    let gui = wez.gui();
    let p = wez.controller();
    fill(&p, tabs);
    assert_eq!(
        gui.panes().len(),
        tabs + 1,
        "the operator's shell and the tabs"
    );
    // One `wezterm cli list` the way the controller runs it (the stand-in, the same argv and
    // socket), against a `list` through the controller.
    let call = wez.calls_of("list").pop().expect("the controller listed");
    let argv: Vec<String> = call["argv"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect();
    let socket = socket_of(&call).to_path_buf();
    let cli_list = || {
        let out = std::process::Command::new(standin())
            .args(&argv[1..])
            .envs(wez.env())
            .env("WEZTERM_UNIX_SOCKET", &socket)
            .output()
            .expect("the stand-in runs");
        assert!(out.status.success());
    };
    let request = list_request();
    let mut conn = connect(p.addr).expect("connect to the controller");
    let mut buf = Vec::new();
    let (mut via, mut direct) = (Vec::new(), Vec::new());
    let calls_before = wez.calls_of("list").len();
    for _ in 0..list_rounds {
        let started = Instant::now();
        cli_list();
        direct.push(started.elapsed());
        let started = Instant::now();
        exchange(&mut conn, &request, &mut buf).expect("the controller answers");
        via.push(started.elapsed());
    }
    let cli_calls = wez.calls_of("list").len() - calls_before - list_rounds;
    let listed = reply_data(&p.control(json!({"operation": "list"})));
    assert_eq!(listed["workers"].as_array().map(Vec::len), Some(tabs));
    let (via, direct) = (p50(via), p50(direct));
    row(
        &format!("local: {tabs} tabs, `list` ÷ one `wezterm cli list` (the stand-in)"),
        &format!(
            "×{:.2} ({:.1} vs {:.1} ms, p50 of {list_rounds}; the controller's CLI calls per list: {:.1})",
            ratio(via, direct),
            ms(via),
            ms(direct),
            cli_calls as f64 / list_rounds as f64
        ),
        "≤ ×1.20",
    );
}

/// The watch's own cost at scale, without an engine: 1,000 workers of the backend test double,
/// 64 watchers joining at once, each one's time to `synced` against one `list` through the
/// same controller (an in-process list of the double costs next to nothing, so this is what
/// the controller itself spends per snapshot).
#[test]
#[ignore = "the scale benchmark; scripts/bench.sh --scale runs it"]
fn watch_snapshot_at_scale() {
    let c = crate::support::controller();
    let total = rounds("BENCH_SCALE_WORKERS", 1000);
    for i in 0..total {
        c.backend.add_by_hand(&format!("scale {i}"), "admin");
    }
    let request = list_request();
    let mut conn = connect(c.addr).expect("connect to the controller");
    let mut buf = Vec::new();
    let lists: Vec<Duration> = (0..20)
        .map(|_| {
            let started = Instant::now();
            exchange(&mut conn, &request, &mut buf).expect("the controller answers");
            started.elapsed()
        })
        .collect();
    let one_list = p50(lists);
    let addr = c.addr;
    let started = Instant::now();
    let threads: Vec<_> = (0..64)
        .map(|_| std::thread::spawn(move || join_watch(addr)))
        .collect();
    let mut times: Vec<Duration> = threads.into_iter().map(|t| t.join().unwrap().1).collect();
    let all = started.elapsed();
    times.sort();
    let (median, last) = (times[times.len() / 2], times[times.len() - 1]);
    row(
        &format!("64 watchers joining at once, {total} workers of the test double: each one's snapshot ÷ one `list`"),
        &format!(
            "p50 ×{:.1}, last ×{:.1} ({:.0} / {:.0} ms vs {:.1} ms; all in {:.0} ms)",
            ratio(median, one_list),
            ratio(last, one_list),
            ms(median),
            ms(last),
            ms(one_list),
            ms(all)
        ),
        "(the controller's own part)",
    );
}
