//! The Kubernetes deploy files (`scripts/k8s/`) and the worker pods the controller builds,
//! validated against the official Kubernetes schemas in strict mode by `kubernetes-validate`
//! (PyPI, offline schemas; scripts/test.sh installs it into the test virtualenv), and checked to
//! fit together (RBAC verbs, selectors, the Deployment's settings) by
//! `tests/python/k8s_manifests.py`.

use a2a_worker_controller::backend::CreateSpec;
use a2a_worker_controller::settings::templates::{Template, Workspace};
use a2a_worker_controller::settings::{self, BackendSettings, Command as Cli};
use a2a_worker_controller::testing::{
    check_template, k8s_binding_pod, k8s_claim, k8s_member_pod, k8s_pod, pod_name,
    worker_environment, MemberLabels, PodInputs,
};
use a2a_worker_controller::token::Token;
use serde_json::{json, Value};

use crate::k8s_support::{check_manifests, configured};

/// What the backend asks of the API: on pods create, get (name collisions), list, watch
/// (readiness), delete, patch (a warm pool's claim); get on pods/log (the logs operation); list on events (a not-ready
/// worker's probe failure, `k8s_faults` records it); on claims create, get, list, patch, delete
/// (task workspaces); get on networkpolicies (the fence of workers whose egress is not open);
/// create, get, list and delete on secrets (suspended workers' records); create, get and delete
/// on jobs (workspace copies of a storage class that does not clone).
pub const VERBS: &str = "create,get,list,watch,delete,patch,get pods/log,list events,create persistentvolumeclaims,get persistentvolumeclaims,list persistentvolumeclaims,patch persistentvolumeclaims,delete persistentvolumeclaims,get networkpolicies,create secrets,get secrets,list secrets,delete secrets,create jobs,get jobs,delete jobs";

/// The `workspace` case's template: the settings' default with a workspace of 2Gi.
fn workspace_template(case: &str, mut t: Template) -> Template {
    if case == "fenced" {
        // A fenced worker with a runtime of its own: the label the NetworkPolicy selects, the
        // proxy's variables, runtimeClassName.
        t.egress =
            a2a_worker_controller::settings::egress::parse_egress(&json!(["api.github.com:443"]))
                .unwrap();
        t.runtime = Some("gvisor".into());
    }
    if case == "workspace" {
        t.workspace = Some(Workspace {
            path: "/workspace".into(),
            size: "2Gi".into(),
            size_bytes: 2 << 30,
            storage_class: Some("local-path".into()),
        });
    }
    t
}

/// Pod bodies for a few settings and templates, as the backend would send them, and the
/// workspace claims sent before them.
fn pods() -> Vec<(String, Value)> {
    let mut claims = Vec::new();
    let cases: [(&str, &[&str], Option<Value>); 5] = [
        ("plain", &[], None),
        (
            "fenced",
            &["-egress-proxy-url=http://a2a-egress.a2a.svc.cluster.local:8790"],
            None,
        ),
        // A template with a workspace: its claim is validated beside the pod.
        ("workspace", &[], None),
        (
            "limits",
            &[
                "-worker-memory=512m",
                "-worker-cpus=0.25",
                "-worker-port=8081",
            ],
            None,
        ),
        (
            "template",
            &[],
            Some(json!({
                "metadata": {"labels": {"team": "agents"}, "annotations": {"owner": "ops"}},
                "spec": {
                    "nodeSelector": {"kubernetes.io/os": "linux"},
                    "tolerations": [{"key": "agents", "operator": "Exists", "effect": "NoSchedule"}],
                    "imagePullSecrets": [{"name": "registry"}],
                    "securityContext": {"runAsUser": 1000, "fsGroup": 1000},
                    "containers": [{"name": "worker",
                                    "env": [{"name": "HTTPS_PROXY", "value": "http://proxy:3128"}],
                                    "envFrom": [{"secretRef": {"name": "extra"}}]}]
                }
            })),
        ),
    ];
    cases
        .into_iter()
        .map(|(name, flags, template)| {
            let mut args = vec![
                "-backend=k8s".to_string(),
                "-a2a-auth-token=0123456789abcdef".into(),
                "-a2a-public-url=http://controller".into(),
                "-worker-image=a2a-echo-worker:dev".into(),
            ];
            args.extend(flags.iter().map(|f| f.to_string()));
            let Ok(Cli::Run(s)) = settings::parse(args, Vec::new()) else {
                panic!("settings for {name}")
            };
            let BackendSettings::K8s { container, k8s } = &s.backend else {
                panic!("k8s settings")
            };
            if let Some(t) = &template {
                check_template(t).unwrap();
            }
            let task = format!("Fix the {name} bug! ✓");
            let pod = pod_name(&s.controller_id, "team-a", &task);
            let spec = CreateSpec {
                worker_id: "3f9c2a1b7d4e".into(),
                task: task.clone(),
                scope: "team-a".into(),
                token: Token::generate().unwrap(),
                // 2030-03-17: the expiry label's value must pass the schema too.
                expires_at: Some(1_900_000_000),
                // Metadata as annotations: any printable value, the key as an annotation name.
                metadata: [
                    ("team".to_string(), "infra & ops: \"nightly\" ✓".to_string()),
                    ("ticket.id".to_string(), "JIRA-1234".to_string()),
                ]
                .into(),
                template: std::sync::Arc::new(workspace_template(name, s.default_template())),
                progress: Default::default(),
            };
            let claim = k8s_claim(&s.controller_id, "a2a", &spec);
            let url = format!(
                "http://{pod}.a2a-workers.a2a.svc.cluster.local:{}",
                container.port
            );
            let env = worker_environment(&spec, &url, container, Some("anthropic-token"))
                .expect("no secret files to read");
            let inputs = PodInputs {
                name: &pod,
                namespace: "a2a",
                controller_id: &s.controller_id,
                worker_id: &spec.worker_id,
                task: &task,
                scope: &spec.scope,
                expires_at: spec.expires_at,
                token_hash: &spec.token.hash(),
                metadata: &spec.metadata,
                env: &env,
                worker: &spec.template,
                k8s,
                pod_template: template.as_ref(),
                workspace_claim: claim.as_ref().and_then(|c| c["metadata"]["name"].as_str()),
            };
            let body = k8s_pod(&inputs);
            if name == "template" {
                // A warm pool's member pod and a claim's binding pod.
                let member = MemberLabels {
                    member: "ctl-pool-warm-0123abcd-0".into(),
                    template: "default".into(),
                    revision: "4d2af981d031".into(),
                    key_id: "09b7a294aa19d093".into(),
                    nonce: "05ae6f92a03f0af5".into(),
                };
                claims.push(("member".into(), k8s_member_pod(&inputs, &member)));
                claims.push((
                    "binding".into(),
                    k8s_binding_pod(
                        &pod,
                        "a2a",
                        &s.controller_id,
                        (
                            "ctl-pool-warm-0123abcd-0-05ae6f",
                            "1da633b3-3d63-4fcb-8a42-e07d7bdf55a5",
                        ),
                        &spec.worker_id,
                        &spec.template.image,
                    ),
                ));
            }
            if let Some(c) = claim {
                claims.push((format!("{name}-claim"), c));
            }
            (name.to_string(), body)
        })
        .collect::<Vec<_>>()
        .into_iter()
        .chain(claims)
        .collect()
}

#[test]
fn deploy_files_and_worker_pods_validate_against_the_official_schemas() {
    if !configured() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("a2a-k8s-pods-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (name, pod) in pods() {
        std::fs::write(dir.join(format!("{name}.json")), pod.to_string()).unwrap();
    }
    let out = check_manifests(&dir, VERBS);
    let _ = std::fs::remove_dir_all(&dir);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("k8s manifests: ok"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_pod_that_breaks_the_schema_is_caught() {
    // The check above can fail: a pod with a field the schema does not know is refused.
    if !configured() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("a2a-k8s-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (_, mut pod) = pods().remove(0);
    pod["spec"]["containers"][0]["bogusField"] = json!(1);
    std::fs::write(dir.join("bad.json"), pod.to_string()).unwrap();
    let out = check_manifests(&dir, VERBS);
    let _ = std::fs::remove_dir_all(&dir);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "{stdout}");
    assert!(stdout.contains("bogusField"), "{stdout}");
}
