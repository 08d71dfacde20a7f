"""Early answers as Python's standard library sees them.

Usage: early_answers.py BASE_URL TOKEN

urllib (http.client underneath) sends a request's whole body before it reads a byte of the
answer. The controller answers an oversized body 413 before reading it, and a body with a
non-JSON Content-Type 415; both must reach this client as statuses, never as "Broken pipe" or
"Connection reset". The oversized body is 6 MiB: a 2 MiB one fits in loopback socket buffers
on Linux, so urllib would finish writing it even without the server's lingering close.
Exits non-zero with a message on any mismatch.
"""

import json
import sys
import urllib.error
import urllib.request


def post(url, body, headers):
    req = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def main(base, token):
    url = f"{base}/a2a"
    auth = {"Authorization": f"Bearer {token}"}
    status, _ = post(url, b"x" * (6 << 20), {**auth, "Content-Type": "application/json"})
    if status != 413:
        raise SystemExit(f"6 MiB body: expected 413, got {status}")
    listing = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}}).encode()
    # What urllib (like curl -d) declares by default for a body: form encoding.
    status, body = post(url, listing, auth)
    if status != 415 or json.loads(body)["error"]["code"] != -32005:
        raise SystemExit(f"form-encoded body: expected 415 / -32005, got {status} {body[:200]!r}")
    status, body = post(url, listing, {**auth, "Content-Type": "application/json"})
    if status != 200 or "result" not in json.loads(body):
        raise SystemExit(f"JSON body: expected 200 with a result, got {status} {body[:200]!r}")
    print("urllib early answers: ok")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
