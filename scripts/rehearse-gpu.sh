#!/usr/bin/env bash
# rehearse-gpu.sh — docs/gpu.md's vLLM path, run on the CPU real-engine tier: every command of the page's
# vLLM recipe that needs no GPU, taken from the page itself (so the page and this rehearsal cannot drift).
#
# What it takes from docs/gpu.md (each a command the page shows):
#   - section 1's table: the frontend and the selection-service commands;
#   - the code block after `<!-- rehearse: vllm-worker -->`: the vLLM worker command, run twice, as worker
#     0 ("efficient") and worker 1 ("capable": the page's worker i has DYN_SYSTEM_PORT 8100+i and KV events
#     on 20080+i);
#   - the blocks after `<!-- rehearse: register -->`, `preflight`, `estimate` and `run`: sy-collect's
#     registration through --kv-events, the preflight, the estimate, the run, its resume, and
#     sy-fit / sy-margin / sy-select.
# What it changes, and only this (each printed as it is applied):
#   - `python` is the real-engine venv's ($ENGINE_VENV; scripts/dynamo-local.sh install-engine);
#   - the model: the page's hub name becomes the local SmolLM2-135M directory ($ENGINE_MODEL_DIR): no hub;
#   - `--block-size 16` becomes 32: vLLM 0.31's CPU attention needs a multiple of 32;
#   - a CPU worker also gets `--enforce-eager`, one core (taskset + VLLM_CPU_OMP_THREADS_BIND) and 1 GiB
#     of KV cache (VLLM_CPU_KVCACHE_SPACE); every Dynamo process gets the page's single-node transport
#     (`--discovery-backend file --request-plane tcp --event-plane zmq`) and binds 127.0.0.1;
#   - ports: 8000, 8092, 8100+i and 20080+i become $REHEARSE_PORT_BASE + 0, 92, 100+i, 200+i (26000 …);
#   - worker ids: the page's example ids in `--kv-events ID=…` become the real ids, in order;
#   - the plan: data/plans/example.toml (prompts up to 16,384 tokens, 700 units: hours on a CPU core)
#     becomes data/plans/vllm-cpu-rehearsal.toml, sized for the CPU engine; sy-collect gets the
#     stack's URLs (--frontend-url / --selection-url) instead of the plan's; runs/ is under $RUN_DIR.
# Every process it starts runs in a session of its own and is ended with its children on exit.
#
# Usage: scripts/rehearse-gpu.sh            (builds sy-collect, sy-fit, sy-margin, sy-select first)
# Settings: REHEARSE_PORT_BASE (26000), RUN_DIR (.dynamo/rehearse-gpu), ENGINE_VENV, ENGINE_MODEL_DIR,
#           READY_TIMEOUT (600 s), CARGO_TARGET_DIR.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DOC="$REPO/docs/gpu.md"
ENGINE_VENV="${ENGINE_VENV:-$REPO/.dynamo/engine-venv}"
ENGINE_MODEL_DIR="${ENGINE_MODEL_DIR:-$REPO/.dynamo/smollm2-135m}"
RUN_DIR="${RUN_DIR:-$REPO/.dynamo/rehearse-gpu}"
BASE="${REHEARSE_PORT_BASE:-26000}"
READY_TIMEOUT="${READY_TIMEOUT:-600}"
PLAN="$REPO/data/plans/vllm-cpu-rehearsal.toml"
FE_PORT=$BASE SEL_PORT=$((BASE + 92))
FE="http://127.0.0.1:$FE_PORT" SEL="http://127.0.0.1:$SEL_PORT"

say() { echo "rehearse-gpu: $*"; }
die() { echo "rehearse-gpu: $*" >&2; exit 1; }

[ -x "$ENGINE_VENV/bin/python" ] || die "no real-engine venv at $ENGINE_VENV: run scripts/dynamo-local.sh install-engine"
[ -f "$ENGINE_MODEL_DIR/config.json" ] || die "no model dir at $ENGINE_MODEL_DIR: run scripts/dynamo-local.sh install-engine"

# ------------------------------------------------------------------------------ commands from the page
# extract NAME: the page's command(s) for NAME, one per line (continuation lines joined).
extract() {
  python3 - "$DOC" "$1" <<'PY'
import re, sys
doc, name = open(sys.argv[1]).read(), sys.argv[2]
def table_cell(label):
    for line in doc.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and cells[0] == label:
            m = re.search(r"`([^`]+)`", cells[1])
            if m:
                return m.group(1)
    sys.exit(f"docs/gpu.md: no table row {label!r} with a command")
if name == "frontend":
    print(table_cell("frontend (KV router)"))
elif name == "select":
    print(table_cell("selection service"))
else:
    marker = f"<!-- rehearse: {name} -->"
    if doc.count(marker) != 1:
        sys.exit(f"docs/gpu.md: expected one {marker!r}")
    after = doc.split(marker, 1)[1]
    m = re.match(r"\s*```sh\n(.*?)\n\s*```", after, re.S)
    if not m:
        sys.exit(f"docs/gpu.md: no sh block right after {marker!r}")
    text = re.sub(r"\\\n\s*", " ", m.group(1))
    for line in text.splitlines():
        if line.strip():
            print(" ".join(line.split()))
PY
}

# sub FROM TO TEXT: TEXT with every FROM replaced, failing when FROM is not in it (the page changed:
# then this rehearsal must be told what the new command needs on the CPU tier).
sub() {
  case "$3" in *"$1"*) ;; *) die "docs/gpu.md changed: '$1' is no longer in: $3" ;; esac
  printf '%s' "${3//"$1"/"$2"}"
}

# ------------------------------------------------------------------------------------------ processes
PIDS=()
cleanup() {
  local pid m
  for pid in "${PIDS[@]}"; do kill -TERM -- "-$pid" 2>/dev/null || true; done
  for _ in $(seq 1 120); do
    local alive=0
    for pid in "${PIDS[@]}"; do
      for m in $(ps -eo pid=,pgid= | awk -v g="$pid" '$2 == g { print $1 }'); do
        [ "$(awk '/^State:/ { print $2 }' "/proc/$m/status" 2>/dev/null)" = Z ] || alive=1
      done
    done
    [ $alive = 0 ] && break
    sleep 0.25
  done
  for pid in "${PIDS[@]}"; do kill -KILL -- "-$pid" 2>/dev/null || true; done
}
trap cleanup EXIT INT TERM

export DYN_DISCOVERY_BACKEND=file DYN_FILE_KV="$RUN_DIR/discovery" DYN_REQUEST_PLANE=tcp DYN_EVENT_PLANE=zmq
export DYN_TCP_RPC_HOST=127.0.0.1 DYN_EVENT_PLANE_HOST=127.0.0.1 DYN_TCP_RESPONSE_STREAM_HOST=127.0.0.1
export DYN_HTTP_RPC_HOST=127.0.0.1 DYN_SYSTEM_HOST=127.0.0.1 DYN_LOG="${DYN_LOG:-warn}"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_HOST_IP=127.0.0.1 VLLM_NO_USAGE_STATS=1
rm -rf "$RUN_DIR"; mkdir -p "$RUN_DIR/logs" "$RUN_DIR/discovery"
TRANSPORT="--discovery-backend file --request-plane tcp --event-plane zmq"

# launch NAME COMMAND…: run in a session of its own, logging to $RUN_DIR/logs/NAME.log.
launch() {
  local name=$1; shift
  say "$name: $*"
  setsid "$@" > "$RUN_DIR/logs/$name.log" 2>&1 < /dev/null &
  PIDS+=($!)
}

py_cmd() { sub "python -m" "$ENGINE_VENV/bin/python -m" "$1"; }

# ---------------------------------------------------------------------------------------------- stack
cmd=$(extract frontend)
cmd=$(sub "--http-port 8000" "--http-port $FE_PORT --http-host 127.0.0.1 $TRANSPORT" "$cmd")
# shellcheck disable=SC2086
launch frontend $(py_cmd "$cmd")

cmd=$(extract select)
cmd=$(sub "--port 8092" "--port $SEL_PORT" "$cmd")
# shellcheck disable=SC2086
launch select $(py_cmd "$cmd")

worker=$(extract vllm-worker)
[ "$(echo "$worker" | wc -l)" = 1 ] || die "docs/gpu.md: the vllm-worker block is not one command"
say "the page's vLLM worker: $worker"
for i in 0 1; do
  model=efficient; [ $i = 1 ] && model=capable
  cmd=$(sub "DYN_SYSTEM_PORT=8100 " "" "$worker")
  cmd=$(sub "python -m dynamo.vllm" "$ENGINE_VENV/bin/python -m dynamo.vllm" "$cmd")
  cmd=$(sub "--model Qwen/Qwen3-8B" "--model $ENGINE_MODEL_DIR" "$cmd")
  cmd=$(sub "--block-size 16" "--block-size 32 --enforce-eager $TRANSPORT" "$cmd")
  cmd=$(sub "tcp://*:20080" "tcp://*:$((BASE + 200 + i))" "$cmd")
  cmd=${cmd//efficient/$model}
  # The JSON of --kv-events-config is one argument: split the command with the shell's own rules.
  eval "args=($cmd)"
  DYN_SYSTEM_PORT=$((BASE + 100 + i)) VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_OMP_THREADS_BIND=$i \
    launch "worker-$i" taskset -c "$i" "${args[@]}"
done

# Ready: both models listed, both workers' ids known (from their /metrics), one request served by each
# (vLLM's first forward pass is slow).
"$ENGINE_VENV/bin/python" - "$FE" "$BASE" "$READY_TIMEOUT" "$RUN_DIR/ids" <<'PY' || die "the stack did not come up (logs: $RUN_DIR/logs)"
import json, re, sys, time, urllib.request
fe, base, timeout, out = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
deadline = time.time() + timeout
def get(url):
    with urllib.request.urlopen(url, timeout=3) as r:
        return r.read()
def wid(i):
    m = re.search(rb'worker_id="([0-9a-f]+)"', get(f"http://127.0.0.1:{base + 100 + i}/metrics"))
    return int(m.group(1), 16) if m else None
ids = [None, None]
while time.time() < deadline:
    try:
        models = {m["id"] for m in json.loads(get(fe + "/v1/models"))["data"]}
        ids = [wid(0), wid(1)]
        if {"efficient", "capable"} <= models and None not in ids:
            break
    except Exception:
        pass
    time.sleep(1)
else:
    sys.exit(f"timed out: ids {ids}")
for model, w in zip(("efficient", "capable"), ids):
    body = {"model": model, "prompt": list(range(1000, 1064)), "max_tokens": 2, "min_tokens": 2,
            "ignore_eos": True, "nvext": {"backend_instance_id": w}}
    req = urllib.request.Request(fe + "/v1/completions", json.dumps(body).encode(),
                                 {"content-type": "application/json"})
    urllib.request.urlopen(req, timeout=max(1, deadline - time.time())).read()
open(out, "w").write(f"{ids[0]} {ids[1]}\n")
print(f"rehearse-gpu: up: efficient {ids[0]}, capable {ids[1]}")
PY
read -r ID0 ID1 < "$RUN_DIR/ids"

# ------------------------------------------------------------------------------------ the sy commands
TARGET_DIR="${CARGO_TARGET_DIR:-$REPO/target}"
(cd "$REPO" && cargo build -q -p sy-collect -p sy-fit -p sy-margin -p sy-select --bins) || die "cargo build failed"
BIN="$TARGET_DIR/debug"

# sy_line LINE: one of the page's sy command lines, translated and run from $RUN_DIR.
sy_line() {
  local line=$1
  line=${line//data\/plans\/example.toml/$PLAN}
  line=${line//runs\//$RUN_DIR/runs/}
  case "$line" in
    "sy-collect preflight "*) line="$line --frontend-url $FE --selection-url $SEL" ;;
    "sy-collect "*) line="$line --frontend-url $FE --selection-url $SEL --no-progress" ;;
  esac
  for tool in sy-collect sy-fit sy-margin sy-select; do line=${line//"$tool "/"$BIN/$tool "}; done
  say "\$ $line"
  (cd "$RUN_DIR" && eval "$line") || die "failed: $line"
}

# Registration (section 3): the page's example ids and ports become the real ones, in order.
reg=$(extract register)
reg=$(echo "$reg" | python3 -c '
import re, sys
ids, base = sys.argv[1:3], int(sys.argv[3])
line, i = sys.stdin.read().strip(), iter(range(2))
def repl(m):
    k = next(i)
    return f"--kv-events {ids[k]}=tcp://127.0.0.1:{base + 200 + k}"
out, n = re.subn(r"--kv-events \S+=tcp://\S+", repl, line)
if n != 2:
    sys.exit(f"docs/gpu.md: the registration shows {n} --kv-events, not one per worker")
print(out)' "$ID0" "$ID1" "$BASE")
sy_line "$reg"

for block in preflight estimate run; do
  while IFS= read -r line; do sy_line "$line"; done < <(extract "$block")
done
say "every command of docs/gpu.md's vLLM path ran; run dir $RUN_DIR/runs"
