#!/usr/bin/env bash
# Builds the echo worker into a FROM scratch image (default tag a2a-echo-worker:dev), no registry.
set -euo pipefail
exec "$(dirname "$0")/build-image.sh" a2a-echo-worker "${1:-a2a-echo-worker:dev}" 65534:65534
