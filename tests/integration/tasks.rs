//! Control tasks: ids, contexts, timestamps, history, GetTask/ListTasks, the token delivered
//! exactly once, and returnImmediately.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::*;

fn is_iso_z_millis(s: &str) -> bool {
    // 2026-11-29T20:30:09.802Z
    s.len() == 24 && s.ends_with('Z') && &s[10..11] == "T" && &s[19..20] == "."
}

#[test]
fn every_task_has_generated_ids_a_timestamp_and_its_history() {
    let c = controller();
    let a = c.control(json!({"operation": "list"}));
    let b = c.control(json!({"operation": "list"}));
    assert_ne!(a["id"], b["id"], "server-generated ids");
    assert_ne!(a["contextId"], b["contextId"], "generated contexts");
    assert!(
        is_iso_z_millis(a["status"]["timestamp"].as_str().unwrap()),
        "{a}"
    );
    assert_eq!(a["artifacts"][0]["name"], "result");
    assert!(a["artifacts"][0]["artifactId"].is_string());
    assert!(a["artifacts"][0]["parts"][0].get("kind").is_none());
    assert_eq!(a["history"][0]["role"], "ROLE_USER");
    assert_eq!(a["history"][0]["taskId"], a["id"]);
    assert_eq!(a["history"][0]["contextId"], a["contextId"]);

    let mut m = message(vec![json!({"data": {"operation": "list"}})]);
    m["contextId"] = json!("my-context");
    let t = c.send(json!({"message": m.clone(), "configuration": {"historyLength": 0}}));
    assert_eq!(t["contextId"], "my-context");
    assert!(
        t.get("history").is_none(),
        "historyLength 0 = no history: {t}"
    );

    let rejected = c.send(json!({"message": message(vec![json!({"text": "hi"})])}));
    assert_eq!(rejected["history"].as_array().unwrap().len(), 2);
    let last =
        c.rpc("GetTask", json!({"id": rejected["id"], "historyLength": 1}))["result"].clone();
    assert_eq!(last["history"].as_array().unwrap().len(), 1);
    assert_eq!(last["history"][0]["role"], "ROLE_AGENT");
}

#[test]
fn token_is_delivered_exactly_once() {
    let c = controller();
    let task = c.control(json!({"operation": "create", "task": "once"}));
    let token = reply_data(&task)["token"].as_str().unwrap().to_string();
    let id = task["id"].clone();
    let got = c.rpc("GetTask", json!({"id": id}))["result"].clone();
    assert_eq!(got["status"]["state"], "TASK_STATE_COMPLETED");
    assert!(got["artifacts"][0]["parts"][0]["data"]["worker"].is_object());
    assert!(
        got["artifacts"][0]["parts"][0]["data"]
            .get("token")
            .is_none(),
        "{got}"
    );
    let listed = c.rpc("ListTasks", json!({"includeArtifacts": true}));
    assert!(!listed.to_string().contains(&token));
}

fn wait_done(c: &Controller, id: &Value) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let t = c.rpc("GetTask", json!({"id": id}))["result"].clone();
        if t["status"]["state"] != "TASK_STATE_WORKING" || Instant::now() > deadline {
            return t;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn return_immediately_answers_working_and_hands_the_token_out_once() {
    let c = controller();
    // A create that takes 5 s: an answer within 4 s came before it finished (and the answer
    // says WORKING, below).
    *c.backend.create_delay.lock().unwrap() = Duration::from_secs(5);
    let started = Instant::now();
    let task = c.send(json!({
        "message": message(vec![json!({"data": {"operation": "create", "task": "bg"}})]),
        "configuration": {"returnImmediately": true}}));
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "returned before the create finished"
    );
    assert_eq!(task["status"]["state"], "TASK_STATE_WORKING");
    assert!(task.get("artifacts").is_none());
    let cancel = c.rpc_error("CancelTask", json!({"id": task["id"]}));
    assert_eq!(cancel["code"], -32002);
    let listed = c.rpc("ListTasks", json!({"status": "TASK_STATE_WORKING"}))["result"].clone();
    assert_eq!(listed["totalSize"], 1);

    // The first view of the finished task carries the token; the next ones do not.
    let done = wait_done(&c, &task["id"]);
    let data = reply_data(&done);
    let token = data["token"].as_str().expect("token on first delivery");
    assert_eq!(
        c.backend.tokens.lock().unwrap().as_slice(),
        [token.to_string()]
    );
    let again = c.rpc("GetTask", json!({"id": task["id"]}))["result"].clone();
    assert!(reply_data(&again).get("token").is_none());

    // Through ListTasks with includeArtifacts, likewise once. Its end is waited for without
    // artifacts (which would deliver the token).
    *c.backend.create_delay.lock().unwrap() = Duration::from_millis(200);
    let t2 = c.send(json!({
        "message": message(vec![json!({"data": {"operation": "create", "task": "bg2"}})]),
        "configuration": {"return_immediately": true}}));
    let deadline = Instant::now() + Duration::from_secs(30);
    while c.rpc("ListTasks", json!({"status": "TASK_STATE_COMPLETED"}))["result"]["tasks"]
        .as_array()
        .is_none_or(|ts| !ts.iter().any(|t| t["id"] == t2["id"]))
    {
        assert!(Instant::now() < deadline, "bg2 never finished");
        std::thread::sleep(Duration::from_millis(20));
    }
    let first = c.rpc(
        "ListTasks",
        json!({"includeArtifacts": true, "pageSize": 1}),
    )["result"]
        .clone();
    assert_eq!(first["tasks"][0]["id"], t2["id"]);
    assert_eq!(
        first["tasks"][0]["artifacts"][0]["parts"][0]["data"]["token"]
            .as_str()
            .unwrap()
            .len(),
        64
    );
    let second = c.rpc("GetTask", json!({"id": t2["id"]}))["result"].clone();
    assert!(reply_data(&second).get("token").is_none());
}

#[test]
fn list_tasks_pages_newest_first_and_filters() {
    let c = controller();
    let mut m = message(vec![json!({"data": {"operation": "list"}})]);
    m["contextId"] = json!("ctx-a");
    for _ in 0..3 {
        c.send(json!({"message": m.clone()}));
    }
    let rejected = c.send(json!({"message": message(vec![json!({"text": "x"})])}));

    let all = c.rpc("ListTasks", json!({}))["result"].clone();
    assert_eq!(all["totalSize"], 4);
    assert_eq!(all["pageSize"], 50);
    assert_eq!(all["nextPageToken"], "");
    assert_eq!(all["tasks"][0]["id"], rejected["id"], "newest first");
    assert!(
        all["tasks"][1].get("artifacts").is_none(),
        "artifacts only when asked"
    );

    let p1 = c.rpc("ListTasks", json!({"pageSize": 3}))["result"].clone();
    assert_eq!(p1["tasks"].as_array().unwrap().len(), 3);
    let token = p1["nextPageToken"].as_str().unwrap();
    assert!(!token.is_empty());
    let p2 = c.rpc("ListTasks", json!({"pageSize": 3, "pageToken": token}))["result"].clone();
    assert_eq!(p2["tasks"].as_array().unwrap().len(), 1);
    assert_eq!(p2["nextPageToken"], "");

    let ctx = c.rpc("ListTasks", json!({"context_id": "ctx-a"}))["result"].clone();
    assert_eq!(ctx["totalSize"], 3);
    for unset in [
        json!("TASK_STATE_UNSPECIFIED"),
        json!(0),
        json!("UNRECOGNIZED"),
        json!(""),
    ] {
        let all = c.rpc("ListTasks", json!({"status": unset}))["result"].clone();
        assert_eq!(all["totalSize"], 4, "{unset} is no filter");
    }
    let rej = c.rpc("ListTasks", json!({"status": "TASK_STATE_REJECTED"}))["result"].clone();
    assert_eq!(rej["totalSize"], 1);
    let future = c.rpc(
        "ListTasks",
        json!({"statusTimestampAfter": "2999-01-01T00:00:00Z"}),
    )["result"]
        .clone();
    assert_eq!(future["totalSize"], 0);
    let h0 = c.rpc("ListTasks", json!({"historyLength": 0}))["result"].clone();
    assert!(h0["tasks"][0].get("history").is_none());

    for bad in [
        json!({"pageSize": 0}),
        json!({"pageSize": 101}),
        json!({"pageSize": "many"}),
        json!({"pageToken": "garbage"}),
        json!({"status": "DONE"}),
        json!({"statusTimestampAfter": "yesterday"}),
        json!({"includeArtifacts": "yes"}),
        json!({"contextId": 5}),
    ] {
        assert_eq!(
            c.rpc_error("ListTasks", bad.clone())["code"],
            -32602,
            "{bad}"
        );
    }
}

#[test]
fn a_panicking_operation_fails_its_task_and_the_controller_serves_on() {
    let c = Builder::default().flag("-max-workers=1").start();
    // In the background: the task ends FAILED (internal), never WORKING forever.
    c.backend.panic_next_create.store(true, Ordering::SeqCst);
    let task = c.send(json!({
        "message": message(vec![json!({"data": {"operation": "create", "task": "bug"}})]),
        "configuration": {"returnImmediately": true}}));
    assert_eq!(task["status"]["state"], "TASK_STATE_WORKING");
    let done = wait_done(&c, &task["id"]);
    let e = control_error(&done, "TASK_STATE_FAILED");
    assert_eq!(e["code"], "internal", "{done}");

    // In a request: answered 500 by the HTTP layer, and the next request is served.
    c.backend.panic_next_create.store(true, Ordering::SeqCst);
    let r = send_control(c.addr, json!({"operation": "create", "task": "bug"}));
    assert_eq!(r.status, 500, "{}", r.text());
    let metrics = request(c.addr, "GET", "/metrics", &[], b"").text();
    assert!(
        metrics.contains(r#"a2a_controller_http_requests_total{route="http",status="500"} 1"#),
        "{metrics}"
    );

    // Neither panic kept a place under MAX_WORKERS (1): this create is admitted.
    let created = c.control(json!({"operation": "create", "task": "after the bugs"}));
    assert_eq!(reply_data(&created)["worker"]["task"], "after the bugs");
    assert_eq!(c.backend.count(), 1);
}
