//! Weighted order statistics of values sorted once: the quantile of a grouped-bootstrap
//! resample without writing the resample out.
//!
//! A resample is a weight per group (how often the group was drawn); its k-th smallest value is
//! the first value, in the sorted order, at which the running weight passes k. [`Ranked`] finds
//! it by a scan. Without a pivot the scan starts at the nearer end (for the 90th percentile,
//! the top tenth of the values). With a [`Pivot`] — the position of the quantile in the
//! observed values, with how many values of each group lie before it — the running weight there
//! is one product over the groups, and the scan starts there: a resample's quantile lies near
//! the observed one, so it covers the bootstrap's spread of the quantile instead of a tenth of
//! the values. Both find the same order statistics, so the same numbers to the bit.

use sy_selector::quantile_by_rank;

/// Values sorted once, each with its group, for weighted order statistics.
pub(crate) struct Ranked {
    values: Vec<f64>,
    /// The group of each value (same order).
    groups: Vec<u32>,
    pivot: Option<Pivot>,
}

/// A position in the sorted values and, per group, how many of its values lie before it.
struct Pivot {
    at: usize,
    before: Vec<u32>,
}

/// Values a weighted scan sums at a time before it looks at them one by one: whole chunks
/// whose weight keeps the running total at or below the rank sought are skipped with one
/// comparison (independent loads and adds rather than a compare and branch per value).
const SCAN_CHUNK: usize = 16;

/// How many values of `chunks` (walked in order) a weighted scan can skip without its running
/// weight passing `rank`, and their weight.
fn skip_chunks<'a>(
    chunks: impl Iterator<Item = &'a [u32]>,
    weight: &[usize],
    rank: usize,
) -> (usize, usize) {
    let (mut skipped, mut seen) = (0, 0);
    for chunk in chunks {
        let w: usize = chunk.iter().map(|&g| weight_of(weight, g)).sum();
        if seen + w > rank {
            break;
        }
        seen += w;
        skipped += chunk.len();
    }
    (skipped, seen)
}

#[inline]
fn weight_of(weight: &[usize], group: u32) -> usize {
    weight.get(group as usize).copied().unwrap_or(0)
}

impl Ranked {
    /// `values` (one per row, `group_of` the row's group) sorted, for the order statistics
    /// around the `q`-quantile. A pivot at the observed quantile is kept when its product over
    /// the `groups` groups is clearly cheaper than the scan from the nearer end it replaces
    /// (groups of several rows each: not for one row a group).
    pub(crate) fn new(values: &[f64], group_of: &[usize], groups: usize, q: f64) -> Ranked {
        let mut ranked = Ranked::without_pivot(values, group_of);
        let at = pivot_position(values.len(), q);
        // The values the scan from the nearer end would read.
        let end_scan = at.min(values.len().saturating_sub(at));
        if groups.saturating_mul(4) < end_scan {
            ranked.set_pivot(at, groups);
        }
        ranked
    }

    fn without_pivot(values: &[f64], group_of: &[usize]) -> Ranked {
        let mut sorted: Vec<(f64, usize)> = values
            .iter()
            .copied()
            .zip(group_of.iter().copied())
            .collect();
        sorted.sort_unstable_by(|x, y| x.0.total_cmp(&y.0));
        Ranked {
            values: sorted.iter().map(|s| s.0).collect(),
            groups: sorted
                .iter()
                .map(|s| u32::try_from(s.1).unwrap_or(u32::MAX))
                .collect(),
            pivot: None,
        }
    }

    /// Keeps a pivot at position `at` (clamped to the values) over `groups` groups.
    fn set_pivot(&mut self, at: usize, groups: usize) {
        let at = at.min(self.values.len());
        let mut before = vec![0u32; groups];
        for &g in &self.groups[..at] {
            if let Some(c) = before.get_mut(g as usize) {
                *c += 1;
            }
        }
        self.pivot = Some(Pivot { at, before });
    }

    /// The `q`-quantile of the multiset where each value appears `weight[its group]` times
    /// (`n` values in all). The two neighbouring order statistics it interpolates between are
    /// found in one scan.
    pub(crate) fn quantile(&self, weight: &[usize], n: usize, q: f64) -> f64 {
        let mut found: Option<(usize, f64, f64)> = None;
        quantile_by_rank(n, q, |k| match found {
            Some((lo, _, next)) if k == lo + 1 => next,
            _ => {
                let (at, next) = self.at_rank(weight, n, k);
                found = Some((k, at, next));
                at
            }
        })
        .unwrap_or(f64::NAN)
    }

    /// The k-th and (k+1)-th smallest (0-based) of the weighted multiset (the latter clamped to
    /// the largest): from the pivot when there is one, else from the nearer end.
    fn at_rank(&self, weight: &[usize], n: usize, k: usize) -> (f64, f64) {
        if let Some(p) = &self.pivot {
            let before: usize = (p.before.iter().zip(weight))
                .map(|(&c, &w)| c as usize * w)
                .sum();
            return if before <= k {
                self.ascend(p.at, before, weight, k)
            } else {
                self.descend_from(p.at, before, weight, k)
            };
        }
        if k < n / 2 {
            self.ascend(0, 0, weight, k)
        } else {
            self.descend_from_top(weight, n, k)
        }
    }

    /// Scanning up from position `from`, before which the running weight is `seen0 ≤ k`: the
    /// first value whose running weight passes k, then the one passing k+1.
    fn ascend(&self, from: usize, seen0: usize, weight: &[usize], k: usize) -> (f64, f64) {
        let (skipped, seen) =
            skip_chunks(self.groups[from..].chunks(SCAN_CHUNK), weight, k - seen0);
        let mut seen = seen0 + seen;
        let mut at = None;
        let start = from + skipped;
        for (&v, &g) in self.values[start..].iter().zip(&self.groups[start..]) {
            seen += weight_of(weight, g);
            if at.is_none() && seen > k {
                at = Some(v);
            }
            if seen > k + 1 {
                return (at.unwrap_or(v), v);
            }
        }
        let last = at.unwrap_or(f64::NAN);
        (last, last)
    }

    /// Scanning down from position `to` (exclusive), before which the running weight is
    /// `before > k`: the value at which it passes k, then the next value of positive weight
    /// when the same value does not also pass k+1.
    fn descend_from(&self, to: usize, before: usize, weight: &[usize], k: usize) -> (f64, f64) {
        // Skip whole chunks while what is left before them still passes k.
        let (skipped, removed) = skip_chunks(
            self.groups[..to].rchunks(SCAN_CHUNK),
            weight,
            before - k - 1,
        );
        let mut cum = before - removed;
        for i in (0..to - skipped).rev() {
            let w = weight_of(weight, self.groups[i]);
            cum -= w;
            if cum <= k {
                let at = self.values[i];
                if cum + w > k + 1 {
                    return (at, at);
                }
                let next = (self.values[i + 1..].iter().zip(&self.groups[i + 1..]))
                    .find(|&(_, &g)| weight_of(weight, g) > 0)
                    .map_or(at, |(&v, _)| v);
                return (at, next);
            }
        }
        (f64::NAN, f64::NAN)
    }

    /// Scanning down from the largest value: rank k+1 (if any) is met first, then rank k.
    fn descend_from_top(&self, weight: &[usize], n: usize, k: usize) -> (f64, f64) {
        let values = self.values.iter().zip(&self.groups);
        let (hi_rank, lo_rank) = (n - 1 - k.min(n - 1), (n - 1).saturating_sub(k + 1));
        let has_next = k + 1 < n;
        let first_event = if has_next { lo_rank } else { hi_rank };
        let (skipped, mut seen) = skip_chunks(self.groups.rchunks(SCAN_CHUNK), weight, first_event);
        let mut next = None;
        for (&v, &g) in values.rev().skip(skipped) {
            seen += weight_of(weight, g);
            if has_next && next.is_none() && seen > lo_rank {
                next = Some(v);
            }
            if seen > hi_rank {
                return (v, next.unwrap_or(v));
            }
        }
        (f64::NAN, f64::NAN)
    }
}

/// The position of the `q`-quantile among `len` sorted values (the lower of the two it
/// interpolates between).
fn pivot_position(len: usize, q: f64) -> usize {
    if len == 0 || !(0.0..=1.0).contains(&q) {
        return 0;
    }
    ((len - 1) as f64 * q).floor() as usize
}

#[cfg(test)]
mod tests {
    use super::*;
    use sy_selector::quantile_sorted;

    /// The quantile of the resample written out value by value.
    fn materialised(rows: &[(f64, usize)], weights: &[usize], q: f64) -> f64 {
        let mut expanded: Vec<f64> = rows
            .iter()
            .flat_map(|&(v, g)| std::iter::repeat_n(v, weights[g]))
            .collect();
        expanded.sort_by(f64::total_cmp);
        quantile_sorted(&expanded, q).unwrap_or(f64::NAN)
    }

    fn same(a: f64, b: f64) -> bool {
        a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
    }

    #[test]
    fn a_pivot_is_kept_only_for_groups_of_several_rows() {
        // 10,000 values: the scan from the top reads 1,000 of them at q = 0.9.
        let values: Vec<f64> = (0..10_000).map(f64::from).collect();
        let by_hundred: Vec<usize> = (0..10_000).map(|i| i / 100).collect();
        let one_each: Vec<usize> = (0..10_000).collect();
        assert!(Ranked::new(&values, &by_hundred, 100, 0.9).pivot.is_some());
        assert!(Ranked::new(&values, &one_each, 10_000, 0.9).pivot.is_none());
        assert!(Ranked::new(&[], &[], 0, 0.9).pivot.is_none());
    }

    proptest::proptest! {
        /// The weighted scan, from either end or from a pivot anywhere, equals the quantile of
        /// the resample written out value by value.
        #[test]
        fn weighted_quantile_is_the_materialised_one(
            rows in proptest::collection::vec((-1e3f64..1e3, 0usize..6), 1..120),
            weights in proptest::collection::vec(0usize..4, 6),
            q in 0.0f64..=1.0,
            pivot_at in 0usize..130,
        ) {
            let values: Vec<f64> = rows.iter().map(|r| r.0).collect();
            let group_of: Vec<usize> = rows.iter().map(|r| r.1).collect();
            let n: usize = group_of.iter().map(|&g| weights[g]).sum();
            let plain = Ranked::without_pivot(&values, &group_of);
            let mut pivoted = Ranked::without_pivot(&values, &group_of);
            pivoted.set_pivot(pivot_at, 6);
            for q in [q, 0.0, 0.1, 0.5, 0.9, 1.0] {
                let want = materialised(&rows, &weights, q);
                let got = plain.quantile(&weights, n, q);
                proptest::prop_assert!(same(got, want), "plain {got} vs {want} at q {q}");
                let got = pivoted.quantile(&weights, n, q);
                proptest::prop_assert!(same(got, want), "pivot {got} vs {want} at q {q}");
            }
        }

        /// Ties across groups and zero weights around the pivot: still the same statistics.
        #[test]
        fn a_pivot_among_ties_finds_the_same_statistics(
            rows in proptest::collection::vec((0u8..4, 0usize..5), 1..60),
            weights in proptest::collection::vec(0usize..3, 5),
            pivot_at in 0usize..70,
            q in 0.0f64..=1.0,
        ) {
            let rows: Vec<(f64, usize)> = rows.iter().map(|&(v, g)| (f64::from(v), g)).collect();
            let values: Vec<f64> = rows.iter().map(|r| r.0).collect();
            let group_of: Vec<usize> = rows.iter().map(|r| r.1).collect();
            let n: usize = group_of.iter().map(|&g| weights[g]).sum();
            let mut pivoted = Ranked::without_pivot(&values, &group_of);
            pivoted.set_pivot(pivot_at, 5);
            let want = materialised(&rows, &weights, q);
            let got = pivoted.quantile(&weights, n, q);
            proptest::prop_assert!(same(got, want), "{got} vs {want}");
        }
    }
}
