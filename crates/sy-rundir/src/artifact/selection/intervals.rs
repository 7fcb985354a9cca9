//! How sure the selection is, as `selection.json` holds it: the grouped bootstrap intervals
//! (`uncertainty`) and the answer with its interval and caveats (`headline`). The intervals are
//! computed by `sy_select::uncertainty` with `sy-stats`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sy_selector::Variant;
use sy_stats::{BootstrapConfig, Interval};

/// One variant's headline numbers with their intervals (ms).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VariantUncertainty {
    pub variant: Variant,
    pub mean_selected_ttft_ms: Option<Interval>,
    pub p90_selected_ttft_ms: Option<Interval>,
    /// Mean selected TTFT of the variant minus Stage's (negative = faster than Stage).
    pub mean_change_vs_stage_ms: Option<Interval>,
    /// p90 selected TTFT of the variant minus Stage's.
    pub p90_change_vs_stage_ms: Option<Interval>,
    /// Mean selected TTFT minus the per-probe oracle's (the faster model every time).
    #[serde(default)]
    pub regret_ms: Option<Interval>,
    /// Conditions in which the variant changes the selected TTFT of some probe.
    #[serde(default)]
    pub changed_conditions: u64,
    /// Conditions with a probe above the 90th percentile (the fewer of the variant's and
    /// Stage's): what the p90 change's interval rests on.
    #[serde(default)]
    pub p90_tail_conditions: u64,
}

/// The chosen variant's mean change versus Stage, adjusted for the choice among the compared
/// variants (see `sy_select::uncertainty`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SelectionAdjusted {
    /// The variants the choice compared (each with its own searched thresholds).
    pub compared: Vec<Variant>,
    /// Simultaneous studentized interval of the chosen variant's mean change versus Stage.
    pub mean_change_vs_stage_ms: Option<Interval>,
}

/// The bootstrap intervals of one calibration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Uncertainty {
    /// Resamples, level and seed.
    pub bootstrap: BootstrapConfig,
    /// Conditions of the selection split (the resampled unit of the variant intervals).
    pub selection_conditions: u64,
    /// Every variant with the frozen bundle's parameters on the selection split.
    pub variants: Vec<VariantUncertainty>,
    /// The margins (delta per estimator): conditions of the uncertainty split resampled.
    pub margins: BTreeMap<String, Option<Interval>>,
    /// The load corrections' coefficients (intercept, bN, bR, bP) per `<model>.<estimator>`:
    /// fit-split conditions resampled, as `sy-fit` measured them (`fit.json`'s
    /// `coefficient_intervals`). Empty when the fit file holds none.
    #[serde(default)]
    pub coefficients: BTreeMap<String, Vec<Interval>>,
    /// How each interval is computed (`sy_select::uncertainty::interval_methods`).
    #[serde(default)]
    pub methods: BTreeMap<String, String>,
    /// The headline's selection-adjusted interval (`None` when it was not computed).
    #[serde(default)]
    pub selection_adjusted: Option<SelectionAdjusted>,
}

impl Uncertainty {
    /// The intervals of one variant.
    pub fn get(&self, variant: Variant) -> Option<&VariantUncertainty> {
        self.variants.iter().find(|v| v.variant == variant)
    }
}

/// The answer in one place: what was chosen, what it changes versus Stage and how sure that is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Headline {
    pub bundle_variant: Variant,
    pub threshold_rule: Variant,
    pub estimator: Variant,
    /// Mean selected TTFT of the bundle variant minus Stage's on the selection split:
    /// simultaneous over the compared variants (selection-adjusted, see `sy_select::uncertainty`).
    pub mean_change_vs_stage_ms: Option<Interval>,
    /// The same interval without the adjustment for the choice (the variant's own).
    #[serde(default)]
    pub mean_change_unadjusted_ms: Option<Interval>,
    /// The same for the 90th percentile.
    pub p90_change_vs_stage_ms: Option<Interval>,
    /// The bundle variant's regret versus the per-probe oracle.
    #[serde(default)]
    pub regret_ms: Option<Interval>,
    /// How much was compared to reach the choice.
    #[serde(default)]
    pub compared: Comparisons,
    /// Intervals to be read as indicative, each with the reason.
    #[serde(default)]
    pub indicative: Vec<String>,
    /// Whether the mean change's interval excludes zero.
    pub distinguishable_from_stage: bool,
    /// Whether the split seeds agree (`None` when the stability check did not run).
    pub stable: Option<bool>,
    /// The caveats the report prints first and `sy-select` warns about.
    pub caveats: Vec<String>,
}

/// How much the calibration compared before it chose: the more it compared on the same data,
/// the more the winner's own interval flatters it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Comparisons {
    /// Variants compared on the selection split (each with its own thresholds).
    pub variants: u64,
    /// Threshold rules compared (`count`, `count_prefill`).
    pub threshold_rules: u64,
    /// Estimators compared (`blind`, `cache`).
    pub estimators: u64,
    /// (r, p) thresholds evaluated by the search on the fit split (both families).
    pub thresholds_searched: u64,
}
