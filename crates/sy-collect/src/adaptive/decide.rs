//! The re-decision after a round, with the calibration's own library code: the fit of
//! `sy-calibration` (Q tables, standardisers, ridge corrections: what `sy-fit` runs), its
//! margins (what `sy-margin` runs) and `sy-selector`'s decision (what `sy-select` and
//! production run), for the estimator variant `cache`.
//!
//! **Which rule judges which condition.** The conditions a round draws are judged with the rule
//! fitted on the records of the earlier rounds only (and the Q grid): a rule that has never seen
//! them, fixed before they were measured. Each judged condition gives one number, the mean over
//! its first-pass repeats of the selected TTFT minus Stage's (efficient's); the stopping rule
//! ([`sy_stats::sequential`]) reads these numbers in round order. The first round only fits.
//! Extra repeats a round gives to uncertain conditions feed later fits, never a judged value.
//!
//! **Why only `cache`.** The choice among the four candidate variants (the r/p search of the
//! threshold rules and the choice itself) lives in `sy-select`, a tool crate this tool may not
//! import; what the libraries offer is the fit, the margins and the decision, which is what the
//! estimator variants need. `cache` is the variant the committed dataset chooses. The final
//! choice is made by `sy-select` on all the records, exactly as for a fixed plan.

use std::collections::{BTreeMap, BTreeSet};

use sy_calibration::fitting::{ConditionSumsTable, FitConfig};
use sy_calibration::inputs::FitEstimators;
use sy_calibration::margins::{
    DEFAULT_LEVEL, margin_values_of_advantages, measured_advantage, predicted_advantage,
};
use sy_records::{ConditionIndex, Phase, ProbeTable, Record, Split};
use sy_selector::{
    CandidateFeatures, DecisionInput, Estimator, GuardLimits, Model, RuleParams, Thresholds,
    Variant,
};
use sy_stats::sequential::{Verdict, confidence_sequence, verdict_bounded};

use super::design::{ConditionAdvantage, RoundPlan, UnitKey};
use super::error::AdaptiveError;
use super::spec::AdaptiveSpec;

/// The variant the stopping rule judges.
pub const JUDGED_VARIANT: Variant = Variant::Cache;

/// What one look (after a round) saw: the run directory's type (`adaptive.json` keeps one per
/// round).
pub use sy_rundir::artifact::adaptive::Look;

/// The split of the earlier rounds' load conditions: every fourth (in table order, which is the
/// seeded draw order) measures the margins, the others fit the estimators; `None` for the Q grid.
/// Dealt rather than hashed, so that a first round of 4 conditions or more always has both.
fn split_for_fit(conditions: &ConditionIndex) -> Vec<Option<Split>> {
    let mut dealt = 0usize;
    (0..conditions.count())
        .map(|c| {
            let c = u32::try_from(c).unwrap_or(u32::MAX);
            conditions.is_load(c).then(|| {
                dealt += 1;
                if dealt.is_multiple_of(4) {
                    Split::Uncertainty
                } else {
                    Split::Fit
                }
            })
        })
        .collect()
}

/// The rule fitted on `records` (the earlier rounds' and the Q grid's): the estimators on three
/// in four of their load conditions, the margins on the fourth (`seed` seeds the folds).
pub fn fit_rule(records: &[Record], seed: u64, round: u32) -> Result<RuleParams, AdaptiveError> {
    let table = ProbeTable::from_records(records)?;
    let sums = ConditionSumsTable::new(&table);
    let splits = split_for_fit(sums.conditions());
    let config = FitConfig {
        seed,
        coefficient_intervals: false,
        parallel_models: false,
        ..FitConfig::default()
    };
    let (efficient, capable) = sums
        .estimators_by_index(&splits, &config)
        .map_err(|source| AdaptiveError::Fit { round, source })?;
    let fit = FitEstimators { efficient, capable };
    let pairs = table.pairs().filter_map(|p| {
        let c = p.condition();
        if splits.get(c as usize).copied().flatten() != Some(Split::Uncertainty) {
            return None;
        }
        let measured = measured_advantage(&p)?;
        let obs = (p.efficient.rule_observation(), p.capable.rule_observation());
        let predicted =
            |e| predicted_advantage(&fit, e, (&obs.0, &obs.1), &CandidateFeatures::UNKNOWN).ok();
        Some((c, Estimator::ALL.map(predicted), measured))
    });
    let margins = margin_values_of_advantages(pairs, table.conditions().count(), DEFAULT_LEVEL)
        .map_err(|e| AdaptiveError::NoMargin {
            round,
            estimator: e.as_str(),
        })?;
    Ok(RuleParams {
        efficient: fit.efficient,
        capable: fit.capable,
        thresholds: Thresholds::default(),
        margins,
        limits: GuardLimits::DEFAULT,
    })
}

/// One judged condition's values (ms, means over its measured first-pass pairs).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ConditionChange {
    /// The judged variant's selected TTFT minus Stage's.
    pub change: f64,
    /// `min(0, TTFT_cap − TTFT_eff)`: the oracle's change, the most any rule could gain.
    pub attainable: f64,
}

/// Per condition of `records` (load phase, first-pass repeats `< repeats`): its
/// [`ConditionChange`]; `None` for a condition without a measured pair.
pub fn condition_changes(
    params: &RuleParams,
    records: &[Record],
    repeats: u32,
) -> Result<BTreeMap<String, Option<ConditionChange>>, AdaptiveError> {
    let first_pass: Vec<Record> = (records.iter())
        .filter(|r| r.phase == Phase::Load && r.repeat < repeats)
        .cloned()
        .collect();
    let mut out: BTreeMap<String, (f64, f64, u32)> = BTreeMap::new();
    let mut seen: BTreeSet<String> = first_pass.iter().map(|r| r.condition_id.clone()).collect();
    if first_pass.is_empty() {
        return Ok(BTreeMap::new());
    }
    let table = ProbeTable::from_records(&first_pass)?;
    for p in table.pairs() {
        let (Some(e), Some(c)) = (p.efficient.ttft_ms(), p.capable.ttft_ms()) else {
            continue;
        };
        if !p.both_ok() || !e.is_finite() || !c.is_finite() {
            continue;
        }
        let input = DecisionInput {
            proposal: Model::Efficient,
            efficient: p.efficient.rule_observation(),
            capable: p.capable.rule_observation(),
            now_ms: p.efficient.sent_at_unix_ms(),
            local_capable_in_flight: 0,
        };
        let d = sy_selector::decide(params, JUDGED_VARIANT, &input);
        let selected = if d.choice == Model::Capable { c } else { e };
        let entry = out
            .entry(p.condition_id().to_string())
            .or_insert((0.0, 0.0, 0));
        entry.0 += selected - e;
        entry.1 += (c - e).min(0.0);
        entry.2 += 1;
    }
    let mut result: BTreeMap<String, Option<ConditionChange>> = BTreeMap::new();
    for (id, (sum, oracle, n)) in out {
        seen.remove(&id);
        let n = f64::from(n);
        let change = ConditionChange {
            change: sum / n,
            attainable: oracle / n,
        };
        result.insert(id, Some(change));
    }
    for id in seen {
        result.insert(id, None);
    }
    Ok(result)
}

/// The records of `units` (and the Q grid's).
fn records_of<'a>(records: &'a [Record], units: &BTreeSet<UnitKey>) -> Vec<Record> {
    let keep = |r: &&'a Record| {
        r.phase == Phase::Qgrid || units.contains(&(r.condition_id.clone(), r.repeat))
    };
    records.iter().filter(keep).cloned().collect()
}

/// The look after the last of `rounds`: every round after the first judged by the rule of the
/// rounds before it, the sequence of the judged values, and its verdict.
pub fn look(
    records: &[Record],
    rounds: &[RoundPlan],
    spec: &AdaptiveSpec,
    seed: u64,
) -> Result<Look, AdaptiveError> {
    let mut earlier: BTreeSet<UnitKey> = BTreeSet::new();
    let mut values: Vec<f64> = Vec::new();
    let mut attainable: Vec<f64> = Vec::new();
    let mut unjudged = 0u64;
    let mut last_margin = None;
    for (i, round) in rounds.iter().enumerate() {
        if i > 0 {
            let params = match fit_rule(&records_of(records, &earlier), seed, round.round) {
                Ok(p) => p,
                // No rule from these rounds (too few usable conditions for a fit or a margin):
                // the round's conditions stay unjudged, the next round fits on more.
                Err(e @ (AdaptiveError::Fit { .. } | AdaptiveError::NoMargin { .. })) => {
                    tracing::warn!("{e}: its conditions are not judged");
                    unjudged += round.new_conditions.len() as u64;
                    earlier.extend(round.units(spec.repeats));
                    continue;
                }
                Err(e) => return Err(e),
            };
            last_margin = Some(params.margins.cache);
            let new: BTreeSet<&String> = round.new_conditions.iter().collect();
            let drawn: Vec<Record> = (records.iter())
                .filter(|r| new.contains(&r.condition_id))
                .cloned()
                .collect();
            let changes = condition_changes(&params, &drawn, spec.repeats)?;
            // In the round's draw order (the order the sequence reads them).
            for id in &round.new_conditions {
                match changes.get(id).copied().flatten() {
                    Some(v) => {
                        values.push(v.change);
                        attainable.push(v.attainable);
                    }
                    None => unjudged += 1,
                }
            }
        }
        earlier.extend(round.units(spec.repeats));
    }
    let cfg = spec.sequential();
    let sequence = if values.len() >= 2 {
        Some(confidence_sequence(&values, &cfg)?)
    } else {
        None
    };
    let attainable = if attainable.len() >= 2 {
        Some(confidence_sequence(&attainable, &cfg)?)
    } else {
        None
    };
    let verdict = match &sequence {
        Some(cs) => verdict_bounded(cs, attainable.as_ref(), spec.epsilon_ms, &cfg)?,
        None => Verdict::Open,
    };
    let load_units = (records.iter())
        .filter(|r| r.phase == Phase::Load)
        .map(|r| (r.condition_id.as_str(), r.repeat))
        .collect::<BTreeSet<_>>()
        .len() as u64;
    Ok(Look {
        round: rounds.last().map_or(0, |r| r.round),
        load_units,
        judged_conditions: values.len() as u64,
        unjudged_conditions: unjudged,
        sequence,
        attainable,
        verdict,
        margin_cache_ms: last_margin,
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

#[cfg(test)]
mod tests {
    use super::*;
    use sy_records::synth::{SynthSpec, generate};

    /// Synthetic records (the calibration tests' generator, whose capable model wins under
    /// load), drawn in rounds of their load conditions.
    fn rounds_of(records: &[Record], sizes: &[usize]) -> Vec<RoundPlan> {
        let mut ids: Vec<String> = Vec::new();
        for r in records.iter().filter(|r| r.phase == Phase::Load) {
            if !ids.contains(&r.condition_id) {
                ids.push(r.condition_id.clone());
            }
        }
        let mut at = 0;
        (sizes.iter().enumerate())
            .map(|(i, &n)| {
                let plan = RoundPlan {
                    round: i as u32,
                    new_conditions: ids[at..at + n].to_vec(),
                    refine: Vec::new(),
                };
                at += n;
                plan
            })
            .collect()
    }

    #[test]
    fn later_rounds_are_judged_by_the_rule_of_the_earlier_ones() {
        let spec_records = SynthSpec {
            conditions: 60,
            repeats: 2,
            ..SynthSpec::default()
        };
        let records = generate(&spec_records);
        let rounds = rounds_of(&records, &[20, 20, 20]);
        let spec = AdaptiveSpec {
            repeats: 2,
            min_conditions: 10,
            design_conditions: 40,
            ..AdaptiveSpec::default()
        };
        let l = look(&records, &rounds, &spec, 7).unwrap();
        assert_eq!(l.round, 2);
        assert_eq!(
            l.judged_conditions + l.unjudged_conditions,
            40,
            "round 0 only fits"
        );
        assert!(l.judged_conditions >= 30, "{l:?}");
        let cs = l.sequence.unwrap();
        assert!(cs.lo <= cs.mean && cs.mean <= cs.hi);
        assert!(l.margin_cache_ms.is_some_and(f64::is_finite));
        // Only the first round: nothing judged, no verdict.
        let first = look(&records, &rounds[..1], &spec, 7).unwrap();
        assert_eq!(first.judged_conditions, 0);
        assert_eq!(first.verdict, Verdict::Open);
        // The same records and rounds give the same look (what --resume relies on).
        assert_eq!(look(&records, &rounds, &spec, 7).unwrap(), l);
    }

    #[test]
    fn the_judged_change_is_selected_minus_stage() {
        let records = generate(&SynthSpec {
            conditions: 40,
            repeats: 2,
            ..SynthSpec::default()
        });
        let rounds = rounds_of(&records, &[20, 20]);
        let mut earlier = BTreeSet::new();
        earlier.extend(rounds[0].units(2));
        let params = fit_rule(&records_of(&records, &earlier), 7, 1).unwrap();
        let drawn: Vec<Record> = (records.iter())
            .filter(|r| rounds[1].new_conditions.contains(&r.condition_id))
            .cloned()
            .collect();
        let changes = condition_changes(&params, &drawn, 2).unwrap();
        assert_eq!(changes.len(), 20);
        for (id, v) in &changes {
            let ConditionChange {
                change: v,
                attainable,
            } = v.unwrap();
            // The oracle gains at least as much as the rule.
            assert!(attainable <= v.min(0.0) + 1e-9, "{id}: {attainable} vs {v}");
            // Selected minus Stage is 0 where the rule keeps efficient, else cap − eff of the
            // pairs it switched: never beyond the condition's largest |cap − eff|.
            let worst = (drawn.iter())
                .filter(|r| &r.condition_id == id)
                .filter_map(|r| r.ttft_ms)
                .fold(0.0f64, |a, t| a.max(t));
            assert!(v.abs() <= worst, "{id}: {v}");
        }
    }
}
