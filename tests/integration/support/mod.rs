//! The harness: a controller started in this process on an ephemeral port with a test double
//! of the backend trait, and a raw HTTP/1.1 client on a real socket.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

mod process;

pub use self::process::{controller_id, free_port, Proc};
pub use a2a_worker_controller::backend::fake::FakeBackend;
use a2a_worker_controller::settings::{self, Command, Settings};
use serde_json::{json, Value};

pub const TOKEN: &str = "test-token-0123456789abcdef";

/// How long [`wait_until`] waits unless told: longer than anything a test waits for should
/// take on a loaded machine.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// Waits until `done` holds, asking every 50 ms, and fails the test naming `what` if it does
/// not within `within`: the one way a test waits for something observable (a metric, a
/// listing, a file, a log line) instead of sleeping for a time that stands for "it got there".
pub fn wait_until(what: &str, within: Duration, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + within;
    while !done() {
        assert!(
            std::time::Instant::now() < deadline,
            "not within {within:?}: {what}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The value of `var`, which a suite needs; without it the test says it skipped, unless
/// `require` is `1` (as scripts/test.sh and CI set it), which makes the absence a failure.
/// Builds one of the crate's examples (`tests/examples/`) with the cargo running the tests;
/// its path.
pub fn build_example(name: &str, release: bool) -> std::path::PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let root = env!("CARGO_MANIFEST_DIR");
    let mut args = vec!["build", "--locked", "--quiet", "--example", name];
    if release {
        args.push("--release");
    }
    let built = std::process::Command::new(cargo)
        .current_dir(root)
        .args(&args)
        .status()
        .expect("cargo runs");
    assert!(built.success(), "the example {name} builds");
    let target = std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| format!("{root}/target"));
    let profile = if release { "release" } else { "debug" };
    std::path::PathBuf::from(format!("{target}/{profile}/examples/{name}"))
}

/// The median of benchmark samples.
/// A benchmark's count from the environment variable `var`, else `default`.
pub fn rounds(var: &str, default: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

pub fn p50(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// The 99th percentile of `samples` (not empty).
pub fn p99(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[(samples.len() * 99 / 100).min(samples.len() - 1)]
}

pub fn env_or_skip(var: &str, require: &str) -> Option<std::ffi::OsString> {
    let value = std::env::var_os(var);
    if value.is_none() {
        assert!(
            std::env::var(require).as_deref() != Ok("1"),
            "{require}=1 but {var} is not set"
        );
        eprintln!("SKIPPED: {var} is not set (scripts/test.sh sets it)");
    }
    value
}

pub fn settings(extra: &[&str]) -> Settings {
    let mut args = vec![
        "-listen=127.0.0.1:0".to_string(),
        format!("-a2a-auth-token={TOKEN}"),
        "-a2a-public-url=http://controller.test:8080/".to_string(),
        "-worker-image=a2a-echo-worker:dev".to_string(),
        "-max-connections=256".to_string(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    match settings::parse(args, Vec::new()).expect("test settings") {
        Command::Run(s) => *s,
        other => panic!("{other:?}"),
    }
}

/// Starts controllers for tests.
#[derive(Default)]
pub struct Builder {
    flags: Vec<String>,
    backend: Option<Arc<FakeBackend>>,
}

impl Builder {
    pub fn flag(mut self, flag: &str) -> Self {
        self.flags.push(flag.to_string());
        self
    }

    pub fn backend(mut self, backend: Arc<FakeBackend>) -> Self {
        self.backend = Some(backend);
        self
    }

    /// Starts on a free port whose URL is also the public URL (for clients that follow the
    /// Agent Card's interface URL).
    pub fn start_with_public_url_of_listener(self) -> Controller {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        self.flag(&format!("-listen=127.0.0.1:{port}"))
            .flag(&format!("-a2a-public-url=http://127.0.0.1:{port}"))
            .start()
    }

    pub fn start(self) -> Controller {
        crate::secrets::capture_logs();
        let flags: Vec<&str> = self.flags.iter().map(String::as_str).collect();
        let backend = self.backend.unwrap_or_default();
        let running = a2a_worker_controller::start(&settings(&flags), backend.clone())
            .expect("controller starts");
        Controller {
            addr: running.addr(),
            running: Some(running),
            backend,
        }
    }
}

pub struct Controller {
    pub addr: SocketAddr,
    pub running: Option<a2a_worker_controller::Running>,
    pub backend: Arc<FakeBackend>,
}

impl Drop for Controller {
    fn drop(&mut self) {
        if let Some(r) = self.running.take() {
            let metrics = request(self.addr, "GET", "/metrics", &[], b"");
            r.shutdown();
            if !std::thread::panicking() {
                crate::secrets::assert_none_in(&metrics.text(), "/metrics");
                crate::secrets::assert_none_in(&crate::secrets::captured_log(), "the log");
            }
        }
    }
}

pub fn controller() -> Controller {
    Builder::default().start()
}

impl Controller {
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A JSON-RPC call with the right token; returns the whole response object.
    pub fn rpc(&self, method: &str, params: Value) -> Value {
        let body = json!({"jsonrpc": "2.0", "id": "r1", "method": method, "params": params});
        self.post_json(&body.to_string(), &[])
    }

    pub fn post_json(&self, body: &str, extra_headers: &[(&str, &str)]) -> Value {
        let auth = format!("Bearer {TOKEN}");
        let mut headers = vec![
            ("Authorization", auth.as_str()),
            ("Content-Type", "application/json"),
        ];
        headers.extend_from_slice(extra_headers);
        let r = request(self.addr, "POST", "/a2a", &headers, body.as_bytes());
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()
    }

    pub fn send(&self, params: Value) -> Value {
        let r = self.rpc("SendMessage", params);
        assert!(r.get("error").is_none(), "unexpected error {r}");
        r["result"]["task"].clone()
    }

    /// A JSON-RPC error object for a call expected to fail.
    pub fn rpc_error(&self, method: &str, params: Value) -> Value {
        let r = self.rpc(method, params);
        assert!(r.get("result").is_none(), "expected an error, got {r}");
        r["error"].clone()
    }
}

/// POSTs a SendMessage carrying one control request to `addr` with the controller token;
/// returns the response as it came. A worker token in it is remembered for the secrets scan.
pub fn send_control(addr: SocketAddr, data: Value) -> HttpResponse {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
        "params": {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"data": data}]}}});
    let auth = format!("Bearer {TOKEN}");
    let r = request(
        addr,
        "POST",
        "/a2a",
        &[("Authorization", &auth)],
        body.to_string().as_bytes(),
    );
    if r.status == 200 {
        let v = r.json();
        if let Some(t) = v["result"]["task"]["artifacts"][0]["parts"][0]["data"]["token"].as_str() {
            crate::secrets::remember(t);
        }
    }
    r
}

/// What takes control requests: the controller in this process and the binary
/// (`support::Proc`). One place for "send, then check how it failed".
pub trait Controls {
    /// SendMessage with one control data part; returns `result.task`.
    fn control(&self, data: Value) -> Value;

    /// Sends a control request that must fail (`TASK_STATE_FAILED`) with `code`; returns the
    /// error object for further checks.
    fn expect_failure(&self, data: Value, code: &str) -> Value {
        let task = self.control(data);
        let e = control_error(&task, "TASK_STATE_FAILED");
        assert_eq!(e["code"], code, "{task}");
        e
    }

    /// As [`Controls::expect_failure`], and the error's message says each of `says`.
    fn expect_failure_saying(&self, data: Value, code: &str, says: &[&str]) -> Value {
        let e = self.expect_failure(data, code);
        let message = e["message"].as_str().unwrap_or("");
        for s in says {
            assert!(message.contains(s), "{s:?} not in {e}");
        }
        e
    }
}

impl Controls for Controller {
    fn control(&self, data: Value) -> Value {
        self.send(json!({"message": message(vec![json!({"data": data})])}))
    }
}

pub fn message(parts: Vec<Value>) -> Value {
    json!({"messageId": "m-1", "role": "ROLE_USER", "parts": parts})
}

/// The reply data of a completed control task.
pub fn reply_data(task: &Value) -> Value {
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{task}");
    task["artifacts"][0]["parts"][0]["data"].clone()
}

/// The `{"error": ...}` of a rejected or failed control task, checking its state.
pub fn control_error(task: &Value, state: &str) -> Value {
    assert_eq!(task["status"]["state"], state, "{task}");
    let parts = &task["status"]["message"]["parts"];
    assert_eq!(task["status"]["message"]["role"], "ROLE_AGENT");
    assert!(parts[0]["text"].is_string(), "{task}");
    parts[1]["data"]["error"].clone()
}

/// Racing creates for one task: exactly one completed, every other one failed
/// `worker_exists` naming the winner. Returns the winner's worker id.
pub fn one_winner(results: &[Value]) -> Value {
    let winners: Vec<&Value> = results
        .iter()
        .filter(|t| t["status"]["state"] == "TASK_STATE_COMPLETED")
        .collect();
    assert_eq!(winners.len(), 1, "{results:?}");
    let winner = reply_data(winners[0])["worker"]["worker_id"].clone();
    for t in results
        .iter()
        .filter(|t| t["status"]["state"] != "TASK_STATE_COMPLETED")
    {
        let e = control_error(t, "TASK_STATE_FAILED");
        assert_eq!(e["code"], "worker_exists", "{t}");
        assert_eq!(e["worker_id"], winner);
    }
    winner
}

pub fn error_reason(error: &Value) -> &str {
    error["data"][0]["reason"].as_str().unwrap_or("")
}

#[derive(Debug)]
pub struct HttpResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl HttpResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }
}

/// One request on a fresh connection (`Connection: close`), read to the end.
pub fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> HttpResponse {
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    if !body.is_empty() || method == "POST" {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    head.push_str("\r\n");
    let mut raw = head.into_bytes();
    raw.extend_from_slice(body);
    raw_exchange(addr, &raw)
}

/// One JSON-RPC call on a fresh connection.
pub fn call(addr: SocketAddr, token: &str, method: &str, params: Value) -> HttpResponse {
    call_with(addr, token, method, params, &[])
}

pub fn call_with(
    addr: SocketAddr,
    token: &str,
    method: &str,
    params: Value,
    extra: &[(&str, &str)],
) -> HttpResponse {
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params});
    let auth = format!("Bearer {token}");
    let mut headers = vec![
        ("Authorization", auth.as_str()),
        ("Content-Type", "application/json"),
    ];
    headers.extend_from_slice(extra);
    request(addr, "POST", "/a2a", &headers, body.to_string().as_bytes())
}

/// Sends bytes as they are and parses the response.
pub fn raw_exchange(addr: SocketAddr, bytes: &[u8]) -> HttpResponse {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    // The server may answer (e.g. 413) and close before it read everything we send.
    let _ = stream.write_all(bytes);
    let mut out = Vec::new();
    let _ = stream.read_to_end(&mut out);
    parse_response(&out)
}

pub fn parse_response(raw: &[u8]) -> HttpResponse {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no response head in {:?}", String::from_utf8_lossy(raw)));
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .expect("status line");
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let mut body = raw[split + 4..].to_vec();
    let chunked = headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    if chunked {
        body = dechunk(&body);
    }
    HttpResponse {
        status,
        headers,
        body,
    }
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let Some(eol) = b.windows(2).position(|w| w == b"\r\n") else {
            return out;
        };
        let size = usize::from_str_radix(
            String::from_utf8_lossy(&b[..eol])
                .split(';')
                .next()
                .unwrap()
                .trim(),
            16,
        )
        .unwrap_or(0);
        if size == 0 || b.len() < eol + 2 + size {
            return out;
        }
        out.extend_from_slice(&b[eol + 2..eol + 2 + size]);
        b = &b[(eol + 4 + size).min(b.len())..];
    }
}
