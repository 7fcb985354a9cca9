//! `margins.json`: the margin of each estimator with what is needed to judge it (`sy-margin`
//! writes it; `sy-select` reads it). The statistics are computed in `sy_calibration::margins`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sy_selector::{Estimator, InputFile};

/// Defined with the run directory's layout.
pub use crate::layout::MARGINS_SCHEMA_VERSION;
use crate::layout::{Artifact, ArtifactError};

/// `margins.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MarginsFile {
    pub schema_version: u32,
    /// `sy-margin` and its version.
    pub tool_versions: BTreeMap<String, String>,
    /// Records, fit.json and splits.json with their SHA-256.
    pub input_files: Vec<InputFile>,
    pub split_seed: u64,
    /// The split the margins come from (always `uncertainty`).
    pub split: String,
    /// The percentile level (0.9).
    pub level: f64,
    /// Load-phase paired probes in the uncertainty split.
    pub pairs_in_split: u64,
    /// Of those, pairs where a candidate has no measured TTFT (failed probe): not used.
    pub pairs_unmeasured: u64,
    /// The margin of `blind` (ms): `blind.delta_ms`.
    pub delta_blind_ms: f64,
    /// The margin of `cache` (ms): `cache.delta_ms`.
    pub delta_cache_ms: f64,
    pub blind: EstimatorMargin,
    pub cache: EstimatorMargin,
    /// Human-readable warnings (too few conditions, excluded pairs).
    pub warnings: Vec<String>,
}

impl MarginsFile {
    /// The margin of one estimator.
    pub fn estimator(&self, estimator: Estimator) -> &EstimatorMargin {
        match estimator {
            Estimator::Blind => &self.blind,
            Estimator::Cache => &self.cache,
        }
    }

    /// Both estimators' margins, in the order of [`Estimator::ALL`].
    pub fn estimators(&self) -> [(Estimator, &EstimatorMargin); 2] {
        Estimator::ALL.map(|e| (e, self.estimator(e)))
    }

    /// Reads and checks a `margins.json`.
    pub fn read(path: &Path) -> Result<MarginsFile, MarginsFileError> {
        let m: MarginsFile = crate::read_artifact(Artifact::Margins, path)?;
        for (field, value) in [
            ("delta_blind_ms", m.delta_blind_ms),
            ("delta_cache_ms", m.delta_cache_ms),
        ] {
            if !(value.is_finite() && (0.0..=sy_selector::MAX_PLAUSIBLE_MS).contains(&value)) {
                return Err(MarginsFileError::Delta {
                    path: path.to_path_buf(),
                    field,
                    value,
                });
            }
        }
        Ok(m)
    }
}

/// The margin of one estimator plus why pairs were excluded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EstimatorMargin {
    #[serde(flatten)]
    pub estimate: MarginEstimate,
    /// Excluded pairs by reason (`invalid_input`, `out_of_range`, `non_positive`).
    pub excluded_by_reason: BTreeMap<String, u64>,
}

/// The margin of one estimator with everything needed to judge it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MarginEstimate {
    /// The margin (the proposal's definition): 90th percentile across conditions of each
    /// condition's largest absolute advantage error (ms). `None` without any condition.
    pub delta_ms: Option<f64>,
    /// The percentile level used (0.9).
    pub level: f64,
    /// G: the number of conditions with at least one usable pair.
    pub conditions: u64,
    /// The split-conformal bound: the `⌈level · (G + 1)⌉`-th smallest condition score (`None` =
    /// infinite: too few conditions).
    pub conformal_ms: Option<f64>,
    /// Its rank `⌈level · (G + 1)⌉`.
    pub conformal_rank: u64,
    /// The margin a per-probe percentile would give (every pair's absolute error pooled, same
    /// level): it does not grow with the number of repeats.
    pub per_probe_delta_ms: Option<f64>,
    /// Pairs that entered the scores.
    pub pairs_used: u64,
    /// Pairs excluded because a prediction was invalid, non-finite or non-positive.
    pub pairs_excluded: u64,
    /// Repeats per condition.
    pub repeats: Option<RepeatSummary>,
    /// Mean signed error predicted − measured over the used pairs (ms): the estimator's bias.
    pub mean_error_ms: Option<f64>,
    /// The per-condition scores, sorted by score (for the report's CDF).
    pub condition_scores: Vec<ConditionScore>,
}

/// Distribution of repeats per condition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RepeatSummary {
    pub min: u64,
    pub median: f64,
    pub mean: f64,
    pub max: u64,
}

/// One condition's score: the largest absolute advantage error over its repeats.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConditionScore {
    pub condition_id: String,
    /// max over repeats of |predicted − measured| (ms).
    pub score_ms: f64,
    /// Paired probes (repeats) that entered the score.
    pub repeats: u64,
}

/// Why a `margins.json` cannot be used (always the input's fault).
#[derive(Debug, thiserror::Error)]
pub enum MarginsFileError {
    /// Not readable, not JSON, another kind of file, another version, or not the layout (the
    /// member is named).
    #[error(transparent)]
    Artifact(#[from] ArtifactError),
    #[error(
        "{}: field `{field}` = {value}, expected a finite non-negative number of ms of at most \
         {} (one hour)",
        path.display(),
        sy_selector::MAX_PLAUSIBLE_MS
    )]
    Delta {
        path: PathBuf,
        field: &'static str,
        value: f64,
    },
}

impl MarginsFileError {
    /// Always: a margins file that cannot be used is the input's fault (exit code 2).
    pub fn is_bad_input(&self) -> bool {
        true
    }
}

crate::impl_fault!(MarginsFileError);
