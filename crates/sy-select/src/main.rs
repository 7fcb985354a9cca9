//! `sy-select`: see the library docs (the command line is `sy_select::cli`).

fn main() -> std::process::ExitCode {
    sy_select::cli::main()
}
