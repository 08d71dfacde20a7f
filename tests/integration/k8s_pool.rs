//! Warm pools on Kubernetes, against the stand-in API server with its kubelet
//! running each pod as a real echo-worker process (`--run-workers`): member pods are started
//! and never listed; before activation a member answers 401 to everything but its card; a
//! create takes one (the member pod labelled as the worker, its task's pod name held by a
//! gated binding pod that is never scheduled), a second activation is refused, the slot is
//! refilled; nothing secret is in any pod; a create of the task is answered with the pooled
//! worker, and after a stop waits for it to go; an empty pool falls back to cold creates; a
//! member deleted by hand is replaced; a restart adopts the members it finds; two controllers
//! of one id keep N members between them and ten racing creates of one task make one worker;
//! a template change drains the members; a pooled worker's TTL is kept; a member that never
//! answers its activation is removed; an image without the contract keeps no members; `check`
//! asks what a pool needs. `k8s_bench_pool` (scripts/bench.sh) measures pooled against cold
//! creates.

use std::time::{Duration, Instant};

use a2a_worker_controller::testing::{pod_name, K8sApi, K8sMethod};
use serde_json::{json, Value};

use crate::k8s_e2e::{api, pods, start};
use crate::k8s_support::{configured, Pki, Standin};
use crate::pool::{assert_unbound, burst, create, listed, race_for_one_task, wait_ready_here};
use crate::support::controller_id;
use crate::support::*;
use crate::templates::{test_dir, write_templates};

const NS: &str = "a2a";
const MEMBER: &str = "a2a-worker-controller/pool-member";
const WORKER_ID: &str = "a2a-worker-controller/worker-id";
const BINDING: &str = "a2a-worker-controller/binding";

/// A stand-in whose kubelet runs the echo worker for every pod (recording the verbs of the
/// calls it answers and the pods created in `pki`'s `record`).
fn running_standin(pki: &Pki) -> Standin {
    let record = pki.dir.join("record");
    std::fs::create_dir_all(&record).unwrap();
    Standin::start(
        pki,
        &[
            "--run-workers",
            env!("CARGO_BIN_EXE_a2a-echo-worker"),
            "--record",
            record.to_str().unwrap(),
        ],
    )
}

fn label<'v>(pod: &'v Value, key: &str) -> Option<&'v str> {
    pod["metadata"]["labels"][key].as_str()
}

fn name_of(pod: &Value) -> String {
    pod["metadata"]["name"].as_str().unwrap_or("").to_string()
}

fn ready(pod: &Value) -> bool {
    pod["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
        && pod["metadata"]["deletionTimestamp"].is_null()
}

/// The unclaimed, ready member pods of controller `id`, by name.
fn members(api: &K8sApi, id: &str) -> Vec<Value> {
    let mut v: Vec<Value> = pods(api)
        .into_iter()
        .filter(|p| {
            label(p, "a2a-worker-controller/owner") == Some(id)
                && label(p, MEMBER).is_some()
                && label(p, WORKER_ID).is_none()
                && ready(p)
        })
        .collect();
    v.sort_by_key(name_of);
    v
}

fn bindings(api: &K8sApi) -> Vec<Value> {
    pods(api)
        .into_iter()
        .filter(|p| label(p, BINDING).is_some())
        .collect()
}

fn wait_members(api: &K8sApi, id: &str, n: usize) -> Vec<Value> {
    let mut found = Vec::new();
    wait_until(&format!("{n} ready member pods"), PATIENCE, || {
        found = members(api, id);
        found.len() == n
    });
    found
}

/// Where the test reaches a pod's worker: its pod IP (a loopback address of its own).
fn address_of(pod: &Value) -> std::net::SocketAddr {
    format!("{}:9090", pod["status"]["podIP"].as_str().unwrap())
        .parse()
        .unwrap()
}

/// The pod of worker `worker_id`.
fn pod_of(api: &K8sApi, worker_id: &str) -> Value {
    pods(api)
        .into_iter()
        .find(|p| label(p, WORKER_ID) == Some(worker_id))
        .unwrap_or_else(|| panic!("the pod of worker {worker_id}"))
}

fn was_pooled(api: &K8sApi, worker_id: &str) -> bool {
    label(&pod_of(api, worker_id), MEMBER).is_some()
}

fn templates(pool: u32, env: &str) -> Value {
    json!({
        "warm": {"image": "a2a-echo-worker:dev", "pool": pool, "env": {"POOL_TEST": env}},
        "cold": {"image": "a2a-echo-worker:dev"}
    })
}

fn delete(api: &K8sApi, name: &str) {
    api.call(
        K8sMethod::Delete,
        &format!("/api/v1/namespaces/{NS}/pods/{name}"),
        None,
    )
    .unwrap();
}

#[test]
fn kubernetes_keeps_a_warm_pool() {
    if !configured() {
        return;
    }
    let pki = Pki::new("k8s-pool");
    let standin = running_standin(&pki);
    let api = api(&standin, &pki);
    let id = controller_id("k8s-pool");
    let dir = test_dir("k8s-pool");
    let file = dir.join("templates.json");
    write_templates(&file, templates(2, "one"));
    let flag = format!("-worker-templates-file={}", file.display());
    let mut p = start(&standin, &pki, &id, &[&flag, "-reap-interval=1s"]);

    // Two member pods, started and unbound: never listed as workers.
    let first = wait_members(&api, &id, 2);
    wait_ready_here(&p, 2);
    assert!(listed(&p).is_empty());

    // Before activation: the card (listing the contract), 401 for the rest; nothing secret in
    // the pod.
    let addr = address_of(&first[0]);
    assert_unbound(addr);
    let text = first[0].to_string();
    assert!(text.contains("A2A_ACTIVATION_SHA256"), "{text}");
    for word in ["INTERACTIVE_AUTH_TOKEN", "ANTHROPIC_AUTH_TOKEN", TOKEN] {
        assert!(!text.contains(word), "{word} in a member pod");
    }

    // A create takes a member: its pod labelled as the worker, its task's pod name held by a
    // binding that is never scheduled; its token its own; listed like any worker.
    let mut w = crate::watch::Watch::start(p.addr, json!({"operation": "watch"}));
    w.task_id();
    assert!(w.snapshot().is_empty(), "members are never watched");
    let made = create(&p, "pooled task", "warm");
    let (worker, token) = (made["worker"].clone(), made["token"].as_str().unwrap());
    let wid = worker["worker_id"].as_str().unwrap().to_string();
    let pod = pod_of(&api, &wid);
    assert!(label(&pod, MEMBER).is_some(), "taken from the pool: {pod}");
    let member = name_of(&pod);
    assert!(first.iter().any(|m| name_of(m) == member));
    assert_eq!(
        pod["metadata"]["annotations"]["a2a-worker-controller/task"],
        "pooled task"
    );
    assert_eq!(
        worker["a2a_url"],
        format!("http://{member}.a2a-workers.{NS}.svc.cluster.local:9090")
    );
    let binding = pods(&api)
        .into_iter()
        .find(|b| name_of(b) == pod_name(&id, "admin", "pooled task"))
        .expect("the binding under the task's pod name");
    assert_eq!(label(&binding, BINDING), Some(member.as_str()));
    assert_eq!(
        binding["spec"]["schedulingGates"][0]["name"],
        "a2a-worker-controller/binding"
    );
    assert!(binding["spec"]["nodeName"].is_null(), "never scheduled");
    assert_eq!(
        binding["status"]["conditions"][0]["reason"],
        "SchedulingGated"
    );
    let url = format!("http://{}", address_of(&pod));
    let answer = crate::docker_e2e::send_to_worker(&url, Some(token), "hello pool");
    assert_eq!(answer.status, 200, "{}", answer.text());
    let other = crate::docker_e2e::send_to_worker(&url, Some(TOKEN), "hello pool");
    assert_eq!(other.status, 401, "only the worker's own token opens it");
    let added = w.event().unwrap();
    assert_eq!(
        crate::watch::kind_and_task(&added),
        ("added".into(), "pooled task".into()),
        "{added}"
    );
    drop(w);
    let workers = listed(&p);
    assert_eq!(workers.len(), 1, "{workers:?}");
    assert_eq!(workers[0]["worker_id"], wid.as_str());
    assert_eq!(workers[0]["task"], "pooled task");
    assert_eq!(workers[0]["template"], "warm");
    assert_eq!(workers[0]["state"], "running");
    // Its task is its own, as a cold worker's is.
    for template in ["warm", "cold"] {
        let again = p.expect_failure(
            json!({"operation": "create", "task": "pooled task", "template": template}),
            "worker_exists",
        );
        assert_eq!(again["worker_id"], wid.as_str());
    }
    // A second activation, with any secret, is refused.
    let twice = request(
        address_of(&pod),
        "POST",
        "/activate",
        &[("Authorization", "Bearer anything")],
        b"{}",
    );
    assert_eq!(twice.status, 409);
    // Nothing secret in any pod after the claim either.
    let all = Value::Array(pods(&api)).to_string();
    assert!(!all.contains(token), "the worker's token in a pod");
    // The slot is refilled.
    wait_until("the slot refilled", PATIENCE, || {
        let now = members(&api, &id);
        now.len() == 2 && now.iter().all(|m| name_of(m) != member)
    });

    // Stopped like any worker; a create of its task right after waits for it to go (its
    // binding held the name), then makes the task's pod; the binding is gone.
    let stopped = reply_data(&p.control(json!({"operation": "stop", "worker_id": wid})));
    assert_eq!(stopped["worker"]["worker_id"], wid.as_str());
    let cold = create(&p, "pooled task", "cold");
    let cold_id = cold["worker"]["worker_id"].as_str().unwrap().to_string();
    assert_eq!(
        name_of(&pod_of(&api, &cold_id)),
        pod_name(&id, "admin", "pooled task")
    );
    assert!(bindings(&api).is_empty(), "{:?}", bindings(&api));
    reply_data(&p.control(json!({"operation": "stop", "worker_id": cold_id})));

    // A member deleted by hand is replaced.
    let before = wait_members(&api, &id, 2);
    delete(&api, &name_of(&before[0]));
    let gone_uid = before[0]["metadata"]["uid"].clone();
    wait_until("the deleted member replaced", PATIENCE, || {
        let now = members(&api, &id);
        now.len() == 2 && now.iter().all(|m| m["metadata"]["uid"] != gone_uid)
    });

    // A restart adopts the members it finds: the same ones, no more.
    let uids =
        |v: &[Value]| -> Vec<Value> { v.iter().map(|m| m["metadata"]["uid"].clone()).collect() };
    let kept = uids(&wait_members(&api, &id, 2));
    p.restart();
    wait_ready_here(&p, 2);
    assert_eq!(uids(&members(&api, &id)), kept, "adopted, not replaced");

    // Two controllers of one id keep N between them; ten racing creates of one task (five
    // through each) make one worker, and no member is lost.
    let mut q = start(&standin, &pki, &id, &[&flag]);
    wait_ready_here(&q, 2);
    assert_eq!(members(&api, &id).len(), 2, "not 2N");
    race_for_one_task(&p, &q);
    wait_members(&api, &id, 2);
    wait_until(
        "two members, one worker and at most its binding",
        PATIENCE,
        || {
            let live: Vec<Value> = pods(&api)
                .into_iter()
                .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
                .collect();
            live.len() <= 4 && bindings(&api).len() <= 1
        },
    );
    q.terminate();
    drop(q);
    // This controller's own look at the members, after the race settled (it looks every
    // second): a claim of a member the other replica took meanwhile would be passed over.
    wait_members(&api, &id, 2);
    std::thread::sleep(Duration::from_millis(2500));
    wait_ready_here(&p, 2);

    // A burst of 2N against a pool of N: N from the pool, N cold, all succeed; then full.
    let burst = burst(&p, 4);
    let pooled = burst
        .iter()
        .filter(|d| was_pooled(&api, d["worker"]["worker_id"].as_str().unwrap()))
        .count();
    assert_eq!(
        pooled,
        2,
        "N of 2N from the pool; the controller said:\n{}",
        p.log_text()
    );
    wait_members(&api, &id, 2);
    assert_eq!(listed(&p).len(), 5);

    // A template change drains the members: new ones, of the new revision.
    let old = uids(&members(&api, &id));
    write_templates(&file, templates(2, "two"));
    wait_until("the members replaced after the change", PATIENCE, || {
        let now = members(&api, &id);
        now.len() == 2 && uids(&now).iter().all(|u| !old.contains(u))
    });
    wait_ready_here(&p, 2);
    assert!(members(&api, &id)[0].to_string().contains("\"two\""));
    let changed = create(&p, "after the change", "warm");
    assert!(was_pooled(
        &api,
        changed["worker"]["worker_id"].as_str().unwrap()
    ));

    // A pooled worker's TTL is kept like a cold one's: reaped, its binding with it.
    wait_ready_here(&p, 2);
    let short =
        reply_data(&p.control(
            json!({"operation": "create", "task": "short", "template": "warm", "ttl": "2s"}),
        ));
    let short_id = short["worker"]["worker_id"].as_str().unwrap().to_string();
    assert!(was_pooled(&api, &short_id));
    assert!(!short["worker"]["expires_at"]
        .as_str()
        .unwrap_or("")
        .is_empty());
    let short_binding = pod_name(&id, "admin", "short");
    wait_until(
        "the pooled worker reaped at its TTL, with its binding",
        PATIENCE,
        || {
            pods(&api).iter().all(|p| {
                label(p, WORKER_ID) != Some(short_id.as_str()) && name_of(p) != short_binding
            })
        },
    );

    // The pool's calls are the Role's verbs (patch among them), and every pod it sent (members,
    // bindings, cold workers) validates against the official schemas.
    let record = pki.dir.join("record");
    let verbs: std::collections::BTreeSet<String> = std::fs::read_to_string(record.join("verbs"))
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    assert!(verbs.contains("patch"), "{verbs:?}");
    let granted: Vec<&str> = crate::k8s_manifests::VERBS.split(',').collect();
    assert!(
        verbs.iter().all(|v| granted.contains(&v.as_str())),
        "{verbs:?} not all in the Role ({granted:?})"
    );
    crate::k8s_support::assert_manifests_ok(&crate::k8s_support::check_manifests(
        &record,
        crate::k8s_manifests::VERBS,
    ));
}

#[test]
fn a_k8s_member_that_never_answers_its_activation_is_removed() {
    if !configured() {
        return;
    }
    let pki = Pki::new("k8s-pool-hang");
    let standin = running_standin(&pki);
    let api = api(&standin, &pki);
    let id = controller_id("k8s-pool-hang");
    let dir = test_dir("k8s-pool-hang");
    let pod_template = dir.join("hang.json");
    std::fs::write(
        &pod_template,
        json!({"spec": {"containers": [{"name": "worker", "args": ["--hang-activation"]}]}})
            .to_string(),
    )
    .unwrap();
    let file = dir.join("templates.json");
    write_templates(
        &file,
        json!({"warm": {"image": "a2a-echo-worker:dev", "pool": 1,
                        "pod_template": pod_template.display().to_string()}}),
    );
    let flag = format!("-worker-templates-file={}", file.display());
    let p = start(&standin, &pki, &id, &[&flag, "-pool-activation-timeout=2s"]);
    let member = wait_members(&api, &id, 1);
    wait_ready_here(&p, 1);
    // The member is removed and the create made cold: it never fails for want of a member.
    let made = create(&p, "hung", "warm");
    let wid = made["worker"]["worker_id"].as_str().unwrap();
    assert!(!was_pooled(&api, wid), "made cold");
    let uid = &member[0]["metadata"]["uid"];
    assert!(
        pods(&api).iter().all(|p| &p["metadata"]["uid"] != uid),
        "the hung member is gone"
    );
    assert!(p.log_text().contains("could not be bound and was removed"));
}

/// Issue 31's Kubernetes figure: creates from the pool against cold creates, on the stand-in
/// with real worker processes, in one run (scripts/bench.sh).
#[test]
#[ignore = "a benchmark: scripts/bench.sh runs it"]
fn k8s_bench_pool() {
    if !configured() {
        return;
    }
    let rounds = rounds("A2A_BENCH_POOL_ROUNDS", 20);
    let pki = Pki::new("k8s-pool-bench");
    let standin = running_standin(&pki);
    let api = api(&standin, &pki);
    let id = controller_id("k8s-pool-bench");
    let dir = test_dir("k8s-pool-bench");
    let file = dir.join("templates.json");
    write_templates(&file, templates(4, "bench"));
    let flag = format!("-worker-templates-file={}", file.display());
    let p = start(&standin, &pki, &id, &[&flag]);
    let mut cold = Vec::new();
    let mut pooled = Vec::new();
    for i in 0..rounds {
        let at = Instant::now();
        let w = create(&p, &format!("cold {i}"), "cold");
        cold.push(at.elapsed());
        reply_data(&p.control(json!({"operation": "stop", "worker_id": w["worker"]["worker_id"]})));
        wait_members(&api, &id, 4);
        wait_ready_here(&p, 4);
        let at = Instant::now();
        let w = create(&p, &format!("pooled {i}"), "warm");
        pooled.push(at.elapsed());
        assert!(was_pooled(&api, w["worker"]["worker_id"].as_str().unwrap()));
        reply_data(&p.control(json!({"operation": "stop", "worker_id": w["worker"]["worker_id"]})));
    }
    let (c, w) = (p50(cold), p50(pooled));
    let ratio = w.as_secs_f64() / c.as_secs_f64();
    eprintln!(
        "K8S pool: pooled create p50 {:.1} ms, cold p50 {:.1} ms (x{ratio:.3}) over {rounds} each",
        w.as_secs_f64() * 1000.0,
        c.as_secs_f64() * 1000.0,
    );
    eprintln!(
        "ROW|Kubernetes stand-in: create from the pool, p50 ({rounds} creates, pool 4)|{:.1} ms, ×{ratio:.3} of a cold create ({:.1} ms)|≤ ×0.3",
        w.as_secs_f64() * 1000.0,
        c.as_secs_f64() * 1000.0,
    );
}

/// `check` for a pooled template asks whether the Role may patch pods and dry-runs a claim's
/// binding pod; without patch it says so in one line.
#[test]
fn check_asks_what_a_k8s_pool_needs() {
    if !configured() {
        return;
    }
    let pki = Pki::new("k8s-pool-check");
    let mut standin = Standin::start(&pki, &["--psa", "restricted"]);
    let dir = test_dir("k8s-pool-check");
    let file = dir.join("templates.json");
    write_templates(&file, templates(2, "check"));
    let mut args = crate::k8s_e2e::flags(&standin, &pki);
    args.push(format!("-worker-templates-file={}", file.display()));
    args.push("-worker-image=a2a-echo-worker:dev".into());
    let (code, out, err) = crate::cli_client::check(&args, &crate::cli_client::CHECK_ENV);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.contains("template warm: image a2a-echo-worker:dev: a worker pod passes")
            && out.contains("may patch pods, and a claim's binding pod passes too"),
        "{out}"
    );
    standin.send("deny patch");
    let (code, out, err) = crate::cli_client::check(&args, &crate::cli_client::CHECK_ENV);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(
        err.contains("template warm: FAILED: its pool needs the Role to allow patch pods"),
        "{err}"
    );
}

/// An image that does not speak the activation contract (the Kubernetes API cannot read image
/// labels, so each member's card is asked): its member is removed, the log says why once, the
/// pool backs off, and creates are made cold.
#[test]
fn a_k8s_image_without_the_contract_keeps_no_members() {
    if !configured() {
        return;
    }
    let pki = Pki::new("k8s-pool-plain");
    let standin = running_standin(&pki);
    let api = api(&standin, &pki);
    let id = controller_id("k8s-pool-plain");
    let dir = test_dir("k8s-pool-plain");
    let file = dir.join("templates.json");
    write_templates(
        &file,
        json!({"warm": {"image": "a2a-echo-worker:no-contract", "pool": 1}}),
    );
    let flag = format!("-worker-templates-file={}", file.display());
    let p = start(&standin, &pki, &id, &[&flag]);
    wait_until("the member refused", PATIENCE, || {
        p.log_text()
            .contains("image a2a-echo-worker:no-contract does not speak the activation contract")
    });
    let made = create(&p, "plain", "warm");
    let wid = made["worker"]["worker_id"].as_str().unwrap();
    assert!(!was_pooled(&api, wid), "made cold");
    let log = p.log_text();
    assert_eq!(
        log.matches("a member could not be started").count(),
        1,
        "said once while it backs off:\n{log}"
    );
    assert!(members(&api, &id).is_empty());
}

#[test]
fn a_k8s_pool_follows_the_demand_and_a_claimed_pod_says_when_it_was_claimed() {
    if !configured() {
        return;
    }
    let pki = Pki::new("k8s-demand");
    let standin = running_standin(&pki);
    let api = api(&standin, &pki);
    let id = controller_id("k8s-demand");
    let dir = test_dir("k8s-demand");
    let file = dir.join("templates.json");
    write_templates(
        &file,
        json!({"warm": {"image": "a2a-echo-worker:dev", "pool": {"min": 0, "max": 3}}}),
    );
    let flag = format!("-worker-templates-file={}", file.display());
    let p = start(
        &standin,
        &pki,
        &id,
        &[
            &flag,
            "-pool-demand-window=20s",
            "-pool-member-start=10s",
            "-pool-idle-after=10s",
        ],
    );
    let wanted = |n: u32| {
        let line = format!("a2a_pool_wanted{{template=\"warm\"}} {n}\n");
        wait_until(&format!("a pool wanted of {n}"), PATIENCE, || {
            p.get("/metrics").text().contains(&line)
        });
    };
    wanted(0);
    assert!(members(&api, &id).is_empty());
    // Two cold creates ask for two members (2 in 20 s × 10 s is one, plus one; max 3).
    create(&p, "one", "warm");
    create(&p, "two", "warm");
    wanted(2);
    wait_members(&api, &id, 2);
    wait_ready_here(&p, 2);
    let before = a2a_worker_controller::time::now_millis() / 1000;
    let made = create(&p, "three", "warm");
    let wid = made["worker"]["worker_id"].as_str().unwrap();
    assert!(was_pooled(&api, wid), "served from the pool");
    let pod = pod_of(&api, wid);
    let claimed: u64 = label(&pod, "a2a-worker-controller/claimed-at")
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("a claimed-at label: {pod}"));
    assert!(claimed / 1000 >= before, "claimed now: {claimed}");
    let created = a2a_worker_controller::time::parse_rfc3339_millis(
        made["worker"]["created_at"].as_str().unwrap(),
    )
    .unwrap();
    assert!(
        (created / 1000).abs_diff(claimed / 1000) <= 1,
        "created_at is the claim: {created} vs {claimed}"
    );
    // Nobody creates for the idle period: back to min.
    wanted(0);
    wait_members(&api, &id, 0);
}
