#!/usr/bin/env bash
# The calibration benchmark: sy-fit, sy-margin and sy-select (defaults) on generated records, each
# under /usr/bin/time (wall seconds, user + sys CPU seconds, peak resident KB).
#
#   [ROUNDS=N] scripts/bench-calibration.sh [CONDITIONS] [BIN_DIR ...]
#
# CONDITIONS (default 10000) × 50 repeats × 2 candidates load-phase records plus the Q grid
# (10000 → 1,000,200 records). Every BIN_DIR (default: this checkout's release build) is timed on
# the same records in turn, so two builds (e.g. before and after a change) are compared side by
# side in one run; with ROUNDS (default 1) the builds take turns that many times, each round in
# fresh run directories, and each build's total of the three tools is printed per round, then
# its lowest, median and highest over the rounds. Each run directory is deleted once timed.
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
for round in $(seq "${ROUNDS:-1}"); do
  for bin in "$@"; do
    run="$work/run-$round-$(echo "$bin" | tr '/' '_')"
    mkdir -p "$run"
    total=0
    for tool in fit margin select; do
      extra=()
      [ "$tool" = fit ] && extra=(--seed 7)
      /usr/bin/time -o "$run/time" -f "%e s wall, %U + %S s CPU, %M KB peak" \
        "$bin/sy-$tool" --run-dir "$run" --records "$work/records.parquet" --no-progress -q "${extra[@]}" >/dev/null 2>&1
      echo "$bin sy-$tool: $(tail -1 "$run/time")"
      total=$(awk -v t="$total" -v w="$(cut -d' ' -f1 "$run/time" | tail -1)" 'BEGIN { print t + w }')
    done
    echo "$bin in total: $total s (round $round)"
    echo "$total" >> "$work/totals-$(echo "$bin" | tr '/' '_')"
    # Gone before the next run: every run directory kept would hold its probe-table cache in
    # the page cache (1.4 GB at 10 M), so later rounds would run with less free memory and, on
    # a VM whose free pages the host takes back, pay more for every fresh page than the first.
    rm -rf "$run"
  done
done
for bin in "$@"; do
  sort -g "$work/totals-$(echo "$bin" | tr '/' '_')" | awk -v bin="$bin" '
    { t[NR] = $1 }
    END {
      m = (NR % 2) ? t[(NR + 1) / 2] : (t[NR / 2] + t[NR / 2 + 1]) / 2
      printf "%s in total over %d round(s): lowest %.2f s, median %.2f s, highest %.2f s\n", bin, NR, t[1], m, t[NR]
    }'
done
