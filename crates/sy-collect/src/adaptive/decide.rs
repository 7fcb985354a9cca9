//! The re-decision after a round: the prequential statistic of
//! [`sy_calibration::prequential`] (one definition, which `sy-select` recomputes from the
//! records and `adaptive.json`'s rounds): each round's conditions judged by the rule fitted on
//! the earlier rounds with the calibration's own library code, for the estimator variant
//! `cache`, read in round order by an anytime-valid confidence sequence. The final choice is
//! made by `sy-select` on all the records, exactly as for a fixed plan.

use std::collections::BTreeMap;

use sy_calibration::prequential::{Settings, prequential};
use sy_records::{Phase, Record};
use sy_selector::{Model, Variant};

use super::design::{ConditionAdvantage, RoundPlan, UnitKey};
use super::error::AdaptiveError;
use super::spec::AdaptiveSpec;

/// The variant the stopping rule judges.
pub const JUDGED_VARIANT: Variant = sy_calibration::prequential::JUDGED_VARIANT;

/// What one look (after a round) saw: the run directory's type (`adaptive.json` keeps one per
/// round).
pub use sy_rundir::artifact::adaptive::Look;

/// The look after the last of `rounds`: the statistic of [`sy_calibration::prequential`] (every
/// round after the first judged by the rule of the rounds before it, the anytime-valid sequence
/// of the judged values, and its verdict).
pub fn look(
    records: &[Record],
    rounds: &[RoundPlan],
    spec: &AdaptiveSpec,
    seed: u64,
) -> Result<Look, AdaptiveError> {
    let p = prequential(records, rounds, &Settings::of(spec), seed)?;
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
