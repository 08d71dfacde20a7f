//! Benchmark, not a timed test (scripts/bench.sh runs it in release against a real engine):
//! what the controller costs over its engine, as ratios measured in one run.
//! - `list` through the controller against the same engine call (the same label filter) made
//!   directly by the crate's own engine client, at 0 and 30 workers (p50 of BENCH_ROUNDS);
//! - resident memory idle, and peak (VmHWM) while 64 keep-alive clients list for 8 s, at 0 and
//!   30 workers, and what stays after they leave;
//! - start to the first `/healthz` answer, and the binary's size.
//!
//! It never fails on a slow machine: it reports.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use a2a_worker_controller::testing::{owner_selector, Engine};
use serde_json::json;

use crate::docker_support::*;
use crate::support::{p50, reply_data, Controls, TOKEN};

fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// One keep-alive client listing until `until`; the number of lists it made.
fn keep_alive_lister(addr: SocketAddr, until: Instant) -> usize {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message":
        {"messageId": "m", "role": "ROLE_USER", "parts": [{"data": {"operation": "list"}}]}}})
    .to_string();
    let request = format!(
        "POST /a2a HTTP/1.1\r\nHost: bench\r\nAuthorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let Ok(mut s) = TcpStream::connect(addr) else {
        return 0;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(30)));
    let mut done = 0;
    let mut buf = Vec::new();
    while Instant::now() < until {
        if s.write_all(request.as_bytes()).is_err() {
            break;
        }
        buf.clear();
        // Read the head, then exactly Content-Length bytes.
        let mut chunk = [0u8; 16384];
        let (head_end, length) = loop {
            let Ok(n) = s.read(&mut chunk) else {
                return done;
            };
            if n == 0 {
                return done;
            }
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
            let Ok(n) = s.read(&mut chunk) else {
                return done;
            };
            if n == 0 {
                return done;
            }
            buf.extend_from_slice(&chunk[..n]);
        }
        done += 1;
    }
    done
}

#[test]
#[ignore = "a benchmark; scripts/bench.sh runs it"]
fn docker_bench_controller_against_its_engine() {
    let Some(socket) = docker_socket() else {
        return;
    };
    let rounds: usize = std::env::var("BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);

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
    println!("BENCH start to first /healthz: p50 {:?}", p50(starts));
    let binary = std::fs::metadata(env!("CARGO_BIN_EXE_a2a-worker-controller"))
        .map(|m| m.len())
        .unwrap_or(0);
    println!(
        "BENCH binary: {binary} bytes ({:.2} MiB)",
        binary as f64 / (1 << 20) as f64
    );

    let p = Proc::start(&socket, &id, &["-worker-ready-timeout=0"]);
    println!(
        "BENCH resident memory idle: {:.1} MiB",
        status_kib(p.pid(), "VmRSS:") as f64 / 1024.0
    );
    let engine = Engine::new(socket.clone());
    let selector = owner_selector(&id);
    for workers in [0usize, 30] {
        let have = cleanup.owned().len();
        for i in have..workers {
            reply_data(&p.control(json!({"operation": "create", "task": format!("bench {i}")})));
        }
        let (mut direct, mut via) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            let started = Instant::now();
            let listed = engine.list(&selector).expect("engine list");
            direct.push(started.elapsed());
            assert_eq!(listed.len(), workers);
            let started = Instant::now();
            reply_data(&p.control(json!({"operation": "list"})));
            via.push(started.elapsed());
        }
        let (d, v) = (p50(direct), p50(via));
        println!(
            "BENCH list, {workers} workers, p50 of {rounds}: engine directly {d:?}, through the controller {v:?} ({:.2}x, +{:.2} ms)",
            v.as_secs_f64() / d.as_secs_f64(),
            (v.as_secs_f64() - d.as_secs_f64()) * 1000.0
        );
        let before = status_kib(p.pid(), "VmRSS:");
        let until = Instant::now() + Duration::from_secs(8);
        let addr = p.addr;
        let clients: Vec<_> = (0..64)
            .map(|_| std::thread::spawn(move || keep_alive_lister(addr, until)))
            .collect();
        let lists: usize = clients.into_iter().map(|c| c.join().unwrap_or(0)).sum();
        std::thread::sleep(Duration::from_secs(1));
        println!(
            "BENCH 64 keep-alive clients listing 8 s, {workers} workers: {lists} lists; resident before {:.1} MiB, peak (VmHWM) {:.1} MiB, after {:.1} MiB",
            before as f64 / 1024.0,
            status_kib(p.pid(), "VmHWM:") as f64 / 1024.0,
            status_kib(p.pid(), "VmRSS:") as f64 / 1024.0
        );
    }
}
