//! What can stop an adaptive collection's decision step (each names what it concerns).

use std::path::PathBuf;

/// A round's re-decision or the adaptive state failed.
#[derive(Debug, thiserror::Error)]
pub enum AdaptiveError {
    /// The re-decision (the prequential statistic) cannot be made.
    #[error("adaptive: {0}")]
    Prequential(#[from] sy_calibration::prequential::PrequentialError),
    #[error("adaptive: cannot read {path}: {message}")]
    State { path: PathBuf, message: String },
    #[error(
        "adaptive: {path} belongs to another plan or seed (plan sha256 {found}, this plan {expected}): \
         a resumed adaptive run must use the same plan"
    )]
    OtherPlan {
        path: PathBuf,
        found: String,
        expected: String,
    },
    #[error("adaptive: cannot write {path}: {message}")]
    Write { path: PathBuf, message: String },
    #[error("--adaptive: plan {path} has no [adaptive] section")]
    NoSection { path: PathBuf },
    #[error("adaptive: cannot create run directory {path}: {message}")]
    RunDir { path: PathBuf, message: String },
}

impl AdaptiveError {
    /// Whether the input is at fault (exit 2) rather than the run (exit 1).
    pub fn is_bad_input(&self) -> bool {
        matches!(
            self,
            AdaptiveError::State { .. }
                | AdaptiveError::OtherPlan { .. }
                | AdaptiveError::NoSection { .. }
        )
    }
}
