#!/usr/bin/env bash
# The adaptive benchmark with the real binaries: `sy-collect` fixed plan against
# `sy-collect --adaptive` on the embedded simulator, then `sy-fit`, `sy-margin`, `sy-select` on each
# run, in worlds of known truth (data/adaptive-bench/: the capable model helps broadly, in some
# conditions, nowhere). Per world and design: load units, GPU time (wall time × the simulator's
# ranks), the decision of the report and whether it equals the truth's, and whether the interval
# the report's decision rests on covers the truth, with Wilson 95 % intervals over the studies.
# The report's decision: for a fixed plan its headline (sy-select's selection-adjusted mean change
# of the chosen bundle versus Stage, on the selection split); for an adaptive run the decision of
# the adaptive design its Answer states (the stop's anytime-valid prequential confidence sequence
# of `cache`'s change, recomputed by sy-select; `sy-select --json`'s `adaptive`) when the stop
# decided, else (budget spent) its selection-split headline as for a fixed plan. The truth of a world is a large fixed run of its
# own (the plan's grid with TRUTH_REPEATS repeats, same pipeline): its headline change and the
# decision its interval gives, and its `cache` variant's change (what the adaptive sequence
# estimates). The decision of an interval: gain (below 0), loss (above 0), no useful gain (within
# ±ε), else open.
#   scripts/adaptive-bench.sh
# Environment: REPEATS (studies per world and design, default 6; seeds 1..REPEATS), WORLDS (default
# "broad few nowhere"), TRUTH_REPEATS (default 6), EPSILON_MS (the no-useful-gain band, default the
# plan's [adaptive] epsilon_ms = 2), BIN (directory of release binaries; default: build them into
# ${CARGO_TARGET_DIR:-target}/release), WORK (run directories, default target/adaptive-bench),
# OUT (the table, default target/adaptive-bench.md), PARALLEL (worlds at once, default 3; the two
# designs of a seed run at once: the simulator sleeps most of the time). A run directory whose select.json is older than
# $BIN/sy-select is selected again (its collection is kept). DYNAMO=1 adds the small case on the
# local real-Dynamo stack (data/adaptive-bench/dynamo.toml, DYNAMO_REPEATS studies, default 2):
# started and stopped with scripts/dynamo-local.sh and the caller's FRONTEND_PORT, SELECT_PORT,
# WORKER_SYS_PORT_BASE, ZMQ_KV_PORT_BASE, RUN_DIR; WORLDS="" skips the simulator.
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
  cargo build --release -q --features sy-collect/sim -p sy-collect -p sy-fit -p sy-margin -p sy-select
  cargo build --release -q -p sy-calibration --example prequential_estimand
  BIN="${CARGO_TARGET_DIR:-target}/release"
fi
# What each adaptive run's sequence estimates, measured on the world's truth run (optional).
estimand_bin="${ESTIMAND_BIN:-$BIN/examples/prequential_estimand}"
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
  select_run "$dir"
}

# select_run RUN_DIR: sy-select --json alone (what a newer sy-select redoes).
select_run() {
  "$BIN/sy-select" --run-dir "$1" -q --no-progress --json > "$1/select.json.tmp"
  mv "$1/select.json.tmp" "$1/select.json"
}

# done_or_reselect RUN_DIR: whether the run is finished (reselected first when its select.json is
# older than the sy-select binary).
done_or_reselect() {
  [[ -f $1/select.json ]] || return 1
  [[ $1/select.json -nt $BIN/sy-select ]] || select_run "$1"
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
  done_or_reselect "$work/$world/truth" || collect "$world" truth 1000 "$work/$world/truth"
  # The two designs of a seed run at once (the simulator sleeps most of the time).
  for seed in $(seq 1 "$repeats"); do
    for design in fixed adaptive; do
      local dir=$work/$world/$design-$seed
      done_or_reselect "$dir" || collect "$world" "$design" "$seed" "$dir" &
    done
    wait
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

python3 - "$work" "$repeats" "$start" "$load0 .. $load1" "$plan" "${EPSILON_MS:-}" "$estimand_bin" $worlds > "$out" <<'PY'
import json, math, os, subprocess, sys, tomllib
work, repeats, start, load, plan_path, eps_env, estimand_bin = sys.argv[1:8]
worlds = sys.argv[8:]
repeats = int(repeats)
plan = tomllib.load(open(plan_path, "rb"))
eps = float(eps_env) if eps_env else plan["adaptive"].get("epsilon_ms", 2.0)
NONE = {"estimate": math.nan, "lo": -math.inf, "hi": math.inf}

def wilson(k, n, z=1.959964):
    if n == 0:
        return "–"
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return f"{100 * p:.0f} % ({100 * max(0, c - h):.0f}–{100 * min(1, c + h):.0f})"

def decision(i):
    lo, hi = i["lo"], i["hi"]
    if math.isinf(lo) and math.isinf(hi):
        return "open"
    if hi < 0:
        return "gain"
    if lo > 0:
        return "loss"
    if -eps <= lo and hi <= eps:
        return "no useful gain"
    return "open"

def covers(i, x):
    return not math.isinf(i["lo"]) and i["lo"] <= x <= i["hi"]

def estimand(dir, truth_dir):
    """What the run's prequential sequence estimates, on the truth run's conditions."""
    if not os.path.exists(estimand_bin):
        return None
    out = subprocess.run([estimand_bin, dir, truth_dir], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)

def run(dir):
    s = json.load(open(f"{dir}/select.json"))
    m = json.load(open(f"{dir}/manifest.json"))
    # No interval when the selection split has too few conditions: the decision is then open.
    headline = s["headline"]["mean_change_vs_stage_ms"] or NONE
    load = m["phases"].get("load", {})
    out = {
        "variant": s["bundle_variant"],
        "headline": headline,
        "load_units": load.get("units", 0),
        "seconds": sum(p["seconds"] for p in m["phases"].values()),
        "check_failed": os.path.exists(f"{dir}/check-failed"),
    }
    sel = json.load(open(f"{dir}/selection.json"))
    cache = next((v for v in sel["uncertainty"]["variants"] if v["variant"] == "cache"), None)
    out["cache"] = (cache or {}).get("mean_change_vs_stage_ms") or NONE
    a = s.get("adaptive")
    if a is not None:
        ad = json.load(open(f"{dir}/adaptive.json"))
        out["stopped"] = ad["stopped"]
        out["gpus"] = ad["spent"]["gpus"]
        out["adaptive_error"] = a.get("error")
        if "error" not in a and a["decision"] != "open":
            out["answer"] = {"estimate": a["estimate"], "lo": a["lo"], "hi": a["hi"]}
            out["answer_decision"] = a["decision"].replace("_", " ")
        else:
            # No adaptive decision (the budget was spent first): the report decides on the
            # selection-split headline, as for a fixed plan.
            out["answer"] = headline
            out["answer_decision"] = decision(headline)
    else:
        out["answer"] = headline
        out["answer_decision"] = decision(headline)
    return out

print(f"Started {start}; load average {load}; ε = {eps} ms.\n")
if worlds:
    print(f"{repeats} studies per world and design (seeds 1..{repeats}).\n")
    print("| world | truth: the large run's headline change (ms, 95 % CI); its `cache` change | its decision | design | load units (mean) | share of fixed | GPU time (mean; wall time × ranks) | the report's decision = truth's | = fixed's (same seed) | its interval covers the truth's headline change | covers the truth's `cache` change | adaptive: covers what the sequence estimates (mean of that, ms) | decisions (gain / loss / no useful gain / open) | adaptive: selection-split headline = truth's; stops (gain / loss / no gain / budget) | no interval | check failed |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
keys = ("decided", "same", "same_fixed", "cov", "cov_cache", "units", "n", "head_same", "cov_est", "n_est")
pooled = {d: dict.fromkeys(keys, 0) for d in ("fixed", "adaptive")}
misses = []
for w in worlds:
    t = run(f"{work}/{w}/truth")
    truth, truth_cache = t["headline"]["estimate"], t["cache"]["estimate"]
    td = decision(t["headline"])
    rows = {d: [run(f"{work}/{w}/{d}-{s}") for s in range(1, repeats + 1)] for d in ("fixed", "adaptive")}
    gpus = next((r["gpus"] for r in rows["adaptive"] if "gpus" in r), 1)
    fixed_units = sum(r["load_units"] for r in rows["fixed"]) / repeats
    for d, rs in rows.items():
        n = len(rs)
        dec = [r["answer_decision"] for r in rs]
        same_truth = sum(x == td for x in dec)
        same_fixed = sum(x == f["answer_decision"] for x, f in zip(dec, rows["fixed"]))
        cov = sum(covers(r["answer"], truth) for r in rs)
        cov_cache = sum(covers(r["answer"], truth_cache) for r in rs)
        no_interval = sum(math.isinf(r["answer"]["lo"]) for r in rs)
        units = sum(r["load_units"] for r in rs) / n
        gpu_s = sum(r["seconds"] for r in rs) / n * gpus
        counts = " / ".join(str(dec.count(k)) for k in ("gain", "loss", "no useful gain", "open"))
        extra = "–"
        est_cell = "–"
        head_same = 0
        cov_est = n_est = 0
        if d == "adaptive":
            ests = [estimand(f"{work}/{w}/{d}-{s}", f"{work}/{w}/truth") for s in range(1, repeats + 1)]
            for r, e in zip(rs, ests):
                r["estimand"] = e
            known = [e for e in ests if e is not None and e["covered"] is not None]
            n_est = len(known)
            cov_est = sum(e["covered"] for e in known)
            if known:
                est_cell = f"{wilson(cov_est, n_est)} ({sum(e['estimand'] for e in known) / n_est:+.2f})"
            head_same = sum(decision(r["headline"]) == td for r in rs)
            stops = " / ".join(str(sum(r.get("stopped") == k for r in rs)) for k in ("gain", "loss", "no_useful_gain", "budget"))
            extra = f"{wilson(head_same, n)}; {stops}"
            for s, r in enumerate(rs, 1):
                if not covers(r["answer"], truth):
                    a = r["answer"]
                    e = r.get("estimand")
                    est = f", what it estimates {e['estimand']:+.2f}" if e else ""
                    misses.append(f"{w} seed {s}: {r['answer_decision']} {a['estimate']:+.2f} ({a['lo']:+.2f} to {a['hi']:+.2f}){est}, truth {truth:+.2f}, truth's cache {truth_cache:+.2f}, stop {r.get('stopped')}{'; ' + r['adaptive_error'] if r.get('adaptive_error') else ''}")
        checks = sum(r["check_failed"] for r in rs)
        print(f"| {w} | {truth:+.2f} ({t['headline']['lo']:+.1f} to {t['headline']['hi']:+.1f}); {truth_cache:+.2f} | {td} | {d} | {units:.0f} | {100 * units / fixed_units:.0f} % | {gpu_s:.0f} rank-s | {wilson(same_truth, n)} | {wilson(same_fixed, n) if d == 'adaptive' else '–'} | {wilson(cov, n)} | {wilson(cov_cache, n)} | {est_cell} | {counts} | {extra} | {no_interval} | {checks} |")
        p = pooled[d]
        for k, v in (("n", n), ("same", same_truth), ("same_fixed", same_fixed), ("cov", cov), ("cov_cache", cov_cache), ("units", units * n), ("decided", sum(x != "open" for x in dec)), ("head_same", head_same), ("cov_est", cov_est), ("n_est", n_est)):
            p[k] += v
print()
for d, p in pooled.items():
    n = p["n"]
    if n == 0:
        continue
    extra = f", = fixed's {wilson(p['same_fixed'], n)}, selection-split headline = truth's {wilson(p['head_same'], n)}, the sequence covers what it estimates {wilson(p['cov_est'], p['n_est'])}" if d == "adaptive" else ""
    print(f"Pooled {d}: {n} studies, {p['units'] / n:.0f} load units, decided {wilson(p['decided'], n)}, the report's decision = truth's {wilson(p['same'], n)}{extra}, its interval covers the truth's headline change {wilson(p['cov'], n)}, the truth's `cache` change {wilson(p['cov_cache'], n)}.")
if misses:
    print("\nAdaptive intervals that miss the truth's headline change:\n")
    for m in misses:
        print(f"- {m}")

dyn = f"{work}/dynamo"
if os.path.isdir(dyn):
    print("\nLocal real-Dynamo stack (data/adaptive-bench/dynamo.toml; no known truth):\n")
    print("| study | design | load units | GPU time (rank-seconds) | the report's decision | its interval (ms) | selection-split headline (95 % CI) | chosen | adaptive stop |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in sorted(os.listdir(dyn), key=lambda n: (n.rsplit("-", 1)[0], int(n.rsplit("-", 1)[1]))):
        r = run(f"{dyn}/{name}")
        design, seed = name.rsplit("-", 1)
        gpus = r.get("gpus", 4)
        fmt = lambda i: "no interval" if math.isinf(i["lo"]) else f"{i['estimate']:+.1f} ({i['lo']:+.1f} to {i['hi']:+.1f})"
        print(f"| {seed} | {design} | {r['load_units']} | {r['seconds'] * gpus:.0f} | {r['answer_decision']} | {fmt(r['answer'])} | {fmt(r['headline'])} | {r['variant']} | {r.get('stopped', '–')} |")
PY
cat "$out"
