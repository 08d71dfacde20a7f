"""scripts/install.sh and the LaunchAgent wrapper, on any machine.

codesign, launchctl and PlistBuddy exist only on macOS, so this puts recording stand-ins for them
on PATH. Each mimics the documented behaviour the script relies on:
- codesign --force --sign ID FILE embeds a signature in FILE (here: a trailer appended to the
  file, which an ELF or Mach-O loader ignores); codesign --verify --strict FILE fails (exit 1,
  "code object is not signed at all") unless FILE carries one. STANDIN_FAIL=sign|verify makes
  that step fail the way a locked keychain or a tampered file does.
- launchctl bootout gui/UID/LABEL exits 3 ("No such process") for a job that is not loaded;
  bootstrap gui/UID PLIST loads it (and fails, exit 5, for a plist that does not parse).
- PlistBuddy -c "Set :A:B V" changes an existing entry (exit 1, 'Set: Entry, ":A:B", Does Not
  Exist' otherwise), -c "Add :A:B TYPE [V]" adds one (exit 1 when it exists), -c "Print :A"
  prints it; the file is read and written with plistlib, as the real tool reads any format.
The plist the script installs is parsed with Python's plistlib and linted with plutil where
one exists.

    python3 tests/python/install_test.py REPO BINARY
"""
import json
import os
import plistlib
import shutil
import stat
import subprocess
import sys
import tempfile

REPO, BINARY = sys.argv[1], sys.argv[2]
LABEL = "com.bborbe.a2a-worker-controller"
SIGNATURE = b"\n--codesign-standin-signature--\n"

CODESIGN = r'''#!/usr/bin/env python3
import json, os, sys
log = os.environ["STANDIN_LOG"]
with open(log, "a") as f: f.write(json.dumps(["codesign"] + sys.argv[1:]) + "\n")
args = sys.argv[1:]
target = args[-1]
mark = b"\n--codesign-standin-signature--\n"
if "--sign" in args:
    if os.environ.get("STANDIN_FAIL") == "sign":
        sys.stderr.write(target + ": errSecInternalComponent\n"); sys.exit(1)
    with open(target, "ab") as f: f.write(mark)
    sys.exit(0)
if "--verify" in args:
    data = open(target, "rb").read()
    if os.environ.get("STANDIN_FAIL") == "verify" or not data.endswith(mark):
        sys.stderr.write(target + ": code object is not signed at all\n"); sys.exit(1)
    sys.exit(0)
sys.exit(2)
'''

LAUNCHCTL = r'''#!/usr/bin/env python3
import json, os, plistlib, sys
log = os.environ["STANDIN_LOG"]
with open(log, "a") as f: f.write(json.dumps(["launchctl"] + sys.argv[1:]) + "\n")
state = os.environ["STANDIN_STATE"]
loaded = json.load(open(state)) if os.path.exists(state) else []
cmd = sys.argv[1]
if cmd == "bootout":
    label = sys.argv[2].rsplit("/", 1)[1]
    if label not in loaded:
        sys.stderr.write("Boot-out failed: 3: No such process\n"); sys.exit(3)
    loaded.remove(label)
elif cmd == "bootstrap":
    try:
        label = plistlib.load(open(sys.argv[3], "rb"))["Label"]
    except Exception:
        sys.stderr.write("Bootstrap failed: 5: Input/output error\n"); sys.exit(5)
    if label in loaded:
        sys.stderr.write("Bootstrap failed: 5: Input/output error\n"); sys.exit(5)
    loaded.append(label)
else:
    sys.exit(64)
json.dump(loaded, open(state, "w"))
'''

PLISTBUDDY = r'''#!/usr/bin/env python3
import json, os, plistlib, sys
log = os.environ["STANDIN_LOG"]
with open(log, "a") as f: f.write(json.dumps(["PlistBuddy"] + sys.argv[1:]) + "\n")
command, path = sys.argv[2], sys.argv[3]
verb, rest = command.split(" ", 1)
parts = rest.split(" ")
keys = parts[0].lstrip(":").split(":")
with open(path, "rb") as f: doc = plistlib.load(f)
parent = doc
for k in keys[:-1]:
    if k not in parent:
        print(f'{verb}: Entry, "{parts[0]}", Does Not Exist', file=sys.stderr); sys.exit(1)
    parent = parent[k]
last = keys[-1]
def value(kind, text):
    return {"integer": int, "string": str, "bool": lambda t: t == "true",
            "dict": lambda t: {}, "array": lambda t: []}[kind](text)
if verb == "Print":
    if last not in parent:
        print(f'Print: Entry, "{parts[0]}", Does Not Exist', file=sys.stderr); sys.exit(1)
    print(parent[last]); sys.exit(0)
if verb == "Set":
    if last not in parent:
        print(f'Set: Entry, "{parts[0]}", Does Not Exist', file=sys.stderr); sys.exit(1)
    old = parent[last]
    parent[last] = type(old)(int(parts[1]) if isinstance(old, int) else parts[1])
elif verb == "Add":
    if last in parent:
        print(f'Add: ":{":".join(keys)}" Entry Already Exists', file=sys.stderr); sys.exit(1)
    parent[last] = value(parts[1], parts[2] if len(parts) > 2 else "")
else:
    sys.exit(1)
with open(path, "wb") as f: plistlib.dump(doc, f)
'''

failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print(f"FAIL: {what}")


def make_env(root):
    bin_dir = os.path.join(root, "standins")
    os.makedirs(bin_dir, exist_ok=True)
    for name, text in (("codesign", CODESIGN), ("launchctl", LAUNCHCTL), ("PlistBuddy", PLISTBUDDY)):
        path = os.path.join(bin_dir, name)
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, 0o755)
    home = os.path.join(root, "home")
    os.makedirs(home, exist_ok=True)
    env = {
        "PATH": bin_dir + os.pathsep + os.environ["PATH"],
        "HOME": home,
        "A2A_CODESIGN_IDENTITY": "bborbe local codesign",
        "STANDIN_LOG": os.path.join(root, "calls.log"),
        "STANDIN_STATE": os.path.join(root, "launchd.json"),
    }
    for keep in ("CARGO_HOME", "RUSTUP_HOME", "TMPDIR"):
        if keep in os.environ:
            env[keep] = os.environ[keep]
    return env, home


def install(env, **extra):
    e = dict(env, **extra)
    open(e["STANDIN_LOG"], "w").close()
    r = subprocess.run([os.path.join(REPO, "scripts/install.sh"), "--binary", BINARY],
                       env=e, capture_output=True, text=True)
    calls = [json.loads(l) for l in open(e["STANDIN_LOG"])]
    return r, calls


def main():
    root = tempfile.mkdtemp(prefix="a2a-install-")
    try:
        env, home = make_env(root)
        bin_dir = os.path.join(home, ".local/bin")
        installed = os.path.join(bin_dir, "a2a-worker-controller")
        plist_path = os.path.join(home, "Library/LaunchAgents", LABEL + ".plist")

        # A first install: every step, in order.
        r, calls = install(env)
        check(r.returncode == 0, f"first install failed: {r.stdout}{r.stderr}")
        tools = [c[0] + " " + c[1] for c in calls]
        new = installed + ".new"
        check(calls[0] == ["codesign", "--force", "--sign", "bborbe local codesign", new],
              f"first call signs the staged binary: {calls[:1]}")
        check(calls[1] == ["codesign", "--verify", "--strict", new], f"then verifies it: {calls[1:2]}")
        check(tools[-2:] == ["launchctl bootout", "launchctl bootstrap"], f"reload last: {tools}")
        uid = os.getuid()
        check(calls[-1] == ["launchctl", "bootstrap", f"gui/{uid}", plist_path], f"bootstrap: {calls[-1]}")
        check(calls[-2] == ["launchctl", "bootout", f"gui/{uid}/{LABEL}"], f"bootout: {calls[-2]}")
        check(not os.path.exists(new), "the staged binary is gone")
        check(open(installed, "rb").read().endswith(SIGNATURE), "the installed binary is the signed one")
        check(os.stat(installed).st_mode & 0o111 != 0, "the installed binary is executable")
        with open(plist_path, "rb") as f:
            plist = plistlib.load(f)
        check(plist["Label"] == LABEL, f"label {plist.get('Label')}")
        check(plist["ProgramArguments"] == [os.path.join(bin_dir, "a2a-worker-controller.sh")],
              f"runs the wrapper: {plist['ProgramArguments']}")
        check(plist["ThrottleInterval"] == 30, "ThrottleInterval 30")
        check(plist["SoftResourceLimits"]["NumberOfFiles"] == 4096, "NumberOfFiles 4096")
        check(plist["KeepAlive"] is True and plist["RunAtLoad"] is True, "KeepAlive, RunAtLoad")
        check(plist["StandardErrorPath"].startswith(home + "/Library/Logs/"), "logs go to files")
        json.loads(plist["EnvironmentVariables"]["LOCAL_COMMAND"])  # a JSON array, unambiguous
        check(os.access(os.path.join(bin_dir, "a2a-worker-controller.sh"), os.X_OK), "the wrapper")
        if shutil.which("plutil"):
            check(subprocess.run(["plutil", "-lint", plist_path]).returncode == 0, "plutil -lint")
        version = subprocess.run([installed, "--version"], capture_output=True, text=True)
        check(version.stdout.startswith("a2a-worker-controller "), f"the installed binary runs: {version}")

        # An update: the binary is replaced by a rename (a new inode), the operator's own plist
        # edits are kept, the two managed keys are set again.
        before = os.stat(installed).st_ino
        with open(plist_path, "rb") as f:
            plist = plistlib.load(f)
        plist["EnvironmentVariables"]["OPERATOR_SETTING"] = "kept"
        plist["ThrottleInterval"] = 5
        del plist["SoftResourceLimits"]
        with open(plist_path, "wb") as f:
            plistlib.dump(plist, f)
        r, calls = install(env)
        check(r.returncode == 0, f"update failed: {r.stdout}{r.stderr}")
        check(os.stat(installed).st_ino != before, "the update renamed a new file into place")
        with open(plist_path, "rb") as f:
            plist = plistlib.load(f)
        check(plist["EnvironmentVariables"].get("OPERATOR_SETTING") == "kept", "operator edits kept")
        check(plist["ThrottleInterval"] == 30, "ThrottleInterval set again")
        check(plist["SoftResourceLimits"]["NumberOfFiles"] == 4096, "NumberOfFiles added again")
        loaded = json.load(open(env["STANDIN_STATE"]))
        check(loaded == [LABEL], f"the job is loaded once: {loaded}")

        # A signature that fails, or does not verify: nothing is replaced, nothing reloaded.
        for failing in ("sign", "verify"):
            before = os.stat(installed)
            content = open(installed, "rb").read()
            plist_before = open(plist_path, "rb").read()
            r, calls = install(env, STANDIN_FAIL=failing)
            check(r.returncode != 0, f"{failing} failure: the install fails")
            check("nothing was replaced" in r.stderr, f"{failing}: says so: {r.stderr}")
            check(os.stat(installed).st_ino == before.st_ino, f"{failing}: the installed binary untouched")
            check(open(installed, "rb").read() == content, f"{failing}: same content")
            check(open(plist_path, "rb").read() == plist_before, f"{failing}: the plist untouched")
            check(not any(c[0] == "launchctl" for c in calls), f"{failing}: the job untouched: {calls}")
            check(not os.path.exists(installed + ".new"), f"{failing}: no staged binary left")

        # Without an identity it refuses before anything runs.
        e = dict(env)
        del e["A2A_CODESIGN_IDENTITY"]
        r, calls = install(e)
        check(r.returncode != 0 and "A2A_CODESIGN_IDENTITY" in r.stderr and not calls,
              f"no identity: {r.stderr} {calls}")

        wrapper_tests(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if failures:
        print(f"install tests: {len(failures)} failure(s)")
        sys.exit(1)
    print("install tests: ok")


def wrapper_tests(root):
    """The wrapper loads KEY=VALUE secrets from a 0600 file or a command and execs the binary."""
    d = os.path.join(root, "wrapper")
    os.makedirs(d)
    wrapper = os.path.join(d, "a2a-worker-controller.sh")
    shutil.copy(os.path.join(REPO, "launchd/a2a-worker-controller.sh"), wrapper)
    fake = os.path.join(d, "a2a-worker-controller")
    with open(fake, "w") as f:
        f.write('#!/bin/sh\necho "pid=$$ token=${A2A_AUTH_TOKEN:-} anthropic=${ANTHROPIC_AUTH_TOKEN:-}"\n')
    os.chmod(fake, 0o755)
    secrets = os.path.join(d, "secrets.env")
    with open(secrets, "w") as f:
        f.write("# comment\nA2A_AUTH_TOKEN=abc=def-0123456789\n\nbad key=x\nANTHROPIC_AUTH_TOKEN=router\n")
    base = {"PATH": os.environ["PATH"], "HOME": d, "A2A_SECRETS_FILE": secrets}

    os.chmod(secrets, 0o644)
    r = subprocess.run([wrapper], env=base, capture_output=True, text=True)
    check(r.returncode != 0 and "chmod 600" in r.stderr and "abc" not in r.stderr + r.stdout,
          f"a secrets file others may read is refused: {r.stderr}")
    os.chmod(secrets, 0o600)
    r = subprocess.run([wrapper], env=base, capture_output=True, text=True)
    check(r.returncode == 0 and "token=abc=def-0123456789 anthropic=router" in r.stdout,
          f"secrets loaded from the file: {r.stdout}{r.stderr}")
    check("not KEY=VALUE" in r.stderr and "bad key" not in r.stderr, f"bad lines ignored: {r.stderr}")
    r = subprocess.run([wrapper], env=dict(base, A2A_SECRETS_COMMAND="printf 'A2A_AUTH_TOKEN=from-command\\n'"),
                       capture_output=True, text=True)
    check(r.returncode == 0 and "token=from-command" in r.stdout, f"secrets from a command: {r.stdout}{r.stderr}")
    r = subprocess.run([wrapper], env=dict(base, A2A_SECRETS_COMMAND="exit 7"), capture_output=True, text=True)
    check(r.returncode != 0 and "failed" in r.stderr, f"a failing command stops the start: {r.stderr}")
    r = subprocess.run([wrapper], env=dict(base, A2A_SECRETS_FILE=os.path.join(d, "none")),
                       capture_output=True, text=True)
    check(r.returncode != 0 and "no secrets" in r.stderr, f"no secrets: {r.stderr}")


if __name__ == "__main__":
    main()
