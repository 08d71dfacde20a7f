#!/usr/bin/env bash
# Audits the dependency graph with cargo-deny (cargo install --locked cargo-deny) against the
# reviewed policy in scripts/deny.toml: lists every crate of the normal graph (build
# dependencies included, dev-dependencies not) with its version and licenses, then fails when a
# crate is not in the reviewed allow-list (or is outside its reviewed versions), when a license
# is outside the allowed set, or when a crate comes from anywhere but crates.io.
# A2A_AUDIT_ADVISORIES=1 also checks the RustSec advisory database (that needs the network).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v cargo-deny >/dev/null; then
  echo "audit: cargo-deny is not installed (cargo install --locked cargo-deny)" >&2
  exit 1
fi
deny() { cargo-deny --locked --offline --config scripts/deny.toml "$@"; }
# cargo-deny reads `cargo metadata`, which wants every package of the lock file on disk, also
# those of other platforms that no build here downloads (wasi, windows-*): fetch them first
# (a no-op once they are there; on a fresh machine the build alone leaves them missing).
cargo fetch --locked --quiet
echo "audit: $(cargo-deny --version); the normal dependency graph (crate@version (licenses): licenses):"
deny list --layout crate | sed 's/^/  /'
echo "audit: $(deny list --layout crate | wc -l | tr -d ' ') crates"
deny check --hide-inclusion-graph licenses bans sources
if [ "${A2A_AUDIT_ADVISORIES:-}" = 1 ]; then
  cargo-deny --locked --config scripts/deny.toml check advisories
fi
