#!/usr/bin/env bash
# Regenerates docs/cli.md from the tools' own clap help (`--help` of every binary and subcommand).
# Usage: scripts/gen-cli-docs.sh [BIN_DIR [OUT]]   (default: target/debug, docs/cli.md; builds the binaries first when BIN_DIR is not given)
# The docs test (crates/sy-docs) fails when docs/cli.md differs from what this prints.
set -euo pipefail
cd "$(dirname "$0")/.."
bin_dir=${1:-target/debug}
if [ -z "${1:-}" ]; then
  cargo build -q --features sy-collect/sim,sy-eval/sim -p sy-collect -p sy-fit -p sy-margin -p sy-select -p sy-sim -p sy-eval
fi
tools="sy-collect sy-fit sy-margin sy-select sy-sim sy-eval"
out=$(mktemp)
{
  echo "# CLI reference"
  echo
  echo "Generated from the tools' clap definitions by \`scripts/gen-cli-docs.sh\`; do not edit by hand."
  echo "Every tool also answers \`--version\` and \`--completions SHELL\` (bash, zsh, fish, elvish, powershell)."
  for t in $tools; do
    echo
    echo "## \`$t\`"
    echo
    echo '```text'
    COLUMNS=100 "$bin_dir/$t" --help
    echo '```'
    # subcommands, if any: the lines of the "Commands:" section
    subs=$(COLUMNS=100 "$bin_dir/$t" --help | awk '/^Commands:/{on=1;next} on&&/^[^ ]/{on=0} on&&/^  [a-z]/{print $1}' | grep -v '^help$' || true)
    for s in $subs; do
      echo
      echo "### \`$t $s\`"
      echo
      echo '```text'
      COLUMNS=100 "$bin_dir/$t" "$s" --help
      echo '```'
    done
  done
} > "$out"
mv "$out" "${2:-docs/cli.md}"
echo "wrote ${2:-docs/cli.md}"
