//! `sy-fit`: see the library docs.

use clap::Parser;

fn main() -> std::process::ExitCode {
    let cli = sy_fit::cli::Cli::parse();
    sy_cli::run_main(|| sy_fit::cli::run(cli))
}
