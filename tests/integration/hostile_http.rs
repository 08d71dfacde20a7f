//! Hostile HTTP before authentication: absurd framing, oversized heads, slow and idle
//! clients, connection floods, smuggling shapes, non-UTF-8 bytes. The controller must answer
//! with the documented status, stay alive, and keep memory and threads bounded.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::Proc;
use crate::support::*;

/// The binary on its own, with an engine socket that does not exist (no engine is needed
/// for what these tests send).
fn proc(extra: &[&str]) -> Proc {
    let id = format!("hostile-{}", std::process::id());
    Proc::start(std::path::Path::new("/nonexistent/docker.sock"), &id, extra)
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

/// Reads one response (head + Content-Length body) from a connection.
fn read_response(s: &mut TcpStream) -> Option<HttpResponse> {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        match s.read(&mut byte) {
            Ok(1) => buf.push(byte[0]),
            _ => return None,
        }
    }
    let mut r = parse_response(&buf);
    let len: usize = r
        .header("Content-Length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).ok()?;
    r.body = body;
    Some(r)
}

/// Whether the server closed the connection within `within`.
fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    s.set_read_timeout(Some(within)).unwrap();
    let started = Instant::now();
    let mut buf = [0u8; 1024];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                // Said, so that a failure tells a timeout from another error.
                eprintln!(
                    "closed_within: not closed after {:?}: {e} ({:?})",
                    started.elapsed(),
                    e.kind()
                );
                return false;
            }
        }
    }
}

fn status_of(addr: SocketAddr, raw: &[u8]) -> u16 {
    raw_exchange(addr, raw).status
}

#[test]
fn absurd_content_lengths_are_refused_and_memory_stays_flat() {
    let p = proc(&[]);
    for cl in [
        "-1",
        "abc",
        "1e3",
        " ",
        "0x10",
        "18446744073709551615",
        "18446744073709551616",
    ] {
        let raw = format!("POST /a2a HTTP/1.1\r\nHost: x\r\nContent-Length: {cl}\r\n\r\n{{}}");
        assert_eq!(
            status_of(p.addr, raw.as_bytes()),
            400,
            "Content-Length: {cl}"
        );
    }
    let dup = "POST /a2a HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n{}";
    assert_eq!(status_of(p.addr, dup.as_bytes()), 400);
    let (rss_before, _) = p.rss_and_threads();
    for _ in 0..200 {
        let raw = "POST /a2a HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000000\r\n\r\n{}";
        assert_eq!(status_of(p.addr, raw.as_bytes()), 413);
    }
    let (rss_after, _) = p.rss_and_threads();
    assert_eq!(p.get("/healthz").status, 200, "alive");
    assert!(
        rss_after < rss_before + 16 * 1024,
        "memory grew from {rss_before} KiB to {rss_after} KiB"
    );
}

#[test]
fn an_oversized_body_is_refused_without_being_read() {
    let p = proc(&[]);
    // Declared over the cap, body never sent: the answer comes at once.
    let mut s = connect(p.addr);
    s.write_all(b"POST /a2a HTTP/1.1\r\nHost: x\r\nContent-Length: 2097152\r\n\r\n")
        .unwrap();
    let started = Instant::now();
    let r = read_response(&mut s).expect("an answer");
    assert_eq!(r.status, 413);
    // Long before the body timeout (30 s): the body was never waited for.
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(r.header("Connection"), Some("close"));
    assert!(closed_within(&mut s, Duration::from_secs(2)));
}

#[test]
fn an_oversized_target_or_head_is_refused_414_or_431_and_counted() {
    let p = proc(&[]);
    let long_target = format!("GET /{} HTTP/1.1\r\nHost: x\r\n\r\n", "a".repeat(9 * 1024));
    assert_eq!(status_of(p.addr, long_target.as_bytes()), 414);
    let big_header = format!(
        "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
        "b".repeat(17 * 1024)
    );
    assert_eq!(status_of(p.addr, big_header.as_bytes()), 431);
    let many: String = (0..101).map(|i| format!("X-H{i}: v\r\n")).collect();
    let many = format!("GET /healthz HTTP/1.1\r\nHost: x\r\n{many}\r\n");
    assert_eq!(status_of(p.addr, many.as_bytes()), 431);
    let metrics = p.get("/metrics").text();
    for status in ["414", "431"] {
        assert!(
            metrics.contains(&format!(
                "a2a_controller_http_requests_total{{route=\"http\",status=\"{status}\"}}"
            )),
            "refusals by the HTTP layer are counted: {metrics}"
        );
    }
    let ok: String = (0..90).map(|i| format!("X-H{i}: v\r\n")).collect();
    let ok = format!("GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{ok}\r\n");
    assert_eq!(status_of(p.addr, ok.as_bytes()), 200);
    assert_eq!(p.get("/healthz").status, 200);
}

#[test]
fn framing_that_could_smuggle_is_refused() {
    let p = proc(&[]);
    let both = "POST /a2a HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n";
    assert_eq!(status_of(p.addr, both.as_bytes()), 400);
    let gzip = "POST /a2a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n";
    assert_eq!(status_of(p.addr, gzip.as_bytes()), 501);
    let te10 = "POST /a2a HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n";
    assert_eq!(status_of(p.addr, te10.as_bytes()), 501);
    let bad_chunk = "POST /a2a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n";
    assert_eq!(status_of(p.addr, bad_chunk.as_bytes()), 400);
}

#[test]
fn non_utf8_methods_and_paths_get_400() {
    let p = proc(&[]);
    for raw in [
        &b"GET /\xff\xfe HTTP/1.1\r\nHost: x\r\n\r\n"[..],
        b"G\xc3\xa9T / HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: \xff\r\n\r\n",
        b"\x00\x01\x02\r\n\r\n",
        b"GET / HTTP/9.9\r\n\r\n",
    ] {
        assert_eq!(
            status_of(p.addr, raw),
            400,
            "{:?}",
            String::from_utf8_lossy(raw)
        );
    }
    assert_eq!(p.get("/healthz").status, 200);
}

#[test]
fn http10_keep_alive_pipelining_and_expect_continue() {
    let c = controller();
    // HTTP/1.0 without keep-alive: one answer, then the server closes.
    let mut s = connect(c.addr);
    s.write_all(b"GET /healthz HTTP/1.0\r\n\r\n").unwrap();
    let r = read_response(&mut s).unwrap();
    assert_eq!((r.status, r.header("Connection")), (200, Some("close")));
    assert!(closed_within(&mut s, Duration::from_secs(2)));
    // HTTP/1.0 with keep-alive: two requests on one connection.
    let mut s = connect(c.addr);
    for _ in 0..2 {
        s.write_all(b"GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
            .unwrap();
        let r = read_response(&mut s).unwrap();
        assert_eq!(
            (r.status, r.header("Connection")),
            (200, Some("keep-alive"))
        );
    }
    // HTTP/1.1 pipelined: three requests written at once, three answers in order.
    let mut s = connect(c.addr);
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /nope HTTP/1.1\r\nHost: x\r\n\r\nGET /readiness HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    let statuses: Vec<u16> = (0..3)
        .map(|_| read_response(&mut s).unwrap().status)
        .collect();
    assert_eq!(statuses, [200, 404, 200]);
    assert!(closed_within(&mut s, Duration::from_secs(2)));
    // Expect: 100-continue, as curl sends for larger bodies.
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}}).to_string();
    let mut s = connect(c.addr);
    let head = format!("POST /a2a HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\nContent-Length: {}\r\nExpect: 100-continue\r\n\r\n", body.len());
    s.write_all(head.as_bytes()).unwrap();
    let interim = read_response(&mut s).unwrap();
    assert_eq!(interim.status, 100);
    s.write_all(body.as_bytes()).unwrap();
    let r = read_response(&mut s).unwrap();
    assert_eq!(r.status, 200);
    assert!(r.json()["result"]["tasks"].is_array());
}

#[test]
fn slow_and_idle_clients_are_cut_off() {
    // Bounds of 1-2 s, and assertions that only say "cut off by the bound, not by the client
    // giving up": each trickle would go on for 30 s, so an end well before that is the
    // server's, however busy the machine is.
    let c = Builder::default()
        .flag("-http-head-timeout=1s")
        .flag("-http-body-timeout=2s")
        .flag("-http-idle-timeout=1s")
        .start();
    let trickle = |prefix: &[u8], then: &[u8]| -> Duration {
        let mut s = connect(c.addr);
        s.write_all(prefix).unwrap();
        let started = Instant::now();
        for b in then.iter().cycle().take(150) {
            if s.write_all(&[*b]).is_err() {
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        assert!(closed_within(&mut s, Duration::from_secs(20)), "cut off");
        started.elapsed()
    };
    let head = trickle(
        b"GET /healthz HTTP/1.1\r\n",
        b"X-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    );
    assert!(
        head < Duration::from_secs(20),
        "slow head cut off after {head:?}"
    );
    let body = trickle(
        b"POST /a2a HTTP/1.1\r\nHost: x\r\nContent-Length: 500\r\n\r\n",
        b"{",
    );
    assert!(
        body < Duration::from_secs(20),
        "slow body cut off after {body:?}"
    );
    // Idle keep-alive connection: closed after the idle bound (not before it).
    let mut s = connect(c.addr);
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    assert_eq!(read_response(&mut s).unwrap().status, 200);
    let started = Instant::now();
    assert!(
        closed_within(&mut s, Duration::from_secs(20)),
        "idle closed"
    );
    let idle = started.elapsed();
    assert!(
        idle >= Duration::from_millis(900),
        "closed after {idle:?}, before the idle bound"
    );
    // A connection that never sends anything is closed too.
    let mut s = connect(c.addr);
    assert!(closed_within(&mut s, Duration::from_secs(20)));
}

#[test]
fn five_hundred_slow_connections_do_not_stop_a_normal_client() {
    // The default MAX_CONNECTIONS (1024).
    let c = Builder::default().flag("-max-connections=1024").start();
    let slow: Vec<TcpStream> = (0..500)
        .map(|_| {
            let mut s = TcpStream::connect(c.addr).unwrap();
            s.write_all(b"POST /a2a HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n")
                .unwrap();
            s
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let started = Instant::now();
    let task = c.control(json!({"operation": "list"}));
    let took = started.elapsed();
    assert_eq!(reply_data(&task)["workers"], json!([]));
    assert!(
        took < Duration::from_secs(8),
        "list took {took:?} behind 500 slow clients"
    );
    drop(slow);
}

#[test]
fn connections_beyond_the_limit_get_503_and_threads_stay_bounded() {
    // A long head deadline, so the held connections stay held however slow this machine is.
    let p = proc(&["-max-connections=20", "-http-head-timeout=300s"]);
    let (_, threads_idle) = p.rss_and_threads();
    // Hold every slot. A connection counts as held only once it has gone unanswered for a
    // moment: the harness's own start-up probes may still occupy a slot briefly, in which
    // case the server (rightly) refuses the would-be holder with 503 and it is replaced.
    let mut held: Vec<TcpStream> = Vec::new();
    while held.len() < 20 {
        let mut s = TcpStream::connect(p.addr).unwrap();
        s.write_all(b"GET /healthz HTTP/1.1\r\n").unwrap();
        s.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let mut byte = [0u8; 1];
        match s.read(&mut byte) {
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                held.push(s)
            }
            _ => std::thread::sleep(Duration::from_millis(50)),
        }
    }
    for _ in 0..50 {
        let started = Instant::now();
        let mut s = connect(p.addr);
        let r = read_response(&mut s).expect("503 answer");
        assert_eq!(r.status, 503);
        // Far below the head timeout (10 s) a queued connection would wait out.
        assert!(started.elapsed() < Duration::from_secs(5), "quick refusal");
    }
    let (_, threads_full) = p.rss_and_threads();
    assert!(p.get("/metrics").status == 503, "still full");
    assert!(
        threads_full <= threads_idle + 20,
        "threads {threads_idle} -> {threads_full}"
    );
    drop(held);
    let deadline = Instant::now() + Duration::from_secs(20);
    while p.get("/healthz").status != 200 {
        assert!(
            Instant::now() < deadline,
            "serving again once connections close"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
