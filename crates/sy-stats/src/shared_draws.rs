//! Several series on the same rows, bootstrapped from the same resamples.
//!
//! `sy-select` bootstraps each variant's mean and 90th-percentile selected TTFT and their changes
//! versus Stage: 4 intervals × 5 variants, each from the same seed, so the same draws. Done one
//! interval at a time, the draws are made 20 times and Stage's resampled statistics 5 times.
//! [`GroupDraws`] makes the draws once; [`GroupDraws::series`] resamples one series' mean and
//! quantile once; [`GroupDraws::intervals`] pairs a series with a reference. The numbers are those
//! of [`crate::bootstrap_mean`], [`crate::bootstrap_quantile`], [`crate::bootstrap_mean_difference`]
//! and [`crate::bootstrap_quantile_difference`] with the same configuration, bit for bit (the same
//! draws, sums in draw order and the same weighted scan; `tests` below checks it).

use std::hash::Hash;

use crate::{
    BootstrapConfig, BootstrapError, Groups, Interval, Ranked, SplitMix64, check, check_lengths,
    mean, percentile_interval, quantile,
};

/// The groups drawn in every resample (see the module docs).
#[derive(Debug, Clone)]
pub struct GroupDraws {
    pub(crate) groups: Groups,
    group_of: Vec<usize>,
    /// `resamples × groups` group indices, resample after resample.
    pub(crate) draws: Vec<u32>,
    pub(crate) cfg: BootstrapConfig,
}

/// One series' mean and quantile on the observed rows and in every resample.
#[derive(Debug, Clone)]
pub struct SeriesResamples {
    mean: f64,
    quantile: f64,
    means: Vec<f64>,
    quantiles: Vec<f64>,
}

/// The four intervals of a series against a reference.
#[derive(Debug, Clone)]
pub struct SeriesIntervals {
    pub mean: Result<Interval, BootstrapError>,
    pub quantile: Result<Interval, BootstrapError>,
    /// Of `mean(series) − mean(reference)`.
    pub mean_change: Result<Interval, BootstrapError>,
    /// Of `quantile(series) − quantile(reference)`.
    pub quantile_change: Result<Interval, BootstrapError>,
}

impl SeriesIntervals {
    /// The same error for all four (no draws, or a series that cannot be resampled).
    pub fn all(e: BootstrapError) -> SeriesIntervals {
        SeriesIntervals {
            mean: Err(e.clone()),
            quantile: Err(e.clone()),
            mean_change: Err(e.clone()),
            quantile_change: Err(e),
        }
    }
}

impl GroupDraws {
    /// The draws of `cfg` over the groups of `group_ids` (one id per row).
    pub fn new<G: Eq + Hash>(
        group_ids: &[G],
        cfg: &BootstrapConfig,
    ) -> Result<GroupDraws, BootstrapError> {
        let groups = Groups::from_ids(group_ids);
        check(cfg, &groups)?;
        let g = groups.len();
        let mut rng = SplitMix64(cfg.seed);
        let mut draws = Vec::with_capacity(g * cfg.resamples as usize);
        for _ in 0..cfg.resamples {
            for _ in 0..g {
                draws.push(u32::try_from(rng.below(g)).unwrap_or(u32::MAX));
            }
        }
        Ok(GroupDraws {
            group_of: groups.group_of_rows(),
            groups,
            draws,
            cfg: *cfg,
        })
    }

    /// The mean and the `q`-quantile of `values` (one per row), observed and per resample.
    pub fn series(&self, values: &[f64], q: f64) -> Result<SeriesResamples, BootstrapError> {
        check_lengths(values, None, self.groups.rows())?;
        let totals: Vec<(f64, usize)> = (self.groups.members.iter())
            .map(|m| (m.iter().map(|&i| values[i]).sum::<f64>(), m.len()))
            .collect();
        let ranked = Ranked::new(values, &self.group_of, self.groups.len(), q);
        let resamples = self.cfg.resamples as usize;
        let (mut means, mut quantiles) = (Vec::with_capacity(resamples), Vec::new());
        quantiles.reserve(resamples);
        let mut weight = vec![0usize; self.groups.len()];
        for draw in self.draws.chunks(self.groups.len().max(1)) {
            weight.iter_mut().for_each(|w| *w = 0);
            let (mut sum, mut n) = (0.0, 0usize);
            for &g in draw {
                let (s, c) = totals.get(g as usize).copied().unwrap_or((0.0, 0));
                sum += s;
                n += c;
                if let Some(w) = weight.get_mut(g as usize) {
                    *w += 1;
                }
            }
            means.push(if n == 0 { f64::NAN } else { sum / n as f64 });
            quantiles.push(ranked.quantile(&weight, n, q));
        }
        Ok(SeriesResamples {
            mean: mean(values),
            quantile: quantile(values, q),
            means,
            quantiles,
        })
    }

    /// The intervals of `series` and of its changes from `reference` (both from
    /// [`GroupDraws::series`] of these draws, with the same `q`).
    pub fn intervals(
        &self,
        series: &SeriesResamples,
        reference: &SeriesResamples,
    ) -> SeriesIntervals {
        let interval = |estimate: f64, stats: Vec<f64>| {
            percentile_interval(estimate, stats, &self.cfg, self.groups.len())
        };
        let minus = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x - y).collect();
        let zero = |a: &[f64]| a.iter().map(|x| x - 0.0).collect();
        SeriesIntervals {
            mean: interval(series.mean - 0.0, zero(&series.means)),
            quantile: interval(series.quantile - 0.0, zero(&series.quantiles)),
            mean_change: interval(
                series.mean - reference.mean,
                minus(&series.means, &reference.means),
            ),
            quantile_change: interval(
                series.quantile - reference.quantile,
                minus(&series.quantiles, &reference.quantiles),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        bootstrap_mean, bootstrap_mean_difference, bootstrap_quantile,
        bootstrap_quantile_difference,
    };

    proptest::proptest! {
        /// The shared draws give the intervals of the one-at-a-time bootstraps, bit for bit.
        #[test]
        fn shared_draws_give_the_one_at_a_time_intervals(
            rows in proptest::collection::vec((-1e3f64..1e3, -1e3f64..1e3, 0u8..12), 1..80),
            q in 0.0f64..=1.0,
            seed in 0u64..1000,
        ) {
            let a: Vec<f64> = rows.iter().map(|r| r.0).collect();
            let b: Vec<f64> = rows.iter().map(|r| r.1).collect();
            let ids: Vec<u8> = rows.iter().map(|r| r.2).collect();
            let cfg = BootstrapConfig { resamples: 50, ..BootstrapConfig::default() }.with_seed(seed);
            let draws = GroupDraws::new(&ids, &cfg).unwrap();
            let (sa, sb) = (draws.series(&a, q).unwrap(), draws.series(&b, q).unwrap());
            let got = draws.intervals(&sa, &sb);
            proptest::prop_assert_eq!(got.mean, bootstrap_mean(&a, &ids, &cfg));
            proptest::prop_assert_eq!(got.quantile, bootstrap_quantile(&a, &ids, q, &cfg));
            proptest::prop_assert_eq!(
                got.mean_change,
                bootstrap_mean_difference(&a, Some(&b), &ids, &cfg)
            );
            proptest::prop_assert_eq!(
                got.quantile_change,
                bootstrap_quantile_difference(&a, Some(&b), &ids, q, &cfg)
            );
        }
    }
}
