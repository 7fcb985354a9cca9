//! `fit.json`: what `sy-fit` writes and `sy-margin` / `sy-select` read.
//!
//! `models.<efficient|capable>.estimators` is sy-selector's [`ModelEstimators`] verbatim (Q
//! table, standardiser, blind and cache load corrections), so later tools deserialise it directly;
//! everything else is diagnostics and provenance. The file is deterministic: no timestamps and no
//! input hashes, so the same fit-split and Q-grid data always give the same bytes (rows of the
//! other splits never change it). `schemas/fit.schema.json` describes it.

use std::path::Path;

use serde::{Deserialize, Serialize};
use sy_records::{Role, SplitCounts, SplitFractions};
use sy_selector::{Model, ModelEstimators};

use crate::fit::ModelFits;

/// Version of the `fit.json` layout.
pub const FIT_SCHEMA_VERSION: u32 = 1;

/// The file name of the fit in a run directory.
pub const FIT_FILE: &str = "fit.json";

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
}

/// Why a `fit.json` cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum FitFileError {
    #[error("{path}: {message}")]
    Read { path: String, message: String },
    #[error("{path}: not a valid fit file: {message}")]
    Invalid { path: String, message: String },
    #[error("{path}: fit schema version {found}, expected {FIT_SCHEMA_VERSION}")]
    Version { path: String, found: u32 },
}

impl FitFile {
    /// The estimators of one model.
    pub fn estimators(&self, model: Model) -> &ModelEstimators {
        match model {
            Model::Efficient => &self.models.efficient.estimators,
            Model::Capable => &self.models.capable.estimators,
        }
    }

    /// The estimators of one record role.
    pub fn estimators_for_role(&self, role: Role) -> &ModelEstimators {
        &self.models.get(role).estimators
    }

    /// Parses and checks a fit file's text.
    pub fn from_json(text: &str, path: &str) -> Result<FitFile, FitFileError> {
        let v: serde_json::Value =
            serde_json::from_str(text).map_err(|e| FitFileError::Invalid {
                path: path.to_string(),
                message: e.to_string(),
            })?;
        let found = v
            .get("schema_version")
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(0);
        if found != u64::from(FIT_SCHEMA_VERSION) {
            return Err(FitFileError::Version {
                path: path.to_string(),
                found: u32::try_from(found).unwrap_or(u32::MAX),
            });
        }
        serde_json::from_value(v).map_err(|e| FitFileError::Invalid {
            path: path.to_string(),
            message: e.to_string(),
        })
    }

    /// Reads and checks `fit.json`.
    pub fn read(path: &Path) -> Result<FitFile, FitFileError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| FitFileError::Read {
            path: shown.clone(),
            message: e.to_string(),
        })?;
        FitFile::from_json(&text, &shown)
    }
}
