//! `sy-fit`: see the library docs.

use clap::Parser;

fn main() -> std::process::ExitCode {
    sy_cli::keep_freed_memory(sy_cli::Arenas::PerThread);
    let cli = sy_fit::cli::Cli::parse();
    // The typed error becomes the user's message and exit code here, at the edge.
    sy_cli::run_main(|| Ok(sy_fit::cli::run(cli)?))
}
