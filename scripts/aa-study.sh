#!/usr/bin/env bash
# The A/A study of sy-eval's verdicts: RUNS runs of `sy-eval --aa` (the same variant in both arms)
# on the simulator with seeds 1..RUNS, and the share whose verdict is not `no significant
# difference` (a false verdict), with its Wilson and Clopper–Pearson 95 % intervals.
#   scripts/aa-study.sh [RUNS=100] [PLAN=data/eval/aa.toml] [BUNDLE=data/eval/bundle.json]
# Environment: SY_EVAL (the binary; default: cargo's build of sy-eval), SY_EVAL_ARGS (more
# arguments, e.g. "--target dynamo --frontend-url URL --selection-url URL"), OUT (a JSON Lines file
# of every run's verdict, default target/aa-study.jsonl).
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-100}"
plan="${2:-data/eval/aa.toml}"
bundle="${3:-data/eval/bundle.json}"
out="${OUT:-target/aa-study.jsonl}"
if [[ -z "${SY_EVAL:-}" ]]; then
  cargo build -q --features sim -p sy-eval
  SY_EVAL="${CARGO_TARGET_DIR:-target}/debug/sy-eval"
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$(dirname "$out")"
: > "$out"
for seed in $(seq 1 "$runs"); do
  # shellcheck disable=SC2086 # SY_EVAL_ARGS is a list of arguments
  "$SY_EVAL" --aa --plan "$plan" --bundle "$bundle" --run-dir "$work/r$seed" --seed "$seed" \
    --json -q --no-progress ${SY_EVAL_ARGS:-} > "$work/out.json"
  python3 - "$seed" "$work/out.json" >> "$out" <<'PY'
import json, sys
seed, path = sys.argv[1], sys.argv[2]
c = json.load(open(path))["comparison"]
d = c["differences"][0]
est = d.get("session_time_ms") or {}
print(json.dumps({"seed": int(seed), "verdict": d["verdict"], "pairs": d["pairs"],
                  "difference_ms": est.get("value"), "ci95": est.get("ci95"),
                  "relative": d.get("session_time_relative"),
                  "failed_sessions": d.get("failed_sessions")}))
PY
  rm -rf "$work/r$seed"
done
python3 - "$out" <<'PY'
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
n = len(rows)
false = sum(r["verdict"] != "no significant difference" for r in rows)
excl = sum(1 for r in rows if r["ci95"] and (r["ci95"]["lo"] > 0 or r["ci95"]["hi"] < 0))
z = 1.959963984540054
def wilson(k, n):
    p = k / n; d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z / d * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, c - h), min(1.0, c + h)
def cp(k, n):
    # Clopper-Pearson by bisection on the binomial tails.
    def tail_ge(k, p):
        return sum(math.comb(n, j) * p**j * (1 - p)**(n - j) for j in range(k, n + 1))
    def bis(f):
        lo, hi = 0.0, 1.0
        for _ in range(60):
            m = (lo + hi) / 2
            lo, hi = (m, hi) if f(m) else (lo, m)
        return (lo + hi) / 2
    lo = 0.0 if k == 0 else bis(lambda p: tail_ge(k, p) < 0.025)
    hi = 1.0 if k == n else bis(lambda p: 1 - tail_ge(k + 1, p) > 0.025)
    return lo, hi
counts = {}
for r in rows:
    counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
wl, wh = wilson(false, n); cl, ch = cp(false, n)
print(f"A/A runs: {n}; verdicts: {counts}")
print(f"false verdicts: {false} of {n} = {100*false/n:.1f} % (Wilson 95 % {100*wl:.1f}–{100*wh:.1f} %, Clopper–Pearson {100*cl:.1f}–{100*ch:.1f} %)")
print(f"interval excluding zero: {excl} of {n} = {100*excl/n:.1f} %")
PY
