#!/usr/bin/env bash
# Out of core: sy-fit and sy-margin on generated records under a memory limit smaller than the
# probe table, each tool's outputs compared byte for byte with an unlimited run's.
#
#   scripts/bench-memory-limit.sh LIMIT_MIB [CONDITIONS] [BIN_DIR]
#
# CONDITIONS (default 100000) × 50 repeats × 2 candidates load-phase records plus the Q grid
# (100000 → 10,000,200 records, a 1.38 GB probe table). The limit is a memory cgroup made under
# this shell's own (cgroup v2 `memory.max` or v1 `memory.limit_in_bytes`; needs the right to
# create one, e.g. root in a container). The page cache is dropped first when
# /proc/sys/vm/drop_caches is writable, so the limited run reads its cache from disk; otherwise
# pages already cached may be charged elsewhere and the run looks smaller than it is.
# Exit status: 0 when every limited run succeeded with the same outputs, 1 otherwise, 2 when no
# memory cgroup can be made.
set -euo pipefail
cd "$(dirname "$0")/.."
limit_mib=${1:?usage: scripts/bench-memory-limit.sh LIMIT_MIB [CONDITIONS] [BIN_DIR]}
conditions=${2:-100000}
bin=${3:-}
if [ -z "$bin" ]; then
  cargo build --release -q -p sy-fit -p sy-margin
  bin="${CARGO_TARGET_DIR:-$PWD/target}/release"
fi
bin=$(cd "$bin" && pwd)

# A memory cgroup under this shell's own.
if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
  parent=/sys/fs/cgroup$(sed -n 's/^0:://p' /proc/self/cgroup)
  limit_file=memory.max
else
  parent=/sys/fs/cgroup/memory$(sed -n 's/^[0-9]*:memory://p' /proc/self/cgroup)
  limit_file=memory.limit_in_bytes
fi
group="$parent/sy-memory-limit.$$"
if ! mkdir "$group" 2>/dev/null || ! echo $((limit_mib * 1024 * 1024)) > "$group/$limit_file"; then
  echo "cannot make a memory cgroup under $parent (needs cgroup rights)" >&2
  exit 2
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/sy-memory-limit.XXXXXX")
trap 'rm -rf "$work"; rmdir "$group" 2>/dev/null || true' EXIT
"$bin/sy-fit" gen-synthetic --out "$work/records.parquet" --conditions "$conditions" --repeats 50 -q
echo "records: $(du -h "$work/records.parquet" | cut -f1); limit: $limit_mib MiB ($group)"

# Each side runs in a directory of its own with the run directory named `run`, so the outputs
# (which name their inputs by path) are byte-identical when the numbers are.
run() { # SIDE TOOL [limited]
  local side=$1 tool=$2 limited=${3:-}
  mkdir -p "$work/$side"
  local extra=()
  [ "$tool" = fit ] && extra=(--seed 7)
  local cmd=(/usr/bin/time -f "$side sy-$tool: %e s wall, %U + %S s CPU, %M KB peak resident"
    "$bin/sy-$tool" --run-dir run --records ../records.parquet --no-progress -q "${extra[@]}")
  if [ -n "$limited" ]; then
    (cd "$work/$side" && sh -c 'echo $$ > "$0/cgroup.procs" && exec "$@"' "$group" "${cmd[@]}" >/dev/null)
  else
    (cd "$work/$side" && "${cmd[@]}" >/dev/null)
  fi
}
status=0
for tool in fit margin; do
  run unlimited "$tool"
  if [ -w /proc/sys/vm/drop_caches ]; then sync; echo 1 > /proc/sys/vm/drop_caches; fi
  if ! run limited "$tool" limited; then
    echo "limited sy-$tool failed (killed by the limit?)"
    status=1
    break
  fi
done
for f in fit.json splits.json margins.json; do
  if [ -f "$work/limited/run/$f" ] && cmp -s "$work/unlimited/run/$f" "$work/limited/run/$f"; then
    echo "$f: identical"
  else
    echo "$f: differs or missing"
    status=1
  fi
done
exit $status
