#!/bin/sh
# The LaunchAgent's program: loads the controller's secrets, then execs the controller (so
# launchd supervises the controller itself). scripts/install.sh installs it beside the binary.
#
# Secrets come from A2A_SECRETS_COMMAND when it is set (a command printing KEY=VALUE lines, e.g.
# one that asks your secret store), else from the file A2A_SECRETS_FILE (default
# ~/.config/a2a-worker-controller/secrets.env, KEY=VALUE lines, mode 0600 or stricter). Only
# variable names are accepted as keys; nothing is evaluated, nothing is printed.
set -eu
bin_dir=$(cd "$(dirname "$0")" && pwd)
secrets_file=${A2A_SECRETS_FILE:-$HOME/.config/a2a-worker-controller/secrets.env}

load() {
  while IFS= read -r line || [ -n "$line" ]; do
    case "$line" in '' | '#'*) continue ;; esac
    key=${line%%=*}
    value=${line#*=}
    case "$key" in
      *[!A-Za-z0-9_]* | [0-9]* | '')
        echo "a2a-worker-controller.sh: ignoring a secrets line that is not KEY=VALUE" >&2
        continue ;;
    esac
    export "$key=$value"
  done
}

if [ -n "${A2A_SECRETS_COMMAND:-}" ]; then
  out=$(sh -c "$A2A_SECRETS_COMMAND") || {
    echo "a2a-worker-controller.sh: A2A_SECRETS_COMMAND failed; not starting" >&2
    exit 1
  }
  load <<SECRETS
$out
SECRETS
elif [ -f "$secrets_file" ]; then
  mode=$(ls -ln "$secrets_file" | cut -c5-10)
  if [ "$mode" != "------" ]; then
    echo "a2a-worker-controller.sh: $secrets_file is readable by others; chmod 600 it. Not starting" >&2
    exit 1
  fi
  load <"$secrets_file"
else
  echo "a2a-worker-controller.sh: no secrets: set A2A_SECRETS_COMMAND or create $secrets_file (mode 0600)" >&2
  exit 1
fi
exec "$bin_dir/a2a-worker-controller"
