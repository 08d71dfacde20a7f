//! `renew`, `suspend` and `resume` over the protocol, on the seam's test double: bounds,
//! scopes, a worker renewing itself with its own token (and that token good for nothing
//! else), states and their refusals, `MAX_WORKERS` with suspended workers, and what the reaper
//! does at a TTL's end (`on_expiry`, `suspended_ttl`). The same on the real engine is
//! `docker_suspend.rs`.

use std::time::Duration;

use a2a_worker_controller::backend::WorkerState;
use a2a_worker_controller::time::{now_millis, parse_rfc3339_millis};
use serde_json::{json, Value};

use crate::callers::{callers_file, control_as, rpc_as, ALICE, BOB};
use crate::support::*;
use crate::templates::{test_dir, write_templates};

fn create(c: &Controller, task: &str) -> (String, String) {
    let data = reply_data(&c.control(json!({"operation": "create", "task": task})));
    (
        data["worker"]["worker_id"].as_str().unwrap().to_string(),
        data["token"].as_str().unwrap().to_string(),
    )
}

fn expiry_ms(worker: &Value) -> u64 {
    parse_rfc3339_millis(worker["expires_at"].as_str().unwrap_or("")).unwrap_or(0)
}

fn send_as(c: &Controller, token: &str, data: Value) -> (u16, Value) {
    rpc_as(
        c.addr,
        token,
        "SendMessage",
        json!({"message": message(vec![json!({"data": data})])}),
    )
}

#[test]
fn renew_sets_the_expiry_to_now_plus_the_ttl_within_the_ceiling() {
    let c = Builder::default().flag("-max-worker-ttl=2h").start();
    let (id, _) = create(&c, "busy");
    let asked = now_millis();
    let renewed =
        reply_data(&c.control(json!({"operation": "renew", "worker_id": id, "ttl": "90m"})));
    let at = expiry_ms(&renewed["worker"]);
    assert!(
        at >= asked + 5_400_000 && at <= now_millis() + 5_401_000,
        "{renewed}"
    );
    let listed = reply_data(&c.control(json!({"operation": "list"})));
    assert_eq!(
        listed["workers"][0]["expires_at"],
        renewed["worker"]["expires_at"]
    );
    // Refused as a create's would be (rejected, naming the ceiling).
    let task = c.control(json!({"operation": "renew", "worker_id": id, "ttl": "3h"}));
    let e = control_error(&task, "TASK_STATE_REJECTED");
    assert_eq!(e["message"], "ttl 3h is longer than MAX_WORKER_TTL (2h)");
    let task = c.control(json!({"operation": "renew", "worker_id": id}));
    let e = control_error(&task, "TASK_STATE_REJECTED");
    assert!(
        e["message"].as_str().unwrap().contains("renew needs a ttl"),
        "{e}"
    );
    c.expect_failure(
        json!({"operation": "renew", "worker_id": "nosuch", "ttl": "1h"}),
        "not_found",
    );
}

#[test]
fn a_worker_renews_itself_with_its_own_token_and_that_token_does_nothing_else() {
    let c = controller();
    let (id, token) = create(&c, "self");
    let (other, _) = create(&c, "other");
    let (status, v) = send_as(
        &c,
        &token,
        json!({"operation": "renew", "worker_id": id, "ttl": "1h"}),
    );
    assert_eq!(status, 200, "{v}");
    let data = reply_data(&v["result"]["task"]);
    assert!(
        expiry_ms(&data["worker"]) > now_millis() + 3_500_000,
        "{data}"
    );

    // Another worker: as if it did not exist.
    let (_, v) = send_as(
        &c,
        &token,
        json!({"operation": "renew", "worker_id": other, "ttl": "1h"}),
    );
    let e = control_error(&v["result"]["task"], "TASK_STATE_FAILED");
    assert_eq!(e["code"], "not_found", "{v}");
    // Anything else: refused, saying what the token may do.
    for op in [
        json!({"operation": "list"}),
        json!({"operation": "stop", "worker_id": id}),
        json!({"operation": "create", "task": "x"}),
        json!({"operation": "suspend", "worker_id": id}),
    ] {
        let (status, v) = send_as(&c, &token, op.clone());
        assert_eq!(status, 200, "{v}");
        let e = control_error(&v["result"]["task"], "TASK_STATE_REJECTED");
        assert_eq!(e["code"], "forbidden", "{op}: {v}");
        assert!(e["message"]
            .as_str()
            .unwrap()
            .contains("may only renew its worker"));
    }
    // Any other method: 401, as for a token that is no one's.
    let (status, _) = rpc_as(c.addr, &token, "ListTasks", json!({}));
    assert_eq!(status, 401);
    // A made-up token of the same shape renews nothing.
    let fake = "0".repeat(64);
    let (_, v) = send_as(
        &c,
        &fake,
        json!({"operation": "renew", "worker_id": id, "ttl": "1h"}),
    );
    assert_eq!(
        control_error(&v["result"]["task"], "TASK_STATE_FAILED")["code"],
        "not_found"
    );
    assert_eq!(c.backend.count(), 2, "nothing was stopped or made");
}

#[test]
fn another_scopes_renew_suspend_and_resume_are_not_found() {
    let file = callers_file("lifetimes");
    let c = Builder::default()
        .flag(&format!("-a2a-callers-file={}", file.display()))
        .start();
    let task = control_as(
        c.addr,
        ALICE,
        json!({"operation": "create", "task": "mine"}),
    );
    let id = reply_data(&task)["worker"]["worker_id"]
        .as_str()
        .unwrap()
        .to_string();
    for op in ["renew", "suspend", "resume"] {
        let t = control_as(
            c.addr,
            BOB,
            json!({"operation": op, "worker_id": id, "ttl": "1h"}),
        );
        assert_eq!(
            control_error(&t, "TASK_STATE_FAILED")["code"],
            "not_found",
            "{op}: {t}"
        );
    }
    let t = control_as(
        c.addr,
        ALICE,
        json!({"operation": "suspend", "worker_id": id}),
    );
    assert_eq!(reply_data(&t)["worker"]["state"], "suspended");
}

#[test]
fn suspend_and_resume_keep_the_worker_and_answer_each_state_clearly() {
    let c = Builder::default().flag("-max-workers=1").start();
    let (id, _) = create(&c, "napper");
    let suspended = reply_data(&c.control(json!({"operation": "suspend", "worker_id": id})));
    assert_eq!(suspended["worker"]["state"], "suspended");
    assert!(suspended["worker"]["reason"]
        .as_str()
        .unwrap()
        .starts_with("suspended at "));
    // Suspending again: the worker as it is.
    let again = reply_data(&c.control(json!({"operation": "suspend", "worker_id": id})));
    assert_eq!(again["worker"]["state"], "suspended");
    // Listed, by the state filter too.
    let listed = reply_data(&c.control(json!({"operation": "list", "state": "suspended"})));
    assert_eq!(listed["workers"][0]["worker_id"], id.as_str());
    // Holds its task; does not hold a place under MAX_WORKERS (1).
    let e = c.expect_failure(
        json!({"operation": "create", "task": "napper"}),
        "worker_exists",
    );
    assert_eq!(e["state"], "suspended", "{e}");
    let (other, _) = create(&c, "other");
    // Resuming takes a place again: refused while the other runs.
    c.expect_failure_saying(
        json!({"operation": "resume", "worker_id": id}),
        "capacity",
        &["MAX_WORKERS (1)"],
    );
    reply_data(&c.control(json!({"operation": "stop", "worker_id": other})));
    let resumed = reply_data(&c.control(json!({"operation": "resume", "worker_id": id})));
    assert_eq!(resumed["worker"]["state"], "running");
    assert_eq!(resumed["worker"]["worker_id"], id.as_str());
    // Resuming a running worker: the worker as it is.
    let again = reply_data(&c.control(json!({"operation": "resume", "worker_id": id})));
    assert_eq!(again["worker"]["state"], "running");
    // An exited worker is neither suspended nor resumed, and says why.
    c.backend
        .set_state(&id, WorkerState::Exited, "exited with code 1");
    c.expect_failure_saying(
        json!({"operation": "resume", "worker_id": id}),
        "invalid_state",
        &["is exited, not suspended"],
    );
    c.expect_failure_saying(
        json!({"operation": "suspend", "worker_id": id}),
        "invalid_state",
        &["only a running worker can be suspended"],
    );
    let metrics = request(c.addr, "GET", "/metrics", &[], b"").text();
    for op in ["suspend", "resume"] {
        assert!(
            metrics.contains(&format!(
                "operation=\"{op}\",backend=\"docker\",outcome=\"completed\""
            )),
            "{op} counted: {metrics}"
        );
    }
}

#[test]
fn a_suspended_workers_ttl_does_not_run_and_renew_asks_for_a_resume_first() {
    let c = controller();
    let data = reply_data(&c.control(json!({"operation": "create", "task": "t", "ttl": "1h"})));
    let id = data["worker"]["worker_id"].as_str().unwrap().to_string();
    let before = expiry_ms(&data["worker"]);
    let s = reply_data(&c.control(json!({"operation": "suspend", "worker_id": id})));
    assert_eq!(
        s["worker"]["expires_at"], "",
        "kept until stopped: no SUSPENDED_TTL"
    );
    c.expect_failure_saying(
        json!({"operation": "renew", "worker_id": id, "ttl": "1h"}),
        "invalid_state",
        &["is suspended", "resume it"],
    );
    let r = reply_data(&c.control(json!({"operation": "resume", "worker_id": id})));
    let after = expiry_ms(&r["worker"]);
    // The hour it had left, from the resume.
    assert!(
        after >= before.saturating_sub(2_000) && after <= now_millis() + 3_601_000,
        "{r}"
    );
}

#[test]
fn the_reaper_suspends_on_expiry_when_the_template_says_so_and_stops_after_suspended_ttl() {
    let dir = test_dir("on-expiry");
    let file = dir.join("templates.json");
    write_templates(
        &file,
        json!({"napper": {"on_expiry": "suspend", "suspended_ttl": 3, "ttl": 1}}),
    );
    let c = Builder::default()
        .flag(&format!("-worker-templates-file={}", file.display()))
        .flag("-reap-interval=1s")
        .start();
    let napper =
        reply_data(&c.control(json!({"operation": "create", "task": "n", "template": "napper"})));
    let id = napper["worker"]["worker_id"].as_str().unwrap().to_string();
    // One that exited on its own is not suspended at its TTL's end: it is stopped.
    let ended =
        reply_data(&c.control(json!({"operation": "create", "task": "e", "template": "napper"})));
    let ended_id = ended["worker"]["worker_id"].as_str().unwrap().to_string();
    c.backend
        .set_state(&ended_id, WorkerState::Exited, "exited with code 0");
    let plain = reply_data(&c.control(json!({"operation": "create", "task": "p", "ttl": 1})));
    let plain_id = plain["worker"]["worker_id"].as_str().unwrap().to_string();
    let state = |c: &Controller, id: &str| {
        let listed = reply_data(&c.control(json!({"operation": "list"})));
        listed["workers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|w| w["worker_id"] == id)
            .map(|w| w["state"].as_str().unwrap().to_string())
    };
    wait_until(
        "the napper is suspended at its TTL's end",
        Duration::from_secs(10),
        || state(&c, &id).as_deref() == Some("suspended"),
    );
    wait_until(
        "a worker of a plain template is stopped",
        Duration::from_secs(10),
        || state(&c, &plain_id).is_none(),
    );
    wait_until(
        "the suspended napper is stopped after its suspended_ttl",
        Duration::from_secs(15),
        || state(&c, &id).is_none(),
    );
}

#[test]
fn a_template_field_of_the_lifetime_that_cannot_be_read_is_refused_naming_it() {
    let dir = test_dir("on-expiry-bad");
    let file = dir.join("templates.json");
    for (entry, says) in [
        (json!({"a": {"on_expiry": "sleep"}}), "on_expiry"),
        (json!({"a": {"suspended_ttl": "soon"}}), "suspended_ttl"),
        (
            json!({"a": {"resume_command": ["/bin/agent", "--resume"]}}),
            "{session_id}",
        ),
    ] {
        write_templates(&file, entry.clone());
        let settings = settings(&[&format!("-worker-templates-file={}", file.display())]);
        let backend: std::sync::Arc<FakeBackend> = Default::default();
        let e = a2a_worker_controller::start(&settings, backend)
            .err()
            .unwrap_or_else(|| panic!("{entry} was accepted"));
        assert!(e.to_string().contains(says), "{says} not in {e}");
    }
}

#[test]
fn a_renew_that_answered_is_never_undone_by_the_reaper() {
    // Thirty workers whose TTL ends together, renewed while the reaper (every 50 ms) takes
    // them: each renew either answered (and its worker outlives the reaper) or found its
    // worker gone (`not_found`); never an answer for a worker the reaper then stopped.
    let c = Builder::default().flag("-reap-interval=50ms").start();
    let ids: Vec<String> = (0..30)
        .map(|i| {
            let made =
                c.control(json!({"operation": "create", "task": format!("race-{i}"), "ttl": 1}));
            reply_data(&made)["worker"]["worker_id"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    let expiry = ids
        .iter()
        .map(|id| {
            let listed = reply_data(&c.control(json!({"operation": "list"})));
            let w = listed["workers"]
                .as_array()
                .unwrap()
                .iter()
                .find(|w| w["worker_id"] == id.as_str())
                .cloned()
                .unwrap();
            expiry_ms(&w)
        })
        .min()
        .unwrap();
    // From a moment before the TTL ends, one renew after another, while the reaper runs.
    // Renew i is sent at expiry - 25 ms + 3i ms (looked at every millisecond): across a reaper
    // pass or two.
    let mut outcomes = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        while now_millis() + 25 < expiry + 3 * i as u64 {
            std::thread::sleep(Duration::from_millis(1));
        }
        let t = c.control(json!({"operation": "renew", "worker_id": id, "ttl": "1h"}));
        let done = t["status"]["state"] == "TASK_STATE_COMPLETED";
        if !done {
            assert_eq!(
                control_error(&t, "TASK_STATE_FAILED")["code"],
                "not_found",
                "{t}"
            );
        }
        outcomes.push((id.clone(), done));
    }
    // Several reaper passes later, the renewed ones are all there, the others all gone.
    let passes = c.backend.lists.load(std::sync::atomic::Ordering::SeqCst);
    wait_until("a few reaper passes", Duration::from_secs(5), || {
        c.backend.lists.load(std::sync::atomic::Ordering::SeqCst) > passes + 6
    });
    let listed = reply_data(&c.control(json!({"operation": "list"})));
    let there: Vec<&str> = listed["workers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["worker_id"].as_str().unwrap())
        .collect();
    for (id, renewed) in &outcomes {
        assert_eq!(
            there.contains(&id.as_str()),
            *renewed,
            "worker {id}: renewed {renewed}"
        );
    }
    let renewed = outcomes.iter().filter(|(_, r)| *r).count();
    eprintln!(
        "renewed {renewed} of {}, the rest reaped first",
        outcomes.len()
    );
    assert!(renewed > 0, "some renews answered");
}
