#!/usr/bin/env python3
"""Workspace copies by a Job on a real kube-apiserver 1.36.2 (built from source, NODE.md), with
its controller-manager (the Job controller, the garbage collector, the PersistentVolume
controller), scheduler and a KWOK-style kubelet, static hostPath PersistentVolumes of a class
`slow` that does not clone, and the namespace enforcing PodSecurity `restricted`. The kubelet
runs nothing: this script ends each copy Job's pod as a kubelet would (Succeeded with exit 0, or
Failed with exit 1 for a task named `broken`), so what is recorded is the API's side — the Job as
stored, its status as the Job controller writes it, its deletion with and without
`propagationPolicy=Background`, a Job whose pod PodSecurity refuses — and the controller's
copy_workspace against it: a copy, a failed one, one whose pod a ResourceQuota refuses, one cut
off by killing the controller and finished by the next one's tidy. Writes $WORK/rec/s56-copy-job.txt and the raw answers.
    copy-job-scenario.py WORK CONTROLLER_BINARY REPO"""
import json, os, signal, sys, threading, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from recording import Recording, enter_netns  # noqa: E402

enter_netns()
work, binary, repo = sys.argv[1], sys.argv[2], sys.argv[3]
recording = Recording(work, "s56-copy-job.txt")
c, say, raw = recording.cluster, recording.say, recording.raw
AUTH = "realk8s-copyjob-token-0123456789ab"
NS = "a2a"
C = f"/api/v1/namespaces/{NS}/persistentvolumeclaims"
J = f"/apis/batch/v1/namespaces/{NS}/jobs"
hold = {"cut"}  # job names, or task slugs in them, whose pod this "kubelet" keeps running
ended = set()


def claim(name):
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}},
                     "storageClassName": "slow"}}


def job(name, source, target, user=65532):
    """A copy Job as the controller makes it (copy_job.rs)."""
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": NS, "labels": {"a2a-worker-controller/copy": "probe"}},
            "spec": {"backoffLimit": 0, "activeDeadlineSeconds": 3600, "template": {
                "metadata": {"labels": {"a2a-worker-controller/copy": "probe"}},
                "spec": {"restartPolicy": "Never", "automountServiceAccountToken": False, "enableServiceLinks": False,
                         "securityContext": {"runAsNonRoot": user != 0, "runAsUser": user, "fsGroup": 65532,
                                             "seccompProfile": {"type": "RuntimeDefault"}},
                         "containers": [{"name": "copy", "image": "a2a-worker-controller:dev",
                                         "args": ["copy-files", "/from", "/to"],
                                         "securityContext": {"allowPrivilegeEscalation": False, "privileged": False,
                                                             "readOnlyRootFilesystem": True, "runAsNonRoot": user != 0,
                                                             "capabilities": {"drop": ["ALL"]},
                                                             "seccompProfile": {"type": "RuntimeDefault"}},
                                         "resources": {"requests": {"cpu": "100m", "memory": "32Mi"},
                                                       "limits": {"cpu": "1", "memory": "256Mi"}},
                                         "volumeMounts": [{"name": "from", "mountPath": "/from", "readOnly": True},
                                                          {"name": "to", "mountPath": "/to"}]}],
                         "volumes": [{"name": "from", "persistentVolumeClaim": {"claimName": source, "readOnly": True}},
                                     {"name": "to", "persistentVolumeClaim": {"claimName": target}}]}}}}


def end_pod(pod, code):
    t = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    phase = "Succeeded" if code == 0 else "Failed"
    why = "PodCompleted" if code == 0 else "PodFailed"
    body = {"status": {"phase": phase, "conditions": [
        {"type": "Ready", "status": "False", "reason": why, "lastTransitionTime": t},
        {"type": "ContainersReady", "status": "False", "reason": why, "lastTransitionTime": t},
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": t}],
        "containerStatuses": [{"name": "copy", "image": "a2a-worker-controller:dev", "imageID": "fake://x",
                               "ready": False, "restartCount": 0, "started": False,
                               "state": {"terminated": {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                                                        "startedAt": t, "finishedAt": t}}}]}}
    name = pod["metadata"]["name"]
    r = c.api("PATCH", f"/api/v1/namespaces/{NS}/pods/{name}/status", body, ctype="application/merge-patch+json")
    say(f"  (kubelet) pod {name} ended with exit {code} -> {r[0]}")


def kubelet():
    """Ends each copy Job's running pod, as a kubelet whose container exited."""
    while True:
        for pod in c.pods(NS, "a2a-worker-controller/copy"):
            job_name = pod["metadata"].get("labels", {}).get("batch.kubernetes.io/job-name", "")
            uid = pod["metadata"]["uid"]
            if uid in ended or job_name in hold or ("-cut-" in job_name and "cut" in hold) or pod.get("status", {}).get("phase") != "Running":
                continue
            ended.add(uid)
            end_pod(pod, 1 if "broken" in job_name else 0)
        time.sleep(0.3)


def wait(what, pred, limit=60):
    deadline = time.time() + limit
    while time.time() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(0.3)
    say(f"  !! gave up waiting for {what}")


def job_state(name):
    code, body = c.api("GET", f"{J}/{name}")
    if code != 200:
        return f"{code}"
    return json.dumps({k: body.get("status", {}).get(k) for k in ("active", "succeeded", "failed", "ready", "terminating")}
                      | {"conditions": [(x["type"], x["status"], x.get("reason")) for x in body.get("status", {}).get("conditions", [])]})


p = None
try:
    c.start(time.time() + 180)
    say(f"# a real kube-apiserver at {c.url} ({time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime())} UTC)")
    token, token_file = recording.deploy(repo, work)
    say("\n## static volumes of class slow (no provisioner, no cloning), a node")
    for i in range(16):
        pv = {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": f"pv{i}"},
              "spec": {"capacity": {"storage": "5Gi"}, "accessModes": ["ReadWriteOnce"],
                       "storageClassName": "slow", "hostPath": {"path": f"/tmp/pv{i}"}}}
        c.kubectl("apply", "-f", "-", stdin=json.dumps(pv))
    c.add_kubelet("node1")
    c.wait_node_ready("node1", time.time() + 60)
    threading.Thread(target=kubelet, daemon=True).start()

    say("\n## a copy Job as the controller's Role: create, status, delete")
    raw("probe_claim_from", "POST", C, claim("probe-from"), token)
    raw("probe_claim_to", "POST", C, claim("probe-to"), token)
    hold.add("probe-copy")
    raw("job_create201", "POST", J + "?fieldValidation=Strict", job("probe-copy", "probe-from", "probe-to"), token)
    wait("its pod running", lambda: any(p.get("status", {}).get("phase") == "Running"
                                        for p in c.pods(NS, "batch.kubernetes.io/job-name=probe-copy")))
    raw("job_get_running", "GET", f"{J}/probe-copy", token=token)
    pods = c.pods(NS, "batch.kubernetes.io/job-name=probe-copy")
    say("  its pod's labels, owner and finalizers:", json.dumps([(p["metadata"]["name"], p["metadata"].get("labels"),
        p["metadata"].get("ownerReferences"), p["metadata"].get("finalizers")) for p in pods])[:1500])
    raw("job_pods_list", "GET", f"/api/v1/namespaces/{NS}/pods?labelSelector=batch.kubernetes.io%2Fjob-name%3Dprobe-copy", token=token)
    hold.discard("probe-copy")
    wait("the Job complete", lambda: "Complete" in job_state("probe-copy"))
    raw("job_get_complete", "GET", f"{J}/probe-copy", token=token)
    raw("job_delete_background", "DELETE", f"{J}/probe-copy?propagationPolicy=Background", token=token)
    wait("its pod gone", lambda: not c.pods(NS, "batch.kubernetes.io/job-name=probe-copy"), 30)
    say("  pods of probe-copy after the delete:", len(c.pods(NS, "batch.kubernetes.io/job-name=probe-copy")))
    raw("job_get404", "GET", f"{J}/probe-copy", token=token)

    say("\n## a Job deleted without a propagation policy; a failing one; one PodSecurity refuses")
    raw("probe_claim_to2", "POST", C, claim("probe-to2"), token)
    raw(None, "POST", J, job("probe-orphan", "probe-from", "probe-to2"), token)
    wait("its pod ended", lambda: "Complete" in job_state("probe-orphan"))
    raw("job_delete_default", "DELETE", f"{J}/probe-orphan", token=token)
    time.sleep(3)
    say("  pods of probe-orphan 3 s after a delete without propagationPolicy:",
        [(p["metadata"]["name"], p["metadata"].get("ownerReferences")) for p in c.pods(NS, "batch.kubernetes.io/job-name=probe-orphan")])
    raw("probe_claim_to3", "POST", C, claim("probe-to3"), token)
    raw(None, "POST", J, job("probe-broken", "probe-from", "probe-to3"), token)
    wait("the Job failed", lambda: "Failed" in job_state("probe-broken"))
    raw("job_get_failed", "GET", f"{J}/probe-broken", token=token)
    raw("job_create_root", "POST", J + "?fieldValidation=Strict", job("probe-root", "probe-from", "probe-to3", user=0), token)
    time.sleep(3)
    say("  probe-root:", job_state("probe-root"), "pods:", len(c.pods(NS, "batch.kubernetes.io/job-name=probe-root")))
    ev = c.api("GET", f"/api/v1/namespaces/{NS}/events?fieldSelector=involvedObject.name%3Dprobe-root")[1]
    say("  events of probe-root:", json.dumps([(e.get("reason"), e.get("message")) for e in ev.get("items", [])])[:1500])
    for n in ["probe-orphan", "probe-broken", "probe-root"]:
        c.api("DELETE", f"{J}/{n}?propagationPolicy=Background")
    for n in ["probe-from", "probe-to", "probe-to2", "probe-to3"]:
        c.api("DELETE", f"{C}/{n}")

    templates = os.path.join(work, "templates.json")
    with open(templates, "w") as f:
        json.dump({"templates": {"coder": {"workspace": {"size": "1Gi", "storage_class": "slow"}}}}, f)
    extra = [f"-worker-templates-file={templates}", "-workspace-copy-image=a2a-worker-controller:dev",
             "-worker-ready-timeout=60s"]
    p, port = recording.controller(binary, work, token_file, AUTH, "realk8s-copy", extra)

    def control(data):
        return recording.control(port, AUTH, data)

    say("\n## the controller: copy_workspace by a Job, a failed copy")
    _, made = control({"operation": "create", "task": "base", "template": "coder"})
    control({"operation": "copy_workspace", "from_task": "base", "task": "fork"})
    control({"operation": "stop", "worker_id": made["worker"]["worker_id"]})
    wait("the base pod gone", lambda: not c.pods(NS, "a2a-worker-controller/owner=realk8s-copy"))
    control({"operation": "copy_workspace", "from_task": "base", "task": "fork"})
    control({"operation": "copy_workspace", "from_task": "base", "task": "broken"})
    control({"operation": "workspaces"})
    say("  copy Jobs left:", [j["metadata"]["name"] for j in c.api("GET", J)[1].get("items", [])])
    say("  claims:", [(x["metadata"]["annotations"].get("a2a-worker-controller/task"),
                       x["metadata"]["annotations"].get("a2a-worker-controller/copying"), x["status"].get("phase"))
                      for x in c.api("GET", C)[1].get("items", [])])
    _, forked = control({"operation": "create", "task": "fork", "template": "coder"})

    say("\n## a copy whose pod a ResourceQuota refuses: the Job's FailedCreate, at once")
    quota = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "q-pods", "namespace": NS},
             "spec": {"hard": {"pods": "0"}}}
    say("$ kubectl apply ResourceQuota q-pods (pods: 0; the pods running stay, no new one)\n  "
        + c.kubectl("apply", "-f", "-", stdin=json.dumps(quota)).stdout.strip())
    wait("the quota's status", lambda: c.api("GET", f"/api/v1/namespaces/{NS}/resourcequotas/q-pods")[1]
         .get("status", {}).get("used"))
    t0 = time.time()
    control({"operation": "copy_workspace", "from_task": "base", "task": "over quota"})
    say(f"  answered in {time.time() - t0:.1f} s; copy Jobs left:",
        [j["metadata"]["name"] for j in c.api("GET", J)[1].get("items", [])])
    c.kubectl("-n", NS, "delete", "resourcequota", "q-pods")

    say("\n## a copy cut off: the controller killed while its Job runs; the next one's tidy")
    threading.Thread(target=lambda: control({"operation": "copy_workspace", "from_task": "base", "task": "cut"}),
                     daemon=True).start()
    running = wait("the cut copy's pod", lambda: [x for x in c.pods(NS, "a2a-worker-controller/copy")
                                                  if "cut" in x["metadata"]["labels"].get("batch.kubernetes.io/job-name", "")
                                                  and x.get("status", {}).get("phase") in ("Pending", "Running")])
    cut_job = running[0]["metadata"]["labels"]["batch.kubernetes.io/job-name"] if running else ""
    p.send_signal(signal.SIGKILL)
    p.wait()
    say(f"  controller SIGKILLed while {cut_job} runs; claims:",
        [(x["metadata"]["annotations"].get("a2a-worker-controller/task"), "copying" if x["metadata"]["annotations"].get("a2a-worker-controller/copying") else "")
         for x in c.api("GET", C)[1].get("items", [])])
    p, port = recording.controller(binary, work, token_file, AUTH, "realk8s-copy", extra)
    control({"operation": "workspaces"})
    control({"operation": "create", "task": "cut", "template": "coder"})
    hold.discard("cut")
    wait("the cut Job complete", lambda: "Complete" in job_state(cut_job))
    deadline = time.time() + 90
    log = os.path.join(work, "controller.log")
    while time.time() < deadline and "the copy into claim" not in open(log).read():
        time.sleep(0.5)
    say("  the new controller's log:", [l.strip() for l in open(log) if "copy" in l][-3:])
    control({"operation": "workspaces"})
    say("  copy Jobs left:", [j["metadata"]["name"] for j in c.api("GET", J)[1].get("items", [])])
finally:
    if p is not None:
        p.terminate()
        p.wait(timeout=20)
    recording.close()
