//! Per-rank tallies of the gain and the overrides of each trigger class, and the sums over every
//! threshold they give (one pass over the ranks instead of one per threshold).

/// One term's kept probes by the rank of their value (index 0: not valid): whether a kept
/// probe has that value, and per guard class the gain sum and count of those whose guard
/// passes in that class.
pub(super) struct RankTally<const K: usize> {
    pub(super) present: Vec<bool>,
    pub(super) sums: [Vec<(i128, u64)>; K],
}

impl<const K: usize> RankTally<K> {
    /// Room for ranks `0..=ranks`.
    pub(super) fn new(ranks: usize) -> Self {
        RankTally {
            present: vec![false; ranks + 1],
            sums: std::array::from_fn(|_| vec![(0, 0); ranks + 1]),
        }
    }

    #[inline]
    pub(super) fn add(&mut self, rank: u32, classes: [bool; K], gain: i64) {
        let r = rank as usize;
        if let Some(p) = self.present.get_mut(r) {
            *p = true;
        }
        for (sums, in_class) in self.sums.iter_mut().zip(classes) {
            if let Some(s) = sums.get_mut(r).filter(|_| in_class) {
                s.0 += i128::from(gain);
                s.1 += 1;
            }
        }
    }

    /// The term's candidate thresholds (the values a kept probe has, ascending) and each
    /// class's sums at each: those of the probes whose value fires at it (`fires(value,
    /// threshold)`: every value above a threshold and none below; at it, as `fires(t, t)`
    /// says). Suffix sums over the ranks.
    pub(super) fn thresholds(&self, distinct: &[f64], fires: fn(f64, f64) -> bool) -> TermSums<K> {
        let mut above = [(0i128, 0u64); K];
        let mut out = TermSums {
            values: Vec::new(),
            sums: std::array::from_fn(|_| Vec::new()),
            counts: std::array::from_fn(|_| Vec::new()),
        };
        for (j, &t) in distinct.iter().enumerate().rev() {
            let own = fires(t, t);
            for (k, a) in above.iter_mut().enumerate() {
                let s = self.sums[k].get(j + 1).copied().unwrap_or((0, 0));
                let with = (a.0 + s.0, a.1 + s.1);
                if self.present.get(j + 1).copied().unwrap_or(false) {
                    let at = if own { with } else { *a };
                    out.sums[k].push(at.0);
                    out.counts[k].push(at.1);
                }
                *a = with;
            }
            if self.present.get(j + 1).copied().unwrap_or(false) {
                out.values.push(t);
            }
        }
        out.values.reverse();
        out.sums.iter_mut().for_each(|v| v.reverse());
        out.counts.iter_mut().for_each(|v| v.reverse());
        out
    }
}

/// A term's candidate thresholds, ascending, and per guard class the gain sum and count of
/// the probes whose guard passes in that class and whose term fires at each threshold.
pub(super) struct TermSums<const K: usize> {
    pub(super) values: Vec<f64>,
    pub(super) sums: [Vec<i128>; K],
    pub(super) counts: [Vec<u64>; K],
}

impl<const K: usize> TermSums<K> {
    /// Class `k`'s sums and counts.
    pub(super) fn class(&mut self, k: usize) -> (Vec<i128>, Vec<u64>) {
        (
            std::mem::take(&mut self.sums[k]),
            std::mem::take(&mut self.counts[k]),
        )
    }
}

/// Column indices of the landscape: up to `max` p candidates evenly spaced by rank.
pub(super) fn landscape_columns(p_len: usize, max: usize) -> Vec<usize> {
    if p_len <= max {
        return (0..p_len).collect();
    }
    if max < 2 {
        return (0..max).collect();
    }
    let mut cols: Vec<usize> = (0..max).map(|i| (i * (p_len - 1)) / (max - 1)).collect();
    cols.dedup();
    cols
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threshold_sums_are_suffix_sums_of_the_ranks_present() {
        // Three distinct values; ranks 1 and 3 have probes (rank 2 none).
        let mut t = RankTally::<1>::new(3);
        t.add(1, [true], 10);
        t.add(3, [true], 5);
        t.add(3, [false], 100);
        let mut sums = t.thresholds(&[1.0, 2.0, 3.0], |v, t| v >= t);
        assert_eq!(sums.values, vec![1.0, 3.0]);
        let (gain, count) = sums.class(0);
        // At threshold 1: both probes of the class fire; at 3: only the one at rank 3.
        assert_eq!(gain, vec![15, 5]);
        assert_eq!(count, vec![2, 1]);
    }

    #[test]
    fn landscape_columns_are_evenly_spaced_ranks() {
        assert_eq!(landscape_columns(3, 40), vec![0, 1, 2]);
        assert_eq!(landscape_columns(101, 5), vec![0, 25, 50, 75, 100]);
        assert_eq!(landscape_columns(10, 1), vec![0]);
    }
}
