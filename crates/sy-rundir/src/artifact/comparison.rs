//! `comparison.json`: what `sy-eval` writes after its blocks (and reads back for the report).
//! The code that computes it (bootstrap intervals over sessions, verdicts) is `sy-eval`'s
//! (`sy_eval::compare`); the estimates are `sy-stats`'.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sy_selector::Variant;
use sy_stats::sessions::{Distribution, Estimate, Summary};

/// One variant's results.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VariantSummary {
    pub variant: Variant,
    pub blocks: usize,
    pub sessions: usize,
    /// Sessions with a failed turn (excluded from the session-time statistics).
    pub sessions_failed: usize,
    /// Sessions without a failed turn / sessions, with its Wilson 95 % interval.
    #[serde(default)]
    pub session_success_rate: Option<f64>,
    #[serde(default)]
    pub session_success_ci95: Option<(f64, f64)>,
    pub turns: usize,
    pub turns_failed: usize,
    pub session_completion_ms: Option<Summary>,
    pub turn_ttft_ms: Option<Summary>,
    pub turn_e2e_ms: Option<Summary>,
    /// Turns Stage proposed efficient for (the only ones the rule may change).
    pub efficient_proposals: usize,
    pub overrides: usize,
    /// Overrides / efficient proposals.
    pub override_rate: f64,
    /// Fallbacks (a failed guard check, an unusable prediction, a failed observation) / turns.
    pub fallbacks: usize,
    pub fallback_rate: f64,
    /// Turn count per reason code.
    pub reasons: BTreeMap<String, usize>,
    /// Turns executed on the capable model / turns.
    pub capable_share: f64,
    pub mean_uncached_input_tokens: Option<f64>,
    /// Observe + decide, per turn (ms).
    pub routing_overhead_ms: Option<Distribution>,
    /// The observation's query time alone (ms).
    pub observe_ms: Option<Distribution>,
    /// Competing (background) requests that ended while the sessions ran.
    pub background_requests: usize,
    pub background_failed: usize,
    pub background_ttft_ms: Option<Distribution>,
    pub background_e2e_ms: Option<Distribution>,
}

/// A variant against the baseline, paired by session shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Difference {
    pub variant: Variant,
    pub baseline: Variant,
    /// Session shapes completed in both variants.
    pub pairs: usize,
    /// mean(variant − baseline) session completion time, ms (negative = faster).
    pub session_time_ms: Option<Estimate>,
    /// The same relative to the baseline's mean over the pairs.
    pub session_time_relative: Option<f64>,
    /// mean(variant − baseline) of each session's mean turn TTFT, ms.
    pub session_mean_ttft_ms: Option<Estimate>,
    /// Turns of the paired sessions present in both variants (same round, session, turn).
    #[serde(default)]
    pub paired_turns: usize,
    /// Of those, the turns where the variant chose another model than the baseline.
    #[serde(default)]
    pub changed_turns: usize,
    /// Sessions with a failed turn in the variant's and in the baseline's blocks.
    #[serde(default)]
    pub failed_sessions: (usize, usize),
    /// `same decisions` (every paired turn chose the baseline's model: whatever the times say,
    /// the rule changed nothing, see `sy_eval::compare::SAME_DECISIONS`); otherwise `gain` / `loss` (the 95%
    /// interval of the session-time difference excludes zero and the mean changed by at least
    /// `sy_eval::compare::MIN_MATERIAL_EFFECT`), `no material difference` (excludes zero, smaller change) or `no
    /// significant difference` (the interval includes zero).
    pub verdict: String,
}

/// The whole comparison.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    pub schema_version: u32,
    pub baseline: Variant,
    pub variants: Vec<VariantSummary>,
    pub differences: Vec<Difference>,
    /// Anything that weakens the figures (few tail samples, client lag, leaked reservations).
    pub warnings: Vec<String>,
    /// An A/A comparison (`sy-eval --aa`): both rows are the same variant, arm A then arm B;
    /// any verdict but `no significant difference` is a false one.
    #[serde(default)]
    pub aa: bool,
}
