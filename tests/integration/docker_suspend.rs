//! Suspend, resume and renew on the real dockerd: a suspended worker's container is stopped
//! (its own filesystem kept, its memory given back), listed as `suspended` by this and a
//! restarted controller, resumed ready with its token; renew keeps the new expiry in a lease
//! volume every list reads, wins against the reaper, and works with the worker's own token.

use std::time::{Duration, Instant};

use a2a_worker_controller::time::{now_millis, parse_rfc3339_millis};
use serde_json::{json, Value};

use crate::docker_e2e::send_to_worker;
use crate::docker_support::*;
use crate::support::{control_error, reply_data, Controls};
use crate::templates::tell;

fn listed(p: &Proc) -> Vec<Value> {
    reply_data(&p.control(json!({"operation": "list"})))["workers"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn state_of(p: &Proc, id: &str) -> Option<String> {
    listed(p)
        .into_iter()
        .find(|w| w["worker_id"] == id)
        .map(|w| w["state"].as_str().unwrap_or("").to_string())
}

/// The container of worker `id` (by its worker-id label).
fn container_of(cleanup: &Cleanup, id: &str) -> String {
    cleanup
        .owned()
        .into_iter()
        .find(|c| {
            c.labels
                .as_ref()
                .and_then(|l| l.get("a2a-worker-controller/worker-id"))
                .is_some_and(|w| w == id)
        })
        .map(|c| c.id)
        .unwrap_or_else(|| panic!("no container for worker {id}"))
}

fn expiry_ms(worker: &Value) -> u64 {
    parse_rfc3339_millis(worker["expires_at"].as_str().unwrap_or("")).unwrap_or(0)
}

#[test]
fn a_suspended_worker_keeps_its_files_and_token_and_a_restarted_controller_resumes_it() {
    let Some(socket) = docker_socket() else {
        return;
    };
    let id = controller_id("suspend");
    let cleanup = Cleanup::new(&socket, &id);
    let mut p = Proc::start(&socket, &id, &["-max-workers=1"]);
    let created =
        reply_data(&p.control(json!({"operation": "create", "task": "nap", "ttl": "1h"})));
    let worker_id = created["worker"]["worker_id"].as_str().unwrap().to_string();
    let token = created["token"].as_str().unwrap().to_string();
    let url = created["worker"]["a2a_url"].as_str().unwrap().to_string();
    let container = container_of(&cleanup, &worker_id);
    // A file in the container's own writable layer (no volume is mounted at /workspace).
    assert_eq!(
        tell(&url, &token, "disk write note.txt kept"),
        "wrote note.txt"
    );

    let mut watch = crate::watch::Watch::start(p.addr, json!({"operation": "watch"}));
    watch.task_id();
    assert_eq!(watch.event().unwrap()["type"], "added");
    assert_eq!(watch.event().unwrap()["type"], "synced");
    let suspended = reply_data(&p.control(json!({"operation": "suspend", "worker_id": worker_id})));
    assert_eq!(suspended["worker"]["state"], "suspended", "{suspended}");
    let heard = watch.event().unwrap();
    assert_eq!(heard["type"], "suspended", "{heard}");
    assert_eq!(heard["worker"]["state"], "suspended");
    let running = docker_cli(
        &socket,
        &["inspect", "-f", "{{.State.Running}}", &container],
        None,
    );
    assert_eq!(running.trim(), "false", "no process runs while suspended");
    // Listed as suspended, by the filter too; holds its task; holds no place (MAX_WORKERS=1).
    let only = reply_data(&p.control(json!({"operation": "list", "state": "suspended"})));
    assert_eq!(only["workers"][0]["worker_id"], worker_id.as_str());
    let e = p.expect_failure(
        json!({"operation": "create", "task": "nap"}),
        "worker_exists",
    );
    assert_eq!(e["state"], "suspended");
    let other = reply_data(&p.control(json!({"operation": "create", "task": "other"})));
    let other_id = other["worker"]["worker_id"].as_str().unwrap().to_string();
    p.expect_failure(
        json!({"operation": "resume", "worker_id": worker_id}),
        "capacity",
    );
    reply_data(&p.control(json!({"operation": "stop", "worker_id": other_id})));

    // A restarted controller sees it suspended: the engine's state is the record.
    drop(watch);
    p.restart();
    let mut watch = crate::watch::Watch::start(p.addr, json!({"operation": "watch"}));
    watch.task_id();
    let snapshot = watch.event().unwrap();
    assert_eq!(snapshot["worker"]["state"], "suspended", "{snapshot}");
    assert_eq!(watch.event().unwrap()["type"], "synced");
    assert_eq!(state_of(&p, &worker_id).as_deref(), Some("suspended"));
    let started = Instant::now();
    let resumed = reply_data(&p.control(json!({"operation": "resume", "worker_id": worker_id})));
    assert_eq!(resumed["worker"]["state"], "running", "{resumed}");
    assert!(started.elapsed() < Duration::from_secs(30));
    let resumed_url = resumed["worker"]["a2a_url"].as_str().unwrap();
    assert_eq!(resumed_url, url, "the same published port");
    // Ready before the reply: its token works at once, a wrong one does not.
    let r = send_to_worker(resumed_url, Some(&token), "hello again");
    assert_eq!(r.status, 200, "{}", r.text());
    let r = send_to_worker(resumed_url, Some(&"f".repeat(64)), "hello");
    assert_eq!(r.status, 401);
    assert_eq!(
        tell(resumed_url, &token, "disk read note.txt"),
        "kept",
        "its own filesystem survived"
    );
    // Its TTL did not run while suspended: still about an hour.
    assert!(
        expiry_ms(&resumed["worker"]) > now_millis() + 3_400_000,
        "{resumed}"
    );

    // Suspended, then removed by hand: gone from the list (and its lease swept).
    reply_data(&p.control(json!({"operation": "suspend", "worker_id": worker_id})));
    docker_cli(&socket, &["rm", "-f", &container], None);
    assert_eq!(state_of(&p, &worker_id), None);
    drop(cleanup);
}

#[test]
fn renew_wins_against_the_reaper_and_a_worker_renews_itself_with_its_token() {
    let Some(socket) = docker_socket() else {
        return;
    };
    let id = controller_id("renew");
    let cleanup = Cleanup::new(&socket, &id);
    let p = Proc::start(&socket, &id, &["-reap-interval=1s", "-max-worker-ttl=2h"]);
    let short = reply_data(&p.control(json!({"operation": "create", "task": "busy", "ttl": 3})));
    let busy = short["worker"]["worker_id"].as_str().unwrap().to_string();
    let token = short["token"].as_str().unwrap().to_string();
    let idle = reply_data(&p.control(json!({"operation": "create", "task": "idle", "ttl": 3})));
    let idle_id = idle["worker"]["worker_id"].as_str().unwrap().to_string();

    // The worker renews itself, with its own token, before its TTL ends.
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
        "params": {"message": {"messageId": "m", "role": "ROLE_USER",
            "parts": [{"data": {"operation": "renew", "worker_id": busy, "ttl": "1h"}}]}}});
    let r = crate::support::request(
        p.addr,
        "POST",
        "/a2a",
        &[("Authorization", &format!("Bearer {token}"))],
        body.to_string().as_bytes(),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let renewed = reply_data(&r.json()["result"]["task"]);
    assert!(
        expiry_ms(&renewed["worker"]) > now_millis() + 3_500_000,
        "{renewed}"
    );
    // The same token lists nothing and renews no other worker.
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "SendMessage",
        "params": {"message": {"messageId": "m2", "role": "ROLE_USER",
            "parts": [{"data": {"operation": "renew", "worker_id": idle_id, "ttl": "1h"}}]}}});
    let r = crate::support::request(
        p.addr,
        "POST",
        "/a2a",
        &[("Authorization", &format!("Bearer {token}"))],
        list.to_string().as_bytes(),
    );
    let e = control_error(&r.json()["result"]["task"], "TASK_STATE_FAILED");
    assert_eq!(e["code"], "not_found");

    // The reaper takes the idle one and leaves the renewed one, whose expiry every list
    // (and a restart) reads from its lease.
    let deadline = Instant::now() + Duration::from_secs(20);
    while state_of(&p, &idle_id).is_some() {
        assert!(Instant::now() < deadline, "the idle worker was not reaped");
        std::thread::sleep(Duration::from_millis(200));
    }
    let still = listed(&p)
        .into_iter()
        .find(|w| w["worker_id"] == busy.as_str())
        .expect("the renewed worker survives the reaper");
    assert_eq!(
        still["expires_at"],
        renewed["worker"]["expires_at"],
        "{}",
        p.log_text()
    );
    let leases = docker_cli(
        &socket,
        &[
            "volume",
            "ls",
            "-q",
            "--filter",
            &format!("label=a2a-worker-controller/lease={busy}"),
        ],
        None,
    );
    assert_eq!(
        leases.lines().count(),
        1,
        "one lease: the older ones removed: {leases}"
    );
    reply_data(&p.control(json!({"operation": "stop", "worker_id": busy})));
    let leases = docker_cli(
        &socket,
        &[
            "volume",
            "ls",
            "-q",
            "--filter",
            &format!("label=a2a-worker-controller/lease={busy}"),
        ],
        None,
    );
    assert_eq!(leases.trim(), "", "a stop removes its leases");
    drop(cleanup);
}

#[test]
fn a_template_that_suspends_on_expiry_is_suspended_then_stopped_after_its_suspended_ttl() {
    let Some(socket) = docker_socket() else {
        return;
    };
    let dir = crate::templates::test_dir("docker-on-expiry");
    let file = dir.join("templates.json");
    crate::templates::write_templates(
        &file,
        json!({"napper": {"ttl": 2, "on_expiry": "suspend", "suspended_ttl": 4}}),
    );
    let id = controller_id("onexpiry");
    let cleanup = Cleanup::new(&socket, &id);
    let p = Proc::start(
        &socket,
        &id,
        &[
            "-reap-interval=1s",
            &format!("-worker-templates-file={}", file.display()),
        ],
    );
    let w =
        reply_data(&p.control(json!({"operation": "create", "task": "n", "template": "napper"})));
    let worker_id = w["worker"]["worker_id"].as_str().unwrap().to_string();
    let deadline = Instant::now() + Duration::from_secs(20);
    while state_of(&p, &worker_id).as_deref() != Some("suspended") {
        assert!(
            Instant::now() < deadline,
            "not suspended at its TTL's end:\n{}",
            p.log_text()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    while state_of(&p, &worker_id).is_some() {
        assert!(
            Instant::now() < deadline,
            "not stopped after its suspended_ttl"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(cleanup.owned().is_empty(), "the container is gone");
}

/// Benchmark, not a timed test (scripts/bench.sh runs it in release against a real engine):
/// resume → ready against a cold create, interleaved, p50 of BENCH_SUSPEND_ROUNDS (10); the
/// worker's resident memory before a suspend and after it (the process is gone: what it held is
/// the host's again); renew against a `list` of one worker through the same controller, p50 of
/// BENCH_ROUNDS (200). It reports; it never fails on a slow machine.
#[test]
#[ignore = "a benchmark; scripts/bench.sh runs it"]
fn docker_bench_suspend() {
    use crate::docker_bench::{ms, row, status_kib};
    use crate::support::{p50, rounds};
    let Some(socket) = docker_socket() else {
        return;
    };
    let id = controller_id("bench-suspend");
    let cleanup = Cleanup::new(&socket, &id);
    let p = Proc::start(&socket, &id, &[]);
    let n = rounds("BENCH_SUSPEND_ROUNDS", 10);
    let napper = reply_data(&p.control(json!({"operation": "create", "task": "napper"})));
    let nap_id = napper["worker"]["worker_id"].as_str().unwrap().to_string();
    let (mut cold, mut resume) = (Vec::new(), Vec::new());
    for i in 0..n {
        let started = Instant::now();
        let made =
            reply_data(&p.control(json!({"operation": "create", "task": format!("cold-{i}")})));
        cold.push(started.elapsed());
        let cold_id = made["worker"]["worker_id"].as_str().unwrap().to_string();
        reply_data(&p.control(json!({"operation": "stop", "worker_id": cold_id})));
        reply_data(&p.control(json!({"operation": "suspend", "worker_id": nap_id})));
        let started = Instant::now();
        let back = reply_data(&p.control(json!({"operation": "resume", "worker_id": nap_id})));
        resume.push(started.elapsed());
        assert_eq!(back["worker"]["state"], "running");
    }
    let (cold, resume) = (p50(cold), p50(resume));
    row(
        "Docker: resume → ready, p50 of 10 ÷ a cold create",
        &format!(
            "{:.1} ms ÷ {:.1} ms = ×{:.2}",
            ms(resume),
            ms(cold),
            resume.as_secs_f64() / cold.as_secs_f64()
        ),
        "≤ ×1.0",
    );

    // Memory: the worker's process before its suspend, and after (none left).
    let container = container_of(&cleanup, &nap_id);
    let pid_of = || {
        docker_cli(
            &socket,
            &["inspect", "-f", "{{.State.Pid}}", &container],
            None,
        )
        .trim()
        .parse::<u32>()
        .unwrap_or(0)
    };
    let before_pid = pid_of();
    let before = status_kib(before_pid, "VmRSS:");
    reply_data(&p.control(json!({"operation": "suspend", "worker_id": nap_id})));
    let after = match pid_of() {
        0 => 0,
        pid => status_kib(pid, "VmRSS:"),
    };
    let gone = !std::path::Path::new(&format!("/proc/{before_pid}")).exists();
    row(
        "Docker: memory given back by a suspend (the worker's RSS)",
        &format!(
            "{before} KiB before, {after} KiB after (process gone: {gone}): {:.0} %",
            100.0 * before.saturating_sub(after) as f64 / before.max(1) as f64
        ),
        "≥ 90 %",
    );
    reply_data(&p.control(json!({"operation": "resume", "worker_id": nap_id})));

    // Renew against a list of one worker.
    let m = rounds("BENCH_ROUNDS", 200);
    let (mut renew, mut list) = (Vec::new(), Vec::new());
    for _ in 0..m {
        let started = Instant::now();
        reply_data(&p.control(json!({"operation": "list"})));
        list.push(started.elapsed());
        let started = Instant::now();
        reply_data(&p.control(json!({"operation": "renew", "worker_id": nap_id, "ttl": "1h"})));
        renew.push(started.elapsed());
    }
    let (renew, list) = (p50(renew), p50(list));
    row(
        "Docker: renew ÷ a list of one worker, p50",
        &format!(
            "{:.2} ms ÷ {:.2} ms = ×{:.2}",
            ms(renew),
            ms(list),
            renew.as_secs_f64() / list.as_secs_f64()
        ),
        "≤ ×1.5",
    );
    drop(cleanup);
}
