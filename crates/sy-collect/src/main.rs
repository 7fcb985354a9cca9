//! sy-collect: the calibration load generator (see the library for the why).

use clap::Parser;

fn main() -> std::process::ExitCode {
    sy_cli::run_main(|| sy_collect::cli::main_with(sy_collect::cli::Args::parse()))
}
