//! Studentized (bootstrap-t) intervals of a change of means over resampled conditions, each on
//! its own and simultaneous over several compared series.
//!
//! The change of a variant's mean selected TTFT versus a reference (Stage, or the per-probe
//! oracle for regret) is often carried by a few conditions: the rule acts in a minority of them
//! and a handful hold most of the effect. Its sampling distribution over conditions is then
//! skewed, and the percentile interval of the resampled changes is too narrow on the side of
//! the rare large effects (the coverage study, `benches/coverage_study.rs`, measured it). The
//! studentized interval corrects for that skew: each resample's change is divided by its own
//! standard error, and the interval is
//!
//! ```text
//! [ θ̂ − t*(1 − α/2) · se(θ̂),  θ̂ − t*(α/2) · se(θ̂) ]     t* = (θ* − θ̂) / se(θ*)
//! ```
//!
//! θ is the mean over rows, Σ d / Σ n over conditions (d a condition's summed per-row changes,
//! n its rows), and se its cluster-robust (linearised ratio) standard error,
//! `√(G/(G−1) · Σ (d − θ n)²) / Σ n`, over the conditions of the sample or of the resample.
//!
//! **Simultaneous over the compared series.** When one of k series was *chosen* because its
//! change looked best on the same conditions, its own interval is optimistic. The simultaneous
//! interval uses, per resample, the largest and the smallest t* over the k series: the k
//! intervals hold together with probability ≥ the level, so the chosen one's does whatever the
//! choice was (a max-t adjustment; Romano and Wolf 2005).
//!
//! A resample whose standard error is zero (every drawn condition changes the same per row, e.g.
//! none of the few conditions where the variant acts was drawn) is scaled by the sample's
//! standard error instead of its own (its t* would be infinite: with 3 changed conditions of 20,
//! 4 % of resamples draw none of them). A series whose own standard error is zero (every
//! condition changes the same per row, e.g. a variant that never acts) has the point interval.

use crate::{BootstrapError, GroupDraws, Interval, check_lengths};
use sy_selector::quantile_sorted;

/// The studentized intervals of several series' mean changes versus one reference.
#[derive(Debug, Clone)]
pub struct StudentizedChanges {
    /// Each series' interval on its own.
    pub each: Vec<Result<Interval, BootstrapError>>,
    /// Each series' interval simultaneous over all the series given (see the module docs).
    pub simultaneous: Vec<Result<Interval, BootstrapError>>,
}

/// One series' change: the estimate, its standard error and t* of every resample.
#[derive(Debug, Clone)]
struct Change {
    estimate: f64,
    se: f64,
    /// Sample skewness of the per-condition residuals `d − θ̂ n`.
    skew: f64,
    t: Vec<f64>,
}

/// The change θ = Σd/Σn and its cluster standard error over `draw` (group indices, with
/// repetition), from per-group (d, n).
fn theta_se(totals: &[(f64, f64)], draw: impl Iterator<Item = usize> + Clone) -> (f64, f64) {
    let (mut d, mut n, mut g) = (0.0, 0.0, 0usize);
    for i in draw.clone() {
        let (di, ni) = totals.get(i).copied().unwrap_or((0.0, 0.0));
        d += di;
        n += ni;
        g += 1;
    }
    if n == 0.0 || g < 2 {
        return (f64::NAN, f64::NAN);
    }
    let theta = d / n;
    let ss: f64 = draw
        .map(|i| {
            let (di, ni) = totals.get(i).copied().unwrap_or((0.0, 0.0));
            (di - theta * ni).powi(2)
        })
        .sum();
    let gf = g as f64;
    (theta, (gf / (gf - 1.0) * ss).sqrt() / n)
}

/// t* of a resample; a resample without spread is scaled by the sample's standard error
/// `se_hat` instead (see the module docs).
fn t_star(theta: f64, se: f64, estimate: f64, se_hat: f64) -> f64 {
    let diff = theta - estimate;
    if se > 0.0 { diff / se } else { diff / se_hat }
}

impl GroupDraws {
    fn change(&self, series: &[f64], reference: &[f64]) -> Result<Change, BootstrapError> {
        check_lengths(series, Some(reference), self.groups.rows())?;
        let totals: Vec<(f64, f64)> = (self.groups.members.iter())
            .map(|m| {
                let d: f64 = m.iter().map(|&i| series[i] - reference[i]).sum();
                (d, m.len() as f64)
            })
            .collect();
        let g = self.groups.len();
        let (estimate, se) = theta_se(&totals, 0..g);
        if !estimate.is_finite() || !se.is_finite() {
            return Err(BootstrapError::NotFinite);
        }
        let t = if se > 0.0 {
            self.draws
                .chunks(g.max(1))
                .map(|draw| {
                    let (theta, s) = theta_se(&totals, draw.iter().map(|&i| i as usize));
                    t_star(theta, s, estimate, se)
                })
                .filter(|t| !t.is_nan())
                .collect()
        } else {
            Vec::new()
        };
        let (m2, m3) = totals.iter().fold((0.0, 0.0), |(m2, m3), (d, n)| {
            let e = d - estimate * n;
            (m2 + e * e, m3 + e * e * e)
        });
        let gf = g as f64;
        let skew = (m3 / gf) / (m2 / gf).powf(1.5);
        Ok(Change {
            estimate,
            se,
            skew,
            t,
        })
    }

    fn t_interval(
        &self,
        c: &Change,
        lo_t: f64,
        hi_t: f64,
        tails: Tails,
    ) -> Result<Interval, BootstrapError> {
        let (lo, hi) = if c.se > 0.0 {
            (c.estimate - hi_t * c.se, c.estimate - lo_t * c.se)
        } else {
            (c.estimate, c.estimate)
        };
        if !(lo.is_finite() && hi.is_finite()) {
            return Err(BootstrapError::Unbounded);
        }
        Ok(Interval {
            estimate: c.estimate,
            lo,
            hi,
            level: tails.level(),
            resamples: if c.se > 0.0 {
                c.t.len() as u32
            } else {
                self.cfg.resamples
            },
            groups: self.groups.len() as u32,
        })
    }

    /// The studentized intervals of `mean(series[k]) − mean(reference)` (means over rows), each
    /// on its own and simultaneous over all of `series` (see the module docs), with equal tails
    /// at the configured level. One entry per series, in order.
    pub fn mean_changes_studentized(
        &self,
        series: &[&[f64]],
        reference: &[f64],
    ) -> StudentizedChanges {
        let s = self.studentized(series, reference);
        let tails = Tails::equal(self.cfg.level);
        StudentizedChanges {
            each: (0..series.len()).map(|k| s.each(k, tails)).collect(),
            simultaneous: (0..series.len())
                .map(|k| s.simultaneous(k, tails))
                .collect(),
        }
    }

    /// The resampled t* of every series' change versus `reference` and, per resample, their
    /// smallest and largest: any interval of [`StudentizedDraws`] at any tails, without
    /// resampling again.
    pub fn studentized(&self, series: &[&[f64]], reference: &[f64]) -> StudentizedDraws<'_> {
        let changes: Vec<Result<Change, BootstrapError>> =
            series.iter().map(|s| self.change(s, reference)).collect();
        // Per resample the smallest and largest t* over the series that vary.
        let varying: Vec<&Change> = (changes.iter())
            .filter_map(|c| c.as_ref().ok())
            .filter(|c| c.se > 0.0 && c.t.len() == self.cfg.resamples as usize)
            .collect();
        let (mut tmin, mut tmax) = (Vec::new(), Vec::new());
        if !varying.is_empty() {
            for b in 0..self.cfg.resamples as usize {
                let ts = varying.iter().map(|c| c.t[b]);
                tmin.push(ts.clone().fold(f64::INFINITY, f64::min));
                tmax.push(ts.fold(f64::NEG_INFINITY, f64::max));
            }
        }
        tmin.sort_by(f64::total_cmp);
        tmax.sort_by(f64::total_cmp);
        let changes = changes
            .into_iter()
            .map(|c| {
                c.map(|mut c| {
                    c.t.sort_by(f64::total_cmp);
                    c
                })
            })
            .collect();
        StudentizedDraws {
            draws: self,
            changes,
            tmin,
            tmax,
        }
    }
}

/// The level of the selection-adjusted (simultaneous) interval of a chosen variant's change
/// when its target is `level`: half the miss rate on each side (97.5 % for 95 %).
///
/// Where a few conditions carry most of a change, a sample of conditions often holds too few of
/// them, and then both the change and its standard error come out too small: the max-t interval
/// at 95 % covered 90–92 % in the coverage study's *extreme* world (≈ 91 % of the effect in 5
/// conditions), every miss but a few on the side of the rare large changes, with nothing the
/// sample shows to flag them (the share of the change in the largest conditions is *lower* in
/// the studies that miss). At 97.5 % it covered 93.7–94.7 % there and 97–99.8 % elsewhere; an
/// unequal-tailed 95 % interval with the smaller tail on the side of the residuals' skew covered
/// 92.1–93.5 % there (docs/methodology.md, docs/benchmarks.md).
pub fn selection_adjusted_level(level: f64) -> f64 {
    1.0 - 0.5 * (1.0 - level)
}

/// The probability an interval leaves below its lower end and above its upper end (its level is
/// `1 − lower − upper`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tails {
    pub lower: f64,
    pub upper: f64,
}

impl Tails {
    /// Equal tails at `level`.
    pub fn equal(level: f64) -> Tails {
        let t = 0.5 * (1.0 - level);
        Tails { lower: t, upper: t }
    }

    /// `level` with the smaller tail, `long_share` of `1 − level`, on the side of `long` (the
    /// side where a skewed change may lie far from its estimate).
    pub fn unequal(level: f64, long: Side, long_share: f64) -> Tails {
        let a = 1.0 - level;
        let (small, large) = (a * long_share, a * (1.0 - long_share));
        match long {
            Side::Lower => Tails {
                lower: small,
                upper: large,
            },
            Side::Upper => Tails {
                lower: large,
                upper: small,
            },
        }
    }

    /// The level the tails leave (rounded to 1e-12: 0.975, not 0.9750000000000001).
    pub fn level(&self) -> f64 {
        ((1.0 - self.lower - self.upper) * 1e12).round() / 1e12
    }
}

/// A side of an interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Lower,
    Upper,
}

/// The resampled t* of several series' changes (see [`GroupDraws::studentized`]).
#[derive(Debug, Clone)]
pub struct StudentizedDraws<'a> {
    draws: &'a GroupDraws,
    /// Each series' change with its t* sorted.
    changes: Vec<Result<Change, BootstrapError>>,
    /// Per resample the smallest and the largest t* over the varying series, each sorted.
    tmin: Vec<f64>,
    tmax: Vec<f64>,
}

impl StudentizedDraws<'_> {
    /// Series `k`'s interval on its own.
    pub fn each(&self, k: usize, tails: Tails) -> Result<Interval, BootstrapError> {
        let c = self.change(k)?;
        if c.se == 0.0 {
            return self.draws.t_interval(c, 0.0, 0.0, tails);
        }
        let lo_t = quantile_at(&c.t, tails.upper);
        let hi_t = quantile_at(&c.t, 1.0 - tails.lower);
        match (lo_t, hi_t) {
            (Some(lo), Some(hi)) => self.draws.t_interval(c, lo, hi, tails),
            _ => Err(BootstrapError::TooFewFinite(self.draws.cfg.resamples)),
        }
    }

    /// Series `k`'s interval simultaneous over all the series given (max-t, see the module
    /// docs).
    pub fn simultaneous(&self, k: usize, tails: Tails) -> Result<Interval, BootstrapError> {
        let c = self.change(k)?;
        if c.se == 0.0 {
            return self.draws.t_interval(c, 0.0, 0.0, tails);
        }
        if c.t.len() != self.draws.cfg.resamples as usize {
            // A resample without a t* (0/0) leaves this series out of the joint draws.
            return Err(BootstrapError::TooFewFinite(c.t.len() as u32));
        }
        let lo_t = quantile_at(&self.tmin, tails.upper);
        let hi_t = quantile_at(&self.tmax, 1.0 - tails.lower);
        match (lo_t, hi_t) {
            (Some(lo), Some(hi)) => self.draws.t_interval(c, lo, hi, tails),
            _ => Err(BootstrapError::TooFewFinite(self.draws.cfg.resamples)),
        }
    }

    /// The side on which series `k`'s change may lie far from its estimate: the side of the
    /// skew of its per-condition residuals `d − θ̂ n` (a few conditions with large changes of one
    /// sign skew them that way); `None` without spread.
    pub fn long_side(&self, k: usize) -> Option<Side> {
        let c = self.change(k).ok()?;
        (c.skew.is_finite() && c.skew != 0.0).then_some(if c.skew < 0.0 {
            Side::Lower
        } else {
            Side::Upper
        })
    }

    /// The sample skewness of series `k`'s per-condition residuals `d − θ̂ n`.
    pub fn residual_skewness(&self, k: usize) -> Option<f64> {
        self.change(k)
            .ok()
            .map(|c| c.skew)
            .filter(|s| s.is_finite())
    }

    fn change(&self, k: usize) -> Result<&Change, BootstrapError> {
        match self.changes.get(k) {
            Some(Ok(c)) => Ok(c),
            Some(Err(e)) => Err(e.clone()),
            None => Err(BootstrapError::Empty),
        }
    }
}

/// The `q` quantile of sorted values (at least two).
fn quantile_at(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.len() < 2 {
        return None;
    }
    quantile_sorted(sorted, q)
}

/// The studentized interval of `mean(a) − mean(b)` with rows grouped by `group_ids` (the
/// one-series form of [`GroupDraws::mean_changes_studentized`]).
pub fn bootstrap_mean_difference_studentized<G: Eq + std::hash::Hash>(
    a: &[f64],
    b: &[f64],
    group_ids: &[G],
    cfg: &crate::BootstrapConfig,
) -> Result<Interval, BootstrapError> {
    let draws = GroupDraws::new(group_ids, cfg)?;
    draws
        .mean_changes_studentized(&[a], b)
        .each
        .into_iter()
        .next()
        .unwrap_or(Err(BootstrapError::Empty))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::BootstrapConfig;

    fn cfg() -> BootstrapConfig {
        BootstrapConfig {
            resamples: 500,
            ..BootstrapConfig::default()
        }
    }

    #[test]
    fn a_series_that_never_changes_has_the_point_interval() {
        let a = [1.0, 2.0, 3.0, 4.0];
        let ids = [0, 0, 1, 1];
        let i = bootstrap_mean_difference_studentized(&a, &a, &ids, &cfg()).unwrap();
        assert_eq!((i.estimate, i.lo, i.hi), (0.0, 0.0, 0.0));
    }

    #[test]
    fn the_interval_holds_the_estimate_and_is_skewed_towards_rare_large_changes() {
        // 20 conditions of 3 rows: 17 unchanged, 3 much faster.
        let mut a = Vec::new();
        let mut b = Vec::new();
        let mut ids = Vec::new();
        for g in 0..20u32 {
            for r in 0..3 {
                let base = 100.0 + f64::from(g) + f64::from(r);
                b.push(base);
                a.push(if g < 3 {
                    base - 60.0 - f64::from(g * 7)
                } else {
                    base + 0.5 * f64::from(r) - 0.5
                });
                ids.push(g);
            }
        }
        let i = bootstrap_mean_difference_studentized(&a, &b, &ids, &cfg()).unwrap();
        assert!(i.lo < i.estimate && i.estimate < i.hi, "{i:?}");
        // The long side is the side of the rare large savings.
        assert!(i.estimate - i.lo > i.hi - i.estimate, "{i:?}");
    }

    #[test]
    fn simultaneous_intervals_contain_the_individual_ones() {
        let ids: Vec<u32> = (0..30).flat_map(|g| [g, g, g]).collect();
        let b: Vec<f64> = (0..90).map(|i| 100.0 + f64::from(i % 7) * 3.0).collect();
        let a1: Vec<f64> = b
            .iter()
            .enumerate()
            .map(|(i, x)| x - (i % 5) as f64)
            .collect();
        let a2: Vec<f64> = b
            .iter()
            .enumerate()
            .map(|(i, x)| x - (i % 11) as f64 * 2.0)
            .collect();
        let draws = GroupDraws::new(&ids, &cfg()).unwrap();
        let out = draws.mean_changes_studentized(&[&a1, &a2, &b], &b);
        for (e, s) in out.each.iter().zip(&out.simultaneous) {
            let (e, s) = (e.as_ref().unwrap(), s.as_ref().unwrap());
            assert!(s.lo <= e.lo + 1e-12 && e.hi <= s.hi + 1e-12, "{e:?} {s:?}");
            assert_eq!(e.estimate, s.estimate);
        }
        // The reference against itself: the point 0.
        let z = out.simultaneous[2].as_ref().unwrap();
        assert_eq!((z.lo, z.hi), (0.0, 0.0));
    }

    #[test]
    fn tails_move_the_ends_they_name() {
        assert_eq!(selection_adjusted_level(0.95), 0.975);
        let t = Tails::unequal(0.95, Side::Lower, 0.25);
        assert!((t.lower - 0.0125).abs() < 1e-12 && (t.upper - 0.0375).abs() < 1e-12);
        assert!((t.level() - 0.95).abs() < 1e-12);
        // 30 conditions, a few with large savings: skewed towards the lower side.
        let ids: Vec<u32> = (0..30).flat_map(|g| [g, g, g]).collect();
        let b: Vec<f64> = (0..90).map(|i| 100.0 + f64::from(i % 7) * 3.0).collect();
        let a: Vec<f64> = b
            .iter()
            .zip(&ids)
            .map(|(x, g)| {
                if *g < 4 {
                    x - 40.0 - f64::from(*g) * 9.0
                } else {
                    x + 0.3 * f64::from(g % 3)
                }
            })
            .collect();
        let c: Vec<f64> = b.iter().map(|x| x - 1.0).collect();
        let draws = GroupDraws::new(&ids, &cfg()).unwrap();
        let s = draws.studentized(&[&a, &c], &b);
        assert_eq!(s.long_side(0), Some(Side::Lower));
        let equal = s.simultaneous(0, Tails::equal(0.95)).unwrap();
        let wider = s
            .simultaneous(0, Tails::equal(selection_adjusted_level(0.95)))
            .unwrap();
        assert!(
            wider.lo < equal.lo && equal.hi < wider.hi,
            "{equal:?} {wider:?}"
        );
        assert_eq!(wider.level, 0.975);
        let skewed = s
            .simultaneous(0, Tails::unequal(0.95, Side::Lower, 0.25))
            .unwrap();
        assert!(
            skewed.lo < equal.lo && skewed.hi < equal.hi,
            "{equal:?} {skewed:?}"
        );
        // The equal-tailed 95 % interval is mean_changes_studentized's, bit for bit.
        let old = draws.mean_changes_studentized(&[&a, &c], &b);
        assert_eq!(old.simultaneous[0].as_ref().unwrap(), &equal);
        assert_eq!(
            old.each[1].as_ref().unwrap(),
            &s.each(1, Tails::equal(0.95)).unwrap()
        );
    }

    #[test]
    fn wrong_lengths_are_an_error() {
        let draws = GroupDraws::new(&[0, 1, 2], &cfg()).unwrap();
        let out = draws.mean_changes_studentized(&[&[1.0, 2.0]], &[1.0, 2.0, 3.0]);
        assert!(matches!(out.each[0], Err(BootstrapError::Length { .. })));
    }
}
