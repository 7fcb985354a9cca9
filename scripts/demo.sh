#!/usr/bin/env bash
# The quick start: build in release mode, then run the whole pipeline on the embedded
# Dynamo-compatible simulator into runs/demo/ (collect → check → fit → margin → select → bundle, report, plots).
#
#   scripts/demo.sh                 # fresh collection on the simulator (data/plans/demo.toml)
#   scripts/demo.sh --dataset       # skip collection: fit the committed dataset data/demo/records.parquet
#   RUN_DIR=runs/other scripts/demo.sh
#
# Same seed → same splits and the same chosen rule on the same records; a fresh collection measures
# real time on this machine, so its TTFTs, and its numbers, differ from run to run. The script ends
# by printing the answer (the chosen rule, its change versus Stage with its 97.5 % selection-adjusted
# interval, stability)
# and says which data it is from.
set -euo pipefail
cd "$(dirname "$0")/.."

run_dir=${RUN_DIR:-runs/demo}
seed=${SEED:-7}
use_dataset=0
[ "${1:-}" = "--dataset" ] && use_dataset=1

echo "== building the tools (release): sy-collect sy-fit sy-margin sy-select sy-sim sy-eval"
cargo build --release -q --features sy-collect/sim,sy-eval/sim -p sy-collect -p sy-fit -p sy-margin -p sy-select -p sy-sim -p sy-eval
# cargo puts the binaries under $CARGO_TARGET_DIR when it is set (a shared build dir), else target/.
target_dir=${CARGO_TARGET_DIR:-target}
case "$target_dir" in /*) ;; *) target_dir="$PWD/$target_dir" ;; esac
bin=$target_dir/release

t0=$(date +%s.%N)
rm -rf "$run_dir"
mkdir -p "$run_dir"
if [ "$use_dataset" = 1 ]; then
  records=(--records data/demo/records.parquet)
  echo "== using the committed dataset data/demo/records.parquet"
else
  records=()
  echo "== sy-collect: data/plans/demo.toml on the embedded simulator"
  "$bin/sy-collect" --plan data/plans/demo.toml --run-dir "$run_dir" --target sim
  echo "== sy-collect check: the data-quality verdict (sy-fit refuses a run that fails it)"
  "$bin/sy-collect" check "$run_dir"
fi
echo "== sy-fit"
"$bin/sy-fit" --run-dir "$run_dir" "${records[@]}" --seed "$seed"
echo "== sy-margin"
"$bin/sy-margin" --run-dir "$run_dir" "${records[@]}"
echo "== sy-select"
"$bin/sy-select" --run-dir "$run_dir" "${records[@]}"
t1=$(date +%s.%N)

echo
if [ "$use_dataset" = 1 ]; then
  echo "== the answer, on the committed dataset data/demo/records.parquet (simulated; docs/worked-example.md):"
else
  echo "== the answer, on this fresh collection (data/plans/demo.toml on the embedded simulator):"
fi
# report.md's first lines: the chosen rule, its change versus Stage with its 97.5 % interval, its
# robustness to the split, and any caveat.
grep -E '^(Chosen|Change versus Stage|Robustness to the split|Caveat)' "$run_dir/report.md" | sed 's/^/  /'
echo
echo "pipeline took $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }') s"
echo "bundle : $run_dir/bundle.json"
echo "report : $run_dir/report.md"
echo "plots  : $run_dir/plots/"
echo "tools  : $bin (sy-collect sy-fit sy-margin sy-select sy-sim sy-eval); add it to PATH to run the docs' commands"
