//! Variants replayed over paired probes, as `selection.json` holds them (`candidates`, `replay`)
//! and `sy-select replay` prints them: what each variant could act on, changed, fell back on and
//! why, its selected TTFTs and regret. The replay itself is `sy_select::evaluate`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sy_selector::{Thresholds, Variant};

/// Statistics of one variant over a set of pairs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VariantStats {
    /// Paired probes decided.
    pub probes: u64,
    /// Decisions that reached the trigger (guard G held, inputs valid, predictions usable).
    pub could_act: u64,
    /// Decisions that changed efficient to capable.
    pub changed: u64,
    /// Decisions that fell back to Stage's choice because a guard check failed or a prediction
    /// was unusable.
    pub fell_back: u64,
    /// Fallbacks by reason (`sy_selector::Reason::code`).
    pub fallback_reasons: BTreeMap<String, u64>,
    /// Decisions where the variant had nothing to evaluate (`stage`, or a disabled trigger).
    pub not_applicable: u64,
    pub could_act_rate: f64,
    pub override_rate: f64,
    pub fallback_rate: f64,
    pub mean_selected_ttft_ms: f64,
    pub p90_selected_ttft_ms: f64,
    /// Mean TTFT of the per-probe oracle over the same pairs.
    pub oracle_mean_ttft_ms: f64,
    /// `mean_selected_ttft_ms − oracle_mean_ttft_ms`.
    pub regret_ms: f64,
}

/// One variant's statistics, overall and by background generation length.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VariantReplay {
    pub variant: Variant,
    pub thresholds: Thresholds,
    /// The margin in force (TTFT variants).
    pub margin_ms: Option<f64>,
    pub all: VariantStats,
    /// `short` / `long` background generations (conditions without a length are only in `all`).
    pub by_decode_length: BTreeMap<String, VariantStats>,
}

/// The replay of several variants over the same pairs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Replay {
    /// Pairs decided.
    pub pairs: u64,
    /// Pairs skipped because a candidate has no measured TTFT.
    pub pairs_unmeasured: u64,
    pub variants: Vec<VariantReplay>,
}

impl Replay {
    /// The replays `variants` of `pairs` decided pairs (`unmeasured` more skipped).
    pub fn of<P>(pairs: &[P], unmeasured: u64, variants: Vec<VariantReplay>) -> Replay {
        Replay {
            pairs: pairs.len() as u64,
            pairs_unmeasured: unmeasured,
            variants,
        }
    }

    /// The replay of one variant.
    pub fn get(&self, variant: Variant) -> Option<&VariantReplay> {
        self.variants.iter().find(|v| v.variant == variant)
    }
}
