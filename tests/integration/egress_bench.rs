//! The egress proxy's figures (scripts/bench.sh runs this; a benchmark, not a test): the proxy
//! as its own process (`a2a-worker-controller egress`, release build) beside an in-process
//! controller whose test double holds the worker, and loopback upstreams of this process.
//!
//! - a route's request (secret added) ÷ the same request made directly, p50 (and the added
//!   milliseconds);
//! - a 50 MB download through a CONNECT tunnel ÷ through a bare relay (no policy, 64 KiB
//!   buffers, a thread per direction) on the same path; and the bare relay ÷ direct;
//! - 1,000 idle tunnels held at once, and the proxy's resident memory then.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::egress::basic;
use crate::support::{free_port, p50, rounds, wait_until, Builder, TOKEN};

const MB: usize = 1 << 20;

static UPSTREAM_CONNECTIONS: std::sync::atomic::AtomicUsize =
    std::sync::atomic::AtomicUsize::new(0);

/// An HTTP upstream, as a model API is: a fixed small answer per request, keep-alive unless
/// the request says `Connection: close`, a thread per connection.
fn small_upstream() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for s in listener.incoming().flatten() {
            UPSTREAM_CONNECTIONS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            std::thread::spawn(move || {
                let _ = s.set_nodelay(true);
                let mut r = BufReader::new(s.try_clone().unwrap());
                let mut s = s;
                loop {
                    let (mut line, mut close, mut any) = (String::new(), false, false);
                    while r.read_line(&mut line).unwrap_or(0) > 0 {
                        any = true;
                        if line == "\r\n" {
                            break;
                        }
                        close |= line.to_ascii_lowercase().starts_with("connection: close");
                        line.clear();
                    }
                    if !any {
                        return;
                    }
                    let answer: &[u8] = if close {
                        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
                    } else {
                        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
                    };
                    if s.write_all(answer).is_err() || close {
                        return;
                    }
                }
            });
        }
    });
    addr
}

/// A TCP upstream that sends `bytes` to each connection, then closes.
fn bulk_upstream(bytes: usize) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let chunk = vec![7u8; 64 * 1024];
        for s in listener.incoming().flatten() {
            let chunk = chunk.clone();
            std::thread::spawn(move || {
                let mut s = s;
                let mut left = bytes;
                while left > 0 {
                    let n = left.min(chunk.len());
                    if s.write_all(&chunk[..n]).is_err() {
                        return;
                    }
                    left -= n;
                }
            });
        }
    });
    addr
}

/// A TCP upstream that accepts and holds every connection (nothing sent).
fn idle_upstream() -> (SocketAddr, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let held = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = held.clone();
    std::thread::spawn(move || {
        let mut kept = Vec::new();
        for s in listener.incoming().flatten() {
            kept.push(s);
            count.store(kept.len(), std::sync::atomic::Ordering::SeqCst);
        }
    });
    (addr, held)
}

/// A bare relay: no policy, 64 KiB buffers, a thread per direction.
fn bare_relay(to: SocketAddr) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for client in listener.incoming().flatten() {
            let up = TcpStream::connect(to).unwrap();
            let pump = |mut from: TcpStream, mut to: TcpStream| {
                let mut buf = vec![0u8; 64 * 1024];
                while let Ok(n) = from.read(&mut buf) {
                    if n == 0 || to.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
                let _ = to.shutdown(std::net::Shutdown::Write);
            };
            let (c2, u2) = (client.try_clone().unwrap(), up.try_clone().unwrap());
            std::thread::spawn(move || pump(c2, u2));
            std::thread::spawn(move || pump(up, client));
        }
    });
    addr
}

/// Reads everything from `s`; the bytes read.
fn drain(mut s: TcpStream) -> usize {
    let mut buf = vec![0u8; 256 * 1024];
    let mut total = 0;
    while let Ok(n) = s.read(&mut buf) {
        if n == 0 {
            break;
        }
        total += n;
    }
    total
}

/// A tunnel through the proxy to `target`, open (its 200 read).
fn tunnel(proxy: SocketAddr, target: SocketAddr, auth: &str) -> TcpStream {
    let mut s = TcpStream::connect(proxy).unwrap();
    write!(
        s,
        "CONNECT {target} HTTP/1.1\r\nHost: {target}\r\nProxy-Authorization: {auth}\r\n\r\n"
    )
    .unwrap();
    let mut got = Vec::new();
    let mut b = [0u8; 1];
    while !got.ends_with(b"\r\n\r\n") {
        assert_eq!(s.read(&mut b).unwrap(), 1, "the proxy closed");
        got.push(b[0]);
    }
    assert!(
        got.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&got)
    );
    s
}

/// One GET with `Connection: close`; the time it took.
fn get(addr: SocketAddr, path: &str, auth: Option<&str>) -> Duration {
    let start = Instant::now();
    let mut s = TcpStream::connect(addr).unwrap();
    let mut head = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n");
    if let Some(a) = auth {
        head.push_str(&format!("Authorization: {a}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    assert!(
        out.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&out)
    );
    start.elapsed()
}

struct ProxyProcess(Child, SocketAddr);

impl Drop for ProxyProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
        .unwrap_or(0)
}

#[test]
#[ignore = "a benchmark; scripts/bench.sh runs it"]
fn egress_bench_proxy_against_direct_and_a_bare_relay() {
    let small = small_upstream();
    let bulk = bulk_upstream(50 * MB);
    let (idle, held) = idle_upstream();
    let dir = std::env::temp_dir().join(format!("a2a-egress-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let secret = crate::egress::secret_file(&dir, "secret", "bench-route-secret-0123");
    let templates = dir.join("templates.json");
    std::fs::write(
        &templates,
        serde_json::json!({"templates": {"default": {
            "egress": [format!("127.0.0.1/32:{}", bulk.port()), format!("127.0.0.1/32:{}", idle.port())],
            "egress_routes": {"up": {"url": format!("http://{small}"), "header": "X-Key", "file": secret}},
        }}})
        .to_string(),
    )
    .unwrap();
    let controller = Builder::default().start();
    let placeholder =
        crate::egress::put_worker(&controller.backend, "bench0000001", "default", "127.0.0.1");
    let port = free_port();
    let child = Command::new(env!("CARGO_BIN_EXE_a2a-worker-controller"))
        .arg("egress")
        .env_clear()
        .env("A2A_AUTH_TOKEN", TOKEN)
        .env("A2A_PUBLIC_URL", "http://x")
        .env("WORKER_IMAGE", "a2a-echo-worker:dev")
        .env("WORKER_TEMPLATES_FILE", &templates)
        .env("EGRESS_LISTEN", format!("127.0.0.1:{port}"))
        .env(
            "EGRESS_CONTROLLER_URL",
            format!("http://{}", controller.addr),
        )
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let proxy = ProxyProcess(child, SocketAddr::from(([127, 0, 0, 1], port)));
    wait_until("the proxy answers", Duration::from_secs(10), || {
        TcpStream::connect(proxy.1).is_ok()
    });
    let bearer = format!("Bearer {placeholder}");

    // 1. A route's request against the same request direct, interleaved.
    let n = rounds("BENCH_EGRESS_ROUNDS", 500);
    let (mut direct, mut proxied) = (Vec::new(), Vec::new());
    for _ in 0..20 {
        get(proxy.1, "/up/x", Some(&bearer));
    }
    for _ in 0..n {
        direct.push(get(small, "/x", None));
        proxied.push(get(proxy.1, "/up/x", Some(&bearer)));
    }
    let (d, p) = (p50(direct), p50(proxied));
    println!(
        "BENCH egress: the upstream accepted {} connections for {} requests ({n} direct)",
        UPSTREAM_CONNECTIONS.load(std::sync::atomic::Ordering::SeqCst),
        2 * n + 20
    );
    println!(
        "BENCH egress: a route's request p50 {p:?} through the proxy, {d:?} direct ({n} each)"
    );
    println!(
        "ROW|a request through the proxy (secret added, loopback upstream) ÷ direct, p50|×{:.2} ({:.3} ms vs {:.3} ms, +{:.3} ms)|≤ ×1.3, and ≤ +1 ms",
        p.as_secs_f64() / d.as_secs_f64(),
        p.as_secs_f64() * 1e3,
        d.as_secs_f64() * 1e3,
        (p.as_secs_f64() - d.as_secs_f64()) * 1e3
    );

    // 2. 50 MB through a tunnel, through a bare relay, and direct (best of 3 each).
    let auth = basic("bench0000001", &placeholder);
    let relay = bare_relay(bulk);
    // Interleaved, best of 5 each: one 50 MB run is tens of milliseconds here.
    let once = |open: &dyn Fn() -> TcpStream| {
        let s = open();
        let start = Instant::now();
        let got = drain(s);
        assert_eq!(got, 50 * MB);
        got as f64 / start.elapsed().as_secs_f64() / MB as f64
    };
    let (mut through, mut bare, mut direct) = (0f64, 0f64, 0f64);
    for _ in 0..5 {
        through = through.max(once(&|| tunnel(proxy.1, bulk, &auth)));
        bare = bare.max(once(&|| TcpStream::connect(relay).unwrap()));
        direct = direct.max(once(&|| TcpStream::connect(bulk).unwrap()));
    }
    println!("BENCH egress: 50 MB at {through:.0} MB/s through a tunnel, {bare:.0} MB/s through a bare relay, {direct:.0} MB/s direct");
    println!(
        "ROW|CONNECT tunnel, 50 MB download ÷ a bare TCP relay (64 KiB buffers) on the same path|×{:.2} ({through:.0} vs {bare:.0} MB/s; the bare relay ÷ direct: ×{:.2}, {direct:.0} MB/s)|≥ ×0.8",
        through / bare,
        bare / direct
    );

    // 3. 1,000 idle tunnels at once, and the proxy's memory.
    let before = rss_kib(proxy.0.id());
    let tunnels: Vec<TcpStream> = (0..1000).map(|_| tunnel(proxy.1, idle, &auth)).collect();
    wait_until(
        "the upstream holds 1,000 connections",
        Duration::from_secs(30),
        || held.load(std::sync::atomic::Ordering::SeqCst) >= 1000,
    );
    let during = rss_kib(proxy.0.id());
    println!(
        "BENCH egress: 1,000 idle tunnels held: proxy RSS {} KiB (idle {} KiB)",
        during, before
    );
    println!(
        "ROW|1,000 concurrent idle tunnels|held; proxy RSS {:.1} MiB (idle {:.1} MiB)|held; RSS ≤ 64 MiB",
        during as f64 / 1024.0,
        before as f64 / 1024.0
    );
    drop(tunnels);
    let _ = std::fs::remove_dir_all(&dir);
}
