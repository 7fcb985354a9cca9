//! `sy-margin`: see the library docs (the command line is `sy_margin::cli`).

fn main() -> std::process::ExitCode {
    sy_margin::cli::main()
}
