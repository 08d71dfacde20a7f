#!/usr/bin/env python3
"""Suspend, resume and renew on a real kube-apiserver 1.36.2 (built from source, NODE.md), with
its controller-manager, scheduler and a KWOK-style kubelet: the Secrets a suspended worker's
record is, as the controller's Role got them (create with stringData and a custom type, 409,
get 200/404, list by label, delete 200/404), a pod label patch with a stale uid, and the
controller's suspend / list / create-refused / resume / renew / stop against it. Writes
$WORK/rec/s42-suspend-records.txt and the raw answers."""
import base64, json, os, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from recording import Recording, enter_netns  # noqa: E402

enter_netns()
work, binary, repo = sys.argv[1], sys.argv[2], sys.argv[3]
recording = Recording(work, "s42-suspend-records.txt")
c, say, raw = recording.cluster, recording.say, recording.raw
AUTH = "realk8s-suspend-token-0123456789"


def control(port, data):
    return recording.control(port, AUTH, data)


p = None
try:
    c.start(time.time() + 180)
    say(f"# a real kube-apiserver at {c.url} ({time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime())} UTC)")
    token, token_file = recording.deploy(repo, work)

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
    p, port = recording.controller(binary, work, token_file, AUTH, "realk8s-suspend",
                           [f"-worker-templates-file={templates}", "-worker-ready-timeout=90s"])

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
finally:
    if p is not None:
        p.terminate()
        p.wait(timeout=20)
    recording.close()
