//! # sy-stats: how sure a calibration number is
//!
//! Every headline number of a calibration (a variant's mean or 90th-percentile selected TTFT, its
//! difference versus Stage, a margin, a fitted coefficient) is computed from probes that are
//! *not* independent: the repeats of one workload condition share its configuration (prompt
//! length, cached fraction, background shape), so the rule decides alike in them and their TTFTs
//! move together, and the split assigns whole conditions. This crate gives each number a
//! **grouped (cluster) bootstrap** interval: a resample draws whole conditions with replacement
//! (as many as there are), keeps every row of each drawn condition, and recomputes the statistic
//! (default 95 %, 2,000 resamples).
//!
//! * [`bootstrap`], [`bootstrap_paired`], [`bootstrap_rows`], [`GroupDraws::intervals`]: the
//!   percentile interval of the resampled statistic (means, quantiles, quantile changes);
//! * [`GroupDraws::mean_changes_studentized`]: the studentized (bootstrap-t) interval of a change
//!   of means, on its own and simultaneous over several compared series (the headline change and
//!   the regret; see its module);
//! * [`binomial`]: Wilson and Clopper–Pearson intervals of a proportion; [`student`]: Student's t
//!   interval of a mean over a few independent units.
//!
//! Resampling is deterministic: a seed and the group order (first appearance) fix every draw, with
//! this crate's own SplitMix64 generator, so an interval does not move when a dependency's random
//! number generator changes.
//!
//! Coverage is measured, not assumed: `benches/coverage_study.rs` (`scripts/coverage-study.sh`)
//! generates calibration studies of known truth and counts how often each interval covers it
//! (docs/methodology.md, docs/benchmarks.md); `tests/coverage.rs` checks that resampling
//! conditions, not rows, is what keeps the interval near its level on clustered data.

use std::collections::HashMap;
use std::hash::Hash;

use serde::{Deserialize, Serialize};

/// Resamples drawn by default (the issue asks for at least 1,000).
pub const DEFAULT_RESAMPLES: u32 = 2000;
/// Default confidence level of an interval.
pub const DEFAULT_LEVEL: f64 = 0.95;
/// Default seed of the resampling.
pub const DEFAULT_SEED: u64 = 0x7379_2d62_6f6f_7473; // "sy-boots"

/// How to resample.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BootstrapConfig {
    /// Number of resamples.
    pub resamples: u32,
    /// Confidence level of the interval, in (0, 1).
    pub level: f64,
    /// Seed of the resampling.
    pub seed: u64,
}

impl Default for BootstrapConfig {
    fn default() -> Self {
        BootstrapConfig {
            resamples: DEFAULT_RESAMPLES,
            level: DEFAULT_LEVEL,
            seed: DEFAULT_SEED,
        }
    }
}

impl BootstrapConfig {
    /// The same settings with another seed (e.g. one per statistic, so that intervals are not
    /// correlated through identical draws — or the same seed on purpose, for paired comparisons).
    pub fn with_seed(self, seed: u64) -> Self {
        BootstrapConfig { seed, ..self }
    }
}

/// A point estimate with its bootstrap interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    /// The statistic on the data as observed.
    pub estimate: f64,
    /// Lower end of the percentile interval.
    pub lo: f64,
    /// Upper end of the percentile interval.
    pub hi: f64,
    /// Confidence level.
    pub level: f64,
    /// Resamples whose statistic was finite (the interval is computed from these).
    pub resamples: u32,
    /// Groups (conditions) resampled.
    pub groups: u32,
}

impl Interval {
    /// Whether `x` lies inside the interval (ends included).
    pub fn contains(&self, x: f64) -> bool {
        self.lo <= x && x <= self.hi
    }

    /// Whether the interval lies entirely on one side of zero.
    pub fn excludes_zero(&self) -> bool {
        self.lo > 0.0 || self.hi < 0.0
    }

    /// Half the width of the interval.
    pub fn half_width(&self) -> f64 {
        0.5 * (self.hi - self.lo)
    }
}

/// Why no interval can be computed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BootstrapError {
    #[error("no rows to resample")]
    Empty,
    #[error("{values} values but {groups} group ids")]
    Length { values: usize, groups: usize },
    #[error("the level {0} is not strictly between 0 and 1")]
    Level(f64),
    #[error("0 resamples asked for")]
    NoResamples,
    #[error("the statistic is not finite on the observed data")]
    NotFinite,
    #[error("fewer than 2 of {0} resamples gave a finite statistic")]
    TooFewFinite(u32),
    #[error("an end of the studentized interval is unbounded (resamples without spread)")]
    Unbounded,
}

/// Rows grouped by condition: the unit a resample draws.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Groups {
    members: Vec<Vec<usize>>,
    rows: usize,
}

impl Groups {
    /// Groups rows by their id (groups in order of first appearance).
    pub fn from_ids<G: Eq + Hash>(ids: &[G]) -> Groups {
        let mut index: HashMap<&G, usize> = HashMap::new();
        let mut members: Vec<Vec<usize>> = Vec::new();
        for (row, id) in ids.iter().enumerate() {
            let next = members.len();
            let g = *index.entry(id).or_insert(next);
            if g == next {
                members.push(Vec::new());
            }
            members[g].push(row);
        }
        Groups {
            members,
            rows: ids.len(),
        }
    }

    /// The group of every row.
    fn group_of_rows(&self) -> Vec<usize> {
        let mut of = vec![0; self.rows];
        for (g, members) in self.members.iter().enumerate() {
            for &row in members {
                of[row] = g;
            }
        }
        of
    }

    /// Number of groups.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether there is no group.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Number of rows.
    pub fn rows(&self) -> usize {
        self.rows
    }
}

/// SplitMix64: a small, well-mixed, seedable generator (Steele, Lea and Flood 2014).
#[derive(Debug, Clone)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (multiply-shift; the bias is below 2⁻³² for any n this crate sees).
    fn below(&mut self, n: usize) -> usize {
        ((u128::from(self.next()) * n as u128) >> 64) as usize
    }
}

pub mod binomial;
mod ranked;
pub mod sequential;
pub mod sessions;
mod shared_draws;
pub mod student;
mod studentized;
use ranked::Ranked;
pub use shared_draws::{GroupDraws, SeriesIntervals, SeriesResamples};
pub use studentized::{
    Side, StudentizedChanges, StudentizedDraws, Tails, bootstrap_mean_difference_studentized,
    selection_adjusted_level,
};

/// How many groups have a row strictly above the `q`-quantile of `values` (rows grouped by
/// `group_ids`): the conditions a bootstrap interval of that quantile rests on. With few of them
/// (e.g. the 90th percentile over 30 conditions: about 3), the interval is indicative only
/// (the coverage study measured how it under-covers).
pub fn tail_groups<G: Eq + Hash>(values: &[f64], group_ids: &[G], q: f64) -> usize {
    let cut = quantile(values, q);
    let mut seen: std::collections::HashSet<&G> = std::collections::HashSet::new();
    for (v, g) in values.iter().zip(group_ids) {
        if *v > cut {
            seen.insert(g);
        }
    }
    seen.len()
}

/// The statistic this crate bootstraps: the runtime crate's quantile
/// ([`sy_selector::quantile_unsorted`]) of a copy of `values`, NaN when empty. Callers outside
/// this crate use `sy_selector::quantile_sorted` / `quantile_unsorted` directly.
pub(crate) fn quantile(values: &[f64], q: f64) -> f64 {
    // Selection, not a sort: the bootstrap calls this once per resample.
    let mut v = values.to_vec();
    sy_selector::quantile_unsorted(&mut v, q).unwrap_or(f64::NAN)
}

/// The arithmetic mean (NaN when empty).
pub fn mean(values: &[f64]) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.iter().sum::<f64>() / values.len() as f64
}

fn check(cfg: &BootstrapConfig, groups: &Groups) -> Result<(), BootstrapError> {
    check_counts(cfg, groups.len())
}

/// [`check`] for `groups` groups given by their number.
fn check_counts(cfg: &BootstrapConfig, groups: usize) -> Result<(), BootstrapError> {
    if groups == 0 {
        return Err(BootstrapError::Empty);
    }
    if !(cfg.level > 0.0 && cfg.level < 1.0) {
        return Err(BootstrapError::Level(cfg.level));
    }
    if cfg.resamples == 0 {
        return Err(BootstrapError::NoResamples);
    }
    Ok(())
}

/// The general grouped bootstrap: `stat` receives row indices (all rows for the estimate; for each
/// resample, the rows of `groups.len()` groups drawn with replacement, a drawn group's rows in
/// order, repeated when it is drawn again).
pub fn bootstrap_rows<F>(
    groups: &Groups,
    cfg: &BootstrapConfig,
    mut stat: F,
) -> Result<Interval, BootstrapError>
where
    F: FnMut(&[usize]) -> f64,
{
    check(cfg, groups)?;
    let all: Vec<usize> = (0..groups.rows).collect();
    let estimate = stat(&all);
    let mut rows = Vec::with_capacity(groups.rows);
    bootstrap_groups(groups, cfg, estimate, |draw| {
        rows.clear();
        for &g in draw {
            push_members(&mut rows, &groups.members[g]);
        }
        stat(&rows)
    })
}

/// Appends a drawn group's rows. A group of one row (a condition's sums, in the fit's
/// coefficient intervals) is pushed without a copy call: for 60,000 such groups per resample the
/// call was a fifth of the fit's time at 10 M records.
#[inline(always)]
fn push_members(rows: &mut Vec<usize>, members: &[usize]) {
    match members {
        [one] => rows.push(*one),
        many => rows.extend_from_slice(many),
    }
}

/// The one resampling loop: `stat(draw)` gets the indices of the groups drawn (with
/// repetition) for one resample; the interval is the percentile interval of its finite values.
fn bootstrap_groups<F>(
    groups: &Groups,
    cfg: &BootstrapConfig,
    estimate: f64,
    mut stat: F,
) -> Result<Interval, BootstrapError>
where
    F: FnMut(&[usize]) -> f64,
{
    if !estimate.is_finite() {
        return Err(BootstrapError::NotFinite);
    }
    let mut rng = SplitMix64(cfg.seed);
    let mut draw = Vec::with_capacity(groups.len());
    let mut stats = Vec::with_capacity(cfg.resamples as usize);
    for _ in 0..cfg.resamples {
        draw.clear();
        for _ in 0..groups.len() {
            draw.push(rng.below(groups.len()));
        }
        stats.push(stat(&draw));
    }
    percentile_interval(estimate, stats, cfg, groups.len())
}

/// The percentile interval of the finite resampled `stats` around `estimate` (which must be
/// finite); at least 2 finite resamples.
fn percentile_interval(
    estimate: f64,
    mut stats: Vec<f64>,
    cfg: &BootstrapConfig,
    groups: usize,
) -> Result<Interval, BootstrapError> {
    if !estimate.is_finite() {
        return Err(BootstrapError::NotFinite);
    }
    stats.retain(|s| s.is_finite());
    if stats.len() < 2 {
        return Err(BootstrapError::TooFewFinite(cfg.resamples));
    }
    stats.sort_by(f64::total_cmp);
    let tail = 0.5 * (1.0 - cfg.level);
    let lo = sy_selector::quantile_sorted(&stats, tail).unwrap_or(f64::NAN);
    let hi = sy_selector::quantile_sorted(&stats, 1.0 - tail).unwrap_or(f64::NAN);
    Ok(Interval {
        estimate,
        lo,
        hi,
        level: cfg.level,
        resamples: stats.len() as u32,
        groups: groups as u32,
    })
}

/// [`bootstrap_rows_multi`] over `groups` groups of one row each, for a statistic that needs
/// only how often each group was drawn (a weighted sum, e.g. the sufficient statistics of a
/// regression): `stat(counts, b)` gets the draw counts of `b ≤ block` consecutive resamples,
/// group-major (`counts[g * b + j]`: how often resample `j` drew group `g`), and returns one
/// `k`-vector per resample, in order. Evaluating a block in one pass over the groups reads a
/// large per-group table once per block instead of once per resample. The draws, and so the
/// intervals, are those of [`bootstrap_rows_multi`] with the same configuration; the estimate
/// is `stat` with every count 1.
pub fn bootstrap_counts_multi<F>(
    groups: usize,
    cfg: &BootstrapConfig,
    k: usize,
    block: usize,
    mut stat: F,
) -> Result<Vec<Interval>, BootstrapError>
where
    F: FnMut(&[u32], usize) -> Vec<Vec<f64>>,
{
    check_counts(cfg, groups)?;
    let finite = |s: &[f64]| s.len() == k && s.iter().all(|v| v.is_finite());
    let estimate = stat(&vec![1; groups], 1)
        .into_iter()
        .next()
        .unwrap_or_default();
    if !finite(&estimate) {
        return Err(BootstrapError::NotFinite);
    }
    let block = block.max(1);
    let mut rng = SplitMix64(cfg.seed);
    let mut draws = CountBlock::new(groups, block);
    let mut stats: Vec<Vec<f64>> = vec![Vec::with_capacity(cfg.resamples as usize); k];
    let mut left = cfg.resamples as usize;
    while left > 0 {
        let b = block.min(left);
        left -= b;
        let counts = draws.draw(&mut rng, b);
        for s in stat(counts, b).into_iter().filter(|s| finite(s)) {
            for (acc, v) in stats.iter_mut().zip(s) {
                acc.push(v);
            }
        }
    }
    estimate
        .into_iter()
        .zip(stats)
        .map(|(estimate, st)| percentile_interval(estimate, st, cfg, groups))
        .collect()
}

/// The draw counts of a block of resamples, group-major (see [`bootstrap_counts_multi`]).
///
/// Each resample is drawn into a row of its own (`resample-major`, one `u32` a group: 240 kB at
/// 60,000 groups, so its random increments stay in a core's L2 cache), and the block is then
/// transposed to group-major a tile at a time. Incrementing the group-major block directly
/// touches a random cache line of the whole block (3.8 MB at 60,000 groups × 16) per draw.
struct CountBlock {
    groups: usize,
    rows: Vec<u32>,
    counts: Vec<u32>,
}

/// Groups transposed at a time (a tile of `TILE × block` counts stays in L1).
const TILE: usize = 256;

impl CountBlock {
    fn new(groups: usize, block: usize) -> CountBlock {
        CountBlock {
            groups,
            rows: vec![0; groups * block],
            counts: vec![0; groups * block],
        }
    }

    /// The next `b` resamples' counts (`counts[g * b + j]`), drawn from `rng` resample after
    /// resample, each one `groups` uniform draws.
    fn draw(&mut self, rng: &mut SplitMix64, b: usize) -> &[u32] {
        let groups = self.groups;
        let rows = &mut self.rows[..groups * b];
        rows.fill(0);
        for row in rows.chunks_exact_mut(groups) {
            for _ in 0..groups {
                if let Some(c) = row.get_mut(rng.below(groups)) {
                    *c += 1;
                }
            }
        }
        let counts = &mut self.counts[..groups * b];
        for start in (0..groups).step_by(TILE) {
            let end = (start + TILE).min(groups);
            for (j, row) in rows.chunks_exact(groups).enumerate() {
                for (g, &c) in row[start..end].iter().enumerate() {
                    counts[(start + g) * b + j] = c;
                }
            }
        }
        counts
    }
}

/// Like [`bootstrap_rows`] for a statistic with `k` components computed together (e.g. the
/// coefficients of one regression): one interval per component, all from the same resamples.
pub fn bootstrap_rows_multi<F>(
    groups: &Groups,
    cfg: &BootstrapConfig,
    k: usize,
    mut stat: F,
) -> Result<Vec<Interval>, BootstrapError>
where
    F: FnMut(&[usize]) -> Vec<f64>,
{
    check(cfg, groups)?;
    let all: Vec<usize> = (0..groups.rows).collect();
    let estimate = stat(&all);
    if estimate.len() != k || estimate.iter().any(|v| !v.is_finite()) {
        return Err(BootstrapError::NotFinite);
    }
    let mut rng = SplitMix64(cfg.seed);
    let mut rows = Vec::with_capacity(groups.rows);
    let mut stats: Vec<Vec<f64>> = vec![Vec::with_capacity(cfg.resamples as usize); k];
    for _ in 0..cfg.resamples {
        rows.clear();
        for _ in 0..groups.len() {
            push_members(&mut rows, &groups.members[rng.below(groups.len())]);
        }
        let s = stat(&rows);
        if s.len() == k && s.iter().all(|v| v.is_finite()) {
            for (acc, v) in stats.iter_mut().zip(s) {
                acc.push(v);
            }
        }
    }
    estimate
        .into_iter()
        .zip(stats)
        .map(|(estimate, st)| percentile_interval(estimate, st, cfg, groups.len()))
        .collect()
}

/// Refuses values (`a`, and `b` when given) that do not have one group id each.
fn check_lengths(a: &[f64], b: Option<&[f64]>, groups: usize) -> Result<(), BootstrapError> {
    if a.len() != groups || b.is_some_and(|b| b.len() != groups) {
        return Err(BootstrapError::Length {
            values: a.len().max(b.map_or(0, <[f64]>::len)),
            groups,
        });
    }
    Ok(())
}

/// Grouped bootstrap of `stat` over `values`, rows grouped by `group_ids` (one id per value).
pub fn bootstrap<G, F>(
    values: &[f64],
    group_ids: &[G],
    cfg: &BootstrapConfig,
    stat: F,
) -> Result<Interval, BootstrapError>
where
    G: Eq + Hash,
    F: Fn(&[f64]) -> f64,
{
    check_lengths(values, None, group_ids.len())?;
    let groups = Groups::from_ids(group_ids);
    let mut buf = Vec::with_capacity(values.len());
    bootstrap_rows(&groups, cfg, |rows| {
        buf.clear();
        buf.extend(rows.iter().map(|&i| values[i]));
        stat(&buf)
    })
}

/// Grouped bootstrap of a paired statistic of two aligned arrays (row i of `a` and of `b` belong
/// together and to `group_ids[i]`); both are resampled with the same draws.
pub fn bootstrap_paired<G, F>(
    a: &[f64],
    b: &[f64],
    group_ids: &[G],
    cfg: &BootstrapConfig,
    stat: F,
) -> Result<Interval, BootstrapError>
where
    G: Eq + Hash,
    F: Fn(&[f64], &[f64]) -> f64,
{
    check_lengths(a, Some(b), group_ids.len())?;
    let groups = Groups::from_ids(group_ids);
    let (mut ba, mut bb) = (Vec::with_capacity(a.len()), Vec::with_capacity(b.len()));
    bootstrap_rows(&groups, cfg, |rows| {
        ba.clear();
        bb.clear();
        ba.extend(rows.iter().map(|&i| a[i]));
        bb.extend(rows.iter().map(|&i| b[i]));
        stat(&ba, &bb)
    })
}

/// [`bootstrap`] of the mean, from per-group sums: the same resamples (same draws), each mean
/// summed over the drawn groups' totals instead of their rows (O(groups) per resample; equal to
/// the row-by-row mean up to the order of the additions).
pub fn bootstrap_mean<G: Eq + Hash>(
    values: &[f64],
    group_ids: &[G],
    cfg: &BootstrapConfig,
) -> Result<Interval, BootstrapError> {
    bootstrap_mean_difference(values, None, group_ids, cfg)
}

/// [`bootstrap_paired`] of `mean(a) − mean(b)` from per-group sums (see [`bootstrap_mean`]);
/// `b = None` bootstraps `mean(a)`.
pub fn bootstrap_mean_difference<G: Eq + Hash>(
    a: &[f64],
    b: Option<&[f64]>,
    group_ids: &[G],
    cfg: &BootstrapConfig,
) -> Result<Interval, BootstrapError> {
    check_lengths(a, b, group_ids.len())?;
    let groups = Groups::from_ids(group_ids);
    check(cfg, &groups)?;
    let sum = |v: &[f64], m: &[usize]| m.iter().map(|&i| v[i]).sum::<f64>();
    let totals: Vec<(f64, f64, usize)> = groups
        .members
        .iter()
        .map(|m| (sum(a, m), b.map_or(0.0, |b| sum(b, m)), m.len()))
        .collect();
    let estimate = mean(a) - b.map_or(0.0, mean);
    bootstrap_groups(&groups, cfg, estimate, |draw| {
        let (mut sa, mut sb, mut n) = (0.0, 0.0, 0usize);
        for &g in draw {
            let (x, y, c) = totals[g];
            sa += x;
            sb += y;
            n += c;
        }
        if n == 0 {
            return f64::NAN;
        }
        sa / n as f64 - if b.is_some() { sb / n as f64 } else { 0.0 }
    })
}

/// [`bootstrap`] of the `q`-quantile without materialising the resamples: the values are sorted
/// once, and in every resample the needed order statistics are found by a scan with each value
/// weighted by how often its group was drawn: from a pivot at the observed quantile when groups
/// hold several rows, else from the nearer end (`ranked`). The same resamples and the same
/// order statistics as sorting each resample, so the same interval.
pub fn bootstrap_quantile<G: Eq + Hash>(
    values: &[f64],
    group_ids: &[G],
    q: f64,
    cfg: &BootstrapConfig,
) -> Result<Interval, BootstrapError> {
    bootstrap_quantile_difference(values, None, group_ids, q, cfg)
}

/// [`bootstrap_paired`] of `quantile(a, q) − quantile(b, q)` by the weighted scan of
/// [`bootstrap_quantile`]; `b = None` bootstraps `quantile(a, q)`.
pub fn bootstrap_quantile_difference<G: Eq + Hash>(
    a: &[f64],
    b: Option<&[f64]>,
    group_ids: &[G],
    q: f64,
    cfg: &BootstrapConfig,
) -> Result<Interval, BootstrapError> {
    check_lengths(a, b, group_ids.len())?;
    let groups = Groups::from_ids(group_ids);
    check(cfg, &groups)?;
    let group_of = groups.group_of_rows();
    let (sa, sb) = (
        Ranked::new(a, &group_of, groups.len(), q),
        b.map(|b| Ranked::new(b, &group_of, groups.len(), q)),
    );
    let estimate = quantile(a, q) - b.map_or(0.0, |b| quantile(b, q));
    let mut weight = vec![0usize; groups.len()];
    bootstrap_groups(&groups, cfg, estimate, |draw| {
        weight.iter_mut().for_each(|w| *w = 0);
        let mut n = 0;
        for &g in draw {
            weight[g] += 1;
            n += groups.members[g].len();
        }
        let qa = sa.quantile(&weight, n, q);
        qa - sb.as_ref().map_or(0.0, |sb| sb.quantile(&weight, n, q))
    })
}

/// Difference of means `mean(a) − mean(b)` (the paired statistic of a "change versus" interval).
pub fn mean_difference(a: &[f64], b: &[f64]) -> f64 {
    mean(a) - mean(b)
}

/// Difference of `q`-quantiles `quantile(a) − quantile(b)`.
pub fn quantile_difference(a: &[f64], b: &[f64], q: f64) -> f64 {
    quantile(a, q) - quantile(b, q)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_keep_first_appearance_order() {
        let g = Groups::from_ids(&["b", "a", "b", "c", "a"]);
        assert_eq!(g.len(), 3);
        assert_eq!(g.rows(), 5);
        assert_eq!(g.members, vec![vec![0, 2], vec![1, 4], vec![3]]);
    }

    #[test]
    fn resampling_is_deterministic_and_seed_dependent() {
        let v: Vec<f64> = (0..60)
            .map(|i| f64::from(i % 7) * 3.0 + f64::from(i))
            .collect();
        let ids: Vec<u32> = (0..60).map(|i| i / 3).collect();
        let cfg = BootstrapConfig::default();
        let a = bootstrap(&v, &ids, &cfg, mean).unwrap();
        let b = bootstrap(&v, &ids, &cfg, mean).unwrap();
        assert_eq!(a, b);
        let c = bootstrap(&v, &ids, &cfg.with_seed(1), mean).unwrap();
        assert_ne!(a.lo, c.lo);
        assert!(a.lo < a.estimate && a.estimate < a.hi);
        assert_eq!(a.groups, 20);
        assert_eq!(a.resamples, DEFAULT_RESAMPLES);
    }

    #[test]
    fn a_constant_has_a_zero_width_interval() {
        let v = vec![5.0; 12];
        let ids: Vec<u32> = (0..12).map(|i| i / 2).collect();
        let i = bootstrap(&v, &ids, &BootstrapConfig::default(), mean).unwrap();
        assert_eq!((i.lo, i.estimate, i.hi), (5.0, 5.0, 5.0));
        assert!(i.excludes_zero());
    }

    #[test]
    fn whole_groups_are_resampled() {
        // Two groups, each constant: every resample mean is 0, 0.5 or 1 — never anything else,
        // which it would be if rows were resampled individually.
        let v = [0.0, 0.0, 0.0, 1.0, 1.0, 1.0];
        let ids = [0, 0, 0, 1, 1, 1];
        let groups = Groups::from_ids(&ids);
        let mut seen = Vec::new();
        bootstrap_rows(&groups, &BootstrapConfig::default(), |rows| {
            let m = rows.iter().map(|&i| v[i]).sum::<f64>() / rows.len() as f64;
            seen.push(m);
            m
        })
        .unwrap();
        assert!(seen.iter().all(|m| [0.0, 0.5, 1.0].contains(m)), "{seen:?}");
    }

    #[test]
    fn bad_input_is_an_error() {
        let cfg = BootstrapConfig::default();
        assert_eq!(
            bootstrap(&[1.0], &[0, 1], &cfg, mean),
            Err(BootstrapError::Length {
                values: 1,
                groups: 2
            })
        );
        assert_eq!(
            bootstrap::<u32, _>(&[], &[], &cfg, mean),
            Err(BootstrapError::Empty)
        );
        let bad = BootstrapConfig { level: 1.0, ..cfg };
        assert_eq!(
            bootstrap(&[1.0], &[0], &bad, mean),
            Err(BootstrapError::Level(1.0))
        );
        assert_eq!(
            bootstrap(&[f64::NAN], &[0], &cfg, mean),
            Err(BootstrapError::NotFinite)
        );
    }

    #[test]
    fn multi_component_intervals_match_single_ones() {
        let v: Vec<f64> = (0..50)
            .map(|i| f64::from(i % 9) + f64::from(i) * 0.5)
            .collect();
        let ids: Vec<u32> = (0..50).map(|i| i / 5).collect();
        let groups = Groups::from_ids(&ids);
        let cfg = BootstrapConfig::default();
        let m = |rows: &[usize]| rows.iter().map(|&i| v[i]).sum::<f64>() / rows.len() as f64;
        let single = bootstrap_rows(&groups, &cfg, m).unwrap();
        let multi = bootstrap_rows_multi(&groups, &cfg, 2, |r| vec![m(r), 2.0 * m(r)]).unwrap();
        assert_eq!(multi[0], single);
        assert!((multi[1].hi - 2.0 * single.hi).abs() < 1e-9);
    }

    #[test]
    fn quantiles_interpolate_linearly() {
        let s = [1.0, 2.0, 3.0, 4.0, 5.0];
        assert_eq!(sy_selector::quantile_sorted(&s, 0.9), Some(4.6));
        assert_eq!(sy_selector::quantile_sorted(&s, 0.0), Some(1.0));
        assert_eq!(sy_selector::quantile_sorted(&[], 0.5), None);
        assert_eq!(quantile(&[3.0, 1.0, 2.0], 0.5), 2.0);
        assert!(mean(&[]).is_nan());
    }

    #[test]
    fn paired_difference_uses_the_same_draws() {
        // b = a + 2 row by row: every resampled difference is exactly −2.
        let a: Vec<f64> = (0..40).map(|i| f64::from(i * i % 13)).collect();
        let b: Vec<f64> = a.iter().map(|x| x + 2.0).collect();
        let ids: Vec<u32> = (0..40).map(|i| i / 4).collect();
        let i =
            bootstrap_paired(&a, &b, &ids, &BootstrapConfig::default(), mean_difference).unwrap();
        assert!((i.lo + 2.0).abs() < 1e-12 && (i.hi + 2.0).abs() < 1e-12);
    }
}
