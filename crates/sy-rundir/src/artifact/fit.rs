//! `fit.json`: what `sy-fit` writes and `sy-margin` / `sy-select` read.
//!
//! `models.<efficient|capable>.estimators` is sy-selector's [`ModelEstimators`] verbatim (Q
//! table, standardiser, blind and cache load corrections), so later tools deserialise it directly;
//! everything else is diagnostics and provenance. The file is deterministic: no timestamps and no
//! input hashes, so the same fit-split and Q-grid data always give the same bytes (rows of the
//! other splits never change it, except through `data_check`, the verdict on all the records of
//! a collected run). `schemas/fit.schema.json` describes it. The code that builds it is `sy-calibration`'s and
//! `sy-fit`'s.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use sy_selector::{Estimator, Model, ModelEstimators};

use crate::split::{SplitCounts, SplitFractions};
use crate::{Artifact, ArtifactError};

/// The tool that wrote a file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolInfo {
    pub name: String,
    pub version: String,
}

/// The split the fit used.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SplitInfo {
    /// The split table file (as given / found).
    pub file: String,
    pub seed: u64,
    pub fractions: SplitFractions,
    /// Conditions per split.
    pub conditions: SplitCounts,
}

/// Fit settings.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FitSettings {
    /// Grouped cross-validation folds used.
    pub folds: usize,
    /// The alpha grid searched (ascending).
    pub alpha_grid: Vec<f64>,
    /// How alpha is chosen from the CV curve.
    pub alpha_rule: String,
    /// The ridge objective.
    pub objective: String,
}

/// Record counts (load-phase counts are records, not conditions).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordCounts {
    pub qgrid: usize,
    pub load_fit: usize,
    pub load_uncertainty: usize,
    pub load_selection: usize,
    /// Rows skipped as invalid while loading (`--skip-invalid`).
    pub skipped_invalid: usize,
}

/// The data-quality verdict (`sy_records::check`) of one collected run directory fitted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DataCheckRun {
    /// The run directory (as given).
    pub path: String,
    /// `pass` or `fail`.
    pub verdict: String,
    /// The checks it failed.
    pub failed: Vec<String>,
}

/// The data-quality verdict of the fitted records: one entry per collected run directory (a
/// directory with a `manifest.json`); record files alone are not judged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DataCheck {
    pub runs: Vec<DataCheckRun>,
    /// Whether a failing run was fitted anyway (`sy-fit --accept-failed-check`).
    pub accepted_failing: bool,
}

/// The whole `fit.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FitFile {
    pub schema_version: u32,
    pub tool: ToolInfo,
    /// Record files read (as given / found).
    pub inputs: Vec<String>,
    /// The same record files with their SHA-256: `sy-margin` and `sy-select` refuse records that
    /// are not these (empty in files written before it existed: not checked).
    #[serde(default)]
    pub input_files: Vec<sy_selector::InputFile>,
    pub split: SplitInfo,
    pub settings: FitSettings,
    pub records: RecordCounts,
    pub models: ModelFits,
    pub warnings: Vec<String>,
    /// The data-quality verdict of the collected runs fitted (absent: none was a run directory).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_check: Option<DataCheck>,
}

impl FitFile {
    /// The estimators of one model.
    pub fn estimators(&self, model: Model) -> &ModelEstimators {
        &self.models.get(model).estimators
    }

    /// Reads and checks `fit.json` (kind, schema version, layout).
    pub fn read(path: &Path) -> Result<FitFile, ArtifactError> {
        crate::read_artifact(Artifact::Fit, path)
    }
}

/// One point of the cross-validation curve.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CvPoint {
    pub alpha: f64,
    /// Unweighted mean of the fold MSEs (ms²); `null` when no fold could be scored.
    pub cv_mse: Option<f64>,
    /// Per fold (ms²); `null` for a fold without rows (left out of the mean).
    pub fold_mse: Vec<Option<f64>>,
}

/// Spread of the in-sample residuals (measured − predicted TTFT, ms) on the fit split.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResidualSpread {
    pub mean_ms: f64,
    pub std_ms: f64,
    pub mae_ms: f64,
    pub p50_abs_ms: f64,
    pub p90_abs_ms: f64,
    pub p99_abs_ms: f64,
    pub max_abs_ms: f64,
}

/// Diagnostics of one model's one estimator.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CorrectionReport {
    /// Rows fitted.
    pub rows: usize,
    /// Conditions those rows come from.
    pub conditions: usize,
    /// Fit-split rows without a usable target, per reason (`k`, `q_out_of_range`, ...).
    pub skipped: BTreeMap<String, usize>,
    /// Folds used (fewer than asked when there are fewer conditions).
    pub folds: usize,
    /// The chosen alpha.
    pub alpha: f64,
    /// Whether the chosen alpha is the largest of the grid (the curve was flat up to its end).
    pub alpha_at_grid_edge: bool,
    /// The whole cross-validation curve, ascending alpha.
    pub cv: Vec<CvPoint>,
    /// R² of the load correction on its target (TTFT − Q) over the fit split (`null` when the
    /// target is constant).
    pub r2_target: Option<f64>,
    /// R² of the whole estimator (Q + correction) on the measured TTFT over the fit split.
    pub r2_ttft: Option<f64>,
    pub residuals: ResidualSpread,
    /// 95 % grouped-bootstrap intervals of (intercept, bN, bR, bP): fit-split conditions resampled
    /// (`sy-stats`), the standardiser and the chosen alpha held fixed. `None` with fewer than 2
    /// conditions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coefficient_intervals: Option<Vec<sy_stats::Interval>>,
}

/// Diagnostics of one model's standardiser.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StandardiserReport {
    /// Fit-split rows the statistics were computed on.
    pub rows: usize,
    /// Fit-split ok rows with an invalid N, R or P, per field.
    pub skipped: BTreeMap<String, usize>,
}

/// Everything fitted for one model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelFit {
    /// Served model names seen in this role's records.
    pub served_models: Vec<String>,
    /// What the runtime uses: Q table, standardiser, blind and cache corrections.
    pub estimators: ModelEstimators,
    pub q_table: QTableReport,
    pub standardiser: StandardiserReport,
    pub blind: CorrectionReport,
    pub cache: CorrectionReport,
}

/// Both models.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelFits {
    pub efficient: ModelFit,
    pub capable: ModelFit,
}

impl ModelFit {
    /// The fit report of one estimator's load correction.
    pub fn correction(&self, estimator: Estimator) -> &CorrectionReport {
        match estimator {
            Estimator::Blind => &self.blind,
            Estimator::Cache => &self.cache,
        }
    }

    /// Both estimators' correction reports, in the order of [`Estimator::ALL`].
    pub fn corrections(&self) -> [(Estimator, &CorrectionReport); 2] {
        Estimator::ALL.map(|e| (e, self.correction(e)))
    }
}

impl ModelFits {
    /// The fit of one model.
    pub fn get(&self, model: Model) -> &ModelFit {
        match model {
            Model::Efficient => &self.efficient,
            Model::Capable => &self.capable,
        }
    }
}

/// One cell of a Q table, as measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QCell {
    /// The N axis value (median observed N of the planned prompt length).
    pub n: f64,
    /// The f axis value: the cell's median observed K / N (its row's f axis; 0 for the f = 0
    /// column).
    pub f: f64,
    pub planned_n: u64,
    /// Ok records in the cell.
    pub count: usize,
    /// The cell value (ms); `None` when empty.
    pub median_ms: Option<f64>,
    pub p25_ms: Option<f64>,
    pub p75_ms: Option<f64>,
    pub min_ms: Option<f64>,
    pub max_ms: Option<f64>,
    /// Median observed K / N of the cell's records.
    pub observed_f_median: Option<f64>,
}

/// A pair of cells whose medians decrease although the uncached tokens N·(1 − f) increase, by
/// more than either cell's half inter-quartile range.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MonotoneViolation {
    /// (N, f, median) of the cell with fewer uncached tokens.
    pub lower: [f64; 3],
    /// (N, f, median) of the cell with more uncached tokens but a smaller median.
    pub higher: [f64; 3],
}

/// Everything about one model's Q table besides the table itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QTableReport {
    /// Ok Q-grid records used.
    pub records: usize,
    /// Q-grid records not used (failed probe or missing / invalid N, K), per reason.
    pub skipped: BTreeMap<String, usize>,
    pub cells: Vec<QCell>,
    /// (N, f) of every empty cell.
    pub empty_cells: Vec<[f64; 2]>,
    /// Total number of non-monotone cell pairs.
    pub monotone_violation_count: usize,
    /// The first few non-monotone pairs (largest drops first).
    pub monotone_violations: Vec<MonotoneViolation>,
    /// Why the f axis is the planned fractions instead of the observed ones, when it is (the
    /// fit warns with it). Not written to `fit.json`: the cells' `f` show the axis itself.
    #[serde(skip)]
    pub f_axis_fallback: Option<FAxisFallback>,
}

/// Why a Q table's f axis fell back to the planned cached fractions.
#[derive(Debug, Clone, PartialEq)]
pub enum FAxisFallback {
    /// No Q-grid record of this planned fraction has an observed K / N.
    NoObservedFraction { planned_f: f64 },
    /// The median observed K / N per planned fraction would not increase strictly.
    NotIncreasing { observed: Vec<f64> },
}

impl std::fmt::Display for FAxisFallback {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FAxisFallback::NoObservedFraction { planned_f } => write!(
                f,
                "no Q-grid record of planned fraction {planned_f} has an observed K/N"
            ),
            FAxisFallback::NotIncreasing { observed } => write!(
                f,
                "the median observed K/N per planned fraction, {observed:?}, does not increase \
                 strictly"
            ),
        }
    }
}
