#!/usr/bin/env bash
# Starts or stops a private Docker engine (its own socket, data root, exec root and pid file)
# for tests, without touching a system engine.
#   scripts/dockerd.sh start DIR   # prints the DOCKER_HOST value once /_ping answers
#   scripts/dockerd.sh stop DIR
set -euo pipefail
cmd=${1:?start|stop}
dir=${2:?directory}
sock="$dir/docker.sock"
case "$cmd" in
  start)
    command -v dockerd >/dev/null || { echo "dockerd not installed (apt-get install docker.io)" >&2; exit 1; }
    mkdir -p "$dir/data" "$dir/exec"
    # A short exec root path: containerd's socket paths must stay under 108 bytes.
    nohup dockerd --host "unix://$sock" --data-root "$dir/data" --exec-root "$dir/exec" \
      --pidfile "$dir/docker.pid" \
      >"$dir/dockerd.log" 2>&1 &
    for _ in $(seq 1 150); do
      if curl -sf --unix-socket "$sock" http://docker/_ping >/dev/null 2>&1; then
        echo "unix://$sock"
        exit 0
      fi
      sleep 0.2
    done
    echo "dockerd did not answer within 30s; its log:" >&2
    tail -n 30 "$dir/dockerd.log" >&2
    exit 1
    ;;
  stop)
    if [ -f "$dir/docker.pid" ]; then
      pid=$(cat "$dir/docker.pid")
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -9 "$pid" 2>/dev/null || true
      rm -f "$dir/docker.pid"
    fi
    ;;
  *) echo "usage: $0 start|stop DIR" >&2; exit 2 ;;
esac
