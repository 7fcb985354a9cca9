//! The collector's errors: bad input (exit 2) or a runtime failure (exit 1).

/// A failed run. Messages name the file, field or URL concerned.
#[derive(Debug, thiserror::Error)]
pub enum CollectError {
    #[error("{0}")]
    BadInput(String),
    #[error("{0}")]
    Runtime(String),
}

impl From<CollectError> for sy_cli::ToolError {
    fn from(e: CollectError) -> Self {
        match e {
            CollectError::BadInput(m) => sy_cli::ToolError::BadInput(m),
            CollectError::Runtime(m) => sy_cli::ToolError::Runtime(m),
        }
    }
}

impl From<crate::plan::PlanError> for CollectError {
    fn from(e: crate::plan::PlanError) -> Self {
        CollectError::BadInput(e.to_string())
    }
}

impl From<sy_drive::TargetError> for CollectError {
    fn from(e: sy_drive::TargetError) -> Self {
        if e.is_bad_input() {
            CollectError::BadInput(e.to_string())
        } else {
            CollectError::Runtime(e.to_string())
        }
    }
}

impl From<crate::results::ResultsError> for CollectError {
    fn from(e: crate::results::ResultsError) -> Self {
        if e.is_bad_input() {
            CollectError::BadInput(e.to_string())
        } else {
            CollectError::Runtime(e.to_string())
        }
    }
}

impl From<sy_run::RunError> for CollectError {
    fn from(e: sy_run::RunError) -> Self {
        if e.is_bad_input() {
            CollectError::BadInput(e.to_string())
        } else {
            CollectError::Runtime(e.to_string())
        }
    }
}
