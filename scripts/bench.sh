#!/usr/bin/env bash
# Benchmarks, reported as ratios against a baseline measured in the same run, ending with one
# table (figure | measured | target). A benchmark, not a test: it never fails on a slow machine.
#   docker: list through the controller vs the same engine call made directly (0, 30 and 300
#   workers), create+stop vs the same engine calls, resident memory idle / peak (VmHWM) / after
#   with 64 and 256 keep-alive clients listing, start to first /healthz, binary size
#   (tests/integration/docker_bench.rs). BENCH_ROUNDS (default 200), BENCH_CREATE_ROUNDS (20;
#   0 skips), BENCH_WORKERS (default 0,30,300).
#   card: the Agent Card, 64 keep-alive connections for CARD_SECONDS (default 5) with wrk,
#   against nginx (Debian's nginx-light) and tiny_http 0.12 (the design card's original server,
#   built in target/bench/ outside the product's dependency graph; needs crates.io) serving the
#   same bytes. Skipped, and said, when wrk or nginx is missing.
#   load: 64 clients doing `list` for LOAD_SECONDS (default 60) while creates and stops run;
#   list latency under load vs one client alone, resident memory at the end vs after warm-up.
#   watch: docker kill → the watch event against the engine's own /events (p50 of
#   BENCH_WATCH_ROUNDS, default 5), and 64 idle watchers' memory, threads and engine
#   connections against none (docker_bench_watch, run with the docker benchmarks).
#   pool: creates from a warm pool of 4 against cold creates of the same image, a burst of 2N
#   against N, two replicas racing for one task (pool::docker_bench_pool, with the docker ones).
#   pool demand: a bursty schedule (0.5 creates/s, then 1.5/s, BENCH_DEMAND_SECONDS each,
#   default 60; members that take 3 s to listen) against a pool of {min 0, max 8} that follows
#   the demand, then a fixed pool of the same average: the creates served from the pool, and
#   how soon it held its min again (pool_demand::docker_bench_pool_demand, with the docker ones).
#   fork: copy_workspace of a 200 MB workspace against cp -a between the same kind of volumes
#   in a short-lived container (the host's own cp in an image; fork::docker_bench_fork, with
#   the docker ones; BENCH_FORK_ROUNDS, default 5, BENCH_FORK_MIB, default 200).
#   suspend: resume → ready against a cold create, the memory a suspend gives back, renew against
#   a list of one worker (docker_suspend::docker_bench_suspend, with the docker ones;
#   BENCH_SUSPEND_ROUNDS, default 10), and resume against a cold create on the Kubernetes
#   stand-in (k8s_suspend::k8s_bench_suspend, with the k8s ones).
#   mcp: `tools/call` list with 30 workers ÷ the A2A list through the same controller, and
#   `tools/list` ÷ the Agent Card, p50 each (mcp::docker_bench_mcp, with the docker ones).
#   k8s: create+stop and list through the controller against the same calls made directly to
#   the stand-in Kubernetes API server (TLS, client certificate); creates from a warm pool of 4
#   against cold ones (k8s_pool::k8s_bench_pool, the stand-in running real workers); a pod deleted by hand → the
#   watch event against the stand-in's pod watch read directly. Needs python3 and openssl.
#   local: a tab closed by hand on the WezTerm stand-in → the watch event, against the
#   reconciliation's 1 s period (WezTerm has no event stream).
#   egress: the egress proxy (its own process): a route's request ÷ the same request direct
#   (p50 of BENCH_EGRESS_ROUNDS, default 500), 50 MB through a CONNECT tunnel ÷ through a bare
#   relay (and the relay ÷ direct), 1,000 idle tunnels and the proxy's memory then
#   (tests/integration/egress_bench.rs). No engine.
#   --scale: instead of all that, the scale benchmark (tests/integration/scale_bench.rs):
#   1,000 Docker workers (BENCH_SCALE_WORKERS; all but BENCH_SCALE_RUNNING, default 200,
#   exited) — list, create+stop, MAX_WORKERS admission, a reaper pass, 64 watchers joining
#   (time, engine lists, memory), event latency — then 1,000 pods on the Kubernetes stand-in
#   (BENCH_SCALE_PODS) and 200 tabs on the WezTerm stand-in (BENCH_SCALE_TABS). Every worker
#   it makes is removed at the end, also when it fails. About 15 minutes here.
#   --sizes: instead of all that, the stripped binary's size and each crate's share of its
#   code: the same release build, unstripped, in target/bench-sizes/, its function symbols
#   (nm) summed by the crate their name starts with (a generic function counts for the crate
#   that defines it, wherever it was instantiated; ring's C and assembly for ring). No engine.
# The engine: A2A_TEST_DOCKER_HOST, else the system engine, else (root + dockerd) a private one.
set -euo pipefail
scale=
if [ "${1:-}" = --scale ]; then
  scale=1
fi
cd "$(dirname "$0")/.."
if [ "${1:-}" = --sizes ]; then
  cargo build --release --locked --quiet --bin a2a-worker-controller
  stripped=$(wc -c <target/release/a2a-worker-controller)
  CARGO_TARGET_DIR=target/bench-sizes CARGO_PROFILE_RELEASE_STRIP=false \
    cargo build --release --locked --quiet --bin a2a-worker-controller
  echo "stripped binary: $stripped bytes ($(awk -v b="$stripped" 'BEGIN {printf "%.2f", b / 1048576}') MiB)"
  echo "code by crate (function symbols, bytes; the rest of the file is data, tables and headers):"
  nm --print-size --radix=d -C target/bench-sizes/release/a2a-worker-controller \
    | awk '$3 ~ /^[tTwW]$/ && NF >= 4 {
        name = $0; sub(/^[^ ]+ [^ ]+ [^ ]+ /, "", name)
        # The first path segment of the name (inside "<" for an impl, "<&" for a reference).
        sub(/^(<|&|mut |dyn |\(|\[)+/, "", name)
        if (name ~ /^ring_core_/ || name ~ /^(GFp|LIMBS|CRYPTO|OPENSSL)_/) crate = "ring"
        else if (match(name, /^[A-Za-z_][A-Za-z0-9_]*::/)) crate = substr(name, 1, RLENGTH - 2)
        else crate = "(C and other)"
        if (crate == "core" || crate == "alloc" || crate == "std" || crate == "panic_unwind" \
            || crate == "hashbrown" || crate == "std_detect" || crate == "addr2line" \
            || crate == "gimli" || crate == "miniz_oxide" || crate == "object" \
            || crate == "rustc_demangle" || crate == "adler2") crate = "std (core, alloc, std)"
        size[crate] += $2; total += $2
      }
      END {
        for (c in size) printf "%9d  %5.1f%%  %s\n", size[c], 100 * size[c] / total, c
        printf "%9d  100.0%%  all code\n", total
      }' | sort -rn
  exit 0
fi
cleanup=()
trap 'for c in "${cleanup[@]}"; do eval "$c" || true; done' EXIT
d=$(mktemp -d /tmp/a2a-bench-dockerd.XXXXXX)
cleanup+=("scripts/dockerd.sh stop $d; rm -rf $d 2>/dev/null")
A2A_TEST_DOCKER_HOST=$(scripts/dockerd.sh find "$d") \
  || { echo "bench.sh needs a Docker engine (set A2A_TEST_DOCKER_HOST)" >&2; exit 1; }
export A2A_TEST_DOCKER_HOST
DOCKER_HOST=$A2A_TEST_DOCKER_HOST scripts/build-worker-image.sh a2a-echo-worker:dev
export A2A_REQUIRE_DOCKER=1 LOAD_SECONDS=${LOAD_SECONDS:-60} LOAD_CLIENTS=${LOAD_CLIENTS:-64}
rows=$(mktemp)
cleanup+=("rm -f $rows")
row() { echo "ROW|$1|$2|$3" >>"$rows"; }
# ratio_row FIGURE A B TARGET: the row "×A/B (A vs B)".
ratio_row() { row "$1" "×$(python3 -c "print(f'{$2/$3:.2f}')") ($2 vs $3)" "$4"; }

table() {
  echo
  echo "$(date -u +%Y-%m-%d), $(nproc) cores, $(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo 2>/dev/null || uname -m)," \
    "engine $(DOCKER_HOST=$A2A_TEST_DOCKER_HOST docker version -f '{{.Server.Version}}' 2>/dev/null || echo unknown)"
  echo
  echo "| figure | measured | target |"
  echo "|---|---|---|"
  grep '^ROW|' "$rows" | awk -F'|' '{print "| " $2 " | " $3 " | " $4 " |"}'
}

cargo build --release --locked --quiet --bin a2a-worker-controller
# The Kubernetes stand-in's Python: the suite's venv (scripts/test.sh makes it, with the
# modules the stand-in needs), else the system's.
k8s_python=${A2A_TEST_K8S_PYTHON:-}
[ -n "$k8s_python" ] || { [ -x target/py-venv/bin/python ] && k8s_python=$PWD/target/py-venv/bin/python; } \
  || k8s_python=$(command -v python3)
if [ -n "$scale" ]; then
  # A part that fails still leaves the table of the rows measured before it.
  status=0
  A2A_TEST_K8S_PYTHON=$k8s_python \
    cargo test --release --locked --quiet --test integration scale_bench -- --ignored --nocapture --test-threads=1 2>&1 \
    | sed -E 's/^[.]+//' | grep -E '^(BENCH|ROW|test result|thread|stand-in)' | tee -a "$rows" | grep -v '^ROW' \
    || status=$?
  table
  exit "$status"
fi
cargo test --release --locked --quiet --test integration docker_bench -- --ignored --nocapture --test-threads=1 2>&1 \
  | sed -E 's/^[.]+//' | grep -E '^(BENCH|ROW|test result)' | tee -a "$rows" | grep -v '^ROW'
cargo test --release --locked --quiet --test integration egress_bench -- --ignored --nocapture --test-threads=1 2>&1 \
  | sed -E 's/^[.]+//' | grep -E '^(BENCH|ROW|test result|thread)' | tee -a "$rows" | grep -v '^ROW'

# The Agent Card against nginx and tiny_http, same bytes, same load.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wrk_rate() { wrk -t2 -c64 -d"${CARD_SECONDS:-5}s" "$@" | awk '/^Requests\/sec:/ {print $2}'; }
card_bench() {
  local dir=target/bench port cport nport tport rate nginx_rate tiny_rate
  mkdir -p "$dir"
  port=$(free_port)
  A2A_AUTH_TOKEN=bench-token-0123456789abcdef0123 target/release/a2a-worker-controller \
    -listen=127.0.0.1:"$port" -a2a-public-url=http://127.0.0.1:"$port" \
    -docker-host="$A2A_TEST_DOCKER_HOST" -worker-image=a2a-echo-worker:dev 2>/dev/null &
  cport=$!
  cleanup+=("kill $cport")
  for _ in $(seq 100); do curl -fs "http://127.0.0.1:$port/healthz" >/dev/null && break; sleep 0.05; done
  curl -fs "http://127.0.0.1:$port/.well-known/agent-card.json" -o "$dir/card.json"
  rate=$(wrk_rate "http://127.0.0.1:$port/.well-known/agent-card.json")
  echo "BENCH card: controller $rate requests/s ($(wc -c <"$dir/card.json") bytes)"

  nport=$(free_port)
  mkdir -p "$dir/nginx"
  cat >"$dir/nginx/nginx.conf" <<EOF
worker_processes auto;
pid $PWD/$dir/nginx/nginx.pid;
error_log stderr error;
events { worker_connections 1024; }
http {
  access_log off;
  keepalive_requests 1000000;
  server {
    listen 127.0.0.1:$nport;
    location = /.well-known/agent-card.json { default_type application/json; alias $PWD/$dir/card.json; }
  }
}
EOF
  nginx -p "$PWD/$dir/nginx" -c "$PWD/$dir/nginx/nginx.conf"
  cleanup+=("kill \$(cat $PWD/$dir/nginx/nginx.pid)")
  sleep 0.3
  nginx_rate=$(wrk_rate "http://127.0.0.1:$nport/.well-known/agent-card.json")
  echo "BENCH card: nginx $nginx_rate requests/s"
  ratio_row "Agent Card requests/s, 64 keep-alive connections (wrk): controller ÷ nginx" \
    "$rate" "$nginx_rate" "≥ ×0.7"

  # tiny_http: its own project, lockfile and target directory, never the product's.
  mkdir -p "$dir/tiny-http-card/src"
  cat >"$dir/tiny-http-card/Cargo.toml" <<'EOF'
[package]
name = "tiny-http-card"
version = "0.0.0"
edition = "2021"
publish = false
[workspace]
[dependencies]
tiny_http = "0.12"
[profile.release]
lto = true
codegen-units = 1
EOF
  cat >"$dir/tiny-http-card/src/main.rs" <<'EOF'
// Serves one file's bytes as application/json at every path, from 4 handler threads.
use std::sync::Arc;
fn main() {
    let mut args = std::env::args().skip(1);
    let addr = args.next().expect("address");
    let body = Arc::new(std::fs::read(args.next().expect("file")).expect("readable file"));
    let server = Arc::new(tiny_http::Server::http(addr).expect("listen"));
    let header = tiny_http::Header::from_bytes("Content-Type", "application/json").unwrap();
    let handlers: Vec<_> = (0..4)
        .map(|_| {
            let (server, body, header) = (server.clone(), body.clone(), header.clone());
            std::thread::spawn(move || {
                for request in server.incoming_requests() {
                    let response = tiny_http::Response::from_data(body.as_slice().to_vec())
                        .with_header(header.clone());
                    let _ = request.respond(response);
                }
            })
        })
        .collect();
    for h in handlers {
        let _ = h.join();
    }
}
EOF
  if (cd "$dir/tiny-http-card" && cargo build --release --quiet 2>/dev/null); then
    tport=$(free_port)
    "$dir/tiny-http-card/target/release/tiny-http-card" "127.0.0.1:$tport" "$dir/card.json" &
    cleanup+=("kill $!")
    sleep 0.3
    tiny_rate=$(wrk_rate "http://127.0.0.1:$tport/.well-known/agent-card.json")
    echo "BENCH card: tiny_http $tiny_rate requests/s"
    ratio_row "Agent Card requests/s: controller ÷ tiny_http 0.12, keep-alive" \
      "$rate" "$tiny_rate" "(reference)"
    # tiny_http writes a response in pieces without TCP_NODELAY: on a kept-alive connection
    # each answer waits for the client's delayed ACK (~40 ms). A new connection per request
    # does not wait, so that is measured too, for both.
    local close_rate tiny_close_rate
    close_rate=$(wrk_rate -H "Connection: close" "http://127.0.0.1:$port/.well-known/agent-card.json")
    tiny_close_rate=$(wrk_rate -H "Connection: close" "http://127.0.0.1:$tport/.well-known/agent-card.json")
    echo "BENCH card, a new connection per request: controller $close_rate, tiny_http $tiny_close_rate requests/s"
    ratio_row "Agent Card requests/s: controller ÷ tiny_http 0.12, a new connection per request" \
      "$close_rate" "$tiny_close_rate" "(reference)"
  else
    echo "BENCH card: tiny_http not built (needs crates.io); not measured"
  fi
}
if command -v wrk >/dev/null && command -v nginx >/dev/null; then
  card_bench
else
  echo "BENCH card: not measured (needs wrk and nginx: apt-get install wrk nginx-light)"
fi

if [ -n "$(DOCKER_HOST=$A2A_TEST_DOCKER_HOST docker images -q a2a-worker-controller:dev 2>/dev/null)" ] \
    || DOCKER_HOST=$A2A_TEST_DOCKER_HOST scripts/build-image.sh a2a-worker-controller a2a-worker-controller:dev >/dev/null; then
  size=$(DOCKER_HOST=$A2A_TEST_DOCKER_HOST docker image inspect -f '{{.Size}}' a2a-worker-controller:dev)
  row "controller image" "$size bytes" "≤ 5 MB"
fi

cargo test --release --locked --quiet --test integration load -- --ignored --nocapture 2>&1 \
  | grep -E '^(LOAD|test result)'
A2A_TEST_K8S_PYTHON=$k8s_python \
  cargo test --release --locked --quiet --test integration k8s_bench -- --ignored --nocapture --test-threads=1 2>&1 \
  | sed -E 's/^[.]+//' | grep -E '^(K8S|ROW|test result)' | tee -a "$rows" | grep -v '^ROW'
cargo test --release --locked --quiet --test integration local_bench -- --ignored --nocapture --test-threads=1 2>&1 \
  | sed -E 's/^[.]+//' | grep -E '^(ROW|test result)' | tee -a "$rows" | grep -v '^ROW'
cargo test --release --locked --quiet --test integration replicas_bench -- --ignored --nocapture --test-threads=1 2>&1 \
  | sed -E 's/^[.]+//' | grep -E '^(ROW|test result)' | tee -a "$rows" | grep -v '^ROW'

table
