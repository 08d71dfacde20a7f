//! Suspend, resume and renew on Kubernetes, against the stand-in API server (its secrets as the
//! real kube-apiserver answered them, rec s42-suspend-records.txt): a suspended worker's pod is
//! deleted and its record is a Secret holding its labels and token (nothing of it in any pod);
//! it is listed `suspended` by a restarted controller, holds its task against a create, and is
//! resumed under the same pod name with the same token; a template without a workspace is
//! refused; renew patches the pod's label. `k8s_bench_suspend` (scripts/bench.sh) measures a
//! resume against a cold create.

use std::time::{Duration, Instant};

use a2a_worker_controller::testing::{K8sApi, K8sMethod};
use serde_json::{json, Value};

use crate::k8s_e2e::{api, pods, start};
use crate::k8s_support::{configured, Pki, Standin};
use crate::support::{control_error, controller_id, reply_data, Controls, Proc};

const NS: &str = "a2a";

fn secrets(api: &K8sApi) -> Vec<Value> {
    let (_, body) = api
        .call(
            K8sMethod::Get,
            &format!("/api/v1/namespaces/{NS}/secrets"),
            None,
        )
        .unwrap();
    serde_json::from_slice::<Value>(&body).unwrap()["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn state_of(p: &Proc, id: &str) -> Option<String> {
    reply_data(&p.control(json!({"operation": "list"})))["workers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["worker_id"] == id)
        .map(|w| w["state"].as_str().unwrap().to_string())
}

fn setup(tag: &str) -> (Pki, Standin, String, String) {
    let pki = Pki::new(tag);
    let standin = Standin::start(&pki, &["--ready-after", "0.2", "--confirm-after", "0.5"]);
    let id = controller_id(tag);
    let dir = crate::templates::test_dir(tag);
    let file = dir.join("templates.json");
    crate::templates::write_templates(
        &file,
        json!({
            "coder": {"workspace": {"size": "1Gi"}, "ttl": "1h"},
            "plain": {}
        }),
    );
    (
        pki,
        standin,
        id,
        format!("-worker-templates-file={}", file.display()),
    )
}

#[test]
fn a_suspended_pod_is_a_record_and_comes_back_under_its_name_with_its_token() {
    if !configured() {
        return;
    }
    let (pki, standin, id, flag) = setup("k8s-suspend");
    let mut p = start(&standin, &pki, &id, &[&flag]);
    let api = api(&standin, &pki);
    let made =
        reply_data(&p.control(json!({"operation": "create", "task": "nap", "template": "coder"})));
    let worker_id = made["worker"]["worker_id"].as_str().unwrap().to_string();
    let token = made["token"].as_str().unwrap().to_string();
    let pod_name = pods(&api)[0]["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string();

    let s = reply_data(&p.control(json!({"operation": "suspend", "worker_id": worker_id})));
    assert_eq!(s["worker"]["state"], "suspended", "{s}");
    let records = secrets(&api);
    assert_eq!(records.len(), 1, "{records:?}");
    let record = &records[0];
    assert_eq!(
        record["metadata"]["name"],
        pod_name.as_str(),
        "named as its pod"
    );
    assert_eq!(record["type"], "a2a-worker-controller/suspended-worker");
    assert_eq!(
        record["metadata"]["labels"]["a2a-worker-controller/worker-id"],
        worker_id.as_str()
    );
    assert!(record["metadata"]["labels"]["a2a-worker-controller/ttl-left"].is_string());
    assert!(
        !record.to_string().contains(&token),
        "the token only base64 in data"
    );
    // Its pod goes (its grace period), its claim stays.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !pods(&api).is_empty() {
        assert!(Instant::now() < deadline, "the pod was not deleted");
        std::thread::sleep(Duration::from_millis(100));
    }
    // Listed suspended, also by a restarted controller; a create of its task is refused.
    p.restart();
    assert_eq!(state_of(&p, &worker_id).as_deref(), Some("suspended"));
    let e = control_error(
        &p.control(json!({"operation": "create", "task": "nap", "template": "coder"})),
        "TASK_STATE_FAILED",
    );
    assert_eq!(e["code"], "worker_exists", "{e}");
    assert_eq!(e["state"], "suspended");
    assert!(pods(&api).is_empty(), "the refused create's pod is gone");
    let e = control_error(
        &p.control(json!({"operation": "renew", "worker_id": worker_id, "ttl": "1h"})),
        "TASK_STATE_FAILED",
    );
    assert_eq!(e["code"], "invalid_state");

    let r = reply_data(&p.control(json!({"operation": "resume", "worker_id": worker_id})));
    assert_eq!(r["worker"]["state"], "running", "{r}");
    assert_eq!(r["worker"]["worker_id"], worker_id.as_str());
    let now = pods(&api);
    assert_eq!(now.len(), 1);
    assert_eq!(
        now[0]["metadata"]["name"],
        pod_name.as_str(),
        "the same name"
    );
    let env = now[0]["spec"]["containers"][0]["env"].to_string();
    assert!(env.contains(&token), "its own token again");
    assert!(secrets(&api).is_empty(), "the record goes once it runs");
    assert!(
        r["worker"]["expires_at"].as_str().unwrap() != "",
        "its TTL left"
    );

    // Renew: the pod's label.
    reply_data(&p.control(json!({"operation": "renew", "worker_id": worker_id, "ttl": "30m"})));
    let label = pods(&api)[0]["metadata"]["labels"]["a2a-worker-controller/expires-at"].clone();
    let at: u64 = label.as_str().unwrap().parse().unwrap();
    let now_s = a2a_worker_controller::time::now_millis() / 1000;
    assert!(at > now_s + 1700 && at <= now_s + 1801, "{label}");

    // Suspended, then stopped: the record goes.
    reply_data(&p.control(json!({"operation": "suspend", "worker_id": worker_id})));
    reply_data(&p.control(json!({"operation": "stop", "worker_id": worker_id})));
    assert!(secrets(&api).is_empty());
    let deadline = Instant::now() + Duration::from_secs(20);
    while state_of(&p, &worker_id).is_some() {
        assert!(Instant::now() < deadline, "still listed after its stop");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_worker_without_a_workspace_is_not_suspended_on_kubernetes() {
    if !configured() {
        return;
    }
    let (pki, standin, id, flag) = setup("k8s-nosuspend");
    let p = start(&standin, &pki, &id, &[&flag]);
    let made =
        reply_data(&p.control(json!({"operation": "create", "task": "t", "template": "plain"})));
    let worker_id = made["worker"]["worker_id"].as_str().unwrap();
    let t = p.control(json!({"operation": "suspend", "worker_id": worker_id}));
    let e = control_error(&t, "TASK_STATE_REJECTED");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("template plain has none"),
        "{e}"
    );
    assert_eq!(state_of(&p, worker_id).as_deref(), Some("running"));
}

/// Benchmark, not a timed test (scripts/bench.sh runs it): on the stand-in, a resume → ready
/// (once the suspended pod is gone) against a cold create of the same template, interleaved,
/// p50 of BENCH_SUSPEND_ROUNDS (10).
#[test]
#[ignore = "a benchmark; scripts/bench.sh runs it"]
fn k8s_bench_suspend() {
    use crate::docker_bench::{ms, row};
    use crate::support::{p50, rounds};
    if !configured() {
        return;
    }
    let (pki, standin, id, flag) = setup("k8s-bench-suspend");
    let p = start(&standin, &pki, &id, &[&flag]);
    let api = api(&standin, &pki);
    let n = rounds("BENCH_SUSPEND_ROUNDS", 10);
    let napper = reply_data(
        &p.control(json!({"operation": "create", "task": "napper", "template": "coder"})),
    );
    let nap = napper["worker"]["worker_id"].as_str().unwrap().to_string();
    let (mut cold, mut resume) = (Vec::new(), Vec::new());
    for i in 0..n {
        let started = Instant::now();
        let made = reply_data(&p.control(
            json!({"operation": "create", "task": format!("cold-{i}"), "template": "coder"}),
        ));
        cold.push(started.elapsed());
        let cold_id = made["worker"]["worker_id"].as_str().unwrap().to_string();
        reply_data(
            &p.control(json!({"operation": "stop", "worker_id": cold_id, "workspace": "delete"})),
        );
        reply_data(&p.control(json!({"operation": "suspend", "worker_id": nap})));
        // Resumed once its pod is gone (a resume within the old pod's grace period waits
        // for it first).
        let deadline = Instant::now() + Duration::from_secs(20);
        while pods(&api)
            .iter()
            .any(|p| p["metadata"]["labels"]["a2a-worker-controller/worker-id"] == nap.as_str())
        {
            assert!(Instant::now() < deadline, "the suspended pod did not go");
            std::thread::sleep(Duration::from_millis(20));
        }
        let started = Instant::now();
        reply_data(&p.control(json!({"operation": "resume", "worker_id": nap})));
        resume.push(started.elapsed());
    }
    let (cold, resume) = (p50(cold), p50(resume));
    row(
        "Kubernetes stand-in: resume → ready, p50 of 10 ÷ a cold create",
        &format!(
            "{:.1} ms ÷ {:.1} ms = ×{:.2}",
            ms(resume),
            ms(cold),
            resume.as_secs_f64() / cold.as_secs_f64()
        ),
        "≤ ×1.2",
    );
}
