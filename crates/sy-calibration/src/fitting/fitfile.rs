//! `fit.json`: what `sy-fit` writes and `sy-margin` / `sy-select` read.
//!
//! `models.<efficient|capable>.estimators` is sy-selector's [`ModelEstimators`] verbatim (Q
//! table, standardiser, blind and cache load corrections), so later tools deserialise it directly;
//! everything else is diagnostics and provenance. The file is deterministic: no timestamps and no
//! input hashes, so the same fit-split and Q-grid data always give the same bytes (rows of the
//! other splits never change it, except through `data_check`, the verdict on all the records of
//! a collected run). `schemas/fit.schema.json` describes it.

use std::path::Path;

use serde::{Deserialize, Serialize};
use sy_records::{SplitCounts, SplitFractions};
use sy_rundir::{Artifact, ArtifactError};
use sy_selector::{Model, ModelEstimators};

use crate::fitting::fit::ModelFits;
/// Defined with the run directory's layout (`sy_rundir::layout`).
pub use sy_rundir::FIT_SCHEMA_VERSION;

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
        sy_rundir::read_artifact(Artifact::Fit, path)
    }
}
