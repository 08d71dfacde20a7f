//! What an outside A2A v1.0 / HTTP conformance run checks: the JSON-RPC binding's
//! `Content-Type` rule (specification 9.1), early answers that reach a client which writes its
//! whole body before reading (as Python's `http.client` and several SDKs do), and RFC 9112
//! section 3.2's one `Host`.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::*;

const TWO_MIB: usize = 2 << 20;

fn list_body() -> String {
    json!({"jsonrpc": "2.0", "id": "ct", "method": "SendMessage", "params": {"message":
        message(vec![json!({"data": {"operation": "list"}})])}})
    .to_string()
}

fn post_with_type(c: &Controller, content_type: Option<&str>, token: &str) -> HttpResponse {
    let auth = format!("Bearer {token}");
    let mut headers = vec![("Authorization", auth.as_str())];
    if let Some(t) = content_type {
        headers.push(("Content-Type", t));
    }
    request(c.addr, "POST", "/a2a", &headers, list_body().as_bytes())
}

#[test]
fn only_json_bodies_reach_the_protocol() {
    let c = controller();
    for refused in [
        "text/plain",
        "application/x-www-form-urlencoded",
        "text/plain; charset=utf-8",
        "application/xml",
    ] {
        let r = post_with_type(&c, Some(refused), TOKEN);
        assert_eq!(r.status, 415, "{refused}: {}", r.text());
        let body = r.json();
        assert_eq!(body["jsonrpc"], "2.0");
        assert_eq!(body["id"], Value::Null);
        assert_eq!(body["error"]["code"], -32005, "{body}");
        assert_eq!(
            error_reason(&body["error"]),
            "CONTENT_TYPE_NOT_SUPPORTED",
            "{body}"
        );
        let message = body["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("application/json") && message.contains("application/a2a+json"),
            "{message}"
        );
        assert_eq!(
            r.header("Accept"),
            Some("application/json, application/a2a+json")
        );
    }
    // Accepted: both JSON types, with parameters, in any case; and no Content-Type at all
    // (read as JSON, documented in the README).
    for accepted in [
        Some("application/json"),
        Some("application/json; charset=utf-8"),
        Some("application/a2a+json"),
        Some("Application/A2A+JSON;charset=UTF-8"),
        None,
    ] {
        let r = post_with_type(&c, accepted, TOKEN);
        assert_eq!(r.status, 200, "{accepted:?}: {}", r.text());
        assert!(r.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED");
    }
    // Authentication still comes first: a wrong token with a wrong type is 401.
    let r = post_with_type(&c, Some("text/plain"), "wrong-token-0123456789");
    assert_eq!(r.status, 401);
    // Every refusal is counted.
    let metrics = request(c.addr, "GET", "/metrics", &[], b"").text();
    assert!(
        metrics.contains(r#"a2a_controller_http_requests_total{route="a2a",status="415"} 4"#),
        "{metrics}"
    );
}

/// Writes the whole request, head and body, before reading a byte of the answer.
fn write_all_then_read(addr: SocketAddr, head: &[u8], body: &[u8]) -> Result<HttpResponse, String> {
    let mut s = TcpStream::connect(addr).map_err(|e| e.to_string())?;
    s.set_write_timeout(Some(Duration::from_secs(20))).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(head)
        .and_then(|()| s.write_all(body))
        .map_err(|e| format!("writing the request: {e}"))?;
    let mut out = Vec::new();
    s.read_to_end(&mut out)
        .map_err(|e| format!("reading the answer: {e}"))?;
    Ok(parse_response(&out))
}

#[test]
fn early_answers_reach_a_client_that_sends_everything_first() {
    let c = controller();
    let body = vec![b'x'; TWO_MIB];
    let auth = format!("Authorization: Bearer {TOKEN}\r\n");
    let cases: Vec<(u16, Vec<u8>, Vec<u8>)> = vec![
        // 413: declared over the cap, answered without reading the body.
        (
            413,
            format!("POST /a2a HTTP/1.1\r\nHost: x\r\n{auth}Content-Length: {TWO_MIB}\r\n\r\n")
                .into_bytes(),
            body.clone(),
        ),
        // 413: a chunked body that grows past the cap.
        (
            413,
            b"POST /a2a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec(),
            {
                let mut chunked = Vec::new();
                for _ in 0..32 {
                    chunked.extend_from_slice(format!("{:x}\r\n", 65536).as_bytes());
                    chunked.extend_from_slice(&[b' '; 65536]);
                    chunked.extend_from_slice(b"\r\n");
                }
                chunked.extend_from_slice(b"0\r\n\r\n");
                chunked
            },
        ),
        // 431: a head that never ends within the limit.
        (
            431,
            b"POST /a2a HTTP/1.1\r\nHost: x\r\nX-Big: ".to_vec(),
            body.clone(),
        ),
        // 400: conflicting framing, answered before the body.
        (
            400,
            format!("POST /a2a HTTP/1.1\r\nHost: x\r\nContent-Length: {TWO_MIB}\r\nTransfer-Encoding: chunked\r\n\r\n")
                .into_bytes(),
            body.clone(),
        ),
        // 401: a body under the cap with a wrong token.
        (
            401,
            format!(
                "POST /a2a HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer wrong-token-0123456789\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                (1 << 20) - 10
            )
            .into_bytes(),
            vec![b' '; (1 << 20) - 10],
        ),
    ];
    for (status, head, body) in &cases {
        for attempt in 0..3 {
            let r = write_all_then_read(c.addr, head, body)
                .unwrap_or_else(|e| panic!("{status} (attempt {attempt}): {e}"));
            assert_eq!(r.status, *status, "{}", r.text());
        }
    }
    assert_eq!(request(c.addr, "GET", "/healthz", &[], b"").status, 200);
}

#[test]
fn the_lingering_close_is_bounded() {
    let c = controller();
    let head = format!("POST /a2a HTTP/1.1\r\nHost: x\r\nContent-Length: {TWO_MIB}\r\n\r\n");

    // A client that reads the 413, then trickles bytes forever, is cut off within the
    // linger time (5 s), not held open.
    let mut s = TcpStream::connect(c.addr).unwrap();
    s.write_all(head.as_bytes()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut answer = [0u8; 12];
    s.read_exact(&mut answer).unwrap();
    assert_eq!(&answer, b"HTTP/1.1 413");
    let started = Instant::now();
    let cut_off = loop {
        if s.write_all(b"x").is_err() {
            break started.elapsed();
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "still accepting bytes after 30 s"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(
        cut_off < Duration::from_secs(15),
        "cut off after {cut_off:?}"
    );

    // A client that streams far more than the byte bound is cut off too (after 8 MiB).
    let mut s = TcpStream::connect(c.addr).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(head.as_bytes()).unwrap();
    let chunk = vec![b'x'; 1 << 20];
    let mut sent = 0usize;
    while sent < (256 << 20) && s.write_all(&chunk).is_ok() {
        sent += chunk.len();
    }
    assert!(sent < (256 << 20), "the server kept reading {sent} bytes");
    assert_eq!(request(c.addr, "GET", "/healthz", &[], b"").status, 200);
}

#[test]
fn one_host_header_per_http11_request() {
    let c = controller();
    let status = |raw: &str| raw_exchange(c.addr, raw.as_bytes());
    let missing = status("GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n");
    assert_eq!(missing.status, 400);
    assert!(missing.text().contains("Host"), "{}", missing.text());
    let two = status("GET /healthz HTTP/1.1\r\nHost: a\r\nHost: b\r\nConnection: close\r\n\r\n");
    assert_eq!(two.status, 400);
    assert!(two.text().contains("more than one Host"), "{}", two.text());
    // HTTP/1.0 may omit it; one Host is what every client sends.
    assert_eq!(status("GET /healthz HTTP/1.0\r\n\r\n").status, 200);
    assert_eq!(
        status("GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").status,
        200
    );
    let metrics = request(c.addr, "GET", "/metrics", &[], b"").text();
    assert!(
        metrics.contains(r#"a2a_controller_http_requests_total{route="http",status="400"} 2"#),
        "{metrics}"
    );
}

#[test]
fn python_urllib_sees_the_statuses() {
    let Some(python) = env_or_skip("A2A_TEST_PYTHON", "A2A_REQUIRE_PYTHON") else {
        return;
    };
    let c = controller();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/python/early_answers.py");
    let out = std::process::Command::new(python)
        .args([script, &c.url(), TOKEN])
        .output()
        .expect("python runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("urllib early answers: ok"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
