//! Summary statistics of session-structured samples, with their bootstrap intervals: the
//! evaluation's (`sy-eval`) sessions nested in rounds.
//!
//! Turns of one session are dependent (they share the conversation, the cache and the worker),
//! so intervals resample whole *sessions*, never turns: a per-turn statistic is computed on all
//! turns of the resampled sessions. A difference between variants pairs the same session shape
//! (same round, same index) across the two variants and resamples the pairs, so the interval is
//! on the *difference*, not two overlapping intervals. Percentiles use the one definition,
//! [`sy_selector::quantile_sorted`]; intervals are this crate's [`Interval`] (for a bootstrap, `resamples`
//! counts the finite resampled statistics and `groups` the sessions; for the Student-t interval
//! over rounds, `resamples` is 0 and `groups` the rounds).
//!
//! Sessions are nested in rounds (blocks run at different times, and the sessions of one block
//! share the machine's and the deployment's state of that time: measured in docs/eval.md), so
//! [`nested`] resamples rounds, then sessions within each drawn round; with one round it is the
//! grouped bootstrap of [`crate::bootstrap`] over sessions. Its draws come from a seeded ChaCha8
//! generator (the evaluation's figures are reproducible from their seed).

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::{DEFAULT_LEVEL, DEFAULT_RESAMPLES, Interval};
use sy_selector::quantile_sorted;

/// A tail percentile needs at least this many samples beyond it to be reported without a
/// warning (`n · (1 − q) ≥ 5`).
pub const TAIL_MIN_BEYOND: f64 = 5.0;

/// A statistic with its interval (at [`DEFAULT_LEVEL`]; none with fewer than two sessions).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Estimate {
    pub value: f64,
    pub ci95: Option<Interval>,
}

/// Mean, p50 and p90 of a sample, each with a grouped bootstrap interval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Values summarised.
    pub n: usize,
    /// Groups (sessions) they came from.
    pub groups: usize,
    pub mean: Estimate,
    pub p50: Estimate,
    pub p90: Estimate,
    /// Set when p90 rests on fewer than [`TAIL_MIN_BEYOND`] samples beyond it.
    pub tail_warning: Option<String>,
}

/// Which statistic of a sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stat {
    Mean,
    Quantile(u32),
}

/// The statistic of `values` (unsorted), `None` when empty.
pub fn stat(values: &mut [f64], s: Stat) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    match s {
        Stat::Mean => Some(values.iter().sum::<f64>() / values.len() as f64),
        Stat::Quantile(pct) => {
            values.sort_by(f64::total_cmp);
            quantile_sorted(values, f64::from(pct) / 100.0)
        }
    }
}

/// The statistic of the groups' pooled values, with a bootstrap interval from resampling
/// whole groups (`None` with fewer than two groups). Deterministic in `seed`.
pub fn grouped(groups: &[Vec<f64>], s: Stat, seed: u64) -> Option<Estimate> {
    nested(&[groups.to_vec()], s, seed)
}

/// The statistic of every value pooled, with a two-stage bootstrap interval: resample the
/// rounds (blocks run at different times: their sessions share the machine's and the
/// deployment's state of that time), then whole sessions within each resampled round. With
/// one round this is the plain session bootstrap. No interval with fewer than two sessions.
pub fn nested(rounds: &[Vec<Vec<f64>>], s: Stat, seed: u64) -> Option<Estimate> {
    let rounds: Vec<&Vec<Vec<f64>>> = rounds.iter().filter(|r| !r.is_empty()).collect();
    let mut pooled: Vec<f64> = rounds
        .iter()
        .flat_map(|r| r.iter().flatten())
        .copied()
        .collect();
    let value = stat(&mut pooled, s)?;
    let sessions: usize = rounds.iter().map(|r| r.len()).sum();
    if sessions < 2 {
        return Some(Estimate { value, ci95: None });
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut stats = Vec::with_capacity(DEFAULT_RESAMPLES as usize);
    let mut buf = Vec::with_capacity(pooled.len() * 2);
    let nr = rounds.len();
    for _ in 0..DEFAULT_RESAMPLES as usize {
        buf.clear();
        for _ in 0..nr {
            let round = rounds[if nr > 1 { rng.random_range(0..nr) } else { 0 }];
            let g = round.len();
            for _ in 0..g {
                buf.extend_from_slice(&round[rng.random_range(0..g)]);
            }
        }
        if let Some(v) = stat(&mut buf, s) {
            stats.push(v);
        }
    }
    stats.sort_by(f64::total_cmp);
    let ci95 = match (
        quantile_sorted(&stats, 0.025),
        quantile_sorted(&stats, 0.975),
    ) {
        (Some(lo), Some(hi)) => Some(Interval {
            estimate: value,
            lo,
            hi,
            level: DEFAULT_LEVEL,
            resamples: u32::try_from(stats.len()).unwrap_or(u32::MAX),
            groups: u32::try_from(sessions).unwrap_or(u32::MAX),
        }),
        _ => None,
    };
    Some(Estimate { value, ci95 })
}

/// Mean, p50 and p90 of values grouped by round and session, with two-stage bootstrap
/// intervals ([`nested`]); `None` when empty.
pub fn summarise(rounds: &[Vec<Vec<f64>>], seed: u64) -> Option<Summary> {
    let n: usize = rounds.iter().flatten().map(Vec::len).sum();
    let beyond = n as f64 * 0.1;
    Some(Summary {
        n,
        groups: rounds.iter().map(Vec::len).sum(),
        mean: nested(rounds, Stat::Mean, seed)?,
        p50: nested(rounds, Stat::Quantile(50), seed.wrapping_add(1))?,
        p90: nested(rounds, Stat::Quantile(90), seed.wrapping_add(2))?,
        tail_warning: (beyond < TAIL_MIN_BEYOND).then(|| {
            format!(
                "p90 of {n} values rests on {beyond:.1} values beyond it (fewer than {TAIL_MIN_BEYOND}): treat it as indicative"
            )
        }),
    })
}

/// The paired difference `mean(b − a)` over session pairs grouped by round. With two or more
/// rounds: the mean of the rounds' mean differences with a Student-t interval over rounds
/// (R − 1 degrees of freedom; [`crate::student::mean_t_interval`]): the rounds are the
/// independent units (a round's sessions share the machine's and the deployment's state of its
/// time), and a bootstrap over a handful of rounds is too narrow (its percentile ends cannot
/// show the t distribution's extra width at few degrees of freedom), while the t interval is exact
/// for normal round means (the A/A study, `scripts/aa-study.sh`, measures its false verdicts).
/// With one round: the session bootstrap ([`nested`]).
pub fn paired_mean_difference(rounds: &[Vec<(f64, f64)>], seed: u64) -> Option<Estimate> {
    let rounds: Vec<&Vec<(f64, f64)>> = rounds.iter().filter(|r| !r.is_empty()).collect();
    if rounds.len() >= 2 {
        let means: Vec<f64> = rounds
            .iter()
            .map(|r| r.iter().map(|(a, b)| b - a).sum::<f64>() / r.len() as f64)
            .collect();
        let (value, lo, hi) = crate::student::mean_t_interval(&means, DEFAULT_LEVEL)?;
        return Some(Estimate {
            value,
            ci95: Some(Interval {
                estimate: value,
                lo,
                hi,
                level: DEFAULT_LEVEL,
                resamples: 0,
                groups: u32::try_from(rounds.len()).unwrap_or(u32::MAX),
            }),
        });
    }
    let diffs: Vec<Vec<Vec<f64>>> = rounds
        .iter()
        .map(|r| r.iter().map(|(a, b)| vec![b - a]).collect())
        .collect();
    nested(&diffs, Stat::Mean, seed)
}

/// Distribution of a plain sample (routing overhead): mean, p50, p90, p99, max.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Distribution {
    pub n: usize,
    pub mean: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

/// The distribution of `values`, `None` when empty.
pub fn distribution(values: &[f64]) -> Option<Distribution> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let q = |p: f64| quantile_sorted(&v, p).unwrap_or(f64::NAN);
    Some(Distribution {
        n: v.len(),
        mean: v.iter().sum::<f64>() / v.len() as f64,
        p50: q(0.5),
        p90: q(0.9),
        p99: q(0.99),
        max: v[v.len() - 1],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_clear_paired_difference_excludes_zero_and_noise_does_not() {
        // 16 sessions, b faster by 100 ± 10.
        let pairs: Vec<(f64, f64)> = (0..16)
            .map(|i| {
                (
                    1000.0 + 50.0 * f64::from(i % 4),
                    900.0 + 50.0 * f64::from(i % 4) + f64::from(i % 3) * 10.0,
                )
            })
            .collect();
        let d = paired_mean_difference(&[pairs], 1).unwrap();
        assert!(d.value < -80.0 && d.value > -100.0, "{d:?}");
        assert!(d.ci95.unwrap().excludes_zero(), "{d:?}");
        // Differences symmetric around zero.
        let pairs: Vec<(f64, f64)> = (0..16)
            .map(|i| (1000.0, 1000.0 + if i % 2 == 0 { 30.0 } else { -30.0 }))
            .collect();
        let d = paired_mean_difference(&[pairs], 1).unwrap();
        assert!(!d.ci95.unwrap().excludes_zero(), "{d:?}");
    }

    #[test]
    fn groups_not_values_are_resampled() {
        // One group of 100 identical values and one of a single other value: resampling groups
        // gives bootstrap means of either group alone half the time, so the interval spans both.
        let groups = vec![vec![0.0; 100], vec![10.0]];
        let e = grouped(&groups, Stat::Mean, 3).unwrap();
        let ci = e.ci95.unwrap();
        assert!(ci.lo <= 0.0 + 1e-12 && ci.hi >= 10.0 - 1e-12, "{e:?}");
        assert!(summarise(&[groups], 3).unwrap().tail_warning.is_none());
        assert!(
            summarise(&[vec![vec![1.0, 2.0]]], 3)
                .unwrap()
                .tail_warning
                .is_some()
        );
    }

    #[test]
    fn a_shifted_round_widens_the_interval() {
        // Four rounds of 8 pairs with tiny within-round noise, one round shifted by +10: the
        // session-only bootstrap would call the mean shift of 2.5 significant; resampling rounds
        // does not.
        let rounds: Vec<Vec<(f64, f64)>> = (0..4)
            .map(|r| {
                (0..8)
                    .map(|i| {
                        (
                            100.0,
                            100.0
                                + if r == 2 { 10.0 } else { 0.0 }
                                + if i % 2 == 0 { 0.1 } else { -0.1 },
                        )
                    })
                    .collect()
            })
            .collect();
        let two_stage = paired_mean_difference(&rounds, 4).unwrap().ci95.unwrap();
        assert!(!two_stage.excludes_zero(), "{two_stage:?}");
        let flat: Vec<(f64, f64)> = rounds.concat();
        let one_stage = paired_mean_difference(&[flat], 4).unwrap().ci95.unwrap();
        assert!(one_stage.excludes_zero(), "{one_stage:?}");
    }

    #[test]
    fn distribution_of_known_values() {
        let d = distribution(&[1.0, 2.0, 3.0, 4.0, f64::NAN]).unwrap();
        assert_eq!((d.n, d.mean, d.p50, d.max), (4, 2.5, 2.5, 4.0));
        assert!(distribution(&[]).is_none());
    }

    proptest! {
        #[test]
        fn the_interval_brackets_the_estimate_for_means(
            groups in proptest::collection::vec(proptest::collection::vec(0.0f64..1e4, 1..5), 2..12),
            seed in any::<u64>(),
        ) {
            let e = grouped(&groups, Stat::Mean, seed).unwrap();
            let ci = e.ci95.unwrap();
            let lo = groups.iter().flatten().copied().fold(f64::INFINITY, f64::min);
            let hi = groups.iter().flatten().copied().fold(f64::NEG_INFINITY, f64::max);
            prop_assert!(ci.lo <= ci.hi);
            prop_assert!(ci.lo >= lo - 1e-9 && ci.hi <= hi + 1e-9);
            prop_assert_eq!(grouped(&groups, Stat::Mean, seed), Some(e));
        }
    }
}
