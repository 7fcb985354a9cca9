#!/usr/bin/env bash
# Capture Dynamo 1.6.1's wire format into crates/sy-wire/tests/fixtures/dynamo-1.6.1/ (see the .py beside
# this file). Starts a fresh stack with scripts/dynamo-local.sh (installing it first if needed) unless one
# is already running, and stops only what it started.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-$PWD/.dynamo/venv}"
scripts/dynamo-local.sh install
started=0
if ! scripts/dynamo-local.sh status >/dev/null 2>&1; then
  scripts/dynamo-local.sh start
  started=1
fi
cleanup() { [ "$started" = 1 ] && scripts/dynamo-local.sh stop >/dev/null; }
trap cleanup EXIT
"$VENV/bin/python" scripts/capture-dynamo-fixtures.py "$@"
