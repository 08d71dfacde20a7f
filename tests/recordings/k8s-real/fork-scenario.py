#!/usr/bin/env python3
"""Workspace copies by clone on a real kube-apiserver 1.36.2 (built from source, NODE.md), with
its controller-manager (the PersistentVolume controller), scheduler and a KWOK-style kubelet,
and static hostPath PersistentVolumes of a class `csi-clone` (no CSI driver: nothing clones
here). Records what the API answers to a claim whose `dataSource` is another claim, as the
controller's Role (create, strict; the stored object; a source that does not exist; a clone
smaller than its source), what the PersistentVolume controller then does with such a claim, and
the controller's copy_workspace / refusals against it. Writes $WORK/rec/s55-fork-clone.txt and
the raw answers.   fork-scenario.py WORK CONTROLLER_BINARY REPO"""
import json, os, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from recording import Recording, enter_netns  # noqa: E402

enter_netns()
work, binary, repo = sys.argv[1], sys.argv[2], sys.argv[3]
recording = Recording(work, "s55-fork-clone.txt")
c, say, raw = recording.cluster, recording.say, recording.raw
AUTH = "realk8s-fork-token-0123456789abcd"


def control(port, data):
    return recording.control(port, AUTH, data)


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


p = None
try:
    c.start(time.time() + 180)
    say(f"# a real kube-apiserver at {c.url} ({time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime())} UTC)")
    token, token_file = recording.deploy(repo, work)

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
    p, port = recording.controller(binary, work, token_file, AUTH, "realk8s-fork",
                           [f"-worker-templates-file={templates}", "-k8s-clone-storage-classes=csi-clone",
                            "-worker-ready-timeout=60s"])

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
    recording.close()
