//! `watch` over the protocol with the backend test double: a snapshot and
//! `synced`, then `added`, `changed` and `removed` as they happen (with the reasons this
//! controller knows: a caller's stop, the reaper, a removal by someone else), filters, one
//! source for many watchers (counted in backend lists), CancelTask ending a watch
//! (`TASK_STATE_CANCELED`, listed so afterwards), a client hang-up ending it,
//! `returnImmediately` with SubscribeToTask, `MAX_WATCHERS`, and a blocking SendMessage refused.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use a2a_worker_controller::backend::WorkerState;
use serde_json::{json, Value};

use crate::support::*;

/// A watch stream held open: its events as they arrive (the backend suites use it too).
pub struct Watch {
    reader: BufReader<TcpStream>,
    pub stream: TcpStream,
    /// After this, [`Watch::next`] says the stream ended: a test waiting for an event that never
    /// comes fails saying so, instead of hanging on the stream's heartbeats.
    pub until: Instant,
}

/// How long a test's watch is read at most.
pub const WATCH_READ_FOR: Duration = Duration::from_secs(120);

impl Watch {
    pub fn start(addr: std::net::SocketAddr, request: Value) -> Watch {
        Watch::start_as(addr, TOKEN, request)
    }

    /// The same, sent with `token`.
    pub fn start_as(addr: std::net::SocketAddr, token: &str, request: Value) -> Watch {
        let body = json!({"jsonrpc": "2.0", "id": "w", "method": "SendStreamingMessage",
            "params": {"message": message(vec![json!({"data": request})])}})
        .to_string();
        let mut stream = TcpStream::connect(addr).unwrap();
        write!(
            stream,
            "POST /a2a HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let reader = BufReader::new(stream.try_clone().unwrap());
        Watch {
            reader,
            stream,
            until: Instant::now() + WATCH_READ_FOR,
        }
    }

    /// The answer's HTTP status (read from its status line, before any event).
    pub fn status(&mut self) -> u16 {
        let mut line = String::new();
        let _ = self.reader.read_line(&mut line);
        line.split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0)
    }

    /// Whether the stream is still open: what it has sent so far read (50 ms at a time), and
    /// neither its end (the last chunk) nor the connection's seen.
    pub fn still_open(&mut self) -> bool {
        use std::io::Read;
        self.stream
            .set_read_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            match self.reader.read(&mut buf) {
                Ok(0) => return false,
                Ok(n) => seen.extend_from_slice(&buf[..n]),
                Err(_) => return !seen.windows(7).any(|w| w == b"\r\n0\r\n\r\n"),
            }
        }
    }

    /// The next SSE event's JSON-RPC result (comments and the head skipped).
    pub fn next(&mut self) -> Option<Value> {
        let mut line = String::new();
        loop {
            line.clear();
            // Heartbeats come every 15 s, so this is looked at at least that often.
            if Instant::now() > self.until {
                return None;
            }
            if self.reader.read_line(&mut line).ok()? == 0 {
                return None;
            }
            if let Some(data) = line.trim_end().strip_prefix("data: ") {
                let v: Value = serde_json::from_str(data).unwrap();
                return Some(v["result"].clone());
            }
        }
    }

    /// The next worker event (status updates carrying `{"event"}`); `None` at the end.
    pub fn event(&mut self) -> Option<Value> {
        loop {
            let r = self.next()?;
            if let Some(e) = r.pointer("/statusUpdate/status/message/parts/1/data/event") {
                return Some(e.clone());
            }
            if r["statusUpdate"]["status"]["state"] != "TASK_STATE_WORKING"
                && r.get("task").is_none()
            {
                return Some(json!({"type": "end", "result": r}));
            }
        }
    }

    pub fn task_id(&mut self) -> String {
        let first = self.next().expect("the task first");
        assert_eq!(
            first["task"]["status"]["state"], "TASK_STATE_WORKING",
            "{first}"
        );
        first["task"]["id"].as_str().unwrap().to_string()
    }
}

/// A watch on the controller at `addr` after one worker, task `before`, was created through
/// `via`: the watch and its task id, its snapshot checked to be that worker alone (the backend
/// suites' common start).
pub fn watching_one_before(via: &impl Controls, addr: std::net::SocketAddr) -> (Watch, String) {
    reply_data(&via.control(json!({"operation": "create", "task": "before"})));
    let mut w = Watch::start(addr, json!({"operation": "watch"}));
    let task_id = w.task_id();
    let snapshot = w.snapshot();
    assert_eq!(snapshot.len(), 1);
    assert_eq!(
        kind_and_task(&snapshot[0]),
        ("added".into(), "before".into())
    );
    (w, task_id)
}

/// `CancelTask` for a watch's task, on the controller at `addr`; the JSON-RPC response.
pub fn cancel(addr: std::net::SocketAddr, task_id: &str) -> Value {
    crate::callers::rpc_as(addr, TOKEN, "CancelTask", json!({"id": task_id})).1
}

impl Watch {
    /// The snapshot's events, up to and without `synced`.
    pub fn snapshot(&mut self) -> Vec<Value> {
        let mut added = Vec::new();
        loop {
            let e = self.event().expect("the snapshot");
            if e["type"] == "synced" {
                return added;
            }
            assert_eq!(e["type"], "added", "{e}");
            added.push(e);
        }
    }

    /// The next event whose type is `kind` (the ones before it skipped).
    pub fn next_of(&mut self, kind: &str) -> Value {
        loop {
            let e = self
                .event()
                .unwrap_or_else(|| panic!("the stream ended before a {kind}"));
            if e["type"] == kind {
                return e;
            }
        }
    }
}

impl Watch {
    /// The removal of `task`'s worker, its reason saying `why`. Before it only that worker's own
    /// `changed` events may come: a removal on a real engine passes through a state of its own
    /// (Docker's and Podman's `removing`, a running container's stop), and a list may catch it.
    pub fn removal_of(&mut self, task: &str, why: &str) -> Value {
        loop {
            let e = self
                .event()
                .unwrap_or_else(|| panic!("the stream ended before {task} was removed"));
            if e["type"] == "removed" {
                assert_removed(&e, task, why);
                return e;
            }
            assert_eq!(kind_and_task(&e), ("changed".into(), task.into()), "{e}");
        }
    }
}

/// `e` is the removal of `task`'s worker, its reason saying `why`.
pub fn assert_removed(e: &Value, task: &str, why: &str) {
    assert_eq!(
        kind_and_task(e),
        ("removed".into(), task.to_string()),
        "{e}"
    );
    assert!(e["reason"].as_str().unwrap_or("").contains(why), "{e}");
}

pub fn kind_and_task(e: &Value) -> (String, String) {
    (
        e["type"].as_str().unwrap_or("").to_string(),
        e["worker"]["task"].as_str().unwrap_or("").to_string(),
    )
}

fn create(c: &Controller, task: &str) -> Value {
    reply_data(&c.control(json!({"operation": "create", "task": task, "metadata": {"team": task}})))
        ["worker"]
        .clone()
}

/// A create pokes the source, which lists at once instead of at its next once-a-second look.
/// One latency could not tell the two apart on a busy machine; ten can: heard at once, they
/// add up to a few hundred milliseconds here even with the machine loaded; heard at the next
/// look they would add up to about 5 s (each spread evenly over a second), and to under 3 s
/// about one time in seventy.
#[test]
fn creates_are_heard_at_once_not_at_the_next_look() {
    let c = controller();
    let mut w = Watch::start(c.addr, json!({"operation": "watch"}));
    assert_eq!(w.event().unwrap()["type"], "synced");
    let mut total = Duration::ZERO;
    for n in 0..10 {
        let task = format!("quick-{n}");
        let started = Instant::now();
        create(&c, &task);
        let e = w.event().unwrap();
        assert_eq!(kind_and_task(&e), ("added".into(), task));
        total += started.elapsed();
    }
    assert!(
        total < Duration::from_secs(3),
        "ten creates heard after {total:?} in all"
    );
}

#[test]
fn a_watch_hears_its_snapshot_then_what_happens() {
    let c = controller();
    let first = create(&c, "before");
    let mut w = Watch::start(c.addr, json!({"operation": "watch"}));
    let id = w.task_id();
    assert_eq!(
        kind_and_task(&w.event().unwrap()),
        ("added".into(), "before".into())
    );
    let synced = w.event().unwrap();
    assert_eq!(synced["type"], "synced");
    assert!(synced["worker"].is_null());

    let second = create(&c, "after");
    let e = w.event().unwrap();
    assert_eq!(kind_and_task(&e), ("added".into(), "after".into()));
    assert_eq!(e["worker"]["metadata"]["team"], "after");
    assert!(
        e["worker"].get("token").is_none()
            && !e.to_string().contains(&c.backend.tokens.lock().unwrap()[1])
    );

    c.backend.set_state(
        second["worker_id"].as_str().unwrap(),
        WorkerState::Exited,
        "exited with code 3",
    );
    let e = w.event().unwrap();
    assert_eq!(kind_and_task(&e), ("changed".into(), "after".into()));
    assert_eq!(e["worker"]["state"], "exited");
    assert_eq!(e["reason"], "exited with code 3");

    c.control(json!({"operation": "stop", "worker_id": second["worker_id"]}));
    let e = w.event().unwrap();
    assert_eq!(kind_and_task(&e), ("removed".into(), "after".into()));
    assert_eq!(e["reason"], "stopped by a caller");

    c.backend
        .remove_by_hand(first["worker_id"].as_str().unwrap());
    crate::watch::assert_removed(&w.event().unwrap(), "before", "outside this controller");
    assert!(e["at"].as_str().unwrap().ends_with('Z'));

    // CancelTask ends it: CANCELED, the stream's last event, and so listed afterwards.
    let r = c.rpc("CancelTask", json!({"id": id}));
    assert_eq!(r["result"]["status"]["state"], "TASK_STATE_CANCELED", "{r}");
    let end = w.event().unwrap();
    assert_eq!(end["type"], "end");
    assert_eq!(
        end["result"]["statusUpdate"]["status"]["state"],
        "TASK_STATE_CANCELED"
    );
    assert!(w.event().is_none(), "the stream is over");
    let listed = c.rpc("ListTasks", json!({"status": "TASK_STATE_CANCELED"}));
    assert_eq!(listed["result"]["tasks"][0]["id"], id.as_str());
    // Every other control task still refuses to be canceled.
    let done = c.control(json!({"operation": "list"}));
    assert_eq!(
        c.rpc_error("CancelTask", json!({"id": done["id"]}))["code"],
        -32002
    );
}

#[test]
fn filters_many_watchers_one_source_and_hang_ups() {
    let c = controller();
    create(&c, "red");
    create(&c, "blue");
    let mut red = Watch::start(
        c.addr,
        json!({"operation": "watch", "metadata": {"team": "red"}}),
    );
    let red_id = red.task_id();
    assert_eq!(
        kind_and_task(&red.event().unwrap()),
        ("added".into(), "red".into())
    );
    assert_eq!(red.event().unwrap()["type"], "synced");

    // 64 watchers at once: the source lists about once a second for all of them.
    let mut many: Vec<Watch> = (0..63)
        .map(|_| Watch::start(c.addr, json!({"operation": "watch"})))
        .collect();
    for w in &mut many {
        w.task_id();
        assert_eq!(w.snapshot().len(), 2);
    }
    let before = c.backend.lists.load(Ordering::SeqCst);
    std::thread::sleep(Duration::from_secs(3));
    let lists = c.backend.lists.load(Ordering::SeqCst) - before;
    // About three (once a second); 64 watchers each asking would be near 200. The range leaves
    // room for a busy machine that delays or bunches a look.
    assert!((1..=8).contains(&lists), "64 watchers, 3 s: {lists} lists");
    // A 65th is refused: MAX_WATCHERS (64).
    let mut refused = Watch::start(c.addr, json!({"operation": "watch"}));
    let first = refused.next().unwrap();
    assert_eq!(
        first["task"]["status"]["state"], "TASK_STATE_FAILED",
        "{first}"
    );
    assert!(first.to_string().contains("MAX_WATCHERS (64)"), "{first}");

    // Hang-ups end their watches (and free their places).
    for w in many.drain(..) {
        let _ = w.stream.shutdown(std::net::Shutdown::Both);
    }
    // A stream notices its client is gone when it writes: the events below usually do it
    // (the second write after a hang-up fails), and the heartbeat every 15 s at the latest
    // (on a busy machine the peer's reset can come after both writes).
    let green = create(&c, "green");
    c.backend.set_state(
        green["worker_id"].as_str().unwrap(),
        WorkerState::Exited,
        "done",
    );
    c.control(json!({"operation": "stop", "worker_id": green["worker_id"]}));
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        let working = c.rpc("ListTasks", json!({"status": "TASK_STATE_WORKING"}))["result"]
            ["tasks"]
            .as_array()
            .unwrap()
            .len();
        if working == 1 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{working} watches still run after their clients left"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let canceled = c.rpc("ListTasks", json!({"status": "TASK_STATE_CANCELED"}));
    let text = canceled.to_string();
    assert!(text.contains("the client went away"), "{text}");
    // The red watch heard nothing of blue or green, and still runs.
    create(&c, "red-2");
    let x = reply_data(
        &c.control(json!({"operation": "create", "task": "x", "metadata": {"team": "red"}})),
    );
    c.backend.set_state(
        x["worker"]["worker_id"].as_str().unwrap(),
        WorkerState::Exited,
        "x",
    );
    let e = red.event().unwrap();
    assert_eq!(
        kind_and_task(&e),
        ("added".into(), "x".into()),
        "only team red: {e}"
    );
    let r = c.rpc("CancelTask", json!({"id": red_id}));
    assert_eq!(r["result"]["status"]["state"], "TASK_STATE_CANCELED");
}

#[test]
fn return_immediately_subscribe_reaper_and_refusals() {
    let c = Builder::default()
        .flag("-worker-ttl=1s")
        .flag("-reap-interval=1s")
        .start();
    let r = c.rpc(
        "SendMessage",
        json!({"message": message(vec![json!({"data": {"operation": "watch"}})]),
               "configuration": {"returnImmediately": true}}),
    );
    let task = &r["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_WORKING", "{r}");
    let id = task["id"].as_str().unwrap().to_string();
    // SubscribeToTask follows it; the reaper's removal says why.
    let body =
        json!({"jsonrpc": "2.0", "id": "w", "method": "SubscribeToTask", "params": {"id": id}})
            .to_string();
    let mut stream = TcpStream::connect(c.addr).unwrap();
    write!(
        stream,
        "POST /a2a HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut sub = Watch {
        reader: BufReader::new(stream.try_clone().unwrap()),
        stream,
        until: Instant::now() + WATCH_READ_FOR,
    };
    assert_eq!(sub.next().unwrap()["task"]["id"], id.as_str());
    create(&c, "short-lived");
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        let e = sub.event().unwrap();
        seen.push(kind_and_task(&e));
        if e["type"] == "removed" {
            assert!(
                e["reason"]
                    .as_str()
                    .unwrap()
                    .starts_with("reaped: its TTL ended at"),
                "{e}"
            );
            break;
        }
    }
    assert_eq!(
        seen.last().map(|s| s.0.as_str()),
        Some("removed"),
        "{seen:?}"
    );
    let r = c.rpc("CancelTask", json!({"id": id}));
    assert_eq!(r["result"]["status"]["state"], "TASK_STATE_CANCELED");

    // A blocking SendMessage cannot carry a stream: refused, saying how.
    let t = c.control(json!({"operation": "watch"}));
    let e = control_error(&t, "TASK_STATE_REJECTED");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("SendStreamingMessage"),
        "{e}"
    );
    let t = c.control(json!({"operation": "watch", "state": "asleep"}));
    control_error(&t, "TASK_STATE_REJECTED");
    let _ = Arc::clone(&c.backend);
}

/// A snapshot larger than a stream's backlog (`STREAM_BACKLOG`, 1024 updates) arrives at once,
/// and the stream writes it at its client's pace: a client that is slow to start reading still
/// gets every worker and `synced`, and then what happens, the stream never let go.
#[test]
fn a_snapshot_larger_than_a_streams_backlog_is_written_whole() {
    let c = controller();
    let total = 3 * 1024;
    for i in 0..total {
        c.backend.add_by_hand(&format!("many-{i}"), "admin");
    }
    let mut w = Watch::start(c.addr, json!({"operation": "watch"}));
    w.task_id();
    // The client reads nothing for a while: the whole snapshot is ready to be sent by then.
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(w.snapshot().len(), total);
    // A stream let go ends after what it had: this one goes on.
    let later = create(&c, "after the snapshot");
    assert_eq!(
        w.next_of("added")["worker"]["worker_id"],
        later["worker_id"]
    );
}
