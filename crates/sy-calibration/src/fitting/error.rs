//! Why a fit cannot be made, and why `--alpha-grid` cannot be used; every message names the
//! model, the estimator or the setting.

use std::collections::BTreeMap;

use crate::fitting::qbuild::QBuildError;
use crate::fitting::ridge::RidgeError;

/// Why the fit cannot be made (all of these are the input's fault).
#[derive(Debug, thiserror::Error)]
pub enum FitError {
    #[error(transparent)]
    QTable(#[from] QBuildError),
    #[error("the fit split has {0} condition(s); grouped cross-validation needs at least 2")]
    TooFewConditions(usize),
    #[error("no usable fit-split rows for the {model} model ({why})")]
    NoRows {
        model: &'static str,
        why: NoRowsCause,
    },
    #[error("the {model} model's {estimator} correction: {source}")]
    Ridge {
        model: &'static str,
        estimator: &'static str,
        #[source]
        source: RidgeError,
    },
    #[error("bad settings: --folds must be ≥ 2, got {0}")]
    Folds(usize),
    #[error("bad settings: the alpha grid is empty")]
    EmptyAlphaGrid,
}

/// Why a model has no fit-split rows to fit (see [`FitError::NoRows`]).
#[derive(Debug, thiserror::Error)]
pub enum NoRowsCause {
    /// No row with valid N, R and P (the skipped rows per field, when counted).
    #[error(
        "no ok load-phase records with valid N, R and P in the fit split{}",
        skipped_text(skipped)
    )]
    Features {
        skipped: Option<BTreeMap<String, usize>>,
    },
    /// The standardiser cannot be fitted on the rows.
    #[error(transparent)]
    Standardiser(#[from] sy_selector::StandardiserError),
    /// No row with a usable target for this estimator (the skipped rows per reason, when
    /// counted).
    #[error(
        "no fit-split row has a usable {estimator} target{}",
        skipped_text(skipped)
    )]
    Target {
        estimator: &'static str,
        skipped: Option<BTreeMap<String, usize>>,
    },
}

fn skipped_text(skipped: &Option<BTreeMap<String, usize>>) -> String {
    skipped
        .as_ref()
        .map_or_else(String::new, |s| format!("; skipped: {s:?}"))
}

/// Why `--alpha-grid` cannot be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AlphaGridError {
    #[error("alpha grid {0:?}: expected LO:HI:COUNT, e.g. 1e-4:1e6:41")]
    Shape(String),
    #[error("alpha grid: {0:?} is not a number")]
    NotNumber(String),
    #[error("alpha grid: {0:?} is not a count")]
    NotCount(String),
    #[error("alpha grid {0:?}: need 0 < LO < HI (finite) and COUNT ≥ 2")]
    Range(String),
    #[error("alpha grid is empty")]
    Empty,
    #[error("alpha grid: {0} is not a finite alpha ≥ 0")]
    NotAlpha(f64),
}
