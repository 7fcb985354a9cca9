//! Errors at the binary edge and the exit codes every tool shares.

use std::process::ExitCode;

/// Exit codes shared by every sy tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitStatus {
    /// Success.
    Ok = 0,
    /// A runtime failure (I/O, network, server): the input was fine.
    Runtime = 1,
    /// Bad input: a file, row, field or flag that is not what was expected.
    BadInput = 2,
}

/// An error as the user sees it: the message names the file, row or field, and the kind picks
/// the exit code.
#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    #[error("{0}")]
    BadInput(String),
    #[error("{0}")]
    Runtime(String),
}

impl ToolError {
    /// The error as the user sees it of a library's typed error: its message, and bad input
    /// (exit code 2) or a runtime failure (exit code 1). The libraries' `From` impls use this.
    pub fn classify(e: &impl std::fmt::Display, bad_input: bool) -> ToolError {
        if bad_input {
            ToolError::BadInput(e.to_string())
        } else {
            ToolError::Runtime(e.to_string())
        }
    }

    /// The exit status for this error.
    pub fn exit_status(&self) -> ExitStatus {
        match self {
            ToolError::BadInput(_) => ExitStatus::BadInput,
            ToolError::Runtime(_) => ExitStatus::Runtime,
        }
    }
}

/// Any library error ([`sy_rundir::Fault`]): its message, and bad input (exit code 2) or a runtime
/// failure (exit code 1) as the error says.
impl<E: sy_rundir::Fault> From<E> for ToolError {
    fn from(e: E) -> Self {
        ToolError::classify(&e, e.is_bad_input())
    }
}

/// A `--run-dir` that cannot be used (always bad input).
#[derive(Debug, thiserror::Error)]
pub enum RunDirError {
    /// The path exists but is not a directory.
    #[error(
        "--run-dir {}: not a directory (a run directory holds records.jsonl, manifest.json, \
         fit.json, ...): pass a directory, or name a file with its own flag (--records, --fit, ...)",
        .0.display()
    )]
    NotADirectory(std::path::PathBuf),
}

impl RunDirError {
    /// Always: a `--run-dir` that cannot be used is the input's fault.
    pub fn is_bad_input(&self) -> bool {
        true
    }
}

sy_rundir::impl_fault!(RunDirError);

/// `sy_rundir::Fault` (and so `From<E> for ToolError`) for library error types `E` with an
/// `is_bad_input(&self) -> bool` method: the message is `E`'s, the exit code 2 when
/// `is_bad_input`, else 1. One call per crate, beside its error types:
/// `sy_cli::tool_error_from!(MarginError, CliError);`.
pub use sy_rundir::impl_fault as tool_error_from;

/// Runs a tool's body and maps its result to an exit code, printing the error chain on stderr.
pub fn run_main(body: impl FnOnce() -> Result<(), ToolError>) -> ExitCode {
    match body() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Input-derived text (a plan's name, a path, a field's value) never reaches the
            // terminal raw: no control sequence, no line that passes for one of the tool's own.
            eprintln!("error: {}", sy_rundir::terminal_message(&e.to_string()));
            ExitCode::from(e.exit_status() as u8)
        }
    }
}
