"""Checks the Kubernetes deploy files and the worker pods the controller builds.

Usage: k8s_manifests.py MANIFEST_DIR POD_DIR VERBS

1. Every manifest under MANIFEST_DIR and every pod body (*.json) under POD_DIR validates
   against the official Kubernetes schemas in strict mode (kubernetes-validate, offline), for
   the oldest and the newest Kubernetes version checked.
2. The manifests fit together and fit the backend: the Role grants every verb in VERBS (a
   comma-separated list given by the test) on pods; the RoleBinding binds it to the
   Deployment's ServiceAccount; the headless worker Service and the NetworkPolicy select the
   owner label with the Deployment's CONTROLLER_ID; the Deployment runs BACKEND=k8s with that
   worker Service, the token from a Secret, probes on /healthz and /readiness, and resources.
Exits non-zero with one line per failure.
"""

import glob
import json
import os
import subprocess
import sys

import yaml

VERSIONS = ["1.31.0", "1.37.0"]
OWNER = "a2a-worker-controller/owner"


def main(manifest_dir, pod_dir, verbs):
    failures = []

    def check(cond, what):
        if not cond:
            failures.append(what)

    manifests = sorted(glob.glob(os.path.join(manifest_dir, "*.yaml")))
    pods = sorted(glob.glob(os.path.join(pod_dir, "*.json")))
    check(manifests, f"no manifests in {manifest_dir}")
    check(pods, f"no pod bodies in {pod_dir}")
    tool = os.path.join(os.path.dirname(sys.executable), "kubernetes-validate")
    for version in VERSIONS:
        r = subprocess.run([tool, "--strict", "--quiet", "-k", version, *manifests, *pods],
                           capture_output=True, text=True)
        check(r.returncode == 0, f"kubernetes-validate {version}: {r.stdout}{r.stderr}".strip())

    docs = []
    for path in manifests:
        with open(path) as f:
            docs.extend(d for d in yaml.safe_load_all(f) if d)
    by_kind = {}
    for d in docs:
        by_kind.setdefault(d["kind"], []).append(d)

    # VERBS items are "verb" (on pods) or "verb resource" (e.g. "get pods/log").
    role = by_kind["Role"][0]
    granted = {(v, r) for rule in role["rules"] for r in rule["resources"] for v in rule["verbs"]}
    wanted = {tuple((item.split(" ", 1) + ["pods"])[:2]) for item in verbs}
    missing = wanted - granted
    check(not missing, f"the Role does not grant {sorted(missing)}")
    extra = granted - wanted
    check(not extra, f"the Role grants {sorted(extra)} that the backend never uses")

    deployments = {d["metadata"]["name"]: d for d in by_kind["Deployment"]}
    deployment = deployments["a2a-worker-controller"]
    pod_spec = deployment["spec"]["template"]["spec"]
    container = pod_spec["containers"][0]
    env = {e["name"]: e for e in container.get("env", [])}
    value = lambda name: env.get(name, {}).get("value")
    controller_id = value("CONTROLLER_ID") or "a2a-worker-controller"
    worker_service = value("K8S_WORKER_SERVICE") or "a2a-workers"
    worker_port = int(value("WORKER_PORT") or "9090")
    check(deployment["spec"]["replicas"] >= 2, "the Deployment runs fewer than 2 replicas")
    check(value("BACKEND") == "k8s", "the Deployment does not set BACKEND=k8s")
    check(value("WORKSPACE_COPY_IMAGE") == container["image"],
          "WORKSPACE_COPY_IMAGE is not the controller's own image (copy Jobs run its copy-files)")
    token_file = value("A2A_AUTH_TOKEN_FILE") or ""
    mounts = {m["mountPath"]: m["name"] for m in container.get("volumeMounts", [])}
    volumes = {v["name"]: v for v in pod_spec.get("volumes", [])}
    mount = os.path.dirname(token_file)
    secret = volumes.get(mounts.get(mount, ""), {}).get("secret", {})
    check(secret.get("secretName") and "A2A_AUTH_TOKEN" not in env,
          "the auth token does not come from a Secret mounted at A2A_AUTH_TOKEN_FILE")
    check(any(i.get("path") == os.path.basename(token_file) for i in secret.get("items", [])),
          "the Secret volume has no item at A2A_AUTH_TOKEN_FILE's name")
    probes = {container.get(p, {}).get("httpGet", {}).get("path")
              for p in ("readinessProbe", "livenessProbe")}
    check(probes == {"/healthz", "/readiness"}, f"probes are {probes}")
    res = container.get("resources", {})
    check(res.get("requests") and res.get("limits"), "the controller has no requests and limits")

    binding = by_kind["RoleBinding"][0]
    sa = pod_spec.get("serviceAccountName")
    check(any(s["kind"] == "ServiceAccount" and s["name"] == sa for s in binding["subjects"]),
          f"the RoleBinding does not bind the Deployment's ServiceAccount {sa}")
    check(binding["roleRef"]["name"] == role["metadata"]["name"], "the RoleBinding names another Role")

    services = {s["metadata"]["name"]: s for s in by_kind["Service"]}
    ws = services.get(worker_service)
    check(ws is not None, f"no Service named {worker_service} (K8S_WORKER_SERVICE)")
    if ws:
        check(ws["spec"].get("clusterIP") == "None", "the worker Service is not headless")
        check(ws["spec"].get("selector") == {OWNER: controller_id},
              f"the worker Service selects {ws['spec'].get('selector')}, not {OWNER}={controller_id}")
        check(any(p.get("targetPort") == worker_port for p in ws["spec"]["ports"]),
              f"the worker Service does not target WORKER_PORT {worker_port}")
    policies = {p["metadata"]["name"]: p for p in by_kind["NetworkPolicy"]}
    policy = policies["a2a-workers-from-namespace-only"]
    check(policy["spec"]["podSelector"].get("matchLabels") == {OWNER: controller_id},
          "the NetworkPolicy does not select the worker pods by owner label")

    # Egress: the fence (EGRESS_NETWORK's default names it) selects fenced pods and lets them
    # reach only the proxy's pods on its port, and DNS; the proxy's Service selects those pods;
    # the proxy is the controller's image running `egress`, its key from the controller's token.
    fence = policies.get("a2a-egress")
    proxy = deployments.get("a2a-egress")
    check(fence is not None and proxy is not None, "no a2a-egress NetworkPolicy and Deployment")
    if fence and proxy:
        proxy_labels = proxy["spec"]["template"]["metadata"]["labels"]
        pc = proxy["spec"]["template"]["spec"]["containers"][0]
        penv = {e["name"]: e.get("value") for e in pc.get("env", [])}
        port = next(p["containerPort"] for p in pc["ports"])
        check(fence["spec"]["podSelector"].get("matchLabels") == {"a2a-worker-controller/egress": "fenced"},
              "the fence does not select pods labelled a2a-worker-controller/egress=fenced")
        check(fence["spec"]["policyTypes"] == ["Egress"], "the fence does not limit egress")
        to_proxy = [r for r in fence["spec"]["egress"]
                    if any(t.get("podSelector", {}).get("matchLabels") == proxy_labels and "namespaceSelector" not in t
                           for t in r["to"])]
        check(to_proxy and to_proxy[0]["ports"] == [{"protocol": "TCP", "port": port}],
              "the fence does not let fenced pods reach the proxy's pods on its port")
        check(len(fence["spec"]["egress"]) == 2, "the fence allows more than the proxy and DNS")
        check(pc.get("args") == ["egress"] and pc["image"] == container["image"],
              "the proxy is not the controller's image running `egress`")
        check(penv.get("A2A_AUTH_TOKEN_FILE") == token_file,
              "the proxy does not read the controller's token file (the placeholders' key is derived from it)")
        check(penv.get("EGRESS_LISTEN") == f":{port}", "the proxy does not listen on its container port")
        ps = services.get("a2a-egress")
        check(ps is not None and ps["spec"]["selector"] == proxy_labels,
              "no a2a-egress Service selecting the proxy's pods")

    for path in pods:
        with open(path) as f:
            pod = json.load(f)
        if pod.get("kind") == "PersistentVolumeClaim":
            check(pod["metadata"]["labels"].get(OWNER) == controller_id,
                  f"{os.path.basename(path)}: the claim is not owned by {controller_id}")
            continue
        if "a2a-worker-controller/binding" in pod["metadata"].get("labels", {}):
            # a warm pool claim's binding: owned, never scheduled, so it needs no DNS name
            check(pod["metadata"]["labels"].get(OWNER) and pod["spec"].get("schedulingGates"),
                  f"{os.path.basename(path)}: a binding pod must be owned and gated")
            continue
        check(pod["spec"]["subdomain"] == worker_service,
              f"{os.path.basename(path)}: subdomain is not the worker Service")
        if pod["metadata"]["labels"].get("a2a-worker-controller/egress") == "fenced":
            penv = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
            check(penv.get("HTTPS_PROXY", "").startswith("http://") and penv.get("ANTHROPIC_AUTH_TOKEN", "").startswith("a2a-egress-v1."),
                  f"{os.path.basename(path)}: a fenced pod without the proxy and its placeholder")
            check(pod["spec"].get("runtimeClassName") == "gvisor",
                  f"{os.path.basename(path)}: the template's runtime is not the pod's runtimeClassName")

    for f in failures:
        print(f"k8s manifests: {f}")
    if failures:
        sys.exit(1)
    print(f"k8s manifests: ok ({len(manifests)} manifests, {len(pods)} pods, {VERSIONS})")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], [v for v in sys.argv[3].split(",") if v])
