#!/usr/bin/env bash
# Starts or stops a private Podman service speaking the Docker-compatible API (own socket,
# storage and run root), for running the Docker suite against Podman.
#   scripts/podman.sh start DIR   # prints the socket URL once /_ping answers
#   scripts/podman.sh stop DIR
# Sandbox quirks (see engines.md): the runc runtime and explicit ulimits; `Init: true` needs
# catatonit. Needs: apt-get install podman runc catatonit
set -euo pipefail
cmd=${1:?start|stop}
dir=${2:?directory}
sock="$dir/podman.sock"
case "$cmd" in
  start)
    command -v podman >/dev/null || { echo "podman not installed (apt-get install podman runc catatonit)" >&2; exit 1; }
    mkdir -p "$dir/storage" "$dir/run"
    cat >"$dir/containers.conf" <<'CONF'
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]
[engine]
runtime = "runc"
CONF
    CONTAINERS_CONF="$dir/containers.conf" nohup podman --root "$dir/storage" --runroot "$dir/run" \
      system service --time=0 "unix://$sock" >>"$dir/podman.log" 2>&1 &
    echo $! >"$dir/podman.pid"
    for _ in $(seq 1 100); do
      if curl -sf --unix-socket "$sock" http://d/_ping >/dev/null 2>&1; then
        # Group access, as podman.socket's SocketMode=0660 and dockerd's socket give it: an
        # unprivileged controller container reaches the engine through the socket's group.
        chmod 0660 "$sock"
        echo "unix://$sock"
        exit 0
      fi
      sleep 0.2
    done
    echo "podman service did not answer; its log:" >&2
    tail -n 30 "$dir/podman.log" >&2
    exit 1
    ;;
  stop)
    if [ -f "$dir/podman.pid" ]; then
      curl -sf --unix-socket "$sock" -X POST "http://d/containers/prune" >/dev/null 2>&1 || true
      kill "$(cat "$dir/podman.pid")" 2>/dev/null || true
      rm -f "$dir/podman.pid"
    fi
    # Container monitors (conmon) outlive the service; each names this storage in its
    # arguments. End them, with whatever still runs under them.
    for p in $(pgrep -f -- "$dir/" || true); do
      for c in $(pgrep -P "$p" || true); do kill -9 "$c" 2>/dev/null || true; done
      kill -9 "$p" 2>/dev/null || true
    done
    # What the engine mounted under DIR (its storage, bind-mounted onto itself) stays mounted
    # after it is gone; deepest first, so that DIR can be removed.
    awk -v d="$dir/" 'index($2, d) == 1 {print $2}' /proc/mounts | sort -r | while read -r m; do
      umount -l "$m" 2>/dev/null || true
    done
    ;;
  *) echo "usage: $0 start|stop DIR" >&2; exit 2 ;;
esac
