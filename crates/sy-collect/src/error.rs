//! The collector's error: one variant per concern, each its own typed error naming the file,
//! field or URL concerned; [`CollectError::is_bad_input`] decides the exit code (2 bad input,
//! 1 a runtime failure).

use sy_drive::{PlanError, TargetError};

use crate::preflight::PreflightError;
use crate::results::ResultsError;
use crate::run::{RunDirError, RunFailure};

/// A failed run.
#[derive(Debug, thiserror::Error)]
pub enum CollectError {
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error(transparent)]
    Output(#[from] sy_rundir::RunError),
    #[error(transparent)]
    RunDir(#[from] RunDirError),
    #[error(transparent)]
    Results(#[from] ResultsError),
    #[error(transparent)]
    Target(#[from] TargetError),
    #[error(transparent)]
    Preflight(#[from] PreflightError),
    #[error(transparent)]
    Run(#[from] RunFailure),
    #[error(transparent)]
    Adaptive(#[from] crate::adaptive::AdaptiveError),
}

impl CollectError {
    /// Whether the caller's input is at fault (exit 2) rather than the run (exit 1).
    pub fn is_bad_input(&self) -> bool {
        match self {
            CollectError::Plan(_) => true,
            CollectError::Output(e) => e.is_bad_input(),
            CollectError::RunDir(e) => e.is_bad_input(),
            CollectError::Results(e) => e.is_bad_input(),
            CollectError::Target(e) => e.is_bad_input(),
            CollectError::Preflight(e) => e.is_bad_input(),
            CollectError::Run(e) => e.is_bad_input(),
            CollectError::Adaptive(e) => e.is_bad_input(),
        }
    }
}

impl From<CollectError> for sy_cli::ToolError {
    fn from(e: CollectError) -> Self {
        if e.is_bad_input() {
            sy_cli::ToolError::BadInput(e.to_string())
        } else {
            sy_cli::ToolError::Runtime(e.to_string())
        }
    }
}
