//! sy-eval's error: one variant per concern, each a typed error naming the file, field or URL
//! concerned; [`EvalError::is_bad_input`] decides the exit code (2 bad input, 1 a runtime
//! failure or an interruption, after which the finished blocks are kept: rerun with `--resume`).

use sy_drive::{PlanError, TargetError};
use sy_selector::Variant;

use crate::quiescence::QuiescenceError;
use crate::run::RunDirError;
use crate::sessions::TraceError;

/// A failed evaluation.
#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error(transparent)]
    Trace(#[from] TraceError),
    /// The plan names a bearer-token variable that is not set.
    #[error(transparent)]
    Bearer(#[from] sy_drive::BearerUnset),
    /// The bundle file cannot be read.
    #[error(transparent)]
    BundleRead(sy_selector::BundleError),
    /// The bundle is not a valid bundle.
    #[error("bundle {}: {source}", .path.display())]
    Bundle {
        path: std::path::PathBuf,
        #[source]
        source: sy_selector::BundleError,
    },
    #[error(transparent)]
    RunDir(#[from] RunDirError),
    #[error(transparent)]
    Output(#[from] sy_rundir::RunError),
    #[error(transparent)]
    Target(#[from] TargetError),
    #[error(transparent)]
    Deployment(#[from] QuiescenceError),
    #[error("cannot build the HTTP client: {0}")]
    HttpClient(#[source] reqwest::Error),
    #[error("a session task failed: {0}")]
    SessionTask(#[source] tokio::task::JoinError),
    #[error(
        "block r{round}-{variant}: {} reservations could not be deleted: {ids:?}",
        .ids.len()
    )]
    Leaked {
        round: u32,
        variant: Variant,
        ids: Vec<String>,
    },
    #[error("{0}")]
    Serialize(#[source] serde_json::Error),
    #[error("{0}")]
    Report(#[source] sy_report::ReportError),
    #[error("interrupted; the finished blocks are kept: rerun with --resume")]
    Interrupted,
}

impl EvalError {
    /// Whether the caller's input is at fault (exit 2) rather than the run (exit 1).
    pub fn is_bad_input(&self) -> bool {
        match self {
            EvalError::Plan(_)
            | EvalError::Trace(_)
            | EvalError::Bearer(_)
            | EvalError::BundleRead(_)
            | EvalError::Bundle { .. } => true,
            EvalError::RunDir(e) => e.is_bad_input(),
            EvalError::Output(e) => e.is_bad_input(),
            EvalError::Target(e) => e.is_bad_input(),
            _ => false,
        }
    }
}

impl From<EvalError> for sy_cli::ToolError {
    fn from(e: EvalError) -> Self {
        if e.is_bad_input() {
            sy_cli::ToolError::BadInput(e.to_string())
        } else {
            sy_cli::ToolError::Runtime(e.to_string())
        }
    }
}
