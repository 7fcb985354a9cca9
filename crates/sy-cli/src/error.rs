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
    /// The exit status for this error.
    pub fn exit_status(&self) -> ExitStatus {
        match self {
            ToolError::BadInput(_) => ExitStatus::BadInput,
            ToolError::Runtime(_) => ExitStatus::Runtime,
        }
    }
}

impl From<sy_run::RunError> for ToolError {
    /// A path the user gave that cannot be used is bad input; a failed write is a runtime
    /// failure.
    fn from(e: sy_run::RunError) -> Self {
        if e.is_bad_input() {
            ToolError::BadInput(e.to_string())
        } else {
            ToolError::Runtime(e.to_string())
        }
    }
}

/// Runs a tool's body and maps its result to an exit code, printing the error chain on stderr.
pub fn run_main(body: impl FnOnce() -> Result<(), ToolError>) -> ExitCode {
    match body() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(e.exit_status() as u8)
        }
    }
}
