//! Worker lifetimes on the real dockerd: a TTL given at create is stored as the fourth label,
//! listed as `expires_at`, and the reaper stops the worker within one reap interval after it
//! passes, also after a controller restart and with two controllers reaping the same workers.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use a2a_worker_controller::time::parse_rfc3339_millis;
use serde_json::{json, Value};

use crate::docker_support::*;
use crate::support::{control_error, reply_data, Controls};

fn listed(p: &Proc) -> Vec<Value> {
    reply_data(&p.control(json!({"operation": "list"})))["workers"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn now_millis() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Waits until none of `ids` is listed; when that happened.
fn wait_gone(p: &Proc, ids: &[String], limit: Duration) -> u64 {
    let deadline = Instant::now() + limit;
    loop {
        let left: Vec<String> = listed(p)
            .iter()
            .filter_map(|w| w["worker_id"].as_str().map(String::from))
            .filter(|id| ids.contains(id))
            .collect();
        if left.is_empty() {
            return now_millis();
        }
        assert!(
            Instant::now() < deadline,
            "still listed after {limit:?}: {left:?}; log:\n{}",
            p.log_text()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_worker_with_a_ttl_is_listed_until_it_expires_then_reaped_also_after_a_restart() {
    let Some(socket) = docker_socket() else {
        return;
    };
    let id = controller_id("ttl");
    let cleanup = Cleanup::new(&socket, &id);
    let mut p = Proc::start(&socket, &id, &["-reap-interval=1s", "-max-worker-ttl=1h"]);

    let asked = now_millis();
    let short = reply_data(&p.control(json!({"operation": "create", "task": "short", "ttl": 4})));
    let expires = short["worker"]["expires_at"]
        .as_str()
        .unwrap_or("")
        .to_string();
    let expires_millis = parse_rfc3339_millis(&expires).expect("an RFC 3339 expiry");
    assert!(
        expires_millis >= asked + 4000 && expires_millis <= now_millis() + 5000,
        "{expires} for a 4 s TTL"
    );
    // No TTL asked and no WORKER_TTL: with a ceiling set, the ceiling (none lives forever).
    let capped = reply_data(&p.control(json!({"operation": "create", "task": "capped"})));
    let capped_at = parse_rfc3339_millis(capped["worker"]["expires_at"].as_str().unwrap_or(""))
        .expect("an expiry at the ceiling");
    assert!(capped_at.abs_diff(asked + 3_600_000) < 10_000, "{capped}");

    // The expiry is where ownership lives: the container's fifth label, Unix seconds.
    let mut expiries: Vec<String> = cleanup
        .owned()
        .into_iter()
        .filter_map(|c| c.labels)
        // The controller's seven (the token's hash among them), and the worker image's own
        // (inherited: it speaks the pool's activation contract).
        .inspect(|l| assert_eq!(l.len(), 7 + 1, "{l:?}"))
        .filter_map(|l| l.get("a2a-worker-controller/expires-at").cloned())
        .collect();
    expiries.sort();
    let mut want = vec![
        (expires_millis / 1000).to_string(),
        (capped_at / 1000).to_string(),
    ];
    want.sort();
    assert_eq!(expiries, want);

    // Refused above the ceiling, naming it.
    let e = control_error(
        &p.control(json!({"operation": "create", "task": "long", "ttl": "2h"})),
        "TASK_STATE_REJECTED",
    );
    assert_eq!(e["code"], "invalid_request");
    assert!(
        e["message"]
            .as_str()
            .unwrap_or("")
            .contains("MAX_WORKER_TTL (1h)"),
        "{e}"
    );

    // Listed with its expiry until then, across a restart of the controller.
    let short_id = short["worker"]["worker_id"].as_str().unwrap().to_string();
    p.restart();
    let still = listed(&p);
    let entry = still.iter().find(|w| w["worker_id"] == short_id.as_str());
    assert_eq!(
        entry.map(|w| w["expires_at"].clone()),
        Some(json!(expires)),
        "listed with its expiry before it passes: {still:?}"
    );
    let gone_at = wait_gone(&p, std::slice::from_ref(&short_id), Duration::from_secs(20));
    assert!(gone_at >= expires_millis, "never before its expiry");
    assert!(
        gone_at <= expires_millis + 1000 + 2500,
        "gone {} ms after expiry; the reap interval is 1 s",
        gone_at - expires_millis
    );
    let log = p.log_text();
    assert!(
        log.contains(&format!("reaper: stopped worker {short_id}")),
        "{log}"
    );
    let left = listed(&p);
    assert_eq!(
        left.len(),
        1,
        "the worker with an hour left stays: {left:?}"
    );
    assert_eq!(left[0]["task"], "capped");
}

#[test]
fn two_controllers_reap_the_same_workers_without_errors() {
    let Some(socket) = docker_socket() else {
        return;
    };
    let id = controller_id("ttl-two");
    let _cleanup = Cleanup::new(&socket, &id);
    let flags = ["-reap-interval=1s", "-worker-ready-timeout=0"];
    let a = Proc::start(&socket, &id, &flags);
    let b = Proc::start(&socket, &id, &flags);
    let mut ids = Vec::new();
    for i in 0..4 {
        let data = reply_data(
            &a.control(json!({"operation": "create", "task": format!("t{i}"), "ttl": "2s"})),
        );
        ids.push(data["worker"]["worker_id"].as_str().unwrap().to_string());
    }
    wait_gone(&b, &ids, Duration::from_secs(20));
    // Both keep reaping for a few more passes: nothing left to do is not an error either.
    std::thread::sleep(Duration::from_millis(2500));
    let logs = [a.log_text(), b.log_text()];
    let stopped = logs
        .iter()
        .map(|l| l.matches("reaper: stopped worker").count())
        .sum::<usize>();
    assert!(
        stopped >= ids.len(),
        "each worker stopped by one of them at least"
    );
    for log in &logs {
        for line in log.lines().filter(|l| l.contains("reap")) {
            assert!(
                !line.contains(" WARN ")
                    && !line.contains(" ERROR ")
                    && !line.contains("outcome=failed"),
                "{line}"
            );
        }
    }
}
