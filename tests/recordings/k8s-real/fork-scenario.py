#!/usr/bin/env python3
"""Workspace copies by clone on a real kube-apiserver 1.36.2 (built from source, NODE.md), with
its controller-manager (the PersistentVolume controller), scheduler and a KWOK-style kubelet,
and static hostPath PersistentVolumes of a class `csi-clone` (no CSI driver: nothing clones
here). Records what the API answers to a claim whose `dataSource` is another claim, as the
controller's Role (create, strict; the stored object; a source that does not exist; a clone
smaller than its source), what the PersistentVolume controller then does with such a claim, and
the controller's copy_workspace / refusals against it. Writes $WORK/rec/s55-fork-clone.txt and
the raw answers.   fork-scenario.py WORK CONTROLLER_BINARY REPO"""
import json, os, subprocess, sys, time, urllib.request, ssl

sys.path.insert(0, "/work/shared/reference/k8s-real/node")
os.environ.setdefault("REALK8S_BIN", "/tmp/realk8s/bin126")
import realk8s_env as rk  # noqa: E402

rk.enter_private_netns()
if rk.in_private_netns():
    rk.loopback_up()
work, binary, repo = sys.argv[1], sys.argv[2], sys.argv[3]
rec = os.path.join(work, "rec")
os.makedirs(rec, exist_ok=True)
transcript = open(os.path.join(rec, "s55-fork-clone.txt"), "w")
AUTH = "realk8s-fork-token-0123456789abcd"


def say(*parts):
    line = " ".join(str(p) for p in parts)
    print(line, flush=True)
    transcript.write(line + "\n")
    transcript.flush()


def raw(name, method, path, body=None, token=None, ctype="application/json"):
    """One raw call as the Role; headers and body saved as NAME.h / NAME.b."""
    ctx = ssl.create_default_context(cafile=c.ca_file)
    headers = {"Content-Type": ctype, "Accept": "application/json", "Authorization": f"Bearer {token}"}
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(c.url + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=10) as r:
            code, hdrs, out = r.status, r.headers, r.read()
    except urllib.error.HTTPError as e:
        code, hdrs, out = e.code, e.headers, e.read()
    if name:
        with open(os.path.join(rec, name + ".h"), "w") as f:
            f.write(f"HTTP/1.1 {code}\n" + "".join(f"{k}: {v}\n" for k, v in hdrs.items()))
        with open(os.path.join(rec, name + ".b"), "wb") as f:
            f.write(out)
    say(f"$ {method} {path}  -> {code}")
    say("  " + out.decode("utf-8", "replace")[:900])
    return code, out


def control(port, data):
    body = json.dumps({"jsonrpc": "2.0", "id": "1", "method": "SendMessage", "params": {"message": {
        "messageId": "1", "role": "ROLE_USER", "parts": [{"data": data}]}}}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/a2a", data=body, method="POST", headers={
        "Authorization": f"Bearer {AUTH}", "Content-Type": "application/json"})
    task = json.loads(urllib.request.urlopen(req, timeout=120).read())["result"]["task"]
    state = task["status"]["state"]
    if state == "TASK_STATE_COMPLETED":
        out = task["artifacts"][0]["parts"][0]["data"]
    else:
        out = task["status"]["message"]["parts"][1]["data"]
    shown = json.dumps(out)
    if "token" in out:
        shown = shown.replace(out["token"], "<the worker's token>")
    say(f"$ {data['operation']} {json.dumps({k: v for k, v in data.items() if k != 'operation'})} -> {state}")
    say("  " + shown[:900])
    return state, out


def claim(name, size="1Gi", klass="csi-clone", source=None):
    body = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "labels": {"a2a-worker-controller/owner": "probe"}},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}},
                     "storageClassName": klass}}
    if source:
        body["spec"]["dataSource"] = {"kind": "PersistentVolumeClaim", "name": source}
    return body


def phase(name):
    got = c.api("GET", f"/api/v1/namespaces/a2a/persistentvolumeclaims/{name}")[1]
    return got.get("status", {}).get("phase"), got.get("spec", {}).get("volumeName")


c = rk.Cluster(os.path.join(work, "cp"))
p = None
try:
    c.start(time.time() + 180)
    say(f"# a real kube-apiserver at {c.url} ({time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime())} UTC)")
    for f in ["00-namespace.yaml", "10-serviceaccount.yaml", "20-role.yaml", "30-rolebinding.yaml"]:
        r = c.kubectl("apply", "-f", os.path.join(repo, "scripts/k8s", f))
        say(f"$ kubectl apply -f scripts/k8s/{f}\n  {r.stdout.strip()} {r.stderr.strip()}")
    token = c.kubectl("-n", "a2a", "create", "token", "a2a-worker-controller", "--duration=1h").stdout.strip()
    token_file = os.path.join(work, "sa-token")
    with open(token_file, "w") as f:
        f.write(token)
    os.chmod(token_file, 0o600)

    say("\n## static volumes of class csi-clone (and slow), a node")
    for i, klass in enumerate(["csi-clone"] * 10 + ["slow"] * 3):
        pv = {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": f"pv{i}"},
              "spec": {"capacity": {"storage": "5Gi"}, "accessModes": ["ReadWriteOnce"],
                       "storageClassName": klass, "hostPath": {"path": f"/tmp/pv{i}"}}}
        r = c.kubectl("apply", "-f", "-", stdin=json.dumps(pv))
        say(f"$ kubectl apply PersistentVolume pv{i} ({klass})\n  {r.stdout.strip()} {r.stderr.strip()}")
    c.add_kubelet("node1")
    c.wait_node_ready("node1", time.time() + 60)

    say("\n## a claim cloned from another (dataSource), as the controller's Role")
    C = "/api/v1/namespaces/a2a/persistentvolumeclaims"
    raw("claim_source_create201", "POST", C + "?fieldValidation=Strict", claim("probe-source"), token)
    raw("claim_clone_create201", "POST", C + "?fieldValidation=Strict", claim("probe-clone", source="probe-source"), token)
    raw("claim_clone_get200", "GET", C + "/probe-clone", token=token)
    raw("claim_clone_nosource", "POST", C + "?fieldValidation=Strict", claim("probe-orphan", source="no-such-claim"), token)
    raw("claim_clone_smaller", "POST", C + "?fieldValidation=Strict", claim("probe-small", size="512Mi", source="probe-source"), token)
    raw("claim_clone_bad_kind", "POST", C + "?fieldValidation=Strict",
        {**claim("probe-badkind"), "spec": {**claim("probe-badkind")["spec"], "dataSource": {"kind": "Pod", "name": "x"}}}, token)
    time.sleep(5)
    for n in ["probe-source", "probe-clone", "probe-orphan", "probe-small"]:
        say(f"  claim {n} after 5 s: phase, volume =", phase(n))
    ev = c.api("GET", "/api/v1/namespaces/a2a/events?fieldSelector=involvedObject.name%3Dprobe-clone")[1]
    say("  events of probe-clone:", json.dumps([(e.get("reason"), e.get("message")) for e in ev.get("items", [])])[:1200])
    for n in ["probe-source", "probe-clone", "probe-orphan", "probe-small", "probe-badkind"]:
        c.api("DELETE", f"{C}/{n}")

    templates = os.path.join(work, "templates.json")
    with open(templates, "w") as f:
        json.dump({"templates": {"coder": {"workspace": {"size": "1Gi", "storage_class": "csi-clone"}},
                                 "plain": {"workspace": {"size": "1Gi", "storage_class": "slow"}}}}, f)
    port = rk.free_port()
    env = dict(os.environ, A2A_AUTH_TOKEN=AUTH, RUST_LOG="info")
    argv = [binary, f"-listen=127.0.0.1:{port}", f"-a2a-public-url=http://127.0.0.1:{port}",
            "-backend=k8s", f"-k8s-api-url={c.url}", f"-k8s-ca-file={c.ca_file}",
            f"-k8s-token-file={token_file}", "-k8s-namespace=a2a", "-worker-image=a2a-echo-worker:dev",
            "-controller-id=realk8s-fork", f"-worker-templates-file={templates}",
            "-k8s-clone-storage-classes=csi-clone", "-worker-ready-timeout=60s"]
    log = open(os.path.join(work, "controller.log"), "w")
    p = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1)
            break
        except Exception:
            time.sleep(0.2)

    say("\n## the controller: copy_workspace by clone, and its refusals")
    _, made = control(port, {"operation": "create", "task": "base", "template": "coder"})
    control(port, {"operation": "copy_workspace", "from_task": "base", "task": "fork"})
    control(port, {"operation": "stop", "worker_id": made["worker"]["worker_id"]})
    deadline = time.time() + 60
    while c.pods("a2a", "a2a-worker-controller/owner=realk8s-fork") and time.time() < deadline:
        time.sleep(0.2)
    control(port, {"operation": "copy_workspace", "from_task": "base", "task": "fork"})
    claims = c.api("GET", "/api/v1/namespaces/a2a/persistentvolumeclaims?labelSelector=a2a-worker-controller%2Fowner%3Drealk8s-fork")[1]["items"]
    for cl in claims:
        say("  claim", cl["metadata"]["annotations"].get("a2a-worker-controller/task"), "spec:",
            json.dumps({k: cl["spec"].get(k) for k in ("storageClassName", "dataSource", "dataSourceRef", "resources")}))
    time.sleep(5)
    for cl in claims:
        say("  after 5 s:", cl["metadata"]["name"], phase(cl["metadata"]["name"]))
    control(port, {"operation": "copy_workspace", "from_task": "base", "task": "fork"})
    _, plain = control(port, {"operation": "create", "task": "plain", "template": "plain"})
    control(port, {"operation": "stop", "worker_id": plain["worker"]["worker_id"]})
    deadline = time.time() + 60
    while c.pods("a2a", "a2a-worker-controller/owner=realk8s-fork") and time.time() < deadline:
        time.sleep(0.2)
    control(port, {"operation": "copy_workspace", "from_task": "plain", "task": "plain copy"})
finally:
    if p is not None:
        p.terminate()
        p.wait(timeout=20)
    c.stop()
    transcript.close()
