#!/usr/bin/env python3
"""Egress on a real kube-apiserver 1.36.2 (built from source, NODE.md): the deploy files applied
(kubectl, server-side validation), the NetworkPolicy's get 404/200 and a pod with a missing
RuntimeClass (dry run) as raw answers, and the controller's startup refusals and a fenced
worker's pod, as the controller's Role (its ServiceAccount's token). Writes $WORK/rec/."""
import json, os, subprocess, sys, time, urllib.request, ssl

sys.path.insert(0, "/work/shared/reference/k8s-real/node")
os.environ.setdefault("REALK8S_BIN", "/tmp/realk8s/bin126")
import realk8s_env as rk  # noqa: E402

rk.enter_private_netns()
if rk.in_private_netns():
    rk.loopback_up()
work = sys.argv[1]
binary = sys.argv[2]
repo = sys.argv[3]
os.makedirs(work, exist_ok=True)
rec = os.path.join(work, "rec")
os.makedirs(rec, exist_ok=True)
transcript = open(os.path.join(rec, "s40-egress.txt"), "w")


def say(*parts):
    line = " ".join(str(p) for p in parts)
    print(line, flush=True)
    transcript.write(line + "\n")
    transcript.flush()


def raw(name, method, path, body=None, token=None):
    """One raw call; headers and body saved as NAME.h / NAME.b (as the recordings do)."""
    ctx = ssl.create_default_context(cafile=c.ca_file)
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    else:
        ctx.load_cert_chain(os.path.join(c.pki, "admin.crt"), os.path.join(c.pki, "admin.key"))
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(c.url + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=10) as r:
            code, hdrs, out = r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        code, hdrs, out = e.code, e.headers, e.read()
    with open(os.path.join(rec, name + ".h"), "w") as f:
        f.write(f"HTTP/1.1 {code}\n" + "".join(f"{k}: {v}\n" for k, v in hdrs.items()))
    with open(os.path.join(rec, name + ".b"), "wb") as f:
        f.write(out)
    say(f"$ {method} {path}  -> {code}")
    say("  " + out.decode("utf-8", "replace")[:600])
    return code, out


def controller(args, until_up=False, seconds=30):
    """The controller binary with `args`; its exit and output, or (None, output) once up."""
    port = rk.free_port()
    env = dict(os.environ, A2A_AUTH_TOKEN="realk8s-egress-token-0123456789", RUST_LOG="info")
    argv = [binary, f"-listen=127.0.0.1:{port}", f"-a2a-public-url=http://127.0.0.1:{port}",
            "-backend=k8s", f"-k8s-api-url={c.url}", f"-k8s-ca-file={c.ca_file}",
            f"-k8s-token-file={token_file}", "-k8s-namespace=a2a",
            "-worker-image=a2a-echo-worker:dev", "-controller-id=realk8s-egress", *args]
    say("$ a2a-worker-controller " + " ".join(a for a in args))
    p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if not until_up:
        out, _ = p.communicate(timeout=seconds)
        for line in out.strip().splitlines():
            say("  " + line)
        say(f"  (exit {p.returncode})")
        return p.returncode, out, None
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1)
            return None, "", (p, port)
        except Exception:
            time.sleep(0.2)
    p.kill()
    raise RuntimeError("the controller did not come up: " + p.stdout.read())


c = rk.Cluster(os.path.join(work, "cp"))
try:
    c.start(time.time() + 180)
    say(f"# a real kube-apiserver at {c.url} ({time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime())} UTC)")
    for f in ["00-namespace.yaml", "10-serviceaccount.yaml", "20-role.yaml", "30-rolebinding.yaml"]:
        r = c.kubectl("apply", "-f", os.path.join(repo, "scripts/k8s", f))
        say(f"$ kubectl apply -f scripts/k8s/{f}\n  {r.stdout.strip()} {r.stderr.strip()}")
    r = c.kubectl("-n", "a2a", "create", "token", "a2a-worker-controller", "--duration=1h")
    token = r.stdout.strip()
    token_file = os.path.join(work, "sa-token")
    with open(token_file, "w") as f:
        f.write(token)
    os.chmod(token_file, 0o600)
    templates = os.path.join(work, "templates.json")
    with open(templates, "w") as f:
        json.dump({"templates": {"coder": {"egress": ["api.github.com:443"], "runtime": "gvisor"}}}, f)
    fenced = [f"-worker-templates-file={templates}",
              "-egress-proxy-url=http://a2a-egress.a2a.svc.cluster.local:8790"]

    say("\n## the NetworkPolicy before it is applied, as the controller's Role")
    raw("netpol_get404", "GET", "/apis/networking.k8s.io/v1/namespaces/a2a/networkpolicies/a2a-egress", token=token)
    controller(fenced)

    say("\n## the egress deploy file, validated by the server")
    r = c.kubectl("apply", "-f", os.path.join(repo, "scripts/k8s/70-egress.yaml"))
    say(f"$ kubectl apply -f scripts/k8s/70-egress.yaml\n  {r.stdout.strip()} {r.stderr.strip()}")
    r = c.kubectl("apply", "--dry-run=server", "-f", os.path.join(repo, "scripts/k8s/50-controller.yaml"))
    say(f"$ kubectl apply --dry-run=server -f scripts/k8s/50-controller.yaml\n  {r.stdout.strip()} {r.stderr.strip()}")
    raw("netpol_get200", "GET", "/apis/networking.k8s.io/v1/namespaces/a2a/networkpolicies/a2a-egress", token=token)

    say("\n## a pod naming a RuntimeClass that does not exist (dry run, as the Role)")
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "rc-probe", "namespace": "a2a"},
           "spec": {"runtimeClassName": "gvisor", "automountServiceAccountToken": False,
                    "securityContext": {"runAsNonRoot": True, "runAsUser": 65532, "seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [{"name": "worker", "image": "a2a-echo-worker:dev",
                                    "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}]}}
    raw("create403runtimeclass", "POST", "/api/v1/namespaces/a2a/pods?dryRun=All&fieldValidation=Strict", pod, token=token)
    controller(fenced)

    say("\n## the RuntimeClass made (runsc is its handler; no node here runs it), a fenced worker")
    r = c.kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
                                                       "metadata": {"name": "gvisor"}, "handler": "runsc"}))
    say(f"$ kubectl apply RuntimeClass gvisor\n  {r.stdout.strip()} {r.stderr.strip()}")
    c.add_kubelet("node1")
    c.wait_node_ready("node1", time.time() + 60)
    _, _, (p, port) = controller(fenced, until_up=True)
    body = json.dumps({"jsonrpc": "2.0", "id": "1", "method": "SendMessage", "params": {"message": {
        "messageId": "1", "role": "ROLE_USER",
        "parts": [{"data": {"operation": "create", "task": "fenced on a real server", "template": "coder"}}]}}}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/a2a", data=body, method="POST", headers={
        "Authorization": "Bearer realk8s-egress-token-0123456789", "Content-Type": "application/json"})
    reply = json.loads(urllib.request.urlopen(req, timeout=60).read())
    task = reply["result"]["task"]
    say("$ create (template coder) ->", task["status"]["state"])
    pods = c.pods("a2a", "a2a-worker-controller/owner=realk8s-egress")
    for pd in pods:
        env = {e["name"]: e.get("value", "") for e in pd["spec"]["containers"][0].get("env", [])}
        shown = {k: ("<redacted>" if k in ("INTERACTIVE_AUTH_TOKEN",) else v) for k, v in env.items()
                 if k in ("ANTHROPIC_BASE_URL", "ANTHROPIC_AUTH_TOKEN", "HTTPS_PROXY", "NO_PROXY", "INTERACTIVE_AUTH_TOKEN")}
        for k in ("ANTHROPIC_AUTH_TOKEN", "HTTPS_PROXY"):
            if k in shown:
                shown[k] = shown[k].split(".")[0] + ".<worker id>.<mac>" if k == "ANTHROPIC_AUTH_TOKEN" else "http://<worker id>:<placeholder>@a2a-egress.a2a.svc.cluster.local:8790"
        say("  pod", pd["metadata"]["name"], "labels.egress =", pd["metadata"]["labels"].get("a2a-worker-controller/egress"),
            "runtimeClassName =", pd["spec"].get("runtimeClassName"), "phase =", pd["status"].get("phase"))
        say("  env", json.dumps(shown))
    p.terminate()
    p.wait(timeout=20)
finally:
    c.stop()
    transcript.close()
