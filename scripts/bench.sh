#!/usr/bin/env bash
# Benchmarks, reported as ratios against a baseline measured in the same run:
#   load: 64 clients doing `list` for LOAD_SECONDS (default 60) while creates and stops run,
#   against a real engine; list latency under load vs one client alone, resident memory at the
#   end vs after warm-up, threads. Release build.
#   docker: list through the controller vs the same engine call made directly (0 and 30
#   workers), resident memory idle / peak (VmHWM) / after with 64 keep-alive clients listing,
#   start to first /healthz, binary size. BENCH_ROUNDS (default 200).
#   k8s: create+stop and list through the controller against the same calls made directly to
#   the stand-in Kubernetes API server (TLS, client certificate), as ratios. Needs python3 and
#   openssl; K8S_BENCH_ROUNDS (default 200).
# The engine: A2A_TEST_DOCKER_HOST, else the system engine, else (root + dockerd) a private one.
set -euo pipefail
cd "$(dirname "$0")/.."
cleanup=()
trap 'for c in "${cleanup[@]}"; do eval "$c" || true; done' EXIT
d=$(mktemp -d /tmp/a2a-bench-dockerd.XXXXXX)
cleanup+=("scripts/dockerd.sh stop $d; rm -rf $d 2>/dev/null")
A2A_TEST_DOCKER_HOST=$(scripts/dockerd.sh find "$d") \
  || { echo "bench.sh needs a Docker engine (set A2A_TEST_DOCKER_HOST)" >&2; exit 1; }
export A2A_TEST_DOCKER_HOST
DOCKER_HOST=$A2A_TEST_DOCKER_HOST scripts/build-worker-image.sh a2a-echo-worker:dev
export A2A_REQUIRE_DOCKER=1 LOAD_SECONDS=${LOAD_SECONDS:-60} LOAD_CLIENTS=${LOAD_CLIENTS:-64}
cargo test --release --locked --quiet --test integration load -- --ignored --nocapture 2>&1 \
  | grep -E '^(LOAD|test result)'
cargo test --release --locked --quiet --test integration docker_bench -- --ignored --nocapture 2>&1 \
  | grep -E '^(BENCH|test result)'
if [ -n "$(DOCKER_HOST=$A2A_TEST_DOCKER_HOST docker images -q a2a-worker-controller:dev 2>/dev/null)" ] \
    || DOCKER_HOST=$A2A_TEST_DOCKER_HOST scripts/build-image.sh a2a-worker-controller a2a-worker-controller:dev >/dev/null; then
  echo "BENCH controller image: $(DOCKER_HOST=$A2A_TEST_DOCKER_HOST docker image inspect -f '{{.Size}}' a2a-worker-controller:dev) bytes"
fi
A2A_TEST_K8S_PYTHON=${A2A_TEST_K8S_PYTHON:-$(command -v python3)} \
  cargo test --release --locked --quiet --test integration k8s_bench -- --ignored --nocapture 2>&1 \
  | grep -E '^(K8S|test result)'
