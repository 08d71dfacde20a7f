//! Load: 64 concurrent clients doing `list` while creates and stops run in parallel, against
//! the real engine. Ignored by default (it runs for LOAD_SECONDS, default 60): scripts/test.sh
//! and scripts/bench.sh run it explicitly. Correctness is asserted (zero errors, no duplicate
//! workers, memory flat after warm-up); the figures are printed as ratios against a baseline
//! measured in the same run.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::docker_support::*;
use crate::support::{reply_data, request, Controls, TOKEN};

const LIST: &str = r#"{"jsonrpc":"2.0","id":"1","method":"SendMessage","params":{"message":{"messageId":"1","role":"ROLE_USER","parts":[{"data":{"operation":"list"}}]}}}"#;

fn list_once(addr: std::net::SocketAddr) -> Result<Duration, String> {
    let auth = format!("Bearer {TOKEN}");
    let started = Instant::now();
    let r = request(
        addr,
        "POST",
        "/a2a",
        &[("Authorization", &auth)],
        LIST.as_bytes(),
    );
    let took = started.elapsed();
    if r.status != 200 {
        return Err(format!("HTTP {}", r.status));
    }
    let v = r.json();
    match v["result"]["task"]["status"]["state"].as_str() {
        Some("TASK_STATE_COMPLETED") => Ok(took),
        _ => Err(v.to_string()),
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

#[test]
#[ignore = "runs for LOAD_SECONDS (default 60); scripts/test.sh and scripts/bench.sh run it"]
fn load_64_clients_with_creates_and_stops() {
    let Some(socket) = docker_socket() else {
        return;
    };
    let seconds: u64 = std::env::var("LOAD_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let clients: usize = std::env::var("LOAD_CLIENTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(64);
    let id = controller_id("load");
    let cleanup = Cleanup::new(&socket, &id);
    let p = Proc::start(&socket, &id, &[]);
    for i in 0..4 {
        reply_data(&p.control(json!({"operation": "create", "task": format!("standing {i}")})));
    }

    // Baseline, same run: one client alone.
    let mut base: Vec<Duration> = (0..200).map(|_| list_once(p.addr).unwrap()).collect();
    base.sort();
    let base_p50 = percentile(&base, 0.5);
    let (rss_idle, threads_idle) = p.rss_and_threads();

    let stop = Arc::new(AtomicBool::new(false));
    let errors = Arc::new(Mutex::new(Vec::<String>::new()));
    let latencies = Arc::new(Mutex::new(Vec::<Duration>::new()));
    let churn = Arc::new(AtomicU64::new(0));
    let mut handles = Vec::new();
    for _ in 0..clients {
        let (stop, errors, latencies, addr) =
            (stop.clone(), errors.clone(), latencies.clone(), p.addr);
        handles.push(std::thread::spawn(move || {
            let mut mine = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                match list_once(addr) {
                    Ok(d) => mine.push(d),
                    Err(e) => errors.lock().unwrap().push(e),
                }
            }
            latencies.lock().unwrap().extend(mine);
        }));
    }
    for t in 0..2 {
        let (stop, errors, churn, addr) = (stop.clone(), errors.clone(), churn.clone(), p.addr);
        let p_addr = addr;
        handles.push(std::thread::spawn(move || {
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                let task = format!("churn {t} {n}");
                n += 1;
                let create = control(p_addr, json!({"operation": "create", "task": task}));
                let Some(wid) = create
                    .as_ref()
                    .ok()
                    .and_then(|d| d["worker"]["worker_id"].as_str().map(String::from))
                else {
                    errors.lock().unwrap().push(format!("create: {create:?}"));
                    continue;
                };
                if let Err(e) = control(p_addr, json!({"operation": "stop", "worker_id": wid})) {
                    errors.lock().unwrap().push(format!("stop: {e}"));
                }
                churn.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    let started = Instant::now();
    // Warm-up: thread stacks, allocator arenas and the bounded task store fill up.
    let warm_up = Duration::from_secs((seconds / 6).max(10).min(seconds / 2));
    let mut rss_samples = Vec::new();
    let mut max_threads = 0;
    while started.elapsed() < Duration::from_secs(seconds) {
        std::thread::sleep(Duration::from_millis(500));
        let (rss, threads) = p.rss_and_threads();
        max_threads = max_threads.max(threads);
        if started.elapsed() >= warm_up {
            rss_samples.push(rss);
        }
    }
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        h.join().unwrap();
    }
    let elapsed = started.elapsed();

    let errors = errors.lock().unwrap().clone();
    let mut lat = latencies.lock().unwrap().clone();
    lat.sort();
    let (p50, p99) = (percentile(&lat, 0.5), percentile(&lat, 0.99));
    let rss_warm = rss_samples[0];
    let rss_end = *rss_samples.last().unwrap();
    let rss_max = *rss_samples.iter().max().unwrap();
    let workers = reply_data(&p.control(json!({"operation": "list"})))["workers"]
        .as_array()
        .unwrap()
        .clone();
    let tasks: std::collections::HashSet<&str> = workers
        .iter()
        .map(|w| w["task"].as_str().unwrap())
        .collect();

    eprintln!(
        "LOAD {clients} clients x {:.0}s: {} lists ({:.0}/s), {} create+stop cycles, {} errors",
        elapsed.as_secs_f64(),
        lat.len(),
        lat.len() as f64 / elapsed.as_secs_f64(),
        churn.load(Ordering::Relaxed),
        errors.len()
    );
    eprintln!("LOAD list latency: baseline p50 {base_p50:?} (1 client); under load p50 {p50:?} ({:.1}x), p99 {p99:?} ({:.1}x)",
        p50.as_secs_f64() / base_p50.as_secs_f64(), p99.as_secs_f64() / base_p50.as_secs_f64());
    eprintln!("LOAD resident memory: idle {rss_idle} KiB, after warm-up {rss_warm} KiB, end {rss_end} KiB ({:.2}x of warm-up), max {rss_max} KiB; threads idle {threads_idle}, max {max_threads}",
        rss_end as f64 / rss_warm as f64);

    assert!(
        errors.is_empty(),
        "{} errors, first: {:?}",
        errors.len(),
        errors.first()
    );
    assert_eq!(tasks.len(), workers.len(), "no task has two workers");
    assert_eq!(
        cleanup.owned().len(),
        workers.len(),
        "the engine holds exactly the listed workers"
    );
    assert!(
        rss_max <= rss_warm + 16 * 1024,
        "memory grew after warm-up: {rss_warm} -> {rss_max} KiB"
    );
}

fn control(
    addr: std::net::SocketAddr,
    data: serde_json::Value,
) -> Result<serde_json::Value, String> {
    let r = crate::support::send_control(addr, data);
    let v = r.json();
    let task = &v["result"]["task"];
    if task["status"]["state"] != "TASK_STATE_COMPLETED" {
        return Err(v.to_string());
    }
    Ok(task["artifacts"][0]["parts"][0]["data"].clone())
}
