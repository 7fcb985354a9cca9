#!/usr/bin/env bash
# The adaptive benchmark with the real binaries: `sy-collect` fixed plan against
# `sy-collect --adaptive` on the embedded simulator, then `sy-fit`, `sy-margin`, `sy-select` on each
# run, in worlds of known truth (data/adaptive-bench/: the capable model helps broadly, in some
# conditions, nowhere). Per world and design: probes, GPU time (wall time × the simulator's ranks),
# the decision reached and whether the headline interval (sy-select's mean change versus Stage)
# covers the truth, with Wilson 95 % intervals over the repeats. The truth of a world is a large
# fixed run of its own (the plan's grid with TRUTH_REPEATS repeats, same pipeline): its estimate of
# the change, and the decision its interval gives. The decision of an interval: gain (below 0),
# loss (above 0), no useful gain (within ±ε), else open.
#   scripts/adaptive-bench.sh
# Environment: REPEATS (studies per world and design, default 6; seeds 1..REPEATS), WORLDS (default
# "broad few nowhere"), TRUTH_REPEATS (default 6), EPSILON_MS (the no-useful-gain band, default the
# plan's [adaptive] epsilon_ms = 2), BIN (directory of release binaries; default: build them into
# ${CARGO_TARGET_DIR:-target}/release), WORK (run directories, default target/adaptive-bench),
# OUT (the table, default target/adaptive-bench.md), PARALLEL (worlds at once, default 3: the
# simulator sleeps most of the time). DYNAMO=1 adds the small case on the local real-Dynamo stack
# (data/adaptive-bench/dynamo.toml, DYNAMO_REPEATS studies, default 2): started and stopped with
# scripts/dynamo-local.sh and the caller's FRONTEND_PORT, SELECT_PORT, WORKER_SYS_PORT_BASE,
# ZMQ_KV_PORT_BASE, RUN_DIR; WORLDS="" skips the simulator.
set -euo pipefail
cd "$(dirname "$0")/.."
repeats="${REPEATS:-6}"
worlds="${WORLDS-broad few nowhere}"
truth_repeats="${TRUTH_REPEATS:-6}"
work="${WORK:-target/adaptive-bench}"
out="${OUT:-target/adaptive-bench.md}"
parallel="${PARALLEL:-3}"
plan=data/adaptive-bench/plan.toml
if [[ -z "${BIN:-}" ]]; then
  cargo build --release -q -p sy-collect -p sy-fit -p sy-margin -p sy-select
  BIN="${CARGO_TARGET_DIR:-target}/release"
fi
mkdir -p "$work" "$(dirname "$out")"
sed "s/^repeats = 2\$/repeats = $truth_repeats/" "$plan" | awk '
  /^\[adaptive\]/ { skip = 1 } /^\[/ && !/^\[adaptive\]/ { skip = 0 } !skip' > "$work/truth-plan.toml"
grep -q "^repeats = $truth_repeats\$" "$work/truth-plan.toml"

# pipeline RUN_DIR: sy-fit, sy-margin, sy-select --json (a run failing the data-quality check is
# fitted anyway and marked, so that the table counts it).
pipeline() {
  local dir=$1 accept=()
  if ! "$BIN/sy-collect" check "$dir" > "$dir/check.txt" 2>&1; then
    accept=(--accept-failed-check)
    touch "$dir/check-failed"
  fi
  "$BIN/sy-fit" --run-dir "$dir" -q --no-progress "${accept[@]}"
  "$BIN/sy-margin" --run-dir "$dir" -q --no-progress
  "$BIN/sy-select" --run-dir "$dir" -q --no-progress --json > "$dir/select.json"
}

collect() {
  local world=$1 design=$2 seed=$3 dir=$4 extra=()
  [[ $design == adaptive ]] && extra=(--adaptive)
  local p=$plan
  [[ $design == truth ]] && p=$work/truth-plan.toml
  rm -rf "$dir"
  local t0 t1
  t0=$(date +%s.%N)
  "$BIN/sy-collect" --plan "$p" --run-dir "$dir" --target sim \
    --sim-config "data/adaptive-bench/$world.toml" --seed "$seed" -q --no-progress "${extra[@]}"
  t1=$(date +%s.%N)
  echo "$t0 $t1" > "$dir/wall.txt"
  pipeline "$dir"
}

run_world() {
  local world=$1
  [[ -f $work/$world/truth/select.json ]] || collect "$world" truth 1000 "$work/$world/truth"
  for seed in $(seq 1 "$repeats"); do
    for design in fixed adaptive; do
      local dir=$work/$world/$design-$seed
      [[ -f $dir/select.json ]] || collect "$world" "$design" "$seed" "$dir"
    done
  done
}

start=$(date -u +%FT%TZ)
load0=$(cut -d' ' -f1 /proc/loadavg)
pids=()
running=0
for world in $worlds; do
  run_world "$world" > "$work/$world.log" 2>&1 &
  pids+=($!)
  running=$((running + 1))
  if (( running >= parallel )); then
    wait "${pids[0]}"
    pids=("${pids[@]:1}")
    running=$((running - 1))
  fi
done
for p in "${pids[@]}"; do wait "$p"; done

if [[ ${DYNAMO:-0} == 1 ]]; then
  # The stack's ports may be briefly taken (a client's ephemeral port in TIME-WAIT): retry.
  for attempt in 1 2 3 4; do
    if scripts/dynamo-local.sh start > "$work/dynamo-stack.log" 2>&1; then break; fi
    scripts/dynamo-local.sh stop > /dev/null 2>&1 || true
    (( attempt == 4 )) && { cat "$work/dynamo-stack.log" >&2; exit 1; }
    sleep 30
  done
  trap 'scripts/dynamo-local.sh stop > /dev/null 2>&1 || true' EXIT
  eval "$(scripts/dynamo-local.sh env)"
  mkdir -p "$work/dynamo"
  for seed in $(seq 1 "${DYNAMO_REPEATS:-2}"); do
    for design in fixed adaptive; do
      dir=$work/dynamo/$design-$seed
      extra=()
      [[ $design == adaptive ]] && extra=(--adaptive)
      rm -rf "$dir"
      "$BIN/sy-collect" --plan data/adaptive-bench/dynamo.toml --run-dir "$dir" --target dynamo \
        --frontend-url "$SY_DYNAMO_FRONTEND" --selection-url "$SY_DYNAMO_SELECT" --seed "$seed" \
        -q --no-progress "${extra[@]}"
      pipeline "$dir"
    done
  done
  scripts/dynamo-local.sh stop > /dev/null 2>&1 || true
  trap - EXIT
fi
load1=$(cut -d' ' -f1 /proc/loadavg)

python3 - "$work" "$repeats" "$start" "$load0 .. $load1" "$plan" "${EPSILON_MS:-}" $worlds > "$out" <<'PY'
import json, math, sys, tomllib
work, repeats, start, load, plan_path, eps_env = sys.argv[1:7]
worlds = sys.argv[7:]
repeats = int(repeats)
plan = tomllib.load(open(plan_path, "rb"))
eps = float(eps_env) if eps_env else plan["adaptive"].get("epsilon_ms", 2.0)

def wilson(k, n, z=1.959964):
    if n == 0:
        return "–"
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return f"{100 * p:.0f} % ({100 * max(0, c - h):.0f}–{100 * min(1, c + h):.0f})"

def decision(lo, hi):
    if math.isinf(lo) and math.isinf(hi):
        return "open"
    if hi < 0:
        return "gain"
    if lo > 0:
        return "loss"
    if -eps <= lo and hi <= eps:
        return "no useful gain"
    return "open"


def run(dir):
    s = json.load(open(f"{dir}/select.json"))
    m = json.load(open(f"{dir}/manifest.json"))
    # No interval when the selection split has too few conditions: the decision is then open.
    h = s["headline"]["mean_change_vs_stage_ms"] or {"estimate": math.nan, "lo": -math.inf, "hi": math.inf}
    load = m["phases"].get("load", {})
    secs = sum(p["seconds"] for p in m["phases"].values())
    out = {
        "variant": s["bundle_variant"],
        "estimate": h["estimate"], "lo": h["lo"], "hi": h["hi"],
        "load_units": load.get("units", 0),
        "seconds": secs,
        "check_failed": __import__("os").path.exists(f"{dir}/check-failed"),
    }
    try:
        a = json.load(open(f"{dir}/adaptive.json"))
        out["stopped"] = a["stopped"]
        out["rounds"] = len(a["rounds"])
        out["gpus"] = a["spent"]["gpus"]
        seq = a["looks"][-1]["sequence"] if a["looks"] else None
        out["seq"] = (seq["lo"], seq["hi"]) if seq else None
    except FileNotFoundError:
        pass
    return out

print(f"Started {start}; load average {load}; ε = {eps} ms.\n")
if worlds:
    print(f"{repeats} studies per world and design (seeds 1..{repeats}).\n")
    print("| world | truth: the large run's change (ms, 95 % CI) | its decision | design | load units (mean) | share of fixed | GPU time (mean; wall time × ranks) | decision = truth's | decision = fixed's (same seed) | interval covers the truth | decisions (gain / loss / no useful gain / open) | adaptive stops (gain / loss / no gain / budget); stop = truth's decision; its sequence covers the truth | no interval | check failed |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
pooled = {"fixed": [0, 0, 0, 0, 0.0], "adaptive": [0, 0, 0, 0, 0.0]}
for w in worlds:
    t = run(f"{work}/{w}/truth")
    truth = t["estimate"]
    td = decision(t["lo"], t["hi"])
    rows = {d: [run(f"{work}/{w}/{d}-{s}") for s in range(1, repeats + 1)] for d in ("fixed", "adaptive")}
    gpus = next((r["gpus"] for r in rows["adaptive"] if "gpus" in r), 1)
    fixed_units = sum(r["load_units"] for r in rows["fixed"]) / repeats
    for d, rs in rows.items():
        n = len(rs)
        dec = [decision(r["lo"], r["hi"]) for r in rs]
        same_truth = sum(x == td for x in dec)
        same_fixed = sum(x == decision(f["lo"], f["hi"]) for x, f in zip(dec, rows["fixed"]))
        covers = sum(r["lo"] <= truth <= r["hi"] and not math.isinf(r["lo"]) for r in rs)
        no_interval = sum(math.isinf(r["lo"]) for r in rs)
        units = sum(r["load_units"] for r in rs) / n
        gpu_s = sum(r["seconds"] for r in rs) / n * gpus
        counts = " / ".join(str(dec.count(k)) for k in ("gain", "loss", "no useful gain", "open"))
        stops = "–"
        if d == "adaptive":
            stops = " / ".join(str(sum(r.get("stopped") == k for r in rs)) for k in ("gain", "loss", "no_useful_gain", "budget"))
            # The stopping rule's own answer and its sequence (the judged rule's change).
            as_decision = {"gain": "gain", "loss": "loss", "no_useful_gain": "no useful gain"}
            stop_same = sum(as_decision.get(r.get("stopped"), "open") == td for r in rs)
            seq_covers = sum(r.get("seq") is not None and r["seq"][0] <= truth <= r["seq"][1] for r in rs)
            stops += f"; = truth's {wilson(stop_same, n)}; sequence covers {wilson(seq_covers, n)}"
            p_stop = pooled.setdefault("stop", [0, 0, 0])
            p_stop[0] += n; p_stop[1] += stop_same; p_stop[2] += seq_covers
        checks = sum(r["check_failed"] for r in rs)
        print(f"| {w} | {truth:+.2f} ({t['lo']:+.1f} to {t['hi']:+.1f}) | {td} | {d} | {units:.0f} | {100 * units / fixed_units:.0f} % | {gpu_s:.0f} rank-s | {wilson(same_truth, n)} | {wilson(same_fixed, n) if d == 'adaptive' else '–'} | {wilson(covers, n)} | {counts} | {stops} | {no_interval} | {checks} |")
        p = pooled[d]
        p[0] += n; p[1] += same_truth; p[2] += covers; p[3] += same_fixed; p[4] += units * n
print()
if pooled["fixed"][0] == 0:
    pooled = {}
stop = pooled.pop("stop", None)
for d, (n, same, cov, same_fixed, units) in pooled.items():
    extra = f", decision = fixed's {wilson(same_fixed, n)}" if d == "adaptive" else ""
    print(f"Pooled {d}: {n} studies, {units / n:.0f} load units, decision = truth's {wilson(same, n)}{extra}, covers {wilson(cov, n)}.")
if stop:
    print(f"Pooled adaptive stops: = truth's decision {wilson(stop[1], stop[0])}; the sequence at the stop covers the truth {wilson(stop[2], stop[0])}.")

import os
dyn = f"{work}/dynamo"
if os.path.isdir(dyn):
    print("\nLocal real-Dynamo stack (data/adaptive-bench/dynamo.toml; no known truth):\n")
    print("| study | design | load units | GPU time (rank-seconds) | decision | mean change vs Stage (95 % CI) | chosen | adaptive stop |")
    print("|---|---|---|---|---|---|---|---|")
    for name in sorted(os.listdir(dyn), key=lambda n: (n.rsplit("-", 1)[0], int(n.rsplit("-", 1)[1]))):
        r = run(f"{dyn}/{name}")
        design, seed = name.rsplit("-", 1)
        gpus = r.get("gpus", 4)
        ci = "no interval" if math.isinf(r["lo"]) else f"{r['estimate']:+.1f} ({r['lo']:+.1f} to {r['hi']:+.1f})"
        print(f"| {seed} | {design} | {r['load_units']} | {r['seconds'] * gpus:.0f} | {decision(r['lo'], r['hi'])} | {ci} | {r['variant']} | {r.get('stopped', '–')} |")
PY
cat "$out"
