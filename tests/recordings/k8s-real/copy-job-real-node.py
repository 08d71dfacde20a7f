#!/usr/bin/env python3
"""Inside the real node's network namespace (NODE.md: kubelet 1.36.2, containerd, the bridge CNI;
the images a2a-echo-worker:dev and a2a-worker-controller:dev imported): a workspace copy by a
Job, run for real. `local` PersistentVolumes of a class `local-slow` (no provisioner, no
cloning; the kubelet applies fsGroup to them), each holding an empty `lost+found` as a block
volume's filesystem would; the namespace enforcing PodSecurity `restricted`. A worker writes
files, a mode and a link; it stops; the controller copies its workspace by a Job (the
controller's image running copy-files as the workers' user); the new task's worker reads them.
Prints the transcript (s56b-copy-job-real-node.txt).
    nsenter --net=/run/netns/realk8s python3 copy-job-real-node.py REPO CONTROLLER_BINARY"""
import json, os, shutil, subprocess, sys, time, urllib.request

repo, binary = sys.argv[1], sys.argv[2]
W = "/tmp/realk8s/node-copy"
K = ["/tmp/realk8s/bin126/kubectl", "--kubeconfig", "/tmp/realk8s/node/cp/admin.kubeconfig"]
API = open("/tmp/realk8s/node/cp/READY").read().strip()
P = "/tmp/realk8s/node/cp/pki"
AUTH = "realnode-copy-token-0123456789abc"
PORT = 18091


def say(*parts):
    print(" ".join(str(p) for p in parts), flush=True)


def kubectl(*args, stdin=None):
    r = subprocess.run(K + list(args), input=stdin, capture_output=True, text=True)
    return (r.stdout + r.stderr).strip()


def control(data):
    body = json.dumps({"jsonrpc": "2.0", "id": "1", "method": "SendMessage", "params": {"message": {
        "messageId": "1", "role": "ROLE_USER", "parts": [{"data": data}]}}}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{PORT}/a2a", data=body, method="POST", headers={
        "Authorization": f"Bearer {AUTH}", "Content-Type": "application/json"})
    task = json.loads(urllib.request.urlopen(req, timeout=300).read())["result"]["task"]
    state = task["status"]["state"]
    out = task["artifacts"][0]["parts"][0]["data"] if state == "TASK_STATE_COMPLETED" else \
        task["status"]["message"]["parts"][1]["data"]
    shown = json.dumps(out)
    if "token" in out:
        shown = shown.replace(out["token"], "<the worker's token>")
    say(f"$ {data['operation']} {json.dumps({k: v for k, v in data.items() if k != 'operation'})} -> {state}")
    say("  " + shown[:700])
    return out


def tell(worker, text):
    pod = json.loads(kubectl("-n", "a2a", "get", "pods", "-l",
                             f"a2a-worker-controller/worker-id={worker['worker']['worker_id']}", "-o", "json"))["items"][0]
    url = f"http://{pod['status']['podIP']}:9090/"
    body = json.dumps({"jsonrpc": "2.0", "id": 2, "method": "SendMessage", "params": {"message": {
        "messageId": "m", "role": "ROLE_USER", "parts": [{"text": text}]}}}).encode()
    req = urllib.request.Request(url, data=body, method="POST", headers={
        "Authorization": f"Bearer {worker['token']}", "Content-Type": "application/json"})
    said = json.loads(urllib.request.urlopen(req, timeout=30).read())["result"]["task"]["artifacts"][0]["parts"][0]["text"]
    say(f"  (worker of {worker['worker']['task']}) {text!r} -> {said!r}")
    return said


def listing(path):
    r = subprocess.run(["ls", "-lnaR", "--time-style=+", path], capture_output=True, text=True)
    return "\n".join("    " + l for l in r.stdout.strip().splitlines())


shutil.rmtree(W, ignore_errors=True)
os.makedirs(W)
say(f"# a real node (kubelet 1.36.2, containerd, the bridge CNI), {time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime())} UTC")
for f in ["00-namespace", "10-serviceaccount", "20-role", "30-rolebinding", "40-worker-service"]:
    say(f"$ kubectl apply -f scripts/k8s/{f}.yaml\n  " + kubectl("apply", "-f", f"{repo}/scripts/k8s/{f}.yaml"))
node = json.loads(kubectl("get", "nodes", "-o", "json"))["items"][0]["metadata"]["name"]
sc = {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "local-slow"},
      "provisioner": "kubernetes.io/no-provisioner", "volumeBindingMode": "WaitForFirstConsumer"}
say("$ kubectl apply StorageClass local-slow (no provisioner, WaitForFirstConsumer)\n  " + kubectl("apply", "-f", "-", stdin=json.dumps(sc)))
for i in range(6):
    d = f"{W}/pv{i}"
    os.makedirs(f"{d}/lost+found")
    pv = {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": f"copy-pv{i}"},
          "spec": {"capacity": {"storage": "2Gi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": "local-slow",
                   "persistentVolumeReclaimPolicy": "Retain", "local": {"path": d},
                   "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                       {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}}}}
    kubectl("apply", "-f", "-", stdin=json.dumps(pv))
say(f"  6 local PersistentVolumes under {W}/pvN on node {node}, each with an empty lost+found")

with open(f"{W}/templates.json", "w") as f:
    json.dump({"templates": {"coder": {"workspace": {"path": "/work", "size": "1Gi", "storage_class": "local-slow"}}}}, f)
log = open(f"{W}/controller.log", "w")
env = dict(os.environ, A2A_AUTH_TOKEN=AUTH, RUST_LOG="info")
ctl = subprocess.Popen([binary, f"-listen=127.0.0.1:{PORT}", f"-a2a-public-url=http://127.0.0.1:{PORT}", "-backend=k8s",
                        f"-k8s-api-url={API}", f"-k8s-ca-file={P}/ca.crt", f"-k8s-client-cert-file={P}/admin.crt",
                        f"-k8s-client-key-file={P}/admin.key", "-k8s-namespace=a2a", "-worker-image=a2a-echo-worker:dev",
                        "-controller-id=realnode-copy", f"-worker-templates-file={W}/templates.json",
                        "-workspace-copy-image=a2a-worker-controller:dev", "-worker-ready-timeout=90s"],
                       env=env, stdout=log, stderr=subprocess.STDOUT)
try:
    for _ in range(100):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{PORT}/healthz", timeout=1)
            break
        except Exception:
            time.sleep(0.2)
    say("\n## a worker leaves files; it stops")
    base = control({"operation": "create", "task": "base", "template": "coder"})
    tell(base, "workspace write notes.txt half done")
    tell(base, "workspace chmod notes.txt 640")
    tell(base, "workspace link up ../..")
    tell(base, "workspace stat notes.txt")
    control({"operation": "stop", "worker_id": base["worker"]["worker_id"]})
    for _ in range(300):
        if not json.loads(kubectl("-n", "a2a", "get", "pods", "-l", "a2a-worker-controller/owner=realnode-copy", "-o", "json"))["items"]:
            break
        time.sleep(0.2)
    src = json.loads(kubectl("get", "pv", "-o", "json"))["items"]
    bound = {p["spec"]["claimRef"]["name"]: p["spec"]["local"]["path"] for p in src if p["spec"].get("claimRef")}
    say("  the source volume on the node:\n" + "\n".join(listing(v) for v in bound.values()))

    say("\n## copy_workspace by a Job of the controller's image")
    t0 = time.time()
    control({"operation": "copy_workspace", "from_task": "base", "task": "fork"})
    say(f"  took {time.time() - t0:.1f} s")
    say("  the controller's steps:", [l.strip()[:300] for l in open(f"{W}/controller.log") if "copy" in l.lower()][-4:])
    say("  Jobs left:", kubectl("-n", "a2a", "get", "jobs", "-o", "name") or "(none)")
    pvs = json.loads(kubectl("get", "pv", "-o", "json"))["items"]
    new = [p["spec"]["local"]["path"] for p in pvs if p["spec"].get("claimRef", {}).get("name", "").startswith("realnode-copy-fork")]
    say("  the new volume on the node:\n" + "\n".join(listing(v) for v in new))
    fork = control({"operation": "create", "task": "fork", "template": "coder"})
    tell(fork, "workspace read notes.txt")
    tell(fork, "workspace stat notes.txt")
    tell(fork, "workspace stat up")
    tell(fork, "workspace write notes.txt changed in the fork")
    control({"operation": "stop", "worker_id": fork["worker"]["worker_id"]})
    again = control({"operation": "create", "task": "base", "template": "coder"})
    tell(again, "workspace read notes.txt")
finally:
    ctl.terminate()
    ctl.wait(timeout=20)
    kubectl("delete", "namespace", "a2a", "--wait=false")
