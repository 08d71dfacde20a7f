#!/usr/bin/env bash
# Runs every test: formatting, lints, unit and integration tests (including the official
# Python A2A SDK interop test, in a virtualenv created here when missing).
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n== %s\n' "$*"; }

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy"
cargo clippy --all-targets --locked -- -D warnings

step "Python A2A SDK (a2a-sdk==1.3.0) in target/py-venv"
venv=target/py-venv
if ! "$venv/bin/python" -c 'import a2a, httpx' 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check 'a2a-sdk==1.3.0' httpx
fi
export A2A_TEST_PYTHON="$PWD/$venv/bin/python"
export A2A_REQUIRE_PYTHON=1

step "cargo test"
cargo test --locked --all-targets -- --test-threads=4

echo
echo "all tests passed"
