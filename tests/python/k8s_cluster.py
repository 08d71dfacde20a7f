"""The scenarios of the Kubernetes deployment as shipped, on a real cluster (scripts/test-k8s.sh
deploys scripts/k8s/ first and removes it after). Run on a node: the Service's ClusterIP and the
pods' IPs are reached from here. Each scenario prints `ok NAME (seconds)` or fails the run.

Usage: k8s_cluster.py [--kubectl "kubectl --kubeconfig F"]
"""

import argparse
import base64
import http.client
import hashlib
import json
import os
import random
import shlex
import socket
import struct
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

NS = "a2a"
SERVICE = "a2a-worker-controller"
CLIENT_IMAGE = "a2a-worker-controller:dev"
KUBECTL = ["kubectl"]


def k(*args, check=True, stdin=None):
    r = subprocess.run(KUBECTL + ["-n", NS] + list(args), capture_output=True, text=True, input=stdin)
    if check and r.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)}: {r.stderr.strip()}")
    return r.stdout


def kj(*args):
    return json.loads(k(*args, "-o", "json"))


def wait(what, cond, within=60, every=0.2):
    deadline = time.monotonic() + within
    while True:
        got = cond()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {within}s")
        time.sleep(every)


class Cluster:
    def __init__(self):
        secret = kj("get", "secret", "a2a-worker-controller-auth")
        self.token = base64.b64decode(secret["data"]["token"]).decode()
        self.service = kj("get", "service", SERVICE)["spec"]["clusterIP"]
        self.seq = 0

    def replicas(self):
        """Pod name -> IP of the ready replicas."""
        pods = kj("get", "pods", "-l", "app.kubernetes.io/name=a2a-worker-controller")["items"]
        return {p["metadata"]["name"]: p["status"]["podIP"] for p in pods
                if not p["metadata"].get("deletionTimestamp")
                and any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))}

    def http(self, host, method, path, body=None, token=None, port=8080, headers=None, timeout=200):
        """One request on a new connection: (status, headers, body text)."""
        c = http.client.HTTPConnection(host, port, timeout=timeout)
        h = {"Content-Type": "application/json"} if body is not None else {}
        if token:
            h["Authorization"] = f"Bearer {token}"
        h.update(headers or {})
        c.request(method, path, body=None if body is None else json.dumps(body), headers=h)
        r = c.getresponse()
        text = r.read().decode()
        c.close()
        return r.status, {kk.lower(): v for kk, v in r.getheaders()}, text

    def rpc(self, method, params, host=None, token="own"):
        self.seq += 1
        status, headers, text = self.http(host or self.service, "POST", "/a2a",
                                          {"jsonrpc": "2.0", "id": self.seq, "method": method, "params": params},
                                          token=self.token if token == "own" else token)
        assert status == 200, (status, text)
        return json.loads(text), headers

    def send(self, data, host=None, immediately=False):
        params = {"message": {"role": "ROLE_USER", "messageId": f"m{random.random()}",
                              "parts": [{"data": data}]}}
        if immediately:
            params["configuration"] = {"returnImmediately": True}
        r, headers = self.rpc("SendMessage", params, host)
        assert "error" not in r, r
        return r["result"]["task"], headers

    def control(self, data, host=None):
        """A control operation run to its end: its reply data, or its error."""
        task, _ = self.send(data, host)
        if task["status"]["state"] == "TASK_STATE_COMPLETED":
            return task["artifacts"][0]["parts"][0]["data"]
        err = [p["data"]["error"] for p in task["status"]["message"]["parts"] if "data" in p]
        return {"error": err[0]}

    def workers(self, host=None):
        return self.control({"operation": "list"}, host)["workers"]

    def worker(self, worker_id, host=None):
        return next((w for w in self.workers(host) if w["worker_id"] == worker_id), None)


def worker_pod(worker_id):
    pods = kj("get", "pods", "-l", f"a2a-worker-controller/worker-id={worker_id}")["items"]
    assert len(pods) == 1, pods
    return pods[0]


def dns_a(name, server):
    """The A records of `name` asked of `server` (the cluster's DNS Service)."""
    q = struct.pack(">HHHHHH", 0x2929, 0x0100, 1, 0, 0, 0)
    q += b"".join(bytes([len(p)]) + p.encode() for p in name.rstrip(".").split(".")) + b"\0"
    q += struct.pack(">HH", 1, 1)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(3)
    s.sendto(q, (server, 53))
    data = s.recv(2048)
    s.close()
    answers = struct.unpack(">H", data[6:8])[0]
    i = len(q)
    ips = []
    for _ in range(answers):
        i += 2 if data[i] & 0xC0 == 0xC0 else data.index(b"\0", i) + 1 - i
        rtype, _, _, rdlen = struct.unpack(">HHIH", data[i:i + 10])
        i += 10
        if rtype == 1:
            ips.append(socket.inet_ntoa(data[i:i + rdlen]))
        i += rdlen
    return ips


def cluster_dns():
    r = subprocess.run(KUBECTL + ["-n", "kube-system", "get", "service", "kube-dns", "-o",
                                  "jsonpath={.spec.clusterIP}"], capture_output=True, text=True)
    return r.stdout.strip() or None


def client_pod(name, args):
    """Runs the controller image's CLI in a pod of the namespace, through the Service's DNS
    name; its output."""
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS},
           "spec": {"restartPolicy": "Never", "automountServiceAccountToken": False,
                    "securityContext": {"runAsNonRoot": True, "runAsUser": 65532, "seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [{"name": "cli", "image": CLIENT_IMAGE, "imagePullPolicy": "IfNotPresent",
                                    "args": args + ["--url", f"http://{SERVICE}.{NS}.svc.cluster.local:8080"],
                                    "env": [{"name": "A2A_AUTH_TOKEN", "valueFrom": {"secretKeyRef": {
                                        "name": "a2a-worker-controller-auth", "key": "token"}}}],
                                    "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                                        "capabilities": {"drop": ["ALL"]}}}]}}
    k("apply", "-f", "-", stdin=json.dumps(pod))
    phase = wait(f"client pod {name}", lambda: kj("get", "pod", name)["status"].get("phase") in ("Succeeded", "Failed")
                 and kj("get", "pod", name)["status"]["phase"], within=240)
    out = k("logs", name)
    k("delete", "pod", name, "--wait=false")
    assert phase == "Succeeded", (name, phase, out)
    return out


def set_env(*pairs):
    k("set", "env", f"deployment/{SERVICE}", *pairs)
    k("rollout", "status", f"deployment/{SERVICE}", "--timeout=180s")
    two_replicas()


def two_replicas():
    # The old replicas are gone from the Service only once they have exited.
    wait("two ready replicas, old ones gone", lambda: len(kj("get", "pods", "-l", "app.kubernetes.io/name=a2a-worker-controller")["items"]) == 2
         and len(C.replicas()) == 2, within=120)
    service_answers()


def service_answers():
    """Until the Service answers 10 new connections in a row: kube-proxy writes a Service's
    rules, and drops an old replica's, a moment after the API has them."""
    ok = [0]

    def answers():
        try:
            ok[0] = ok[0] + 1 if C.http(C.service, "GET", "/healthz", timeout=2)[0] == 200 else 0
        except OSError:
            ok[0] = 0
        return ok[0] >= 10
    wait("the Service answers", answers, within=60, every=0.1)


def record(name, obj):
    """With A2A_K8S_RECORD=DIR, what the cluster answered, for the stand-in to follow."""
    d = os.environ.get("A2A_K8S_RECORD")
    if d:
        with open(os.path.join(d, name + ".json"), "w") as f:
            json.dump(obj, f, indent=1)


class Hooks(BaseHTTPRequestHandler):
    heard = []

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0))).decode()
        Hooks.heard.append(body)
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *a):
        pass


RESULTS = []


def scenario(fn):
    t = time.monotonic()
    note = fn() or ""
    RESULTS.append(fn.__name__)
    print(f"ok {fn.__name__} ({time.monotonic() - t:.1f}s) {note}".rstrip(), flush=True)


def as_shipped():
    reps = C.replicas()
    assert len(reps) == 2, reps
    service_answers()
    for name, ip in reps.items():
        status, _, text = C.http(ip, "GET", "/readiness")
        assert status == 200, (name, status, text)
    status, _, text = C.http(C.service, "GET", "/.well-known/agent-card.json")
    assert status == 200 and json.loads(text)["name"], text
    # In-cluster credentials: listing workers reads pods with the mounted service-account token.
    assert C.workers() == [] or True
    return f"replicas {sorted(reps.values())}"


def create_from_a_client_pod():
    out = client_pod("a2a-suite-create", ["create", "suite-cli", "--json"])
    made = json.loads(out)
    w = made["worker"]
    assert w["state"] == "running", w
    pod = worker_pod(w["worker_id"])
    ready = next(c for c in pod["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True", pod["status"]
    STATE["cli"] = (w, made["token"], pod["status"]["podIP"])
    listed = client_pod("a2a-suite-list", ["list", "--json"])
    assert w["worker_id"] in listed, listed
    return f"{w['worker_id']} at {w['a2a_url']}"


def talk_to_the_worker():
    w, token, ip = STATE["cli"]
    host = w["a2a_url"].split("//")[1].split(":")[0]
    dns = cluster_dns()
    targets = [ip]
    if dns:
        resolved = dns_a(host, dns)
        assert resolved == [ip], (host, resolved, ip)
        targets.append(resolved[0])
    for t in targets:
        status, _, card = C.http(t, "GET", "/.well-known/agent-card.json", port=9090)
        assert status == 200, card
        body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {
            "role": "ROLE_USER", "messageId": "m1", "parts": [{"text": "hello"}]}}}
        status, _, text = C.http(t, "POST", "/", body, token=token, port=9090)
        if status == 404:
            status, _, text = C.http(t, "POST", "/a2a", body, token=token, port=9090)
        assert status == 200 and "hello" in text, (status, text)
        status, _, _ = C.http(t, "POST", "/a2a", body, token="wrong-token-0123456789", port=9090)
        assert status == 401, status
    return f"by pod IP{' and by its name through the cluster DNS' if dns else ' (no kube-dns Service: names not checked)'}"


def logs_through_the_kubelet():
    w, _, _ = STATE["cli"]
    got = C.control({"operation": "logs", "worker_id": w["worker_id"], "tail": 20})
    assert "error" not in got and got["text"], got
    return f"{len(got['text'].splitlines())} lines"


def stop_is_graceful():
    w, _, _ = STATE["cli"]
    t = time.monotonic()
    stopped = C.control({"operation": "stop", "worker_id": w["worker_id"]})
    assert "error" not in stopped, stopped
    try:
        record("s29-stopping-pod", worker_pod(w["worker_id"]))
    except AssertionError:
        pass
    states = set()

    def gone():
        now = C.worker(w["worker_id"])
        if now:
            states.add(now["state"])
        return now is None
    wait("the stopped worker gone", gone, within=15)
    took = time.monotonic() - t
    assert states <= {"stopping"}, states
    assert took < 12, took
    return f"gone after {took:.1f}s, listed {sorted(states) or ['(gone at once)']} until then"


def ttl_expiry_is_reaped():
    made = C.control({"operation": "create", "task": "suite-ttl", "ttl": "3s"})
    wid = made["worker"]["worker_id"]
    t = time.monotonic()
    wait("the expired worker reaped", lambda: C.worker(wid) is None, within=75, every=1)
    return f"gone {time.monotonic() - t:.0f}s after create (REAP_INTERVAL 30s)"


def missing_image():
    set_env("WORKER_IMAGE=a2a-echo-worker:missing")
    t = time.monotonic()
    failed = C.control({"operation": "create", "task": "suite-missing"})
    took = time.monotonic() - t
    assert failed.get("error", {}).get("code") == "image_not_found", failed
    assert "ErrImagePull" in failed["error"]["message"] or "ImagePullBackOff" in failed["error"]["message"], failed
    assert took < 30, took
    record("s29-missing-image-reply", failed)
    return f"image_not_found after {took:.1f}s: {failed['error']['message'][:150]}"


def replica_deleted_mid_create():
    """With the missing image, a create waits ~10 s for the kubelet's verdict: the replica
    making it is killed meanwhile, and what it made must be the other's to list and stop."""
    reps = C.replicas()
    (victim, vip), (_, survivor) = sorted(reps.items())
    result = {}

    def create():
        try:
            result["r"] = C.control({"operation": "create", "task": "suite-orphan"}, host=vip)
        except Exception as e:  # the connection dies with the replica
            result["e"] = repr(e)

    def made():
        return [p["metadata"]["name"] for p in kj("get", "pods", "-l", "a2a-worker-controller/owner")["items"]
                if p["metadata"].get("annotations", {}).get("a2a-worker-controller/task") == "suite-orphan"]
    th = threading.Thread(target=create)
    th.start()
    wait("the worker pod made", made, within=30, every=0.05)
    k("delete", "pod", victim, "--grace-period=0", "--force")
    th.join(30)
    assert "r" not in result, f"the create answered before its replica was killed: {result}"
    pods = made()
    assert len(pods) == 1, pods
    w = wait("the orphan listed by the survivor",
             lambda: next((x for x in C.workers(host=survivor) if x["task"] == "suite-orphan"), None), within=30)
    stopped = C.control({"operation": "stop", "worker_id": w["worker_id"]}, host=survivor)
    assert "error" not in stopped, stopped
    wait("nothing of the create left", lambda: not made(), within=30)
    two_replicas()
    return f"{victim} killed while its create waited; its pod listed {w['state']} ({(w.get('reason') or '')[:60]}) by the survivor, stopped"


def oom():
    set_env("WORKER_IMAGE=a2a-echo-worker:grow", "WORKER_MEMORY=48m")
    made = C.control({"operation": "create", "task": "suite-oom"})
    wid = made["worker"]["worker_id"]
    seen = []

    def oomed():
        x = C.worker(wid)
        seen.append(x and (x["state"], x.get("reason")))
        return x if x and "OOMKilled" in (x.get("reason") or "") else None
    try:
        w = wait("the OOM kill listed", oomed, within=60)
    except AssertionError:
        raise AssertionError(f"no OOM kill listed: {seen[-1]}; pod {worker_pod(wid)['status']}")
    record("s29-oom-pod", worker_pod(wid))
    C.control({"operation": "stop", "worker_id": wid})
    return f"{w['state']}: {w['reason']}"


def any_replica_answers():
    task, _ = C.send({"operation": "create", "task": "suite-bg"}, immediately=True)
    tid = task["id"]
    tokens, relayed, answered = [], 0, 0
    for i in range(20):
        r, headers = C.rpc("GetTask", {"id": tid})
        assert "error" not in r, (i, r)
        answered += 1
        relayed += "a2a-answered-by" in headers
        t = r["result"]
        if t["status"]["state"] == "TASK_STATE_COMPLETED":
            data = t["artifacts"][0]["parts"][0]["data"]
            if "token" in data:
                tokens.append(data["token"])
        time.sleep(0.3)
    assert len(tokens) == 1, tokens
    assert relayed > 0, "no call reached the other replica"
    STATE["bg"] = tid
    # One task held by each replica: ListTasks through the Service shows both, every time.
    held = [C.send({"operation": "list"}, host=ip)[0]["id"] for ip in C.replicas().values()]
    for _ in range(6):
        listed = [t["id"] for t in C.rpc("ListTasks", {"pageSize": 100})[0]["result"]["tasks"]]
        assert all(h in listed for h in held) and tid in listed, (held, listed)
    return f"{answered}/20 answered, {relayed} relayed, token once; ListTasks 6/6 with both replicas' tasks"


def watch_across_replicas():
    reps = list(C.replicas().values())
    holder, other = reps[0], reps[1]
    task, _ = C.send({"operation": "watch"}, host=holder, immediately=True)
    tid = task["id"]
    got = {}

    def subscribe():
        c = http.client.HTTPConnection(other, 8080, timeout=60)
        c.request("POST", "/a2a", json.dumps({"jsonrpc": "2.0", "id": 1, "method": "SubscribeToTask", "params": {"id": tid}}),
                  {"Content-Type": "application/json", "Authorization": f"Bearer {C.token}"})
        r = c.getresponse()
        got["answered_by"] = r.getheader("A2A-Answered-By")
        got["text"] = r.read().decode()
    th = threading.Thread(target=subscribe)
    th.start()
    time.sleep(1.5)
    r, _ = C.rpc("CancelTask", {"id": tid}, host=other)
    assert r["result"]["status"]["state"] == "TASK_STATE_CANCELED", r
    th.join(30)
    assert got.get("answered_by") == holder, got
    assert "TASK_STATE_CANCELED" in got["text"], got
    return f"watch on {holder}, subscribed and canceled through {other}"


def push_across_replicas():
    reps = list(C.replicas().values())
    holder, other = reps[0], reps[1]
    task, _ = C.send({"operation": "create", "task": "suite-push"}, host=holder, immediately=True)
    r, _ = C.rpc("CreateTaskPushNotificationConfig", {"taskId": task["id"], "url": f"http://{HOOK_IP}:{HOOK_PORT}/hook"},
                 host=other)
    assert "error" not in r, r
    wait("the webhook hears the task's end", lambda: any("TASK_STATE_COMPLETED" in h for h in Hooks.heard), within=60)
    assert not any('"token"' in h for h in Hooks.heard)
    return f"{len(Hooks.heard)} deliveries from {holder} for a config made through {other}"


def scopes_on_every_hop():
    """Callers with scopes (a Secret mounted as A2A_CALLERS_FILE): another caller's task is not
    found through either replica, the relay carrying each caller's own token."""
    tokens = {n: base64.b16encode(os.urandom(24)).decode().lower() for n in ("alice", "bob")}
    callers = {"callers": [{"name": n, "scope": f"team-{n}", "token_sha256": hashlib.sha256(t.encode()).hexdigest()}
                           for n, t in tokens.items()]}
    k("create", "secret", "generic", "a2a-suite-callers", f"--from-literal=callers.json={json.dumps(callers)}")
    patch = [
        {"op": "add", "path": "/spec/template/spec/volumes/-", "value": {"name": "callers", "secret": {
            "secretName": "a2a-suite-callers", "defaultMode": 0o440}}},
        {"op": "add", "path": "/spec/template/spec/containers/0/volumeMounts/-", "value": {
            "name": "callers", "mountPath": "/run/secrets/a2a-suite-callers", "readOnly": True}},
        {"op": "add", "path": "/spec/template/spec/containers/0/env/-", "value": {
            "name": "A2A_CALLERS_FILE", "value": "/run/secrets/a2a-suite-callers/callers.json"}},
    ]
    k("patch", f"deployment/{SERVICE}", "--type=json", "-p", json.dumps(patch))
    k("rollout", "status", f"deployment/{SERVICE}", "--timeout=180s")
    two_replicas()
    holder, other = list(C.replicas().values())
    r, _ = C.rpc("SendMessage", {"message": {"role": "ROLE_USER", "messageId": "s1", "parts": [{"data": {"operation": "list"}}]}},
                 host=holder, token=tokens["alice"])
    tid = r["result"]["task"]["id"]
    for via in (holder, other):
        r, _ = C.rpc("GetTask", {"id": tid}, host=via, token=tokens["bob"])
        assert r.get("error", {}).get("code") == -32001, r
        r, _ = C.rpc("GetTask", {"id": tid}, host=via, token=tokens["alice"])
        assert r["result"]["id"] == tid, r
    for _ in range(4):
        mine = [t["id"] for t in C.rpc("ListTasks", {}, token=tokens["alice"])[0]["result"]["tasks"]]
        theirs = [t["id"] for t in C.rpc("ListTasks", {}, token=tokens["bob"])[0]["result"]["tasks"]]
        assert tid in mine and tid not in theirs, (mine, theirs)
    return f"bob's GetTask of alice's task not found through {holder} and {other}; ListTasks per caller"


def a_gone_replica_says_so():
    tid = STATE["bg"]
    holder = tid.rsplit(".", 1)[1].replace("-", ".")
    name = next((n for n, ip in C.replicas().items() if ip == holder), None)
    if name:
        k("delete", "pod", name, "--grace-period=0", "--force")
    wait("a replica that holds no task", lambda: len(C.replicas()) == 2 and holder not in C.replicas().values(), within=120)
    for _ in range(4):
        r, _ = C.rpc("GetTask", {"id": tid})
        assert r["error"]["code"] == -32001 and "is gone" in r["error"]["message"], r
    return r["error"]["message"]


def auth_token_rotation():
    """The Secret changes: the kubelet updates the mounted file on both replicas, each takes the
    new token without a restart and accepts the old one for A2A_AUTH_TOKEN_OVERLAP (60 s)."""
    old, new = C.token, base64.b16encode(os.urandom(32)).decode().lower()
    restarts = {p["metadata"]["name"]: p["status"]["containerStatuses"][0]["restartCount"]
                for p in kj("get", "pods", "-l", "app.kubernetes.io/name=a2a-worker-controller")["items"]}
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "a2a-worker-controller-auth", "namespace": NS},
              "data": {"token": base64.b64encode(new.encode()).decode()}}
    k("apply", "-f", "-", stdin=json.dumps(secret))
    t = time.monotonic()

    def accepts(token):
        return all(C.http(ip, "POST", "/a2a", {"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}},
                          token=token)[0] == 200 for ip in C.replicas().values())
    wait("both replicas take the new token", lambda: accepts(new), within=180, every=1)
    took = time.monotonic() - t
    assert accepts(old), "the old token is accepted for the overlap"
    wait("the old token refused after the overlap", lambda: not accepts(old), within=120, every=2)
    refused = time.monotonic() - t
    now = {p["metadata"]["name"]: p["status"]["containerStatuses"][0]["restartCount"]
           for p in kj("get", "pods", "-l", "app.kubernetes.io/name=a2a-worker-controller")["items"]}
    assert now == restarts, (restarts, now)
    C.token = new
    return f"new token taken by both after {took:.0f}s, the old one refused after {refused:.0f}s, no restart"


def main():
    global KUBECTL, C, HOOK_IP, HOOK_PORT, STATE
    ap = argparse.ArgumentParser()
    ap.add_argument("--kubectl", default="kubectl")
    a = ap.parse_args()
    KUBECTL = shlex.split(a.kubectl)
    C = Cluster()
    STATE = {}
    nodes = json.loads(subprocess.check_output(KUBECTL + ["get", "nodes", "-o", "json"]))
    HOOK_IP = next(x["address"] for x in nodes["items"][0]["status"]["addresses"] if x["type"] == "InternalIP")
    hooks = ThreadingHTTPServer(("0.0.0.0", 0), Hooks)
    HOOK_PORT = hooks.server_address[1]
    threading.Thread(target=hooks.serve_forever, daemon=True).start()
    for s in (as_shipped, create_from_a_client_pod, talk_to_the_worker, logs_through_the_kubelet, stop_is_graceful,
              ttl_expiry_is_reaped, missing_image, replica_deleted_mid_create, oom):
        scenario(s)
    # Back to the shipped worker, with plain-http webhooks to this machine allowed.
    set_env("WORKER_IMAGE=a2a-echo-worker:dev", "WORKER_MEMORY-", "PUSH_ALLOW_HTTP=true", f"PUSH_ALLOW={HOOK_IP}/32")
    C.__init__()
    for s in (any_replica_answers, watch_across_replicas, push_across_replicas, scopes_on_every_hop,
              a_gone_replica_says_so, auth_token_rotation):
        scenario(s)
    print(f"k8s_cluster: {len(RESULTS)} scenarios passed")


if __name__ == "__main__":
    try:
        main()
    except AssertionError as e:
        print(f"FAILED: {e}", file=sys.stderr)
        sys.exit(1)
