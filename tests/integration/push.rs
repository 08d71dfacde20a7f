//! Push notifications on real sockets: a webhook receiver in the test (loopback allowed by
//! `PUSH_ALLOW`) hears every event of a `returnImmediately` create in order, with the
//! configured `Authorization`, and never a worker's token (scanned mechanically); a receiver
//! that fails twice hears an event a third time; a dead one is given up within the bound; the
//! four config methods on both bindings; and SSRF: each refused range, IPv6 forms, a hostname
//! that resolves to loopback, a redirect — refused with no connection made where none may be
//! (a listener that must hear nothing).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::*;

const HOOK_SECRET: &str = "hook-credential-7f3e9a1c5b2d";

/// One request a receiver heard.
#[derive(Debug, Clone)]
pub struct Heard {
    pub head: String,
    pub body: String,
}

impl Heard {
    fn header(&self, name: &str) -> Option<String> {
        self.head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_string())
        })
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

/// A webhook receiver: answers the statuses given, in order (then 200), each with the
/// headers given, and remembers what it heard.
pub struct Receiver {
    addr: SocketAddr,
    heard: Arc<Mutex<Vec<Heard>>>,
    stop: Arc<AtomicBool>,
}

impl Receiver {
    pub fn start(answers: Vec<(u16, Vec<(&'static str, String)>)>) -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let heard = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (h, s) = (Arc::clone(&heard), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut answers = answers.into_iter();
            for stream in listener.incoming() {
                if s.load(Ordering::SeqCst) {
                    return;
                }
                let Ok(mut stream) = stream else { continue };
                let Some(got) = read_request(&mut stream) else {
                    continue;
                };
                h.lock().unwrap().push(got);
                let (status, headers) = answers.next().unwrap_or((200, Vec::new()));
                let mut reply =
                    format!("HTTP/1.1 {status} X\r\nContent-Length: 0\r\nConnection: close\r\n");
                for (k, v) in headers {
                    reply.push_str(&format!("{k}: {v}\r\n"));
                }
                reply.push_str("\r\n");
                let _ = stream.write_all(reply.as_bytes());
            }
        });
        Receiver { addr, heard, stop }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/hook", self.addr.port())
    }

    pub fn heard(&self) -> Vec<Heard> {
        self.heard.lock().unwrap().clone()
    }

    /// Waits until `done` holds for what was heard.
    pub fn wait_for(&self, what: &str, done: impl Fn(&[Heard]) -> bool) -> Vec<Heard> {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let heard = self.heard();
            if done(&heard) {
                return heard;
            }
            assert!(Instant::now() < deadline, "{what}: heard {heard:#?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr);
    }
}

fn read_request(stream: &mut TcpStream) -> Option<Heard> {
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        let n = stream.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let length: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .unwrap_or(0);
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < length {
        let n = stream.read(&mut chunk).ok()?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    Some(Heard {
        head,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

/// A controller whose webhooks may be plain http on loopback (as a test's receiver is).
fn loopback_controller(delay_ms: u64) -> Controller {
    let backend = Arc::new(FakeBackend::default());
    *backend.create_delay.lock().unwrap() = Duration::from_millis(delay_ms);
    Builder::default()
        .backend(backend)
        .flag("-push-allow-http=true")
        .flag("-push-allow=127.0.0.1/32")
        .start()
}

fn webhook(url: &str) -> Value {
    json!({
        "url": url,
        "token": "client-check-token",
        "authentication": {"scheme": "Bearer", "credentials": HOOK_SECRET},
    })
}

fn send_with(c: &Controller, data: Value, configuration: Value) -> Value {
    let r = c.rpc(
        "SendMessage",
        json!({"message": message(vec![json!({"data": data})]), "configuration": configuration}),
    );
    assert!(r.get("error").is_none(), "{r}");
    r["result"]["task"].clone()
}

fn kind(event: &Value) -> &str {
    event.as_object().unwrap().keys().next().unwrap()
}

fn push_metric(c: &Controller, outcome: &str) -> u64 {
    let text = request(c.addr, "GET", "/metrics", &[], b"").text();
    let prefix = format!("a2a_controller_push_notifications_total{{outcome=\"{outcome}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix)?.parse().ok())
        .unwrap_or(0)
}

fn wait_metric(c: &Controller, outcome: &str, at_least: u64, within: Duration) {
    let deadline = Instant::now() + within;
    while push_metric(c, outcome) < at_least {
        assert!(
            Instant::now() < deadline,
            "{outcome} never reached {at_least}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_return_immediately_create_pushes_every_event_in_order_and_no_token() {
    crate::secrets::remember(HOOK_SECRET);
    let c = loopback_controller(300);
    let hook = Receiver::start(Vec::new());
    let task = send_with(
        &c,
        json!({"operation": "create", "task": "pushed"}),
        json!({"returnImmediately": true, "taskPushNotificationConfig": webhook(&hook.url())}),
    );
    assert_eq!(task["status"]["state"], "TASK_STATE_WORKING");
    let id = task["id"].as_str().unwrap().to_string();
    let heard = hook.wait_for("the final status", |h| {
        h.last()
            .is_some_and(|e| e.json()["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED")
    });
    let events: Vec<Value> = heard.iter().map(Heard::json).collect();
    let kinds: Vec<&str> = events.iter().map(kind).collect();
    assert_eq!(
        kinds,
        [
            "task",
            "statusUpdate",
            "statusUpdate",
            "artifactUpdate",
            "statusUpdate"
        ],
        "the events a stream carries, in order"
    );
    assert_eq!(events[0]["task"]["id"], id);
    let steps: Vec<&str> = events[1..3]
        .iter()
        .map(|e| {
            e["statusUpdate"]["status"]["message"]["parts"][0]["text"]
                .as_str()
                .unwrap()
        })
        .collect();
    assert_eq!(steps, ["fake: starting", "fake: ready"]);
    for h in &heard {
        assert!(h.head.starts_with("POST /hook HTTP/1.1"), "{}", h.head);
        assert_eq!(
            h.header("Authorization"),
            Some(format!("Bearer {HOOK_SECRET}"))
        );
        assert_eq!(
            h.header("X-A2A-Notification-Token").as_deref(),
            Some("client-check-token")
        );
        assert_eq!(
            h.header("Content-Type").as_deref(),
            Some("application/json")
        );
    }
    // No worker token anywhere in what the webhook received: the artifact has none.
    let data = &events[3]["artifactUpdate"]["artifact"]["parts"][0]["data"];
    assert!(data.get("token").is_none(), "{data}");
    let tokens = c.backend.tokens.lock().unwrap().clone();
    assert!(!tokens.is_empty());
    for token in &tokens {
        crate::secrets::remember(token);
        for h in &heard {
            assert!(!h.head.contains(token.as_str()) && !h.body.contains(token.as_str()));
        }
    }
    // The caller still gets the token, from the first GetTask.
    let got = c.rpc("GetTask", json!({"id": id}))["result"].clone();
    assert_eq!(
        reply_data(&got)["token"].as_str(),
        tokens.first().map(String::as_str)
    );
    // Delivered, the config goes with its task.
    wait_metric(&c, "delivered", 5, Duration::from_secs(5));
    let listed = c.rpc("ListTaskPushNotificationConfigs", json!({"taskId": id}));
    assert_eq!(listed["result"]["configs"], json!([]), "{listed}");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(hook.heard().len(), 5, "each event once");
}

#[test]
fn a_failing_receiver_hears_it_again_and_a_dead_one_is_given_up() {
    let c = loopback_controller(0);
    let flaky = Receiver::start(vec![(500, Vec::new()), (503, Vec::new())]);
    // A blocking SendMessage: its one event is the finished task.
    let started = Instant::now();
    send_with(
        &c,
        json!({"operation": "list"}),
        json!({"taskPushNotificationConfig": webhook(&flaky.url())}),
    );
    let heard = flaky.wait_for("the third attempt", |h| h.len() >= 3);
    assert_eq!(heard.len(), 3);
    assert!(
        heard.iter().all(|h| h.body == heard[0].body),
        "the same event each time"
    );
    assert_eq!(
        heard[0].json()["task"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
    assert!(
        started.elapsed() >= Duration::from_millis(1400),
        "backed off 0.5 s then 1 s"
    );
    wait_metric(&c, "delivered", 1, Duration::from_secs(2));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        flaky.heard().len(),
        3,
        "delivered once it succeeded, not again"
    );

    // Nobody listens there: given up after four attempts, within the bound.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let started = Instant::now();
    send_with(
        &c,
        json!({"operation": "list"}),
        json!({"taskPushNotificationConfig": {"url": format!("http://127.0.0.1:{port}/gone")}}),
    );
    // Retries after 0.5, 1 and 2 s, then given up: well within 30 s, also on a busy machine.
    wait_metric(&c, "given_up", 1, Duration::from_secs(40));
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    assert!(crate::secrets::captured_log().contains("given up after 4 attempts"));
    // The request threads were never held up by any of it.
    let t = Instant::now();
    send_with(&c, json!({"operation": "list"}), json!({}));
    assert!(t.elapsed() < Duration::from_secs(5));
}

#[test]
fn the_four_config_methods_on_both_bindings() {
    let c = loopback_controller(4000);
    let hook = Receiver::start(Vec::new());
    let running = send_with(
        &c,
        json!({"operation": "create", "task": "configs"}),
        json!({"returnImmediately": true}),
    );
    let id = running["id"].as_str().unwrap();

    // JSON-RPC: create (an id is assigned), get, list, delete twice, get again.
    let created = c.rpc(
        "CreateTaskPushNotificationConfig",
        json!({"taskId": id, "url": hook.url(), "authentication": {"scheme": "Bearer", "credentials": HOOK_SECRET}}),
    )["result"]
        .clone();
    let cid = created["id"].as_str().unwrap().to_string();
    assert!(!cid.is_empty());
    assert_eq!(created["taskId"], id);
    assert_eq!(created["url"], hook.url());
    let got = c.rpc(
        "GetTaskPushNotificationConfig",
        json!({"taskId": id, "id": cid}),
    )["result"]
        .clone();
    assert_eq!(got, created);
    let listed = c.rpc("ListTaskPushNotificationConfigs", json!({"taskId": id}))["result"].clone();
    assert_eq!(listed["configs"], json!([created]));
    for _ in 0..2 {
        let deleted = c.rpc(
            "DeleteTaskPushNotificationConfig",
            json!({"taskId": id, "id": cid}),
        );
        assert_eq!(deleted["result"], json!({}), "idempotent: {deleted}");
    }
    let e = c.rpc_error(
        "GetTaskPushNotificationConfig",
        json!({"taskId": id, "id": cid}),
    );
    assert_eq!(e["code"], -32001);

    // HTTP+JSON: the same four, with the ids in the path.
    let auth = format!("Bearer {TOKEN}");
    let a = [
        ("Authorization", auth.as_str()),
        ("Content-Type", "application/json"),
    ];
    let base = format!("/a2a/rest/tasks/{id}/pushNotificationConfigs");
    let body = json!({"id": "mine", "url": hook.url()}).to_string();
    let r = request(c.addr, "POST", &base, &a, body.as_bytes());
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["id"], "mine");
    let r = request(c.addr, "GET", &format!("{base}/mine"), &a[..1], b"");
    assert_eq!(r.json()["url"], hook.url());
    let r = request(c.addr, "GET", &base, &a[..1], b"");
    assert_eq!(r.json()["configs"][0]["id"], "mine");
    for _ in 0..2 {
        let r = request(c.addr, "DELETE", &format!("{base}/mine"), &a[..1], b"");
        assert_eq!((r.status, r.json()), (200, json!({})));
    }
    let r = request(c.addr, "GET", &format!("{base}/mine"), &a[..1], b"");
    assert_eq!(r.status, 404);

    // Refusals: an unknown task, a finished one, too many configs, a bad scheme, no url.
    let e = c.rpc_error(
        "CreateTaskPushNotificationConfig",
        json!({"taskId": "nope", "url": hook.url()}),
    );
    assert_eq!(e["code"], -32001);
    let r = request(
        c.addr,
        "GET",
        "/a2a/rest/tasks/nope/pushNotificationConfigs",
        &a[..1],
        b"",
    );
    assert_eq!(r.status, 404);
    let done = send_with(&c, json!({"operation": "list"}), json!({}));
    let e = c.rpc_error(
        "CreateTaskPushNotificationConfig",
        json!({"taskId": done["id"], "url": hook.url()}),
    );
    assert_eq!(e["code"], -32004, "{e}");
    for n in 0..8 {
        let r = c.rpc(
            "CreateTaskPushNotificationConfig",
            json!({"taskId": id, "id": format!("c{n}"), "url": hook.url()}),
        );
        assert!(r.get("result").is_some(), "{r}");
    }
    let e = c.rpc_error(
        "CreateTaskPushNotificationConfig",
        json!({"taskId": id, "url": hook.url()}),
    );
    assert!(e["message"].as_str().unwrap().contains("at most 8"), "{e}");
    let e = c.rpc_error(
        "CreateTaskPushNotificationConfig",
        json!({"taskId": id, "id": "c0", "url": hook.url(), "authentication": {"scheme": "Bearer x\r\nInjected: 1"}}),
    );
    assert_eq!(e["code"], -32602);
    let e = c.rpc_error(
        "CreateTaskPushNotificationConfig",
        json!({"taskId": id, "id": "c0", "url": hook.url(), "authentication": {"scheme": "Bearer", "credentials": "a\r\nInjected: 1"}}),
    );
    assert_eq!(e["code"], -32602);
    let e = c.rpc_error("CreateTaskPushNotificationConfig", json!({"taskId": id}));
    assert_eq!(e["code"], -32602);
    // The card says so.
    let card = request(c.addr, "GET", "/.well-known/agent-card.json", &[], b"").json();
    assert_eq!(card["capabilities"]["pushNotifications"], true);
}

/// A name other than `localhost` that this machine resolves to loopback only (Debian maps its
/// host name to 127.0.1.1; containers often to 127.0.0.1).
fn loopback_name() -> String {
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let candidates = [
        hostname.trim(),
        "localhost.localdomain",
        "ip6-localhost",
        "ip6-loopback",
    ];
    for name in candidates.into_iter().filter(|n| !n.is_empty()) {
        let Ok(addrs) = (name, 80).to_socket_addrs() else {
            continue;
        };
        let addrs: Vec<SocketAddr> = addrs.collect();
        if !addrs.is_empty() && addrs.iter().all(|a| a.ip().is_loopback()) {
            return name.to_string();
        }
    }
    panic!("no name but localhost resolves to loopback here (tried {candidates:?})");
}

#[test]
fn ssrf_every_refused_address_and_no_connection_made() {
    // The default: https only, nothing special allowed.
    let c = controller();
    for url in [
        "http://example.com/hook",
        "https://127.0.0.1/",
        "https://127.8.9.10:8443/",
        "https://10.1.2.3/",
        "https://172.16.0.1/",
        "https://192.168.0.10/",
        "https://100.64.0.1/",
        "https://169.254.169.254/latest/meta-data/",
        "https://0.0.0.0/",
        "https://224.0.0.1/",
        "https://255.255.255.255/",
        "https://[::1]/",
        "https://[::]/",
        "https://[::ffff:127.0.0.1]/",
        "https://[::ffff:a9fe:a9fe]/",
        "https://[64:ff9b::7f00:1]/",
        "https://[fd00::1]/",
        "https://[fe80::1]/",
        "https://[ff02::1]/",
        "https://localhost/",
        "https://user:pw@example.com/",
        "https://2130706433/",
        "ftp://example.com/",
    ] {
        let r = c.rpc(
            "SendMessage",
            json!({"message": message(vec![json!({"data": {"operation": "list"}})]),
                   "configuration": {"taskPushNotificationConfig": {"url": url}}}),
        );
        let e = &r["error"];
        assert_eq!(e["code"], -32602, "{url} must be refused at once: {r}");
        assert!(
            e["message"].as_str().unwrap().contains("refused"),
            "{url}: {e}"
        );
    }

    // With http allowed but no PUSH_ALLOW, a loopback literal with a listener behind it is
    // refused when the config is created: the listener hears nothing, also later.
    let c = Builder::default().flag("-push-allow-http=true").start();
    let listener = Receiver::start(Vec::new());
    let port = listener.addr.port();
    for url in [
        format!("http://127.0.0.1:{port}/hook"),
        format!("http://[::ffff:127.0.0.1]:{port}/hook"),
        format!("http://[::ffff:7f00:1]:{port}/hook"),
        format!("http://localhost:{port}/hook?key=secret-in-query"),
    ] {
        let r = c.rpc(
            "SendMessage",
            json!({"message": message(vec![json!({"data": {"operation": "list"}})]),
                   "configuration": {"taskPushNotificationConfig": {"url": url}}}),
        );
        assert_eq!(r["error"]["code"], -32602, "{url}: {r}");
    }
    std::thread::sleep(Duration::from_millis(300));
    assert!(listener.heard().is_empty());
    assert_eq!(
        push_metric(&c, "delivered") + push_metric(&c, "given_up"),
        0
    );
    assert!(!crate::secrets::captured_log().contains("secret-in-query"));

    // A name that resolves to loopback passes the form check and is refused at delivery,
    // where it is resolved: the listener behind it hears nothing.
    let c = Builder::default().flag("-push-allow-http=true").start();
    let listener = Receiver::start(Vec::new());
    let name = loopback_name();
    send_with(
        &c,
        json!({"operation": "list"}),
        json!({"taskPushNotificationConfig": {"url": format!("http://{name}:{}/hook", listener.addr.port())}}),
    );
    wait_metric(&c, "refused", 1, Duration::from_secs(5));
    assert!(crate::secrets::captured_log().contains("not sent to"));
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        listener.heard().is_empty(),
        "no connection to a loopback address"
    );

    // A redirect is never followed (its target hears nothing) and not retried.
    let c = loopback_controller(0);
    let target = Receiver::start(Vec::new());
    let redirecting = Receiver::start(vec![(302, vec![("Location", target.url())])]);
    send_with(
        &c,
        json!({"operation": "list"}),
        json!({"taskPushNotificationConfig": {"url": redirecting.url()}}),
    );
    wait_metric(&c, "given_up", 1, Duration::from_secs(5));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(redirecting.heard().len(), 1, "a redirect is not retried");
    assert!(
        target.heard().is_empty(),
        "the redirect's target heard nothing"
    );
    assert!(crate::secrets::captured_log().contains("never followed"));
}

/// A `returnImmediately` watch with a webhook is a lifecycle webhook: its snapshot and each
/// event reach the receiver as they happen, and the cancel's final status ends it.
#[test]
fn a_watch_with_a_webhook_delivers_worker_events_until_canceled() {
    let c = loopback_controller(0);
    let hook = Receiver::start(Vec::new());
    let task = send_with(
        &c,
        json!({"operation": "watch"}),
        json!({"returnImmediately": true, "taskPushNotificationConfig": {"url": hook.url()}}),
    );
    let id = task["id"].as_str().unwrap().to_string();
    let event_types = |h: &[Heard]| -> Vec<String> {
        h.iter()
            .filter_map(|x| {
                x.json()
                    .pointer("/statusUpdate/status/message/parts/1/data/event/type")
                    .and_then(Value::as_str)
                    .map(String::from)
            })
            .collect()
    };
    hook.wait_for("synced", |h| event_types(h) == ["synced"]);
    c.control(json!({"operation": "create", "task": "hooked"}));
    hook.wait_for("added", |h| event_types(h) == ["synced", "added"]);
    let r = c.rpc("CancelTask", json!({"id": id}));
    assert_eq!(r["result"]["status"]["state"], "TASK_STATE_CANCELED");
    let heard = hook.wait_for("the end", |h| {
        h.last()
            .is_some_and(|x| x.json()["statusUpdate"]["status"]["state"] == "TASK_STATE_CANCELED")
    });
    assert_eq!(heard[0].json()["task"]["id"], id.as_str(), "the task first");
    for token in c.backend.tokens.lock().unwrap().iter() {
        crate::secrets::remember(token);
        assert!(
            heard.iter().all(|h| !h.body.contains(token.as_str())),
            "no token"
        );
    }
}
