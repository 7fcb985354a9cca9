//! The choice repeated over other split seeds (`selection.json`'s `stability`): how often each
//! threshold rule, estimator and bundle variant was chosen. The repeated calibration is
//! `sy_select::stability`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sy_selector::{Thresholds, Variant};

/// What one split seed chose.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SeedChoice {
    pub seed: u64,
    pub threshold_rule: Variant,
    pub thresholds: Thresholds,
    pub estimator: Variant,
    pub bundle_variant: Variant,
    /// Mean selected TTFT of the bundle variant minus Stage's on that seed's selection split.
    pub mean_change_vs_stage_ms: f64,
    /// Conditions in the fit / uncertainty / selection splits.
    pub conditions: [u64; 3],
}

/// The repeated calibration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stability {
    pub seeds: Vec<u64>,
    pub runs: Vec<SeedChoice>,
    /// Seeds whose calibration could not be made, with why (e.g. a split without conditions).
    pub failed: BTreeMap<u64, String>,
    pub threshold_rule_counts: BTreeMap<String, u64>,
    pub estimator_counts: BTreeMap<String, u64>,
    pub bundle_variant_counts: BTreeMap<String, u64>,
    /// The run's own bundle variant, and the share of seeds that chose it too.
    pub chosen: Variant,
    pub chosen_share: f64,
    /// `chosen_share ≥ sy_select::stability::STABLE_SHARE`.
    pub stable: bool,
    /// Median over the seeds of their chosen variant's mean change versus Stage (ms).
    #[serde(default)]
    pub median_change_vs_stage_ms: Option<f64>,
}
