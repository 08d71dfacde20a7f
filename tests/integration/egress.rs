//! The egress proxy in-process, on real sockets, beside an in-process controller (whose
//! backend is the test double: its workers' address is 127.0.0.1, where these tests connect
//! from). What an engine adds (the fence itself) is `docker_egress.rs`'s.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use a2a_worker_controller::backend::{BackendKind, Worker, WorkerState};
use a2a_worker_controller::egress::{serve, Proxy};
use a2a_worker_controller::settings::egress::EgressKey;
use serde_json::json;

use crate::secrets::{assert_none_in, captured_log, remember};
use crate::support::{
    parse_response, raw_exchange, request, settings, wait_until, Builder, Controller, TOKEN,
};

const ROUTE_SECRET: &str = "route-secret-7d1e0c55aa";
const MODEL_KEY: &str = "model-key-51c9e2b7f0";

/// A controller, the proxy beside it, and an upstream that records what it was sent.
struct Rig {
    controller: Controller,
    proxy: SocketAddr,
    upstream: SocketAddr,
    /// What the upstream received, one request head (and body) per message.
    seen: mpsc::Receiver<String>,
    /// Released by the test: the upstream's second event of a stream waits for it.
    go_on: mpsc::Sender<()>,
    _dir: tempdir::Dir,
}

mod tempdir {
    pub struct Dir(pub std::path::PathBuf);
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

fn placeholder(worker_id: &str) -> String {
    let p = EgressKey::derived_from(TOKEN)
        .placeholder(worker_id)
        .expose()
        .to_string();
    remember(&p);
    p
}

/// An upstream on loopback: answers each request with its own head echoed in `X-Seen`... and
/// for `/stream`, two server-sent events, the second only once the test said go on.
pub fn upstream() -> (SocketAddr, mpsc::Receiver<String>, mpsc::Sender<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let (seen_tx, seen) = mpsc::channel();
    let (go_on, go_rx) = mpsc::channel::<()>();
    let go_rx = Arc::new(std::sync::Mutex::new(go_rx));
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let seen_tx = seen_tx.clone();
            let go_rx = Arc::clone(&go_rx);
            std::thread::spawn(move || answer(stream, &seen_tx, &go_rx));
        }
    });
    (addr, seen, go_on)
}

fn answer(
    stream: TcpStream,
    seen: &mpsc::Sender<String>,
    go_on: &std::sync::Mutex<mpsc::Receiver<()>>,
) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut head = String::new();
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = v.trim().parse().unwrap_or(0);
        }
        if line == "\r\n" {
            break;
        }
        head.push_str(&line);
    }
    let mut body = vec![0u8; length];
    reader.read_exact(&mut body).unwrap();
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        // Chunks as they come: a size line, the chunk, its CRLF; 0 ends them.
        loop {
            let mut size = String::new();
            reader.read_line(&mut size).unwrap();
            let n = usize::from_str_radix(size.trim(), 16).unwrap();
            let mut chunk = vec![0u8; n + 2];
            reader.read_exact(&mut chunk).unwrap();
            if n == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..n]);
        }
    }
    head.push_str(&String::from_utf8_lossy(&body));
    let streaming = head.contains("\"stream\":true") || head.starts_with("GET /v1/stream");
    let _ = seen.send(head);
    let mut out = stream;
    if streaming {
        let _ = out.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n");
        let one = "data: one\n\n";
        let _ = write!(out, "{:x}\r\n{one}\r\n", one.len());
        let _ = out.flush();
        let _ = go_on.lock().unwrap().recv_timeout(Duration::from_secs(30));
        let two = "data: two\n\n";
        let _ = write!(out, "{:x}\r\n{two}\r\n0\r\n\r\n", two.len());
    } else {
        let _ = out.write_all(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 8\r\n\r\nupstream",
        );
    }
}

/// A file only its owner reads, holding `secret` (remembered: no log may show it).
pub fn secret_file(dir: &std::path::Path, name: &str, secret: &str) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, secret).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    remember(secret);
    path
}

fn rig(recheck: &str) -> Rig {
    let (upstream, seen, go_on) = upstream();
    let dir = std::env::temp_dir().join(format!(
        "a2a-egress-test-{}-{}",
        std::process::id(),
        upstream.port()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let secret = secret_file(&dir, "route-secret", ROUTE_SECRET);
    let model_key = secret_file(&dir, "model-key", MODEL_KEY);
    let templates = dir.join("templates.json");
    std::fs::write(
        &templates,
        json!({"templates": {
            "default": {
                "egress": [format!("127.0.0.1/32:{}", upstream.port())],
                "egress_routes": {"echo": {
                    "url": format!("http://{upstream}"), "header": "X-Route-Secret",
                    "prefix": "Key ", "file": secret,
                }},
            },
            "closed": {"egress": "none"},
        }})
        .to_string(),
    )
    .unwrap();
    let controller = Builder::default().start();
    let proxy_settings = settings(&[
        &format!("-egress-controller-url=http://{}", controller.addr),
        &format!("-worker-templates-file={}", templates.display()),
        &format!("-egress-recheck={recheck}"),
        &format!("-egress-model-url=http://{upstream}/model-base"),
        &format!("-anthropic-auth-token-file={}", model_key.display()),
        "-http-head-timeout=1s",
    ]);
    let proxy = Arc::new(Proxy::new(&proxy_settings).expect("the proxy starts"));
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || serve(proxy, listener));
    Rig {
        controller,
        proxy: addr,
        upstream,
        seen,
        go_on,
        _dir: tempdir::Dir(dir),
    }
}

/// A running worker of `template` at `address`, put on the double by hand.
fn worker(rig: &Rig, id: &str, template: &str, address: &str) -> String {
    put_worker(&rig.controller.backend, id, template, address)
}

/// A running worker `id` of `template` at `address`, put on the test double by hand; its
/// placeholder (remembered as a secret).
pub fn put_worker(
    backend: &crate::support::FakeBackend,
    id: &str,
    template: &str,
    address: &str,
) -> String {
    let mut w = Worker::new(
        BackendKind::Docker,
        id,
        format!("task-{id}"),
        WorkerState::Running,
        "2026-12-06T00:00:00Z".to_string(),
    );
    w.a2a_url = format!("http://{address}:9090");
    w.template = template.into();
    backend.put(w);
    placeholder(id)
}

pub fn basic(worker_id: &str, placeholder: &str) -> String {
    use std::fmt::Write;
    let raw = format!("{worker_id}:{placeholder}");
    // Standard base64, padded.
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in raw.as_bytes().chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ABC[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    let mut header = String::new();
    let _ = write!(header, "Basic {out}");
    header
}

/// Opens a tunnel; the proxy's answer head, and the stream when it said 200.
pub fn connect(
    proxy: SocketAddr,
    target: &str,
    auth: Option<&str>,
) -> (u16, String, Option<TcpStream>) {
    let mut s = TcpStream::connect(proxy).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut head = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n");
    if let Some(a) = auth {
        head.push_str(&format!("Proxy-Authorization: {a}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).unwrap();
    let mut got = Vec::new();
    let mut byte = [0u8; 1];
    while !got.ends_with(b"\r\n\r\n") && s.read(&mut byte).unwrap_or(0) == 1 {
        got.push(byte[0]);
    }
    let status = String::from_utf8_lossy(&got)
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    if status == 200 {
        return (status, String::new(), Some(s));
    }
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    (
        status,
        String::from_utf8_lossy(&rest).trim().to_string(),
        None,
    )
}

#[test]
fn a_tunnel_reaches_an_allowed_destination_and_nothing_else() {
    let rig = rig("2s");
    let ph = worker(&rig, "aaaa00000001", "default", "127.0.0.1");
    let auth = basic("aaaa00000001", &ph);
    let (status, _, tunnel) = connect(rig.proxy, &rig.upstream.to_string(), Some(&auth));
    assert_eq!(status, 200);
    let mut tunnel = tunnel.unwrap();
    tunnel
        .write_all(b"GET /through HTTP/1.1\r\nHost: up\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    tunnel.read_to_string(&mut answer).unwrap();
    assert!(answer.ends_with("upstream"), "{answer}");
    assert!(rig.seen.recv().unwrap().starts_with("GET /through"));

    let (status, line, _) = connect(rig.proxy, "127.0.0.1:1", Some(&auth));
    assert_eq!(status, 403);
    assert_eq!(
        line,
        format!(
            "egress to 127.0.0.1:1 is not allowed: template default allows 127.0.0.1/32:{}",
            rig.upstream.port()
        )
    );
    // A name is judged by the address it resolves to: in the range a rule names, it passes.
    let (status, _, _) = connect(
        rig.proxy,
        &format!("localhost:{}", rig.upstream.port()),
        Some(&auth),
    );
    assert_eq!(status, 200);
    let closed = worker(&rig, "aaaa00000002", "closed", "127.0.0.1");
    let (status, line, _) = connect(
        rig.proxy,
        &rig.upstream.to_string(),
        Some(&basic("aaaa00000002", &closed)),
    );
    assert_eq!(status, 403);
    assert!(line.contains("egress \"none\""), "{line}");
}

#[test]
fn a_tunnel_without_a_placeholder_of_this_key_is_refused() {
    let rig = rig("2s");
    worker(&rig, "aaaa00000003", "default", "127.0.0.1");
    let target = rig.upstream.to_string();
    let (status, line, _) = connect(rig.proxy, &target, None);
    assert_eq!(status, 407);
    assert!(line.starts_with("no credentials"), "{line}");
    let forged = EgressKey::derived_from("another-admin-token-xyz")
        .placeholder("aaaa00000003")
        .expose()
        .to_string();
    let (status, line, _) = connect(rig.proxy, &target, Some(&basic("aaaa00000003", &forged)));
    assert_eq!(status, 407);
    assert!(line.contains("not a worker's placeholder"), "{line}");
}

#[test]
fn a_placeholder_is_refused_from_another_address_and_after_its_worker_stops() {
    let rig = rig("300ms");
    // The controller says this worker is at 10.9.9.9: these tests connect from 127.0.0.1.
    let elsewhere = worker(&rig, "aaaa00000004", "default", "10.9.9.9");
    let target = rig.upstream.to_string();
    let (status, line, _) = connect(rig.proxy, &target, Some(&basic("aaaa00000004", &elsewhere)));
    assert_eq!(status, 403);
    assert!(
        line.contains("came from 127.0.0.1, not from the worker"),
        "{line}"
    );

    let ph = worker(&rig, "aaaa00000005", "default", "127.0.0.1");
    let auth = basic("aaaa00000005", &ph);
    assert_eq!(connect(rig.proxy, &target, Some(&auth)).0, 200);
    rig.controller.backend.remove_by_hand("aaaa00000005");
    wait_until(
        "the stopped worker's placeholder is refused",
        Duration::from_secs(10),
        || {
            let (status, line, _) = connect(rig.proxy, &target, Some(&auth));
            status == 403 && line.contains("worker aaaa00000005 is not running")
        },
    );
}

#[test]
fn a_route_adds_its_secret_and_never_passes_the_placeholder_on() {
    let rig = rig("2s");
    let ph = worker(&rig, "aaaa00000006", "default", "127.0.0.1");
    let bearer = format!("Bearer {ph}");
    let answer = request(
        rig.proxy,
        "POST",
        "/echo/v1/things?x=1",
        &[("Authorization", &bearer), ("X-Worker-Header", "kept")],
        b"{\"a\":1}",
    );
    assert_eq!(answer.status, 200, "{}", answer.text());
    assert_eq!(answer.text(), "upstream");
    let seen = rig.seen.recv().unwrap();
    assert!(seen.starts_with("POST /v1/things?x=1 HTTP/1.1"), "{seen}");
    assert!(
        seen.contains(&format!("x-route-secret: Key {ROUTE_SECRET}"))
            || seen.contains(&format!("X-Route-Secret: Key {ROUTE_SECRET}")),
        "{seen}"
    );
    assert!(
        seen.to_ascii_lowercase().contains("x-worker-header: kept"),
        "{seen}"
    );
    assert!(seen.ends_with("{\"a\":1}"), "{seen}");
    assert!(!seen.contains(&ph), "the placeholder went upstream: {seen}");
    // Hop-by-hop headers stay on their hop (the client's `Connection: close` is not passed on).
    assert!(!seen.to_ascii_lowercase().contains("connection:"), "{seen}");

    // The model route: the key as a bearer token, the placeholder nowhere.
    let answer = request(
        rig.proxy,
        "GET",
        "/model/v1/models",
        &[("x-api-key", &ph)],
        b"",
    );
    assert_eq!(answer.status, 200, "{}", answer.text());
    let seen = rig.seen.recv().unwrap();
    assert!(seen.starts_with("GET /model-base/v1/models"), "{seen}");
    assert!(
        seen.to_ascii_lowercase()
            .contains(&format!("authorization: bearer {MODEL_KEY}")),
        "{seen}"
    );
    assert!(!seen.contains(&ph), "{seen}");

    // A chunked body is passed on whole (decoded, sent on with a framing of the proxy's own).
    let chunked = format!(
        "POST /echo/v1/chunked HTTP/1.1\r\nHost: proxy\r\nAuthorization: {bearer}\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n4\r\n{{\"a\"\r\n4\r\n:22}}\r\n0\r\n\r\n"
    );
    let answer = raw_exchange(rig.proxy, chunked.as_bytes());
    assert_eq!(answer.status, 200, "{}", answer.text());
    let seen = rig.seen.recv().unwrap();
    assert!(
        seen.starts_with("POST /v1/chunked") && seen.contains("{\"a\":22}"),
        "{seen}"
    );
    let unknown = request(
        rig.proxy,
        "GET",
        "/nope/x",
        &[("Authorization", &bearer)],
        b"",
    );
    assert_eq!(unknown.status, 403);
    assert_eq!(
        unknown.text().trim(),
        "template default has no route \"nope\""
    );
    assert_none_in(&captured_log(), "the log");
    let metrics = request(rig.proxy, "GET", "/metrics", &[], b"");
    assert!(metrics.text().contains(
        "a2a_egress_requests_total{template=\"default\",worker=\"aaaa00000006\",outcome=\"forwarded\"} 3"
    ), "{}", metrics.text());
    assert_none_in(&metrics.text(), "the proxy's /metrics");
}

#[test]
fn a_streamed_answer_passes_through_as_it_arrives() {
    let rig = rig("2s");
    let ph = worker(&rig, "aaaa00000007", "default", "127.0.0.1");
    // The model route as the seed's workers call it: POST /v1/messages under ANTHROPIC_BASE_URL
    // with ANTHROPIC_AUTH_TOKEN (their placeholder) as the bearer token, a streamed answer.
    let body = r#"{"model":"m","stream":true,"messages":[]}"#;
    let mut s = TcpStream::connect(rig.proxy).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "POST /model/v1/messages HTTP/1.1\r\nHost: proxy\r\nAuthorization: Bearer {ph}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 512];
    // The first event arrives while the upstream still holds the second.
    while !String::from_utf8_lossy(&got).contains("data: one") {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "the proxy closed before the first event");
        got.extend_from_slice(&buf[..n]);
    }
    assert!(!String::from_utf8_lossy(&got).contains("data: two"));
    let seen = rig.seen.recv().unwrap();
    assert!(seen.starts_with("POST /model-base/v1/messages"), "{seen}");
    assert!(seen
        .to_ascii_lowercase()
        .contains(&format!("authorization: bearer {MODEL_KEY}")));
    rig.go_on.send(()).unwrap();
    let mut rest = Vec::new();
    s.read_to_end(&mut rest).unwrap();
    got.extend_from_slice(&rest);
    let text = String::from_utf8_lossy(&got);
    assert!(
        text.contains("data: two") && text.ends_with("0\r\n\r\n"),
        "{text}"
    );
    assert!(text.contains("text/event-stream"), "{text}");
}

#[test]
fn hostile_input_is_answered_as_the_http_layer_answers_it() {
    let rig = rig("2s");
    let garbage = raw_exchange(rig.proxy, b"CONNECT\r\n\r\n");
    assert_eq!(garbage.status, 400);
    let huge = format!("GET /{} HTTP/1.1\r\nHost: x\r\n\r\n", "a".repeat(9000));
    assert_eq!(raw_exchange(rig.proxy, huge.as_bytes()).status, 414);
    let many: String = (0..120).map(|i| format!("X-H{i}: v\r\n")).collect();
    let head = format!("GET /echo/x HTTP/1.1\r\nHost: x\r\n{many}\r\n");
    assert_eq!(raw_exchange(rig.proxy, head.as_bytes()).status, 431);
    let smuggle = b"POST /echo/x HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n";
    let ph = worker(&rig, "aaaa00000008", "default", "127.0.0.1");
    let mut with_auth = String::from_utf8_lossy(smuggle).replace(
        "\r\n\r\n",
        &format!("\r\nAuthorization: Bearer {ph}\r\n\r\n"),
    );
    with_auth.push_str("abc");
    assert_eq!(raw_exchange(rig.proxy, with_auth.as_bytes()).status, 400);
    let plain = raw_exchange(
        rig.proxy,
        b"GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n",
    );
    assert_eq!(plain.status, 403);
    assert!(plain.text().contains("plain http://"), "{}", plain.text());
    let ok = parse_response(b"HTTP/1.1 200 OK\r\n\r\n");
    assert_eq!(ok.status, 200);
}

#[test]
fn a_fence_without_its_proxy_is_refused_at_startup_in_one_line() {
    let dir = std::env::temp_dir().join(format!("a2a-egress-refusal-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let templates = dir.join("templates.json");
    std::fs::write(
        &templates,
        r#"{"templates": {"coder": {"egress": ["api.github.com:443"]}}}"#,
    )
    .unwrap();
    let p = crate::support::Proc::prepare(
        "t-egress-refusal",
        vec![
            "-docker-host=unix:///nonexistent/docker.sock".into(),
            "-worker-image=a2a-echo-worker:dev".into(),
            format!("-worker-templates-file={}", templates.display()),
        ],
        Vec::new(),
    );
    let (code, log) = p.run_to_exit();
    let _ = std::fs::remove_dir_all(&dir);
    assert_ne!(code, Some(0), "{log}");
    let line = log
        .lines()
        .find(|l| l.contains("ERROR"))
        .unwrap_or_default();
    assert!(
        line.ends_with("template \"coder\": egress: api.github.com:443 needs the egress proxy: set EGRESS_PROXY_URL (where fenced workers reach it)"),
        "{log}"
    );
}

#[test]
fn a_slow_head_is_cut_off_at_the_head_timeout_however_its_bytes_trickle() {
    let rig = rig("2s");
    let mut s = TcpStream::connect(rig.proxy).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let start = std::time::Instant::now();
    // One byte every 100 ms: each read is quick, the head never ends.
    let mut closed = false;
    for b in b"GET /echo/x HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
        .iter()
        .cycle()
    {
        if s.write_all(&[*b]).is_err() {
            closed = true;
            break;
        }
        let mut one = [0u8; 1];
        match s.read(&mut one) {
            Ok(0) => {
                closed = true;
                break;
            }
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                closed = true;
                break;
            }
            _ => {}
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the slow client was never cut off"
        );
    }
    assert!(closed);
    // The head timeout is 1 s here (HTTP_HEAD_TIMEOUT): cut off after it, not long after.
    assert!(
        start.elapsed() >= Duration::from_millis(900),
        "{:?}",
        start.elapsed()
    );
}

/// A TLS upstream (python3's `http.server` behind `ssl`, a certificate for 127.0.0.1 made
/// with openssl): answers `tls upstream` and whether the route's secret came. `None`
/// (skipped, said) without python3 or openssl.
fn tls_upstream(dir: &std::path::Path) -> Option<(u16, std::path::PathBuf, std::process::Child)> {
    let ok = |cmd: &str| std::process::Command::new(cmd).arg("-h").output().is_ok();
    if !ok("python3") || !ok("openssl") {
        eprintln!("SKIPPED: python3 and openssl make the TLS upstream");
        return None;
    }
    // A CA, and the upstream's certificate for 127.0.0.1 signed by it.
    let (ca, ca_key) = (dir.join("ca.crt"), dir.join("ca.key"));
    let (cert, key, csr) = (
        dir.join("upstream.crt"),
        dir.join("upstream.key"),
        dir.join("upstream.csr"),
    );
    let ext = dir.join("upstream.ext");
    std::fs::write(
        &ext,
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
    ];
    let p = |p: &std::path::Path| p.display().to_string();
    for args in [
        [
            &["req", "-x509"][..],
            &ec,
            &[
                "-days",
                "1",
                "-subj",
                "/CN=a2a egress test CA",
                "-keyout",
                &p(&ca_key),
                "-out",
                &p(&ca),
            ],
        ]
        .concat(),
        [
            &["req"][..],
            &ec,
            &[
                "-subj",
                "/CN=127.0.0.1",
                "-keyout",
                &p(&key),
                "-out",
                &p(&csr),
            ],
        ]
        .concat(),
        vec![
            "x509",
            "-req",
            "-in",
            &p(&csr),
            "-CA",
            &p(&ca),
            "-CAkey",
            &p(&ca_key),
            "-CAcreateserial",
            "-days",
            "1",
            "-extfile",
            &p(&ext),
            "-out",
            &p(&cert),
        ],
    ] {
        let made = std::process::Command::new("openssl")
            .args(&args)
            .output()
            .unwrap();
        assert!(
            made.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&made.stderr)
        );
    }
    let script = format!(
        r#"
import http.server, ssl, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = ("tls upstream secret=" + ("yes" if self.headers.get("X-Route-Secret") == "Key {ROUTE_SECRET}" else "no")).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers(); self.wfile.write(body)
    def log_message(self, *a): pass
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
c = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); c.load_cert_chain(sys.argv[1], sys.argv[2])
s.socket = c.wrap_socket(s.socket, server_side=True)
print(s.server_address[1], flush=True)
s.serve_forever()
"#
    );
    let mut child = std::process::Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(&cert)
        .arg(&key)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        // Never the test's own stderr: a server left behind must not hold the harness's pipe.
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    Some((line.trim().parse().unwrap(), ca, child))
}

#[test]
fn a_route_to_an_https_upstream_is_verified_against_the_ca_file_or_the_public_roots() {
    let dir = std::env::temp_dir().join(format!("a2a-egress-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let _gone = tempdir::Dir(dir.clone());
    let Some((port, ca, mut server)) = tls_upstream(&dir) else {
        return;
    };
    let secret = secret_file(&dir, "route-secret", ROUTE_SECRET);
    let templates = dir.join("templates.json");
    std::fs::write(
        &templates,
        json!({"templates": {"default": {
            "egress": "none",
            "egress_routes": {"tls": {"url": format!("https://127.0.0.1:{port}"), "header": "X-Route-Secret", "prefix": "Key ", "file": secret}},
        }}})
        .to_string(),
    )
    .unwrap();
    let controller = Builder::default().start();
    let bearer = format!(
        "Bearer {}",
        put_worker(&controller.backend, "tls000000001", "default", "127.0.0.1")
    );
    let proxy = |extra: &[&str]| {
        let mut flags = vec![
            format!("-egress-controller-url=http://{}", controller.addr),
            format!("-worker-templates-file={}", templates.display()),
        ];
        flags.extend(extra.iter().map(|s| s.to_string()));
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        let p = Arc::new(Proxy::new(&settings(&flags)).expect("the proxy starts"));
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || serve(p, listener));
        addr
    };
    // Trusting the upstream's CA (EGRESS_CA_FILE): the call goes through, secret added.
    let trusting = proxy(&[&format!("-egress-ca-file={}", ca.display())]);
    let answer = request(
        trusting,
        "GET",
        "/tls/x",
        &[("Authorization", &bearer)],
        b"",
    );
    assert_eq!(answer.status, 200, "{}", answer.text());
    assert_eq!(answer.text(), "tls upstream secret=yes");
    // With the public roots only, a certificate they do not vouch for is refused.
    let public = proxy(&[]);
    let refused = request(public, "GET", "/tls/x", &[("Authorization", &bearer)], b"");
    assert_eq!(refused.status, 502, "{}", refused.text());
    assert!(
        refused
            .text()
            .contains("route \"tls\"'s upstream could not be called"),
        "{}",
        refused.text()
    );
    let _ = server.kill();
    let _ = server.wait();
}
