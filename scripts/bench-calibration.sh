#!/usr/bin/env bash
# The calibration benchmark: sy-fit, sy-margin and sy-select (defaults) on generated records, each
# under /usr/bin/time (wall seconds, user + sys CPU seconds, peak resident KB).
#
#   scripts/bench-calibration.sh [CONDITIONS] [BIN_DIR ...]
#
# CONDITIONS (default 10000) × 50 repeats × 2 candidates load-phase records plus the Q grid
# (10000 → 1,000,200 records). Every BIN_DIR (default: this checkout's release build) is timed on
# the same records in turn, so two builds (e.g. before and after a change) are compared side by
# side in one run.
set -euo pipefail
cd "$(dirname "$0")/.."
conditions=${1:-10000}
shift || true
if [ $# -eq 0 ]; then
  cargo build --release -q -p sy-fit -p sy-margin -p sy-select
  set -- "${CARGO_TARGET_DIR:-$PWD/target}/release"
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/sy-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT
"$1/sy-fit" gen-synthetic --out "$work/records.parquet" --conditions "$conditions" --repeats 50 -q
echo "records: $work/records.parquet ($(du -h "$work/records.parquet" | cut -f1)); load average: $(cut -d' ' -f1-3 /proc/loadavg)"
for bin in "$@"; do
  run="$work/run-$(echo "$bin" | tr '/' '_')"
  mkdir -p "$run"
  for tool in fit margin select; do
    extra=()
    [ "$tool" = fit ] && extra=(--seed 7)
    /usr/bin/time -f "$bin sy-$tool: %e s wall, %U + %S s CPU, %M KB peak" \
      "$bin/sy-$tool" --run-dir "$run" --records "$work/records.parquet" --no-progress -q "${extra[@]}" 2>&1 | tail -1
  done
done
