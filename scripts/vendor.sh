#!/usr/bin/env bash
# Prepares an offline build: every crate Cargo.lock names, downloaded once (with network) into a
# directory outside the repository, checksummed, plus the cargo configuration that points at it.
#
#   scripts/vendor.sh DIR
#   cargo build --release --offline --locked --config DIR/cargo-config.toml
#
# The build then needs no network and no registry cache (CARGO_HOME may be empty). DIR can be
# reviewed, archived and moved to the build machine; the configuration names DIR by its absolute
# path, so move it to the same path or edit the one `directory =` line.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:?usage: scripts/vendor.sh DIR (outside the repository)}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
case "$dir/" in
  "$(pwd)/"*) echo "vendor.sh: $dir is inside the repository; use a directory outside it" >&2; exit 1 ;;
esac
cargo vendor --locked --versioned-dirs --quiet "$dir/crates" >/dev/null
cat >"$dir/cargo-config.toml" <<CONFIG
# Written by scripts/vendor.sh: build from the vendored crates only.
[source.crates-io]
replace-with = "vendored-sources"

[source.vendored-sources]
directory = "$dir/crates"

[net]
offline = true
CONFIG
echo "vendored $(ls "$dir/crates" | wc -l | tr -d ' ') crates into $dir/crates"
echo "build with: cargo build --release --offline --locked --config $dir/cargo-config.toml"
