//! Tasks that start from another task's files on Kubernetes (the stand-in, answering a claim's
//! `dataSource` as a real kube-apiserver 1.36.2 did in rec s55-fork-clone.txt; no real CSI
//! driver's clone): a workspace of a storage class named in `K8S_CLONE_STORAGE_CLASSES` is copied as a
//! claim whose `dataSource` is the source claim (same class, size and access modes, the new
//! task's labels), which the new task's pod mounts; another class is refused in one line; the
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

    // A storage class the operator has not named as one that clones: one line.
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
            "is of storage class local-path, which K8S_CLONE_STORAGE_CLASSES does not name as one that clones"
        ),
        "{e}"
    );
}
