//! The worker pod the Kubernetes backend creates: one pod per task, named deterministically,
//! owned by its three labels (the task label-safe, the exact task in the annotation of the same
//! key), with the contract's environment, a readiness probe on the Agent Card, the restricted
//! security profile, and an operator's `K8S_POD_TEMPLATE` merged in.
//!
//! The template can add (node selector, tolerations, image pull secrets, extra environment,
//! more labels and annotations, sidecars) but never override what this module owns: the name,
//! namespace, ownership labels and annotation, the worker's image, port, probe and environment
//! (the token among it), and the security rules, which are applied to every container.

use serde_json::{json, Map, Value};

use crate::backend::labels;
use crate::settings::templates::Template;
use crate::settings::K8sSettings;

/// The worker container's name in its pod (a template's container of this name is merged
/// into it).
pub const WORKER_CONTAINER: &str = "worker";
/// The user a worker runs as unless the template names another non-root one.
pub const DEFAULT_RUN_AS_USER: u32 = 65532;

/// Everything one worker pod is made from.
pub struct PodInputs<'a> {
    pub name: &'a str,
    pub namespace: &'a str,
    pub controller_id: &'a str,
    pub worker_id: &'a str,
    pub task: &'a str,
    /// Unix seconds, for the expires-at label.
    pub expires_at: Option<u64>,
    /// The worker token's one-way hash, for the token-hash label (`""`: none).
    pub token_hash: &'a str,
    /// The creating caller's scope (a label: it is label-safe).
    pub scope: &'a str,
    /// The caller's metadata, for `a2a-worker-controller.meta/*` annotations.
    pub metadata: &'a crate::backend::Metadata,
    /// The worker's environment (token included), from `worker_env`.
    pub env: &'a [(String, String)],
    /// The worker template: image, port, readiness path, limits, its name as a label.
    pub worker: &'a Template,
    pub k8s: &'a K8sSettings,
    /// The template's own pod template, else the parsed `K8S_POD_TEMPLATE`, already accepted
    /// by [`check_template`].
    pub pod_template: Option<&'a Value>,
    /// The task workspace's claim, mounted at the template's workspace path.
    pub workspace_claim: Option<&'a str>,
}

/// The label a fenced worker's pod carries (its template's egress is not `"open"`), and its
/// value: the NetworkPolicy of `fence.rs` selects it.
pub const EGRESS_LABEL: &str = "a2a-worker-controller/egress";
pub const FENCED: &str = "fenced";

/// The name of the task workspace's volume in a worker pod.
pub const WORKSPACE_VOLUME: &str = "workspace";

/// Why a `K8S_POD_TEMPLATE` is refused at startup (one line, for the settings error).
pub fn check_template(template: &Value) -> Result<(), String> {
    let pod = template
        .as_object()
        .ok_or("it must be a JSON object shaped like a Pod")?;
    if let Some(kind) = pod.get("kind").and_then(Value::as_str) {
        if kind != "Pod" {
            return Err(format!("its kind is {kind:?}, not Pod"));
        }
    }
    let spec = match pod.get("spec") {
        None => return Ok(()),
        Some(Value::Object(s)) => s,
        Some(_) => return Err("spec must be an object".into()),
    };
    for field in ["hostNetwork", "hostPID", "hostIPC"] {
        if spec.get(field) == Some(&Value::Bool(true)) {
            return Err(format!(
                "spec.{field} is true; worker pods never share the node's namespaces"
            ));
        }
    }
    let host_path = spec
        .get("volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|v| v.get("hostPath").is_some());
    if host_path {
        return Err("a hostPath volume would reach into the node; use another volume type".into());
    }
    let mut users = vec![spec.get("securityContext").and_then(|s| s.get("runAsUser"))];
    for list in ["containers", "initContainers"] {
        match spec.get(list) {
            None => {}
            Some(Value::Array(items)) => {
                for c in items {
                    if !c.is_object() {
                        return Err(format!("spec.{list} must hold objects"));
                    }
                    users.push(c.get("securityContext").and_then(|s| s.get("runAsUser")));
                }
            }
            Some(_) => return Err(format!("spec.{list} must be an array")),
        }
    }
    if users.into_iter().flatten().any(|u| u.as_u64() == Some(0)) {
        return Err("runAsUser 0 is root; workers run as a non-root user".into());
    }
    Ok(())
}

/// The pod to create: the pod template (if any) with the controller's metadata, spec and
/// worker container over it.
pub fn manifest(i: &PodInputs<'_>) -> Value {
    let mut pod = match i.pod_template {
        Some(Value::Object(t)) => Value::Object(t.clone()),
        _ => json!({}),
    };
    pod["apiVersion"] = json!("v1");
    pod["kind"] = json!("Pod");
    worker_metadata(object_at(&mut pod, "metadata"), i);
    let spec = object_at(&mut pod, "spec");
    worker_spec(spec, i);
    let mut containers: Vec<Value> = match spec.remove("containers") {
        Some(Value::Array(c)) => c,
        _ => Vec::new(),
    };
    let template_worker = containers
        .iter()
        .position(|c| c.get("name").and_then(Value::as_str) == Some(WORKER_CONTAINER))
        .map(|at| containers.remove(at));
    containers.insert(0, worker_container(i, template_worker));
    for c in &mut containers {
        restrict(c);
    }
    spec.insert("containers".into(), Value::Array(containers));
    if let Some(Value::Array(init)) = spec.get_mut("initContainers") {
        init.iter_mut().for_each(restrict);
    }
    spec.remove("ephemeralContainers");
    pod
}

/// The pod's name and namespace, its ownership and identity labels, and its annotations (the
/// task in full, and the caller's metadata and only it).
fn worker_metadata(metadata: &mut Map<String, Value>, i: &PodInputs<'_>) {
    metadata.insert("name".into(), json!(i.name));
    metadata.insert("namespace".into(), json!(i.namespace));
    for key in ["generateName", "ownerReferences", "finalizers"] {
        metadata.remove(key);
    }
    let labels = object_in(metadata, "labels");
    labels.insert(labels::OWNER.into(), json!(i.controller_id));
    let task = labels::task_label_value(i.task);
    let own = labels::identity(
        i.worker_id,
        task,
        i.scope,
        &i.worker.name,
        i.expires_at,
        i.token_hash,
    );
    for (k, v) in own {
        labels.insert(k.into(), json!(v));
    }
    if i.worker.egress.fenced() {
        labels.insert(EGRESS_LABEL.into(), json!(FENCED));
    } else {
        // Only the controller fences: a pod template's own label would cut an open worker off.
        labels.remove(EGRESS_LABEL);
    }
    // Set only by the controller: a template's own expiry label would make a worker die early.
    if i.expires_at.is_none() {
        labels.remove(labels::EXPIRES_AT);
    }
    if i.token_hash.is_empty() {
        labels.remove(labels::TOKEN_HASH);
    }
    let annotations = object_in(metadata, "annotations");
    annotations.insert(labels::TASK.into(), json!(i.task));
    // The caller's metadata, and only it: a template's own would read back as the caller's.
    annotations.retain(|k, _| !k.starts_with(labels::META));
    for (k, v) in labels::meta_entries(i.metadata) {
        annotations.insert(k, json!(v));
    }
}

/// The pod's spec around its containers: its name in the workers' Service, no host
/// namespaces or service account token, never restarted, not root, and the task's workspace
/// claim mounted as a volume (its files the worker's group's).
fn worker_spec(spec: &mut Map<String, Value>, i: &PodInputs<'_>) {
    spec.insert("hostname".into(), json!(i.name));
    spec.insert("subdomain".into(), json!(i.k8s.worker_service));
    spec.insert("automountServiceAccountToken".into(), json!(false));
    spec.insert("enableServiceLinks".into(), json!(false));
    for field in ["hostNetwork", "hostPID", "hostIPC"] {
        spec.insert(field.into(), json!(false));
    }
    spec.entry("restartPolicy").or_insert(json!("Never"));
    if let Some(runtime) = &i.worker.runtime {
        spec.insert("runtimeClassName".into(), json!(runtime));
    }
    let pod_security = object_in(spec, "securityContext");
    pod_security.insert("runAsNonRoot".into(), json!(true));
    pod_security
        .entry("runAsUser")
        .or_insert(json!(DEFAULT_RUN_AS_USER));
    pod_security.insert("seccompProfile".into(), json!({"type": "RuntimeDefault"}));
    let workspace = i.worker.workspace.as_ref().zip(i.workspace_claim);
    if workspace.is_some() {
        // The claim's files belong to the worker's group: a fresh volume is writable by it.
        let user = pod_security
            .get("runAsUser")
            .cloned()
            .unwrap_or(json!(DEFAULT_RUN_AS_USER));
        pod_security.entry("fsGroup").or_insert(user);
    }
    if let Some((_, claim)) = workspace {
        let volumes = spec.entry("volumes").or_insert_with(|| json!([]));
        if !volumes.is_array() {
            *volumes = json!([]);
        }
        if let Value::Array(list) = volumes {
            list.retain(|v| v.get("name").and_then(Value::as_str) != Some(WORKSPACE_VOLUME));
            list.push(
                json!({"name": WORKSPACE_VOLUME, "persistentVolumeClaim": {"claimName": claim}}),
            );
        }
    }
}

/// The scheduling gate that keeps a binding pod from ever being placed on a node.
pub const BINDING_GATE: &str = "a2a-worker-controller/binding";
/// The container name in a binding pod (it never runs).
pub const BINDING_CONTAINER: &str = "binding";

/// A warm pool's member pod: the worker pod `i` describes (with a member's environment, and no
/// worker id, task, scope, expiry or metadata) carrying the member's labels instead of a
/// worker's. A claim adds the worker's labels to it later.
pub fn member_manifest(i: &PodInputs<'_>, member: &labels::MemberLabels) -> Value {
    let mut pod = manifest(i);
    let metadata = object_at(&mut pod, "metadata");
    let labels = object_in(metadata, "labels");
    for key in [
        labels::WORKER_ID,
        labels::TASK,
        labels::SCOPE,
        labels::EXPIRES_AT,
    ] {
        labels.remove(key);
    }
    for (k, v) in labels::for_member(i.controller_id, member) {
        labels.insert(k, json!(v));
    }
    let annotations = object_in(metadata, "annotations");
    annotations.remove(labels::TASK);
    annotations.retain(|k, _| !k.starts_with(labels::META));
    pod
}

/// The binding of a claimed member (see `pool.rs`): a pod named after the task's pod, so the
/// API server's name uniqueness keeps one worker per task against cold creates and other
/// claims. Held back by a scheduling gate, it is never placed on a node and runs nothing; its
/// owner reference to the member lets the garbage collector remove it with the member. It
/// passes the restricted PodSecurity profile and a quota that asks for memory limits.
pub fn binding_manifest(
    name: &str,
    namespace: &str,
    controller_id: &str,
    member: (&str, &str),
    worker_id: &str,
    image: &str,
) -> Value {
    let (member_name, member_uid) = member;
    let mut container = json!({
        "name": BINDING_CONTAINER,
        "image": image,
        "resources": {"limits": {"memory": "1Mi", "cpu": "1m"}},
    });
    restrict(&mut container);
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {labels::OWNER: controller_id, labels::BINDING: member_name},
            "annotations": {labels::WORKER_ID: worker_id, labels::BINDING: member_uid},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": member_name, "uid": member_uid}],
        },
        "spec": {
            "schedulingGates": [{"name": BINDING_GATE}],
            "automountServiceAccountToken": false,
            "enableServiceLinks": false,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "securityContext": {
                "runAsNonRoot": true,
                "runAsUser": DEFAULT_RUN_AS_USER,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [container],
        },
    })
}

/// The worker's container: the template's container of that name, if any, with everything
/// this backend owns set over it.
fn worker_container(i: &PodInputs<'_>, template: Option<Value>) -> Value {
    let mut c = match template {
        Some(Value::Object(t)) => Value::Object(t),
        _ => json!({}),
    };
    let port = i.worker.port;
    c["name"] = json!(WORKER_CONTAINER);
    c["image"] = json!(i.worker.image);
    c["ports"] = json!([{"name": "a2a", "containerPort": port, "protocol": "TCP"}]);
    c["readinessProbe"] = json!({
        "httpGet": {"path": i.worker.ready_path, "port": port},
        "periodSeconds": 2,
        "timeoutSeconds": 2,
        "failureThreshold": 3,
    });
    // The contract's variables first; a template's extra variables after them, except any
    // that would shadow one of the contract's (the token above all).
    let ours: Vec<&str> = i.env.iter().map(|(k, _)| k.as_str()).collect();
    let mut env: Vec<Value> = i
        .env
        .iter()
        .map(|(k, v)| json!({"name": k, "value": v}))
        .collect();
    if let Some(Value::Array(extra)) = c.get("env") {
        env.extend(
            extra
                .iter()
                .filter(|e| {
                    e.get("name")
                        .and_then(Value::as_str)
                        .is_some_and(|n| !ours.contains(&n))
                })
                .cloned(),
        );
    }
    // `envFrom` (a template's ConfigMap or Secret) stays: Kubernetes gives `env` precedence
    // over `envFrom` for the same name, so it cannot shadow the token either.
    c["env"] = Value::Array(env);
    let mut limits = Map::new();
    if let Some(bytes) = i.worker.memory_bytes {
        limits.insert("memory".into(), json!(bytes.to_string()));
    }
    if let Some(nano) = i.worker.nano_cpus {
        limits.insert(
            "cpu".into(),
            json!(format!("{}m", (nano / 1_000_000).max(1))),
        );
    }
    if !limits.is_empty() {
        let resources = object_at(&mut c, "resources");
        object_in(resources, "limits").extend(limits);
    }
    if let (Some(w), Some(_)) = (&i.worker.workspace, i.workspace_claim) {
        let mounts = c
            .as_object_mut()
            .map(|o| o.entry("volumeMounts").or_insert_with(|| json!([])));
        if let Some(mounts) = mounts {
            if !mounts.is_array() {
                *mounts = json!([]);
            }
            if let Value::Array(list) = mounts {
                list.retain(|m| {
                    m.get("name").and_then(Value::as_str) != Some(WORKSPACE_VOLUME)
                        && m.get("mountPath").and_then(Value::as_str) != Some(w.path.as_str())
                });
                list.push(json!({"name": WORKSPACE_VOLUME, "mountPath": w.path}));
            }
        }
    }
    c
}

/// The restricted profile on one container, whatever the template said.
fn restrict(c: &mut Value) {
    if !c.is_object() {
        return;
    }
    let security = object_at(c, "securityContext");
    security.insert("allowPrivilegeEscalation".into(), json!(false));
    security.insert("privileged".into(), json!(false));
    security.insert("runAsNonRoot".into(), json!(true));
    security.insert("capabilities".into(), json!({"drop": ["ALL"]}));
    security.insert("seccompProfile".into(), json!({"type": "RuntimeDefault"}));
}

/// The object at `key` of an object value, made an object if it is anything else.
fn object_at<'v>(v: &'v mut Value, key: &str) -> &'v mut Map<String, Value> {
    if !v.is_object() {
        *v = json!({});
    }
    let Value::Object(map) = v else {
        unreachable!("made an object above")
    };
    object_in(map, key)
}

fn object_in<'m>(map: &'m mut Map<String, Value>, key: &str) -> &'m mut Map<String, Value> {
    let slot = map.entry(key).or_insert_with(|| json!({}));
    if !slot.is_object() {
        *slot = json!({});
    }
    match slot {
        Value::Object(m) => m,
        _ => unreachable!("made an object above"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::{self, BackendSettings, Command};

    fn settings() -> (Template, K8sSettings) {
        let args = [
            "-backend=k8s",
            "-a2a-auth-token=0123456789abcdef",
            "-a2a-public-url=http://x",
            "-worker-image=a2a-echo-worker:dev",
            "-worker-memory=512m",
            "-worker-cpus=1.5",
        ];
        let Ok(Command::Run(s)) = settings::parse(args.iter().map(|a| a.to_string()), Vec::new())
        else {
            panic!("settings")
        };
        let template = s.default_template();
        let BackendSettings::K8s { k8s, .. } = s.backend else {
            panic!("k8s")
        };
        (template, k8s)
    }

    fn pod(template: Option<&Value>) -> Value {
        let (worker, k8s) = settings();
        let env = vec![
            ("INTERACTIVE_AUTH_TOKEN".to_string(), "s3cr3t".to_string()),
            ("WORKER_ID".to_string(), "w1".to_string()),
        ];
        manifest(&PodInputs {
            name: "ctl-task-0123456789abcdef",
            namespace: "workers",
            controller_id: "ctl",
            worker_id: "w1",
            task: "Fix the login bug!",
            scope: "team-a",
            expires_at: None,
            token_hash: "",
            metadata: &[("team".to_string(), "infra".to_string())].into(),
            env: &env,
            worker: &worker,
            k8s: &k8s,
            pod_template: template,
            workspace_claim: None,
        })
    }

    #[test]
    fn the_pod_carries_ownership_environment_probe_and_restrictions() {
        let p = pod(None);
        let labels = &p["metadata"]["labels"];
        assert_eq!(labels[labels::OWNER], "ctl");
        assert_eq!(labels[labels::WORKER_ID], "w1");
        assert_eq!(
            labels[labels::TASK],
            labels::task_label_value("Fix the login bug!")
        );
        assert_eq!(
            p["metadata"]["annotations"][labels::TASK],
            "Fix the login bug!"
        );
        assert_eq!(p["spec"]["hostname"], "ctl-task-0123456789abcdef");
        assert_eq!(p["spec"]["subdomain"], "a2a-workers");
        assert_eq!(p["spec"]["automountServiceAccountToken"], false);
        let c = &p["spec"]["containers"][0];
        assert_eq!(c["image"], "a2a-echo-worker:dev");
        assert_eq!(c["env"][0]["value"], "s3cr3t");
        assert_eq!(
            c["readinessProbe"]["httpGet"]["path"],
            "/.well-known/agent-card.json"
        );
        assert_eq!(c["securityContext"]["capabilities"]["drop"][0], "ALL");
        assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
        assert_eq!(p["spec"]["securityContext"]["runAsNonRoot"], true);
        assert_eq!(
            p["spec"]["securityContext"]["seccompProfile"]["type"],
            "RuntimeDefault"
        );
        assert_eq!(
            c["resources"]["limits"]["memory"],
            (512u64 << 20).to_string()
        );
        assert_eq!(c["resources"]["limits"]["cpu"], "1500m");
        // The token is in the environment only.
        let outside_env =
            json!({"metadata": p["metadata"], "spec": {"hostname": p["spec"]["hostname"]}});
        assert!(!outside_env.to_string().contains("s3cr3t"));
    }

    #[test]
    fn a_template_adds_but_never_overrides() {
        let template = json!({
            "metadata": {"name": "evil", "labels": {"team": "a", labels::OWNER: "other"},
                         "annotations": {labels::TASK: "other task", "note": "kept"}},
            "spec": {
                "nodeSelector": {"pool": "agents"},
                "tolerations": [{"key": "agents", "operator": "Exists", "effect": "NoSchedule"}],
                "imagePullSecrets": [{"name": "registry"}],
                "automountServiceAccountToken": true,
                "securityContext": {"runAsUser": 1000, "runAsNonRoot": false},
                "containers": [
                    {"name": "worker", "image": "evil:1",
                     "env": [{"name": "INTERACTIVE_AUTH_TOKEN", "value": "stolen"},
                             {"name": "EXTRA", "value": "kept"}],
                     "envFrom": [{"secretRef": {"name": "all"}}],
                     "securityContext": {"privileged": true, "allowPrivilegeEscalation": true,
                                         "capabilities": {"add": ["NET_ADMIN"]}}},
                    {"name": "sidecar", "image": "side:1"}
                ]
            }
        });
        check_template(&template).unwrap();
        let p = pod(Some(&template));
        assert_eq!(p["metadata"]["name"], "ctl-task-0123456789abcdef");
        assert_eq!(p["metadata"]["labels"]["team"], "a");
        assert_eq!(p["metadata"]["labels"][labels::OWNER], "ctl");
        assert_eq!(p["metadata"]["annotations"]["note"], "kept");
        assert_eq!(
            p["metadata"]["annotations"][labels::TASK],
            "Fix the login bug!"
        );
        assert_eq!(p["spec"]["nodeSelector"]["pool"], "agents");
        assert_eq!(p["spec"]["imagePullSecrets"][0]["name"], "registry");
        assert_eq!(p["spec"]["automountServiceAccountToken"], false);
        assert_eq!(p["spec"]["securityContext"]["runAsUser"], 1000);
        assert_eq!(p["spec"]["securityContext"]["runAsNonRoot"], true);
        let containers = p["spec"]["containers"].as_array().unwrap();
        assert_eq!(containers.len(), 2);
        let worker = &containers[0];
        assert_eq!(worker["image"], "a2a-echo-worker:dev");
        let env = worker["env"].to_string();
        assert!(!env.contains("stolen") && env.contains("EXTRA"), "{env}");
        assert_eq!(worker["envFrom"][0]["secretRef"]["name"], "all");
        for c in containers {
            let s = &c["securityContext"];
            assert_eq!(s["privileged"], false);
            assert_eq!(s["allowPrivilegeEscalation"], false);
            assert_eq!(s["capabilities"], json!({"drop": ["ALL"]}));
        }
    }

    #[test]
    fn a_member_pod_carries_a_members_labels_and_a_binding_is_gated() {
        let (worker, k8s) = settings();
        let env = vec![("A2A_POOL_MEMBER".to_string(), "ctl-pool-w-1-0".to_string())];
        let member = labels::MemberLabels {
            member: "ctl-pool-w-1-0".into(),
            template: "w".into(),
            revision: "r1".into(),
            key_id: "k1".into(),
            nonce: "n1".into(),
        };
        let p = member_manifest(
            &PodInputs {
                name: "ctl-pool-w-1-0-abcdef",
                namespace: "workers",
                controller_id: "ctl",
                worker_id: "",
                task: "",
                scope: "",
                expires_at: None,
                token_hash: "",
                metadata: &Default::default(),
                env: &env,
                worker: &worker,
                k8s: &k8s,
                pod_template: None,
                workspace_claim: None,
            },
            &member,
        );
        let l = &p["metadata"]["labels"];
        assert_eq!(l[labels::OWNER], "ctl");
        assert_eq!(l[labels::MEMBER], "ctl-pool-w-1-0");
        assert_eq!(l[labels::NONCE], "n1");
        for key in [labels::WORKER_ID, labels::TASK, labels::SCOPE] {
            assert!(l.get(key).is_none(), "{key} on a member: {l}");
        }
        assert!(p["metadata"]["annotations"].get(labels::TASK).is_none());
        assert_eq!(p["spec"]["hostname"], "ctl-pool-w-1-0-abcdef");

        let b = binding_manifest(
            "ctl-task-1",
            "workers",
            "ctl",
            ("m", "uid-1"),
            "w1",
            "img:1",
        );
        assert_eq!(b["metadata"]["labels"][labels::BINDING], "m");
        assert!(
            b["metadata"]["labels"].get(labels::WORKER_ID).is_none(),
            "never listed"
        );
        assert_eq!(b["metadata"]["annotations"][labels::WORKER_ID], "w1");
        assert_eq!(b["metadata"]["ownerReferences"][0]["uid"], "uid-1");
        assert_eq!(b["spec"]["schedulingGates"][0]["name"], BINDING_GATE);
        let c = &b["spec"]["containers"][0];
        assert_eq!(c["securityContext"]["capabilities"]["drop"][0], "ALL");
        assert_eq!(c["resources"]["limits"]["memory"], "1Mi");
    }

    #[test]
    fn templates_that_would_escape_are_refused() {
        for (bad, why) in [
            (json!([]), "object"),
            (json!({"kind": "Deployment"}), "not Pod"),
            (json!({"spec": {"hostNetwork": true}}), "hostNetwork"),
            (
                json!({"spec": {"volumes": [{"name": "h", "hostPath": {"path": "/"}}]}}),
                "hostPath",
            ),
            (
                json!({"spec": {"securityContext": {"runAsUser": 0}}}),
                "root",
            ),
            (
                json!({"spec": {"containers": [{"name": "x", "securityContext": {"runAsUser": 0}}]}}),
                "root",
            ),
            (json!({"spec": {"containers": {}}}), "array"),
        ] {
            let e = check_template(&bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
        assert!(check_template(&json!({"spec": {"nodeSelector": {"a": "b"}}})).is_ok());
    }
}
