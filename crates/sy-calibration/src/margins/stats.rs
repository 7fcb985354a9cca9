//! The statistics behind a margin: the finite-sample conformal order statistic and the
//! per-condition scores. Pure functions, no I/O. The percentile is the runtime crate's
//! [`sy_selector::quantile_sorted`] (one definition).

use sy_rundir::artifact::margins::{ConditionScore, MarginEstimate, RepeatSummary};
use sy_selector::quantile_sorted;

/// The rank `k = ⌈level · (G + 1)⌉` of the split-conformal order statistic among `g` scores
/// (1-based). When `k > g` the conformal bound is infinite (too few scores for that level).
pub fn conformal_rank(g: usize, level: f64) -> usize {
    // Guard against 0.9 · 10 = 9.000000000000002 style rounding pushing the ceiling up.
    let x = level * (g as f64 + 1.0);
    (x - 1e-9).ceil().max(0.0) as usize
}

/// The `⌈level · (G + 1)⌉`-th smallest of the `sorted` scores, or `None` when that rank exceeds G
/// (the bound is infinite) or G = 0.
pub fn conformal_order_statistic(sorted: &[f64], level: f64) -> Option<f64> {
    let k = conformal_rank(sorted.len(), level);
    if k == 0 || k > sorted.len() {
        return None;
    }
    Some(sorted[k - 1])
}

/// One paired probe's predicted and measured advantage (efficient − capable, ms).
#[derive(Debug, Clone, PartialEq)]
pub struct AdvantageError<'a> {
    /// The workload condition the probe belongs to.
    pub condition_id: &'a str,
    /// Predicted `T_eff − T_cap`, or `None` when a prediction was invalid, non-finite or
    /// non-positive (excluded and counted).
    pub predicted_ms: Option<f64>,
    /// Measured `TTFT_eff − TTFT_cap`.
    pub measured_ms: f64,
}

/// A pair's signed advantage error `predicted − measured` (ms), or `None` when the pair is not
/// usable (no valid prediction, or either value non-finite): the one rule every margin applies.
#[inline]
pub fn signed_error(predicted_ms: Option<f64>, measured_ms: f64) -> Option<f64> {
    let pred = predicted_ms.filter(|p| p.is_finite())?;
    measured_ms.is_finite().then_some(pred - measured_ms)
}

/// The margin from the condition scores sorted ascending: their `level` percentile (the
/// proposal's definition; `None` without any condition).
pub fn margin_of_sorted_scores(sorted: &[f64], level: f64) -> Option<f64> {
    quantile_sorted(sorted, level)
}

/// Each condition's score (largest absolute advantage error), kept by condition index: what a
/// margin needs when only its value is wanted (the stability seeds), without names, per-pair
/// errors or the report's detail. Gives the same value as [`margin_from_pairs`] on the same
/// pairs grouped by condition.
#[derive(Debug, Clone)]
pub struct ConditionMaxima {
    /// Per condition index; negative = no usable pair yet.
    scores: Vec<f64>,
}

impl ConditionMaxima {
    /// No condition scored yet, room for condition indexes `0..conditions`.
    pub fn new(conditions: usize) -> Self {
        ConditionMaxima {
            scores: vec![-1.0; conditions],
        }
    }

    /// Adds one pair of condition `c` (ignored when not usable, see [`signed_error`]).
    #[inline]
    pub fn add(&mut self, c: u32, predicted_ms: Option<f64>, measured_ms: f64) {
        let Some(err) = signed_error(predicted_ms, measured_ms) else {
            return;
        };
        let c = c as usize;
        if c >= self.scores.len() {
            self.scores.resize(c + 1, -1.0);
        }
        self.scores[c] = self.scores[c].max(err.abs());
    }

    /// The margin at `level` over the conditions with at least one usable pair.
    pub fn margin(&self, level: f64) -> Option<f64> {
        let mut sorted: Vec<f64> = self.scores.iter().copied().filter(|s| *s >= 0.0).collect();
        sorted.sort_by(f64::total_cmp);
        margin_of_sorted_scores(&sorted, level)
    }
}

/// Computes the margin from the pairs of one estimator. Pairs are grouped by condition id in the
/// order given (any order works); `level` is the percentile level (0.9 in the proposal).
pub fn margin_from_pairs<'a>(
    pairs: impl IntoIterator<Item = AdvantageError<'a>>,
    level: f64,
) -> MarginEstimate {
    use std::collections::HashMap;
    let mut by_condition: HashMap<&'a str, (f64, u64)> = HashMap::new();
    let mut all_errors = Vec::new();
    let mut excluded = 0u64;
    let mut signed_sum = 0.0;
    for pair in pairs {
        let Some(err) = signed_error(pair.predicted_ms, pair.measured_ms) else {
            excluded += 1;
            continue;
        };
        signed_sum += err;
        let abs = err.abs();
        all_errors.push(abs);
        let entry = by_condition.entry(pair.condition_id).or_insert((0.0, 0));
        entry.0 = entry.0.max(abs);
        entry.1 += 1;
    }
    let mut scores: Vec<ConditionScore> = by_condition
        .into_iter()
        .map(|(id, (score, repeats))| ConditionScore {
            condition_id: id.to_string(),
            score_ms: score,
            repeats,
        })
        .collect();
    scores.sort_by(|a, b| {
        a.score_ms
            .total_cmp(&b.score_ms)
            .then_with(|| a.condition_id.cmp(&b.condition_id))
    });
    let sorted: Vec<f64> = scores.iter().map(|s| s.score_ms).collect();
    all_errors.sort_by(f64::total_cmp);
    let g = sorted.len();
    let repeats = (g > 0).then(|| {
        let mut r: Vec<u64> = scores.iter().map(|s| s.repeats).collect();
        r.sort_unstable();
        let as_f: Vec<f64> = r.iter().map(|&x| x as f64).collect();
        RepeatSummary {
            min: r[0],
            median: quantile_sorted(&as_f, 0.5).unwrap_or(f64::NAN),
            mean: as_f.iter().sum::<f64>() / g as f64,
            max: r[g - 1],
        }
    });
    MarginEstimate {
        delta_ms: margin_of_sorted_scores(&sorted, level),
        level,
        conditions: g as u64,
        conformal_ms: conformal_order_statistic(&sorted, level),
        conformal_rank: conformal_rank(g, level) as u64,
        per_probe_delta_ms: quantile_sorted(&all_errors, level),
        pairs_used: all_errors.len() as u64,
        pairs_excluded: excluded,
        repeats,
        mean_error_ms: (!all_errors.is_empty()).then(|| signed_sum / all_errors.len() as f64),
        condition_scores: scores,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conformal_rank_and_statistic() {
        // G = 9: ceil(0.9 * 10) = 9 (not 10 from rounding noise)
        assert_eq!(conformal_rank(9, 0.9), 9);
        // G = 10: ceil(9.9) = 10
        assert_eq!(conformal_rank(10, 0.9), 10);
        // G = 19: ceil(18) = 18
        assert_eq!(conformal_rank(19, 0.9), 18);
        // G = 5: ceil(5.4) = 6 > 5 -> infinite
        let five = [1.0, 2.0, 3.0, 4.0, 5.0];
        assert_eq!(conformal_order_statistic(&five, 0.9), None);
        let nine: Vec<f64> = (1..=9).map(f64::from).collect();
        assert_eq!(conformal_order_statistic(&nine, 0.9), Some(9.0));
        let twenty: Vec<f64> = (1..=20).map(f64::from).collect();
        // ceil(0.9 * 21) = ceil(18.9) = 19
        assert_eq!(conformal_order_statistic(&twenty, 0.9), Some(19.0));
        assert_eq!(conformal_order_statistic(&[], 0.9), None);
    }

    proptest::proptest! {
        /// The margin alone, by condition index, is the full computation's margin.
        #[test]
        fn condition_maxima_give_the_margin_of_margin_from_pairs(
            pairs in proptest::collection::vec(
                (
                    0u32..12,
                    proptest::option::of(proptest::prop_oneof![
                        8 => -1e4f64..1e4,
                        1 => proptest::strategy::Just(f64::NAN),
                        1 => proptest::strategy::Just(f64::INFINITY),
                    ]),
                    proptest::prop_oneof![
                        9 => -1e4f64..1e4,
                        1 => proptest::strategy::Just(f64::NEG_INFINITY),
                    ],
                ),
                0..200,
            ),
            level in 0.05f64..0.99,
        ) {
            let ids: Vec<String> = (0..12).map(|c| format!("c{c}")).collect();
            let full = margin_from_pairs(
                pairs.iter().map(|&(c, predicted_ms, measured_ms)| AdvantageError {
                    condition_id: ids[c as usize].as_str(),
                    predicted_ms,
                    measured_ms,
                }),
                level,
            );
            let mut maxima = ConditionMaxima::new(4);
            for &(c, predicted, measured) in &pairs {
                maxima.add(c, predicted, measured);
            }
            proptest::prop_assert_eq!(maxima.margin(level), full.delta_ms);
        }
    }

    #[test]
    fn margin_by_hand() {
        // Condition a: errors |5-3| = 2, |1-4| = 3 -> score 3 (2 repeats).
        // Condition b: error |10-0| = 10 -> score 10.
        // Condition c: errors |2-2| = 0 and one excluded pair -> score 0.
        let pairs = vec![
            AdvantageError {
                condition_id: "a",
                predicted_ms: Some(5.0),
                measured_ms: 3.0,
            },
            AdvantageError {
                condition_id: "b",
                predicted_ms: Some(10.0),
                measured_ms: 0.0,
            },
            AdvantageError {
                condition_id: "a",
                predicted_ms: Some(1.0),
                measured_ms: 4.0,
            },
            AdvantageError {
                condition_id: "c",
                predicted_ms: Some(2.0),
                measured_ms: 2.0,
            },
            AdvantageError {
                condition_id: "c",
                predicted_ms: None,
                measured_ms: 2.0,
            },
        ];
        let m = margin_from_pairs(pairs, 0.9);
        // Scores sorted: 0, 3, 10 -> position 1.8 -> 3 + 0.8 * 7 = 8.6
        assert!((m.delta_ms.unwrap() - 8.6).abs() < 1e-12);
        assert_eq!(m.conditions, 3);
        assert_eq!(m.pairs_used, 4);
        assert_eq!(m.pairs_excluded, 1);
        // ceil(0.9 * 4) = 4 > 3: infinite.
        assert_eq!(m.conformal_rank, 4);
        assert_eq!(m.conformal_ms, None);
        // Per-probe errors sorted: 0, 2, 3, 10 -> position 2.7 -> 3 + 0.7 * 7 = 7.9
        assert!((m.per_probe_delta_ms.unwrap() - 7.9).abs() < 1e-12);
        // Signed errors 2, 10, -3, 0 -> mean 2.25
        assert!((m.mean_error_ms.unwrap() - 2.25).abs() < 1e-12);
        let r = m.repeats.unwrap();
        assert_eq!((r.min, r.max), (1, 2));
        assert!((r.median - 1.0).abs() < 1e-12);
        assert!((r.mean - 4.0 / 3.0).abs() < 1e-12);
        let ids: Vec<&str> = m
            .condition_scores
            .iter()
            .map(|s| s.condition_id.as_str())
            .collect();
        assert_eq!(ids, ["c", "a", "b"]);
    }

    #[test]
    fn more_repeats_grow_the_max_margin_not_the_per_probe_one() {
        // Every condition has the same error distribution; more repeats -> larger max.
        let errs = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0];
        let ids: Vec<String> = (0..20).map(|i| format!("c{i}")).collect();
        let build = |reps: usize| {
            let mut v = Vec::new();
            for (ci, id) in ids.iter().enumerate() {
                for k in 0..reps {
                    v.push(AdvantageError {
                        condition_id: id.as_str(),
                        predicted_ms: Some(errs[(ci + k * 3) % errs.len()]),
                        measured_ms: 0.0,
                    });
                }
            }
            margin_from_pairs(v, 0.9)
        };
        let one = build(1);
        let ten = build(10);
        assert!(ten.delta_ms.unwrap() > one.delta_ms.unwrap());
        assert!((ten.delta_ms.unwrap() - 9.0).abs() < 1e-12);
        assert!((ten.per_probe_delta_ms.unwrap() - one.per_probe_delta_ms.unwrap()).abs() < 1.0);
    }
}
