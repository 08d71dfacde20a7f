#!/usr/bin/env bash
# Builds a2a-echo-worker as a static binary and packs it into a FROM scratch image, with no
# registry involved.   scripts/build-worker-image.sh [TAG]   (default a2a-echo-worker:dev)
# Talks to the engine DOCKER_HOST names (or the default socket).
set -euo pipefail
cd "$(dirname "$0")/.."
tag=${1:-a2a-echo-worker:dev}
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT

case "$(uname -s)" in
  Linux)
    target=$(rustc -vV | sed -n 's/^host: //p')
    # glibc, statically linked: runs in an empty image.
    RUSTFLAGS="-C target-feature=+crt-static" \
      cargo build --release --locked --quiet --target "$target" --bin a2a-echo-worker
    cp "target/$target/release/a2a-echo-worker" "$ctx/"
    cat >"$ctx/Dockerfile" <<'DOCKERFILE'
FROM scratch
COPY a2a-echo-worker /a2a-echo-worker
USER 65534:65534
EXPOSE 9090
ENTRYPOINT ["/a2a-echo-worker"]
DOCKERFILE
    ;;
  Darwin)
    # Docker Desktop runs Linux containers: build the Linux binary in a Rust image.
    git ls-files -z | tar --null -T - -cf - | tar -C "$ctx" -xf -
    cat >"$ctx/Dockerfile" <<'DOCKERFILE'
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN RUSTFLAGS="-C target-feature=+crt-static" cargo build --release --locked \
      --target "$(rustc -vV | sed -n 's/^host: //p')" --bin a2a-echo-worker \
 && cp target/*/release/a2a-echo-worker /a2a-echo-worker
FROM scratch
COPY --from=build /a2a-echo-worker /a2a-echo-worker
USER 65534:65534
EXPOSE 9090
ENTRYPOINT ["/a2a-echo-worker"]
DOCKERFILE
    ;;
  *) echo "unsupported system $(uname -s)" >&2; exit 1 ;;
esac

if ! docker build -q -t "$tag" "$ctx" >"$ctx/build.log" 2>&1; then
  cat "$ctx/build.log" >&2
  exit 1
fi
echo "built $tag ($(docker image inspect -f '{{.Size}}' "$tag") bytes)"
