//! Replaying variants over paired probes: every decision goes through `sy_selector::decide`'s
//! body, `decide_prepared` (the production code path, with each pair's log features taken once),
//! or — for the TTFT variants of a pair settled once under the parameters' ground — through
//! `sy_selector::TtftTurn::decide`, the same decision finished from what `decide` settles before
//! reading the fitted corrections (`sy-select`'s own pairs are settled under the run's limits and
//! Q tables, which every split seed shares). Stage's proposal is taken as *efficient* for every
//! pair, and the *selected TTFT* is the measured TTFT of the candidate the decision picks.
//!
//! The statistics answer the proposal's questions per variant: how often the rule could act,
//! how often it changed the choice, how often it fell back to Stage and why; mean and p90 selected
//! TTFT; regret against the per-probe oracle (the faster candidate every time) — all of it also
//! split by background generation length (`short` vs `long`), which exposes the "remaining
//! generation work" gap that R and P cannot see.

mod all_pairs;
mod pair;
mod tally;

use crate::search::{GuardPass, SearchProbe};
pub use all_pairs::{AllPairs, SettledRows};
pub use pair::{DecodeLength, EvalPair, GuardProbe, condition_key};
use serde::{Deserialize, Serialize};
use std::borrow::Borrow;
use std::collections::BTreeMap;
use sy_records::{ProbePair, ProbeTable, Split};
/// The replays' results, as `selection.json` holds them: the run directory's types.
pub use sy_rundir::artifact::selection::{Replay, VariantReplay, VariantStats};
use sy_selector::{
    CandidateFeatures, DecisionInput, Estimator, GuardLimits, Model, Observation, Reason,
    RuleParams, TtftGround, TtftTurn, Variant, count_guards, decide_prepared, thresholds_read,
    trigger_enabled,
};
pub use tally::Detail;
use tally::VariantTally;

/// Replays `variant` with `params` over `pairs`.
pub fn replay_variant<P: Borrow<EvalPair>>(
    params: &RuleParams,
    variant: Variant,
    pairs: &[P],
) -> VariantReplay {
    let mut tally = [VariantTally::new(variant, params, Detail::Full)];
    tally_pairs(&mut tally, pairs);
    let [tally] = tally;
    tally.finish()
}

/// Replays each `(variant, params)` over `pairs`, in one pass: each pair is read and unpacked
/// once and decided by every variant (the same decisions, added in the same order, as one pass
/// per variant; at 10 M records the pairs do not fit in any cache). Returns the replays and
/// each variant's selected TTFT of every pair in pair order (empty unless [`Detail::Full`]).
///
/// A variant whose trigger cannot fire with its thresholds (`stage`, or a count variant with
/// its terms disabled: `sy_selector::trigger_enabled`) keeps Stage's proposal on every pair,
/// so every such variant has the same statistics and selected TTFTs: they are tallied once,
/// for the first of them.
pub fn replay_variants<P: Borrow<EvalPair>>(
    variants: &[(Variant, &RuleParams)],
    pairs: &[P],
    detail: Detail,
) -> (Vec<VariantReplay>, SelectedTtfts) {
    let keeps = |&(v, params): &(Variant, &RuleParams)| !trigger_enabled(v, &params.thresholds);
    let first_keeping = variants.iter().position(keeps);
    let decided: Vec<usize> = (0..variants.len())
        .filter(|&i| Some(i) == first_keeping || variants.get(i).is_some_and(|x| !keeps(x)))
        .collect();
    let mut tallies: Vec<VariantTally<'_>> = (decided.iter())
        .filter_map(|&i| variants.get(i))
        .map(|&(v, params)| VariantTally::new(v, params, detail))
        .collect();
    tally_pairs(&mut tallies, pairs);
    let mut own: Vec<Option<(VariantReplay, Vec<f64>)>> = vec![None; variants.len()];
    for (&i, tally) in decided.iter().zip(tallies) {
        if let Some(slot) = own.get_mut(i) {
            *slot = Some(tally.finish_keeping());
        }
    }
    let kept = first_keeping.and_then(|i| own.get(i).cloned().flatten());
    (variants.iter().zip(own))
        .filter_map(|(&(v, params), own)| {
            let (replay, ttfts) = match own {
                Some(decided) => decided,
                None => {
                    let (like, ttfts) = kept.clone()?;
                    let replay = tally::variant_replay(v, params, like.all, like.by_decode_length);
                    (replay, ttfts)
                }
            };
            Some((replay, (v, ttfts)))
        })
        .unzip()
}

/// Every pair, read and unpacked once, added to every tally.
fn tally_pairs<P: Borrow<EvalPair>>(tallies: &mut [VariantTally<'_>], pairs: &[P]) {
    for pair in pairs {
        let pair = pair.borrow();
        let mut input = None;
        for tally in tallies.iter_mut() {
            tally.add(pair, &mut input);
        }
    }
}

/// Replays every variant with the same parameters (pairs owned or borrowed).
pub fn replay_all<P: Borrow<EvalPair>>(
    params: &RuleParams,
    pairs: &[P],
    unmeasured: u64,
) -> Replay {
    replay_all_keeping(params, pairs, unmeasured).0
}

/// Each variant's selected TTFT of every pair, in pair order, as a replay decided it.
pub type SelectedTtfts = Vec<(Variant, Vec<f64>)>;

/// [`replay_all`], and the selected TTFTs it decided (for the bootstrap intervals, which
/// resample them).
pub fn replay_all_keeping<P: Borrow<EvalPair>>(
    params: &RuleParams,
    pairs: &[P],
    unmeasured: u64,
) -> (Replay, SelectedTtfts) {
    let variants = Variant::ALL.map(|v| (v, params));
    let (variants, selected) = replay_variants(&variants, pairs, Detail::Full);
    (Replay::of(pairs, unmeasured, variants), selected)
}

/// Decision inputs of the pairs, and how many pairs lacked a measured TTFT.
pub fn eval_pairs<'r>(pairs: impl IntoIterator<Item = ProbePair<'r>>) -> (Vec<EvalPair>, u64) {
    let mut out = Vec::new();
    let mut unmeasured = 0;
    for p in pairs {
        match EvalPair::from_pair(&p) {
            Some(e) => out.push(e),
            None => unmeasured += 1,
        }
    }
    (out, unmeasured)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sy_calibration::margins::testkit::true_estimators;
    use sy_records::synth::{SynthSpec, generate};
    use sy_selector::{GuardLimits, Margins, Thresholds};

    fn setup() -> (ProbeTable, RuleParams) {
        let spec = SynthSpec {
            conditions: 30,
            repeats: 2,
            ..SynthSpec::default()
        };
        let table = ProbeTable::from_records(&generate(&spec)).unwrap();
        let params = RuleParams {
            efficient: true_estimators(&spec, Model::Efficient).unwrap(),
            capable: true_estimators(&spec, Model::Capable).unwrap(),
            thresholds: Thresholds {
                r: Some(1.0),
                p: None,
            },
            margins: Margins::default(),
            limits: GuardLimits {
                max_age_ms: f64::INFINITY,
                destination_limit: f64::INFINITY,
                local_limit: u64::MAX,
            },
        };
        (table, params)
    }

    #[test]
    fn stage_keeps_every_proposal_and_one_pass_equals_one_replay_per_variant() {
        let (table, params) = setup();
        let (pairs, unmeasured) = eval_pairs(table.pairs());
        assert_eq!(pairs.len() as u64 + unmeasured, table.pair_count() as u64);
        let stage = replay_variant(&params, Variant::Stage, &pairs);
        assert_eq!((stage.all.changed, stage.all.could_act), (0, 0));
        let efficient_mean = pairs.iter().map(|p| p.ttft_eff_ms).sum::<f64>() / pairs.len() as f64;
        assert!((stage.all.mean_selected_ttft_ms - efficient_mean).abs() < 1e-9);
        let all = replay_all(&params, &pairs, unmeasured);
        assert_eq!(all.pairs_unmeasured, unmeasured);
        for v in Variant::ALL {
            let alone = replay_variant(&params, v, &pairs);
            assert_eq!(all.get(v), Some(&alone), "{}", v.as_str());
        }
    }
}
