"""A stand-in Kubernetes API server for the controller's tests (CI cannot run a real one). It
answers the calls the controller makes as a real kube-apiserver 1.36.2 did when this project
recorded it (`../shared/reference/k8s-real/`, "rec" below: `responses/NAME.{h,b}` raw answers,
`sNN-*.txt` transcripts), and where the recordings are silent, as the Kubernetes sources say.
A scheduler, a kubelet and a node controller are simulated in one thread.

What it mimics, and from where:

| behaviour | source |
|---|---|
| TLS; a client certificate (user = CN) or a bearer token equal to --token-file (re-read each request); else 401 `Unauthorized` | rec unauth.b |
| create 201 with the stored pod (uid, resourceVersion, creationTimestamp, generation, defaults: terminationGracePeriodSeconds 30, serviceAccountName default, status Pending) | rec create201.b, worker-pod-as-stored.yaml |
| 409 `AlreadyExists` `pods "x" already exists`; `object is being deleted: ...` while the old pod is in its grace period | rec create409.b, s04; apiserver registry/store.go |
| 422 `Invalid` with `details.causes`: a name that is not a DNS-1123 subdomain, a container without an image | rec create422name.b, create422noimage.b |
| `Warning: 299` for a deprecated `beta.kubernetes.io/` node selector label (s15 tpl-deprecated); unknown fields: `Warning: 299 - "unknown field \\"spec.x\\""` by default (`fieldValidation=Warn`), none with `Ignore`, 400 `BadRequest` `Pod in version "v1" cannot be handled as a Pod: strict decoding error: ...` with `Strict` (the issue said 422; handlers/create.go's transformDecodeError answers 400) | rec s15b; apiserver handlers/create.go, rest.go |
| `dryRun=All`: validation and admission run, nothing is stored | apiserver handlers/create.go |
| PodSecurity `restricted` (namespace label, --psa or `psa restricted`): 403 `Forbidden` `violates PodSecurity "restricted:latest": ...` with the real check texts | rec create403psa.b, s15 |
| ResourceQuota: 403 `exceeded quota: q-pods, requested: pods=1, used: pods=N, limited: pods=N` (N: pods not Succeeded or Failed, as the quota counts them); `failed quota: q-mem: must specify limits.memory for: worker` | rec s27-quota.txt |
| ServiceAccount admission: 403 `error looking up service account ns/sa: serviceaccount "sa" not found` | plugin/pkg/admission/serviceaccount |
| list: equality and set-based label selectors (`=`, `==`, `!=`, `in`, `notin`, `k`, `!k`); 400 `found 'x', expected: ',' or 'end of string'` for malformed ones | rec list_eq.b, list_in.b, list_notin.b, list_badsel.b, list_badvalue.b |
| field selectors `metadata.name`, `metadata.namespace`, `status.phase`, `spec.nodeName`; 400 `field label not supported: X` | rec field_phase.b, field_node.b, field_bad.b |
| `limit` / `continue` (with `remainingItemCount`) | rec limit1.b |
| get 200 / 404 `NotFound` `pods "x" not found` | rec get200.b, get404.b |
| graceful deletion: a bound, unfinished pod answers 200 with `deletionTimestamp` (= now + grace) and `deletionGracePeriodSeconds`, GET still 200, watch MODIFIED; DELETED only when the kubelet confirms (never while its node is down); a repeated DELETE only shortens the grace; an unbound or finished pod, or grace 0, goes at once | rec delete200.b, get_after_delete.b, watch.b, s04, s20b; registry/rest/delete.go, pod/strategy.go |
| delete `preconditions.uid` mismatch: 409 `Conflict` | registry/rest/delete.go |
| watch (`watch=1`): chunked JSON lines; `ADDED` for current pods without `resourceVersion`, else the events after it; `410 Expired` `too old resource version: R (OLDEST)` as an `ERROR` event for a compacted version; `BOOKMARK`s with `allowWatchBookmarks`; ends after `timeoutSeconds`. `expire N`: the next N watches from a `resourceVersion` find it compacted, as when etcd compacts between a client's list and its watch | rec watch.b, watchbm.b |
| scheduler: binds a pod to `standin-node`; an image containing `unschedulable` stays Pending with `PodScheduled=False`, reason `Unschedulable`, the scheduler's message and a `FailedScheduling` event, until `schedulable` (an autoscaler added a node) or --schedulable-after | rec s28-scheduler.txt, s09 |
| kubelet: Running and Ready after --ready-after s; images with `pull-fails` (ErrImagePull with containerd's text), `oom` (Ready, then 1 s later OOMKilled exit 137, phase Failed, Ready `PodFailed`), `crashes` (CrashLoopBackOff, exit 3), `config-error` (CreateContainerConfigError), `never-ready` (Ready=False `ContainersNotReady: containers with unready status: [worker]` and an `Unhealthy` `Readiness probe failed: ...` event); confirms deletions after --confirm-after s | rec s09-notready.txt |
| the real kubelet's answers for an unpullable image, an OOM kill and a graceful stop | rec node/s29-missing-image-reply.json, node/s29-oom-pod.json, node/s29-stopping-pod.json (scripts/test-k8s.sh on the real node, A2A_K8S_RECORD) |
| node down (`node-down`): nothing is confirmed; the node controller sets its pods' `Ready` to `False` with no reason, `ContainersReady` unchanged; `pods/log` answers 500 with the dial error | rec s20-node-down.txt, s10c |
| `pods/log`: text; 204 with no body for a pod without a node; 400 `container X is not valid for pod P` | rec log_nohost.h, log_badcontainer.b |
| API priority and fairness: 429 `text/plain` `Too many requests, please try again later.` with `Retry-After: 1` (--throttle-once, `throttle N`) | rec s26-apf429.txt |
| RBAC (--deny, `deny ...`): 403 `pods "x" is forbidden: User "u" cannot VERB resource "R" in API group "" in the namespace "ns"`; `SelfSubjectAccessReview` answers `allowed` the same way | rec s13-rbac-a.txt, noauth_dummy.b |
| an API server restart (`outage S`): the port refuses connections for S s, open streams are cut, the store survives | rec s23-apiserver-restart.txt |
| discovery for kubectl (`/api`, `/api/v1`, `/apis`, `/version`) | kubectl's legacy discovery |
| events: `GET .../events?fieldSelector=involvedObject.name=P,type=Warning` | core v1 Event |
| pods: merge patch of labels and annotations (`application/merge-patch+json`, else 415); a changed `metadata.uid` is 422 `Invalid` `metadata.uid: Invalid value: "U": field is immutable` (as the real server answered, 2026-12-02); a stale `metadata.resourceVersion` is 409 `Conflict` `the object has been modified; please apply your changes to the latest version and try again`; label values validated | apiserver registry/store.go, apimachinery validation/objectmeta.go |
| delete `preconditions.resourceVersion` mismatch: 409 `Conflict` `the ResourceVersion in the precondition (A) does not match the ResourceVersion in record (B). The object might have been modified` | the real kube-apiserver 1.36.2, 2026-12-02 (issue 31's run) |
| `spec.schedulingGates`: the pod is stored with `PodScheduled=False` reason `SchedulingGated` (message `Scheduling is blocked due to non-empty scheduling gates`) and never scheduled; gate names must be qualified names; nodeName set with gates is 422 | registry/core/pod/strategy.go, core/validation; the real server stored a binding pod so (2026-12-02) |
| the garbage collector: a pod whose `ownerReferences` name a pod (by uid) that is gone is deleted in the background | kube-controller-manager garbagecollector (the real one removed a binding 0.1 s after its member, 2026-12-02) |
| --run-workers PATH: the kubelet runs each bound pod as a real process of PATH with its container's environment, listening on a loopback address of its own (`LISTEN=127.0.N.M:port`, the pod's `podIP`); Ready when its readiness probe's httpGet answers 200; an image named `...no-contract...` runs it as a plain worker that ignores a pool member's variables (an image without the activation contract); a process that exits ends the container (exit code, phase Failed or Succeeded); a deletion sends SIGTERM and is confirmed when the process has exited (SIGKILL after the grace period) | a real kubelet's pod lifecycle (rec node/s29-*.json) |
| secrets (a suspended worker's record): create 201 (`stringData` folded into base64 `data`, the custom `type` kept), 409 `secrets "x" already exists`, get 200 / 404, list by label, delete 200 with a `Status` `Success`; `deny secrets`: RBAC's 403 for every verb | rec tests/recordings/k8s-real/s42-suspend-records.txt, secret_*.{h,b} |
| persistentvolumeclaims: create 201 (the `kubernetes.io/pvc-protection` finalizer, `volumeMode: Filesystem`, phase Pending; a `dataSource` of kind PersistentVolumeClaim stored with `dataSourceRef` mirroring it, one of another kind dropped without a word — rec tests/recordings/k8s-real/s55-fork-clone.txt), 409 `persistentvolumeclaims "x" already exists` (`object is being deleted: ...` while it goes), 422 without `spec.resources[storage]` or access modes, 400 strict decoding error; get / list by label; merge patch (415 `Unsupported Media Type` for another patch type); delete: a claim a pod uses stays with `deletionTimestamp` until no pod uses it, then 404 | rec s30-workspace-claims.txt |
| a provisioner (as a default StorageClass's, e.g. k3s local-path) binds a new claim on the next tick (phase Bound, capacity = request); `claims no-provisioner` leaves them Pending. The scheduler keeps a pod whose claim is missing (`0/1 nodes are available: persistentvolumeclaim "x" not found. not found`) or unbound (`... pod has unbound immediate PersistentVolumeClaims. not found`) Unschedulable | rec s30-workspace-claims.txt |
| networkpolicies (networking.k8s.io): get 200 / 404 `networkpolicies.networking.k8s.io "x" not found` (a group resource names its group); 403 with `in API group "networking.k8s.io"` under `deny networkpolicies`; the policies are put by the `fence NAME` and `fence-ingress NAME` commands (one that fences `a2a-worker-controller/egress=fenced` pods' egress, one that limits ingress only) | rec tests/recordings/k8s-real/netpol_get404.b, netpol_get200.b, s40-egress.txt; RBAC as rec s13-rbac-a.txt |
| RuntimeClass admission: a pod whose `runtimeClassName` is no RuntimeClass (none exist until `runtimeclass NAME`) is 403 `pods "x" is forbidden: pod rejected: RuntimeClass "NAME" not found`, on a dry run too | rec tests/recordings/k8s-real/create403runtimeclass.b, s40-egress.txt |

| jobs (batch/v1): create 201 with the defaults the real server filled in (parallelism, completions, a `controller-uid` selector, the template's job labels, `completionMode`, `podReplacementPolicy`, the pod template's defaults), `Warning: 299 - "would violate PodSecurity ..."` for a template the namespace's `restricted` level refuses (the Job is stored; its pods never are: `FailedCreate` events, as for a pod over a `quota pods=N`), 409 `jobs.batch "x" already exists`, 400 strict decoding error; get 200 / 404 `jobs.batch "x" not found`; delete with `propagationPolicy=Background` 200 with a `Status` `Success` (group `batch`), its pods deleted by the garbage collector; delete without one: the Job answered with `finalizers: ["orphan"]`, its pods kept without owner; `deny jobs`: RBAC's 403 in API group "batch" | rec tests/recordings/k8s-real/s56-copy-job.txt, job_*.{h,b} |
| the Job controller: one pod `<job>-xxxxx` (`generateName`, the job labels, a controller owner reference, the `batch.kubernetes.io/job-tracking` finalizer); its pod Succeeded: conditions `SuccessCriteriaMet` and `Complete` (`CompletionsReached`), `succeeded` 1, `completionTime`; Failed: `FailureTarget` and `Failed` (`BackoffLimitExceeded`, `Job has reached the specified backoff limit`), `failed` 1; past `activeDeadlineSeconds`: `Failed` `DeadlineExceeded` and its pod deleted | rec job_get_complete.b, job_get_failed.b, s56-copy-job.txt; pkg/controller/job |
| --volumes DIR: each bound claim is the directory DIR/NS/NAME (a clone, `dataSource` a claim, starts as a copy of its source, as a CSI driver's clone); the kubelet gives a process the directories of its pod's claims where its container's arguments or environment name a mount path. --run-copies PATH: a Job's pod runs as a real process of PATH with its container's arguments (its output is the pod's log; its exit ends the pod), unless `hold-copies on` (then it waits, Running without a process, until `hold-copies off`) | a real kubelet's volume mounts |

Unknown fields are found with the official OpenAPI-derived schemas that kubernetes-validate
ships (v1.36 strict), the same the manifest test validates with.

Commands on stdin, one per line, each answered `ok` on stdout once applied: `node-down`,
`node-up`, `schedulable`, `outage SECONDS`, `throttle N`, `deny VERB,...` (`-` for none),
`psa restricted|privileged`, `quota pods=N`, `quota memory`, `quota none`, `expire N`,
`claims provisioner|no-provisioner`, `fence NAME [NS]`, `fence-ingress NAME [NS]` (namespace `a2a` unless given), `runtimeclass NAME`,
`hold-copies on|off`.
The stand-in exits
when stdin closes.

Usage: k8s_standin.py --cert F --key F --ca F [--token-file F] [--deny VERB,...] [--ready-after S]
    [--confirm-after S] [--schedulable-after S] [--throttle-once] [--psa LEVEL] [--record DIR]
    [--log-lines N] [--run-workers PATH] [--run-copies PATH] [--volumes DIR]
Prints `listening https://127.0.0.1:PORT` once it serves.
"""

import argparse
import base64
import copy
import json
import os
import random
import re
import shutil
import signal
import string
import socket
import subprocess
import urllib.request
import ssl
import sys
import threading
import time
import uuid
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
PODS = re.compile(r"^/api/v1/namespaces/([^/]+)/(pods|events)(?:/([^/]+)(/log)?)?$")
POLICIES = re.compile(r"^/apis/networking\.k8s\.io/v1/namespaces/([^/]+)/networkpolicies(?:/([^/]+))?$")
CLAIMS = re.compile(r"^/api/v1/namespaces/([^/]+)/persistentvolumeclaims(?:/([^/]+))?$")
JOBS = re.compile(r"^/apis/batch/v1/namespaces/([^/]+)/jobs(?:/([^/]+))?$")
SECRETS = re.compile(r"^/api/v1/namespaces/([^/]+)/secrets(?:/([^/]+))?$")
NODE = "standin-node"
HISTORY = 2000  # events kept for watches from a resourceVersion
NAME_MSG = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
            "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation "
            "is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
UNSCHEDULABLE = ("0/1 nodes are available: 1 Insufficient memory. preemption: 0/1 nodes are available: "
                 "1 No preemption victims found for incoming pod.")


def claims_of(pod):
    return [v["persistentVolumeClaim"]["claimName"] for v in (pod.get("spec", {}).get("volumes") or [])
            if isinstance(v.get("persistentVolumeClaim"), dict)]


def die_with_parent():
    """A worker process (--run-workers) is killed when the stand-in goes (PR_SET_PDEATHSIG)."""
    import ctypes
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)


def rfc3339(t=None):
    return (t or datetime.now(timezone.utc)).strftime("%Y-%m-%dT%H:%M:%SZ")


def status(code, reason, message, details=None):
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}
    if details:
        body["details"] = details
    return code, body


class SelectorError(Exception):
    pass


def parse_selector(text):
    """A label selector as the API server's parser reads it: a list of (key, op, values)."""
    tokens = re.findall(r"\s*(==|!=|=|!|\(|\)|,|[^\s=!(),]+)", text)
    reqs, i = [], 0

    def tok(j):
        return tokens[j] if j < len(tokens) else None

    while i < len(tokens):
        if tok(i) == "!":
            if tok(i + 1) in (None, ",", "(", ")", "=", "==", "!="):
                raise SelectorError(f"found '{tok(i + 1) or 'end of string'}', expected: identifier")
            reqs.append((tok(i + 1), "!", []))
            i += 2
        else:
            key = tok(i)
            if key in (",", "(", ")", "=", "==", "!="):
                raise SelectorError(f"found '{key}', expected: !, identifier, or 'end of string'")
            op = tok(i + 1)
            if op in ("=", "==", "!="):
                value = tok(i + 2)
                if value in (",", None):
                    value, i = "", i + 2
                elif value in ("(", ")", "=", "==", "!=", "!"):
                    raise SelectorError(f"found '{value}', expected: identifier")
                else:
                    i += 3
                reqs.append((key, "!=" if op == "!=" else "=", [value]))
            elif op in ("in", "notin"):
                if tok(i + 2) != "(":
                    raise SelectorError(f"found '{tok(i + 2) or 'end of string'}', expected: '('")
                j, values = i + 3, []
                while tok(j) not in (")", None):
                    if tok(j) != ",":
                        values.append(tok(j))
                    j += 1
                if tok(j) is None:
                    raise SelectorError("found 'end of string', expected: ')'")
                reqs.append((key, op, values))
                i = j + 1
            else:
                reqs.append((key, "exists", []))
                i += 1
        if tok(i) not in (None, ","):
            raise SelectorError(f"found '{tok(i)}', expected: ',' or 'end of string'")
        i += 1
    return reqs


def labels_match(labels, reqs):
    for key, op, values in reqs:
        has, v = key in labels, labels.get(key)
        if op == "=" and v != values[0]:
            return False
        if op == "!=" and v == values[0]:
            return False
        if op == "in" and v not in values:
            return False
        if op == "notin" and has and v in values:
            return False
        if op == "exists" and not has:
            return False
        if op == "!" and has:
            return False
    return True


POD_FIELDS = {"metadata.name": lambda p: p["metadata"].get("name"),
              "metadata.namespace": lambda p: p["metadata"].get("namespace"),
              "status.phase": lambda p: p.get("status", {}).get("phase", ""),
              "spec.nodeName": lambda p: p.get("spec", {}).get("nodeName", "")}
EVENT_FIELDS = {"involvedObject.name": lambda e: e["involvedObject"]["name"],
                "type": lambda e: e["type"], "reason": lambda e: e["reason"],
                "metadata.namespace": lambda e: e["metadata"]["namespace"]}


def parse_fields(text, known):
    terms = []
    for term in filter(None, (t.strip() for t in text.split(","))):
        m = re.match(r"^([^=!]+)(==|=|!=)(.*)$", term)
        if not m:
            raise SelectorError(f"invalid selector: '{text}'; can't understand '{term}'")
        if m.group(1) not in known:
            raise SelectorError(f"field label not supported: {m.group(1)}")
        terms.append((known[m.group(1)], m.group(2) == "!=", m.group(3)))
    return terms


def pod_selectors(query):
    """A pod list's or watch's label and field selectors, parsed (SelectorError: a 400)."""
    return (parse_selector(query.get("labelSelector", "")),
            parse_fields(query.get("fieldSelector", ""), POD_FIELDS))


def fields_match(obj, terms):
    return all((f(obj) == v) != negate for f, negate, v in terms)


class Schema:
    """Unknown-field detection with kubernetes-validate's strict schemas (OpenAPI v1.36)."""

    def __init__(self):
        import kubernetes_validate
        base = os.path.join(os.path.dirname(kubernetes_validate.__file__), "kubernetes-json-schema")
        version = "v1.36.0-local-strict"
        if not os.path.isdir(os.path.join(base, version)):
            version = sorted(v for v in os.listdir(base) if v.endswith("-local-strict"))[-1]
        with open(os.path.join(base, version, "_definitions.json")) as f:
            self.defs = json.load(f)["$defs"]

    def resolve(self, s):
        while isinstance(s, dict):
            if "$ref" in s:
                s = self.defs[s["$ref"].rsplit("/", 1)[-1]]
            elif any(k in s for k in ("allOf", "anyOf", "oneOf")) and "properties" not in s:
                s = next((x for k in ("allOf", "anyOf", "oneOf") for x in s.get(k, []) if isinstance(x, dict)
                          and ("$ref" in x or "properties" in x)), {})
            else:
                break
        return s

    def unknown(self, value, schema=None, path=""):
        schema = self.resolve(schema or {"$ref": "#/$defs/io.k8s.api.core.v1.Pod"})
        out = []
        if isinstance(value, dict) and "properties" in schema:
            for k, v in value.items():
                if k in schema["properties"]:
                    out += self.unknown(v, schema["properties"][k], f"{path}.{k}" if path else k)
                else:
                    out.append(f"{path}.{k}" if path else k)
        elif isinstance(value, dict) and isinstance(schema.get("additionalProperties"), dict):
            for k, v in value.items():
                out += self.unknown(v, schema["additionalProperties"], f"{path}.{k}")
        elif isinstance(value, list) and isinstance(schema.get("items"), dict):
            for i, v in enumerate(value):
                out += self.unknown(v, schema["items"], f"{path}[{i}]")
        return out


def restricted_violations(pod):
    """PodSecurity `restricted:latest`, the checks and texts of pod-security-admission."""
    spec = pod.get("spec", {})
    psc = spec.get("securityContext") or {}
    containers = [c for k in ("initContainers", "containers") for c in spec.get(k) or []]
    out = []
    host_ports = [(c["name"], p["hostPort"]) for c in containers for p in c.get("ports") or [] if p.get("hostPort")]
    if host_ports:
        out.append("hostPort (" + ", ".join(f'container "{n}" uses hostPort {p}' for n, p in host_ports) + ")")
    priv = [c["name"] for c in containers if (c.get("securityContext") or {}).get("privileged")]
    if priv:
        out.append("privileged (" + ", ".join(f'container "{n}" must not set securityContext.privileged=true' for n in priv) + ")")
    bad = {"hostPath", "nfs", "iscsi", "glusterfs", "rbd", "cephfs", "flexVolume", "cinder", "flocker", "fc",
           "azureFile", "vsphereVolume", "quobyte", "azureDisk", "portworxVolume", "photonPersistentDisk",
           "scaleIO", "storageos", "gcePersistentDisk", "awsElasticBlockStore", "gitRepo"}
    vols = [(v["name"], t) for v in spec.get("volumes") or [] for t in v if t in bad]
    if vols:
        out.append("restricted volume types (" + ", ".join(f'volume "{n}" uses restricted volume type "{t}"' for n, t in vols) + ")")
    ape = [c["name"] for c in containers if (c.get("securityContext") or {}).get("allowPrivilegeEscalation") is not False]
    if ape:
        out.append("allowPrivilegeEscalation != false (" + ", ".join(f'container "{n}" must set securityContext.allowPrivilegeEscalation=false' for n in ape) + ")")
    caps = [c["name"] for c in containers if "ALL" not in ((c.get("securityContext") or {}).get("capabilities") or {}).get("drop", [])]
    if caps:
        out.append("unrestricted capabilities (" + ", ".join(f'container "{n}" must set securityContext.capabilities.drop=["ALL"]' for n in caps) + ")")
    nonroot = [c["name"] for c in containers if not (c.get("securityContext") or {}).get("runAsNonRoot", psc.get("runAsNonRoot"))]
    if nonroot:
        out.append("runAsNonRoot != true (" + ", ".join(f'pod or container "{n}" must set securityContext.runAsNonRoot=true' for n in nonroot) + ")")
    seccomp = [c["name"] for c in containers
               if ((c.get("securityContext") or {}).get("seccompProfile") or psc.get("seccompProfile") or {}).get("type") not in ("RuntimeDefault", "Localhost")]
    if seccomp:
        out.append("seccompProfile (" + ", ".join(f'pod or container "{n}" must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost"' for n in seccomp) + ")")
    return out


class Store:
    """Pods and events, with every change recorded for watches. The simulated kubelet,
    scheduler and node controller change pods only through `put` (MODIFIED) and `remove`
    (DELETED), as the real ones do through the API."""

    def __init__(self, opts):
        self.opts = opts
        self.lock = threading.Condition()
        self.pods = {}  # (ns, name) -> pod
        self.claims = {}  # (ns, name) -> PersistentVolumeClaim
        self.secrets = {}  # (ns, name) -> Secret
        self.policies = {}  # (ns, name) -> NetworkPolicy
        self.jobs = {}  # (ns, name) -> Job
        self.job_pods = {}  # (ns, job name) -> the name of its pod
        self.outputs = {}  # pod uid -> what a copy Job's process printed (--run-copies)
        self.hold_copies = False
        self.state = None  # the State (PodSecurity for the Job controller's pods), set by main
        self.runtime_classes = set()
        self.provisioner = True
        self.meta = {}  # uid -> {"bound": t, "deleted": t, ...}
        self.events = []  # core v1 Events
        self.history = []  # (rv, type, pod)
        self.version = 400  # like a server that has run a while (rec watchbm.b)
        self.oldest = self.version
        self.node_up = True
        self.procs = {}  # uid -> the worker process (--run-workers)
        self.addresses = int.from_bytes(os.urandom(4), "big")
        self.schedulable = False
        self.schedulable_at = time.monotonic() + (opts.schedulable_after or 0)

    def bump(self):
        self.version += 1
        return str(self.version)

    def record(self, kind, pod):
        self.history.append((self.version, kind, copy.deepcopy(pod)))
        if len(self.history) > HISTORY:
            self.history.pop(0)
            self.oldest = self.history[0][0] - 1
        self.lock.notify_all()

    def put(self, pod, kind="MODIFIED"):
        pod["metadata"]["resourceVersion"] = self.bump()
        self.pods[(pod["metadata"]["namespace"], pod["metadata"]["name"])] = pod
        self.record(kind, pod)

    def remove(self, pod):
        del self.pods[(pod["metadata"]["namespace"], pod["metadata"]["name"])]
        pod["metadata"]["resourceVersion"] = self.bump()
        self.record("DELETED", pod)
        proc = self.procs.pop(pod["metadata"]["uid"], None)
        if proc is not None and proc.poll() is None:
            proc.kill()

    def collect_garbage(self):
        """The garbage collector: pods owned by a pod that is gone are deleted (background
        propagation; an unbound dependent goes at once)."""
        uids = {p["metadata"]["uid"] for p in self.pods.values()}
        for pod in list(self.pods.values()):
            owners = [o for o in pod["metadata"].get("ownerReferences") or [] if o.get("kind") == "Pod"]
            if owners and not any(o.get("uid") in uids for o in owners) and not pod["metadata"].get("deletionTimestamp"):
                if not pod["spec"].get("nodeName"):
                    pod["metadata"]["deletionTimestamp"] = rfc3339()
                    pod["metadata"]["deletionGracePeriodSeconds"] = 0
                    self.remove(pod)
                else:
                    self.begin_deletion(pod, pod["spec"].get("terminationGracePeriodSeconds", 30))

    def begin_deletion(self, pod, grace):
        md = pod["metadata"]
        md["deletionTimestamp"] = rfc3339(datetime.now(timezone.utc) + timedelta(seconds=grace))
        md["deletionGracePeriodSeconds"] = grace
        md["generation"] = md.get("generation", 1) + 1
        m = self.meta.setdefault(md["uid"], {})
        m["deleted"] = time.monotonic()
        m["grace"] = grace
        proc = self.procs.get(md["uid"])
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        self.put(pod)

    def free_address(self, port):
        """A loopback address whose `port` is free: from a random start (stand-ins of tests
        that run at once share the machine), skipping any another process holds."""
        while True:
            self.addresses += 1
            n = self.addresses % (254 * 254 * 250)
            ip = f"127.{1 + n // (254 * 250)}.{1 + n // 250 % 254}.{1 + n % 250}"
            probe = socket.socket()
            try:
                probe.bind((ip, port))
                return ip
            except OSError:
                continue
            finally:
                probe.close()

    def run_worker(self, pod, conds, not_ready):
        """--run-workers: the pod's worker as a real process on a loopback address of its own."""
        md, spec, st = pod["metadata"], pod["spec"], pod["status"]
        c = spec["containers"][0]
        port = ((c.get("ports") or [{}])[0]).get("containerPort", 9090)
        ip = self.free_address(port)
        mounts = self.mounts(pod, c)
        env = {e["name"]: self.mapped(e.get("value", ""), mounts) for e in c.get("env") or [] if e.get("name")}
        env["LISTEN"] = f"{ip}:{port}"
        if "no-contract" in c.get("image", ""):
            # an image that does not speak the activation contract: it ignores a member's
            # variables and serves as a plain worker
            for k in ("A2A_POOL_MEMBER", "A2A_ACTIVATION_SHA256"):
                env.pop(k, None)
            env.setdefault("A2A_PUBLIC_URL", f"http://{ip}:{port}")
            env.setdefault("INTERACTIVE_AUTH_TOKEN", "no-contract-" + md["uid"])
        proc = subprocess.Popen([self.opts.run_workers] + [self.mapped(a, mounts) for a in c.get("args") or []], env=env,
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                preexec_fn=die_with_parent)
        self.procs[md["uid"]] = proc
        started = rfc3339()
        st.update(phase="Running", podIP=ip, podIPs=[{"ip": ip}], startTime=started, conditions=conds + not_ready)
        st["containerStatuses"] = [{"name": c.get("name", "worker"), "ready": False, "restartCount": 0,
                                    "image": c.get("image", ""), "imageID": "", "started": True,
                                    "state": {"running": {"startedAt": started}}}]
        self.put(pod)
        probe = (c.get("readinessProbe") or {}).get("httpGet") or {}
        url = f"http://{ip}:{probe.get('port', port)}{probe.get('path', '/')}"
        key = (md["namespace"], md["name"])
        threading.Thread(target=self.follow_worker, args=(key, md["uid"], proc, url), daemon=True).start()

    def follow_worker(self, key, uid, proc, url):
        """The kubelet's readiness probe and its record of how the container ended."""
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        ready = False
        while proc.poll() is None:
            if not ready:
                try:
                    with opener.open(url, timeout=1) as r:
                        ready = r.status == 200
                except OSError:
                    pass
                if ready:
                    with self.lock:
                        pod = self.pods.get(key)
                        if pod and pod["metadata"]["uid"] == uid and not pod["metadata"].get("deletionTimestamp"):
                            st = pod["status"]
                            st["conditions"] = [c for c in st["conditions"] if c["type"] not in ("Ready", "ContainersReady")] + [
                                {"type": "Ready", "status": "True"}, {"type": "ContainersReady", "status": "True"}]
                            st["containerStatuses"][0]["ready"] = True
                            self.put(pod)
            time.sleep(0.02 if not ready else 0.05)
        code = proc.returncode if proc.returncode >= 0 else 128 - proc.returncode
        with self.lock:
            pod = self.pods.get(key)
            if not pod or pod["metadata"]["uid"] != uid:
                return
            if pod["metadata"].get("deletionTimestamp"):
                self.remove(pod)  # the kubelet confirms: the container has stopped
                return
            st = pod["status"]
            cs = st["containerStatuses"][0]
            cs.update(ready=False, started=False, state={"terminated": {
                "exitCode": code, "reason": "Completed" if code == 0 else "Error",
                "startedAt": st.get("startTime"), "finishedAt": rfc3339()}})
            st["phase"] = "Succeeded" if code == 0 else "Failed"
            st["conditions"] = [c for c in st["conditions"] if c["type"] not in ("Ready", "ContainersReady")] + [
                {"type": "Ready", "status": "False", "reason": "PodFailed"},
                {"type": "ContainersReady", "status": "False", "reason": "PodFailed"}]
            self.put(pod)

    def event(self, pod, reason, message):
        md = pod["metadata"]
        self.events.append({"kind": "Event", "apiVersion": "v1", "type": "Warning", "reason": reason,
                            "message": message, "lastTimestamp": rfc3339(), "count": 1,
                            "metadata": {"name": f"{md['name']}.{uuid.uuid4().hex[:16]}", "namespace": md["namespace"]},
                            "involvedObject": {"kind": "Pod", "name": md["name"], "namespace": md["namespace"], "uid": md["uid"]}})

    def claim_users(self, ns, name):
        return [p for (pns, _), p in self.pods.items() if pns == ns and name in claims_of(p)]

    def tick_claims(self):
        """The provisioner binds new claims; the pvc-protection controller lets a deleted claim
        go once no pod uses it (rec s30-workspace-claims.txt)."""
        for (ns, name), c in list(self.claims.items()):
            if c["metadata"].get("deletionTimestamp"):
                if not self.claim_users(ns, name):
                    del self.claims[(ns, name)]
                    self.bump()
                    if self.claim_dir(ns, name):
                        shutil.rmtree(self.claim_dir(ns, name), ignore_errors=True)
            elif self.provisioner and c["status"].get("phase") == "Pending":
                storage = c["spec"]["resources"]["requests"]["storage"]
                c["status"] = {"phase": "Bound", "accessModes": c["spec"]["accessModes"], "capacity": {"storage": storage}}
                c["spec"]["volumeName"] = f"pvc-{c['metadata']['uid']}"
                c["metadata"]["resourceVersion"] = self.bump()
                self.provision(ns, name, c)

    def claim_dir(self, ns, name):
        """--volumes: the directory that is claim `name`'s volume."""
        return os.path.join(self.opts.volumes, ns, name) if self.opts.volumes else None

    def provision(self, ns, name, claim):
        """--volumes: a bound claim's directory; a clone starts as a copy of its source's."""
        target = self.claim_dir(ns, name)
        if not target:
            return
        source = claim["spec"].get("dataSource") or {}
        origin = self.claim_dir(ns, source.get("name", "")) if source.get("kind") == "PersistentVolumeClaim" else None
        shutil.rmtree(target, ignore_errors=True)
        if origin and os.path.isdir(origin):
            shutil.copytree(origin, target, symlinks=True)
        else:
            os.makedirs(target)

    def mounts(self, pod, c):
        """--volumes: mount path -> directory, for container `c`'s claim volumes."""
        ns = pod["metadata"]["namespace"]
        by_volume = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in pod["spec"].get("volumes") or []
                     if isinstance(v.get("persistentVolumeClaim"), dict)}
        return {m["mountPath"]: self.claim_dir(ns, by_volume[m["name"]]) for m in c.get("volumeMounts") or []
                if m.get("name") in by_volume and self.claim_dir(ns, by_volume[m["name"]])}

    @staticmethod
    def mapped(value, mounts):
        for path, where in mounts.items():
            if value == path or value.startswith(path.rstrip("/") + "/"):
                return where + value[len(path.rstrip("/")):]
        return value

    def claim_trouble(self, pod):
        """Why the scheduler cannot place a pod for its claims, or None."""
        ns = pod["metadata"]["namespace"]
        for name in claims_of(pod):
            c = self.claims.get((ns, name))
            if c is None:
                return f'0/1 nodes are available: persistentvolumeclaim "{name}" not found. not found'
            if c["status"].get("phase") != "Bound":
                return "0/1 nodes are available: pod has unbound immediate PersistentVolumeClaims. not found"
        return None

    def quota_pods_used(self, ns):
        """What a `pods` quota counts: the namespace's pods not in a terminal phase."""
        return sum(1 for (pns, _), p in self.pods.items()
                   if pns == ns and p["status"].get("phase") not in ("Succeeded", "Failed"))

    def job_event(self, job, reason, message):
        md = job["metadata"]
        if any(e["involvedObject"].get("uid") == md["uid"] and e["reason"] == reason for e in self.events):
            return  # the real controller retries with backoff: one event stands for them here
        self.events.append({"kind": "Event", "apiVersion": "v1", "type": "Warning", "reason": reason,
                            "message": message, "lastTimestamp": rfc3339(), "count": 1,
                            "metadata": {"name": f"{md['name']}.{uuid.uuid4().hex[:16]}", "namespace": md["namespace"]},
                            "involvedObject": {"kind": "Job", "name": md["name"], "namespace": md["namespace"], "uid": md["uid"]}})

    def job_pod(self, job):
        """The pod the Job controller makes from a Job's template (rec job_pods_list.b)."""
        md = job["metadata"]
        tmpl = copy.deepcopy(job["spec"]["template"])
        suffix = "".join(random.choice(string.ascii_lowercase + string.digits) for _ in range(5))
        meta = tmpl.setdefault("metadata", {})
        meta.update({"name": f"{md['name']}-{suffix}", "generateName": f"{md['name']}-", "namespace": md["namespace"],
                     "uid": str(uuid.uuid4()), "generation": 1, "creationTimestamp": rfc3339(),
                     "finalizers": ["batch.kubernetes.io/job-tracking"],
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": md["name"], "uid": md["uid"],
                                          "controller": True, "blockOwnerDeletion": True}]})
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": tmpl.get("spec", {}),
               "status": {"phase": "Pending", "qosClass": "Burstable"}}
        pod["spec"].setdefault("serviceAccountName", "default")
        return pod

    def finish_job(self, job, ok, reason, message):
        st, t = job["status"], rfc3339()
        cond = lambda kind: {"type": kind, "status": "True", "lastProbeTime": t, "lastTransitionTime": t,
                             "reason": reason, "message": message}
        st.pop("active", None)
        st.update(ready=0, terminating=0, uncountedTerminatedPods={})
        if ok:
            st.update(conditions=[cond("SuccessCriteriaMet"), cond("Complete")], succeeded=1, completionTime=t)
        else:
            st.update(conditions=[cond("FailureTarget"), cond("Failed")], failed=1)
        job["metadata"]["resourceVersion"] = self.bump()

    def tick_jobs(self, now):
        """The Job controller (backoffLimit 0, one completion: what copy Jobs ask for)."""
        for (ns, name), job in list(self.jobs.items()):
            st = job["status"]
            if any(c["type"] in ("Complete", "Failed") for c in st.get("conditions", [])):
                continue
            pod_name = self.job_pods.get((ns, name))
            if pod_name is None:
                pod = self.job_pod(job)
                if self.state is not None and self.state.psa == "restricted" and restricted_violations(pod):
                    self.job_event(job, "FailedCreate", f'Error creating: pods "{pod["metadata"]["name"]}" is forbidden: '
                                   'violates PodSecurity "restricted:latest": ' + ", ".join(restricted_violations(pod)))
                    continue
                if self.state is not None and self.state.quota_pods is not None:
                    used = self.quota_pods_used(ns)
                    if used + 1 > self.state.quota_pods:
                        self.job_event(job, "FailedCreate", f'Error creating: pods "{pod["metadata"]["name"]}" is forbidden: '
                                       f'exceeded quota: q-pods, requested: pods=1, used: pods={used}, limited: pods={self.state.quota_pods}')
                        continue
                self.put(pod, "ADDED")
                self.job_pods[(ns, name)] = pod["metadata"]["name"]
                st.update(startTime=rfc3339(), active=1, ready=0, terminating=0, uncountedTerminatedPods={})
                self.meta.setdefault(job["metadata"]["uid"], {})["started"] = now
                job["metadata"]["resourceVersion"] = self.bump()
                continue
            pod = self.pods.get((ns, pod_name))
            phase = pod["status"].get("phase") if pod else None
            deadline = job["spec"].get("activeDeadlineSeconds")
            started = self.meta.get(job["metadata"]["uid"], {}).get("started", now)
            if phase == "Succeeded":
                self.finish_job(job, True, "CompletionsReached", "Reached expected number of succeeded pods")
            elif phase == "Failed" or pod is None or pod["metadata"].get("deletionTimestamp"):
                self.finish_job(job, False, "BackoffLimitExceeded", "Job has reached the specified backoff limit")
            elif deadline is not None and now - started > deadline:
                self.finish_job(job, False, "DeadlineExceeded", "Job was active longer than specified deadline")
                self.begin_deletion(pod, pod["spec"].get("terminationGracePeriodSeconds", 30))

    def delete_job_pods(self, ns, name, orphan):
        """The garbage collector on a deleted Job: its pods deleted (a finished one at once),
        or, orphaned, kept without their owner."""
        uid = self.jobs[(ns, name)]["metadata"]["uid"]
        for pod in list(self.pods.values()):
            if not any(o.get("uid") == uid for o in pod["metadata"].get("ownerReferences") or []):
                continue
            if orphan:
                pod["metadata"].pop("ownerReferences", None)
                self.put(pod)
            elif pod["status"].get("phase") in ("Succeeded", "Failed") or not pod["spec"].get("nodeName"):
                pod["metadata"]["deletionTimestamp"] = rfc3339()
                self.remove(pod)
            elif not pod["metadata"].get("deletionTimestamp"):
                self.begin_deletion(pod, pod["spec"].get("terminationGracePeriodSeconds", 30))
        del self.jobs[(ns, name)]
        self.job_pods.pop((ns, name), None)
        self.bump()

    def run_copy(self, pod, m):
        """--run-copies: a Job's pod as a real process, its claims' directories at its mount
        paths; `hold-copies on` keeps it Running without one."""
        md, spec, st = pod["metadata"], pod["spec"], pod["status"]
        c = spec["containers"][0]
        if m.get("kubelet") == "copy" or (self.hold_copies and m.get("kubelet") == "held"):
            return
        started = rfc3339()
        st.update(phase="Running", podIP="10.42.0.6", startTime=st.get("startTime", started), conditions=[
            {"type": "PodReadyToStartContainers", "status": "True"}, {"type": "Initialized", "status": "True"},
            {"type": "Ready", "status": "True"}, {"type": "ContainersReady", "status": "True"},
            {"type": "PodScheduled", "status": "True"}])
        st["containerStatuses"] = [{"name": c.get("name", "copy"), "ready": True, "restartCount": 0, "started": True,
                                    "image": c.get("image", ""), "imageID": "", "state": {"running": {"startedAt": started}}}]
        self.put(pod)
        if self.hold_copies:
            m["kubelet"] = "held"
            return
        m["kubelet"] = "copy"
        mounts = self.mounts(pod, c)
        proc = subprocess.Popen([self.opts.run_copies] + [self.mapped(a, mounts) for a in c.get("args") or []],
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                preexec_fn=die_with_parent)
        self.procs[md["uid"]] = proc
        threading.Thread(target=self.follow_copy, args=((md["namespace"], md["name"]), md["uid"], proc),
                         daemon=True).start()

    def follow_copy(self, key, uid, proc):
        """A copy's process to its end: its output is the pod's log, its exit ends the pod."""
        out = proc.stdout.read()
        code = proc.wait()
        code = code if code >= 0 else 128 - code
        with self.lock:
            self.outputs[uid] = out.decode("utf-8", "replace")
            pod = self.pods.get(key)
            if not pod or pod["metadata"]["uid"] != uid:
                return
            if pod["metadata"].get("deletionTimestamp"):
                self.remove(pod)
                return
            st = pod["status"]
            why = "PodCompleted" if code == 0 else "PodFailed"
            st["containerStatuses"][0].update(ready=False, started=False, state={"terminated": {
                "exitCode": code, "reason": "Completed" if code == 0 else "Error",
                "startedAt": st.get("startTime"), "finishedAt": rfc3339()}})
            st["phase"] = "Succeeded" if code == 0 else "Failed"
            st["conditions"] = [c for c in st["conditions"] if c["type"] not in ("Ready", "ContainersReady")] + [
                {"type": "Ready", "status": "False", "reason": why}, {"type": "ContainersReady", "status": "False", "reason": why}]
            self.put(pod)

    def tick(self):
        """One step of the scheduler, the kubelet and the node controller."""
        now = time.monotonic()
        self.tick_claims()
        self.tick_jobs(now)
        self.collect_garbage()
        if not self.schedulable and now >= self.schedulable_at and self.opts.schedulable_after is not None:
            self.schedulable = True
        for pod in list(self.pods.values()):
            md, spec, st = pod["metadata"], pod["spec"], pod["status"]
            m = self.meta.setdefault(md["uid"], {})
            image = spec["containers"][0].get("image", "")
            name = spec["containers"][0].get("name", "worker")
            if md.get("deletionTimestamp"):
                proc = self.procs.get(md["uid"])
                if proc is not None:
                    # confirmed when the process has exited (follow_worker); killed at the end
                    # of its grace period
                    if proc.poll() is None and now - m.get("deleted", now) >= m.get("grace", 30):
                        proc.kill()
                elif self.node_up and now - m.get("deleted", now) >= self.opts.confirm_after:
                    self.remove(pod)
                continue
            if not spec.get("nodeName") and spec.get("schedulingGates"):
                continue  # the scheduler skips a gated pod
            if not spec.get("nodeName"):
                trouble = self.claim_trouble(pod)
                if trouble:
                    if m.get("claims") != trouble:
                        m["claims"] = trouble
                        st["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                             "message": trouble, "lastTransitionTime": rfc3339()}]
                        self.event(pod, "FailedScheduling", trouble)
                        self.put(pod)
                    continue
                if "unschedulable" in image and not self.schedulable:
                    if not m.get("unschedulable"):
                        m["unschedulable"] = True
                        st["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                             "message": UNSCHEDULABLE, "lastTransitionTime": rfc3339()}]
                        self.event(pod, "FailedScheduling", UNSCHEDULABLE)
                        self.put(pod)
                    continue
                spec["nodeName"] = NODE
                st["conditions"] = [{"type": "PodScheduled", "status": "True", "lastTransitionTime": rfc3339()}]
                m["bound"] = now
                self.put(pod)
                continue
            if not self.node_up:
                ready = next((c for c in st.get("conditions", []) if c["type"] == "Ready"), None)
                if st.get("phase") == "Running" and ready and (ready["status"] != "False" or ready.get("reason")):
                    ready["status"] = "False"
                    ready.pop("reason", None)
                    ready.pop("message", None)
                    self.put(pod)
                continue
            if self.opts.run_copies and any(o.get("kind") == "Job" for o in md.get("ownerReferences") or []):
                if st.get("phase") not in ("Succeeded", "Failed"):
                    self.run_copy(pod, m)
                continue
            if m.get("oom_at") and now >= m["oom_at"] and st.get("phase") == "Running":
                # rec node/s29-oom-pod.json: the container terminated OOMKilled (137), the pod
                # Failed (restartPolicy Never), Ready and ContainersReady False `PodFailed`
                m.pop("oom_at")
                cs = st["containerStatuses"][0]
                cs.update(ready=False, started=False, state={"terminated": {
                    "exitCode": 137, "reason": "OOMKilled", "startedAt": st.get("startTime"), "finishedAt": rfc3339()}})
                st["phase"] = "Failed"
                st["conditions"] = [c for c in st["conditions"] if c["type"] not in ("Ready", "ContainersReady")] + [
                    {"type": "Ready", "status": "False", "reason": "PodFailed"},
                    {"type": "ContainersReady", "status": "False", "reason": "PodFailed"}]
                self.put(pod)
                continue
            if self.opts.run_workers and not m.get("kubelet") and not any(
                    k in image for k in ("pull-fails", "config-error", "crashes", "never-ready", "oom")):
                m["kubelet"] = (image, self.node_up)
                self.run_worker(pod, [{"type": "PodReadyToStartContainers", "status": "True"},
                                      {"type": "Initialized", "status": "True"},
                                      {"type": "PodScheduled", "status": "True"}],
                                [{"type": "Ready", "status": "False", "reason": "ContainersNotReady",
                                  "message": f"containers with unready status: [{name}]"},
                                 {"type": "ContainersReady", "status": "False", "reason": "ContainersNotReady",
                                  "message": f"containers with unready status: [{name}]"}])
                continue
            if md["uid"] in self.procs:
                continue
            if now - m.get("bound", now) < self.opts.ready_after or m.get("kubelet") == (image, self.node_up):
                continue
            m["kubelet"] = (image, self.node_up)
            started = rfc3339()
            cs = {"name": name, "ready": False, "restartCount": 0, "image": image, "imageID": "", "started": False}
            conds = [{"type": "PodReadyToStartContainers", "status": "True"}, {"type": "Initialized", "status": "True"},
                     {"type": "PodScheduled", "status": "True"}]
            not_ready = [{"type": "Ready", "status": "False", "reason": "ContainersNotReady",
                          "message": f"containers with unready status: [{name}]"},
                         {"type": "ContainersReady", "status": "False", "reason": "ContainersNotReady",
                          "message": f"containers with unready status: [{name}]"}]
            if "pull-fails" in image:
                # rec node/s29-missing-image-reply.json: the first pull fails ErrImagePull with
                # containerd's text (ImagePullBackOff, "Back-off pulling image", comes after)
                st.update(phase="Pending", conditions=conds + not_ready)
                host, _, rest = image.partition("/")
                repo, _, tag = rest.rpartition(":")
                cs["state"] = {"waiting": {"reason": "ErrImagePull", "message":
                                           f'failed to pull and unpack image "{image}": failed to resolve reference '
                                           f'"{image}": failed to do request: Head "https://{host}/v2/{repo}/manifests/{tag}": '
                                           f'dial tcp: lookup {host}: i/o timeout'}}
            elif "config-error" in image:
                st.update(phase="Pending", conditions=conds + not_ready)
                cs["state"] = {"waiting": {"reason": "CreateContainerConfigError", "message": 'secret "missing" not found'}}
            elif "crashes" in image:
                st.update(phase="Running", podIP="10.42.0.9", conditions=conds + not_ready)
                cs.update(restartCount=2, state={"waiting": {"reason": "CrashLoopBackOff",
                                                             "message": "back-off 20s restarting failed container"}},
                          lastState={"terminated": {"exitCode": 3, "reason": "Error"}})
            elif "never-ready" in image:
                st.update(phase="Running", podIP="10.42.0.8", conditions=conds + not_ready)
                cs.update(started=True, state={"running": {"startedAt": started}})
                self.event(pod, "Unhealthy", 'Readiness probe failed: Get "http://10.42.0.8:9090/.well-known/agent-card.json": '
                                             'dial tcp 10.42.0.8:9090: connect: connection refused')
            else:
                st.update(phase="Running", podIP="10.42.0.7", conditions=conds + [
                    {"type": "Ready", "status": "True"}, {"type": "ContainersReady", "status": "True"}])
                cs.update(ready=True, started=True, state={"running": {"startedAt": started}})
                if "oom" in image:
                    m["oom_at"] = now + 1.0
            st["containerStatuses"] = [cs]
            st["startTime"] = started
            self.put(pod)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "standin-kube-apiserver"

    def log_message(self, fmt, *args):
        pass

    def setup(self):
        super().setup()
        # As Go's net/http does: without it a body written after its headers waits for the
        # client's delayed ACK (40 ms a call).
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self.server.state.conns_lock:
            self.server.state.conns.add(self.connection)

    def finish(self):
        try:
            super().finish()
        finally:
            with self.server.state.conns_lock:
                self.server.state.conns.discard(self.connection)

    def send_json(self, code, body, extra=None):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (extra or []):
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def send_text(self, code, text, extra=None):
        data = text.encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (extra or []):
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def user(self):
        cert = self.connection.getpeercert()
        if cert:
            for rdn in cert.get("subject", ()):
                for k, v in rdn:
                    if k == "commonName":
                        return v
        auth = self.headers.get("Authorization", "")
        token_file = self.server.opts.token_file
        if token_file and auth.startswith("Bearer "):
            with open(token_file) as f:
                if auth[len("Bearer "):].strip() == f.read().strip():
                    return "system:serviceaccount:a2a:a2a-worker-controller"
        return None

    def forbidden(self, user, verb, resource, ns, name):
        """--deny VERB refuses that verb on pods (and pods/log); `claims` every verb on
        persistentvolumeclaims; `log` refuses pods/log,
        `events` refuses events."""
        deny = self.server.state.deny
        if resource == "events":
            return "events" in deny
        if resource == "persistentvolumeclaims":
            return "claims" in deny
        if resource == "jobs":
            return "jobs" in deny
        return verb in deny or (resource == "pods/log" and "log" in deny)

    def handle_any(self, method):
        opts, state, store = self.server.opts, self.server.state, self.server.store
        url = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        user = self.user()
        if user is None:
            return self.send_json(*status(401, "Unauthorized", "Unauthorized"))
        if method == "GET" and url.path.rstrip("/") in ("/api", "/apis", "/api/v1", "/version"):
            return self.send_json(200, self.discovery(url.path.rstrip("/")))
        if method == "POST" and url.path == "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews":
            return self.access_review(user, raw)
        nm = POLICIES.match(url.path)
        if nm:
            return self.network_policy(method, user, unquote(nm.group(1)), nm.group(2) and unquote(nm.group(2)))
        sm = SECRETS.match(url.path)
        if sm:
            return self.secrets(method, user, unquote(sm.group(1)), sm.group(2) and unquote(sm.group(2)), query, raw)
        jm = JOBS.match(url.path)
        if jm:
            return self.jobs(method, user, unquote(jm.group(1)), jm.group(2) and unquote(jm.group(2)), query, raw)
        cm = CLAIMS.match(url.path)
        if cm:
            return self.claims(method, user, unquote(cm.group(1)), cm.group(2) and unquote(cm.group(2)), query, raw)
        m = PODS.match(url.path)
        if not m:
            return self.send_json(*status(404, "NotFound", "the server could not find the requested resource"))
        ns, kind, name = unquote(m.group(1)), m.group(2), m.group(3) and unquote(m.group(3))
        log = bool(m.group(4))
        if (log or kind == "events") and method != "GET":
            return self.send_json(*status(405, "MethodNotAllowed", "the server does not allow this method on the requested resource"))
        watching = method == "GET" and not name and query.get("watch") in ("1", "true")
        verb = "watch" if watching else {"GET": "get" if name else "list", "POST": "create", "DELETE": "delete",
                                         "PATCH": "patch"}.get(method, "")
        resource = "pods/log" if log else kind
        if opts.record:
            with state.record_lock:
                with open(os.path.join(opts.record, "verbs"), "a") as f:
                    f.write((verb if resource == "pods" else f"{verb} {resource}") + "\n")
                if verb == "create" and query.get("dryRun") != "All":
                    state.recorded += 1
                    with open(os.path.join(opts.record, f"pod-{state.recorded}.json"), "wb") as f:
                        f.write(raw)
        if self.forbidden(user, verb, resource, ns, name):
            target = f'{kind} "{name}"' if name else kind
            return self.send_json(*status(403, "Forbidden",
                f'{target} is forbidden: User "{user}" cannot {verb} resource "{resource}" in API group "" in the namespace "{ns}"',
                {"name": name or "", "kind": kind}))
        with state.throttle_lock:
            if state.throttle > 0:
                state.throttle -= 1
                return self.send_text(429, "Too many requests, please try again later.\n", [("Retry-After", "1")])
        if kind == "events":
            return self.list_events(ns, query)
        if watching:
            return self.watch(ns, query)
        with store.lock:
            if method == "POST" and not name:
                return self.create(ns, raw, query)
            if method == "GET" and not name:
                return self.list_pods(ns, query)
            pod = store.pods.get((ns, name))
            if pod is None:
                return self.send_json(*status(404, "NotFound", f'pods "{name}" not found', {"name": name, "kind": "pods"}))
            if log:
                return self.pod_log(pod, query)
            if method == "GET":
                return self.send_json(200, pod)
            if method == "DELETE":
                return self.delete(pod, query, raw)
            if method == "PATCH":
                return self.patch(pod, raw)
        return self.send_json(*status(405, "MethodNotAllowed", "the server does not allow this method on the requested resource"))

    def patch(self, pod, raw):
        """A merge patch of a pod's labels and annotations (what the controller patches)."""
        store = self.server.store
        if (self.headers.get("Content-Type") or "").split(";")[0].strip() != "application/merge-patch+json":
            return self.send_json(*status(415, "UnsupportedMediaType", "415: Unsupported Media Type", {}))
        try:
            patch = json.loads(raw or b"{}")
        except ValueError as e:
            return self.send_json(*status(400, "BadRequest", f"error decoding patch: {e}"))
        md, pmd = pod["metadata"], patch.get("metadata") or {}
        if pmd.get("resourceVersion") not in (None, md["resourceVersion"]):
            return self.send_json(*status(409, "Conflict",
                f'Operation cannot be fulfilled on pods "{md["name"]}": the object has been modified; please apply your changes to the latest version and try again',
                {"name": md["name"], "kind": "pods"}))
        new = copy.deepcopy(md)
        for key in ("annotations", "labels"):
            for k, v in (pmd.get(key) or {}).items():
                target = new.setdefault(key, {})
                if v is None:
                    target.pop(k, None)
                else:
                    target[k] = v
        causes = []
        if pmd.get("uid") not in (None, md["uid"]):
            causes.append(("metadata.uid", "FieldValueInvalid", f'Invalid value: "{pmd["uid"]}": field is immutable'))
        for k, v in (new.get("labels") or {}).items():
            if not isinstance(v, str) or len(v) > 63 or not re.match(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$", v):
                causes.append((f"metadata.labels", "FieldValueInvalid", f'Invalid value: "{v}": a valid label must be an empty string or consist of alphanumeric characters'))
        if causes:
            return self.send_json(*status(422, "Invalid",
                f'Pod "{md["name"]}" is invalid: ' + ", ".join(f"{f}: {m}" for f, _, m in causes),
                {"name": md["name"], "kind": "Pod", "causes": [{"reason": r, "message": m, "field": f} for f, r, m in causes]}))
        pod["metadata"] = new
        store.put(pod)
        return self.send_json(200, pod)

    def network_policy(self, method, user, ns, name):
        """networkpolicies: get by name (what the controller's startup check asks)."""
        kind, group = "networkpolicies", "networking.k8s.io"
        if method != "GET" or not name:
            return self.send_json(*status(405, "MethodNotAllowed", "the server does not allow this method on the requested resource"))
        opts, state = self.server.opts, self.server.state
        if opts.record:
            with state.record_lock:
                with open(os.path.join(opts.record, "verbs"), "a") as f:
                    f.write("get networkpolicies\n")
        if "networkpolicies" in self.server.state.deny:
            return self.send_json(*status(403, "Forbidden",
                f'{kind}.{group} "{name}" is forbidden: User "{user}" cannot get resource "{kind}" in API group "{group}" in the namespace "{ns}"',
                {"name": name, "group": group, "kind": kind}))
        store = self.server.store
        with store.lock:
            policy = store.policies.get((ns, name))
        if policy is None:
            return self.send_json(*status(404, "NotFound", f'{kind}.{group} "{name}" not found',
                                          {"name": name, "group": group, "kind": kind}))
        return self.send_json(200, policy)

    def secrets(self, method, user, ns, name, query, raw):
        """secrets (a suspended worker's record), as rec tests/recordings/k8s-real/
        s42-suspend-records.txt and secret_*.b answered:
        create 201 (`stringData` folded into base64 `data`, `type` kept), 409 `secrets "x"
        already exists`, get 200 / 404 `secrets "x" not found`, list by label, delete 200 (a
        `Status` of `Success`) / 404; `deny secrets` refuses every verb (RBAC's 403)."""
        store, state = self.server.store, self.server.state
        verb = {"GET": "get" if name else "list", "POST": "create", "DELETE": "delete"}.get(method, "")
        if self.server.opts.record:
            with state.record_lock:
                with open(os.path.join(self.server.opts.record, "verbs"), "a") as f:
                    f.write(f"{verb} secrets\n")
        if "secrets" in state.deny:
            target = f'secrets "{name}"' if name else "secrets"
            return self.send_json(*status(403, "Forbidden",
                f'{target} is forbidden: User "{user}" cannot {verb} resource "secrets" in API group "" in the namespace "{ns}"',
                {"name": name or "", "kind": "secrets"}))
        gone = lambda n: status(404, "NotFound", f'secrets "{n}" not found', {"name": n, "kind": "secrets"})
        with store.lock:
            if method == "POST" and not name:
                try:
                    secret = json.loads(raw)
                except ValueError as e:
                    return self.send_json(*status(400, "BadRequest", f"invalid JSON: {e}"))
                md = secret.setdefault("metadata", {})
                sname = md.get("name", "")
                if not SUBDOMAIN.match(sname) or len(sname) > 253:
                    msg = f'Invalid value: "{sname}": {NAME_MSG}'
                    return self.send_json(*status(422, "Invalid", f'Secret "{sname}" is invalid: metadata.name: {msg}',
                        {"name": sname, "kind": "Secret", "causes": [{"reason": "FieldValueInvalid", "message": msg, "field": "metadata.name"}]}))
                if (ns, sname) in store.secrets:
                    return self.send_json(*status(409, "AlreadyExists", f'secrets "{sname}" already exists', {"name": sname, "kind": "secrets"}))
                data = secret.setdefault("data", {})
                for k, v in (secret.pop("stringData", None) or {}).items():
                    data[k] = base64.b64encode(v.encode()).decode()
                secret.setdefault("type", "Opaque")
                md.update({"namespace": ns, "uid": str(uuid.uuid4()), "creationTimestamp": rfc3339(),
                           "resourceVersion": store.bump()})
                store.secrets[(ns, sname)] = secret
                return self.send_json(201, secret)
            if method == "GET" and not name:
                try:
                    reqs = parse_selector(query.get("labelSelector", ""))
                except SelectorError as e:
                    return self.send_json(*status(400, "BadRequest", str(e)))
                items = [x for (sns, _), x in sorted(store.secrets.items()) if sns == ns
                         and labels_match(x["metadata"].get("labels", {}), reqs)]
                return self.send_json(200, {"kind": "SecretList", "apiVersion": "v1",
                                            "metadata": {"resourceVersion": str(store.version)}, "items": items})
            secret = store.secrets.get((ns, name))
            if secret is None:
                return self.send_json(*gone(name))
            if method == "GET":
                return self.send_json(200, secret)
            if method == "DELETE":
                del store.secrets[(ns, name)]
                return self.send_json(200, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                                            "details": {"name": name, "kind": "secrets", "uid": secret["metadata"]["uid"]}})
        return self.send_json(*status(405, "MethodNotAllowed", "the server does not allow this method on the requested resource"))

    def jobs(self, method, user, ns, name, query, raw):
        """jobs (batch/v1), as rec tests/recordings/k8s-real/s56-copy-job.txt answered."""
        store, state = self.server.store, self.server.state
        verb = {"GET": "get" if name else "list", "POST": "create", "DELETE": "delete"}.get(method, "")
        if "jobs" in state.deny:
            target = f'jobs.batch "{name}"' if name else "jobs.batch"
            return self.send_json(*status(403, "Forbidden",
                f'{target} is forbidden: User "{user}" cannot {verb} resource "jobs" in API group "batch" in the namespace "{ns}"',
                {"name": name or "", "group": "batch", "kind": "jobs"}))
        gone = lambda n: status(404, "NotFound", f'jobs.batch "{n}" not found', {"name": n, "group": "batch", "kind": "jobs"})
        with store.lock:
            if method == "POST" and not name:
                try:
                    job = json.loads(raw)
                except ValueError as e:
                    return self.send_json(*status(400, "BadRequest", f"invalid JSON: {e}"))
                unknown = self.server.schema.unknown(job, {"$ref": "#/$defs/io.k8s.api.batch.v1.Job"})
                if unknown and query.get("fieldValidation") == "Strict":
                    return self.send_json(*status(400, "BadRequest",
                        'Job in version "v1" cannot be handled as a Job: strict decoding error: '
                        + ", ".join(f'unknown field "{u}"' for u in unknown)))
                md = job.setdefault("metadata", {})
                jname = md.get("name", "")
                if (ns, jname) in store.jobs:
                    return self.send_json(*status(409, "AlreadyExists", f'jobs.batch "{jname}" already exists',
                                                  {"name": jname, "group": "batch", "kind": "jobs"}))
                uid = str(uuid.uuid4())
                md.update({"namespace": ns, "uid": uid, "generation": 1, "creationTimestamp": rfc3339()})
                spec = job.setdefault("spec", {})
                job_labels = {"batch.kubernetes.io/controller-uid": uid, "batch.kubernetes.io/job-name": jname,
                              "controller-uid": uid, "job-name": jname}
                for k, v in (("parallelism", 1), ("completions", 1), ("backoffLimit", 6),
                             ("selector", {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}),
                             ("manualSelector", False), ("completionMode", "NonIndexed"), ("suspend", False),
                             ("podReplacementPolicy", "TerminatingOrFailed")):
                    spec.setdefault(k, v)
                tmpl = spec.setdefault("template", {})
                tmpl.setdefault("metadata", {}).setdefault("labels", {}).update(job_labels)
                pod_spec = tmpl.setdefault("spec", {})
                pod_spec.setdefault("terminationGracePeriodSeconds", 30)
                pod_spec.setdefault("dnsPolicy", "ClusterFirst")
                pod_spec.setdefault("schedulerName", "default-scheduler")
                for c in pod_spec.get("containers") or []:
                    c.setdefault("terminationMessagePath", "/dev/termination-log")
                    c.setdefault("terminationMessagePolicy", "File")
                    c.setdefault("imagePullPolicy", "IfNotPresent")
                job["status"] = {}
                warnings = []
                if state.psa == "restricted":
                    found = restricted_violations({"spec": pod_spec})
                    if found:
                        warnings.append(("Warning", '299 - "would violate PodSecurity \\"restricted:latest\\": '
                                         + ", ".join(found).replace('"', '\\"') + '"'))
                md["resourceVersion"] = store.bump()
                store.jobs[(ns, jname)] = job
                return self.send_json(201, job, warnings)
            if method == "GET" and not name:
                try:
                    reqs = parse_selector(query.get("labelSelector", ""))
                except SelectorError as e:
                    return self.send_json(*status(400, "BadRequest", str(e)))
                items = [j for (jns, _), j in sorted(store.jobs.items()) if jns == ns
                         and labels_match(j["metadata"].get("labels", {}), reqs)]
                return self.send_json(200, {"kind": "JobList", "apiVersion": "batch/v1",
                                            "metadata": {"resourceVersion": str(store.version)}, "items": items})
            job = store.jobs.get((ns, name))
            if job is None:
                return self.send_json(*gone(name))
            if method == "GET":
                return self.send_json(200, job)
            if method == "DELETE":
                policy = query.get("propagationPolicy")
                if raw:
                    policy = (json.loads(raw) or {}).get("propagationPolicy", policy)
                answer = copy.deepcopy(job)
                store.delete_job_pods(ns, name, orphan=policy not in ("Background", "Foreground"))
                if policy in ("Background", "Foreground"):
                    return self.send_json(200, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                                                "details": {"name": name, "group": "batch", "kind": "jobs",
                                                            "uid": job["metadata"]["uid"]}})
                answer["metadata"].update(deletionTimestamp=rfc3339(), deletionGracePeriodSeconds=0,
                                          finalizers=["orphan"], generation=answer["metadata"].get("generation", 1) + 1)
                return self.send_json(200, answer)
        return self.send_json(*status(405, "MethodNotAllowed", "the server does not allow this method on the requested resource"))

    def claims(self, method, user, ns, name, query, raw):
        """persistentvolumeclaims, as rec s30-workspace-claims.txt answered."""
        store, state = self.server.store, self.server.state
        verb = {"GET": "get" if name else "list", "POST": "create", "DELETE": "delete", "PATCH": "patch"}.get(method, "")
        if "claims" in state.deny:
            target = f'persistentvolumeclaims "{name}"' if name else "persistentvolumeclaims"
            return self.send_json(*status(403, "Forbidden",
                f'{target} is forbidden: User "{user}" cannot {verb} resource "persistentvolumeclaims" in API group "" in the namespace "{ns}"',
                {"name": name or "", "kind": "persistentvolumeclaims"}))
        gone = lambda n: status(404, "NotFound", f'persistentvolumeclaims "{n}" not found', {"name": n, "kind": "persistentvolumeclaims"})
        with store.lock:
            if method == "POST" and not name:
                try:
                    claim = json.loads(raw)
                except ValueError as e:
                    return self.send_json(*status(400, "BadRequest", f"invalid JSON: {e}"))
                unknown = self.server.schema.unknown(claim, {"$ref": "#/$defs/io.k8s.api.core.v1.PersistentVolumeClaim"})
                if unknown and query.get("fieldValidation") == "Strict":
                    return self.send_json(*status(400, "BadRequest",
                        'PersistentVolumeClaim in version "v1" cannot be handled as a PersistentVolumeClaim: strict decoding error: '
                        + ", ".join(f'unknown field "{u}"' for u in unknown)))
                md = claim.setdefault("metadata", {})
                cname = md.get("name", "")
                spec = claim.setdefault("spec", {})
                causes = []
                if not SUBDOMAIN.match(cname) or len(cname) > 253:
                    causes.append(("metadata.name", "FieldValueInvalid", f'Invalid value: "{cname}": {NAME_MSG}'))
                if not spec.get("accessModes"):
                    causes.append(("spec.accessModes", "FieldValueRequired", "Required value: at least 1 access mode is required"))
                if not ((spec.get("resources") or {}).get("requests") or {}).get("storage"):
                    causes.append(("spec.resources[storage]", "FieldValueRequired", "Required value"))
                if causes:
                    return self.send_json(*status(422, "Invalid",
                        f'PersistentVolumeClaim "{cname}" is invalid: ' + ", ".join(f"{f}: {m}" for f, _, m in causes),
                        {"name": cname, "kind": "PersistentVolumeClaim",
                         "causes": [{"reason": r, "message": m, "field": f} for f, r, m in causes]}))
                old = store.claims.get((ns, cname))
                if old is not None:
                    msg = f'persistentvolumeclaims "{cname}" already exists'
                    if old["metadata"].get("deletionTimestamp"):
                        msg = "object is being deleted: " + msg
                    return self.send_json(*status(409, "AlreadyExists", msg, {"name": cname, "kind": "persistentvolumeclaims"}))
                md.update({"namespace": ns, "uid": str(uuid.uuid4()), "creationTimestamp": rfc3339(),
                           "finalizers": ["kubernetes.io/pvc-protection"]})
                spec.setdefault("volumeMode", "Filesystem")
                source = spec.get("dataSource")
                if source is not None:
                    # As rec tests/recordings/k8s-real/claim_clone_*.b: a claim (or a snapshot)
                    # is kept and mirrored into dataSourceRef; any other kind is dropped.
                    group = source.get("apiGroup") or None
                    if (source.get("kind"), group) in (("PersistentVolumeClaim", None),
                                                       ("VolumeSnapshot", "snapshot.storage.k8s.io")):
                        kept = {"apiGroup": group, "kind": source.get("kind"), "name": source.get("name")}
                        spec["dataSource"] = kept
                        spec.setdefault("dataSourceRef", dict(kept))
                    else:
                        del spec["dataSource"]
                claim["status"] = {"phase": "Pending"}
                if query.get("dryRun") == "All":
                    md["resourceVersion"] = ""
                    return self.send_json(201, claim)
                md["resourceVersion"] = store.bump()
                store.claims[(ns, cname)] = claim
                return self.send_json(201, claim)
            if method == "GET" and not name:
                try:
                    reqs = parse_selector(query.get("labelSelector", ""))
                except SelectorError as e:
                    return self.send_json(*status(400, "BadRequest", str(e)))
                items = [c for (cns, _), c in sorted(store.claims.items()) if cns == ns
                         and labels_match(c["metadata"].get("labels", {}), reqs)]
                return self.send_json(200, {"kind": "PersistentVolumeClaimList", "apiVersion": "v1",
                                            "metadata": {"resourceVersion": str(store.version)}, "items": items})
            claim = store.claims.get((ns, name))
            if claim is None:
                return self.send_json(*gone(name))
            if method == "GET":
                return self.send_json(200, claim)
            if method == "PATCH":
                if (self.headers.get("Content-Type") or "").split(";")[0].strip() != "application/merge-patch+json":
                    return self.send_json(*status(415, "UnsupportedMediaType", "415: Unsupported Media Type", {}))
                patch = json.loads(raw or b"{}")
                for key in ("annotations", "labels"):
                    for k, v in ((patch.get("metadata") or {}).get(key) or {}).items():
                        target = claim["metadata"].setdefault(key, {})
                        if v is None:
                            target.pop(k, None)
                        else:
                            target[k] = v
                claim["metadata"]["resourceVersion"] = store.bump()
                return self.send_json(200, claim)
            if method == "DELETE":
                md = claim["metadata"]
                md.setdefault("deletionTimestamp", rfc3339())
                md["deletionGracePeriodSeconds"] = 0
                md["resourceVersion"] = store.bump()
                answer = copy.deepcopy(claim)
                if not store.claim_users(ns, name):
                    del store.claims[(ns, name)]
                return self.send_json(200, answer)
        return self.send_json(*status(405, "MethodNotAllowed", "the server does not allow this method on the requested resource"))

    def create(self, ns, raw, query):
        store, state = self.server.store, self.server.state
        try:
            pod = json.loads(raw)
        except ValueError as e:
            return self.send_json(*status(400, "BadRequest", f"invalid JSON: {e}"))
        validation = query.get("fieldValidation", "Warn")
        unknown = self.server.schema.unknown(pod)
        warnings = []
        if unknown and validation == "Strict":
            return self.send_json(*status(400, "BadRequest",
                'Pod in version "v1" cannot be handled as a Pod: strict decoding error: '
                + ", ".join(f'unknown field "{u}"' for u in unknown)))
        if validation == "Warn":
            warnings = [("Warning", '299 - "unknown field \\"%s\\""' % u) for u in unknown]
        for label in (pod.get("spec", {}).get("nodeSelector") or {}):
            if label.startswith("beta.kubernetes.io/"):
                new_label = "kubernetes.io/" + label.split("/", 1)[1]
                warnings.append(("Warning", f'299 - "spec.nodeSelector[{label}]: deprecated since v1.14; use \\"{new_label}\\" instead"'))
        md = pod.setdefault("metadata", {})
        pname = md.get("name", "")
        causes = []
        if not SUBDOMAIN.match(pname) or len(pname) > 253:
            causes.append(("metadata.name", "FieldValueInvalid", f'Invalid value: "{pname}": {NAME_MSG}'))
        for i, c in enumerate(pod.get("spec", {}).get("containers") or []):
            if not c.get("image"):
                causes.append((f"spec.containers[{i}].image", "FieldValueRequired", "Required value"))
        gates = pod.get("spec", {}).get("schedulingGates") or []
        for i, g in enumerate(gates):
            if not re.match(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$", g.get("name", "")):
                causes.append((f"spec.schedulingGates[{i}]", "FieldValueInvalid", f'Invalid value: "{g.get("name", "")}": name part must consist of alphanumeric characters'))
        if gates and pod.get("spec", {}).get("nodeName"):
            causes.append(("spec.nodeName", "FieldValueForbidden", "Forbidden: cannot be set until all schedulingGates have been cleared"))
        if causes:
            return self.send_json(*status(422, "Invalid",
                f'Pod "{pname}" is invalid: ' + ", ".join(f"{f}: {m}" for f, _, m in causes),
                {"name": pname, "kind": "Pod", "causes": [{"reason": r, "message": m, "field": f} for f, r, m in causes]}),
                warnings)
        old = store.pods.get((ns, pname))
        if old is not None:
            msg = f'pods "{pname}" already exists'
            if old["metadata"].get("deletionTimestamp"):
                msg = "object is being deleted: " + msg
            return self.send_json(*status(409, "AlreadyExists", msg, {"name": pname, "kind": "pods"}), warnings)
        sa = pod.get("spec", {}).get("serviceAccountName", "default")
        if sa != "default":
            return self.send_json(*status(403, "Forbidden",
                f'pods "{pname}" is forbidden: error looking up service account {ns}/{sa}: serviceaccount "{sa}" not found',
                {"name": pname, "kind": "pods"}), warnings)
        rc = pod.get("spec", {}).get("runtimeClassName")
        if rc is not None and rc not in store.runtime_classes:
            return self.send_json(*status(403, "Forbidden",
                f'pods "{pname}" is forbidden: pod rejected: RuntimeClass "{rc}" not found',
                {"name": pname, "kind": "pods"}), warnings)
        if state.psa == "restricted":
            violations = restricted_violations(pod)
            if violations:
                return self.send_json(*status(403, "Forbidden",
                    f'pods "{pname}" is forbidden: violates PodSecurity "restricted:latest": ' + ", ".join(violations),
                    {"name": pname, "kind": "pods"}), warnings)
        if state.quota_pods is not None:
            used = store.quota_pods_used(ns)
            if used + 1 > state.quota_pods:
                return self.send_json(*status(403, "Forbidden",
                    f'pods "{pname}" is forbidden: exceeded quota: q-pods, requested: pods=1, used: pods={used}, limited: pods={state.quota_pods}',
                    {"name": pname, "kind": "pods"}), warnings)
        if state.quota_memory:
            missing = [c.get("name") for c in pod["spec"].get("containers", [])
                       if "memory" not in ((c.get("resources") or {}).get("limits") or {})]
            if missing:
                return self.send_json(*status(403, "Forbidden",
                    f'pods "{pname}" is forbidden: failed quota: q-mem: must specify limits.memory for: {",".join(missing)}',
                    {"name": pname, "kind": "pods"}), warnings)
        md.update({"namespace": ns, "uid": str(uuid.uuid4()), "generation": 1, "creationTimestamp": rfc3339()})
        spec = pod.setdefault("spec", {})
        spec.setdefault("terminationGracePeriodSeconds", 30)
        spec.setdefault("serviceAccountName", "default")
        spec.setdefault("restartPolicy", "Always")
        pod["status"] = {"phase": "Pending", "qosClass": "BestEffort"}
        if gates:
            pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated",
                                            "message": "Scheduling is blocked due to non-empty scheduling gates",
                                            "lastTransitionTime": rfc3339()}]
        if query.get("dryRun") == "All":
            md["resourceVersion"] = ""
            return self.send_json(201, pod, warnings)
        store.put(pod, "ADDED")
        return self.send_json(201, pod, warnings)

    def list_pods(self, ns, query):
        store = self.server.store
        try:
            reqs, fields = pod_selectors(query)
        except SelectorError as e:
            return self.send_json(*status(400, "BadRequest", str(e)))
        items = [p for (pns, n), p in sorted(store.pods.items()) if pns == ns
                 and labels_match(p["metadata"].get("labels", {}), reqs) and fields_match(p, fields)]
        meta = {"resourceVersion": str(store.version)}
        start = 0
        if query.get("continue"):
            try:
                token = json.loads(base64.urlsafe_b64decode(query["continue"] + "=="))
                start = next((i for i, p in enumerate(items) if p["metadata"]["name"] > token["start"]), len(items))
            except (ValueError, KeyError):
                return self.send_json(*status(400, "BadRequest", "continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)"))
        items = items[start:]
        limit = int(query.get("limit") or 0)
        if limit and len(items) > limit:
            last = items[limit - 1]["metadata"]["name"]
            meta["continue"] = base64.urlsafe_b64encode(json.dumps(
                {"v": "meta.k8s.io/v1", "rv": store.version, "start": last}).encode()).decode().rstrip("=")
            meta["remainingItemCount"] = len(items) - limit
            items = items[:limit]
        return self.send_json(200, {"kind": "PodList", "apiVersion": "v1", "metadata": meta, "items": items})

    def delete(self, pod, query, raw):
        store = self.server.store
        options = json.loads(raw) if raw else {}
        md = pod["metadata"]
        want = (options.get("preconditions") or {}).get("uid")
        if want and want != md["uid"]:
            return self.send_json(*status(409, "Conflict",
                f'Operation cannot be fulfilled on Pod "{md["name"]}": Precondition failed: UID in precondition: {want}, UID in object meta: {md["uid"]}',
                {"name": md["name"], "kind": "Pod"}))
        want_rv = (options.get("preconditions") or {}).get("resourceVersion")
        if want_rv and want_rv != md["resourceVersion"]:
            return self.send_json(*status(409, "Conflict",
                f'Operation cannot be fulfilled on Pod "{md["name"]}": the ResourceVersion in the precondition ({want_rv}) does not match the ResourceVersion in record ({md["resourceVersion"]}). The object might have been modified',
                {"name": md["name"], "kind": "Pod"}))
        grace = query.get("gracePeriodSeconds", options.get("gracePeriodSeconds"))
        grace = int(grace) if grace is not None else pod["spec"].get("terminationGracePeriodSeconds", 30)
        finished = pod["status"].get("phase") in ("Failed", "Succeeded")
        if not pod["spec"].get("nodeName") or finished:
            grace = 0
        if md.get("deletionTimestamp"):
            current = md.get("deletionGracePeriodSeconds", 0)
            if current and grace >= current:
                return self.send_json(200, pod)  # only a shorter grace period changes anything
        if grace > 0:
            store.begin_deletion(pod, grace)
            return self.send_json(200, pod)
        md.setdefault("deletionTimestamp", rfc3339())
        md["deletionGracePeriodSeconds"] = 0
        store.remove(pod)
        return self.send_json(200, pod)

    def pod_log(self, pod, query):
        """What the pod's container printed: --log-lines lines `<pod> line <i>`."""
        name = pod["metadata"]["name"]
        containers = [c.get("name") for c in pod.get("spec", {}).get("containers", [])]
        container = query.get("container") or (containers[0] if len(containers) == 1 else None)
        if container not in containers:
            return self.send_json(*status(400, "BadRequest", f"container {container} is not valid for pod {name}"))
        if not pod["spec"].get("nodeName"):
            self.send_response(204)
            self.end_headers()
            return None
        said = self.server.store.outputs.get(pod["metadata"]["uid"])
        if said is not None:
            lines = said.splitlines(keepends=True)
            n = int(query.get("tailLines", len(lines)))
            return self.send_text(200, "".join(lines[-n:] if n > 0 else []))
        if not self.server.store.node_up:
            tail = f"?tailLines={query['tailLines']}" if "tailLines" in query else ""
            return self.send_json(*status(500, "InternalError",
                f'Get "https://127.0.0.1:10250/containerLogs/{pod["metadata"]["namespace"]}/{name}/{container}{tail}": '
                "dial tcp 127.0.0.1:10250: connect: connection refused"))
        lines = [f"{name} line {i}\n" for i in range(1, self.server.opts.log_lines + 1)]
        if "tailLines" in query:
            n = int(query["tailLines"])
            lines = lines[-n:] if n > 0 else []
        return self.send_text(200, "".join(lines))

    def list_events(self, ns, query):
        try:
            fields = parse_fields(query.get("fieldSelector", ""), EVENT_FIELDS)
        except SelectorError as e:
            return self.send_json(*status(400, "BadRequest", str(e)))
        with self.server.store.lock:
            items = [e for e in self.server.store.events if e["metadata"]["namespace"] == ns and fields_match(e, fields)]
        return self.send_json(200, {"kind": "EventList", "apiVersion": "v1", "metadata": {}, "items": items})

    def access_review(self, user, raw):
        review = json.loads(raw or b"{}")
        attrs = (review.get("spec") or {}).get("resourceAttributes") or {}
        resource = attrs.get("resource", "") + ("/" + attrs["subresource"] if attrs.get("subresource") else "")
        denied = self.forbidden(user, attrs.get("verb", ""), resource, attrs.get("namespace", ""), "")
        review["status"] = {"allowed": not denied}
        if not denied:
            review["status"]["reason"] = f'RBAC: allowed by RoleBinding "a2a-worker-controller/{attrs.get("namespace", "")}" of Role "a2a-worker-controller" to ServiceAccount "a2a-worker-controller/a2a"'
        return self.send_json(201, review)

    def watch(self, ns, query):
        store = self.server.store
        try:
            reqs, fields = pod_selectors(query)
        except SelectorError as e:
            return self.send_json(*status(400, "BadRequest", str(e)))
        timeout = min(float(query.get("timeoutSeconds") or 1800), 1800)
        bookmarks = query.get("allowWatchBookmarks") in ("1", "true")
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def send(kind, obj):
            line = json.dumps({"type": kind, "object": obj}).encode() + b"\n"
            self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
            self.wfile.flush()

        def ours(pod):
            return pod["metadata"]["namespace"] == ns and labels_match(pod["metadata"].get("labels", {}), reqs) \
                and fields_match(pod, fields)

        deadline = time.monotonic() + timeout
        try:
            with store.lock:
                rv = query.get("resourceVersion", "")
                # Compacted since the client listed (`expire`): its version is too old for this
                # watch, not for a list's newer one.
                expired = rv not in ("", "0") and self.server.state.expire > 0
                if expired:
                    self.server.state.expire -= 1
                if rv in ("", "0"):
                    pending = [("ADDED", copy.deepcopy(p)) for p in sorted(store.pods.values(),
                               key=lambda p: p["metadata"]["name"]) if ours(p)]
                    since = store.version
                elif expired or int(rv) < store.oldest:
                    oldest = max(store.oldest, int(rv) + 1) if expired else store.oldest
                    pending = [("ERROR", {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                          "message": f"too old resource version: {rv} ({oldest})",
                                          "reason": "Expired", "code": 410})]
                    since = None
                else:
                    since = int(rv)
                    pending = []
            last_bookmark = time.monotonic()
            while since is not None or pending:
                for kind, obj in pending:
                    send(kind, obj)
                pending = []
                if since is None or time.monotonic() >= deadline or self.server.state.cut:
                    break
                with store.lock:
                    store.lock.wait(0.1)
                    pending = [(k, p) for v, k, p in store.history if v > since and ours(p)]
                    since = store.version
                if bookmarks and time.monotonic() - last_bookmark >= 1:
                    last_bookmark = time.monotonic()
                    pending.append(("BOOKMARK", {"kind": "Pod", "apiVersion": "v1",
                                                 "metadata": {"resourceVersion": str(since)}}))
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, OSError, ssl.SSLError):
            pass
        self.close_connection = True

    def discovery(self, path):
        port = self.server.server_address[1]
        if path == "/api":
            return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [
                {"clientCIDR": "0.0.0.0/0", "serverAddress": f"127.0.0.1:{port}"}]}
        if path == "/apis":
            return {"kind": "APIGroupList", "apiVersion": "v1", "groups": []}
        if path == "/version":
            return {"major": "1", "minor": "36", "gitVersion": "v1.36.2+standin", "platform": "linux/amd64"}
        return {"kind": "APIResourceList", "groupVersion": "v1", "resources": [
            {"name": "pods", "singularName": "pod", "namespaced": True, "kind": "Pod",
             "verbs": ["create", "delete", "get", "list", "patch", "watch"], "shortNames": ["po"], "categories": ["all"]},
            {"name": "events", "singularName": "event", "namespaced": True, "kind": "Event",
             "verbs": ["list"], "shortNames": ["ev"]},
            {"name": "persistentvolumeclaims", "singularName": "persistentvolumeclaim", "namespaced": True,
             "kind": "PersistentVolumeClaim", "verbs": ["create", "delete", "get", "list", "patch"], "shortNames": ["pvc"]},
            {"name": "secrets", "singularName": "secret", "namespaced": True, "kind": "Secret",
             "verbs": ["create", "delete", "get", "list"]}]}

    def do_GET(self):
        self.handle_any("GET")

    def do_POST(self):
        self.handle_any("POST")

    def do_DELETE(self):
        self.handle_any("DELETE")

    def do_PATCH(self):
        self.handle_any("PATCH")


class State:
    """What the stdin commands change."""

    def __init__(self, opts):
        self.deny = {v for v in opts.deny.split(",") if v}
        self.throttle = 1 if opts.throttle_once else 0
        self.throttle_lock = threading.Lock()
        self.record_lock = threading.Lock()
        self.recorded = 0
        self.psa = opts.psa
        self.quota_pods = None
        self.quota_memory = False
        self.conns = set()
        self.conns_lock = threading.Lock()
        self.cut = False
        self.expire = 0


def serve(opts, port, store, state, schema):
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    server.daemon_threads = True
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(opts.cert, opts.key)
    ctx.load_verify_locations(opts.ca)
    ctx.verify_mode = ssl.CERT_OPTIONAL
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    server.opts, server.store, server.state, server.schema = opts, store, state, schema
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def outage(server, seconds, opts, store, state, schema, holder):
    """An API server restart: the port refuses connections, open streams are cut."""
    port = server.server_address[1]
    state.cut = True
    server.shutdown()
    server.server_close()
    with state.conns_lock:
        for c in list(state.conns):
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def back():
        time.sleep(seconds)
        state.cut = False
        holder[0] = serve(opts, port, store, state, schema)

    threading.Thread(target=back, daemon=True).start()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--cert", required=True)
    p.add_argument("--key", required=True)
    p.add_argument("--ca", required=True)
    p.add_argument("--token-file")
    p.add_argument("--deny", default="")
    p.add_argument("--ready-after", type=float, default=0.5)
    p.add_argument("--confirm-after", type=float, default=0.3)
    p.add_argument("--schedulable-after", type=float)
    p.add_argument("--throttle-once", action="store_true")
    p.add_argument("--psa", default="privileged")
    p.add_argument("--record")
    p.add_argument("--log-lines", type=int, default=0)
    p.add_argument("--run-workers")
    p.add_argument("--run-copies")
    p.add_argument("--volumes")
    opts = p.parse_args()
    store, state, schema = Store(opts), State(opts), Schema()
    store.state = state
    holder = [serve(opts, 0, store, state, schema)]

    def ticker():
        while True:
            with store.lock:
                store.tick()
            time.sleep(0.05)

    threading.Thread(target=ticker, daemon=True).start()
    print(f"listening https://127.0.0.1:{holder[0].server_address[1]}", flush=True)
    for line in sys.stdin:
        cmd, _, arg = line.strip().partition(" ")
        with store.lock:
            if cmd == "node-down":
                store.node_up = False
            elif cmd == "node-up":
                store.node_up = True
                for m in store.meta.values():
                    m.pop("kubelet", None)
            elif cmd == "schedulable":
                store.schedulable = True
            elif cmd == "claims":
                store.provisioner = arg != "no-provisioner"
            elif cmd == "expire":
                state.expire = int(arg)
            elif cmd == "throttle":
                state.throttle = int(arg)
            elif cmd == "deny":
                state.deny = {v for v in arg.split(",") if v and v != "-"}
            elif cmd == "psa":
                state.psa = arg
            elif cmd in ("fence", "fence-ingress"):
                types = ["Egress"] if cmd == "fence" else ["Ingress"]
                name, _, ns = arg.partition(" ")
                ns = ns or "a2a"
                store.policies[(ns, name)] = {
                    "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
                    "metadata": {"name": name, "namespace": ns, "uid": str(uuid.uuid4()),
                                 "resourceVersion": str(store.bump()), "creationTimestamp": rfc3339()},
                    "spec": {"podSelector": {"matchLabels": {"a2a-worker-controller/egress": "fenced"}},
                             "policyTypes": types}}
            elif cmd == "hold-copies":
                store.hold_copies = arg == "on"
            elif cmd == "runtimeclass":
                store.runtime_classes.add(arg)
            elif cmd == "quota":
                if arg.startswith("pods="):
                    state.quota_pods = int(arg[5:])
                elif arg == "memory":
                    state.quota_memory = True
                else:
                    state.quota_pods, state.quota_memory = None, False
        if cmd == "outage":
            outage(holder[0], float(arg), opts, store, state, schema, holder)
        print("ok", flush=True)
    holder[0].shutdown()


if __name__ == "__main__":
    main()
