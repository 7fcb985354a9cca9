//! The re-decision after a round: the prequential statistic of
//! [`sy_calibration::prequential`] (one definition, which `sy-select` recomputes from the
//! records and `adaptive.json`'s rounds): each round's conditions judged by the rule fitted on
//! the earlier rounds with the calibration's own library code, for the estimator variant
//! `cache`, read in round order by an anytime-valid confidence sequence. The final choice is
//! made by `sy-select` on all the records, exactly as for a fixed plan.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sy_calibration::prequential::{Round, Settings, prequential};
use sy_records::{Phase, Record};
use sy_selector::{Model, Variant};
use sy_stats::sequential::{SequenceInterval, Verdict};

use super::design::{ConditionAdvantage, RoundPlan, UnitKey};
use super::error::AdaptiveError;
use super::spec::AdaptiveSpec;

/// The variant the stopping rule judges.
pub const JUDGED_VARIANT: Variant = sy_calibration::prequential::JUDGED_VARIANT;

/// What one look (after a round) saw.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Look {
    /// The round just finished (0-based).
    pub round: u32,
    /// Load units recorded so far.
    pub load_units: u64,
    /// Conditions judged so far (their values, in round order, are what the sequence reads).
    pub judged_conditions: u64,
    /// Drawn conditions without a measured pair on both models (not judged).
    pub unjudged_conditions: u64,
    /// The confidence sequence of the change versus Stage (ms), once 2 conditions are judged.
    pub sequence: Option<SequenceInterval>,
    /// The confidence sequence of the attainable change (ms): per judged condition the mean of
    /// `min(0, TTFT_cap − TTFT_eff)` over its pairs, the most any rule could gain there. While
    /// the judged rule has not acted in any judged condition, a *no useful gain* verdict needs
    /// its lower end within ε ([`verdict_bounded`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attainable: Option<SequenceInterval>,
    pub verdict: Verdict,
    /// The latest rule's cache margin (ms), when fitted.
    pub margin_cache_ms: Option<f64>,
}

impl From<AdaptiveSpec> for Settings {
    fn from(spec: AdaptiveSpec) -> Settings {
        Settings {
            repeats: spec.repeats,
            epsilon_ms: spec.epsilon_ms,
            sequential: spec.sequential(),
        }
    }
}

/// The rounds as the statistic reads them.
pub fn statistic_rounds(rounds: &[RoundPlan]) -> Vec<Round<'_>> {
    (rounds.iter())
        .map(|r| Round {
            round: r.round,
            new_conditions: &r.new_conditions,
            refine: &r.refine,
        })
        .collect()
}

/// The look after the last of `rounds`: the statistic of [`sy_calibration::prequential`] (every
/// round after the first judged by the rule of the rounds before it, the anytime-valid sequence
/// of the judged values, and its verdict).
pub fn look(
    records: &[Record],
    rounds: &[RoundPlan],
    spec: &AdaptiveSpec,
    seed: u64,
) -> Result<Look, AdaptiveError> {
    let p = prequential(
        records,
        &statistic_rounds(rounds),
        &Settings::from(spec.clone()),
        seed,
    )?;
    Ok(Look {
        round: p.round,
        load_units: p.load_units,
        judged_conditions: p.judged_conditions,
        unjudged_conditions: p.unjudged_conditions,
        sequence: p.sequence,
        attainable: p.attainable,
        verdict: p.verdict,
        margin_cache_ms: p.margin_cache_ms,
    })
}

/// Every drawn condition's measured advantages and its next repeat (for the next round's
/// refinement), from `records` and the load units planned in `rounds`.
pub fn advantages(
    records: &[Record],
    rounds: &[RoundPlan],
    repeats: u32,
) -> Vec<ConditionAdvantage> {
    let planned: Vec<UnitKey> = rounds.iter().flat_map(|r| r.units(repeats)).collect();
    let mut next: BTreeMap<&str, u32> = BTreeMap::new();
    for (c, r) in &planned {
        let e = next.entry(c.as_str()).or_insert(0);
        *e = (*e).max(r + 1);
    }
    let mut by_probe: BTreeMap<(&str, u32), [Option<f64>; 2]> = BTreeMap::new();
    for r in records.iter().filter(|r| r.phase == Phase::Load) {
        let slot = by_probe
            .entry((r.condition_id.as_str(), r.repeat))
            .or_insert([None, None]);
        let i = usize::from(r.role == Model::Capable);
        slot[i] = r.ttft_ms.filter(|t| t.is_finite());
    }
    let mut adv: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for ((c, _), [e, k]) in by_probe {
        if let (Some(e), Some(k)) = (e, k) {
            adv.entry(c).or_default().push(e - k);
        }
    }
    next.into_iter()
        .map(|(c, n)| ConditionAdvantage {
            condition_id: c.to_string(),
            advantages: adv.remove(c).unwrap_or_default(),
            next_repeat: n,
        })
        .collect()
}
