#!/usr/bin/env bash
# Builds one of this crate's binaries statically and packs it into a FROM scratch image, with
# no registry involved.   scripts/build-image.sh BINARY TAG [USER]
#   BINARY: a2a-echo-worker | a2a-worker-controller;  USER: the image's user (default: root)
# Talks to the engine DOCKER_HOST names (or the default socket).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:?binary}
tag=${2:?tag}
user=${3:-0:0}
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT

case "$(uname -s)" in
  Linux)
    target=$(rustc -vV | sed -n 's/^host: //p')
    # glibc, statically linked: runs in an empty image.
    RUSTFLAGS="-C target-feature=+crt-static" \
      cargo build --release --locked --quiet --target "$target" --bin "$bin"
    cp "target/$target/release/$bin" "$ctx/app"
    cat >"$ctx/Dockerfile" <<DOCKERFILE
FROM scratch
COPY app /$bin
USER $user
ENTRYPOINT ["/$bin"]
DOCKERFILE
    ;;
  Darwin)
    # Docker Desktop runs Linux containers: build the Linux binary in a Rust image.
    git ls-files -z | tar --null -T - -cf - | tar -C "$ctx" -xf -
    cat >"$ctx/Dockerfile" <<DOCKERFILE
FROM rust:1-bookworm AS build
WORKDIR /src
COPY . .
RUN RUSTFLAGS="-C target-feature=+crt-static" cargo build --release --locked \\
      --target "\$(rustc -vV | sed -n 's/^host: //p')" --bin $bin \\
 && cp target/*/release/$bin /app
FROM scratch
COPY --from=build /app /$bin
USER $user
ENTRYPOINT ["/$bin"]
DOCKERFILE
    ;;
  *) echo "unsupported system $(uname -s)" >&2; exit 1 ;;
esac

if ! docker build -q -t "$tag" "$ctx" >"$ctx/build.log" 2>&1; then
  cat "$ctx/build.log" >&2
  exit 1
fi
echo "built $tag ($(docker image inspect -f '{{.Size}}' "$tag") bytes)"
