//! sy-eval: the frozen rule, live, on multi-turn agent sessions (see the library for the why).

use clap::Parser;

fn main() -> std::process::ExitCode {
    sy_cli::run_main(|| sy_eval::cli::main_with(sy_eval::cli::Args::parse()))
}
