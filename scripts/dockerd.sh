#!/usr/bin/env bash
# Starts or stops a private Docker engine (its own socket, data root, exec root and pid file)
# for tests, without touching a system engine.
#   scripts/dockerd.sh start DIR   # prints the DOCKER_HOST value once /_ping answers
#   scripts/dockerd.sh stop DIR
#   DOCKERD_OWN_BRIDGE=NAME:CIDR scripts/dockerd.sh start DIR
#                                  # an engine beside another one on this host: its own bridge
#                                  # (made here, removed at stop) and no iptables of its own
#                                  # (two engines share the host's docker0 and its nat DOCKER
#                                  # chain, which an engine's start rebuilds under the other)
#   scripts/dockerd.sh find DIR    # an engine for tests: A2A_TEST_DOCKER_HOST, else the system
#                                  # engine, else (root + dockerd) a private one started in DIR;
#                                  # prints its DOCKER_HOST value, or exits 3 when there is none
set -euo pipefail
cmd=${1:?start|stop}
dir=${2:?directory}
sock="$dir/docker.sock"
# Alive and not a zombie (a killed dockerd may stay unreaped).
running() { local st; st=$(ps -o stat= -p "$1" 2>/dev/null) && [ -n "$st" ] && [ "${st#Z}" = "$st" ]; }
ping_engine() { curl -sf --max-time 3 --unix-socket "${1#unix://}" http://docker/_ping >/dev/null 2>&1; }
case "$cmd" in
  find)
    if [ -n "${A2A_TEST_DOCKER_HOST:-}" ]; then
      ping_engine "$A2A_TEST_DOCKER_HOST" || { echo "no engine answers at $A2A_TEST_DOCKER_HOST" >&2; exit 1; }
      echo "$A2A_TEST_DOCKER_HOST"
    elif ping_engine unix:///var/run/docker.sock; then
      echo unix:///var/run/docker.sock
    elif [ "$(id -u)" = 0 ] && command -v dockerd >/dev/null; then
      exec "$0" start "$dir"
    else
      exit 3
    fi
    ;;
  start)
    command -v dockerd >/dev/null || { echo "dockerd not installed (apt-get install docker.io)" >&2; exit 1; }
    mkdir -p "$dir/data" "$dir/exec"
    # A dockerd that was killed leaves its pid file behind; it refuses to start over one.
    if [ -f "$dir/docker.pid" ] && ! running "$(cat "$dir/docker.pid")"; then
      rm -f "$dir/docker.pid"
      # Its managed containerd may outlive it and hold the socket the new one needs.
      cpid_file="$dir/exec/containerd/containerd.pid"
      if [ -f "$cpid_file" ]; then
        cpid=$(cat "$cpid_file")
        if running "$cpid"; then
          kill -9 "$cpid" 2>/dev/null || true
          for _ in $(seq 1 50); do running "$cpid" || break; sleep 0.1; done
        fi
      fi
      rm -f "$dir"/exec/containerd/containerd.pid "$dir"/exec/containerd/containerd*.sock*
    fi
    net=()
    if [ -n "${DOCKERD_OWN_BRIDGE:-}" ]; then
      br=${DOCKERD_OWN_BRIDGE%%:*}; cidr=${DOCKERD_OWN_BRIDGE#*:}
      if ! ip link show "$br" >/dev/null 2>&1; then
        ip link add name "$br" type bridge
        ip addr add "$cidr" dev "$br"
      fi
      ip link set "$br" up
      echo "$br" > "$dir/bridge"
      # Published ports still work (docker-proxy, the userland proxy, on the host address).
      net=(--bridge "$br" --iptables=false --ip6tables=false)
    fi
    # A short exec root path: containerd's socket paths must stay under 108 bytes. A session of
    # its own: a terminal's Ctrl-C to whatever started it (run.sh) never reaches the engine,
    # which stops only when asked (scripts/dockerd.sh stop).
    # A second runtime, runc under another name: a template's `runtime` is proven against it
    # (Debian's crun cannot run on this machine's hybrid cgroups).
    runtimes=()
    if runc_path=$(command -v runc); then runtimes=(--add-runtime "runc-alt=$runc_path"); fi
    nohup setsid dockerd --host "unix://$sock" --data-root "$dir/data" --exec-root "$dir/exec" \
      --pidfile "$dir/docker.pid" "${net[@]}" "${runtimes[@]}" \
      >>"$dir/dockerd.log" 2>&1 &
    # (A background job of this script never leads a process group, so setsid execs dockerd
    # itself: $! is the engine.)
    pid=$!
    for _ in $(seq 1 150); do
      running "$pid" || break
      if ping_engine "unix://$sock"; then
        echo "unix://$sock"
        exit 0
      fi
      sleep 0.2
    done
    echo "dockerd did not come up; its log:" >&2
    tail -n 30 "$dir/dockerd.log" >&2
    exit 1
    ;;
  stop)
    if [ -f "$dir/docker.pid" ]; then
      pid=$(cat "$dir/docker.pid")
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 1 100); do running "$pid" || break; sleep 0.1; done
      kill -9 "$pid" 2>/dev/null || true
      rm -f "$dir/docker.pid"
    fi
    # What an engine that was killed leaves running, all named by its exec root: its managed
    # containerd and the container shims (each with the container processes under it).
    for p in $(pgrep -f -- "$dir/exec/" || true); do
      for c in $(pgrep -P "$p" || true); do kill -9 "$c" 2>/dev/null || true; done
      kill -9 "$p" 2>/dev/null || true
    done
    # What the engine mounted under DIR (its storage, bind-mounted onto itself) stays mounted
    # after it is gone; deepest first, so that DIR can be removed.
    awk -v d="$dir/" 'index($2, d) == 1 {print $2}' /proc/mounts | sort -r | while read -r m; do
      umount -l "$m" 2>/dev/null || true
    done
    if [ -f "$dir/bridge" ]; then
      ip link delete "$(cat "$dir/bridge")" 2>/dev/null || true
      rm -f "$dir/bridge"
    fi
    ;;
  *) echo "usage: $0 start|stop DIR" >&2; exit 2 ;;
esac
