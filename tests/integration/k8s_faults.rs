//! The Kubernetes backend's fault paths, each as a real kube-apiserver 1.36 showed it
//! (`../shared/reference/k8s-real/`), against the stand-in that now answers the same way:
//! graceful deletion, a create that fails while the API is away, refusals told apart,
//! unschedulable pods waited out, strict field validation, `check`, a dead node, not-ready
//! reasons, a pod deleted by someone else during a create, and one error mapping for list,
//! readiness and check.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::k8s_e2e::{api, flags, pods, refused_at_startup, start, wait_until_no_pods};
use crate::k8s_support::{configured, Pki, Standin};
use crate::streaming::{control_message, result_data, steps, stream};
use crate::support::{control_error, reply_data, Controls};
use crate::support::{controller_id, Proc};

fn create_id(p: &Proc, task: &str) -> String {
    reply_data(&p.control(json!({"operation": "create", "task": task})))["worker"]["worker_id"]
        .as_str()
        .unwrap()
        .to_string()
}

fn listed(p: &Proc) -> Vec<Value> {
    reply_data(&p.control(json!({"operation": "list"})))["workers"]
        .as_array()
        .unwrap()
        .clone()
}

/// How many DELETEs the stand-in saw (its `--record` verbs file).
fn deletes(record: &std::path::Path) -> usize {
    std::fs::read_to_string(record.join("verbs"))
        .unwrap_or_default()
        .lines()
        .filter(|l| *l == "delete")
        .count()
}

/// Defect 1: a stopped pod stays in its grace period (until the kubelet confirms): it is
/// `stopping`, a second stop and the reaper do not delete it again, MAX_WORKERS does not count
/// it, and a create for its task waits for it to go, then creates; on a node that never
/// confirms, the create says `worker_exists` with state `stopping`.
#[test]
fn a_stopping_pod_is_stopping_and_its_task_can_be_created_again() {
    if !configured() {
        return;
    }
    let pki = Pki::new("k8s-grace");
    let record = pki.dir.join("record");
    std::fs::create_dir_all(&record).unwrap();
    let mut standin = Standin::start(
        &pki,
        &[
            "--ready-after",
            "0.1",
            "--confirm-after",
            "1.5",
            "--record",
            record.to_str().unwrap(),
        ],
    );
    let id = controller_id("k8s-grace");
    let p = start(
        &standin,
        &pki,
        &id,
        &["-max-workers=1", "-worker-ready-timeout=5s"],
    );
    let first = create_id(&p, "again");
    let stopped = reply_data(&p.control(json!({"operation": "stop", "worker_id": first})));
    assert_eq!(stopped["worker"]["state"], "stopping", "{stopped}");
    let w = &listed(&p)[0];
    assert_eq!(w["state"], "stopping", "{w}");
    assert!(
        w["reason"].as_str().unwrap().contains("stopping since"),
        "{w}"
    );
    // Idempotent: completed again, nothing deleted again.
    let again = reply_data(&p.control(json!({"operation": "stop", "worker_id": first})));
    assert_eq!(again["worker"]["state"], "stopping");
    assert_eq!(deletes(&record), 1, "the second stop deleted nothing");
    // A stopping worker holds no place under MAX_WORKERS=1.
    let other = create_id(&p, "other");
    p.control(json!({"operation": "stop", "worker_id": other}));
    // Stop, then create for the same task just works: the create waits for the old pod.
    let started = Instant::now();
    let (_, events) = stream(
        p.addr,
        "SendStreamingMessage",
        control_message(json!({"operation": "create", "task": "again"})),
    );
    let said = steps(&events);
    assert!(
        said.iter()
            .any(|s| s.contains(&format!("previous worker {first} to finish stopping"))),
        "{said:?}"
    );
    let second = result_data(&events)["worker"].clone();
    assert_eq!(second["state"], "running", "{second}");
    assert_ne!(second["worker_id"], first.as_str());
    assert!(started.elapsed() >= Duration::from_millis(300));

    // A node that never confirms: the pod stays stopping, and a create for the task is told so
    // once WORKER_READY_TIMEOUT has passed.
    standin.send("node-down");
    let second = second["worker_id"].as_str().unwrap().to_string();
    let stopped = reply_data(&p.control(json!({"operation": "stop", "worker_id": second})));
    assert_eq!(stopped["worker"]["state"], "stopping");
    let q = start(&standin, &pki, &id, &["-worker-ready-timeout=1s"]);
    let e = q.expect_failure(
        json!({"operation": "create", "task": "again"}),
        "worker_exists",
    );
    assert_eq!(e["state"], "stopping", "{e}");
    assert_eq!(e["worker_id"], second.as_str());
    standin.send("node-up");
    wait_until_no_pods(&api(&standin, &pki));
}

/// Defect 1, the reaper: an expired worker whose pod is stopping is stopped once, not on every
/// pass.
#[test]
fn the_reaper_stops_a_pod_once_while_it_is_stopping() {
    if !configured() {
        return;
    }
    let pki = Pki::new("k8s-reap-once");
    let record = pki.dir.join("record");
    std::fs::create_dir_all(&record).unwrap();
    let mut standin = Standin::start(
        &pki,
        &["--ready-after", "0.1", "--record", record.to_str().unwrap()],
    );
    let id = controller_id("k8s-reap-once");
    let p = start(&standin, &pki, &id, &["-reap-interval=1s"]);
    reply_data(&p.control(json!({"operation": "create", "task": "short", "ttl": 1})));
    // The node will not confirm: the pod stays stopping across several reaper passes.
    standin.send("node-down");
    let until = Instant::now() + Duration::from_secs(10);
    while deletes(&record) == 0 {
        assert!(Instant::now() < until, "the reaper never stopped it");
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(3500));
    assert_eq!(deletes(&record), 1, "reaped once, not on every pass");
    assert_eq!(p.log_text().matches("reaper: stopped worker").count(), 1);
    assert_eq!(listed(&p)[0]["state"], "stopping");
    standin.send("node-up");
    wait_until_no_pods(&api(&standin, &pki));
}

/// Defect 2: the API server goes away while a create waits; the create fails
/// `backend_unavailable`, says its pod could not be removed yet, and the controller removes
/// it once the API is back.
#[test]
fn a_create_that_loses_the_api_removes_its_pod_when_the_api_returns() {
    if !configured() {
        return;
    }
    let pki = Pki::new("k8s-outage");
    let mut standin = Standin::start(&pki, &["--ready-after", "2"]);
    let id = controller_id("k8s-outage");
    let p = start(&standin, &pki, &id, &["-worker-ready-timeout=2s"]);
    let addr = p.addr;
    let create = std::thread::spawn(move || {
        crate::support::send_control(addr, json!({"operation": "create", "task": "restart"})).json()
    });
    // In flight: its pod is made, and it waits for it to be ready.
    let k8s = api(&standin, &pki);
    crate::support::wait_until("the create's pod made", Duration::from_secs(10), || {
        !pods(&k8s).is_empty()
    });
    standin.send("outage 5");
    let reply = create.join().unwrap();
    let e = control_error(&reply["result"]["task"], "TASK_STATE_FAILED");
    assert_eq!(e["code"], "backend_unavailable", "{e}");
    let message = e["message"].as_str().unwrap();
    assert!(
        message.contains("could not be removed yet") && message.contains("keeps trying"),
        "{e}"
    );
    // Once the API is back, the pod goes, and nothing of the failed create is listed.
    let api = k8s;
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok((_, body)) = api.call(
            a2a_worker_controller::testing::K8sMethod::Get,
            "/api/v1/namespaces/a2a/pods",
            None,
        ) {
            let v: Value = serde_json::from_slice(&body).unwrap();
            if v["items"].as_array().unwrap().is_empty() {
                break;
            }
        }
        assert!(Instant::now() < until, "the failed create's pod was left");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(listed(&p).is_empty());
    assert!(p.log_text().contains("removed the pod"), "{}", p.log_text());
}

/// Defect 4: admission refusals are the cluster rejecting the pod (`rejected_by_cluster`), an
/// exhausted quota is `capacity`, only RBAC says RBAC; a template the API refuses stops
/// startup naming K8S_POD_TEMPLATE.
#[test]
fn admission_quota_and_rbac_refusals_are_told_apart() {
    if !configured() {
        return;
    }
    let pki = Pki::new("k8s-admission");
    let mut standin = Standin::start(&pki, &["--ready-after", "0.1"]);
    let id = controller_id("k8s-admission");
    let template = pki.path("hostport.json");
    std::fs::write(
        &template,
        json!({"spec": {"containers": [{"name": "side", "image": "side:1",
                "ports": [{"containerPort": 8080, "hostPort": 8080}]}]}})
        .to_string(),
    )
    .unwrap();
    let flag = format!("-k8s-pod-template={}", template.display());
    let p = start(&standin, &pki, &id, &[&flag]);
    standin.send("psa restricted");
    p.expect_failure_saying(
        json!({"operation": "create", "task": "psa"}),
        "rejected_by_cluster",
        &[
            "violates PodSecurity \"restricted:latest\"",
            "hostPort",
            "K8S_POD_TEMPLATE",
        ],
    );
    // At startup the dry run finds it: one line naming the setting.
    let mut args = flags(&standin, &pki);
    args.push(flag);
    let err = refused_at_startup(&args);
    let lines: Vec<&str> = err.lines().filter(|l| l.contains("ERROR")).collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(
        lines[0].contains("K8S_POD_TEMPLATE") && lines[0].contains("PodSecurity"),
        "{err}"
    );
    standin.send("psa privileged");

    let p = start(&standin, &pki, &id, &[]);
    create_id(&p, "one");
    standin.send("quota pods=1");
    p.expect_failure_saying(
        json!({"operation": "create", "task": "two"}),
        "capacity",
        &["exceeded quota: q-pods"],
    );
    standin.send("quota none");
    standin.send("quota memory");
    p.expect_failure_saying(
        json!({"operation": "create", "task": "two"}),
        "rejected_by_cluster",
        &["must specify limits.memory", "WORKER_MEMORY"],
    );
    standin.send("quota none");
    standin.send("deny create");
    p.expect_failure_saying(
        json!({"operation": "create", "task": "two"}),
        "internal",
        &["Kubernetes RBAC refused", "cannot create resource \"pods\""],
    );
}

/// Defect 5: an unschedulable pod is waited for (an autoscaler may add a node): the
/// scheduler's message is a progress step, and the reason if time runs out.
#[test]
fn unschedulable_pods_are_waited_for() {
    if !configured() {
        return;
    }
    let pki = Pki::new("k8s-unsched");
    let mut standin = Standin::start(&pki, &["--ready-after", "0.1"]);
    let id = controller_id("k8s-unsched");
    let image = "-worker-image=registry.example/unschedulable:1";
    let p = start(&standin, &pki, &id, &[image, "-worker-ready-timeout=2s"]);
    let started = Instant::now();
    p.expect_failure_saying(
        json!({"operation": "create", "task": "big"}),
        "not_ready",
        &["within 2s", "cannot be scheduled: 0/1 nodes are available"],
    );
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "waited, not failed at once"
    );
    assert!(pods(&api(&standin, &pki)).is_empty(), "its pod was removed");
    // A node arrives during the wait: the create goes on to a running worker.
    let p = start(&standin, &pki, &id, &[image, "-worker-ready-timeout=10s"]);
    let addr = p.addr;
    let streamed = std::thread::spawn(move || {
        stream(
            addr,
            "SendStreamingMessage",
            control_message(json!({"operation": "create", "task": "big"})),
        )
        .1
    });
    std::thread::sleep(Duration::from_millis(800));
    standin.send("schedulable");
    let events = streamed.join().unwrap();
    let said = steps(&events);
    assert!(
        said.iter()
            .any(|s| s.starts_with("the pod cannot be scheduled yet: 0/1 nodes")),
        "{said:?}"
    );
    assert_eq!(result_data(&events)["worker"]["state"], "running");
}

/// Defect 6: pods are created with `fieldValidation=Strict`, so a misspelt template field
/// stops startup instead of vanishing; other warnings the API sends are logged once each.
#[test]
fn template_typos_are_refused_and_warnings_logged_once() {
    if !configured() {
        return;
    }
    let pki = Pki::new("k8s-strict");
    let standin = Standin::start(&pki, &["--ready-after", "0.1"]);
    let id = controller_id("k8s-strict");
    let typo = pki.path("typo.json");
    std::fs::write(
        &typo,
        r#"{"spec":{"nodeSelectr":{"pool":"agents"},"containers":[{"name":"worker","resource":{"limits":{"memory":"64Mi"}}}]}}"#,
    )
    .unwrap();
    let mut args = flags(&standin, &pki);
    args.push(format!("-k8s-pod-template={}", typo.display()));
    let err = refused_at_startup(&args);
    assert!(
        err.contains("K8S_POD_TEMPLATE")
            && err.contains("unknown field \"spec.nodeSelectr\"")
            && err.contains("unknown field \"spec.containers[0].resource\""),
        "{err}"
    );
    let deprecated = pki.path("deprecated.json");
    std::fs::write(
        &deprecated,
        r#"{"spec":{"nodeSelector":{"beta.kubernetes.io/arch":"amd64"}}}"#,
    )
    .unwrap();
    let flag = format!("-k8s-pod-template={}", deprecated.display());
    let p = start(&standin, &pki, &id, &[&flag]);
    create_id(&p, "one");
    create_id(&p, "two");
    let log = p.log_text();
    assert_eq!(
        log.matches(
            "the Kubernetes API warns: spec.nodeSelector[beta.kubernetes.io/arch]: deprecated"
        )
        .count(),
        1,
        "{log}"
    );
}

/// Defect 7 and 11: `check` asks an access review per verb and dry-runs the worker pod, one
/// line each, and names the namespace.
#[test]
fn check_proves_every_verb_and_the_pod() {
    if !configured() {
        return;
    }
    let pki = Pki::new("k8s-check");
    let mut standin = Standin::start(&pki, &[]);
    let mut args = flags(&standin, &pki);
    args.push("-worker-image=a2a-echo-worker:dev".into());
    let env = crate::cli_client::CHECK_ENV;
    let (code, out, err) = crate::cli_client::check(&args, &env);
    assert_eq!(code, Some(0), "{out}{err}");
    for line in [
        "answers (namespace a2a)",
        "may create pods",
        "may watch pods",
        "may delete pods",
        "may get pods/log",
        "a worker pod passes validation and admission (dry run",
    ] {
        assert!(out.contains(line), "{line:?} not in {out}");
    }
    assert!(
        pods(&api(&standin, &pki)).is_empty(),
        "the dry run stored nothing"
    );
    standin.send("deny watch,delete");
    let (code, _, err) = crate::cli_client::check(&args, &env);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("may not watch pods") && err.contains("may not delete pods: stop fails"),
        "{err}"
    );
    standin.send("deny -");
    standin.send("psa restricted");
    let template = pki.path("nfs.json");
    std::fs::write(
        &template,
        r#"{"spec":{"volumes":[{"name":"n","nfs":{"server":"127.0.0.1","path":"/x"}}]}}"#,
    )
    .unwrap();
    args.push(format!("-k8s-pod-template={}", template.display()));
    let (code, _, err) = crate::cli_client::check(&args, &env);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("dry run") && err.contains("restricted volume types"),
        "{err}"
    );
}

/// Defects 8, 9 and 13: a dead node makes its workers `unknown` naming the node, and `logs`
/// `backend_unavailable` naming it; not-ready reasons are the Ready condition's and the
/// probe's; `logs` of a pod without a node says so.
#[test]
fn dead_nodes_not_ready_pods_and_logs_say_what_is_wrong() {
    if !configured() {
        return;
    }
    let pki = Pki::new("k8s-node");
    let record = pki.dir.join("record");
    std::fs::create_dir_all(&record).unwrap();
    let mut standin = Standin::start(
        &pki,
        &["--ready-after", "0.1", "--record", record.to_str().unwrap()],
    );
    let id = controller_id("k8s-node");
    let p = start(&standin, &pki, &id, &[]);
    let wid = create_id(&p, "alive");
    standin.send("node-down");
    // The stand-in's node controller marks the node's pods as real ones do, a moment later.
    crate::support::wait_until("the worker listed unknown", Duration::from_secs(10), || {
        listed(&p)[0]["state"] == "unknown"
    });
    let w = &listed(&p)[0];
    assert_eq!(w["state"], "unknown", "{w}");
    assert!(
        w["reason"]
            .as_str()
            .unwrap()
            .contains("node standin-node stopped reporting"),
        "{w}"
    );
    p.expect_failure_saying(
        json!({"operation": "logs", "worker_id": wid}),
        "backend_unavailable",
        &["kubelet of node standin-node", "connection refused"],
    );
    standin.send("node-up");
    p.control(json!({"operation": "stop", "worker_id": wid}));
    wait_until_no_pods(&api(&standin, &pki));

    // Not ready: the Ready condition's reason while waiting, and the probe's failure at the end.
    let q = start(
        &standin,
        &pki,
        &id,
        &[
            "-worker-image=registry.example/never-ready:1",
            "-worker-ready-timeout=1s",
        ],
    );
    q.expect_failure_saying(
        json!({"operation": "create", "task": "slow"}),
        "not_ready",
        &[
            "ContainersNotReady: containers with unready status: [worker]",
            "Readiness probe failed",
            "its pod was removed",
        ],
    );
    let verbs = std::fs::read_to_string(record.join("verbs")).unwrap();
    assert!(verbs.lines().any(|l| l == "list events"), "{verbs}");
    // Logs of a pod the scheduler has not placed: said, not an empty success.
    let r = start(
        &standin,
        &pki,
        &id,
        &[
            "-worker-image=registry.example/unschedulable:1",
            "-worker-ready-timeout=0",
        ],
    );
    let wid = create_id(&r, "pending");
    std::thread::sleep(Duration::from_millis(200));
    r.expect_failure_saying(
        json!({"operation": "logs", "worker_id": wid}),
        "not_ready",
        &["no output yet", "not on a node"],
    );
}

/// Defect 10: a pod someone else deletes while the create waits ends the wait at once, at the
/// MODIFIED event that sets its deletionTimestamp, and is never reported Ready.
#[test]
fn a_pod_deleted_during_its_create_ends_the_wait_at_once() {
    if !configured() {
        return;
    }
    let pki = Pki::new("k8s-deleted");
    // The pod would be ready after 12 s and confirmed gone 20 s after its deletion: an end
    // within 10 s can only be the MODIFIED event's (a margin that holds on a busy machine).
    let standin = Standin::start(&pki, &["--ready-after", "12", "--confirm-after", "20"]);
    let id = controller_id("k8s-deleted");
    let p = start(&standin, &pki, &id, &["-worker-ready-timeout=40s"]);
    let addr = p.addr;
    let started = Instant::now();
    let create = std::thread::spawn(move || {
        crate::support::send_control(addr, json!({"operation": "create", "task": "doomed"})).json()
    });
    let api = api(&standin, &pki);
    let name = a2a_worker_controller::testing::pod_name(&id, "admin", "doomed");
    // Deleted once the controller has made it and the scheduler has bound it to a node
    // (however long that takes here): a pod on a node is deleted gracefully, a MODIFIED event
    // first; one on no node would go at once.
    let path = format!("/api/v1/namespaces/a2a/pods/{name}");
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let bound = match api.call(a2a_worker_controller::testing::K8sMethod::Get, &path, None) {
            Ok((200, body)) => {
                serde_json::from_slice::<serde_json::Value>(&body).is_ok_and(|pod| {
                    pod["spec"]["nodeName"]
                        .as_str()
                        .is_some_and(|n| !n.is_empty())
                })
            }
            _ => false,
        };
        if bound {
            break;
        }
        assert!(
            Instant::now() < until,
            "the pod was never created and bound"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let (status, _) = api
        .call(
            a2a_worker_controller::testing::K8sMethod::Delete,
            &format!("{path}?gracePeriodSeconds=30"),
            None,
        )
        .unwrap();
    assert_eq!(status, 200, "the pod was deleted");
    let reply = create.join().unwrap();
    let e = control_error(&reply["result"]["task"], "TASK_STATE_FAILED");
    assert_eq!(e["code"], "not_ready", "{e}");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("deleted while it started"),
        "{e}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "ended at the MODIFIED event, not at DELETED or the timeout"
    );
}

/// Defect 13: a refused list is the same error in `list`, `/readiness` and `check`.
#[test]
fn a_refused_list_is_one_error_everywhere() {
    if !configured() {
        return;
    }
    let pki = Pki::new("k8s-denied-list");
    let standin = Standin::start(&pki, &["--deny", "list"]);
    let id = controller_id("k8s-denied-list");
    let p = start(&standin, &pki, &id, &[]);
    let e = p.expect_failure_saying(
        json!({"operation": "list"}),
        "internal",
        &["Kubernetes RBAC refused", "cannot list resource \"pods\""],
    );
    let r = p.get("/readiness");
    assert_eq!(r.status, 503);
    assert!(
        r.text().contains(e["message"].as_str().unwrap()),
        "{} vs {e}",
        r.text()
    );
    let mut args = flags(&standin, &pki);
    args.push("-worker-image=a2a-echo-worker:dev".into());
    let (code, _, err) = crate::cli_client::check(&args, &crate::cli_client::CHECK_ENV);
    assert_eq!(code, Some(1));
    assert!(err.contains(e["message"].as_str().unwrap()), "{err}");
}
