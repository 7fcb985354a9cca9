#!/usr/bin/env bash
# The whole test suite: the command the README names and .ci/run calls.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo nextest run --workspace --no-fail-fast
cargo test --workspace --doc
