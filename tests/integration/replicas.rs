//! Two replicas behind one Service: every call on a task answers alike whichever
//! replica it reaches. Two real controllers on real sockets, at 127.0.0.2 and 127.0.0.3 on one
//! port (as two pods on their pod IPs), sharing one backend test double, each with a discovery that
//! lists them both as the replicas; each request on a fresh connection, alternating replicas. Linux only: other
//! systems have no 127.0.0.2 without configuration.
#![cfg(target_os = "linux")]

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use a2a_worker_controller::backend::Backend;
use a2a_worker_controller::replicas::Discovery;
use serde_json::{json, Value};

use crate::callers::{callers_file, ALICE, BOB};
use crate::push::Receiver;
use crate::support::{
    call, call_with, message, reply_data, request, settings, FakeBackend, HttpResponse, PATIENCE,
};

/// One replica's discovery: itself, and the replicas listed (shared by both).
struct Replica {
    own: IpAddr,
    listed: Arc<Mutex<Vec<IpAddr>>>,
}

impl Discovery for Replica {
    fn own(&self) -> IpAddr {
        self.own
    }
    fn replicas(&self) -> Result<Vec<IpAddr>, String> {
        Ok(self.listed.lock().unwrap().clone())
    }
}

struct Pair {
    a: SocketAddr,
    b: SocketAddr,
    backend: Arc<FakeBackend>,
    listed: Arc<Mutex<Vec<IpAddr>>>,
    running: Vec<a2a_worker_controller::Running>,
}

impl Drop for Pair {
    fn drop(&mut self) {
        for r in self.running.drain(..) {
            r.shutdown();
        }
    }
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

impl Pair {
    fn start(name: &str) -> Pair {
        let backend = Arc::new(FakeBackend::default());
        let listed = Arc::new(Mutex::new(vec![ip("127.0.0.2"), ip("127.0.0.3")]));
        let file = callers_file(name);
        // One port free on both addresses (pods of one Deployment listen alike).
        let (port, running) = (0..20)
            .find_map(|_| {
                let port = std::net::TcpListener::bind("127.0.0.2:0")
                    .and_then(|l| l.local_addr())
                    .ok()?
                    .port();
                let mut running = Vec::new();
                for own in ["127.0.0.2", "127.0.0.3"] {
                    let listen = format!("-listen={own}:{port}");
                    let callers = format!("-a2a-callers-file={}", file.display());
                    let s = settings(&[
                        &listen,
                        &callers,
                        "-push-allow-http=true",
                        "-push-allow=127.0.0.1/32",
                    ]);
                    let replica = Arc::new(Replica {
                        own: ip(own),
                        listed: Arc::clone(&listed),
                    });
                    let shared = Arc::clone(&backend) as Arc<dyn Backend>;
                    running.push(a2a_worker_controller::start_replica(&s, shared, replica).ok()?);
                }
                Some((port, running))
            })
            .expect("one port free on 127.0.0.2 and 127.0.0.3");
        Pair {
            a: SocketAddr::new(ip("127.0.0.2"), port),
            b: SocketAddr::new(ip("127.0.0.3"), port),
            backend,
            listed,
            running,
        }
    }
}

/// A control request sent as a message on a fresh connection (in the background if
/// `immediately`); its task.
fn send(addr: SocketAddr, token: &str, data: Value, immediately: bool) -> Value {
    let mut params = json!({"message": message(vec![json!({"data": data})])});
    if immediately {
        params["configuration"] = json!({"returnImmediately": true});
    }
    result(&call(addr, token, "SendMessage", params))["task"].clone()
}

fn result(r: &HttpResponse) -> Value {
    let v = r.json();
    assert!(v.get("error").is_none(), "{v}");
    v["result"].clone()
}

/// How many JSON-RPC calls the replica at `addr` has answered 200 (its metric).
fn a2a_answers(addr: SocketAddr) -> u64 {
    request(addr, "GET", "/metrics", &[], b"")
        .text()
        .lines()
        .find_map(|l| {
            l.strip_prefix("a2a_controller_http_requests_total{route=\"a2a\",status=\"200\"} ")
        })
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

fn error(r: &HttpResponse) -> Value {
    let v = r.json();
    v.get("error").cloned().unwrap_or_else(|| panic!("{v}"))
}

#[test]
fn any_replica_answers_for_a_task_and_hands_its_token_out_once() {
    let p = Pair::start("replicas-get");
    *p.backend.create_delay.lock().unwrap() = Duration::from_millis(1500);
    let task = send(
        p.a,
        ALICE,
        json!({"operation": "create", "task": "r1"}),
        true,
    );
    let id = task["id"].as_str().unwrap().to_string();
    assert!(id.ends_with(".127-0-0-2"), "the id names its replica: {id}");

    // 20 GetTask calls, alternating replicas, each on a new connection, across the task's end.
    let mut tokens = Vec::new();
    let mut completed = 0;
    for i in 0..20 {
        let via = if i % 2 == 0 { p.b } else { p.a };
        let r = call(via, ALICE, "GetTask", json!({"id": id}));
        let t = result(&r);
        assert_eq!(t["id"], id.as_str(), "call {i}");
        if via == p.b {
            assert_eq!(r.header("A2A-Answered-By"), Some("127.0.0.2"), "relayed");
        } else {
            assert_eq!(
                r.header("A2A-Answered-By"),
                None,
                "answered where it is held"
            );
        }
        if t["status"]["state"] == "TASK_STATE_COMPLETED" {
            completed += 1;
            if let Some(token) = reply_data(&t).get("token") {
                tokens.push(token.clone());
            }
        }
        std::thread::sleep(Duration::from_millis(150));
    }
    assert!(completed >= 5, "the task finished during the calls");
    assert_eq!(tokens.len(), 1, "the token exactly once: {tokens:?}");

    // The HTTP+JSON binding through the other replica, and its scope on the holder: bob's
    // GetTask is TaskNotFound wherever it arrives.
    let auth = format!("Bearer {ALICE}");
    let rest = request(
        p.b,
        "GET",
        &format!("/a2a/rest/tasks/{id}"),
        &[("Authorization", &auth)],
        b"",
    );
    assert_eq!(rest.status, 200, "{}", rest.text());
    assert_eq!(rest.json()["id"], id.as_str());
    for via in [p.a, p.b] {
        let e = error(&call(via, BOB, "GetTask", json!({"id": id})));
        assert_eq!(e["code"], -32001, "{e}");
    }
    // A relayed call is answered where it arrives: no second hop.
    let e = error(&call_with(
        p.b,
        ALICE,
        "GetTask",
        json!({"id": id}),
        &[("A2A-Relayed-By", "127.0.0.9")],
    ));
    assert_eq!(e["code"], -32001, "{e}");
    // A message that continues the task is answered by its holder too (control tasks take no
    // further message), not as an unknown task.
    let follow = call(
        p.b,
        ALICE,
        "SendMessage",
        json!({"message": {"role": "ROLE_USER", "messageId": "f1", "taskId": id,
                            "parts": [{"data": {"operation": "list"}}]}}),
    );
    assert_eq!(follow.header("A2A-Answered-By"), Some("127.0.0.2"));
    let e = error(&follow);
    assert_ne!(e["code"], -32001, "{e}");
    assert!(e["message"].as_str().unwrap().contains("terminal"), "{e}");
    // A wrong token is refused by the first replica, before any relay.
    let r = call(p.b, "not-a-token", "GetTask", json!({"id": id}));
    assert_eq!(r.status, 401);
}

#[test]
fn a_watch_on_one_replica_is_subscribed_to_and_canceled_through_the_other() {
    let p = Pair::start("replicas-watch");
    let task = send(p.a, ALICE, json!({"operation": "watch"}), true);
    let id = task["id"].as_str().unwrap().to_string();
    assert_eq!(task["status"]["state"], "TASK_STATE_WORKING");
    let (b, sid) = (p.b, id.clone());
    let answered_at_a = a2a_answers(p.a);
    let subscribed =
        std::thread::spawn(move || call(b, ALICE, "SubscribeToTask", json!({"id": sid})));
    // Subscribed: the relayed call has reached the replica holding the watch (its JSON-RPC
    // answers are counted once a subscription's stream is set up).
    crate::support::wait_until("the subscription relayed to a", PATIENCE, || {
        a2a_answers(p.a) > answered_at_a
    });
    let canceled = result(&call(p.b, ALICE, "CancelTask", json!({"id": id})));
    assert_eq!(canceled["status"]["state"], "TASK_STATE_CANCELED");
    let stream = subscribed.join().unwrap();
    assert_eq!(stream.status, 200);
    assert_eq!(stream.header("A2A-Answered-By"), Some("127.0.0.2"));
    assert!(
        stream
            .header("Content-Type")
            .unwrap()
            .starts_with("text/event-stream"),
        "{:?}",
        stream.header("Content-Type")
    );
    let text = stream.text();
    assert!(text.starts_with("data: "), "{text}");
    assert!(text.contains("TASK_STATE_CANCELED"), "{text}");
}

#[test]
fn a_push_config_made_through_one_replica_is_delivered_for_a_task_on_the_other() {
    let p = Pair::start("replicas-push");
    let hook = Receiver::start(Vec::new());
    *p.backend.create_delay.lock().unwrap() = Duration::from_millis(1500);
    let task = send(
        p.a,
        ALICE,
        json!({"operation": "create", "task": "r2"}),
        true,
    );
    let id = task["id"].as_str().unwrap().to_string();
    let made = result(&call(
        p.b,
        ALICE,
        "CreateTaskPushNotificationConfig",
        json!({"taskId": id, "url": hook.url(), "token": "hook-secret"}),
    ));
    assert_eq!(made["taskId"], id.as_str(), "{made}");
    let listed = result(&call(
        p.b,
        ALICE,
        "ListTaskPushNotificationConfigs",
        json!({"taskId": id}),
    ));
    assert_eq!(
        listed["configs"].as_array().map(Vec::len),
        Some(1),
        "{listed}"
    );
    let heard = hook.wait_for("the task's end", |h| {
        h.iter().any(|x| x.body.contains("TASK_STATE_COMPLETED"))
    });
    assert!(
        heard.iter().all(|h| !h.body.contains("\"token\"")),
        "no worker token pushed"
    );
}

#[test]
fn a_task_of_a_replica_that_is_gone_says_so() {
    let p = Pair::start("replicas-gone");
    let gone = "0b7f6a8e-5b1d-4c43-9d0e-3f2a1b0c9d8e.127-0-0-9";
    for via in [p.a, p.b] {
        let e = error(&call(via, ALICE, "GetTask", json!({"id": gone})));
        assert_eq!(e["code"], -32001, "{e}");
        let msg = e["message"].as_str().unwrap();
        assert!(
            msg.contains("127.0.0.9") && msg.contains("is gone"),
            "{msg}"
        );
        let auth = format!("Bearer {ALICE}");
        let rest = request(
            via,
            "POST",
            &format!("/a2a/rest/tasks/{gone}:cancel"),
            &[("Authorization", &auth)],
            b"",
        );
        assert_eq!(rest.status, 404, "{}", rest.text());
        assert!(rest.text().contains("is gone"), "{}", rest.text());
    }
    // Listed, but nobody answers there: said so, at once.
    p.listed.lock().unwrap().push(ip("127.0.0.4"));
    // A list just read is trusted for a moment (an id naming any IP costs no API call).
    std::thread::sleep(a2a_worker_controller::replicas::REREAD + Duration::from_millis(50));
    let started = Instant::now();
    let e = error(&call(p.a, ALICE, "GetTask", json!({"id": "x.127-0-0-4"})));
    assert_eq!(e["code"], -32001, "{e}");
    assert!(
        e["message"].as_str().unwrap().contains("does not answer"),
        "{e}"
    );
    // Connection refused comes back at once; the bound only tells it from the 3 s timeout.
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
}

/// The ids of a ListTasks page and its next page token.
fn page(addr: SocketAddr, token: &str, params: Value) -> (Vec<String>, String, Value) {
    let r = result(&call(addr, token, "ListTasks", params));
    let ids = r["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap().to_string())
        .collect();
    (ids, r["nextPageToken"].as_str().unwrap().to_string(), r)
}

#[test]
fn list_tasks_merges_every_replica_page_by_page() {
    let p = Pair::start("replicas-list");
    // Three tasks on a, two on b, one of bob's on b; each finished at once.
    let mut mine = Vec::new();
    for (i, via) in [p.a, p.b, p.a, p.b, p.a].into_iter().enumerate() {
        let t = send(
            via,
            ALICE,
            json!({"operation": "create", "task": format!("l{i}")}),
            false,
        );
        mine.push(t["id"].as_str().unwrap().to_string());
        std::thread::sleep(Duration::from_millis(5));
    }
    send(p.b, BOB, json!({"operation": "list"}), false);
    let newest_first: Vec<String> = mine.iter().rev().cloned().collect();
    for via in [p.a, p.b] {
        let (ids, next, r) = page(via, ALICE, json!({}));
        assert_eq!(ids, newest_first, "both replicas' tasks, newest first");
        assert_eq!(next, "");
        assert_eq!(r["totalSize"], 5);
    }
    let (ids, _, _) = page(p.a, BOB, json!({}));
    assert_eq!(ids.len(), 1, "bob sees his own only: {ids:?}");

    // Page by page (two a page), alternating replicas: each task exactly once, in order.
    let mut seen = Vec::new();
    let mut token = String::new();
    for i in 0..10 {
        let via = if i % 2 == 0 { p.b } else { p.a };
        let (ids, next, r) = page(via, ALICE, json!({"pageSize": 2, "pageToken": token}));
        assert!(ids.len() <= 2, "{r}");
        seen.extend(ids);
        token = next;
        if token.is_empty() {
            break;
        }
    }
    assert_eq!(seen, newest_first);
    let e = error(&call(
        p.a,
        ALICE,
        "ListTasks",
        json!({"pageToken": "r:10-0-0-1~x"}),
    ));
    assert_eq!(e["code"], -32602, "{e}");
}

#[test]
fn list_tasks_hands_each_token_out_once_over_the_replicas() {
    let p = Pair::start("replicas-list-tokens");
    *p.backend.create_delay.lock().unwrap() = Duration::from_millis(300);
    for (i, via) in [p.a, p.b, p.a, p.b].into_iter().enumerate() {
        send(
            via,
            ALICE,
            json!({"operation": "create", "task": format!("k{i}")}),
            true,
        );
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while page(p.a, ALICE, json!({"status": "TASK_STATE_COMPLETED"}))
        .0
        .len()
        < 4
    {
        assert!(Instant::now() < deadline, "the creates never finished");
        std::thread::sleep(Duration::from_millis(50));
    }
    // One at a time with artifacts: each page's task carries its token, and no token is spent
    // on a task a page left out.
    let mut tokens = Vec::new();
    let mut token = String::new();
    for i in 0..8 {
        let via = if i % 2 == 0 { p.a } else { p.b };
        let (_, next, r) = page(
            via,
            ALICE,
            json!({"pageSize": 1, "pageToken": token, "includeArtifacts": true}),
        );
        for t in r["tasks"].as_array().unwrap() {
            tokens.push(reply_data(t)["token"].as_str().map(str::to_string));
        }
        token = next;
        if token.is_empty() {
            break;
        }
    }
    assert_eq!(tokens.len(), 4, "{tokens:?}");
    assert!(tokens.iter().all(Option::is_some), "{tokens:?}");
    let (_, _, again) = page(p.b, ALICE, json!({"includeArtifacts": true}));
    for t in again["tasks"].as_array().unwrap() {
        assert!(
            reply_data(t).get("token").is_none(),
            "handed out twice: {t}"
        );
    }
}

#[test]
#[ignore = "a benchmark; scripts/bench.sh runs it"]
fn replicas_bench_relayed_against_direct() {
    let rounds = crate::support::rounds("BENCH_ROUNDS", 200);
    let p = Pair::start("replicas-bench");
    let task = send(p.a, ALICE, json!({"operation": "list"}), false);
    let id = task["id"].as_str().unwrap().to_string();
    let time = |via: SocketAddr, method: &str, params: Value| {
        let samples: Vec<Duration> = (0..rounds)
            .map(|_| {
                let t = Instant::now();
                result(&call(via, ALICE, method, params.clone()));
                t.elapsed()
            })
            .collect();
        crate::support::p50(samples)
    };
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let here = time(p.a, "GetTask", json!({"id": id}));
    let relayed = time(p.b, "GetTask", json!({"id": id}));
    println!(
        "ROW|two replicas, GetTask p50 ({rounds} rounds, a new connection each): through the other replica ÷ at the holder|×{:.2} ({:.2} vs {:.2} ms)|one more hop: ≤ ×3",
        ms(relayed) / ms(here),
        ms(relayed),
        ms(here)
    );
    // ListTasks: merged over both (two steps, each asking the other replica) ÷ one replica's
    // own list, which a relayed call gets.
    let merged = time(p.a, "ListTasks", json!({}));
    let alone = {
        let samples: Vec<Duration> = (0..rounds)
            .map(|_| {
                let t = Instant::now();
                result(&call_with(
                    p.a,
                    ALICE,
                    "ListTasks",
                    json!({}),
                    &[("A2A-Relayed-By", "127.0.0.3")],
                ));
                t.elapsed()
            })
            .collect();
        crate::support::p50(samples)
    };
    println!(
        "ROW|two replicas, ListTasks p50 ({rounds} rounds): merged over both ÷ one replica's own|×{:.2} ({:.2} vs {:.2} ms)|≤ ×5",
        ms(merged) / ms(alone),
        ms(merged),
        ms(alone)
    );
}
