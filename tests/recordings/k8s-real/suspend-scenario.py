#!/usr/bin/env python3
"""Suspend, resume and renew on a real kube-apiserver 1.36.2 (built from source, NODE.md), with
its controller-manager, scheduler and a KWOK-style kubelet: the Secrets a suspended worker's
record is, as the controller's Role got them (create with stringData and a custom type, 409,
get 200/404, list by label, delete 200/404), a pod label patch with a stale uid, and the
controller's suspend / list / create-refused / resume / renew / stop against it. Writes
$WORK/rec/s42-suspend-records.txt and the raw answers."""
import base64, json, os, subprocess, sys, time, urllib.request, ssl

sys.path.insert(0, "/work/shared/reference/k8s-real/node")
os.environ.setdefault("REALK8S_BIN", "/tmp/realk8s/bin126")
import realk8s_env as rk  # noqa: E402

rk.enter_private_netns()
if rk.in_private_netns():
    rk.loopback_up()
work, binary, repo = sys.argv[1], sys.argv[2], sys.argv[3]
rec = os.path.join(work, "rec")
os.makedirs(rec, exist_ok=True)
transcript = open(os.path.join(rec, "s42-suspend-records.txt"), "w")
AUTH = "realk8s-suspend-token-0123456789"


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
    say("  " + out.decode("utf-8", "replace")[:700])
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
    say("  " + shown[:700])
    return state, out


c = rk.Cluster(os.path.join(work, "cp"))
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

    say("\n## a suspended worker's record: Secrets, as the controller's Role")
    S = "/api/v1/namespaces/a2a/secrets"
    record = {"apiVersion": "v1", "kind": "Secret", "type": "a2a-worker-controller/suspended-worker",
              "metadata": {"name": "probe-record", "labels": {"a2a-worker-controller/owner": "probe",
                                                             "a2a-worker-controller/suspended-at": "1796540000"},
                           "annotations": {"a2a-worker-controller/task": "a probe"}},
              "stringData": {"token": "0123abcd"}}
    raw("secret_create201", "POST", S, record, token)
    raw("secret_create409", "POST", S, record, token)
    raw("secret_get200", "GET", S + "/probe-record", token=token)
    raw("secret_get404", "GET", S + "/nothing-here", token=token)
    raw("secret_list", "GET", S + "?labelSelector=a2a-worker-controller%2Fowner%3Dprobe%2Ca2a-worker-controller%2Fsuspended-at", token=token)
    raw("secret_delete200", "DELETE", S + "/probe-record", token=token)
    raw("secret_delete404", "DELETE", S + "/probe-record", token=token)

    say("\n## volumes for the workspace claims, a node")
    for i in range(3):
        pv = {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": f"pv{i}"},
              "spec": {"capacity": {"storage": "5Gi"}, "accessModes": ["ReadWriteOnce"],
                       "storageClassName": "", "hostPath": {"path": f"/tmp/pv{i}"}}}
        r = c.kubectl("apply", "-f", "-", stdin=json.dumps(pv))
        say(f"$ kubectl apply PersistentVolume pv{i}\n  {r.stdout.strip()} {r.stderr.strip()}")
    c.add_kubelet("node1")
    c.wait_node_ready("node1", time.time() + 60)

    templates = os.path.join(work, "templates.json")
    with open(templates, "w") as f:
        json.dump({"templates": {"coder": {"workspace": {"size": "1Gi"}, "ttl": "1h"}, "plain": {}}}, f)
    port = rk.free_port()
    env = dict(os.environ, A2A_AUTH_TOKEN=AUTH, RUST_LOG="info")
    argv = [binary, f"-listen=127.0.0.1:{port}", f"-a2a-public-url=http://127.0.0.1:{port}",
            "-backend=k8s", f"-k8s-api-url={c.url}", f"-k8s-ca-file={c.ca_file}",
            f"-k8s-token-file={token_file}", "-k8s-namespace=a2a", "-worker-image=a2a-echo-worker:dev",
            "-controller-id=realk8s-suspend", f"-worker-templates-file={templates}",
            "-worker-ready-timeout=90s"]
    log = open(os.path.join(work, "controller.log"), "w")
    p = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1)
            break
        except Exception:
            time.sleep(0.2)

    say("\n## the controller: suspend, list, a create refused, resume, renew, stop")
    _, made = control(port, {"operation": "create", "task": "nap", "template": "coder"})
    wid = made["worker"]["worker_id"]
    pod_name = c.pods("a2a", "a2a-worker-controller/owner=realk8s-suspend")[0]["metadata"]["name"]
    uid = c.pods("a2a", "a2a-worker-controller/owner=realk8s-suspend")[0]["metadata"]["uid"]
    raw("pod_patch_stale_uid", "PATCH", f"/api/v1/namespaces/a2a/pods/{pod_name}",
        {"metadata": {"uid": "00000000-0000-0000-0000-000000000000",
                      "labels": {"a2a-worker-controller/expires-at": "1"}}},
        token, ctype="application/merge-patch+json")
    _, plain = control(port, {"operation": "create", "task": "plain one", "template": "plain"})
    control(port, {"operation": "suspend", "worker_id": plain["worker"]["worker_id"]})
    control(port, {"operation": "suspend", "worker_id": wid})
    sec = c.api("GET", f"/api/v1/namespaces/a2a/secrets/{pod_name}")[1]
    shown = dict(sec)
    shown["data"] = {k: "<base64 of the worker's token>" for k in (sec.get("data") or {})}
    say("  the record as stored:", json.dumps({k: shown[k] for k in ("metadata", "type", "data")})[:1500])
    assert base64.b64decode(sec["data"]["token"]).decode() == made["token"], "the record holds the token"
    deadline = time.time() + 60
    while any(pd["metadata"]["name"] == pod_name for pd in c.pods("a2a")) and time.time() < deadline:
        time.sleep(0.2)
    say("  pods of the worker after the suspend:", [pd["metadata"]["name"] for pd in c.pods("a2a", f"a2a-worker-controller/worker-id={wid}")])
    _, listed = control(port, {"operation": "list", "state": "suspended"})
    control(port, {"operation": "create", "task": "nap", "template": "coder"})
    say("  pods after the refused create:", [pd["metadata"]["name"] for pd in c.pods("a2a", "a2a-worker-controller/owner=realk8s-suspend")])
    _, back = control(port, {"operation": "resume", "worker_id": wid})
    now = c.pods("a2a", f"a2a-worker-controller/worker-id={wid}")
    envs = {e["name"]: e.get("value") for e in now[0]["spec"]["containers"][0].get("env", [])}
    say("  the resumed pod:", now[0]["metadata"]["name"], "phase", now[0]["status"].get("phase"),
        "its token the same:", made["token"] in envs.values())
    say("  records left:", [s["metadata"]["name"] for s in c.api("GET", "/api/v1/namespaces/a2a/secrets")[1]["items"]
                            if s.get("type") == "a2a-worker-controller/suspended-worker"])
    control(port, {"operation": "renew", "worker_id": wid, "ttl": "30m"})
    say("  the pod's expires-at label:", c.pods("a2a", f"a2a-worker-controller/worker-id={wid}")[0]["metadata"]["labels"].get("a2a-worker-controller/expires-at"))
    control(port, {"operation": "suspend", "worker_id": wid})
    control(port, {"operation": "stop", "worker_id": wid})
    say("  records left after the stop:", [s["metadata"]["name"] for s in c.api("GET", "/api/v1/namespaces/a2a/secrets")[1]["items"]
                                          if s.get("type") == "a2a-worker-controller/suspended-worker"])
    p.terminate()
    p.wait(timeout=20)
finally:
    c.stop()
    transcript.close()
