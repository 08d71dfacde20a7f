#!/usr/bin/env bash
# Runs every test: formatting, lints, unit and integration tests, the official Python and
# JavaScript A2A SDK interop tests (in a virtualenv / node_modules under target/), the Kubernetes
# manifests and worker pods against the official schemas (kubernetes-validate, same virtualenv),
# the Docker suite against a real engine, and a smoke test that runs scripts/run.sh and its
# printed commands verbatim.
#
# The Docker engine: A2A_TEST_DOCKER_HOST if set; else the system engine if it answers; else,
# as root with dockerd installed, a private dockerd started here and stopped at the end.
# Without any engine the Docker suite is skipped, loudly; A2A_REQUIRE_DOCKER=1 (CI) makes
# that a failure instead.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n== %s\n' "$*"; }
# The commands of a README block marked <!-- begin: NAME --> ... <!-- end: NAME -->.
readme_block() {
  sed -n "/<!-- begin: $* -->/,/<!-- end: $* -->/p" README.md | sed '/^<!--/d;/^```/d'
}
cleanup_tasks=()
cleanup() { for c in "${cleanup_tasks[@]}"; do eval "$c" || true; done; }
trap cleanup EXIT

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy"
cargo clippy --all-targets --locked -- -D warnings

step "dependency audit (scripts/audit.sh, cargo-deny against scripts/deny.toml)"
if command -v cargo-deny >/dev/null; then
  scripts/audit.sh | tail -n 3
elif [ "${A2A_REQUIRE_AUDIT:-}" = 1 ]; then
  echo "A2A_REQUIRE_AUDIT=1 but cargo-deny is missing (cargo install --locked cargo-deny)" >&2
  exit 1
else
  echo "SKIPPED: the dependency audit (needs cargo-deny: cargo install --locked cargo-deny)" >&2
fi

step "Python A2A SDK (a2a-sdk==1.3.0), kubernetes-validate (1.37.0) and cryptography (OIDC test keys) in target/py-venv"
venv=target/py-venv
if ! "$venv/bin/python" -c 'import a2a, httpx, kubernetes_validate, cryptography' 2>/dev/null \
    || [ "$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("kubernetes-validate"))')" != 1.37.0 ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check 'a2a-sdk==1.3.0' httpx 'kubernetes-validate==1.37.0' 'cryptography>=42'
fi
export A2A_TEST_PYTHON="$PWD/$venv/bin/python"
export A2A_REQUIRE_PYTHON=1
export A2A_TEST_K8S_PYTHON="$PWD/$venv/bin/python"
export A2A_REQUIRE_K8S_VALIDATE=1

step "kubectl (proves the Kubernetes stand-in's wire format)"
if [ -z "${A2A_TEST_KUBECTL:-}" ] && command -v kubectl >/dev/null; then
  export A2A_TEST_KUBECTL=$(command -v kubectl)
fi
if [ -n "${A2A_TEST_KUBECTL:-}" ]; then
  "$A2A_TEST_KUBECTL" version --client 2>/dev/null | head -1 || true
elif [ "${A2A_REQUIRE_KUBECTL:-}" = 1 ]; then
  echo "A2A_REQUIRE_KUBECTL=1 but there is no kubectl" >&2
  exit 1
else
  echo "SKIPPED: the kubectl wire-format test (needs kubectl: apt-get install kubernetes-client)" >&2
fi

step "JavaScript A2A SDK (@a2a-js/sdk 1.3.0) in target/js-interop"
if command -v node >/dev/null && command -v npm >/dev/null; then
  js=target/js-interop
  if [ ! -d "$js/node_modules/@a2a-js/sdk" ] || ! cmp -s tests/js/package-lock.json "$js/package-lock.json"; then
    mkdir -p "$js"
    cp tests/js/package.json tests/js/package-lock.json "$js/"
    (cd "$js" && npm ci --silent --no-audit --no-fund)
  fi
  export A2A_TEST_JS_DIR="$PWD/$js" A2A_REQUIRE_JS=1
  # The status page in a real browser: Debian's chromium (never a downloaded one).
  if [ -x /usr/bin/chromium ]; then
    export A2A_TEST_CHROMIUM=/usr/bin/chromium
  elif [ "${A2A_REQUIRE_UI:-}" = 1 ]; then
    echo "A2A_REQUIRE_UI=1 but /usr/bin/chromium is missing (apt-get install chromium)" >&2
    exit 1
  else
    echo "SKIPPED: the status page's browser test (needs Debian's chromium: apt-get install chromium)" >&2
  fi
elif [ "${A2A_REQUIRE_JS:-}" = 1 ]; then
  echo "A2A_REQUIRE_JS=1 but node or npm is missing" >&2
  exit 1
else
  echo "SKIPPED: the JavaScript SDK interop test (needs node and npm)" >&2
fi

step "Docker engine"
dockerd_dir=$(mktemp -d /tmp/a2a-test-dockerd.XXXXXX)
cleanup_tasks+=("scripts/dockerd.sh stop $dockerd_dir; rm -rf $dockerd_dir 2>/dev/null")
rc=0
host=$(scripts/dockerd.sh find "$dockerd_dir") || rc=$?
case $rc in
  0) export A2A_TEST_DOCKER_HOST=$host ;;
  3) unset A2A_TEST_DOCKER_HOST ;;
  *) exit "$rc" ;;
esac
if [ -n "${A2A_TEST_DOCKER_HOST:-}" ]; then
  echo "engine: $A2A_TEST_DOCKER_HOST"
  export A2A_REQUIRE_DOCKER=1
  DOCKER_HOST=$A2A_TEST_DOCKER_HOST scripts/build-worker-image.sh a2a-echo-worker:dev
  DOCKER_HOST=$A2A_TEST_DOCKER_HOST scripts/build-image.sh a2a-worker-controller a2a-worker-controller:dev
  export A2A_TEST_CONTROLLER_IMAGE=a2a-worker-controller:dev
elif [ "${A2A_REQUIRE_DOCKER:-}" = 1 ]; then
  echo "A2A_REQUIRE_DOCKER=1 but no Docker engine is available" >&2
  exit 1
else
  cat >&2 <<'EOT'
########################################################################
##  SKIPPING THE DOCKER SUITE: no Docker engine is available here.   ##
##  Set A2A_TEST_DOCKER_HOST=unix:///path/docker.sock, start Docker, ##
##  or run as root with dockerd installed (apt-get install docker.io)##
########################################################################
EOT
fi

step "cargo test"
cargo test --locked --all-targets -- --test-threads=4

if [ -n "${A2A_TEST_DOCKER_HOST:-}" ]; then
  step "load: ${A2A_LOAD_SECONDS:-60}s, 64 clients listing while creates and stops run (release build)"
  LOAD_SECONDS=${A2A_LOAD_SECONDS:-60} cargo test --release --locked --quiet --test integration load \
    -- --ignored --nocapture 2>&1 | grep -E '^(LOAD|test result|thread|  left|  right)|panicked'
  [ "${PIPESTATUS[0]}" = 0 ] || { echo "the load test failed" >&2; exit 1; }
fi

if [ -n "${A2A_TEST_PODMAN_HOST:-}" ] && [ -n "${A2A_TEST_DOCKER_HOST:-}" ]; then
  step "the Docker suite again, against Podman's Docker-compatible API ($A2A_TEST_PODMAN_HOST)"
  for image in a2a-echo-worker:dev a2a-worker-controller:dev; do
    docker -H "$A2A_TEST_DOCKER_HOST" save "$image" | docker -H "$A2A_TEST_PODMAN_HOST" load -q >/dev/null
  done
  A2A_TEST_DOCKER_HOST=$A2A_TEST_PODMAN_HOST cargo test --locked --test integration -- \
    docker_e2e faults::controller 2>&1 | grep -E '^(test |test result|assertion|  left|  right| right)|panicked'
  [ "${PIPESTATUS[0]}" = 0 ] || { echo "the Docker suite failed against Podman" >&2; exit 1; }
elif [ -n "${A2A_TEST_DOCKER_HOST:-}" ]; then
  echo "SKIPPED: the Podman pass of the Docker suite (set A2A_TEST_PODMAN_HOST; scripts/podman.sh starts one)" >&2
fi

step "offline build from vendored sources (scripts/vendor.sh; empty CARGO_HOME, no network)"
vendor_dir=$(mktemp -d /tmp/a2a-vendor.XXXXXX)
cleanup_tasks+=("rm -rf $vendor_dir")
if scripts/vendor.sh "$vendor_dir" | tail -n 1; then
  cut_off=()
  # As root, the build runs in a network namespace of its own, with no network at all.
  if [ "$(id -u)" = 0 ] && command -v unshare >/dev/null && unshare -n true 2>/dev/null; then
    cut_off=(unshare -n)
  fi
  started=$(date +%s)
  ${cut_off[@]+"${cut_off[@]}"} env CARGO_HOME="$vendor_dir/cargo-home" CARGO_NET_OFFLINE=true \
    RUSTUP_HOME="${RUSTUP_HOME:-$HOME/.rustup}" RUSTUP_TOOLCHAIN="$(rustup show active-toolchain | cut -d' ' -f1)" \
    "$(rustup which cargo)" build --release --offline --locked --quiet \
    --config "$vendor_dir/cargo-config.toml" --target-dir "$vendor_dir/target" --bin a2a-worker-controller
  "$vendor_dir/target/release/a2a-worker-controller" --version
  echo "offline release build: $(( $(date +%s) - started )) s${cut_off[*]:+, without a network (unshare -n)}"
elif [ "${A2A_REQUIRE_OFFLINE_BUILD:-}" = 1 ]; then
  echo "A2A_REQUIRE_OFFLINE_BUILD=1 but vendoring failed" >&2
  exit 1
else
  echo "SKIPPED: the offline build (vendoring needs the registry once)" >&2
fi

step "fuzzing, ${A2A_FUZZ_SECONDS:-10}s per target (scripts/fuzz.sh runs longer)"
if command -v cargo-fuzz >/dev/null && rustup toolchain list | grep -q '^nightly'; then
  scripts/fuzz.sh "${A2A_FUZZ_SECONDS:-10}"
elif [ "${A2A_REQUIRE_FUZZ:-}" = 1 ]; then
  echo "A2A_REQUIRE_FUZZ=1 but cargo-fuzz or the nightly toolchain is missing" >&2
  exit 1
else
  echo "SKIPPED: fuzzing (needs cargo-fuzz and a nightly toolchain: cargo install cargo-fuzz --locked)" >&2
fi

if [ -n "${A2A_TEST_DOCKER_HOST:-}" ]; then
  step "scripts/run.sh smoke test: its printed commands, verbatim"
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  out=$(mktemp); err=$(mktemp)
  DOCKER_HOST=$A2A_TEST_DOCKER_HOST PORT=$port A2A_AUTH_TOKEN= scripts/run.sh >"$out" 2>"$err" &
  run_pid=$!
  cleanup_tasks+=("kill $run_pid 2>/dev/null")
  for _ in $(seq 1 600); do
    curl -sf "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && grep -q -- '^--- end ---$' "$out" && break
    kill -0 "$run_pid" 2>/dev/null || { cat "$out" "$err" >&2; exit 1; }
    sleep 0.5
  done
  sed -n '/^--- commands ---$/,/^--- end ---$/p' "$out" | sed '1d;$d' >"$out.sh"
  result=$(bash -e "$out.sh")
  echo "$result" | cut -c1-160
  [ "$(echo "$result" | grep -c '"state":"TASK_STATE_COMPLETED"')" = 4 ] || { echo "run.sh commands did not all complete" >&2; exit 1; }
  echo "$result" | grep -q '"text":"hello worker"' || { echo "the worker did not answer" >&2; exit 1; }
  step "README curl examples, verbatim, against the same controller"
  readme_block curl examples | sed "s|localhost:8080|127.0.0.1:$port|g" >"$out.readme.sh"
  result=$(bash -e "$out.readme.sh")
  echo "$result" | cut -c1-160
  [ "$(echo "$result" | grep -c '"state":"TASK_STATE_COMPLETED"')" = 4 ] || { echo "README commands did not all complete" >&2; exit 1; }
  echo "$result" | grep -q '"text":"hello worker"' || { echo "the worker did not answer" >&2; exit 1; }
  step "README HTTP+JSON examples, verbatim, against the same controller"
  readme_block rest examples | sed "s|localhost:8080|127.0.0.1:$port|g" >"$out.rest.sh"
  result=$(bash -e "$out.rest.sh")
  echo "$result" | cut -c1-160
  [ "$(echo "$result" | grep -c '"state":"TASK_STATE_COMPLETED"')" = 4 ] || { echo "README HTTP+JSON commands did not all complete" >&2; exit 1; }
  step "README command-line examples, verbatim, against the same controller"
  readme_block cli examples | sed "s|localhost:8080|127.0.0.1:$port|g" >"$out.cli.sh"
  result=$(bash -e "$out.cli.sh")
  echo "$result"
  echo "$result" | grep -q '^WORKER_ID ' || { echo "create printed no table" >&2; exit 1; }
  echo "$result" | grep -q '^stopped worker .* (task demo-cli)$' || { echo "the CLI did not stop its worker" >&2; exit 1; }
  step "README container example, against the test engine"
  cport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  name=a2a-readme-$$
  sock=${A2A_TEST_DOCKER_HOST#unix://}
  readme_block container example \
    | sed -e "s|%g /var/run/docker.sock|%g $sock|; s|-v /var/run/docker.sock:|-v $sock:|" -e "s|8080:8080|$cport:8080|; s|127.0.0.1:8080|127.0.0.1:$cport|" \
          -e "s|--name a2a-worker-controller|--name $name|" -e "s|network create a2a\$|network create $name|" \
          -e "s|--network a2a |--network $name |" -e "s|-docker-network=a2a |-docker-network=$name |" >"$out.container.sh"
  cleanup_tasks+=("DOCKER_HOST=$A2A_TEST_DOCKER_HOST docker rm -f $name >/dev/null 2>&1; DOCKER_HOST=$A2A_TEST_DOCKER_HOST docker network rm $name >/dev/null 2>&1")
  A2A_AUTH_TOKEN=$(cat target/run/a2a-auth-token) DOCKER_HOST=$A2A_TEST_DOCKER_HOST bash -e "$out.container.sh" >/dev/null
  for _ in $(seq 1 100); do
    curl -sf "http://127.0.0.1:$cport/readiness" >/dev/null 2>&1 && break
    sleep 0.2
  done
  export A2A_AUTH_TOKEN=$(cat target/run/a2a-auth-token)
  cli=target/release/a2a-worker-controller
  url=http://127.0.0.1:$cport
  $cli create readme-container --url "$url"
  $cli stop "$($cli list --json --url "$url" | sed -n 's/.*"worker_id": "\([^"]*\)".*/\1/p' | head -n 1)" --url "$url"
  unset A2A_AUTH_TOKEN
  DOCKER_HOST=$A2A_TEST_DOCKER_HOST docker rm -f "$name" >/dev/null
  DOCKER_HOST=$A2A_TEST_DOCKER_HOST docker network rm "$name" >/dev/null
  kill "$run_pid"; wait "$run_pid" || true
  if grep -q "$(cat target/run/a2a-auth-token)" "$out" "$err"; then echo "run.sh printed its token" >&2; exit 1; fi
fi

echo
echo "all tests passed"
