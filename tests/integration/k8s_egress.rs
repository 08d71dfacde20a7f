//! Fenced workers on the Kubernetes stand-in: a fenced template needs the NetworkPolicy that
//! fences it (refused at startup in one line while it is missing, limits only ingress, or the
//! Role may not read it), a runtime needs its RuntimeClass (the API server's admission refuses
//! the startup dry run), and a fenced worker's pod carries the label the policy selects, its
//! runtime class, the proxy and its placeholder, never the model key.

use serde_json::json;

use crate::k8s_e2e::{api, flags, pods, refused_at_startup, start};
use crate::k8s_support::{configured, Pki, Standin};
use crate::secrets::remember;
use crate::support::{controller_id, reply_data, Controls};

const MODEL_KEY: &str = "k8s-model-key-2b9e41";

#[test]
fn a_fenced_template_needs_its_network_policy_and_a_runtime_its_runtime_class() {
    if !configured() {
        return;
    }
    let pki = Pki::new("egress");
    let record = pki.dir.join("record");
    std::fs::create_dir_all(&record).unwrap();
    let mut standin = Standin::start(
        &pki,
        &["--ready-after", "0.2", "--record", record.to_str().unwrap()],
    );
    let templates = pki.dir.join("templates.json");
    std::fs::write(
        &templates,
        json!({"templates": {"coder": {"egress": ["api.github.com:443"], "runtime": "gvisor"}}})
            .to_string(),
    )
    .unwrap();
    let model_key = crate::egress::secret_file(&pki.dir, "model-key", MODEL_KEY);
    remember(MODEL_KEY);
    let own = [
        format!("-worker-templates-file={}", templates.display()),
        "-egress-proxy-url=http://a2a-egress.a2a.svc.cluster.local:8790".to_string(),
        format!("-anthropic-auth-token-file={}", model_key.display()),
    ];
    let mut args = flags(&standin, &pki);
    args.extend(own.iter().cloned());
    let last_line = |text: String| text.lines().last().unwrap_or_default().to_string();

    let missing = last_line(refused_at_startup(&args));
    assert!(
        missing.ends_with("template \"coder\": egress: api.github.com:443 cannot be enforced: there is no NetworkPolicy a2a-egress in namespace a2a (apply scripts/k8s/70-egress.yaml; enforcement needs a CNI that enforces NetworkPolicy)"),
        "{missing}"
    );
    standin.send("fence-ingress a2a-egress");
    let ingress = last_line(refused_at_startup(&args));
    assert!(
        ingress.contains(
            "does not limit the egress of pods labelled a2a-worker-controller/egress=fenced"
        ),
        "{ingress}"
    );
    standin.send("fence a2a-egress");
    standin.send("deny networkpolicies");
    let denied = last_line(refused_at_startup(&args));
    assert!(
        denied.contains("the Role may not get networkpolicies"),
        "{denied}"
    );
    standin.send("deny -");
    let runtime = last_line(refused_at_startup(&args));
    assert!(
        runtime.contains(r#"pod rejected: RuntimeClass \"gvisor\" not found"#)
            || runtime.contains(r#"pod rejected: RuntimeClass "gvisor" not found"#),
        "{runtime}"
    );

    standin.send("runtimeclass gvisor");
    let id = controller_id("k8s-egress");
    let refs: Vec<&str> = own.iter().map(String::as_str).collect();
    let p = start(&standin, &pki, &id, &refs);
    let created = reply_data(
        &p.control(json!({"operation": "create", "task": "fenced", "template": "coder"})),
    );
    remember(created["token"].as_str().unwrap());
    let api = api(&standin, &pki);
    let pod = pods(&api).into_iter().next().expect("the worker's pod");
    assert_eq!(
        pod["metadata"]["labels"]["a2a-worker-controller/egress"],
        "fenced"
    );
    assert_eq!(pod["spec"]["runtimeClassName"], "gvisor");
    let env = pod["spec"]["containers"][0]["env"].to_string();
    assert!(
        !env.contains(MODEL_KEY),
        "the model key is in a fenced pod: {env}"
    );
    assert!(
        env.contains("a2a-egress-v1.")
            && env.contains("http://a2a-egress.a2a.svc.cluster.local:8790/model"),
        "{env}"
    );

    // An open worker's pod is as it was: no fence label, the model key itself.
    let open = reply_data(&p.control(json!({"operation": "create", "task": "open"})));
    remember(open["token"].as_str().unwrap());
    let pod = pods(&api)
        .into_iter()
        .find(|p| p["metadata"]["labels"]["a2a-worker-controller/template"] == "default")
        .expect("the open worker's pod");
    assert!(pod["metadata"]["labels"]
        .get("a2a-worker-controller/egress")
        .is_none());
    assert!(pod["spec"]["containers"][0]["env"]
        .to_string()
        .contains(MODEL_KEY));

    // What the Role must grant for a fenced template: get on the NetworkPolicy.
    let verbs = std::fs::read_to_string(record.join("verbs")).unwrap();
    assert!(verbs.lines().any(|v| v == "get networkpolicies"), "{verbs}");
}
