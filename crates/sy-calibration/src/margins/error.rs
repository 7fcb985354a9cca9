//! The error of computing `margins.json` ([`MarginError`]: the `--level`, the inputs, the
//! records against the split table, the output, or an estimator without a usable pair). The
//! error of reading it is `sy_rundir::artifact::margins::MarginsFileError`, beside its type.
//!
//! Every message names the file and field and what was expected. The binaries turn it into
//! `sy_cli::ToolError` at the edge (through `sy_rundir::Fault`, implemented at the end).

use sy_records::RecordsError;
use sy_rundir::RunError;

use crate::inputs::InputsError;

/// Why `sy-margin` cannot compute or write the margins.
#[derive(Debug, thiserror::Error)]
pub enum MarginError {
    #[error("--level {0} must be strictly between 0 and 1")]
    Level(f64),
    #[error(transparent)]
    Inputs(#[from] InputsError),
    /// The records do not fit the split table (a condition missing from `splits.json`, ...).
    #[error(transparent)]
    Records(#[from] RecordsError),
    /// The output path cannot be used, or writing it failed.
    #[error(transparent)]
    Run(#[from] RunError),
    /// No pair of the uncertainty split gave an error for this estimator.
    #[error(
        "no usable pair in the uncertainty split for the {estimator} estimator ({pairs} \
         load-phase pairs in the split, {unmeasured} unmeasured, {excluded} excluded): cannot \
         compute a margin"
    )]
    NoUsablePair {
        estimator: &'static str,
        pairs: usize,
        unmeasured: u64,
        excluded: u64,
    },
}

impl MarginError {
    /// Whether the error is the input's fault (exit code 2) rather than the system's (1).
    pub fn is_bad_input(&self) -> bool {
        match self {
            MarginError::Inputs(e) => e.is_bad_input(),
            MarginError::Records(e) => e.is_bad_input(),
            MarginError::Run(e) => e.is_bad_input(),
            MarginError::Level(_) | MarginError::NoUsablePair { .. } => true,
        }
    }
}

sy_rundir::impl_fault!(MarginError);
