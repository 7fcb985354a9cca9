//! The r/p threshold search's results as `selection.json` holds them (the search itself is
//! `sy_select::search`).

use serde::{Deserialize, Serialize};

/// A threshold rule: each term is a value or `None` (disabled).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ThresholdRule {
    /// Trigger on `R_eff >= r`; `None` = term disabled.
    pub r: Option<f64>,
    /// Trigger on `P_eff > p`; `None` = term disabled.
    pub p: Option<f64>,
}

impl ThresholdRule {
    /// Both terms disabled: never overrides (behaves like Stage).
    pub const DISABLED: ThresholdRule = ThresholdRule { r: None, p: None };

    /// Number of enabled terms (0, 1 or 2).
    pub fn enabled_terms(&self) -> u8 {
        u8::from(self.r.is_some()) + u8::from(self.p.is_some())
    }
}

/// Which terms the search may enable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RuleFamily {
    /// `count`: only `R >= r` (or disabled).
    Count,
    /// `count_prefill`: `R >= r`, `P > p`, both, or neither.
    CountPrefill,
}

/// The objective of one rule over the probes.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RuleScore {
    pub rule: ThresholdRule,
    /// Mean selected TTFT over all probes (ms).
    pub mean_selected_ttft_ms: f64,
    /// How many probes the rule overrides to capable.
    pub overrides: u64,
}

/// One row of the objective landscape (for the report's r/p plot).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LandscapeRow {
    /// The r threshold of this row (`None` = disabled).
    pub r: Option<f64>,
    /// The p thresholds of the columns (`None` = disabled), shared by every row.
    pub mean_selected_ttft_ms: Vec<f64>,
}

/// The objective over a grid of (r, p) for plotting: every r candidate and up to
/// `max_p_columns` p candidates (evenly spaced in rank), plus disabled for both.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Landscape {
    /// The p of each column (`None` = disabled).
    pub p_columns: Vec<Option<f64>>,
    pub rows: Vec<LandscapeRow>,
}

/// What the search found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchOutcome {
    pub family: RuleFamily,
    /// The chosen rule and its objective.
    pub best: RuleScore,
    /// Mean selected TTFT with both terms disabled (Stage), for reference.
    pub stage_mean_ttft_ms: f64,
    /// Mean TTFT of the per-probe oracle (the faster candidate every time).
    pub oracle_mean_ttft_ms: f64,
    /// Probes searched over.
    pub probes: u64,
    /// Distinct r candidates (excluding disabled).
    pub r_candidates: u64,
    /// Distinct p candidates (excluding disabled).
    pub p_candidates: u64,
    /// Rules evaluated (including disabled terms).
    pub rules_evaluated: u64,
    /// How many rules tied with the best mean (within the tolerance).
    pub tied_rules: u64,
}
