//! `selection.json`: what `sy-select` searched, replayed, chose and froze, with its intervals
//! (`schemas/selection.schema.json`). The computations (the r/p search, the replays, the
//! choice, the bootstrap intervals, the stability seeds) are `sy-select`'s; their results are
//! plain data over `sy-selector`'s parameters and `sy-stats`' intervals, kept here beside the
//! file's name.

mod intervals;
mod replay;
mod search;
mod stability;

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use sy_selector::{GuardLimits, InputFile, Margins, Thresholds, Variant};

/// Defined with the run directory's layout.
pub use crate::layout::SELECTION_SCHEMA_VERSION;
use crate::layout::{Artifact, ArtifactError};
pub use intervals::{Comparisons, Headline, SelectionAdjusted, Uncertainty, VariantUncertainty};
pub use replay::{Replay, VariantReplay, VariantStats};
pub use search::{Landscape, LandscapeRow, RuleFamily, RuleScore, SearchOutcome, ThresholdRule};
pub use stability::{SeedChoice, Stability};

/// `selection.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SelectionFile {
    pub schema_version: u32,
    pub tool_versions: BTreeMap<String, String>,
    pub input_files: Vec<InputFile>,
    pub split_seed: u64,
    pub limits: GuardLimits,
    pub margins: Margins,
    /// Pairs of the fit split the search ran over (and how many lacked a TTFT).
    pub search_pairs: u64,
    pub search_pairs_unmeasured: u64,
    /// The r search of `count` and the r/p search of `count_prefill` (fit split).
    pub search_count: SearchOutcome,
    pub search_count_prefill: SearchOutcome,
    /// The objective landscape of `count_prefill` (fit split).
    pub landscape: Option<Landscape>,
    /// Each variant with its own searched thresholds, on the selection split.
    pub candidates: Replay,
    /// The chosen threshold rule (`count` or `count_prefill`).
    pub threshold_rule: Choice,
    /// The chosen estimator (`blind` or `cache`).
    pub estimator: Choice,
    /// The variant of `bundle.json` (the better of the two chosen ones on the selection split).
    pub bundle_variant: Variant,
    /// The frozen parameters' thresholds (those of the chosen threshold rule).
    pub thresholds: Thresholds,
    /// Every variant replayed with the frozen bundle's parameters on the selection split: what
    /// `sy-select replay --bundle bundle.json --split selection` reproduces.
    pub replay: Replay,
    /// Bundle files written, with their content hashes.
    pub bundles: BTreeMap<String, String>,
    /// The answer with its interval and caveats (what the report's first lines say).
    pub headline: Headline,
    /// Grouped bootstrap intervals of the headline numbers.
    pub uncertainty: Uncertainty,
    /// The choice repeated over other split seeds (`--stability-seeds`).
    pub stability: Option<Stability>,
    pub warnings: Vec<String>,
}

impl SelectionFile {
    /// Reads a `selection.json`.
    pub fn read(path: &Path) -> Result<SelectionFile, SelectionFileError> {
        Ok(crate::read_artifact(Artifact::Selection, path)?)
    }
}

/// How a candidate was chosen.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Choice {
    /// The chosen variant.
    pub variant: Variant,
    /// The variant it was compared with.
    pub against: Variant,
    /// Mean selected TTFT of both on the selection split (ms).
    pub mean_selected_ttft_ms: BTreeMap<String, f64>,
    /// Why (better mean, or which tie-break).
    pub reason: String,
}

/// Why a `selection.json` cannot be used (always the input's fault).
#[derive(Debug, thiserror::Error)]
pub enum SelectionFileError {
    /// Not readable, not JSON, another kind of file, another version, or not the layout.
    #[error(transparent)]
    Artifact(#[from] ArtifactError),
}

impl SelectionFileError {
    /// Always: an unusable selection file is the input's fault (exit code 2).
    pub fn is_bad_input(&self) -> bool {
        true
    }
}

crate::impl_fault!(SelectionFileError);
