//! Control operations over the protocol: replies, every rejection, every failure code.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use a2a_worker_controller::backend::BackendError;
use serde_json::json;

use crate::support::*;

#[test]
fn a_created_worker_is_listed_with_its_own_token_and_stop_removes_it() {
    let c = controller();
    let task = c.control(json!({"operation": "create", "task": "fix-login"}));
    let data = reply_data(&task);
    let worker = &data["worker"];
    let token = data["token"].as_str().unwrap();
    assert_eq!(token.len(), 64);
    assert!(token.bytes().all(|b| b.is_ascii_hexdigit()));
    assert_eq!(
        c.backend.tokens.lock().unwrap().as_slice(),
        [token.to_string()]
    );
    for key in [
        "worker_id",
        "task",
        "a2a_url",
        "backend",
        "state",
        "pane_id",
        "session_id",
        "created_at",
        "reason",
    ] {
        assert!(worker[key].is_string(), "{key} in {worker}");
    }
    assert_eq!(
        worker["metadata"],
        json!({}),
        "always present, {{}} when none"
    );
    assert_eq!(worker["task"], "fix-login");
    let id = worker["worker_id"].as_str().unwrap().to_string();

    let second = c.control(json!({"operation": "create", "task": "second"}));
    let second_id = reply_data(&second)["worker"]["worker_id"].clone();
    let listed = reply_data(&c.control(json!({"operation": "list"})));
    let ids: Vec<_> = listed["workers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["worker_id"].clone())
        .collect();
    assert_eq!(ids, [json!(id), second_id], "oldest first");
    assert!(
        !listed.to_string().contains(token),
        "list never returns a token"
    );

    let stopped = reply_data(&c.control(json!({"operation": "stop", "worker_id": id})));
    assert_eq!(stopped["worker"]["worker_id"], json!(id));
    assert!(stopped.get("token").is_none());
    assert_eq!(c.backend.count(), 1);
}

#[test]
fn every_rejection_is_a_rejected_task_with_invalid_request() {
    let c = controller();
    let cases = [
        json!({"message": message(vec![json!({"text": "create a worker please"})])}),
        json!({"message": message(vec![json!({"data": [1, 2]})])}),
        json!({"message": message(vec![json!({"data": {"op": "list"}})])}),
        json!({"message": message(vec![json!({"data": {"operation": "explode"}})])}),
        json!({"message": message(vec![json!({"data": {"operation": 3}})])}),
        json!({"message": message(vec![json!({"data": {"operation": "create"}})])}),
        json!({"message": message(vec![json!({"data": {"operation": "create", "task": ""}})])}),
        json!({"message": message(vec![json!({"data": {"operation": "create", "task": 12}})])}),
        json!({"message": message(vec![json!({"data": {"operation": "create", "task": "a\r\nb"}})])}),
        json!({"message": message(vec![json!({"data": {"operation": "create", "task": "x".repeat(300)}})])}),
        json!({"message": message(vec![json!({"data": {"operation": "stop"}})])}),
        json!({"message": message(vec![json!({"data": {"operation": "stop", "worker_id": "a b"}})])}),
        json!({"message": message(vec![json!({"data": {"operation": "stop", "worker_id": ["x"]}})])}),
    ];
    for params in cases {
        let task = c.send(params.clone());
        let e = control_error(&task, "TASK_STATE_REJECTED");
        assert_eq!(e["code"], "invalid_request", "{params}");
        assert!(task.get("artifacts").is_none());
    }
    assert_eq!(c.backend.count(), 0, "nothing created");
}

#[test]
fn failures_carry_their_codes() {
    let backend = Arc::new(FakeBackend::default());
    let c = Builder::default()
        .backend(backend.clone())
        .flag("-max-workers=2")
        .start();

    c.expect_failure(
        json!({"operation": "stop", "worker_id": "doesnotexist"}),
        "not_found",
    );

    let first = reply_data(&c.control(json!({"operation": "create", "task": "t1"})));
    let e = c.expect_failure(
        json!({"operation": "create", "task": "t1"}),
        "worker_exists",
    );
    assert_eq!(e["worker_id"], first["worker"]["worker_id"]);
    assert_eq!(e["state"], "running");

    reply_data(&c.control(json!({"operation": "create", "task": "t2"})));
    c.expect_failure(json!({"operation": "create", "task": "t3"}), "capacity");

    for (error, code) in [
        (
            BackendError::ImageNotFound("img:v1".into()),
            "image_not_found",
        ),
        (
            BackendError::NotReady("exited with code 1".into()),
            "not_ready",
        ),
        (BackendError::Internal("boom".into()), "internal"),
    ] {
        let stop = json!({"operation": "stop", "worker_id": first["worker"]["worker_id"]});
        c.control(stop);
        *backend.next_create_error.lock().unwrap() = Some(error);
        let e = c.expect_failure(json!({"operation": "create", "task": "t9"}), code);
        assert!(e["message"].as_str().unwrap().len() > 5);
    }

    backend.down.store(true, Ordering::SeqCst);
    for data in [
        json!({"operation": "list"}),
        json!({"operation": "create", "task": "t4"}),
        json!({"operation": "stop", "worker_id": "abc"}),
    ] {
        c.expect_failure(data, "backend_unavailable");
    }
}

#[test]
fn racing_creates_for_one_task_give_one_worker() {
    let backend = Arc::new(FakeBackend::default());
    *backend.create_delay.lock().unwrap() = Duration::from_millis(50);
    let c = Builder::default()
        .backend(backend.clone())
        .flag("-max-connections=64")
        .start();
    let results: Vec<serde_json::Value> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..8)
            .map(|_| s.spawn(|| c.control(json!({"operation": "create", "task": "same"}))))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let ok = results
        .iter()
        .filter(|t| t["status"]["state"] == "TASK_STATE_COMPLETED")
        .count();
    assert_eq!(ok, 1);
    assert_eq!(backend.count(), 1);
}

/// Issue 21, part 2: a create's metadata comes back from every operation; list filters by
/// metadata (all must match), state and task; every rule of a metadata key and value is
/// refused naming the key.
#[test]
fn metadata_round_trips_and_filters_lists() {
    let c = controller();
    let tagged = |task: &str, meta: serde_json::Value| {
        let t = c.control(json!({"operation": "create", "task": task, "metadata": meta}));
        reply_data(&t)["worker"].clone()
    };
    let a = tagged("meta-a", json!({"team": "infra", "ticket": "JIRA-1"}));
    assert_eq!(a["metadata"], json!({"team": "infra", "ticket": "JIRA-1"}));
    let b = tagged("meta-b", json!({"team": "infra", "ticket": "JIRA-2"}));
    let plain = tagged("meta-c", json!(null));
    assert_eq!(plain["metadata"], json!({}));
    let listed = |filter: serde_json::Value| -> Vec<String> {
        let mut req = json!({"operation": "list"});
        req.as_object_mut()
            .unwrap()
            .extend(filter.as_object().unwrap().clone());
        reply_data(&c.control(req))["workers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w["task"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(listed(json!({})), ["meta-a", "meta-b", "meta-c"]);
    assert_eq!(
        listed(json!({"metadata": {"team": "infra"}})),
        ["meta-a", "meta-b"]
    );
    assert_eq!(
        listed(json!({"metadata": {"team": "infra", "ticket": "JIRA-2"}})),
        ["meta-b"],
        "all must match"
    );
    assert!(listed(json!({"metadata": {"team": "web"}})).is_empty());
    assert_eq!(listed(json!({"task": "meta-c"})), ["meta-c"]);
    assert_eq!(listed(json!({"state": "running"})).len(), 3);
    assert!(listed(json!({"state": "exited"})).is_empty());
    let all = reply_data(&c.control(json!({"operation": "list"})));
    assert_eq!(all["workers"][0]["metadata"], a["metadata"]);
    let stopped = reply_data(&c.control(json!({"operation": "stop", "worker_id": b["worker_id"]})));
    assert_eq!(stopped["worker"]["metadata"]["ticket"], "JIRA-2");

    let long_key = "k".repeat(64);
    let too_many: serde_json::Map<String, serde_json::Value> =
        (0..17).map(|i| (format!("k{i}"), json!("v"))).collect();
    for (meta, says) in [
        (json!("team=infra"), "must be an object"),
        (json!({"Team": "x"}), "\"Team\""),
        (json!({"-team": "x"}), "\"-team\""),
        (json!({"": "x"}), "\"\""),
        (json!({"te am": "x"}), "\"te am\""),
        (json!({long_key.clone(): "x"}), "1-63 characters"),
        (json!({"team": 5}), "the value must be a string"),
        (json!({"team": "x".repeat(257)}), "at most 256"),
        (json!({"team": "a\nb"}), "printable"),
        (json!({"team": "a\u{202e}b"}), "printable"),
        (json!(too_many), "at most 16"),
    ] {
        let t = c.control(json!({"operation": "create", "task": "bad-meta", "metadata": meta}));
        let e = control_error(&t, "TASK_STATE_REJECTED");
        assert_eq!(e["code"], "invalid_request");
        assert!(e["message"].as_str().unwrap().contains(says), "{meta}: {e}");
    }
    for bad in [
        json!({"operation": "list", "state": "sleeping"}),
        json!({"operation": "list", "state": 1}),
        json!({"operation": "list", "metadata": {"BAD": "x"}}),
        json!({"operation": "list", "task": ""}),
    ] {
        let e = control_error(&c.control(bad.clone()), "TASK_STATE_REJECTED");
        assert_eq!(e["code"], "invalid_request", "{bad}");
    }
    // 16 keys of the longest form, values of 256 characters: accepted.
    let max: serde_json::Map<String, serde_json::Value> = (0..16)
        .map(|i| (format!("{i:x}{}", "a".repeat(62)), json!("é".repeat(256))))
        .collect();
    let w = tagged("meta-max", json!(max));
    assert_eq!(w["metadata"].as_object().unwrap().len(), 16);
}
