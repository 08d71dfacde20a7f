//! `SendStreamingMessage` and `SubscribeToTask` as server-sent events on a real socket (the
//! wire as A2A v1.0's JSON-RPC binding gives it: `text/event-stream`, each event `data:` one
//! JSON-RPC response whose result is a `StreamResponse`): the order of events, progress from
//! the backend, the token delivered once, errors as one event, a subscriber to a
//! returnImmediately create, a client that hangs up, and streams within the connection limit.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::*;

fn rpc_body(method: &str, params: Value) -> String {
    json!({"jsonrpc": "2.0", "id": "s-1", "method": method, "params": params}).to_string()
}

fn raw_request(addr: SocketAddr, body: &str) -> Vec<u8> {
    format!(
        "POST /a2a HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// The events of one streamed answer (read to its end), and the response.
pub fn stream(addr: SocketAddr, method: &str, params: Value) -> (HttpResponse, Vec<Value>) {
    let r = raw_exchange(addr, &raw_request(addr, &rpc_body(method, params)));
    let events = events_of(&r.text());
    (r, events)
}

fn events_of(text: &str) -> Vec<Value> {
    text.split("\n\n")
        .filter(|e| !e.trim().is_empty() && !e.starts_with(':'))
        .map(|e| {
            let data = e.strip_prefix("data: ").unwrap_or_else(|| panic!("{e:?}"));
            let v: Value = serde_json::from_str(data).unwrap();
            assert_eq!(v["jsonrpc"], "2.0");
            assert_eq!(v["id"], "s-1");
            v
        })
        .collect()
}

/// The texts of the WORKING steps in a task's stream, in order.
pub fn steps(events: &[Value]) -> Vec<&str> {
    events
        .iter()
        .filter_map(|e| {
            e["result"]["statusUpdate"]["status"]["message"]["parts"][0]["text"].as_str()
        })
        .collect()
}

/// The reply data a stream's artifact carried.
pub fn result_data(events: &[Value]) -> Value {
    events
        .iter()
        .find_map(|e| e["result"].get("artifactUpdate"))
        .map(|a| a["artifact"]["parts"][0]["data"].clone())
        .expect("the stream's result")
}

fn kind(event: &Value) -> &str {
    let r = &event["result"];
    ["task", "statusUpdate", "artifactUpdate"]
        .into_iter()
        .find(|k| r.get(*k).is_some())
        .unwrap_or("other")
}

pub fn control_message(data: Value) -> Value {
    json!({"message": message(vec![json!({"data": data})])})
}

#[test]
fn a_streamed_create_shows_its_progress_its_result_and_its_end() {
    let c = controller();
    let (r, events) = stream(
        c.addr,
        "SendStreamingMessage",
        control_message(json!({"operation": "create", "task": "streamed"})),
    );
    assert_eq!(r.status, 200);
    assert_eq!(r.header("Content-Type"), Some("text/event-stream"));
    let kinds: Vec<&str> = events.iter().map(kind).collect();
    assert_eq!(
        kinds,
        [
            "task",
            "statusUpdate",
            "statusUpdate",
            "artifactUpdate",
            "statusUpdate"
        ]
    );
    let task = &events[0]["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_WORKING");
    let steps: Vec<&Value> = events[1..3]
        .iter()
        .map(|e| &e["result"]["statusUpdate"]["status"]["message"]["parts"][0]["text"])
        .collect();
    assert_eq!(steps, [&json!("fake: starting"), &json!("fake: ready")]);
    for e in &events[1..] {
        let u = e["result"]
            .get("statusUpdate")
            .or_else(|| e["result"].get("artifactUpdate"))
            .unwrap();
        assert_eq!(u["taskId"], task["id"]);
        assert_eq!(u["contextId"], task["contextId"]);
    }
    let artifact = &events[3]["result"]["artifactUpdate"];
    assert_eq!(artifact["lastChunk"], true);
    let token = artifact["artifact"]["parts"][0]["data"]["token"]
        .as_str()
        .unwrap()
        .to_string();
    crate::secrets::remember(&token);
    assert_eq!(token.len(), 64);
    assert_eq!(
        events[4]["result"]["statusUpdate"]["status"]["state"],
        "TASK_STATE_COMPLETED"
    );
    // Delivered once: GetTask shows the result without it.
    let got = c.rpc("GetTask", json!({"id": task["id"]}))["result"].clone();
    assert_eq!(got["status"]["state"], "TASK_STATE_COMPLETED");
    assert!(got["artifacts"][0]["parts"][0]["data"]
        .get("token")
        .is_none());

    // list and a rejected request stream the same way, without progress.
    let (_, events) = stream(
        c.addr,
        "SendStreamingMessage",
        control_message(json!({"operation": "list"})),
    );
    let kinds: Vec<&str> = events.iter().map(kind).collect();
    assert_eq!(kinds, ["task", "artifactUpdate", "statusUpdate"]);
    let (_, events) = stream(
        c.addr,
        "SendStreamingMessage",
        control_message(json!({"operation": "explode"})),
    );
    let last = &events.last().unwrap()["result"]["statusUpdate"]["status"];
    assert_eq!(last["state"], "TASK_STATE_REJECTED");
    assert_eq!(
        last["message"]["parts"][1]["data"]["error"]["code"],
        "invalid_request"
    );
}

#[test]
fn errors_before_a_stream_are_one_event_and_finished_tasks_have_none() {
    let c = controller();
    let (r, events) = stream(c.addr, "SendStreamingMessage", json!({}));
    assert_eq!(r.header("Content-Type"), Some("text/event-stream"));
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["error"]["code"], -32602);
    let (_, events) = stream(c.addr, "SubscribeToTask", json!({"id": "no-such-task"}));
    assert_eq!(events[0]["error"]["code"], -32001);
    let done = c.control(json!({"operation": "list"}));
    let (_, events) = stream(c.addr, "SubscribeToTask", json!({"id": done["id"]}));
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["error"]["code"], -32004, "{}", events[0]);
    assert!(events[0]["error"]["message"]
        .as_str()
        .unwrap()
        .contains("TASK_STATE_COMPLETED"));
}

#[test]
fn a_subscriber_sees_a_return_immediately_create_finish() {
    let c = controller();
    *c.backend.create_delay.lock().unwrap() = Duration::from_millis(600);
    let started = c.send(json!({
        "message": message(vec![json!({"data": {"operation": "create", "task": "later"}})]),
        "configuration": {"returnImmediately": true},
    }));
    assert_eq!(started["status"]["state"], "TASK_STATE_WORKING");
    let (_, events) = stream(c.addr, "SubscribeToTask", json!({"id": started["id"]}));
    let kinds: Vec<&str> = events.iter().map(kind).collect();
    assert_eq!(kinds.first(), Some(&"task"), "{kinds:?}");
    assert_eq!(
        &kinds[kinds.len() - 2..],
        ["artifactUpdate", "statusUpdate"]
    );
    assert!(
        kinds.contains(&"statusUpdate") && kinds.len() >= 3,
        "it sees at least the end: {kinds:?}"
    );
    let token = events[kinds.len() - 2]["result"]["artifactUpdate"]["artifact"]["parts"][0]["data"]
        ["token"]
        .as_str()
        .unwrap()
        .to_string();
    crate::secrets::remember(&token);
    assert_eq!(
        token.len(),
        64,
        "the first subscriber to hear the result gets the token"
    );
    let got = c.rpc("GetTask", json!({"id": started["id"]}))["result"].clone();
    assert!(got["artifacts"][0]["parts"][0]["data"]
        .get("token")
        .is_none());
}

#[test]
fn a_client_that_hangs_up_leaves_the_create_to_finish() {
    let c = controller();
    *c.backend.create_delay.lock().unwrap() = Duration::from_millis(500);
    let mut s = TcpStream::connect(c.addr).unwrap();
    s.write_all(&raw_request(
        c.addr,
        &rpc_body(
            "SendStreamingMessage",
            control_message(json!({"operation": "create", "task": "abandoned"})),
        ),
    ))
    .unwrap();
    // Read the head and the first event, then hang up mid-stream.
    let mut first = [0u8; 512];
    let n = s.read(&mut first).unwrap();
    assert!(String::from_utf8_lossy(&first[..n]).contains("text/event-stream"));
    drop(s);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let workers = reply_data(&c.control(json!({"operation": "list"})))["workers"].clone();
        if workers.as_array().is_some_and(|w| w.len() == 1) {
            assert_eq!(workers[0]["task"], "abandoned");
            break;
        }
        assert!(Instant::now() < deadline, "the create did not finish");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn streams_count_as_connections() {
    // 64 streams at once, each a create that takes a moment: all finish.
    let c = Builder::default().flag("-max-connections=80").start();
    *c.backend.create_delay.lock().unwrap() = Duration::from_millis(800);
    let addr = c.addr;
    let streams: Vec<_> = (0..64)
        .map(|i| {
            std::thread::spawn(move || {
                let (r, events) = stream(
                    addr,
                    "SendStreamingMessage",
                    control_message(json!({"operation": "create", "task": format!("t{i}")})),
                );
                (r.status, events.last().cloned())
            })
        })
        .collect();
    wait_until("64 creates in flight", PATIENCE, || {
        c.backend.creates_started.load(Ordering::SeqCst) == 64
    });
    assert_eq!(
        request(addr, "GET", "/healthz", &[], b"").status,
        200,
        "the server still answers with 64 streams open"
    );
    for s in streams {
        let (status, last) = s.join().unwrap();
        assert_eq!(status, 200);
        let last = last.unwrap();
        assert_eq!(
            last["result"]["statusUpdate"]["status"]["state"], "TASK_STATE_COMPLETED",
            "{last}"
        );
    }
    for t in c.backend.tokens.lock().unwrap().iter() {
        crate::secrets::remember(t);
    }

    // Past the limit a stream is refused like any connection (503), and the limit is kept.
    let small = Builder::default().flag("-max-connections=4").start();
    *small.backend.create_delay.lock().unwrap() = Duration::from_millis(800);
    let addr = small.addr;
    let open: Vec<_> = (0..4)
        .map(|i| {
            std::thread::spawn(move || {
                stream(
                    addr,
                    "SendStreamingMessage",
                    control_message(json!({"operation": "create", "task": format!("s{i}")})),
                )
                .0
                .status
            })
        })
        .collect();
    wait_until("4 creates in flight", PATIENCE, || {
        small.backend.creates_started.load(Ordering::SeqCst) == 4
    });
    assert_eq!(request(addr, "GET", "/healthz", &[], b"").status, 503);
    for s in open {
        assert_eq!(s.join().unwrap(), 200);
    }
    for t in small.backend.tokens.lock().unwrap().iter() {
        crate::secrets::remember(t);
    }
}
