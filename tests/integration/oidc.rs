//! OIDC access tokens against a stand-in issuer (`tests/python/oidc_issuer.py`:
//! discovery and a JWKS over HTTP on loopback, keys and tokens made with Python's
//! `cryptography`): RS256, PS256, ES256 and EdDSA accepted, the caller named by `sub` in the scope of its
//! `tenant` claim; expired, not yet valid, wrong issuer, wrong audience, `alg: none`, HS256
//! with the public key as secret, an ES256 header on an RSA key, unknown `kid`, a tampered
//! payload, no scope claim — all 401; key rotation picked up (one JWKS fetch, then no more for
//! a minute); a JWKS on another origin and an issuer that does not answer stop startup.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;

use serde_json::{json, Value};

use crate::callers::{rpc_as, workers_of};
use crate::support::*;

const AUDIENCE: &str = "a2a-controller";

struct Issuer {
    child: Child,
    info: Value,
}

impl Drop for Issuer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Issuer {
    fn start(python: &std::ffi::OsStr, extra: &[&str]) -> Issuer {
        let script =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/oidc_issuer.py");
        let mut child = Command::new(python)
            .arg(script)
            .arg(AUDIENCE)
            .args(extra)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("the issuer starts");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let info: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"));
        Issuer { child, info }
    }

    fn issuer(&self) -> &str {
        self.info["issuer"].as_str().unwrap()
    }

    fn token(&self, name: &str) -> String {
        self.info["tokens"][name]
            .as_str()
            .or_else(|| self.info[name].as_str())
            .unwrap_or_else(|| panic!("no token {name}"))
            .to_string()
    }

    fn get(&self, path: &str) -> Value {
        let addr: std::net::SocketAddr =
            self.issuer().trim_start_matches("http://").parse().unwrap();
        request(addr, "GET", path, &[], b"").json()
    }
}

fn python() -> Option<std::ffi::OsString> {
    env_or_skip("A2A_TEST_PYTHON", "A2A_REQUIRE_PYTHON")
}

fn oidc_flags(issuer: &str) -> Vec<String> {
    vec![
        format!("-a2a-oidc-issuer={issuer}"),
        format!("-a2a-oidc-audience={AUDIENCE}"),
    ]
}

/// A controller that takes `issuer`'s tokens.
fn controller_of(issuer: &Issuer) -> Controller {
    let mut b = Builder::default();
    for f in oidc_flags(issuer.issuer()) {
        b = b.flag(&f);
    }
    b.start()
}

#[test]
fn signed_access_tokens_of_the_issuer_and_nothing_else() {
    let Some(python) = python() else { return };
    let issuer = Issuer::start(&python, &[]);
    let c = controller_of(&issuer);
    // Rotation: the issuer publishes a new key; a token naming its kid makes one JWKS fetch
    // and is accepted. Another unseen kid within the minute makes no fetch (refused).
    let fetched = |i: &Issuer| i.get("/hits")["hits"].as_u64().unwrap();
    let before = fetched(&issuer);
    issuer.get("/rotate");
    let (status, _) = rpc_as(c.addr, &issuer.token("rotated"), "ListTasks", json!({}));
    assert_eq!(status, 200, "the new key is fetched for its unseen kid");
    assert_eq!(fetched(&issuer), before + 1);
    let (status, _) = rpc_as(
        c.addr,
        &issuer.token("rotated_again"),
        "ListTasks",
        json!({}),
    );
    assert_eq!(status, 401);
    assert_eq!(
        fetched(&issuer),
        before + 1,
        "no second fetch within a minute"
    );
    let (status, _) = rpc_as(c.addr, &issuer.token("rs256"), "ListTasks", json!({}));
    assert_eq!(status, 200, "the old key still verifies");
    for good in ["rs256", "es256", "ps256", "eddsa", "audience_list"] {
        let (status, v) = rpc_as(c.addr, &issuer.token(good), "ListTasks", json!({}));
        assert_eq!(status, 200, "{good}: {v}");
    }
    for bad in [
        "expired",
        "not_yet_valid",
        "wrong_issuer",
        "wrong_audience",
        "alg_none",
        "hs256_public_key",
        "es256_header_on_rsa_key",
        "ps256_on_a_key_pinned_to_rs256",
        "unknown_kid",
        "tampered",
        "no_scope_claim",
        "bad_scope",
        "no_exp",
    ] {
        let (status, v) = rpc_as(c.addr, &issuer.token(bad), "ListTasks", json!({}));
        assert_eq!(status, 401, "{bad}: {v}");
        assert_eq!(
            v["message"], "the bearer token is not valid",
            "{bad}: no hint why"
        );
    }
    // The caller is the token's subject, in its tenant's scope.
    let rs = issuer.token("rs256");
    let task = crate::callers::control_as(
        c.addr,
        &rs,
        json!({"operation": "create", "task": "from oidc"}),
    );
    assert_eq!(reply_data(&task)["worker"]["scope"], "team-o", "{task}");
    assert_eq!(workers_of(c.addr, &rs).len(), 1);
    assert_eq!(
        workers_of(c.addr, &issuer.token("es256")).len(),
        1,
        "one tenant, one scope"
    );
    assert_eq!(
        workers_of(c.addr, TOKEN).len(),
        1,
        "the admin token works beside OIDC"
    );
    let metrics = request(c.addr, "GET", "/metrics", &[], b"").text();
    assert!(metrics.contains("caller=\"svc-ci\""), "{metrics}");
    // Its control tasks are its own: another subject does not reach them.
    let (_, v) = rpc_as(
        c.addr,
        &issuer.token("es256"),
        "GetTask",
        json!({"id": task["id"]}),
    );
    assert_eq!(v["error"]["code"], -32001, "{v}");

    drop(issuer);
    // The issuer gone: the cached keys serve on.
    let (status, _) = rpc_as(c.addr, &rs, "ListTasks", json!({}));
    assert_eq!(status, 200);
}

#[test]
fn an_issuer_that_cannot_be_trusted_or_reached_stops_startup() {
    let Some(python) = python() else { return };
    let start = |issuer: &str| -> String {
        let flags = oidc_flags(issuer);
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        let backend = Arc::new(FakeBackend::default());
        match a2a_worker_controller::start(&settings(&flags), backend) {
            Err(e) => e.to_string(),
            Ok(_) => panic!("started with issuer {issuer}"),
        }
    };
    let foreign = Issuer::start(&python, &["--foreign-jwks"]);
    let e = start(foreign.issuer());
    assert!(
        e.starts_with("A2A_OIDC_ISSUER: ")
            && e.contains("not on the issuer's origin")
            && !e.contains('\n'),
        "{e}"
    );
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let e = start(&format!("http://127.0.0.1:{port}"));
    assert!(
        e.starts_with("A2A_OIDC_ISSUER: ") && !e.contains('\n'),
        "{e}"
    );
}

/// `/mcp` authenticates as `/a2a` does: an OIDC caller's tools work, an expired token is 401
/// with the challenge.
#[test]
fn an_oidc_caller_reaches_mcp_as_it_reaches_a2a() {
    let Some(python) = python() else { return };
    let issuer = Issuer::start(&python, &[]);
    let c = controller_of(&issuer);
    let created = crate::mcp::call_modern(
        c.addr,
        &issuer.token("rs256"),
        "tools/call",
        json!({"name": "create", "arguments": {"task": "oidc-mcp"}}),
    );
    let result = &created["result"];
    assert_eq!(result["isError"], false, "{created}");
    crate::secrets::remember(result["structuredContent"]["token"].as_str().unwrap());
    let (body, headers) = crate::mcp::modern("tools/list", json!({}));
    let refused = crate::mcp::post(
        c.addr,
        &issuer.token("expired"),
        body.to_string().as_bytes(),
        &headers,
    );
    assert_eq!(refused.status, 401);
    assert!(refused
        .header("WWW-Authenticate")
        .is_some_and(|v| v.starts_with("Bearer")));
}
