//! The harness: a controller started in this process on an ephemeral port with a test double
//! of the backend trait, and a raw HTTP/1.1 client on a real socket.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use a2a_worker_controller::backend::tail::{Tail, MAX_LOG_BYTES};
use a2a_worker_controller::backend::{
    Backend, BackendError, BackendKind, CreateSpec, Logs, Metadata, Worker, WorkerState,
};
use a2a_worker_controller::settings::{self, Command, Settings};
use serde_json::{json, Value};

pub const TOKEN: &str = "test-token-0123456789abcdef";

/// A backend test double: workers in a map, creates optionally slowed down or made to fail.
/// It keeps the trait's contract (one worker per task, refused with `WorkerExists`;
/// `NotFound` for unknown ids) so the layers above can be tested against it.
#[derive(Default)]
pub struct FakeBackend {
    workers: Mutex<BTreeMap<String, Worker>>,
    pub down: AtomicBool,
    pub create_delay: Mutex<Duration>,
    pub next_create_error: Mutex<Option<BackendError>>,
    /// The next create panics (a bug in a backend), to test the panic policy.
    pub panic_next_create: AtomicBool,
    /// Every token handed to `create`, to check where tokens go.
    pub tokens: Mutex<Vec<String>>,
    /// How many times the workers were listed.
    pub lists: std::sync::atomic::AtomicU64,
    /// Whether it keeps warm pools: then members "started" are held here, always ready, and
    /// a claim of one is refused (the create is made cold), for the layers above the seam.
    pub pooling: AtomicBool,
    members: Mutex<Vec<a2a_worker_controller::backend::PoolMember>>,
    clock: Mutex<u64>,
}

impl FakeBackend {
    fn check_up(&self) -> Result<(), BackendError> {
        if self.down.load(Ordering::SeqCst) {
            Err(BackendError::Unavailable("test double is down".into()))
        } else {
            Ok(())
        }
    }

    pub fn count(&self) -> usize {
        self.workers.lock().unwrap().len()
    }

    /// What happens to a worker outside the controller: its state moves (`reason` says why).
    pub fn set_state(&self, worker_id: &str, state: WorkerState, reason: &str) {
        if let Some(w) = self.workers.lock().unwrap().get_mut(worker_id) {
            w.state = state;
            w.reason = reason.to_string();
        }
    }

    /// A worker another caller made, in `scope` (as a second supervisor would); its id.
    pub fn add_by_hand(&self, task: &str, scope: &str) -> String {
        let n = *self.clock.lock().unwrap() + 1;
        let worker = self.running_worker(&format!("byhand{n:04}"), task, scope, Metadata::new());
        let worker_id = worker.worker_id.clone();
        self.workers
            .lock()
            .unwrap()
            .insert(worker_id.clone(), worker);
        worker_id
    }

    /// A running worker as this double makes one, created at the next tick of its clock.
    fn running_worker(
        &self,
        worker_id: &str,
        task: &str,
        scope: &str,
        metadata: Metadata,
    ) -> Worker {
        let mut clock = self.clock.lock().unwrap();
        *clock += 1;
        Worker {
            worker_id: worker_id.to_string(),
            task: task.to_string(),
            a2a_url: format!("http://127.0.0.1:1/{worker_id}"),
            backend: BackendKind::Docker,
            state: WorkerState::Running,
            pane_id: String::new(),
            session_id: String::new(),
            created_at: format!("2026-11-29T00:00:{:02}Z", *clock % 60),
            reason: String::new(),
            expires_at: String::new(),
            metadata,
            scope: scope.to_string(),
            template: "default".to_string(),
        }
    }

    /// Someone else removes a worker (by hand, on the engine).
    pub fn remove_by_hand(&self, worker_id: &str) {
        self.workers.lock().unwrap().remove(worker_id);
    }
}

impl Backend for FakeBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Docker
    }

    fn create(&self, spec: &CreateSpec) -> Result<Worker, BackendError> {
        self.check_up()?;
        let delay = *self.create_delay.lock().unwrap();
        spec.progress.step("fake: starting");
        std::thread::sleep(delay);
        if self.panic_next_create.swap(false, Ordering::SeqCst) {
            panic!("a bug in the backend's create");
        }
        if let Some(e) = self.next_create_error.lock().unwrap().take() {
            return Err(e);
        }
        self.tokens
            .lock()
            .unwrap()
            .push(spec.token.expose().to_string());
        let mut workers = self.workers.lock().unwrap();
        if let Some(w) = workers
            .values()
            .find(|w| w.task == spec.task && w.scope == spec.scope)
        {
            return Err(BackendError::WorkerExists {
                worker_id: w.worker_id.clone(),
                state: w.state,
            });
        }
        let worker = self
            .running_worker(
                &spec.worker_id,
                &spec.task,
                &spec.scope,
                spec.metadata.clone(),
            )
            .expiring(spec.expires_at)
            .templated(spec.template.name.clone());
        workers.insert(worker.worker_id.clone(), worker.clone());
        spec.progress.step("fake: ready");
        Ok(worker)
    }

    fn list(&self) -> Result<Vec<Worker>, BackendError> {
        self.check_up()?;
        self.lists.fetch_add(1, Ordering::SeqCst);
        Ok(self.workers.lock().unwrap().values().cloned().collect())
    }

    fn stop(&self, worker_id: &str) -> Result<Worker, BackendError> {
        self.check_up()?;
        self.workers
            .lock()
            .unwrap()
            .remove(worker_id)
            .ok_or(BackendError::NotFound)
    }

    /// Three lines per worker: `<worker_id> line 1` .. `line 3`.
    fn logs(&self, worker_id: &str, lines: u32) -> Result<Logs, BackendError> {
        self.check_up()?;
        if !self.workers.lock().unwrap().contains_key(worker_id) {
            return Err(BackendError::NotFound);
        }
        let mut tail = Tail::new(MAX_LOG_BYTES);
        for i in 1..=3 {
            tail.push(format!("{worker_id} line {i}\n").as_bytes());
        }
        Ok(tail.finish(lines))
    }

    fn pools(&self) -> bool {
        self.pooling.load(Ordering::SeqCst)
    }

    fn pool_members(
        &self,
    ) -> Result<Vec<a2a_worker_controller::backend::PoolMember>, BackendError> {
        self.check_up()?;
        Ok(self.members.lock().unwrap().clone())
    }

    fn start_member(
        &self,
        m: &a2a_worker_controller::backend::MemberSpec,
    ) -> Result<(), BackendError> {
        self.check_up()?;
        let mut members = self.members.lock().unwrap();
        if members.iter().any(|x| x.name == m.name) {
            return Err(BackendError::WorkerExists {
                worker_id: String::new(),
                state: WorkerState::Starting,
            });
        }
        members.push(a2a_worker_controller::backend::PoolMember {
            name: m.name.clone(),
            id: m.name.clone(),
            address: String::new(),
            template: m.template.name.clone(),
            revision: m.revision.clone(),
            key_id: m.key_id.clone(),
            nonce: m.nonce.clone(),
            state: a2a_worker_controller::backend::MemberState::Ready,
            created_ms: 0,
        });
        Ok(())
    }

    fn remove_member(
        &self,
        m: &a2a_worker_controller::backend::PoolMember,
    ) -> Result<(), BackendError> {
        self.members.lock().unwrap().retain(|x| x.id != m.id);
        Ok(())
    }

    fn health(&self) -> Result<(), BackendError> {
        self.check_up()
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
/// (`docker_support::Proc`). One place for "send, then check how it failed".
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
