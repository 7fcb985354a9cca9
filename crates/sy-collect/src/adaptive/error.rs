//! What can stop an adaptive collection's decision step (each names what it concerns).

use std::path::PathBuf;

/// A round's re-decision or the adaptive state failed.
#[derive(Debug, thiserror::Error)]
pub enum AdaptiveError {
    #[error("adaptive: the records so far cannot be tabled: {0}")]
    Records(#[from] sy_records::RecordsError),
    #[error("adaptive: round {round}: the rule cannot be fitted on the earlier rounds: {source}")]
    Fit {
        round: u32,
        #[source]
        source: sy_calibration::fitting::FitError,
    },
    #[error(
        "adaptive: round {round}: no measured pair in the earlier rounds' uncertainty conditions \
         for the {estimator} margin"
    )]
    NoMargin { round: u32, estimator: &'static str },
    #[error("adaptive: {0}")]
    Sequential(#[from] sy_stats::sequential::SequentialError),
    /// `adaptive.json` cannot be read or written (the file is named).
    #[error("adaptive: {0}")]
    File(#[from] sy_rundir::artifact::adaptive::AdaptiveFileError),
    #[error(
        "adaptive: {path} belongs to another plan or seed (plan sha256 {found}, this plan {expected}): \
         a resumed adaptive run must use the same plan"
    )]
    OtherPlan {
        path: PathBuf,
        found: String,
        expected: String,
    },
    #[error("--adaptive: plan {path} has no [adaptive] section")]
    NoSection { path: PathBuf },
    #[error("adaptive: cannot create run directory {path}: {source}")]
    RunDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl AdaptiveError {
    /// Whether the input is at fault (exit 2) rather than the run (exit 1).
    pub fn is_bad_input(&self) -> bool {
        match self {
            AdaptiveError::File(e) => e.is_bad_input(),
            AdaptiveError::OtherPlan { .. } | AdaptiveError::NoSection { .. } => true,
            _ => false,
        }
    }
}
