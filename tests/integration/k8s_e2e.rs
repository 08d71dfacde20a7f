//! The controller binary with `-backend=k8s` against the stand-in Kubernetes API server
//! (`tests/python/k8s_standin.py`) over TLS: create, list and stop; one worker per task across
//! two controller processes; restarts; foreign pods; pods that fail; RBAC refusing delete; an
//! unreachable API; credentials refused at startup; and no token outside create's reply and the
//! pod's environment.

use std::path::Path;
use std::process::Command;

use a2a_worker_controller::settings::{self, BackendSettings, Command as Cli};
use a2a_worker_controller::testing::{pod_name, K8sApi, K8sApiConfig, K8sMethod};
use serde_json::{json, Value};

use crate::k8s_support::{assert_manifests_ok, check_manifests, configured, Pki, Standin};
use crate::support::{controller_id, Proc};
use crate::support::{p50, reply_data, Controls, TOKEN};

pub const NS: &str = "a2a";

pub fn flags(standin: &Standin, pki: &Pki) -> Vec<String> {
    flags_at(&standin.url, pki)
}

/// The flags for the API server at `url`, trusted and answered with `pki`'s files.
pub fn flags_at(url: &str, pki: &Pki) -> Vec<String> {
    vec![
        "-backend=k8s".into(),
        format!("-k8s-api-url={url}"),
        format!("-k8s-ca-file={}", pki.path("ca.crt").display()),
        format!("-k8s-client-cert-file={}", pki.path("client.crt").display()),
        format!("-k8s-client-key-file={}", pki.path("client.key").display()),
        format!("-k8s-namespace={NS}"),
    ]
}

pub fn start(standin: &Standin, pki: &Pki, id: &str, extra: &[&str]) -> Proc {
    let mut all = flags(standin, pki);
    all.extend(extra.iter().map(|s| s.to_string()));
    let refs: Vec<&str> = all.iter().map(String::as_str).collect();
    Proc::start(Path::new("/nonexistent/docker.sock"), id, &refs)
}

/// The test's own client to the stand-in, for looking behind the controller's back.
pub fn api(standin: &Standin, pki: &Pki) -> K8sApi {
    api_at(&standin.url, pki)
}

/// The test's own client to the API server at `url`.
pub fn api_at(url: &str, pki: &Pki) -> K8sApi {
    let mut args = vec![
        "-a2a-auth-token=0123456789abcdef".to_string(),
        "-a2a-public-url=http://x".into(),
        "-worker-image=a2a-echo-worker:dev".into(),
    ];
    args.extend(flags_at(url, pki));
    let Ok(Cli::Run(s)) = settings::parse(args, Vec::new()) else {
        panic!()
    };
    let BackendSettings::K8s { k8s, .. } = &s.backend else {
        panic!()
    };
    K8sApi::new(&K8sApiConfig::load(k8s, &|_| None, Path::new("/nonexistent")).unwrap())
}

pub fn pods(api: &K8sApi) -> Vec<Value> {
    items(api, &format!("/api/v1/namespaces/{NS}/pods"))
}

/// The items of a list the API answers at `path`.
fn items(api: &K8sApi, path: &str) -> Vec<Value> {
    let (_, body) = api.call(K8sMethod::Get, path, None).unwrap();
    serde_json::from_slice::<Value>(&body).unwrap()["items"]
        .as_array()
        .unwrap()
        .clone()
}

/// The name of the one pod `pick` chooses.
fn pod_name_where(api: &K8sApi, pick: impl Fn(&Value) -> bool) -> String {
    let pod = pods(api).into_iter().find(|p| pick(p)).expect("the pod");
    pod["metadata"]["name"].as_str().unwrap().to_string()
}

/// Runs the binary with `args`, which must stop it at startup; returns what it printed.
pub fn refused_at_startup(args: &[String]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_a2a-worker-controller"))
        .args(args)
        .args([
            "-listen=127.0.0.1:0",
            "-a2a-public-url=http://x",
            "-worker-image=a2a-echo-worker:dev",
        ])
        .env_clear()
        .env("A2A_AUTH_TOKEN", TOKEN)
        .output()
        .unwrap();
    assert!(!out.status.success(), "started with {args:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Waits (at most 10 s) until the stand-in's kubelet has confirmed every deletion.
pub fn wait_until_no_pods(api: &K8sApi) {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !pods(api).is_empty() {
        assert!(
            std::time::Instant::now() < until,
            "pods left: {:?}",
            pods(api)
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

fn worker_ids(p: &Proc) -> Vec<String> {
    reply_data(&p.control(json!({"operation": "list"})))["workers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["worker_id"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn create_list_stop_and_tokens_stay_in_the_pod_environment() {
    if !configured() {
        return;
    }
    let pki = Pki::new("e2e-life");
    let record = pki.dir.join("record");
    std::fs::create_dir_all(&record).unwrap();
    let standin = Standin::start(
        &pki,
        &[
            "--ready-after",
            "0.3",
            "--record",
            record.to_str().unwrap(),
            "--log-lines",
            "250",
        ],
    );
    let id = controller_id("k8s-life");
    let p = start(&standin, &pki, &id, &[]);
    let task = "Fix the login bug! ✓ (k8s)";
    let created = reply_data(&p.control(json!({"operation": "create", "task": task, "ttl": "1h"})));
    let worker = &created["worker"];
    let token = created["token"].as_str().unwrap().to_string();
    crate::secrets::remember(&token);
    let name = pod_name(&id, "admin", task);
    assert_eq!(worker["backend"], "k8s");
    assert_eq!(worker["state"], "running", "{worker}");
    assert_eq!(worker["task"], task);
    assert_eq!(
        worker["a2a_url"],
        format!("http://{name}.a2a-workers.{NS}.svc.cluster.local:9090")
    );
    // Behind the controller: one pod, owned by labels, the exact task in the annotation, the
    // token in the environment and nowhere else.
    let api = api(&standin, &pki);
    let all = pods(&api);
    assert_eq!(all.len(), 1);
    let pod = &all[0];
    assert_eq!(pod["metadata"]["name"], name);
    assert_eq!(pod["metadata"]["labels"]["a2a-worker-controller/owner"], id);
    assert_eq!(
        pod["metadata"]["annotations"]["a2a-worker-controller/task"],
        task
    );
    let env = &pod["spec"]["containers"][0]["env"];
    assert!(env.to_string().contains(&token));
    assert!(!pod["metadata"].to_string().contains(&token));
    // The TTL is the pod's fourth label, and the worker's expires_at.
    let expires: u64 = pod["metadata"]["labels"]["a2a-worker-controller/expires-at"]
        .as_str()
        .and_then(|v| v.parse().ok())
        .expect("an expires-at label");
    assert_eq!(
        worker["expires_at"],
        a2a_worker_controller::time::rfc3339_secs(expires)
    );

    // Logs: the pod's log through pods/log, the worker container, the last lines asked for.
    let logs = reply_data(
        &p.control(json!({"operation": "logs", "worker_id": worker["worker_id"], "tail": 3})),
    );
    assert_eq!(
        logs["text"],
        format!("{name} line 248\n{name} line 249\n{name} line 250\n")
    );
    assert_eq!(logs["truncated"], false);

    // A second create for the task: the API server's 409, answered with the existing worker.
    let e = p.expect_failure(
        json!({"operation": "create", "task": task}),
        "worker_exists",
    );
    assert_eq!(e["worker_id"], worker["worker_id"]);
    let listed = reply_data(&p.control(json!({"operation": "list"})));
    assert_eq!(listed["workers"][0]["task"], task);
    assert_eq!(listed["workers"][0]["state"], "running");
    assert_eq!(listed["workers"][0]["expires_at"], worker["expires_at"]);
    assert!(!listed.to_string().contains(&token));
    // Stopping is graceful, as on a real API server: the pod stays in its grace period until
    // the kubelet confirms, and is `stopping` until then; a second stop deletes nothing more.
    let stopped =
        reply_data(&p.control(json!({"operation": "stop", "worker_id": worker["worker_id"]})));
    assert_eq!(stopped["worker"]["worker_id"], worker["worker_id"]);
    assert_eq!(stopped["worker"]["state"], "stopping", "{stopped}");
    assert!(
        stopped["worker"]["reason"]
            .as_str()
            .unwrap()
            .starts_with("stopping since "),
        "{stopped}"
    );
    let again =
        reply_data(&p.control(json!({"operation": "stop", "worker_id": worker["worker_id"]})));
    assert_eq!(again["worker"]["state"], "stopping", "{again}");
    wait_until_no_pods(&api);
    p.expect_failure(
        json!({"operation": "stop", "worker_id": worker["worker_id"]}),
        "not_found",
    );
    p.expect_failure(
        json!({"operation": "stop", "worker_id": "x".repeat(64)}),
        "not_found",
    );
    let log = p.log_text();
    assert!(log.contains("outcome=completed"), "{log}");
    crate::secrets::assert_none_in(&log, "the k8s controller's log");
    assert!(!log.contains("line 249"), "logs' text is never logged");
    crate::secrets::assert_none_in(&p.get("/metrics").text(), "/metrics");
    assert!(!log.contains(TOKEN));

    // Every pod body the controller sent validates against the official schemas (strict), and
    // the deploy files' Role grants exactly the verbs of the calls it made.
    let verbs: std::collections::BTreeSet<String> = std::fs::read_to_string(record.join("verbs"))
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    let verbs: Vec<String> = verbs.into_iter().collect();
    assert_eq!(
        verbs,
        [
            "create",
            "delete",
            "get",
            "get pods/log",
            "get secrets",
            "list",
            "list secrets",
            "watch"
        ]
    );
    // Events are listed only for a worker that never got ready (k8s_faults records that call);
    // claims only for a template with a workspace (workspaces_are_claims_made_before_the_pod_and_reused);
    // pods are patched only by a warm pool's claims (k8s_pool records that call); the
    // NetworkPolicy is read only for a fenced template (k8s_egress records that call); a
    // suspended worker's record is made and deleted only by suspend and resume (k8s_suspend);
    // Jobs only by a workspace copy of a class that does not clone (k8s_fork).
    assert_manifests_ok(&check_manifests(
        &record,
        &format!(
            "{},patch,list events,get networkpolicies,create secrets,delete secrets,create jobs,get jobs,delete jobs,{}",
            verbs.join(","),
            ["create", "get", "list", "patch", "delete"]
                .map(|v| format!("{v} persistentvolumeclaims"))
                .join(",")
        ),
    ));
}

#[test]
fn one_worker_per_task_across_two_controller_processes_and_restarts() {
    if !configured() {
        return;
    }
    let pki = Pki::new("e2e-race");
    let standin = Standin::start(&pki, &["--ready-after", "0.2"]);
    let id = controller_id("k8s-race");
    let a = start(&standin, &pki, &id, &[]);
    let mut b = start(&standin, &pki, &id, &[]);
    let results: Vec<Value> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..8)
            .map(|i| {
                let p = if i % 2 == 0 { &a } else { &b };
                s.spawn(move || p.control(json!({"operation": "create", "task": "one task"})))
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    crate::support::one_winner(&results);
    assert_eq!(pods(&api(&standin, &pki)).len(), 1);
    let meta = json!({"team": "infra & ops", "ticket.id": "JIRA-1234: \"x\" ✓"});
    let w =
        reply_data(&b.control(json!({"operation": "create", "task": "second", "metadata": meta})));
    assert_eq!(w["worker"]["metadata"], meta);
    let before = worker_ids(&a);
    assert_eq!(before.len(), 2);
    assert_eq!(
        worker_ids(&b),
        before,
        "both replicas list the same workers"
    );
    b.restart();
    assert_eq!(worker_ids(&b), before, "the same after a restart");
    // Metadata lives in the pod's annotations: read back after the restart, filterable.
    let tagged =
        reply_data(&b.control(json!({"operation": "list", "metadata": {"team": "infra & ops"}})));
    assert_eq!(tagged["workers"].as_array().unwrap().len(), 1, "{tagged}");
    assert_eq!(tagged["workers"][0]["metadata"], meta);
    let pod = pods(&api(&standin, &pki))
        .into_iter()
        .find(|p| p["metadata"]["annotations"]["a2a-worker-controller.meta/team"].is_string())
        .expect("the annotation on the pod");
    assert_eq!(
        pod["metadata"]["annotations"]["a2a-worker-controller.meta/ticket.id"],
        meta["ticket.id"]
    );
    b.expect_failure(
        json!({"operation": "create", "task": "second"}),
        "worker_exists",
    );
}

/// The reaper on Kubernetes: a pod created with a TTL is deleted within one reap interval
/// after its expiry, by whichever of two controllers gets there first, without errors.
#[test]
fn expired_pods_are_reaped_by_either_controller_without_errors() {
    if !configured() {
        return;
    }
    let pki = Pki::new("e2e-reap");
    let standin = Standin::start(&pki, &["--ready-after", "0.2"]);
    let id = controller_id("k8s-reap");
    let a = start(&standin, &pki, &id, &["-reap-interval=1s"]);
    let b = start(&standin, &pki, &id, &["-reap-interval=1s"]);
    let api = api(&standin, &pki);
    // Created by a stream: the Kubernetes backend's steps in order, then the worker.
    let (_, events) = crate::streaming::stream(
        a.addr,
        "SendStreamingMessage",
        crate::streaming::control_message(
            json!({"operation": "create", "task": "short", "ttl": 2}),
        ),
    );
    let steps = crate::streaming::steps(&events);
    assert_eq!(
        steps,
        [
            "pod created",
            "waiting for the pod to be ready",
            "the pod is ready"
        ]
    );
    let short = crate::streaming::result_data(&events);
    crate::secrets::remember(short["token"].as_str().unwrap());
    reply_data(&a.control(json!({"operation": "create", "task": "kept"})));
    let expires = a2a_worker_controller::time::parse_rfc3339_millis(
        short["worker"]["expires_at"].as_str().unwrap_or(""),
    )
    .expect("an expiry");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    while pods(&api).len() != 1 {
        assert!(
            std::time::Instant::now() < deadline,
            "not reaped: {:?}",
            pods(&api)
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    assert!(
        now >= expires && now <= expires + 1000 + 3000,
        "{} ms",
        now as i64 - expires as i64
    );
    assert_eq!(worker_ids(&b).len(), 1, "the worker without a TTL stays");
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let logs = a.log_text() + &b.log_text();
    assert!(logs.contains("reaper: stopped worker"), "{logs}");
    for line in logs.lines().filter(|l| l.contains("reap")) {
        assert!(
            !line.contains(" WARN ") && !line.contains("outcome=failed"),
            "{line}"
        );
    }
}

#[test]
fn foreign_pods_are_never_listed_or_stopped() {
    if !configured() {
        return;
    }
    let pki = Pki::new("e2e-foreign");
    let standin = Standin::start(&pki, &[]);
    let id = controller_id("k8s-foreign");
    let api = api(&standin, &pki);
    let path = format!("/api/v1/namespaces/{NS}/pods");
    let foreign = |name: &str, labels: Value| {
        let pod = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": labels},
            "spec": {"containers": [{"name": "x", "image": "other:1"}]}});
        api.call(K8sMethod::Post, &path, Some(&pod)).unwrap();
    };
    foreign(&pod_name(&id, "admin", "taken"), json!({}));
    foreign(
        "other-owner",
        json!({"a2a-worker-controller/owner": "someone-else",
        "a2a-worker-controller/worker-id": "feedfacecafe"}),
    );
    foreign(
        "no-owner",
        json!({"a2a-worker-controller/worker-id": "deadbeef0001"}),
    );
    let p = start(&standin, &pki, &id, &[]);
    assert!(worker_ids(&p).is_empty());
    for wid in ["feedfacecafe", "deadbeef0001"] {
        p.expect_failure(json!({"operation": "stop", "worker_id": wid}), "not_found");
        p.expect_failure(json!({"operation": "logs", "worker_id": wid}), "not_found");
    }
    p.expect_failure_saying(
        json!({"operation": "create", "task": "taken"}),
        "internal",
        &["does not own"],
    );
    assert_eq!(pods(&api).len(), 3, "foreign pods untouched");
}

#[test]
fn failing_pods_are_reported_and_removed_and_refusals_are_clear() {
    if !configured() {
        return;
    }
    let pki = Pki::new("e2e-fail");
    let standin = Standin::start(&pki, &["--ready-after", "0.2", "--deny", "delete"]);
    let id = controller_id("k8s-fail");
    let api = api(&standin, &pki);

    let p = start(
        &standin,
        &pki,
        &id,
        &["-worker-image=registry.example/pull-fails:1"],
    );
    // The reply says the pod was left, and why (defect: it was left silently).
    p.expect_failure_saying(
        json!({"operation": "create", "task": "pull"}),
        "image_not_found",
        &[
            "ErrImagePull",
            "failed to pull and unpack image",
            "was left",
            "RBAC",
            "cannot delete resource \"pods\"",
        ],
    );
    drop(p);
    // RBAC denies delete here, so the failed pod stays (and the log says why); the next
    // stand-in allows it. Whatever happens, nothing is left that is not listed.
    let p = start(&standin, &pki, &id, &[]);
    let listed = reply_data(&p.control(json!({"operation": "list"})));
    assert_eq!(listed["workers"].as_array().unwrap().len(), 1, "{listed}");
    let wid = listed["workers"][0]["worker_id"].clone();
    p.expect_failure_saying(
        json!({"operation": "stop", "worker_id": wid}),
        "internal",
        &["RBAC", "cannot delete resource \"pods\""],
    );
    assert_eq!(pods(&api).len(), 1);
    drop(p);
    drop(standin);

    let standin = Standin::start(&pki, &["--ready-after", "0.2"]);
    let api = crate::k8s_e2e::api(&standin, &pki);
    let p = start(
        &standin,
        &pki,
        &id,
        &["-worker-image=registry.example/crashes:1"],
    );
    p.expect_failure_saying(
        json!({"operation": "create", "task": "crash"}),
        "not_ready",
        &["CrashLoopBackOff", "exited with code 3"],
    );
    assert!(pods(&api).is_empty(), "the failed pod was removed");
    let e = p.log_text();
    assert!(!e.contains("was left"), "{e}");
    let p = start(
        &standin,
        &pki,
        &id,
        &["-worker-image=registry.example/pull-fails:1"],
    );
    p.expect_failure(
        json!({"operation": "create", "task": "pull"}),
        "image_not_found",
    );
    assert!(pods(&api).is_empty(), "the failed pod was removed");

    // The API goes away: readiness says so, operations fail backend_unavailable.
    assert_eq!(p.get("/readiness").status, 200);
    drop(standin);
    let r = p.get("/readiness");
    assert_eq!(r.status, 503);
    assert!(
        r.text().contains("Kubernetes API unreachable"),
        "{}",
        r.text()
    );
    p.expect_failure(json!({"operation": "list"}), "backend_unavailable");
}

#[test]
fn worker_url_template_and_startup_refusals() {
    if !configured() {
        return;
    }
    let pki = Pki::new("e2e-url");
    let standin = Standin::start(&pki, &["--ready-after", "0"]);
    let id = controller_id("k8s-url");
    let p = start(
        &standin,
        &pki,
        &id,
        &[
            "-k8s-worker-url=https://{pod}.agents.example.com:{port}/",
            "-worker-ready-timeout=0",
        ],
    );
    let w =
        reply_data(&p.control(json!({"operation": "create", "task": "outside"})))["worker"].clone();
    assert_eq!(
        w["a2a_url"],
        format!(
            "https://{}.agents.example.com:9090",
            pod_name(&id, "admin", "outside")
        )
    );
    assert_eq!(
        w["state"], "starting",
        "WORKER_READY_TIMEOUT=0 does not wait"
    );
    // A key that does not belong to the certificate stops startup with one line naming it.
    let mut args = flags(&standin, &pki);
    args[4] = format!("-k8s-client-key-file={}", pki.path("stray.key").display());
    let err = refused_at_startup(&args);
    let lines: Vec<&str> = err.lines().filter(|l| l.contains("ERROR")).collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(lines[0].contains("K8S_CLIENT_KEY_FILE"), "{err}");
}

/// kubectl, a real client nobody here wrote, proves the stand-in speaks the API's wire format:
/// discovery, `get pods -l`, `create -f`, `delete pod`, interleaved with the controller's own
/// calls. (`--validate=false`: client-side validation downloads the OpenAPI document, which
/// the stand-in does not serve; the pod bodies are validated against the official schemas by
/// `kubernetes-validate` above instead.)
#[test]
fn kubectl_reads_and_writes_what_the_controller_does() {
    if !configured() {
        return;
    }
    let Some(kubectl) = crate::support::env_or_skip("A2A_TEST_KUBECTL", "A2A_REQUIRE_KUBECTL")
    else {
        return;
    };
    let pki = Pki::new("e2e-kubectl");
    let standin = Standin::start(&pki, &["--ready-after", "0.1"]);
    let kubeconfig = pki.path("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: standin\n  cluster:\n    server: {}\n    certificate-authority: {}\nusers:\n- name: admin\n  user:\n    client-certificate: {}\n    client-key: {}\ncontexts:\n- name: standin\n  context: {{cluster: standin, user: admin, namespace: {NS}}}\ncurrent-context: standin\n",
            standin.url,
            pki.path("ca.crt").display(),
            pki.path("client.crt").display(),
            pki.path("client.key").display()
        ),
    )
    .unwrap();
    let run = |args: &[&str]| -> String {
        let out = Command::new(&kubectl)
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(args)
            .env("HOME", &pki.dir)
            .output()
            .expect("kubectl runs");
        assert!(
            out.status.success(),
            "kubectl {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let id = controller_id("k8s-kubectl");
    let p = start(&standin, &pki, &id, &[]);
    let created = reply_data(&p.control(json!({"operation": "create", "task": "seen by kubectl"})));
    crate::secrets::remember(created["token"].as_str().unwrap());
    let owner = format!("a2a-worker-controller/owner={id}");
    let listed: Value =
        serde_json::from_str(&run(&["get", "pods", "-l", &owner, "-o", "json"])).unwrap();
    let items = listed["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{listed}");
    assert_eq!(
        items[0]["metadata"]["name"],
        pod_name(&id, "admin", "seen by kubectl")
    );
    assert_eq!(
        items[0]["metadata"]["labels"]["a2a-worker-controller/worker-id"],
        created["worker"]["worker_id"]
    );
    // A pod kubectl creates with this controller's labels is one of its workers.
    let manifest = pki.path("pod.json");
    std::fs::write(
        &manifest,
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "made-by-kubectl", "labels": {
                "a2a-worker-controller/owner": id, "a2a-worker-controller/worker-id": "c0ffee000001",
                "a2a-worker-controller/task": "by-hand"}},
            "spec": {"containers": [{"name": "worker", "image": "a2a-echo-worker:dev"}]}})
        .to_string(),
    )
    .unwrap();
    assert!(run(&[
        "create",
        "--validate=false",
        "-f",
        manifest.to_str().unwrap()
    ])
    .contains("created"));
    assert_eq!(worker_ids(&p).len(), 2);
    // kubectl deletes the controller's pod; the controller's list follows.
    let name = pod_name(&id, "admin", "seen by kubectl");
    assert!(run(&["delete", "pod", &name]).contains("deleted"));
    assert_eq!(worker_ids(&p), ["c0ffee000001"]);
    let stopped = reply_data(&p.control(json!({"operation": "stop", "worker_id": "c0ffee000001"})));
    assert_eq!(stopped["worker"]["task"], "by-hand");
    // Stopped gracefully: kubectl sees it until the kubelet confirms, then no more.
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while run(&["get", "pods", "-o", "name"]).contains("made-by-kubectl") {
        assert!(std::time::Instant::now() < until, "the stopped pod stayed");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }

    // Claims (task workspaces): a claim kubectl makes with this controller's labels is one of
    // its workspaces; kubectl reads it, annotates it (a merge patch), deletes it.
    let claim = pki.path("claim.json");
    std::fs::write(
        &claim,
        json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": "ws-by-kubectl", "labels": {
                "a2a-worker-controller/owner": id, "a2a-worker-controller/scope": "admin",
                "a2a-worker-controller/workspace": "workspace"},
                "annotations": {"a2a-worker-controller/task": "by-hand", "a2a-worker-controller/size": "1Gi"}},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}})
        .to_string(),
    )
    .unwrap();
    assert!(
        run(&["create", "--validate=false", "-f", claim.to_str().unwrap()]).contains("created")
    );
    let spaces = reply_data(&p.control(json!({"operation": "workspaces"})));
    assert_eq!(spaces["workspaces"][0]["task"], "by-hand", "{spaces}");
    let got: Value =
        serde_json::from_str(&run(&["get", "pvc", "-l", &owner, "-o", "json"])).unwrap();
    assert_eq!(
        got["items"][0]["metadata"]["finalizers"],
        json!(["kubernetes.io/pvc-protection"])
    );
    assert!(run(&[
        "annotate",
        "pvc",
        "ws-by-kubectl",
        "a2a-worker-controller/last-used=1900000000",
        "--overwrite"
    ])
    .contains("annotated"));
    let spaces = reply_data(&p.control(json!({"operation": "workspaces"})));
    assert_eq!(spaces["workspaces"][0]["last_used"], "2030-03-17T17:46:40Z");
    let deleted =
        reply_data(&p.control(json!({"operation": "delete_workspace", "task": "by-hand"})));
    assert_eq!(deleted["workspace"]["name"], "ws-by-kubectl");
    assert!(!run(&["get", "pvc", "-o", "name"]).contains("ws-by-kubectl"));
}

/// Benchmark, not a timed test (scripts/bench.sh runs it in release): create+stop and list
/// through the controller against the same calls made directly to the stand-in by the same
/// client code, reported as ratios measured in one run.
#[test]
#[ignore = "a benchmark; scripts/bench.sh runs it"]
fn k8s_bench_controller_against_direct_calls() {
    use std::time::Instant;
    if !configured() {
        return;
    }
    let rounds = crate::support::rounds("K8S_BENCH_ROUNDS", 200);
    let pki = Pki::new("bench");
    let standin = Standin::start(&pki, &["--ready-after", "0"]);
    let id = controller_id("k8s-bench");
    let p = start(&standin, &pki, &id, &[]);
    let api = api(&standin, &pki);
    let path = format!("/api/v1/namespaces/{NS}/pods");
    for i in 0..5 {
        reply_data(&p.control(json!({"operation": "create", "task": format!("standing {i}")})));
    }
    let selector = format!("{path}?labelSelector=a2a-worker-controller%2Fowner%3D{id}");

    let (mut direct_churn, mut direct_list) = (Vec::new(), Vec::new());
    let (mut via_churn, mut via_list) = (Vec::new(), Vec::new());
    for i in 0..rounds {
        // Direct: POST, GET (the readiness look), DELETE; and one list.
        let name = format!("direct-{i}");
        let started = Instant::now();
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "worker", "image": "a2a-echo-worker:dev"}]}});
        api.call(K8sMethod::Post, &path, Some(&pod)).unwrap();
        api.call(K8sMethod::Get, &format!("{path}/{name}"), None)
            .unwrap();
        api.call(K8sMethod::Delete, &format!("{path}/{name}"), None)
            .unwrap();
        direct_churn.push(started.elapsed());
        let started = Instant::now();
        api.call(K8sMethod::Get, &selector, None).unwrap();
        direct_list.push(started.elapsed());

        // Through the controller: create (waits for Ready), stop; and one list.
        let started = Instant::now();
        let w =
            reply_data(&p.control(json!({"operation": "create", "task": format!("bench {i}")})));
        reply_data(&p.control(json!({"operation": "stop", "worker_id": w["worker"]["worker_id"]})));
        via_churn.push(started.elapsed());
        let started = Instant::now();
        reply_data(&p.control(json!({"operation": "list"})));
        via_list.push(started.elapsed());
    }
    let (dc, dl, vc, vl) = (
        p50(direct_churn),
        p50(direct_list),
        p50(via_churn),
        p50(via_list),
    );
    println!(
        "K8S {rounds} rounds: create+stop p50 direct {dc:?}, through the controller {vc:?} ({:.1}x)",
        vc.as_secs_f64() / dc.as_secs_f64()
    );
    println!(
        "K8S list of 5 workers p50 direct {dl:?}, through the controller {vl:?} ({:.1}x)",
        vl.as_secs_f64() / dl.as_secs_f64()
    );
}

/// Benchmark, not a timed test (scripts/bench.sh runs it in release): how soon a watcher hears
/// a pod deleted by someone else (`kubectl delete`), against the stand-in's own pod watch read
/// directly by the same client code (the baseline): from the DELETE call to each one's first
/// word of that pod (`MODIFIED` with its `deletionTimestamp`, or `DELETED`; the controller's
/// `changed` to stopping, or `removed`), p50 of BENCH_WATCH_ROUNDS.
#[test]
#[ignore = "a benchmark; scripts/bench.sh runs it"]
fn k8s_bench_watch_latency() {
    use crate::watch::{kind_and_task, Watch};
    use std::time::{Duration, Instant};
    if !configured() {
        return;
    }
    let rounds = crate::support::rounds("BENCH_WATCH_ROUNDS", 5);
    let pki = Pki::new("bench-watch");
    let standin = Standin::start(&pki, &["--ready-after", "0"]);
    let id = controller_id("k8s-bench-watch");
    let p = start(&standin, &pki, &id, &[]);
    let mut w = Watch::start(p.addr, json!({"operation": "watch"}));
    w.task_id();
    assert!(w.snapshot().is_empty());
    let pods_path = format!("/api/v1/namespaces/{NS}/pods");
    let watch_path =
        format!("{pods_path}?watch=1&labelSelector=a2a-worker-controller%2Fowner%3D{id}");
    let (mut direct, mut via) = (Vec::new(), Vec::new());
    for i in 0..rounds {
        let task = format!("watched {i}");
        let worker =
            reply_data(&p.control(json!({"operation": "create", "task": task})))["worker"].clone();
        loop {
            let e = w.event().expect("the watch goes on");
            if kind_and_task(&e).1 == task && e["worker"]["state"] == "running" {
                break;
            }
        }
        let name = pod_name_where(&api(&standin, &pki), |p| {
            p["metadata"]["labels"]["a2a-worker-controller/worker-id"] == worker["worker_id"]
        });
        // The baseline: a pod watch of its own, ready once it has listed the pod (ADDED).
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let direct_watch = {
            let (api, path, name) = (api(&standin, &pki), watch_path.clone(), name.clone());
            std::thread::spawn(move || {
                let until = Instant::now() + Duration::from_secs(20);
                api.watch(&path, until, |kind, pod| {
                    if pod["metadata"]["name"] != name.as_str() {
                        return None;
                    }
                    if kind == "ADDED" {
                        let _ = ready_tx.send(());
                        return None;
                    }
                    let going =
                        kind == "DELETED" || pod["metadata"]["deletionTimestamp"].is_string();
                    going.then(Instant::now)
                })
            })
        };
        ready_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("the direct watch");
        let asked = Instant::now();
        api(&standin, &pki)
            .call(K8sMethod::Delete, &format!("{pods_path}/{name}"), None)
            .unwrap();
        let heard = loop {
            let e = w.event().expect("the watch goes on");
            if kind_and_task(&e).1 == task
                && (e["type"] == "removed" || e["worker"]["state"] == "stopping")
            {
                break Instant::now();
            }
        };
        let seen = direct_watch
            .join()
            .unwrap()
            .unwrap()
            .expect("the direct watch saw it");
        direct.push(seen.saturating_duration_since(asked));
        via.push(heard.saturating_duration_since(asked));
    }
    let (d, v) = (p50(direct), p50(via));
    println!(
        "ROW|event latency, Kubernetes stand-in: a pod deleted by hand → the watcher's event, p50 of {rounds}, against the pod watch read directly|{:.1} vs {:.1} ms ({:+.1} ms)|≤ +10 ms",
        v.as_secs_f64() * 1000.0,
        d.as_secs_f64() * 1000.0,
        (v.as_secs_f64() - d.as_secs_f64()) * 1000.0
    );
}

#[test]
fn without_watch_permission_create_polls_for_readiness() {
    if !configured() {
        return;
    }
    let pki = Pki::new("e2e-nowatch");
    let standin = Standin::start(&pki, &["--ready-after", "0.4", "--deny", "watch"]);
    let id = controller_id("k8s-nowatch");
    let p = start(&standin, &pki, &id, &[]);
    let w =
        reply_data(&p.control(json!({"operation": "create", "task": "polled"})))["worker"].clone();
    assert_eq!(w["state"], "running", "{w}");
    let p2 = start(
        &standin,
        &pki,
        &id,
        &["-worker-image=registry.example/crashes:1"],
    );
    p2.expect_failure_saying(
        json!({"operation": "create", "task": "polled crash"}),
        "not_ready",
        &["CrashLoopBackOff"],
    );
}

#[test]
fn a_rotated_token_file_keeps_the_controller_working() {
    if !configured() {
        return;
    }
    let pki = Pki::new("e2e-rotate");
    // What the stand-in accepts, and what the controller's token file says.
    let accepted = pki.path("accepted");
    let token = pki.path("token");
    let set = |path: &Path, value: &str| {
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(path, value).unwrap();
    };
    set(&accepted, "token-one");
    set(&token, "token-one");
    let standin = Standin::start(
        &pki,
        &[
            "--ready-after",
            "0.1",
            "--token-file",
            accepted.to_str().unwrap(),
        ],
    );
    let id = controller_id("k8s-rotate");
    let args = [
        "-backend=k8s".to_string(),
        format!("-k8s-api-url={}", standin.url),
        format!("-k8s-ca-file={}", pki.path("ca.crt").display()),
        format!("-k8s-token-file={}", token.display()),
        format!("-k8s-namespace={NS}"),
    ];
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    let p = Proc::start(Path::new("/nonexistent/docker.sock"), &id, &refs);
    reply_data(&p.control(json!({"operation": "create", "task": "before rotation"})));
    // The token rotates (the kubelet rewrites the file; the API accepts only the new one).
    set(&accepted, "token-two");
    set(&token, "token-two");
    reply_data(&p.control(json!({"operation": "create", "task": "after rotation"})));
    assert_eq!(worker_ids(&p).len(), 2);
    assert_eq!(p.get("/readiness").status, 200);
    let log = p.log_text();
    assert!(
        log.contains(&format!("the API token file {} changed", token.display())),
        "{log}"
    );
    assert!(
        !log.contains("token-two"),
        "the token itself is never logged"
    );
    // The API stops accepting the controller's token: readiness says why, operations fail
    // backend_unavailable naming the refusal.
    set(&accepted, "token-three");
    let r = p.get("/readiness");
    assert_eq!(r.status, 503);
    assert!(r.text().contains("credentials"), "{}", r.text());
    p.expect_failure_saying(
        json!({"operation": "list"}),
        "backend_unavailable",
        &["credentials"],
    );
}

#[test]
fn pod_templates_and_pods_that_cannot_start() {
    if !configured() {
        return;
    }
    let pki = Pki::new("e2e-template");
    let record = pki.dir.join("record");
    std::fs::create_dir_all(&record).unwrap();
    let standin = Standin::start(
        &pki,
        &["--ready-after", "0.1", "--record", record.to_str().unwrap()],
    );
    let api = api(&standin, &pki);
    let id = controller_id("k8s-template");
    let template = pki.path("template.json");
    std::fs::write(
        &template,
        json!({"metadata": {"labels": {"team": "agents"}},
               "spec": {"nodeSelector": {"pool": "agents"},
                        "imagePullSecrets": [{"name": "registry"}],
                        "containers": [{"name": "worker", "env": [{"name": "EXTRA", "value": "1"}]}]}})
        .to_string(),
    )
    .unwrap();
    let flag = format!("-k8s-pod-template={}", template.display());
    let p = start(&standin, &pki, &id, &[&flag]);
    reply_data(&p.control(json!({"operation": "create", "task": "templated"})));
    let pod = pods(&api).remove(0);
    assert_eq!(pod["spec"]["nodeSelector"]["pool"], "agents");
    assert_eq!(pod["metadata"]["labels"]["team"], "agents");
    assert_eq!(pod["metadata"]["labels"]["a2a-worker-controller/owner"], id);
    assert!(pod["spec"]["containers"][0]["env"]
        .to_string()
        .contains("EXTRA"));
    assert_eq!(pod["spec"]["automountServiceAccountToken"], false);
    for (image, code, reason) in [
        (
            "registry.example/unschedulable:1",
            "not_ready",
            "cannot be scheduled: 0/1 nodes are available: 1 Insufficient memory",
        ),
        (
            "registry.example/config-error:1",
            "not_ready",
            "CreateContainerConfigError",
        ),
    ] {
        let p = start(
            &standin,
            &pki,
            &id,
            &[
                &flag,
                &format!("-worker-image={image}"),
                "-worker-ready-timeout=1s",
            ],
        );
        let e = p.expect_failure(json!({"operation": "create", "task": image}), code);
        assert!(e["message"].as_str().unwrap().contains(reason), "{e}");
    }
    assert_eq!(pods(&api).len(), 1, "the failed pods were removed");
    // The templated bodies the controller sent validate against the official schemas.
    let out = check_manifests(&record, crate::k8s_manifests::VERBS);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );

    // A template that would escape the rules stops startup with one line naming it.
    std::fs::write(&template, r#"{"spec": {"hostNetwork": true}}"#).unwrap();
    let mut args = flags(&standin, &pki);
    args.push(flag.clone());
    let err = refused_at_startup(&args);
    assert!(
        err.contains("K8S_POD_TEMPLATE") && err.contains("hostNetwork"),
        "{err}"
    );
}

#[test]
fn check_asks_the_api_server_with_the_credentials() {
    if !configured() {
        return;
    }
    let pki = Pki::new("check");
    let standin = Standin::start(&pki, &[]);
    let mut args = flags(&standin, &pki);
    args.push("-worker-image=a2a-echo-worker:dev".into());
    let (code, out, err) = crate::cli_client::check(&args, &crate::cli_client::CHECK_ENV);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.contains("answers (namespace a2a)") && out.contains("may watch pods"),
        "{out}"
    );
    // A CA that is not the cluster's: the TLS handshake fails, and check says so.
    args.push(format!(
        "-k8s-ca-file={}",
        pki.path("other-ca.crt").display()
    ));
    let (code, _, err) = crate::cli_client::check(&args, &crate::cli_client::CHECK_ENV);
    assert_ne!(code, Some(0));
    assert!(
        err.contains("K8S_CA_FILE") || err.contains("backend k8s:"),
        "{err}"
    );
}

/// Issue 21 on Kubernetes (the stand-in's pod watch, from a list's `resourceVersion`): a watch
/// hears its snapshot and `synced`, another replica's create (through the pod watch, within a
/// second: measured), the pod becoming ready, a stop (graceful: `stopping`, then `removed` with
/// the caller's reason), and a pod deleted behind the controllers' backs.
#[test]
fn a_watch_follows_the_pods() {
    use crate::watch::{kind_and_task, watching_one_before};
    use std::time::Duration;
    if !configured() {
        return;
    }
    let pki = Pki::new("e2e-watch");
    let standin = Standin::start(&pki, &["--ready-after", "0.3"]);
    let id = controller_id("k8s-watch");
    let a = start(&standin, &pki, &id, &[]);
    let b = start(&standin, &pki, &id, &[]);
    let (mut w, task_id) = watching_one_before(&a, a.addr);

    let asked = a2a_worker_controller::time::now_millis();
    let other =
        reply_data(&b.control(json!({"operation": "create", "task": "other"})))["worker"].clone();
    let e = w.event().unwrap();
    assert_eq!(kind_and_task(&e), ("added".into(), "other".into()), "{e}");
    // From the other replica's create call starting (its pod is made at once) to the event
    // being made here: an upper bound of the pod watch's latency.
    let at = a2a_worker_controller::time::parse_rfc3339_millis(e["at"].as_str().unwrap()).unwrap();
    let latency = Duration::from_millis(at.saturating_sub(asked));
    eprintln!(
        "WATCH LATENCY k8s: another replica's create call to the event {} ms",
        latency.as_millis()
    );
    // The figure itself is scripts/bench.sh's; this bound leaves room for a busy machine.
    assert!(latency < Duration::from_secs(5), "{latency:?}");

    a.control(json!({"operation": "stop", "worker_id": other["worker_id"]}));
    // A pod being deleted is listed `stopping` until it is gone: a `changed` may come first.
    let removed = w.removal_of("other", "stopped by a caller");
    assert_eq!(removed["reason"], "stopped by a caller");

    // Deleted by someone else (kubectl delete, say).
    let pods = pods(&api(&standin, &pki));
    let name = pods[0]["metadata"]["name"].as_str().unwrap().to_string();
    api(&standin, &pki)
        .call(
            K8sMethod::Delete,
            &format!("/api/v1/namespaces/{NS}/pods/{name}"),
            None,
        )
        .unwrap();
    w.removal_of("before", "outside this controller");
    let r = crate::watch::cancel(a.addr, &task_id);
    assert_eq!(r["result"]["status"]["state"], "TASK_STATE_CANCELED", "{r}");
}

/// Issue 21: the pod watch's version compacted away between the source's list and its watch
/// (the stand-in's `expire`, answering `410 Expired` as the real server did for an old version,
/// rec watchbm.b): the source lists and watches again at once, as no failure, and the watcher
/// hears everything after it once: another replica's create, a pod deleted by hand.
#[test]
fn a_watch_lists_again_when_its_version_expired() {
    use crate::watch::{kind_and_task, Watch};
    use std::time::{Duration, Instant};
    if !configured() {
        return;
    }
    let pki = Pki::new("e2e-expired");
    let mut standin = Standin::start(&pki, &["--ready-after", "0.2"]);
    let id = controller_id("k8s-expired");
    let a = start(&standin, &pki, &id, &[]);
    let b = start(&standin, &pki, &id, &[]);
    reply_data(&a.control(json!({"operation": "create", "task": "before"})));
    standin.send("expire 3");
    let mut w = Watch::start(a.addr, json!({"operation": "watch"}));
    let task_id = w.task_id();
    assert_eq!(w.snapshot().len(), 1);
    let expired = || a.log_text().matches("expired (410); listing again").count();
    let deadline = Instant::now() + Duration::from_secs(10);
    while expired() < 3 {
        assert!(Instant::now() < deadline, "{}", a.log_text());
        std::thread::sleep(Duration::from_millis(50));
    }
    reply_data(&b.control(json!({"operation": "create", "task": "other"})));
    let mut seen = vec![kind_and_task(&w.next_of("added"))];
    let name = pod_name_where(&api(&standin, &pki), |p| {
        p["metadata"]["annotations"]["a2a-worker-controller/task"] == "before"
    });
    api(&standin, &pki)
        .call(
            K8sMethod::Delete,
            &format!("/api/v1/namespaces/{NS}/pods/{name}?gracePeriodSeconds=0"),
            None,
        )
        .unwrap();
    loop {
        let e = w.event().expect("the watch goes on");
        seen.push(kind_and_task(&e));
        if e["type"] == "removed" {
            crate::watch::assert_removed(&e, "before", "outside this controller");
            break;
        }
    }
    assert_eq!(
        seen[0],
        ("added".to_string(), "other".to_string()),
        "{seen:?}"
    );
    assert_eq!(
        seen.iter().filter(|s| s.0 == "added").count(),
        1,
        "nothing heard twice: {seen:?}"
    );
    assert_eq!(expired(), 3, "the three expired versions, no more");
    assert!(!a.log_text().contains("broke off"), "{}", a.log_text());
    let r = crate::watch::cancel(a.addr, &task_id);
    assert_eq!(r["result"]["status"]["state"], "TASK_STATE_CANCELED", "{r}");
}

/// Callers and scopes on the Kubernetes stand-in: one task name in two scopes is two
/// pods (the scope a label, the admin's pod keeping its name), each caller lists only its own,
/// another scope's pod is `not_found`, and a restart reads the scopes back from the labels.
#[test]
fn scopes_are_pod_labels_and_each_caller_sees_its_own() {
    use crate::callers::{callers_file, control_as, create_as, workers_of, ALICE, BOB};
    if !configured() {
        return;
    }
    let pki = Pki::new("e2e-scopes");
    let standin = Standin::start(&pki, &["--ready-after", "0.2"]);
    let id = controller_id("k8s-scopes");
    let file = callers_file("k8s");
    let mut p = start(
        &standin,
        &pki,
        &id,
        &[&format!("-a2a-callers-file={}", file.display())],
    );
    let create = |token: &str| create_as(p.addr, token, "build-42");
    let (a, b, admin) = (create(ALICE), create(BOB), create(TOKEN));
    let listed = pods(&api(&standin, &pki));
    assert_eq!(listed.len(), 3);
    let mut scopes: Vec<&str> = listed
        .iter()
        .map(|p| {
            p["metadata"]["labels"]["a2a-worker-controller/scope"]
                .as_str()
                .unwrap()
        })
        .collect();
    scopes.sort();
    assert_eq!(scopes, ["admin", "team-a", "team-b"]);
    assert!(
        listed
            .iter()
            .any(|p| p["metadata"]["name"] == pod_name(&id, "admin", "build-42")),
        "the admin scope's pod keeps the name it had before scopes"
    );
    let addr = p.addr;
    let only = |token: &str| -> Vec<String> {
        workers_of(addr, token)
            .iter()
            .map(|w| w["worker_id"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(only(ALICE), [a["worker_id"].as_str().unwrap()]);
    assert_eq!(only(BOB), [b["worker_id"].as_str().unwrap()]);
    assert_eq!(only(TOKEN).len(), 3);
    let stop = control_as(
        p.addr,
        BOB,
        json!({"operation": "stop", "worker_id": a["worker_id"]}),
    );
    assert_eq!(
        crate::support::control_error(&stop, "TASK_STATE_FAILED")["code"],
        "not_found"
    );
    p.restart();
    assert_eq!(
        only(ALICE),
        [a["worker_id"].as_str().unwrap()],
        "after a restart"
    );
    let all = workers_of(p.addr, TOKEN);
    let admins = all
        .iter()
        .find(|w| w["worker_id"] == admin["worker_id"])
        .unwrap();
    assert_eq!(admins["scope"], "admin");
}

/// One JSON-RPC call to a controller process; the response object.
fn rpc(p: &Proc, method: &str, params: Value) -> Value {
    crate::support::call(p.addr, TOKEN, method, params).json()
}

#[test]
fn an_oom_kill_names_the_kubelets_reason_and_the_replicas_are_the_selected_pods() {
    if !configured() {
        return;
    }
    let pki = Pki::new("e2e-oom");
    let standin = Standin::start(&pki, &["--ready-after", "0.2"]);
    let id = controller_id("k8s-oom");
    let api = api(&standin, &pki);
    // A replica of the selector, which the stand-in's kubelet runs at 10.42.0.7.
    let replica = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "ctl-0", "labels": {"app": "ctl"}},
        "spec": {"containers": [{"name": "controller", "image": "registry.example/ctl:1"}]}});
    api.call(
        K8sMethod::Post,
        &format!("/api/v1/namespaces/{NS}/pods"),
        Some(&replica),
    )
    .unwrap();
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !pods(&api).iter().any(|p| p["status"]["phase"] == "Running") {
        assert!(std::time::Instant::now() < until, "{:?}", pods(&api));
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let p = start(
        &standin,
        &pki,
        &id,
        &[
            "-worker-image=registry.example/oom:1",
            "-k8s-replica-ip=10.42.0.7",
            "-k8s-replica-selector=app=ctl",
        ],
    );
    // As on the real node (rec node/s29-oom-pod.json): ready, then OOM-killed; listed exited
    // with the kubelet's reason.
    let made = reply_data(&p.control(json!({"operation": "create", "task": "hungry"})));
    let wid = made["worker"]["worker_id"].clone();
    let until = std::time::Instant::now() + std::time::Duration::from_secs(15);
    let reason = loop {
        let listed = reply_data(&p.control(json!({"operation": "list"})));
        let w = listed["workers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|w| w["worker_id"] == wid)
            .cloned()
            .expect("listed");
        if w["state"] == "exited" {
            break w["reason"].as_str().unwrap().to_string();
        }
        assert!(std::time::Instant::now() < until, "{w}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert_eq!(
        reason,
        "was killed for running out of memory (the kubelet's reason OOMKilled, exit code 137)"
    );
    // Task ids name this replica; a task of an IP the selector does not list is of a replica
    // that is gone, one of this replica's own IP is simply not found.
    let task = rpc(
        &p,
        "SendMessage",
        json!({"message": crate::support::message(vec![json!({"data": {"operation": "list"}})])}),
    );
    let tid = task["result"]["task"]["id"].as_str().unwrap();
    assert!(tid.ends_with(".10-42-0-7"), "{tid}");
    let gone = rpc(&p, "GetTask", json!({"id": "t.10-42-0-99"}));
    assert_eq!(gone["error"]["code"], -32001, "{gone}");
    assert!(
        gone["error"]["message"]
            .as_str()
            .unwrap()
            .contains("(10.42.0.99) is gone"),
        "{gone}"
    );
    let own = rpc(&p, "GetTask", json!({"id": "t.10-42-0-7"}));
    assert_eq!(own["error"]["message"], "Task not found", "{own}");
}

/// The claims of a controller id, as the API has them.
fn claims(api: &K8sApi, id: &str) -> Vec<Value> {
    items(
        api,
        &format!("/api/v1/namespaces/{NS}/persistentvolumeclaims?labelSelector=a2a-worker-controller%2Fowner%3D{id}"),
    )
}

/// Task workspaces as claims, on the stand-in that answers as the real API server
/// did in rec s30-workspace-claims.txt: a claim made before the pod and mounted in it, reused
/// by the task's next pod (the create's 409 answered by reading it), kept by stop, deleted with
/// `"workspace": "delete"` (held while the pod stops), a create waiting for a deleted claim to
/// go; and `check` proving each template with its own dry run.
#[test]
fn workspaces_are_claims_made_before_the_pod_and_reused() {
    if !configured() {
        return;
    }
    let pki = Pki::new("e2e-ws");
    let standin = Standin::start(&pki, &["--ready-after", "0.2", "--confirm-after", "1.5"]);
    let id = controller_id("k8s-ws");
    let dir = crate::templates::test_dir("k8s-ws");
    let file = dir.join("templates.json");
    crate::templates::write_templates(
        &file,
        json!({
            "coder": {"memory": "256m", "workspace": {"path": "/work", "size": "2Gi", "storage_class": "local-path"}},
            "reviewer": {"image": "a2a-echo-worker:review", "port": 8081, "ready_path": "/healthz"},
            "broken": {"image": "registry.example/pull-fails:1", "workspace": {"size": "1Gi"}}
        }),
    );
    let flag = format!("-worker-templates-file={}", file.display());
    let p = start(&standin, &pki, &id, &[&flag]);
    let api = api(&standin, &pki);

    let first = reply_data(
        &p.control(json!({"operation": "create", "task": "keep me", "template": "coder"})),
    );
    assert_eq!(first["worker"]["template"], "coder");
    let found = claims(&api, &id);
    assert_eq!(found.len(), 1, "{found:?}");
    let claim = &found[0];
    let claim_name = claim["metadata"]["name"].as_str().unwrap().to_string();
    assert_eq!(claim["spec"]["resources"]["requests"]["storage"], "2Gi");
    assert_eq!(claim["spec"]["storageClassName"], "local-path");
    assert_eq!(
        claim["metadata"]["annotations"]["a2a-worker-controller/task"],
        "keep me"
    );
    assert_eq!(
        claim["metadata"]["labels"]["a2a-worker-controller/template"],
        "coder"
    );
    let pod = pods(&api)
        .into_iter()
        .find(|p| p["metadata"]["name"] == pod_name(&id, "admin", "keep me"))
        .unwrap();
    assert_eq!(
        pod["metadata"]["labels"]["a2a-worker-controller/template"],
        "coder"
    );
    assert_eq!(
        pod["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"],
        claim_name.as_str()
    );
    assert_eq!(
        pod["spec"]["containers"][0]["volumeMounts"][0]["mountPath"],
        "/work"
    );
    assert_eq!(pod["spec"]["securityContext"]["fsGroup"], 65532);
    assert_eq!(
        pod["spec"]["containers"][0]["resources"]["limits"]["memory"],
        (256u64 << 20).to_string()
    );
    let env = pod["spec"]["containers"][0]["env"].as_array().unwrap();
    assert!(env
        .iter()
        .any(|e| e["name"] == "A2A_WORKSPACE" && e["value"] == "/work"));

    // Another template's own port and readiness path.
    let r = reply_data(
        &p.control(json!({"operation": "create", "task": "review", "template": "reviewer"})),
    );
    assert!(
        r["worker"]["a2a_url"].as_str().unwrap().ends_with(":8081"),
        "{r}"
    );
    let rpod = pods(&api)
        .into_iter()
        .find(|p| p["metadata"]["name"] == pod_name(&id, "admin", "review"))
        .unwrap();
    assert_eq!(
        rpod["spec"]["containers"][0]["image"],
        "a2a-echo-worker:review"
    );
    assert_eq!(
        rpod["spec"]["containers"][0]["readinessProbe"]["httpGet"]["path"],
        "/healthz"
    );
    assert_eq!(
        reply_data(&p.control(json!({"operation": "list", "template": "reviewer"})))["workers"][0]
            ["a2a_url"],
        r["worker"]["a2a_url"],
        "list reads the port back from the pod"
    );

    let e = p.expect_failure(
        json!({"operation": "delete_workspace", "task": "keep me"}),
        "worker_exists",
    );
    assert_eq!(e["worker_id"], first["worker"]["worker_id"]);
    p.control(json!({"operation": "stop", "worker_id": first["worker"]["worker_id"]}));
    let spaces = reply_data(&p.control(json!({"operation": "workspaces"})));
    assert_eq!(spaces["workspaces"][0]["name"], claim_name.as_str());
    crate::support::wait_until(
        "the pod of task \"keep me\" gone",
        std::time::Duration::from_secs(20),
        || {
            !pods(&api)
                .iter()
                .any(|p| p["metadata"]["name"] == pod_name(&id, "admin", "keep me"))
        },
    );
    let uid = claims(&api, &id)[0]["metadata"]["uid"].clone();
    let last_used =
        claims(&api, &id)[0]["metadata"]["annotations"]["a2a-worker-controller/last-used"].clone();
    assert!(last_used.is_string(), "stop marks its last use");

    // The task's next pod mounts the same claim.
    let second = reply_data(
        &p.control(json!({"operation": "create", "task": "keep me", "template": "coder"})),
    );
    assert_eq!(
        claims(&api, &id)[0]["metadata"]["uid"],
        uid,
        "the same claim"
    );
    // Stopped with its workspace: the claim is deleted, held while its pod stops, then gone;
    // a create meanwhile waits for it to go and makes a new one.
    let done = reply_data(&p.control(json!({"operation": "stop", "worker_id": second["worker"]["worker_id"], "workspace": "delete"})));
    assert_eq!(done["workspace"]["name"], claim_name.as_str());
    let held = claims(&api, &id);
    assert!(
        held[0]["metadata"]["deletionTimestamp"].is_string(),
        "{held:?}"
    );
    assert_eq!(
        reply_data(&p.control(json!({"operation": "workspaces"})))["workspaces"],
        json!([])
    );
    let third = reply_data(
        &p.control(json!({"operation": "create", "task": "keep me", "template": "coder"})),
    );
    assert_eq!(third["worker"]["state"], "running");
    let fresh = claims(&api, &id);
    assert_eq!(fresh.len(), 1);
    assert_ne!(fresh[0]["metadata"]["uid"], uid, "a new claim");

    // A create that fails deletes the claim it made (a claim of an earlier worker stays).
    let e = p.expect_failure(
        json!({"operation": "create", "task": "never", "template": "broken"}),
        "image_not_found",
    );
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .ends_with("the workspace claim it made was deleted"),
        "{e}"
    );
    assert_eq!(claims(&api, &id).len(), 1, "only keep me's");

    // check proves each template with its own dry run; a Role without claims is named.
    let mut args = flags(&standin, &pki);
    args.push("-worker-image=a2a-echo-worker:dev".into());
    args.push(flag.clone());
    let (code, out, err) = crate::cli_client::check(&args, &crate::cli_client::CHECK_ENV);
    assert_eq!(code, Some(0), "{out}{err}");
    for t in ["broken", "coder", "default", "reviewer"] {
        assert!(out.contains(&format!("template {t}: image ")), "{t}: {out}");
    }
    assert!(out.contains("may keep its workspace claims"), "{out}");
}
