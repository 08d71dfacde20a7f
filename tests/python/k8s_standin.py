"""A stand-in Kubernetes API server for the controller's tests (no real API server can run on
these machines). It follows the Kubernetes API reference for the calls the controller makes,
and only those:

- HTTPS with a server certificate signed by a CA made in the test; clients authenticate with a
  client certificate signed by that CA (the user is its CN) or a bearer token equal to the
  current contents of --token-file (re-read on every request, so the test can rotate it).
  Otherwise 401 with a `Status` whose reason is `Unauthorized`.
- Core v1 pods, namespaced: `POST /api/v1/namespaces/{ns}/pods` → 201 with the stored pod;
  409 `AlreadyExists` on a name collision; 422 `Invalid` when the name is not a DNS-1123
  label. `GET .../pods?labelSelector=&fieldSelector=` → `PodList` (label selectors `k=v`, `k!=v`,
  `k`, `!k`, comma = and; field selectors `metadata.name=` and `metadata.namespace=`). `GET .../pods/{name}` → 200 or 404 `NotFound`. `DELETE .../pods/{name}` → 200 with
  the pod, or 404 `NotFound`.
- Watch: `GET .../pods?watch=1&fieldSelector=...&labelSelector=...&timeoutSeconds=N` streams
  one JSON event per line, chunked: `ADDED` for each matching pod at the start (a watch without
  a resourceVersion starts from the current state), then `MODIFIED` whenever a pod's status
  changes and `DELETED` when it goes; the stream ends after timeoutSeconds (default 30).
- "RBAC": verbs given with --deny are answered 403 `Forbidden`, with the API server's message
  ('pods "x" is forbidden: User "u" cannot delete resource "pods" in API group "" in the
  namespace "ns"').
- Pods move Pending → Running with the `Ready` condition True after --ready-after seconds; an
  image whose name contains `pull-fails` stays Pending with the container waiting in
  `ImagePullBackOff`; one containing `crashes` runs, then shows `CrashLoopBackOff` with the
  last termination's exit code; `unschedulable` stays Pending with `PodScheduled` False,
  reason `Unschedulable`; `config-error` stays Pending waiting in `CreateContainerConfigError`.
- --throttle-once answers the first pod request 429 `TooManyRequests` with `Retry-After: 1`.
- Discovery, as kubectl reads it before any call (the legacy, non-aggregated form): `/api`
  (APIVersions), `/api/v1` (APIResourceList with pods), `/apis` (an empty APIGroupList), and
  `/version`.
- Logs: `GET .../pods/{name}/log?container=&tailLines=` → text/plain: --log-lines lines
  `<pod> line <i>`; the last tailLines of them; 400 `BadRequest` when `container` names none of
  the pod's containers (or is missing with several); 404 for a missing pod. RBAC verb `get` on
  `pods/log` (--deny log refuses it).
- --record DIR appends the verb of every authorized pod request to DIR/verbs and writes every
  pod body sent to create as DIR/pod-N.json, so the tests can check the RBAC Role against the
  calls really made and validate every body against the official schemas.

Usage: k8s_standin.py --cert F --key F --ca F [--token-file F] [--deny VERB,...] [--ready-after S]
                  [--throttle-once] [--record DIR] [--log-lines N]
Prints `listening https://127.0.0.1:PORT` once it serves; stops on SIGTERM or stdin closing.
"""

import argparse
import json
import os
import re
import ssl
import sys
import threading
import time
import uuid
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
PODS = re.compile(r"^/api/v1/namespaces/([^/]+)/pods(?:/([^/]+)(/log)?)?$")


def now_rfc3339():
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def status(code, reason, message, details=None):
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}
    if details:
        body["details"] = details
    return code, body


def fields_match(pod, selector):
    for term in filter(None, (t.strip() for t in selector.split(","))):
        k, _, v = term.partition("=")
        v = v.lstrip("=")
        negate = k.endswith("!")
        k = k.rstrip("!")
        actual = {"metadata.name": pod["metadata"].get("name"),
                  "metadata.namespace": pod["metadata"].get("namespace")}.get(k)
        if (actual == v) == negate:
            return False
    return True


def matches(labels, selector):
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            k, v = term.split("!=", 1)
            if labels.get(k) == v:
                return False
        elif "=" in term:
            k, v = term.split("=", 1)
            k = k.rstrip("=")
            if labels.get(k) != v:
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


class Store:
    def __init__(self, ready_after):
        self.lock = threading.Lock()
        self.pods = {}  # (ns, name) -> (pod, created monotonic)
        self.ready_after = ready_after
        self.version = 1

    def view(self, pod, created):
        """The pod with its status as of now."""
        pod = json.loads(json.dumps(pod))
        age = time.monotonic() - created
        image = pod["spec"]["containers"][0].get("image", "")
        name = pod["spec"]["containers"][0].get("name", "worker")
        st = {"phase": "Pending", "conditions": [], "startTime": pod["metadata"]["creationTimestamp"]}
        if "pull-fails" in image:
            st["containerStatuses"] = [{"name": name, "ready": False, "restartCount": 0, "image": image,
                                        "imageID": "", "state": {"waiting": {
                                            "reason": "ImagePullBackOff",
                                            "message": f'Back-off pulling image "{image}"'}}}]
        elif "unschedulable" in image:
            st["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                 "message": "0/1 nodes are available: 1 Insufficient memory."}]
        elif "config-error" in image:
            st["containerStatuses"] = [{"name": name, "ready": False, "restartCount": 0, "image": image,
                                        "imageID": "", "state": {"waiting": {
                                            "reason": "CreateContainerConfigError",
                                            "message": 'secret "missing" not found'}}}]
        elif "crashes" in image and age >= self.ready_after:
            st["phase"] = "Running"
            st["podIP"] = "10.42.0.9"
            st["conditions"] = [{"type": "Ready", "status": "False", "reason": "ContainersNotReady"}]
            st["containerStatuses"] = [{"name": name, "ready": False, "restartCount": 2, "image": image,
                                        "imageID": "", "state": {"waiting": {
                                            "reason": "CrashLoopBackOff",
                                            "message": "back-off 20s restarting failed container"}},
                                        "lastState": {"terminated": {"exitCode": 3, "reason": "Error"}}}]
        elif age >= self.ready_after:
            st["phase"] = "Running"
            st["podIP"] = "10.42.0.7"
            st["conditions"] = [{"type": "Ready", "status": "True"}]
            st["containerStatuses"] = [{"name": name, "ready": True, "restartCount": 0, "image": image,
                                        "imageID": "", "state": {"running": {"startedAt": pod["metadata"]["creationTimestamp"]}}}]
        pod["status"] = st
        return pod


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "standin-kube-apiserver"

    def log_message(self, fmt, *args):
        pass

    def send_json(self, code, body, extra=None):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (extra or {}).items():
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

    def handle_any(self, method):
        opts, store = self.server.opts, self.server.store
        url = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(url.query).items()}
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        user = self.user()
        if user is None:
            return self.send_json(*status(401, "Unauthorized", "Unauthorized"))
        if method == "GET" and url.path in ("/api", "/api/", "/apis", "/apis/", "/api/v1", "/api/v1/", "/version"):
            return self.send_json(200, self.discovery(url.path.rstrip("/")))
        m = PODS.match(url.path)
        if not m:
            return self.send_json(*status(404, "NotFound", "the server could not find the requested resource"))
        ns, name = unquote(m.group(1)), m.group(2) and unquote(m.group(2))
        log = bool(m.group(3))
        if log and method != "GET":
            return self.send_json(*status(405, "MethodNotAllowed", "the server does not allow this method"))
        watching = method == "GET" and not name and query.get("watch") in ("1", "true")
        verb = "watch" if watching else {"GET": "get" if name else "list", "POST": "create", "DELETE": "delete"}[method]
        resource = "pods/log" if log else "pods"
        if opts.record:
            with self.server.record_lock:
                with open(os.path.join(opts.record, "verbs"), "a") as f:
                    f.write((f"{verb} {resource}" if log else verb) + "\n")
                if verb == "create":
                    self.server.recorded += 1
                    with open(os.path.join(opts.record, f"pod-{self.server.recorded}.json"), "wb") as f:
                        f.write(raw)
        if verb in opts.deny or (log and "log" in opts.deny):
            target = f'pods "{name}"' if name else "pods"
            return self.send_json(*status(403, "Forbidden",
                f'{target} is forbidden: User "{user}" cannot {verb} resource "{resource}" in API group "" in the namespace "{ns}"',
                {"name": name or "", "kind": "pods"}))
        with self.server.throttle_lock:
            if opts.throttle_once and not self.server.throttled:
                self.server.throttled = True
                code, body = status(429, "TooManyRequests", "Too many requests, please try again later.")
                return self.send_json(code, body, {"Retry-After": "1"})
        if watching:
            return self.watch(ns, query)
        with store.lock:
            if method == "POST" and not name:
                try:
                    pod = json.loads(raw)
                except ValueError as e:
                    return self.send_json(*status(400, "BadRequest", f"invalid JSON: {e}"))
                pname = pod.get("metadata", {}).get("name", "")
                if not DNS1123.match(pname) or len(pname) > 63:
                    return self.send_json(*status(422, "Invalid",
                        f'Pod "{pname}" is invalid: metadata.name: Invalid value: "{pname}": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or \'-\'',
                        {"name": pname, "kind": "Pod"}))
                if (ns, pname) in store.pods:
                    return self.send_json(*status(409, "AlreadyExists", f'pods "{pname}" already exists',
                                                  {"name": pname, "kind": "pods"}))
                store.version += 1
                md = pod.setdefault("metadata", {})
                md.update({"namespace": ns, "uid": str(uuid.uuid4()), "resourceVersion": str(store.version),
                           "creationTimestamp": now_rfc3339()})
                store.pods[(ns, pname)] = (pod, time.monotonic())
                return self.send_json(201, store.view(pod, time.monotonic()))
            if method == "GET" and not name:
                selector = query.get("labelSelector", "")
                fields = query.get("fieldSelector", "")
                items = [store.view(p, c) for (pns, _), (p, c) in sorted(store.pods.items()) if pns == ns
                         and matches(p["metadata"].get("labels", {}), selector) and fields_match(p, fields)]
                return self.send_json(200, {"kind": "PodList", "apiVersion": "v1",
                                            "metadata": {"resourceVersion": str(store.version)}, "items": items})
            found = store.pods.get((ns, name))
            if found is None:
                return self.send_json(*status(404, "NotFound", f'pods "{name}" not found', {"name": name, "kind": "pods"}))
            if log:
                return self.pod_log(*found, query)
            if method == "GET":
                return self.send_json(200, store.view(*found))
            if method == "DELETE":
                del store.pods[(ns, name)]
                store.version += 1
                return self.send_json(200, store.view(*found))
        return self.send_json(*status(405, "MethodNotAllowed", "the server does not allow this method"))

    def pod_log(self, pod, created, query):
        """What the pod's container printed: --log-lines lines `<pod> line <i>`, written as soon
        as the pod runs. `container` must name one of the pod's containers (400 otherwise, as the
        API server answers); `tailLines` keeps the last N lines."""
        name = pod["metadata"]["name"]
        containers = [c.get("name") for c in pod.get("spec", {}).get("containers", [])]
        container = query.get("container") or (containers[0] if len(containers) == 1 else None)
        if container not in containers:
            return self.send_json(*status(400, "BadRequest",
                f"container {container} is not valid for pod {name}"))
        lines = [f"{name} line {i}\n" for i in range(1, self.server.opts.log_lines + 1)]
        if "tailLines" in query:
            n = int(query["tailLines"])
            lines = lines[-n:] if n > 0 else []
        data = "".join(lines).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def watch(self, ns, query):
        store = self.server.store
        selector, fields = query.get("labelSelector", ""), query.get("fieldSelector", "")
        timeout = min(float(query.get("timeoutSeconds") or 30), 300)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        sent = {}
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                with store.lock:
                    now = {n: store.view(p, c) for (pns, n), (p, c) in store.pods.items() if pns == ns
                           and matches(p["metadata"].get("labels", {}), selector) and fields_match(p, fields)}
                events = []
                for n, pod in sorted(now.items()):
                    text = json.dumps(pod, sort_keys=True)
                    if n not in sent:
                        events.append(("ADDED", pod))
                    elif sent[n] != text:
                        events.append(("MODIFIED", pod))
                    sent[n] = text
                for n in [n for n in sent if n not in now]:
                    events.append(("DELETED", json.loads(sent.pop(n))))
                for kind, pod in events:
                    line = json.dumps({"type": kind, "object": pod}).encode() + b"\n"
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                    self.wfile.flush()
                time.sleep(0.05)
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
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
            return {"major": "1", "minor": "31", "gitVersion": "v1.31.0+standin", "platform": "linux/amd64"}
        return {"kind": "APIResourceList", "groupVersion": "v1", "resources": [
            {"name": "pods", "singularName": "pod", "namespaced": True, "kind": "Pod",
             "verbs": ["create", "delete", "get", "list", "watch"], "shortNames": ["po"], "categories": ["all"]}]}

    def do_GET(self):
        self.handle_any("GET")

    def do_POST(self):
        self.handle_any("POST")

    def do_DELETE(self):
        self.handle_any("DELETE")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--cert", required=True)
    p.add_argument("--key", required=True)
    p.add_argument("--ca", required=True)
    p.add_argument("--token-file")
    p.add_argument("--deny", default="")
    p.add_argument("--ready-after", type=float, default=0.5)
    p.add_argument("--throttle-once", action="store_true")
    p.add_argument("--record")
    p.add_argument("--log-lines", type=int, default=0)
    opts = p.parse_args()
    opts.deny = {v for v in opts.deny.split(",") if v}
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(opts.cert, opts.key)
    ctx.load_verify_locations(opts.ca)
    ctx.verify_mode = ssl.CERT_OPTIONAL
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    server.opts = opts
    server.store = Store(opts.ready_after)
    server.throttle_lock = threading.Lock()
    server.throttled = False
    server.record_lock = threading.Lock()
    server.recorded = 0
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(f"listening https://127.0.0.1:{server.server_address[1]}", flush=True)
    sys.stdin.read()
    server.shutdown()


if __name__ == "__main__":
    main()
