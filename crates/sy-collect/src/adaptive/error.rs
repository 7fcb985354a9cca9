//! What can stop an adaptive collection's decision step (each names what it concerns).

use std::path::PathBuf;

/// A round's re-decision or the adaptive state failed.
#[derive(Debug, thiserror::Error)]
pub enum AdaptiveError {
    /// The re-decision (the prequential statistic) cannot be made.
    #[error("adaptive: {0}")]
    Prequential(#[from] sy_calibration::prequential::PrequentialError),
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
