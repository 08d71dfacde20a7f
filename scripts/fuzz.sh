#!/usr/bin/env bash
# Runs every cargo-fuzz target for SECONDS each (default 60), starting from the seeds in
# fuzz/seeds/ plus the corpus kept in fuzz/corpus/ (not committed). A crash stops the run with
# the input saved under fuzz/artifacts/<target>/; turn it into a regression test.
#   scripts/fuzz.sh [SECONDS] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
shift || true
command -v cargo-fuzz >/dev/null || { echo "cargo-fuzz is not installed: cargo install cargo-fuzz --locked" >&2; exit 1; }
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=($(cargo +nightly fuzz list --fuzz-dir fuzz))
for t in "${targets[@]}"; do
  mkdir -p "fuzz/corpus/$t"
  echo "== fuzz $t for ${secs}s"
  log=$(mktemp)
  rc=0
  cargo +nightly fuzz run --fuzz-dir fuzz "$t" "fuzz/corpus/$t" "fuzz/seeds/$t" -- \
    -max_total_time="$secs" -max_len=65536 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    >"$log" 2>&1 || rc=$?
  grep -E "^(stat::number_of_executed_units|stat::peak_rss_mb|SUMMARY|Test unit written)" "$log" || true
  if [ "$rc" != 0 ] || [ -n "$(ls -A "fuzz/artifacts/$t" 2>/dev/null)" ]; then
    tail -n 40 "$log" >&2
    if [ -n "$(ls -A "fuzz/artifacts/$t" 2>/dev/null)" ]; then
      echo "fuzz target $t found crashing inputs in fuzz/artifacts/$t" >&2
    else
      echo "fuzz target $t failed (exit $rc) before finding anything: see above" >&2
    fi
    rm -f "$log"
    exit 1
  fi
  rm -f "$log"
done
echo "fuzzing: no crashes"
