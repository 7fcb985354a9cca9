//! Documentation tests for the sy workspace (no library code).
//!
//! `tests/readme.rs` runs every README block marked `<!-- runnable -->` against the debug binaries
//! and checks that `docs/cli.md` is what `scripts/gen-cli-docs.sh` generates from the tools' clap
//! definitions, so neither can drift from the code.
