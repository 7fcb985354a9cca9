#!/usr/bin/env bash
# The coverage study of the calibration's intervals (crates/sy-stats/benches/coverage_study.rs):
# generated studies with a known truth, coverage of every interval sy-select prints, each with its
# Wilson 95 % interval. Writes the tables to stdout and to ${OUT:-target/coverage-study.md}.
#   scripts/coverage-study.sh [--studies 1000] [--resamples 2000] [--conditions 30,60,120]
set -euo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-target/coverage-study.md}"
mkdir -p "$(dirname "$out")"
exec cargo bench -p sy-stats --bench coverage_study -- --out "$out" "$@"
