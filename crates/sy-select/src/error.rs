//! The errors of `sy-select`'s library, one enum per concern: the selection pipeline
//! ([`SelectError`]), the choice itself ([`ChoiceError`]), one seed of the stability check
//! ([`SeedError`]), replaying a bundle ([`ReplayError`]), the observation document of `decide`
//! ([`ObservationsError`]); reading `selection.json` is the run directory's
//! (`sy_rundir::artifact::selection::SelectionFileError`).
//!
//! Every message names the file, field or flag and what was expected; `is_bad_input` tells the
//! input's fault (exit code 2) from a runtime failure (exit code 1). The binary turns them into
//! `sy_cli::ToolError` at the edge (the `From` impls at the end).

use std::path::PathBuf;

use sy_calibration::inputs::InputsError;
use sy_calibration::margins::MarginsFileError;
use sy_cli::RunError;
use sy_records::{RecordsError, Split};
use sy_selector::{BundleError, ParamsError, Variant};

use crate::search::SearchError;

/// Why the r/p search and the choice of rule and estimator failed.
#[derive(Debug, thiserror::Error)]
pub enum ChoiceError {
    /// The fit-split probes cannot be searched over (none, or a bad TTFT).
    #[error("r/p search: {0}")]
    Search(#[source] SearchError),
    /// A variant has no replay (a bug, not the input's fault).
    #[error("internal: no replay of {0}")]
    MissingReplay(Variant),
}

impl ChoiceError {
    /// Whether the error is the input's fault (exit code 2) rather than a bug (1).
    pub fn is_bad_input(&self) -> bool {
        matches!(self, ChoiceError::Search(_))
    }
}

/// Why the selection pipeline (`sy-select` without a subcommand) failed.
#[derive(Debug, thiserror::Error)]
pub enum SelectError {
    /// Records, `fit.json` or `splits.json` cannot be used.
    #[error(transparent)]
    Inputs(#[from] InputsError),
    /// `margins.json` cannot be used.
    #[error(transparent)]
    MarginsFile(#[from] MarginsFileError),
    /// The records do not fit the split table.
    #[error(transparent)]
    Records(#[from] RecordsError),
    /// An output path cannot be used, or writing failed.
    #[error(transparent)]
    Run(#[from] RunError),
    /// `margins.json` lists fewer files than it was computed from.
    #[error(
        "{}: field `input_files` lists {listed} file(s); expected the records, fit.json and \
         splits.json it was computed from",
        path.display()
    )]
    MarginsInputs { path: PathBuf, listed: usize },
    /// `margins.json` was computed on another split than `splits.json`.
    #[error(
        "{}: split seed {margins_seed} differs from {splits_seed} in {} (margins computed on \
         another split)",
        margins.display(),
        splits.display()
    )]
    SplitSeed {
        margins: PathBuf,
        margins_seed: u64,
        splits: PathBuf,
        splits_seed: u64,
    },
    #[error("no measured load-phase pair in the fit split: nothing to search r/p on")]
    NoFitPairs,
    #[error(
        "no measured load-phase pair in the selection split: nothing to evaluate the variants on"
    )]
    NoSelectionPairs,
    /// The fitted estimators, margins or limits do not make usable rule parameters.
    #[error("cannot build the rule's parameters: {0}")]
    Params(#[source] ParamsError),
    #[error(transparent)]
    Choice(#[from] ChoiceError),
    #[error("cannot freeze the bundle: {0}")]
    Freeze(#[source] BundleError),
    #[error("cannot serialise the bundle: {0}")]
    SerialiseBundle(#[source] BundleError),
    /// Drawing or writing the report failed.
    #[error(transparent)]
    Report(#[from] sy_report::ReportError),
}

impl SelectError {
    /// Whether the error is the input's fault (exit code 2) rather than the system's (1).
    pub fn is_bad_input(&self) -> bool {
        match self {
            SelectError::Inputs(e) => e.is_bad_input(),
            SelectError::Records(e) => e.is_bad_input(),
            SelectError::Run(e) => e.is_bad_input(),
            SelectError::Choice(e) => e.is_bad_input(),
            SelectError::SerialiseBundle(_) | SelectError::Report(_) => false,
            SelectError::MarginsFile(_)
            | SelectError::MarginsInputs { .. }
            | SelectError::SplitSeed { .. }
            | SelectError::NoFitPairs
            | SelectError::NoSelectionPairs
            | SelectError::Params(_)
            | SelectError::Freeze(_) => true,
        }
    }
}

/// Why the calibration of one split seed of the stability check could not be made (reported in
/// `selection.json`'s `stability.failed`, never fatal).
#[derive(Debug, thiserror::Error)]
pub enum SeedError {
    #[error("{0}")]
    Fit(#[source] sy_calibration::fitting::FitError),
    /// No margin for the named estimator: no uncertainty-split pair gave an error.
    #[error("no uncertainty-split pair ({0})")]
    NoUncertaintyPair(&'static str),
    #[error("{0}")]
    Params(#[source] ParamsError),
    #[error("an empty fit or selection split")]
    EmptySplit,
    #[error("{0}")]
    Choice(#[source] ChoiceError),
    #[error("a stability thread panicked")]
    Panicked,
}

/// Why `sy-select replay` (or loading a bundle) failed.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// The bundle file cannot be read (the message names it).
    #[error("{0}")]
    BundleUnreadable(#[source] BundleError),
    /// The bundle is not a valid bundle.
    #[error("{}: {source}", path.display())]
    Bundle {
        path: PathBuf,
        #[source]
        source: BundleError,
    },
    /// The records or `splits.json` cannot be used.
    #[error(transparent)]
    Inputs(#[from] InputsError),
    /// The records do not fit the split table.
    #[error(transparent)]
    Records(#[from] RecordsError),
    /// A record file cannot be hashed, or writing the decisions failed.
    #[error(transparent)]
    Run(#[from] RunError),
    /// Nothing to replay (in the split, when one was asked for).
    #[error(
        "no measured load-phase pair to replay{}",
        split.map_or(String::new(), |s| format!(" in the {} split", s.as_str()))
    )]
    NoPairs { split: Option<Split> },
    #[error("cannot serialise a decision: {0}")]
    SerialiseDecision(#[source] serde_json::Error),
    #[error("cannot write {} as Parquet: {source}", path.display())]
    Parquet {
        path: PathBuf,
        #[source]
        source: polars::prelude::PolarsError,
    },
}

impl ReplayError {
    /// Whether the error is the input's fault (exit code 2) rather than the system's (1).
    pub fn is_bad_input(&self) -> bool {
        match self {
            ReplayError::Inputs(e) => e.is_bad_input(),
            ReplayError::Records(e) => e.is_bad_input(),
            ReplayError::Run(e) => e.is_bad_input(),
            ReplayError::SerialiseDecision(_) | ReplayError::Parquet { .. } => false,
            ReplayError::BundleUnreadable(_)
            | ReplayError::Bundle { .. }
            | ReplayError::NoPairs { .. } => true,
        }
    }
}

/// What an observation document must hold.
const EXPECTED_OBSERVATIONS: &str = "expected {proposal, efficient, capable, now_ms, \
                                     local_capable_in_flight}; see crates/sy-select/README.md";

/// Why the observation document of `sy-select decide` cannot be used (always the input's
/// fault).
#[derive(Debug, thiserror::Error)]
pub enum ObservationsError {
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: not valid JSON: {source} ({EXPECTED_OBSERVATIONS})", path.display())]
    Json {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error(
        "{}: not an observation document: expected a JSON object ({EXPECTED_OBSERVATIONS})",
        path.display()
    )]
    NotAnObject { path: PathBuf },
    #[error("{}: field `{field}`: missing ({EXPECTED_OBSERVATIONS})", path.display())]
    Missing { path: PathBuf, field: &'static str },
    /// A candidate's member is not an object (`"capable": []` would otherwise read as an
    /// observation with every field absent).
    #[error(
        "{}: field `{field}`: expected an observation object, found {found}",
        path.display()
    )]
    NotAnObservation {
        path: PathBuf,
        field: &'static str,
        found: &'static str,
    },
    #[error(
        "{}: not a valid observation document: {source} ({EXPECTED_OBSERVATIONS})",
        path.display()
    )]
    Invalid {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
}

impl ObservationsError {
    /// Always: an unusable observation document is the input's fault (exit code 2).
    pub fn is_bad_input(&self) -> bool {
        true
    }
}

sy_cli::tool_error_from!(SelectError, ReplayError, ObservationsError);
