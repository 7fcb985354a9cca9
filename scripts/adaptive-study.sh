#!/usr/bin/env bash
# The sequential study (crates/sy-stats/benches/sequential_study.rs): adaptive collection's
# stopping rule (an anytime-valid confidence sequence) against the fixed plan on the coverage
# study's generated worlds: probes to a verdict, wrong verdicts and coverage, each rate with its
# Wilson 95 % interval. Writes the table to stdout and to ${OUT:-target/adaptive-study.md}.
#   scripts/adaptive-study.sh [--studies 1000] [--conditions 120] [--repeats 2] [--round 10]
#                             [--epsilon 2] [--design-n 60] [--min-n 20]
set -euo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-target/adaptive-study.md}"
mkdir -p "$(dirname "$out")"
exec cargo bench -p sy-stats --bench sequential_study -- --out "$out" "$@"
