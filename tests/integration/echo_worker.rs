//! The echo worker binary as its own process on a loopback port (no container): a worker
//! started bound, and a warm pool's member started unbound and bound late through
//! `POST /activate` (the activation contract in the worker's header): its card and `/healthz`
//! answer before activation, every call is 401 until then, a wrong secret is 401, the right one
//! binds the worker id, task, token and URL once, and a second activation is 409.

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use a2a_worker_controller::testing::sha256;
use serde_json::{json, Value};

use crate::support::{request, HttpResponse};

/// The echo worker, killed when dropped.
struct Echo {
    child: Child,
    addr: SocketAddr,
}

impl Drop for Echo {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(env: &[(&str, &str)]) -> Echo {
    let port = crate::support::free_port();
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let child = Command::new(env!("CARGO_BIN_EXE_a2a-echo-worker"))
        .env_clear()
        .env("LISTEN", addr.to_string())
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("the echo worker runs");
    // Owned before anything can fail: a failed wait still stops the process.
    let echo = Echo { child, addr };
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(addr).is_err() {
        assert!(Instant::now() < deadline, "the echo worker did not listen");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(request(addr, "GET", "/healthz", &[], b"").status, 200);
    echo
}

fn say(addr: SocketAddr, token: &str, text: &str) -> HttpResponse {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
        "params": {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": text}]}}});
    let auth = format!("Bearer {token}");
    request(
        addr,
        "POST",
        "/",
        &[("Authorization", &auth)],
        body.to_string().as_bytes(),
    )
}

fn activate(addr: SocketAddr, secret: &str, body: &Value) -> HttpResponse {
    let auth = format!("Bearer {secret}");
    request(
        addr,
        "POST",
        "/activate",
        &[("Authorization", &auth)],
        body.to_string().as_bytes(),
    )
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn a_bound_worker_answers_its_token_and_is_no_pool_member() {
    let e = start(&[
        ("A2A_PUBLIC_URL", "http://worker.test:9090"),
        ("INTERACTIVE_AUTH_TOKEN", "bound-token-0123456789"),
    ]);
    let r = say(e.addr, "bound-token-0123456789", "hello");
    assert_eq!(r.status, 200);
    assert_eq!(
        r.json()["result"]["task"]["artifacts"][0]["parts"][0]["text"],
        "hello"
    );
    assert_eq!(say(e.addr, "another-token-0123456789", "x").status, 401);
    assert_eq!(
        activate(e.addr, "x", &json!({})).status,
        404,
        "not a pool member"
    );
}

#[test]
fn a_pool_member_is_bound_late_and_once() {
    let secret = "member-secret-of-m1-0123456789abcdef";
    let e = start(&[
        ("A2A_POOL_MEMBER", "m1"),
        ("A2A_ACTIVATION_SHA256", &hex(&sha256(secret.as_bytes()))),
        ("A2A_PUBLIC_URL", "http://127.0.0.1:1"),
    ]);
    // Unbound: its card (readiness) answers, naming it a member; every call is 401.
    let card = request(e.addr, "GET", "/.well-known/agent-card.json", &[], b"");
    assert_eq!(card.status, 200);
    assert_eq!(card.json()["name"], "a2a-pool-member-m1");
    for token in ["", "anything-at-all-0123456789", secret] {
        assert_eq!(say(e.addr, token, "x").status, 401, "{token:?}");
    }
    let binding = json!({"worker_id": "3f9c2a1b7d4e", "task": "late task",
        "token": "the-workers-own-token-0123456789", "a2a_url": "http://127.0.0.1:40001",
        "env": {"ECHO_PREFIX": "bound"}});
    // A wrong secret (another member's, say) opens nothing.
    assert_eq!(
        activate(e.addr, "member-secret-of-m2-0123456789abcdef", &binding).status,
        401
    );
    assert_eq!(
        activate(e.addr, secret, &json!({"worker_id": "w"})).status,
        400,
        "incomplete"
    );
    let done = activate(e.addr, secret, &binding);
    assert_eq!(done.status, 200, "{}", done.text());
    assert_eq!(done.json()["activated"], "3f9c2a1b7d4e");
    // Bound: the card names its worker and URL; its own token works, and only that.
    let card = request(e.addr, "GET", "/.well-known/agent-card.json", &[], b"").json();
    assert_eq!(card["name"], "claude-interactive-3f9c2a1b7d4e");
    assert_eq!(
        card["supportedInterfaces"][0]["url"],
        "http://127.0.0.1:40001"
    );
    let r = say(e.addr, "the-workers-own-token-0123456789", "hello");
    assert_eq!(
        r.json()["result"]["task"]["artifacts"][0]["parts"][0]["text"],
        "bound: hello"
    );
    assert_eq!(
        say(e.addr, secret, "x").status,
        401,
        "the activation secret is no token"
    );
    // Once: a second activation is refused, with the right secret or any other.
    let again = json!({"worker_id": "other", "task": "t", "token": "t-0123456789abcdef", "a2a_url": "http://x"});
    assert_eq!(activate(e.addr, secret, &again).status, 409);
    assert_eq!(activate(e.addr, "wrong", &again).status, 409);
    let r = say(e.addr, "the-workers-own-token-0123456789", "still me");
    assert_eq!(r.status, 200, "the first binding stands");
}

#[test]
fn a_pool_member_without_its_secrets_hash_refuses_to_start() {
    let out = Command::new(env!("CARGO_BIN_EXE_a2a-echo-worker"))
        .env_clear()
        .env("A2A_POOL_MEMBER", "m1")
        .env("LISTEN", "127.0.0.1:0")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("needs A2A_ACTIVATION_SHA256"));
}
