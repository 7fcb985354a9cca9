#!/usr/bin/env bash
# The whole test suite: the command the README names and .ci/run calls.
#
# Phase 1: every test except the real-Dynamo ones (test binaries named real_dynamo*), in parallel, + doc tests.
# Phase 2: the real-Dynamo tests, one at a time, against a real Dynamo 1.6.1 stack on 127.0.0.1 —
#   2a: every real_dynamo* binary but real_dynamo_dp, against the default topology (4 workers, block 16):
#   - SY_DYNAMO_FRONTEND / SY_DYNAMO_SELECT already set (a stack of your own): that stack is used as is;
#   - otherwise, when the Dynamo venv exists (scripts/dynamo-local.sh install), a private stack is started
#     on test ports (frontend 28000, selection 28092, workers 28100+/28200+, run dir .dynamo/test-run) and
#     always stopped on exit;
#   - otherwise the real-Dynamo tests report themselves skipped — unless SY_REQUIRE_DYNAMO=1, which makes
#     a missing stack (or zero executed real-Dynamo tests) a failure.
#   2b: real_dynamo_dp against a second stack it starts itself when the venv exists (TOPOLOGY=dp64:
#       block 64, three efficient workers, a data-parallel-size-2 and a data-parallel-size-4
#       capable worker; ports 29500+).
# Phase 3: the real-engine tests (test binaries named real_engine*) against two vLLM-CPU workers serving
#   SmolLM2-135M (TOPOLOGY=vllm-cpu; ports 27000, 27092, 27100+, 27200+, run dir .dynamo/test-run-engine),
#   started when the engine venv exists (scripts/dynamo-local.sh install-engine) and always stopped on
#   the way out; without it the tests report themselves skipped — unless SY_REQUIRE_ENGINE=1, which
#   makes a missing engine a failure.
# Each real-Dynamo test that ran against the stack appends its name to $SY_DYNAMO_TEST_LOG; the count is
# printed at the end ("real-Dynamo tests executed: N"). SY_TEST_ONLY_REAL_DYNAMO=1 runs phases 2 and 3
# only.
set -uo pipefail
cd "$(dirname "$0")/.."

# cargo-nextest runs the suite (per-binary filters, one test at a time for the real-Dynamo phase).
# A fresh machine with only Rust has no nextest: install it once (as .ci/run does for cargo-machete).
if ! cargo nextest --version >/dev/null 2>&1; then
  echo "scripts/test.sh: cargo-nextest is not installed; installing it now (cargo install --locked cargo-nextest, a few minutes, once)"
  if ! cargo install --locked cargo-nextest; then
    echo "scripts/test.sh: installing cargo-nextest failed; install it yourself (cargo install --locked cargo-nextest) and run again" >&2
    exit 1
  fi
fi

REAL='binary(~real_dynamo)'
DP='binary(=real_dynamo_dp)'
ENGINE='binary(~real_engine)'
status=0

if [ "${SY_TEST_ONLY_REAL_DYNAMO:-0}" != 1 ]; then   # SY_TEST_ONLY_REAL_DYNAMO=1: phases 2 and 3 only
  cargo nextest run --workspace --no-fail-fast -E "not $REAL and not $ENGINE" || status=1
  # The build a GPU node makes: without the `sim` feature (no embedded simulator), `--target sim`
  # is refused as bad input. A workspace build turns the feature on (the tests' dev-dependencies),
  # so this is its own build of sy-drive.
  cargo nextest run -p sy-drive --lib --no-fail-fast || status=1
  cargo test --workspace --doc || status=1
fi

started_stack=0 started_engine=0
engine_env=(TOPOLOGY=vllm-cpu RUN_DIR="$PWD/.dynamo/test-run-engine" FRONTEND_PORT=27000 SELECT_PORT=27092
            WORKER_SYS_PORT_BASE=27100 ZMQ_KV_PORT_BASE=27200)
stop_stack() {
  if [ "$started_stack" = 1 ]; then scripts/dynamo-local.sh stop >/dev/null || true; fi
  if [ "$started_engine" = 1 ]; then env "${engine_env[@]}" scripts/dynamo-local.sh stop >/dev/null || true; fi
}
trap stop_stack EXIT INT TERM

if [ -z "${SY_DYNAMO_FRONTEND:-}" ] || [ -z "${SY_DYNAMO_SELECT:-}" ]; then
  if "${VENV:-.dynamo/venv}/bin/python" -c 'import dynamo.frontend' 2>/dev/null; then
    export RUN_DIR="${SY_TEST_DYNAMO_RUN_DIR:-$PWD/.dynamo/test-run}"
    export FRONTEND_PORT="${SY_TEST_FRONTEND_PORT:-28000}" SELECT_PORT="${SY_TEST_SELECT_PORT:-28092}"
    export WORKER_SYS_PORT_BASE="${SY_TEST_WORKER_SYS_PORT_BASE:-28100}"
    export ZMQ_KV_PORT_BASE="${SY_TEST_ZMQ_KV_PORT_BASE:-28200}"
    scripts/dynamo-local.sh stop >/dev/null 2>&1 || true   # leftovers of an interrupted run (our PIDs only)
    started_stack=1
    if scripts/dynamo-local.sh start; then
      eval "$(scripts/dynamo-local.sh env)"
    else
      echo "scripts/test.sh: starting the Dynamo stack failed (logs: $RUN_DIR/logs)" >&2
      status=1
    fi
  elif [ "${SY_REQUIRE_DYNAMO:-0}" = 1 ]; then
    echo "scripts/test.sh: SY_REQUIRE_DYNAMO=1 but there is no Dynamo venv; run scripts/dynamo-local.sh install" >&2
    status=1
  else
    echo "scripts/test.sh: no Dynamo venv (scripts/dynamo-local.sh install): real-Dynamo tests will skip"
  fi
fi

SY_DYNAMO_TEST_LOG="$(mktemp "${TMPDIR:-/tmp}/sy-real-dynamo.XXXXXX")"
export SY_DYNAMO_TEST_LOG
cargo nextest run --workspace --no-fail-fast --test-threads 1 -E "$REAL and not $DP" --no-tests pass || status=1

# 2b: the second topology, on its own ports and run dir, always stopped on the way out.
if "${VENV:-.dynamo/venv}/bin/python" -c 'import dynamo.frontend' 2>/dev/null; then
  # The dp64 table plus a data-parallel-size-4 capable worker: preflight checks every rank of both.
  dp_workers="efficient-w0 efficient 4 2048 2048 1
efficient-w1 efficient 4 2048 2048 1
efficient-w2 efficient 4 2048 2048 1
capable-dp capable 1 1024 1024 2
capable-dp4 capable 1 1024 1024 4"
  dp_env=(TOPOLOGY=dp64 RUN_DIR="$PWD/.dynamo/test-run-dp64" FRONTEND_PORT=29500 SELECT_PORT=29592
          WORKER_SYS_PORT_BASE=29600 ZMQ_KV_PORT_BASE=29700 WORKERS="$dp_workers")
  env "${dp_env[@]}" scripts/dynamo-local.sh stop >/dev/null 2>&1 || true
  if env "${dp_env[@]}" scripts/dynamo-local.sh start >/dev/null; then
    ( eval "$(env "${dp_env[@]}" scripts/dynamo-local.sh env)"
      cargo nextest run --workspace --no-fail-fast --test-threads 1 -E "$DP" --no-tests pass ) || status=1
  else
    echo "scripts/test.sh: starting the dp64 Dynamo stack failed (logs: .dynamo/test-run-dp64/logs)" >&2
    status=1
  fi
  env "${dp_env[@]}" scripts/dynamo-local.sh stop >/dev/null 2>&1 || true
fi
# 3: the real engine, on its own ports and run dir, always stopped on the way out (its workers hold
#    about 9 GB: it never runs beside another stack).
if "${ENGINE_VENV:-.dynamo/engine-venv}/bin/python" -c 'import vllm, dynamo.vllm' 2>/dev/null; then
  env "${engine_env[@]}" scripts/dynamo-local.sh stop >/dev/null 2>&1 || true
  engine_t0=$SECONDS started_engine=1
  if env "${engine_env[@]}" scripts/dynamo-local.sh start; then
    ( export "${engine_env[@]}"
      eval "$(scripts/dynamo-local.sh env)"
      cargo nextest run --workspace --no-fail-fast --test-threads 1 -E "$ENGINE" --no-tests fail ) || status=1
  else
    echo "scripts/test.sh: starting the real-engine stack failed (logs: .dynamo/test-run-engine/logs)" >&2
    status=1
  fi
  env "${engine_env[@]}" scripts/dynamo-local.sh stop >/dev/null 2>&1 || true
  echo "scripts/test.sh: the real-engine phase took $((SECONDS - engine_t0)) s"
elif [ "${SY_REQUIRE_ENGINE:-0}" = 1 ]; then
  echo "scripts/test.sh: SY_REQUIRE_ENGINE=1 but there is no engine venv; run scripts/dynamo-local.sh install-engine" >&2
  status=1
else
  echo "scripts/test.sh: no engine venv (scripts/dynamo-local.sh install-engine): real-engine tests will skip"
fi

executed=$(grep -c . "$SY_DYNAMO_TEST_LOG" || true)
rm -f "$SY_DYNAMO_TEST_LOG"
echo "real-Dynamo tests executed: $executed (against ${SY_DYNAMO_FRONTEND:-no stack})"
if [ "${SY_REQUIRE_DYNAMO:-0}" = 1 ] && [ "$executed" -eq 0 ]; then
  echo "scripts/test.sh: SY_REQUIRE_DYNAMO=1 but no real-Dynamo test ran against the stack" >&2
  status=1
fi
exit $status
