#!/usr/bin/env bash
# The fitted simulator on a mocker topology its fit did not see (docs/benchmarks.md):
#   1. the plan unseen-plan.toml on a local mocker stack of topology SEEN (block 16, two workers
#      per model at one speed: efficient speedup 4, budget 2,048; capable speedup 1, budget 1,024);
#   2. `sy-sim fit-config` from that run (base: the same table, timing = "step");
#   3. the same plan on a stack of topology UNSEEN (block 64; efficient speedup 2, budget 1,024;
#      capable speedup 0.75, budget 512: N = 1,536 in three chunks) and on the simulator with the
#      fitted step parameters and the UNSEEN table (one speed per model: the collector's probes go
#      where the router sends them, and a tie between workers of different speeds would make a
#      cell's median depend on the tie-break);
#   4. scripts/compare-runs.py of the two UNSEEN runs, server TTFT.
# usage: crates/sy-sim/bench/unseen_topology.sh OUT_DIR   (binaries from $CARGO_TARGET_DIR/debug, or
# SY_BIN_DIR; the stack on PORT_BASE (31500) +0/+92/+100/+200, run dir OUT_DIR/stack)
set -euo pipefail
out=${1:?usage: unseen_topology.sh OUT_DIR}
repo=$(cd "$(dirname "$0")/../../.." && pwd)
bin=${SY_BIN_DIR:-${CARGO_TARGET_DIR:-$repo/target}/debug}
base=${PORT_BASE:-31500}
plan=$repo/crates/sy-sim/bench/unseen-plan.toml
mkdir -p "$out"
export RUN_DIR=$out/stack FRONTEND_PORT=$base SELECT_PORT=$((base + 92)) \
  WORKER_SYS_PORT_BASE=$((base + 100)) ZMQ_KV_PORT_BASE=$((base + 200)) TOPOLOGY=default
stack() { "$repo/scripts/dynamo-local.sh" "$@"; }
trap 'stack stop >/dev/null 2>&1 || true' EXIT

# name model speedup blocks budget, as scripts/dynamo-local.sh's WORKERS
seen="efficient-w0 efficient 4 2048 2048
efficient-w1 efficient 4 2048 2048
capable-w0 capable 1 1024 1024
capable-w1 capable 1 1024 1024"
unseen="efficient-w0 efficient 2 1024 1024
efficient-w1 efficient 2 1024 1024
capable-w0 capable 0.75 512 512
capable-w1 capable 0.75 512 512"

# The simulator configuration of a worker table (timing = "step"; the request plane's 2 ms, which
# the fit takes off every cell).
sim_config() {
  local block=$1 table=$2
  echo "seed = 42"
  echo "time_scale = 1.0"
  for model in efficient capable; do
    echo "$table" | awk -v m="$model" -v b="$block" '$2 == m { n++; s = s (s ? ", " : "") $3; kv = $4; t = $5 }
      END { printf "[[models]]\nname = \"%s\"\nworkers = %d\nworker_speeds = [%s]\nblock_size = %d\nkv_blocks = %d\nmax_num_batched_tokens = %d\nmax_num_seqs = 64\nrequest_plane_ms = 2.0\n", m, n, s, b, kv, t }'
  done
}

collect() { # DIR TARGET-ARGS...
  local dir=$1; shift
  rm -rf "$dir"
  "$bin/sy-collect" --plan "$plan" --run-dir "$dir" --no-progress "$@"
}

BLOCK_SIZE=16 WORKERS=$seen stack start >/dev/null
collect "$out/seen" --target dynamo --frontend-url "http://127.0.0.1:$FRONTEND_PORT" \
  --selection-url "http://127.0.0.1:$SELECT_PORT"
stack stop >/dev/null
sim_config 16 "$seen" > "$out/seen-base.toml"
"$bin/sy-sim" fit-config --records "$out/seen/records.jsonl" --base "$out/seen-base.toml" \
  --out "$out/seen-fitted.toml" | tee "$out/fit.txt"

# The fitted step parameters with the UNSEEN table.
python3 - "$out/seen-fitted.toml" "$unseen" > "$out/unseen-sim.toml" <<'PY'
import sys, tomllib
fitted = tomllib.load(open(sys.argv[1], "rb"))
rows = [l.split() for l in sys.argv[2].splitlines() if l.strip()]
print("seed = 42\ntime_scale = 1.0")
for m in fitted["models"]:
    mine = [r for r in rows if r[1] == m["name"]]
    print(f'[[models]]\nname = "{m["name"]}"\nworkers = {len(mine)}')
    print(f'worker_speeds = [{", ".join(r[2] for r in mine)}]\nblock_size = 64')
    print(f'kv_blocks = {mine[0][3]}\nmax_num_batched_tokens = {mine[0][4]}\nmax_num_seqs = 64')
    print(f'request_plane_ms = {m.get("request_plane_ms", 0.0)}\n[models.step]')
    for k, v in m["step"].items():
        print(f"{k} = {v}")
PY

BLOCK_SIZE=64 WORKERS=$unseen stack start >/dev/null
collect "$out/unseen-real" --target dynamo --frontend-url "http://127.0.0.1:$FRONTEND_PORT" \
  --selection-url "http://127.0.0.1:$SELECT_PORT"
stack stop >/dev/null
collect "$out/unseen-sim" --target sim --sim-config "$out/unseen-sim.toml"
python3 "$repo/scripts/compare-runs.py" "$out/unseen-real/records.jsonl" \
  "$out/unseen-sim/records.jsonl" --server | tee "$out/compare.txt"
