"""What the scenario scripts here share: the real cluster (`realk8s_env` from
../shared/reference/k8s-real/node, in a private network namespace), a transcript of what was
said, raw API calls as the controller's Role saved as NAME.h / NAME.b, the controller's own
command line against the cluster, and its control operations (a worker's token never written)."""
import json, os, ssl, subprocess, sys, time, urllib.error, urllib.request

sys.path.insert(0, "/work/shared/reference/k8s-real/node")
os.environ.setdefault("REALK8S_BIN", "/tmp/realk8s/bin126")
import realk8s_env as rk  # noqa: E402


def enter_netns():
    rk.enter_private_netns()
    if rk.in_private_netns():
        rk.loopback_up()


class Recording:
    def __init__(self, work, transcript):
        self.rec = os.path.join(work, "rec")
        os.makedirs(self.rec, exist_ok=True)
        self.out = open(os.path.join(self.rec, transcript), "w")
        self.cluster = rk.Cluster(os.path.join(work, "cp"))

    def say(self, *parts):
        line = " ".join(str(p) for p in parts)
        print(line, flush=True)
        self.out.write(line + "\n")
        self.out.flush()

    def raw(self, name, method, path, body=None, token=None, ctype="application/json"):
        """One raw call as the Role; headers and body saved as NAME.h / NAME.b."""
        c = self.cluster
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
            with open(os.path.join(self.rec, name + ".h"), "w") as f:
                f.write(f"HTTP/1.1 {code}\n" + "".join(f"{k}: {v}\n" for k, v in hdrs.items()))
            with open(os.path.join(self.rec, name + ".b"), "wb") as f:
                f.write(out)
        self.say(f"$ {method} {path}  -> {code}")
        self.say("  " + out.decode("utf-8", "replace")[:900])
        return code, out

    def deploy(self, repo, work):
        """The deploy files' namespace, ServiceAccount, Role and RoleBinding; a token file of
        the ServiceAccount's (the controller's credentials), and the token."""
        c = self.cluster
        for f in ["00-namespace.yaml", "10-serviceaccount.yaml", "20-role.yaml", "30-rolebinding.yaml"]:
            r = c.kubectl("apply", "-f", os.path.join(repo, "scripts/k8s", f))
            self.say(f"$ kubectl apply -f scripts/k8s/{f}\n  {r.stdout.strip()} {r.stderr.strip()}")
        token = c.kubectl("-n", "a2a", "create", "token", "a2a-worker-controller", "--duration=1h").stdout.strip()
        token_file = os.path.join(work, "sa-token")
        with open(token_file, "w") as f:
            f.write(token)
        os.chmod(token_file, 0o600)
        return token, token_file

    def controller(self, binary, work, token_file, auth, controller_id, extra):
        """The controller against the cluster, answering on a free port: (process, port)."""
        c = self.cluster
        port = rk.free_port()
        env = dict(os.environ, A2A_AUTH_TOKEN=auth, RUST_LOG="info")
        argv = [binary, f"-listen=127.0.0.1:{port}", f"-a2a-public-url=http://127.0.0.1:{port}",
                "-backend=k8s", f"-k8s-api-url={c.url}", f"-k8s-ca-file={c.ca_file}",
                f"-k8s-token-file={token_file}", "-k8s-namespace=a2a", "-worker-image=a2a-echo-worker:dev",
                f"-controller-id={controller_id}"] + extra
        log = open(os.path.join(work, "controller.log"), "w")
        p = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1)
                break
            except Exception:
                time.sleep(0.2)
        return p, port

    def control(self, port, auth, data):
        """One control operation; the transcript has its outcome, never a worker's token."""
        body = json.dumps({"jsonrpc": "2.0", "id": "1", "method": "SendMessage", "params": {"message": {
            "messageId": "1", "role": "ROLE_USER", "parts": [{"data": data}]}}}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{port}/a2a", data=body, method="POST", headers={
            "Authorization": f"Bearer {auth}", "Content-Type": "application/json"})
        task = json.loads(urllib.request.urlopen(req, timeout=120).read())["result"]["task"]
        state = task["status"]["state"]
        if state == "TASK_STATE_COMPLETED":
            out = task["artifacts"][0]["parts"][0]["data"]
        else:
            out = task["status"]["message"]["parts"][1]["data"]
        shown = json.dumps(out)
        if "token" in out:
            shown = shown.replace(out["token"], "<the worker's token>")
        self.say(f"$ {data['operation']} {json.dumps({k: v for k, v in data.items() if k != 'operation'})} -> {state}")
        self.say("  " + shown[:900])
        return state, out

    def close(self):
        self.cluster.stop()
        self.out.close()
