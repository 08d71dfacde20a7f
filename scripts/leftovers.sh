#!/usr/bin/env bash
# What a test run leaves behind, against a snapshot taken before it started: processes of the
# kinds the suite starts (engines and their shims, stand-ins, controllers, workers, browsers),
# containers and networks on its engines, and entries under /tmp named like its own.
#
#   scripts/leftovers.sh snapshot DIR [DOCKER_HOST...]   # what is there now, kept in DIR
#   scripts/leftovers.sh containers DIR [DOCKER_HOST...] # containers and networks made since
#   scripts/leftovers.sh processes DIR [DOCKER_HOST...]  # processes started since, /tmp entries;
#                                     # the helpers (conmon, shims) of the engines named here,
#                                     # which the caller did not start, are those engines' own
#
# The two checks list what they find, remove it (so the next run starts clean) and exit 1;
# they exit 0 when nothing is left.
set -euo pipefail
cmd=${1:?snapshot|containers|processes}
dir=${2:?directory}
shift 2

# The programs the suite starts, by command name (ps's comm, at most 15 characters) or, for
# scripts run by an interpreter, by a word of their arguments.
comm_re='^(dockerd|containerd|containerd-shim.*|podman|conmon|catatonit|a2a-worker-cont.*|a2a-echo-worker|wezterm-standin|panicking-handl.*|chromium|chrome|chrome_crashpad.*|headless_shell)$'
args_re='(k8s_standin\.py|oidc_issuer\.py|early_answers\.py|sdk_interop\.(py|mjs)|ui\.mjs|install_test\.py)'

helper_re='^(dockerd|containerd|containerd-shim.*|podman|conmon|catatonit)$'
outside=() # the directories of engines someone else started: their helpers are theirs
procs() { # "pid comm" of the suite's kinds of process that still run (a zombie is over)
  ps -eo pid=,stat=,comm=,args= | while read -r pid stat comm args; do
    [[ $stat == Z* ]] && continue
    # An outside engine's own helpers name its directory; a controller naming its socket
    # (-docker-host=unix://DIR/docker.sock) is still the run's.
    if [[ $comm =~ $helper_re ]]; then
      for d in ${outside[@]+"${outside[@]}"}; do [[ $args == *"$d/"* ]] && continue 2; done
    fi
    if [[ $comm =~ $comm_re ]] || [[ $args =~ $args_re ]]; then echo "$pid $comm"; fi
  done
}
tmp_entries() { ls -d /tmp/a2a-* /tmp/tmp.* 2>/dev/null || true; }
engine_items() { # "HOST kind id name" for every container and network on the engine HOST
  local host=$1
  docker -H "$host" ps -a --no-trunc --format '{{.ID}} {{.Names}}' 2>/dev/null \
    | sed "s|^|$host container |" || true
  docker -H "$host" network ls --no-trunc --format '{{.ID}} {{.Name}}' 2>/dev/null \
    | sed "s|^|$host network |" || true
}

case "$cmd" in
  snapshot)
    mkdir -p "$dir"
    procs | awk '{print $1}' >"$dir/pids"
    tmp_entries >"$dir/tmp"
    : >"$dir/engine"
    for host in "$@"; do engine_items "$host" >>"$dir/engine"; done
    ;;
  containers)
    found=0
    for host in "$@"; do
      while read -r h kind id name; do
        grep -q " $id " "$dir/engine" 2>/dev/null && continue
        # An engine's own networks, there from its start.
        [ "$kind" = network ] && [[ $name =~ ^(bridge|host|none|podman)$ ]] && continue
        echo "left behind: $kind $name ($id) on $h" >&2
        found=1
        if [ "$kind" = container ]; then
          docker -H "$h" rm -f "$id" >/dev/null 2>&1 || true
        else
          docker -H "$h" network rm "$id" >/dev/null 2>&1 || true
        fi
      done < <(engine_items "$host")
    done
    exit "$found"
    ;;
  processes)
    for host in "$@"; do d=${host#unix://}; outside+=("${d%/*}"); done
    found=0
    # Processes that are on their way out get a moment to go.
    for _ in $(seq 1 30); do
      # (FILENAME, not NR==FNR: with no process in the snapshot, NR==FNR holds for every line.)
      new=$(procs | awk 'FILENAME == ARGV[1] {seen[$1]; next} !($1 in seen)' "$dir/pids" -)
      [ -z "$new" ] && break
      sleep 0.2
    done
    if [ -n "$new" ]; then
      found=1
      while read -r pid comm; do
        echo "left behind: process $pid ($comm): $(ps -o args= -p "$pid" 2>/dev/null | cut -c1-160)" >&2
      done <<<"$new"
      while read -r pid _; do kill -9 "$pid" 2>/dev/null || true; done <<<"$new"
    fi
    while read -r entry; do
      grep -qxF "$entry" "$dir/tmp" && continue
      echo "left behind: $entry" >&2
      found=1
      rm -rf "$entry"
    done < <(tmp_entries)
    exit "$found"
    ;;
  *) echo "usage: $0 snapshot|containers|processes DIR [DOCKER_HOST...]" >&2; exit 2 ;;
esac
