//! sy-eval's errors: bad input (exit 2), a runtime failure (exit 1), or an interruption (exit 1,
//! the finished blocks are kept: rerun with `--resume`).

/// A failed evaluation. Messages name the file, field or URL concerned.
#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    #[error("{0}")]
    BadInput(String),
    #[error("{0}")]
    Runtime(String),
    #[error("interrupted; the finished blocks are kept: rerun with --resume")]
    Interrupted,
}

impl From<EvalError> for sy_cli::ToolError {
    fn from(e: EvalError) -> Self {
        match e {
            EvalError::BadInput(m) => sy_cli::ToolError::BadInput(m),
            EvalError::Runtime(m) => sy_cli::ToolError::Runtime(m),
            EvalError::Interrupted => sy_cli::ToolError::Runtime(e.to_string()),
        }
    }
}

impl From<crate::plan::PlanError> for EvalError {
    fn from(e: crate::plan::PlanError) -> Self {
        EvalError::BadInput(e.to_string())
    }
}

impl From<sy_drive::TargetError> for EvalError {
    fn from(e: sy_drive::TargetError) -> Self {
        if e.is_bad_input() {
            EvalError::BadInput(e.to_string())
        } else {
            EvalError::Runtime(e.to_string())
        }
    }
}

impl From<crate::sessions::TraceError> for EvalError {
    fn from(e: crate::sessions::TraceError) -> Self {
        EvalError::BadInput(e.to_string())
    }
}

impl From<sy_run::RunError> for EvalError {
    /// A path that cannot be used (a link, a run directory of another tool or writer) is bad
    /// input; a failed write is a runtime failure.
    fn from(e: sy_run::RunError) -> Self {
        if e.is_bad_input() {
            EvalError::BadInput(e.to_string())
        } else {
            EvalError::Runtime(e.to_string())
        }
    }
}
