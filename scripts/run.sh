#!/usr/bin/env bash
# Starts the controller doing its main job: the docker backend with the echo worker image.
# Builds both, generates a controller token (kept in a 0600 file, never printed), prints curl
# commands that create a worker, talk to it directly, list and stop, and the status page's
# address, then runs in the foreground. Ctrl-C (or SIGTERM) stops the controller; workers keep
# running on an engine that was already there, and a private dockerd this script started is
# stopped with them unless KEEP_ENGINE=1.
#
# Environment: PORT (default 8080), DOCKER_HOST (default: the system engine; on a Debian
# machine run as root without a reachable engine, docker.io is installed and a private
# dockerd is started in RUN_ENGINE_DIR, default /tmp/a2a-run-dockerd), A2A_AUTH_TOKEN (default:
# generated), KEEP_ENGINE=1, WORKER_TEMPLATES_FILE (a template whose egress is "none" or a list
# makes this script start the egress proxy beside the controller, on the internal network
# EGRESS_NETWORK, default a2a-egress, made with EGRESS_SUBNET, default 10.231.0.0/24; Linux only).
set -euo pipefail
cd "$(dirname "$0")/.."
die() { echo "run.sh: $*" >&2; exit 1; }

port=${PORT:-8080}
state=target/run
mkdir -p "$state"

engine_up() { docker info >/dev/null 2>&1; }
own_engine=
if ! engine_up; then
  if [ "$(uname -s)" = Darwin ]; then
    die "no Docker engine answers: start Docker Desktop (or set DOCKER_HOST) and run again"
  fi
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null && ! command -v dockerd >/dev/null; then
    echo "run.sh: installing Debian's docker.io" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io >/dev/null
  fi
  if ! engine_up && [ "$(id -u)" = 0 ] && command -v dockerd >/dev/null; then
    dir=${RUN_ENGINE_DIR:-/tmp/a2a-run-dockerd}
    echo "run.sh: starting a private dockerd in $dir" >&2
    scripts/dockerd.sh stop "$dir" || true
    export DOCKER_HOST=$(scripts/dockerd.sh start "$dir")
    own_engine=$dir
  fi
  engine_up || die "no Docker engine answers at ${DOCKER_HOST:-/var/run/docker.sock}: install and start Docker, or set DOCKER_HOST"
fi
export DOCKER_HOST=${DOCKER_HOST:-unix:///var/run/docker.sock}

echo "run.sh: building the controller and the worker image" >&2
cargo build --release --locked --quiet --bin a2a-worker-controller
scripts/build-worker-image.sh a2a-echo-worker:dev >&2

token_file="$PWD/$state/a2a-auth-token"
if [ -n "${A2A_AUTH_TOKEN:-}" ]; then
  (umask 077; printf '%s' "$A2A_AUTH_TOKEN" >"$token_file")
elif [ ! -s "$token_file" ]; then
  (umask 077; head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$token_file")
fi
export A2A_AUTH_TOKEN=$(cat "$token_file")
export LISTEN=127.0.0.1:$port
export A2A_PUBLIC_URL=http://127.0.0.1:$port
export WORKER_IMAGE=a2a-echo-worker:dev
export BACKEND=docker

ctl=http://127.0.0.1:$port
# A fenced template (docs/egress.md): its workers' only way out is the egress proxy, which runs
# here on the host's address on the internal network, beside the controller.
proxy_pid=
if [ -n "${WORKER_TEMPLATES_FILE:-}" ] && grep -Eq '"egress"[[:space:]]*:[[:space:]]*(\[|"none")' "$WORKER_TEMPLATES_FILE"; then
  [ "$(uname -s)" != Darwin ] || die "a fenced template needs a Linux engine: Docker Desktop does not route to container addresses (docs/egress.md)"
  net=${EGRESS_NETWORK:-a2a-egress}
  if ! docker network inspect "$net" >/dev/null 2>&1; then
    echo "run.sh: making the internal network $net for fenced workers" >&2
    docker network create --internal --subnet "${EGRESS_SUBNET:-10.231.0.0/24}" "$net" >/dev/null
  fi
  subnet=$(docker network inspect -f '{{(index .IPAM.Config 0).Subnet}}' "$net")
  gateway=$(docker network inspect -f '{{(index .IPAM.Config 0).Gateway}}' "$net")
  [ -n "$gateway" ] || gateway=$(python3 -c "import ipaddress,sys; print(next(ipaddress.ip_network(sys.argv[1]).hosts()))" "$subnet")
  export EGRESS_NETWORK=$net EGRESS_PROXY_URL=http://$gateway:8790
  EGRESS_LISTEN=$gateway:8790 EGRESS_CONTROLLER_URL=$ctl target/release/a2a-worker-controller egress &
  proxy_pid=$!
  echo "run.sh: the egress proxy listens on $gateway:8790 (fenced workers sit on $net)" >&2
fi
reply="$PWD/$state/create-reply.json"
rpc() { # the JSON-RPC body of a SendMessage carrying one data part
  printf '{"jsonrpc":"2.0","id":"1","method":"SendMessage","params":{"message":{"messageId":"1","role":"ROLE_USER","parts":[{"data":%s}]}}}' "$1"
}
cat <<EOT

The controller runs at $ctl (token in $token_file).
Status page: $ctl/ui (sign in with that token). Ctrl-C stops the controller${own_engine:+ and the private dockerd (KEEP_ENGINE=1 keeps it)}.
In another terminal:
--- commands ---
# create a worker for task "demo" (the reply holds the worker's URL and its own token)
curl -s $ctl/a2a -H "Authorization: Bearer \$(cat $token_file)" -H 'content-type: application/json' -d '$(rpc '{"operation":"create","task":"demo"}')' > $reply; cat $reply; echo
# talk to the worker directly, with its own URL and token
curl -s "\$(sed -n 's/.*"a2a_url":"\([^"]*\)".*/\1/p' $reply)" -H "Authorization: Bearer \$(sed -n 's/.*"token":"\([^"]*\)".*/\1/p' $reply)" -H 'content-type: application/json' -d '{"jsonrpc":"2.0","id":"2","method":"SendMessage","params":{"message":{"messageId":"2","role":"ROLE_USER","parts":[{"text":"hello worker"}]}}}'; echo
# list the workers
curl -s $ctl/a2a -H "Authorization: Bearer \$(cat $token_file)" -H 'content-type: application/json' -d '$(rpc '{"operation":"list"}')'; echo
# stop the worker
curl -s $ctl/a2a -H "Authorization: Bearer \$(cat $token_file)" -H 'content-type: application/json' -d "\$(printf '$(rpc '{"operation":"stop","worker_id":"%s"}')' "\$(sed -n 's/.*"worker_id":"\([^"]*\)".*/\1/p' $reply)")"; echo
--- end ---

EOT
target/release/a2a-worker-controller &
pid=$!
# Started in the background by a script, the controller ignores the terminal's SIGINT: Ctrl-C
# reaches this script, which asks the controller to stop as SIGTERM would.
trap 'trapped=1; kill -TERM "$pid" $proxy_pid 2>/dev/null || true' INT TERM
# A wait the trap cuts short answers 130 whether or not the controller has ended meanwhile:
# wait again for the controller's own status (127: it was already collected).
rc=0
while :; do
  trapped=
  wait "$pid" && status=0 || status=$?
  [ "$status" = 127 ] && break
  rc=$status
  [ -n "$trapped" ] || break
done
if [ -n "$proxy_pid" ]; then
  kill -TERM "$proxy_pid" 2>/dev/null || true
  wait "$proxy_pid" 2>/dev/null || true
fi
if [ -n "$own_engine" ]; then
  if [ "${KEEP_ENGINE:-}" = 1 ]; then
    echo "run.sh: the private dockerd keeps running (KEEP_ENGINE=1): DOCKER_HOST=$DOCKER_HOST; scripts/dockerd.sh stop $own_engine stops it" >&2
  else
    scripts/dockerd.sh stop "$own_engine"
    rm -rf "$own_engine"
    echo "run.sh: stopped the private dockerd in $own_engine and its workers" >&2
  fi
fi
exit "$rc"
