//! Tasks that start from another task's files on Kubernetes (the stand-in, answering a claim's
//! `dataSource` as a real kube-apiserver 1.36.2 did in rec s55-fork-clone.txt, and Jobs as in
//! rec s56-copy-job.txt; no real CSI driver's clone): a workspace of a storage class named in
//! `K8S_CLONE_STORAGE_CLASSES` is copied as a claim whose `dataSource` is the source claim (same
//! class, size and access modes, the new task's labels), which the new task's pod mounts; any
//! other class by a copy Job of the controller's image, which the stand-in's kubelet runs as
//! the real `copy-files` between the claims' directories, under PodSecurity `restricted`; the
//! control layer's refusals are the same as on every backend.

use serde_json::{json, Value};

use crate::k8s_e2e::{api, pods, start};
use crate::k8s_support::{configured, Pki, Standin};
use crate::support::*;

const NS: &str = "a2a";

fn claims(api: &a2a_worker_controller::testing::K8sApi, id: &str) -> Vec<Value> {
    let (_, body) = api
        .call(
            a2a_worker_controller::testing::K8sMethod::Get,
            &format!("/api/v1/namespaces/{NS}/persistentvolumeclaims?labelSelector=a2a-worker-controller%2Fowner%3D{id}"),
            None,
        )
        .unwrap();
    let list: Value = serde_json::from_slice(&body).unwrap();
    list["items"].as_array().unwrap().clone()
}

fn claim_of(claims: &[Value], task: &str) -> Value {
    claims
        .iter()
        .find(|c| c["metadata"]["annotations"]["a2a-worker-controller/task"] == task)
        .unwrap_or_else(|| panic!("the claim of task {task}: {claims:?}"))
        .clone()
}

#[test]
fn a_k8s_workspace_is_copied_as_a_clone_of_its_claim() {
    if !configured() {
        return;
    }
    let pki = Pki::new("k8s-fork");
    let standin = Standin::start(&pki, &["--ready-after", "0.2", "--confirm-after", "0.5"]);
    let id = controller_id("k8s-fork");
    let dir = crate::templates::test_dir("k8s-fork");
    let file = dir.join("templates.json");
    crate::templates::write_templates(
        &file,
        json!({
            "coder": {"workspace": {"path": "/work", "size": "2Gi", "storage_class": "csi-clone"}},
            "plain": {"workspace": {"size": "1Gi", "storage_class": "local-path"}}
        }),
    );
    let flag = format!("-worker-templates-file={}", file.display());
    let p = start(
        &standin,
        &pki,
        &id,
        &[&flag, "-k8s-clone-storage-classes=csi-clone, other"],
    );
    let api = api(&standin, &pki);

    let base =
        reply_data(&p.control(json!({"operation": "create", "task": "base", "template": "coder"})));
    // Refused while the source's pod runs, as everywhere.
    p.expect_failure(
        json!({"operation": "copy_workspace", "from_task": "base", "task": "fork"}),
        "invalid_state",
    );
    reply_data(&p.control(json!({"operation": "stop", "worker_id": base["worker"]["worker_id"]})));
    // A stopping pod (its grace period) may still write: the copy waits for it to be gone.
    let gone = |p: &Proc| {
        wait_until("the stopped pod gone", PATIENCE, || {
            reply_data(&p.control(json!({"operation": "list"})))["workers"]
                .as_array()
                .unwrap()
                .iter()
                .all(|w| w["state"] != "stopping")
        })
    };
    gone(&p);

    let copied = reply_data(
        &p.control(json!({"operation": "copy_workspace", "from_task": "base", "task": "fork"})),
    );
    assert_eq!(copied["workspace"]["task"], "fork");
    assert_eq!(copied["workspace"]["template"], "coder");
    assert_eq!(copied["workspace"]["size"], "2Gi");
    let all = claims(&api, &id);
    let (source, clone) = (claim_of(&all, "base"), claim_of(&all, "fork"));
    // Stored as the real API server stores it (rec s55-fork-clone.txt): dataSourceRef beside.
    let from = json!({"apiGroup": null, "kind": "PersistentVolumeClaim", "name": source["metadata"]["name"]});
    assert_eq!(clone["spec"]["dataSource"], from);
    assert_eq!(clone["spec"]["dataSourceRef"], from);
    assert_eq!(clone["spec"]["storageClassName"], "csi-clone");
    assert_eq!(clone["spec"]["resources"]["requests"]["storage"], "2Gi");
    assert_eq!(clone["spec"]["accessModes"], source["spec"]["accessModes"]);
    assert_eq!(
        clone["metadata"]["labels"]["a2a-worker-controller/scope"],
        "admin"
    );
    // A second copy to the task is refused; the new task's pod mounts the clone.
    p.expect_failure(
        json!({"operation": "copy_workspace", "from_task": "base", "task": "fork"}),
        "invalid_state",
    );
    let made =
        reply_data(&p.control(json!({"operation": "create", "task": "fork", "template": "coder"})));
    assert_eq!(made["worker"]["state"], "running");
    let pod = pods(&api)
        .into_iter()
        .find(|p| {
            p["metadata"]["labels"]["a2a-worker-controller/worker-id"]
                == made["worker"]["worker_id"]
        })
        .expect("the fork's pod");
    assert_eq!(
        pod["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"],
        clone["metadata"]["name"]
    );
    // create's from_task does the copy and the create in one call.
    let third = reply_data(&p.control(
        json!({"operation": "create", "task": "third", "template": "coder", "from_task": "base"}),
    ));
    assert_eq!(third["worker"]["task"], "third");
    assert_eq!(
        claim_of(&claims(&api, &id), "third")["spec"]["dataSource"]["name"],
        source["metadata"]["name"]
    );

    // As the real server did (rec claim_clone_bad_kind.b): a dataSource of a kind the API does
    // not clone from is stored without it, and no error.
    let odd = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "odd-source"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}},
                 "dataSource": {"kind": "Pod", "name": "x"}}});
    let (status, body) = api
        .call(
            a2a_worker_controller::testing::K8sMethod::Post,
            &format!("/api/v1/namespaces/{NS}/persistentvolumeclaims?fieldValidation=Strict"),
            Some(&odd),
        )
        .unwrap();
    let stored: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(status, 201);
    assert!(stored["spec"]["dataSource"].is_null(), "{stored}");
    assert!(stored["spec"]["dataSourceRef"].is_null(), "{stored}");

    // A storage class the operator has not named as one that clones, and no image to copy it
    // with: one line.
    let plain = reply_data(
        &p.control(json!({"operation": "create", "task": "plain", "template": "plain"})),
    );
    reply_data(&p.control(json!({"operation": "stop", "worker_id": plain["worker"]["worker_id"]})));
    gone(&p);
    let e = p.expect_failure(
        json!({"operation": "copy_workspace", "from_task": "plain", "task": "plain copy"}),
        "invalid_state",
    );
    assert!(
        e["message"].as_str().unwrap().contains(
            "is of storage class local-path, which K8S_CLONE_STORAGE_CLASSES does not name as one that clones, and a copy by a Job needs WORKSPACE_COPY_IMAGE"
        ),
        "{e}"
    );
}

/// The copy Jobs and their pods in the namespace.
fn copy_jobs(api: &a2a_worker_controller::testing::K8sApi) -> Vec<Value> {
    let (_, body) = api
        .call(
            a2a_worker_controller::testing::K8sMethod::Get,
            &format!("/apis/batch/v1/namespaces/{NS}/jobs"),
            None,
        )
        .unwrap();
    serde_json::from_slice::<Value>(&body).unwrap()["items"]
        .as_array()
        .unwrap()
        .clone()
}

/// Where the test reaches a pod's worker (the stand-in runs it on a loopback address).
fn worker_url(api: &a2a_worker_controller::testing::K8sApi, worker_id: &Value) -> String {
    let pod = pods(api)
        .into_iter()
        .find(|p| p["metadata"]["labels"]["a2a-worker-controller/worker-id"] == *worker_id)
        .expect("the worker's pod");
    format!("http://{}:9090", pod["status"]["podIP"].as_str().unwrap())
}

#[test]
fn a_k8s_workspace_of_a_class_that_cannot_clone_is_copied_by_a_job_whole_or_not_at_all() {
    if !configured() {
        return;
    }
    let pki = Pki::new("k8s-copy-job");
    let volumes = pki.dir.join("volumes");
    let mut standin = Standin::start(
        &pki,
        &[
            "--ready-after",
            "0.2",
            "--confirm-after",
            "0.5",
            "--psa",
            "restricted",
            "--run-workers",
            env!("CARGO_BIN_EXE_a2a-echo-worker"),
            "--run-copies",
            env!("CARGO_BIN_EXE_a2a-worker-controller"),
            "--volumes",
            volumes.to_str().unwrap(),
        ],
    );
    let id = controller_id("k8s-copy-job");
    let dir = crate::templates::test_dir("k8s-copy-job");
    let file = dir.join("templates.json");
    crate::templates::write_templates(
        &file,
        json!({"coder": {"workspace": {"path": "/work", "size": "1Gi", "storage_class": "local-path"}}}),
    );
    let flags = [
        format!("-worker-templates-file={}", file.display()),
        "-workspace-copy-image=a2a-worker-controller:dev".to_string(),
    ];
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let p = start(&standin, &pki, &id, &flags);
    let api = api(&standin, &pki);
    let gone = |p: &Proc| {
        wait_until("no stopping pod", PATIENCE, || {
            reply_data(&p.control(json!({"operation": "list"})))["workers"]
                .as_array()
                .unwrap()
                .iter()
                .all(|w| w["state"] != "stopping")
        })
    };

    // A worker leaves files in its workspace, and stops.
    let base =
        reply_data(&p.control(json!({"operation": "create", "task": "base", "template": "coder"})));
    let (url, token) = (
        worker_url(&api, &base["worker"]["worker_id"]),
        base["token"].as_str().unwrap().to_string(),
    );
    for (ask, said) in [
        ("workspace write notes.txt half done", "wrote notes.txt"),
        ("workspace chmod notes.txt 640", "mode of notes.txt is 640"),
    ] {
        assert_eq!(crate::templates::tell(&url, &token, ask), said);
    }
    reply_data(&p.control(json!({"operation": "stop", "worker_id": base["worker"]["worker_id"]})));
    gone(&p);

    // The copy: a claim of the same class, filled by a Job that then goes; the new task's
    // worker reads the files.
    let copied = reply_data(
        &p.control(json!({"operation": "copy_workspace", "from_task": "base", "task": "fork"})),
    );
    assert_eq!(copied["workspace"]["task"], "fork");
    let clone = claim_of(&claims(&api, &id), "fork");
    assert!(clone["spec"]["dataSource"].is_null(), "{clone}");
    assert_eq!(clone["spec"]["storageClassName"], "local-path");
    assert!(
        clone["metadata"]["annotations"]["a2a-worker-controller/copying"].is_null(),
        "finished: {clone}"
    );
    wait_until("the copy Job gone", PATIENCE, || copy_jobs(&api).is_empty());
    let copy_dir = volumes
        .join(NS)
        .join(clone["metadata"]["name"].as_str().unwrap());
    assert_eq!(
        std::fs::read_to_string(copy_dir.join("notes.txt")).unwrap(),
        "half done"
    );
    let fork =
        reply_data(&p.control(json!({"operation": "create", "task": "fork", "template": "coder"})));
    let (url_f, token_f) = (
        worker_url(&api, &fork["worker"]["worker_id"]),
        fork["token"].as_str().unwrap().to_string(),
    );
    assert_eq!(
        crate::templates::tell(&url_f, &token_f, "workspace read notes.txt"),
        "half done"
    );
    let stat = crate::templates::tell(&url_f, &token_f, "workspace stat notes.txt");
    assert!(stat.starts_with("file 640 "), "the mode is kept: {stat}");

    // A copy cut off: while its Job runs the claim is no workspace (not listed, its task's
    // create and another copy refused); the controller is killed; the Job ends meanwhile; the
    // next controller's tidy finishes it.
    standin.send("hold-copies on");
    let mut p = p;
    let addr = p.addr;
    let copying = std::thread::spawn(move || {
        crate::support::send_control(
            addr,
            json!({"operation": "copy_workspace", "from_task": "base", "task": "cut"}),
        )
    });
    wait_until("the cut copy's Job", PATIENCE, || {
        !copy_jobs(&api).is_empty()
    });
    let listed = reply_data(&p.control(json!({"operation": "workspaces"})));
    assert!(
        !listed.to_string().contains("\"task\":\"cut\""),
        "a copy under way is no workspace: {listed}"
    );
    let e = p.expect_failure(
        json!({"operation": "create", "task": "cut", "template": "coder"}),
        "invalid_state",
    );
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("still being copied"),
        "{e}"
    );
    p.expect_failure(
        json!({"operation": "copy_workspace", "from_task": "base", "task": "cut"}),
        "invalid_state",
    );
    p.kill();
    let _ = copying.join();
    standin.send("hold-copies off");
    wait_until("the cut copy's Job complete", PATIENCE, || {
        copy_jobs(&api)
            .iter()
            .all(|j| j["status"]["succeeded"] == 1)
    });
    let q = start(&standin, &pki, &id, &flags);
    wait_until("the tidy finished the cut copy", PATIENCE, || {
        q.log_text()
            .contains("(task \"cut\"), cut off: finished (its Job had succeeded)")
    });
    assert!(copy_jobs(&api).is_empty());
    let cut =
        reply_data(&q.control(json!({"operation": "create", "task": "cut", "template": "coder"})));
    let (url_c, token_c) = (
        worker_url(&api, &cut["worker"]["worker_id"]),
        cut["token"].as_str().unwrap().to_string(),
    );
    assert_eq!(
        crate::templates::tell(&url_c, &token_c, "workspace read notes.txt"),
        "half done"
    );

    // A copy that fails (its source's files gone from under it) says why in one line, with
    // the copy's own last words, and leaves neither claim nor Job.
    let source = claim_of(&claims(&api, &id), "base");
    std::fs::remove_dir_all(
        volumes
            .join(NS)
            .join(source["metadata"]["name"].as_str().unwrap()),
    )
    .unwrap();
    let e = q.expect_failure(
        json!({"operation": "copy_workspace", "from_task": "base", "task": "broken"}),
        "internal",
    );
    let why = e["message"].as_str().unwrap();
    assert!(
        why.contains("failed (BackoffLimitExceeded: Job has reached the specified backoff limit)")
            && why.contains("copy-files"),
        "{why}"
    );
    assert!(claims(&api, &id)
        .iter()
        .all(|c| c["metadata"]["annotations"]["a2a-worker-controller/task"] != "broken"));
    wait_until("the failed copy's Job gone", PATIENCE, || {
        copy_jobs(&api).is_empty()
    });

    // A Job whose pod the cluster refuses (here a pod quota; PodSecurity alike, rec
    // job_create_root): its FailedCreate event, at once, not after a timeout.
    standin.send(&format!("quota pods={}", pods(&api).len()));
    let e = q.expect_failure(
        json!({"operation": "copy_workspace", "from_task": "base", "task": "over quota"}),
        "invalid_state",
    );
    let why = e["message"].as_str().unwrap();
    assert!(
        why.contains("cannot make its pod: FailedCreate: Error creating: pods")
            && why.contains("exceeded quota: q-pods"),
        "{why}"
    );
    assert!(claims(&api, &id)
        .iter()
        .all(|c| c["metadata"]["annotations"]["a2a-worker-controller/task"] != "over quota"));
    standin.send("quota none");
}

/// With WORKSPACE_COPY_IMAGE set, `check` asks whether the Role lets copy Jobs run, and says
/// what fails without.
#[test]
fn check_says_whether_the_role_lets_copy_jobs_run() {
    if !configured() {
        return;
    }
    let pki = Pki::new("k8s-check-copies");
    let mut standin = Standin::start(&pki, &[]);
    let mut args = crate::k8s_e2e::flags(&standin, &pki);
    args.push("-worker-image=a2a-echo-worker:dev".into());
    let env = crate::cli_client::CHECK_ENV;
    let (code, out, _) = crate::cli_client::check(&args, &env);
    assert_eq!(code, Some(0));
    assert!(
        !out.contains("jobs"),
        "nothing about Jobs without the image: {out}"
    );
    args.push("-workspace-copy-image=a2a-worker-controller:dev".into());
    let (code, out, err) = crate::cli_client::check(&args, &env);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.contains(
            "workspace copies by a Job of a2a-worker-controller:dev: may create, get and delete jobs"
        ),
        "{out}"
    );
    standin.send("deny jobs");
    let (code, _, err) = crate::cli_client::check(&args, &env);
    assert_eq!(code, Some(1));
    assert!(
        err.contains(
            "may not create jobs: a workspace copy of a storage class that does not clone fails"
        ),
        "{err}"
    );
}
