//! The search's input, prepared once: the probes' selected-TTFT gains in integer units, grouped
//! into cells by (condition, R_eff rank, P_eff rank), the distinct R_eff and P_eff values, and
//! subsets of the probes ([`Mask`], [`Probes`]) with their totals.

use super::*;

pub(super) fn quantise(ms: f64) -> i64 {
    // Finite, non-negative and below ~9e9 ms by validation; `as` saturates otherwise.
    (ms * UNITS_PER_MS).round() as i64
}

/// One probe as the sweep reads it: the rank of its R and of its P among the input's distinct
/// valid values of each term (1 + the index in [`SearchInput`]'s ascending lists; 0 when the
/// value is not valid), its gain, its guard and its group. 24 bytes.
#[derive(Debug, Clone, Copy)]
pub(super) struct Cell {
    pub(super) r: u32,
    pub(super) p: u32,
    pub(super) gain: i64,
    /// The probe's group (see [`SearchInput::grouped`]).
    pub(super) group: u32,
    pub(super) guard: GuardPass,
}

impl Cell {
    /// What a slot holds until a probe's cell is written to it.
    pub(super) const UNSET: Cell = Cell {
        r: 0,
        p: 0,
        gain: 0,
        group: 0,
        guard: GuardPass::ALL,
    };
}

/// Probes ready for the search: each group's totals, each term's distinct valid values and
/// every probe as a [`Cell`] in order of its R, made once and read by both rule families and
/// every subset.
#[derive(Debug)]
pub struct SearchInput {
    /// Number of probes.
    pub(super) len: usize,
    /// Per group: its probes' count and summed efficient and oracle TTFTs in units (what
    /// [`Totals`] adds up over the kept groups).
    pub(super) group_totals: Vec<Totals>,
    /// Every distinct valid R, ascending.
    pub(super) r_distinct: Vec<f64>,
    /// Every distinct valid P, ascending.
    pub(super) p_distinct: Vec<f64>,
    /// Every probe by ascending R rank (those without a valid R first): the both-term rules
    /// let probes in by ascending R ([`ExtraRows`]). Within one R in probe order, or by P when
    /// there are more distinct P than [`P_RANKS_IN_CACHE`].
    pub(super) cells: Vec<Cell>,
}

impl SearchInput {
    /// Checks the probes' TTFTs and ranks their R and P; each probe is a group of its own (a
    /// subset may keep any of them).
    pub fn new(probes: &[SearchProbe]) -> Result<SearchInput, SearchError> {
        SearchInput::grouped(probes, |i| u32::try_from(i).unwrap_or(u32::MAX))
    }

    /// [`SearchInput::new`] with probe i in group `group_of(i)`: a subset keeps or leaves
    /// whole groups ([`SearchInput::subset`]).
    pub fn grouped(
        probes: &[SearchProbe],
        group_of: impl Fn(usize) -> u32,
    ) -> Result<SearchInput, SearchError> {
        SearchInput::grouped_sorting_p_above(probes, group_of, P_RANKS_IN_CACHE)
    }

    /// [`SearchInput::grouped`], with each R's probes sorted by P when there are more than
    /// `p_ranks` distinct P values (the same searches either way: see [`P_RANKS_IN_CACHE`]).
    pub(super) fn grouped_sorting_p_above(
        probes: &[SearchProbe],
        group_of: impl Fn(usize) -> u32,
        p_ranks: usize,
    ) -> Result<SearchInput, SearchError> {
        let units = quantised(probes)?;
        let groups: Vec<u32> = (0..probes.len()).map(group_of).collect();
        let group_totals = Totals::per_group(&units, &groups);
        // The two terms on two cores (nothing else runs while the run's view is made).
        let ((r_distinct, r_rank), (p_distinct, p_rank)) = rayon::join(
            || ranked(probes, |p| p.r_eff),
            || ranked(probes, |p| p.p_eff),
        );
        let cell = |i: usize| Cell {
            r: r_rank[i],
            p: p_rank[i],
            gain: units[i].1 - units[i].0,
            group: groups[i],
            guard: probes[i].guard,
        };
        let (mut cells, starts) = by_rank(probes.len(), r_distinct.len(), &r_rank, cell);
        if p_distinct.len() > p_ranks {
            for w in starts.windows(2) {
                if let Some(same_r) = cells.get_mut(w[0]..w[1]) {
                    same_r.par_sort_unstable_by_key(|c| c.p);
                }
            }
        }
        Ok(SearchInput {
            len: probes.len(),
            group_totals,
            r_distinct,
            p_distinct,
            cells,
        })
    }

    /// Every probe, as the search reads them.
    pub fn all(&self) -> Probes<'_> {
        Probes {
            input: self,
            keep: None,
        }
    }

    /// The probes whose group's `keep` flag is set: a filter of the same cells, so in the same
    /// order, without copying them.
    pub fn subset<'a>(&'a self, keep: &'a Mask) -> Probes<'a> {
        Probes {
            input: self,
            keep: Some(keep),
        }
    }

    /// Number of probes.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// A term's distinct valid values, ascending, and each probe's rank among them (1 + the index;
/// 0 when its value is not valid). `0.0` and `-0.0` are one value, `0.0` (the triggers compare
/// them as equal). The values are few (R counts requests), so they are found by hashing rather
/// than by sorting every probe: each probe gets its value's number in order of first
/// appearance, renumbered by rank once the values are sorted.
pub(super) fn ranked(
    probes: &[SearchProbe],
    value: fn(&SearchProbe) -> Option<f64>,
) -> (Vec<f64>, Vec<u32>) {
    let mut seen: FxHashMap<u64, u32> = FxHashMap::default();
    let mut distinct: Vec<f64> = Vec::new();
    let mut last: Option<(u64, u32)> = None;
    let mut ranks: Vec<u32> = (probes.iter())
        .map(|p| {
            let Some(v) = valid(value(p)) else {
                return 0;
            };
            let key = (v + 0.0).to_bits();
            match last {
                Some((k, id)) if k == key => id,
                _ => {
                    let id = *seen.entry(key).or_insert_with(|| {
                        distinct.push(v + 0.0);
                        u32::try_from(distinct.len()).unwrap_or(u32::MAX)
                    });
                    last = Some((key, id));
                    id
                }
            }
        })
        .collect();
    // Number of first appearance → rank.
    let mut order: Vec<u32> = (0..distinct.len()).map(|i| i as u32).collect();
    let value_of = |id: u32| distinct.get(id as usize).copied().unwrap_or(f64::NAN);
    order.sort_unstable_by(|&a, &b| value_of(a).total_cmp(&value_of(b)));
    let mut rank_of = vec![0u32; distinct.len() + 1];
    for (rank, &id) in order.iter().enumerate() {
        if let Some(slot) = rank_of.get_mut(id as usize + 1) {
            *slot = u32::try_from(rank + 1).unwrap_or(u32::MAX);
        }
    }
    ranks
        .iter_mut()
        .for_each(|r| *r = rank_of.get(*r as usize).copied().unwrap_or(0));
    let sorted = order.iter().map(|&id| value_of(id)).collect();
    (sorted, ranks)
}

/// `cell(i)` of every probe i, by ascending `rank[i]` (ranks `0..=ranks`), in probe order
/// within a rank (a counting sort), and where each rank's cells start (then the end).
pub(super) fn by_rank(
    n: usize,
    ranks: usize,
    rank: &[u32],
    cell: impl Fn(usize) -> Cell,
) -> (Vec<Cell>, Vec<usize>) {
    let mut starts = vec![0usize; ranks + 2];
    for &r in rank {
        starts[r as usize + 1] += 1;
    }
    for j in 1..starts.len() {
        starts[j] += starts[j - 1];
    }
    let mut next = starts.clone();
    let mut cells = vec![Cell::UNSET; n];
    for (i, &r) in rank.iter().enumerate() {
        let at = &mut next[r as usize];
        cells[*at] = cell(i);
        *at += 1;
    }
    (cells, starts)
}

/// The probes one search reads: all of a [`SearchInput`] or those a mask keeps.
#[derive(Debug, Clone, Copy)]
pub struct Probes<'a> {
    pub(super) input: &'a SearchInput,
    /// Kept probes by probe index; `None`: all.
    pub(super) keep: Option<&'a Mask>,
}

/// One flag per group of probes, packed 64 to a word. The cells meet the groups in their own
/// order (by R), so the flags should stay in the fastest cache: a seed's flags over 20,000
/// conditions are 2.5 kB (a flag per probe was 625 kB at 5 M probes, built for every seed from a
/// flag per pair).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mask {
    pub(super) words: Vec<u64>,
}

impl Mask {
    /// Flags `keep(i)` for i in `0..len`.
    pub fn from_fn(len: usize, mut keep: impl FnMut(usize) -> bool) -> Mask {
        let mut words = vec![0u64; len.div_ceil(64)];
        for i in (0..len).filter(|&i| keep(i)) {
            words[i / 64] |= 1 << (i % 64);
        }
        Mask { words }
    }

    /// Flag `i` (false beyond the mask).
    #[inline]
    pub fn get(&self, i: usize) -> bool {
        self.words
            .get(i / 64)
            .is_some_and(|w| w & (1 << (i % 64)) != 0)
    }
}

impl<'a> Probes<'a> {
    pub(super) fn kept(&self, group: u32) -> bool {
        self.keep.is_none_or(|k| k.get(group as usize))
    }

    /// The kept probes' cells, by ascending R rank.
    pub(super) fn cells(&self) -> impl Iterator<Item = &'a Cell> {
        let this = *self;
        self.input.cells.iter().filter(move |c| this.kept(c.group))
    }

    /// The kept groups' totals.
    pub(super) fn group_totals(&self) -> impl Iterator<Item = &'a Totals> {
        let this = *self;
        let groups = self.input.group_totals.iter().enumerate();
        groups
            .filter(move |&(g, _)| this.kept(g as u32))
            .map(|(_, t)| t)
    }

    /// Number of probes kept.
    pub fn len(&self) -> usize {
        match self.keep {
            None => self.input.len(),
            Some(_) => self.group_totals().map(|t| t.n).sum(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// For each of the ascending `distinct` values, how many of the ascending `p_values` it fires
/// at ([`p_trigger`]), by a merge of the two lists.
pub(super) fn fires_by_rank(distinct: &[f64], p_values: &[f64]) -> Vec<u32> {
    let mut j = 0;
    distinct
        .iter()
        .map(|&p| {
            while p_values.get(j).is_some_and(|&t| p_trigger(p, t)) {
                j += 1;
            }
            u32::try_from(j).unwrap_or(u32::MAX)
        })
        .collect()
}

/// The probes' TTFTs in exact integer units, (efficient, capable) per probe; an error names
/// the first probe whose TTFT is not finite and non-negative.
pub(super) fn quantised(probes: &[SearchProbe]) -> Result<Vec<(i64, i64)>, SearchError> {
    let ok = |v: f64| v.is_finite() && v >= 0.0;
    // A bad probe's units are −1 (a good one's are ≥ 0), so the probes are read once.
    let units_of = |pr: &SearchProbe| match (ok(pr.ttft_eff_ms), ok(pr.ttft_cap_ms)) {
        (true, true) => (quantise(pr.ttft_eff_ms), quantise(pr.ttft_cap_ms)),
        _ => (-1, -1),
    };
    let mut units = Vec::with_capacity(probes.len());
    probes.par_iter().map(units_of).collect_into_vec(&mut units);
    // The first bad probe (by index, whichever thread finds one).
    if let Some(index) = units.par_iter().position_first(|u| u.0 < 0) {
        let pr = probes.get(index);
        return Err(SearchError::BadTtft {
            index,
            eff: pr.map_or(f64::NAN, |p| p.ttft_eff_ms),
            cap: pr.map_or(f64::NAN, |p| p.ttft_cap_ms),
        });
    }
    Ok(units)
}

pub(super) fn valid(v: Option<f64>) -> Option<f64> {
    v.filter(|x| x.is_finite())
}

/// What every rule's mean is relative to: the probes' count and their summed efficient and
/// oracle TTFTs (units).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Totals {
    pub(super) n: usize,
    pub(super) base: i128,
    pub(super) oracle: i128,
}

impl Totals {
    /// The totals of each group of the probes (`units` and `groups` by probe).
    pub(super) fn per_group(units: &[(i64, i64)], groups: &[u32]) -> Vec<Totals> {
        let mut out = vec![Totals::default(); groups.iter().max().map_or(0, |&g| g as usize + 1)];
        for (&(e, c), &g) in units.iter().zip(groups) {
            if let Some(t) = out.get_mut(g as usize) {
                t.add(&Totals {
                    n: 1,
                    base: i128::from(e),
                    oracle: i128::from(e.min(c)),
                });
            }
        }
        out
    }

    pub(super) fn add(&mut self, other: &Totals) {
        self.n += other.n;
        self.base += other.base;
        self.oracle += other.oracle;
    }

    /// The kept probes' totals: those of their groups, added (exact integers, so in any order).
    pub(super) fn of(input: &Probes<'_>) -> Result<Totals, SearchError> {
        let mut totals = Totals::default();
        input.group_totals().for_each(|t| totals.add(t));
        if totals.n == 0 {
            return Err(SearchError::NoProbes);
        }
        Ok(totals)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_keep_the_flags_they_were_made_with() {
        let m = Mask::from_fn(130, |i| i % 3 == 0);
        assert!(m.get(0) && m.get(129) && !m.get(128) && !m.get(1));
        assert!(!m.get(1000), "beyond the mask: not kept");
    }

    #[test]
    fn values_are_ranked_among_the_distinct_valid_ones() {
        let probe = |r: Option<f64>| SearchProbe {
            r_eff: r,
            p_eff: None,
            ttft_eff_ms: 1.0,
            ttft_cap_ms: 2.0,
            guard: GuardPass::ALL,
        };
        let probes = [
            probe(Some(3.0)),
            probe(None),
            probe(Some(1.0)),
            probe(Some(3.0)),
            probe(Some(f64::NAN)),
        ];
        let (distinct, ranks) = ranked(&probes, |p| p.r_eff);
        assert_eq!(distinct, vec![1.0, 3.0]);
        assert_eq!(ranks, vec![2, 0, 1, 2, 0]);
        assert_eq!(quantise(1.5), 1_500_000_000);
        assert_eq!(valid(Some(f64::INFINITY)), None);
    }

    #[test]
    fn p_values_fire_up_to_their_rank() {
        // P > p fires for p below the value: 0.5 fires at thresholds 0.1 and 0.3, not 0.5.
        assert_eq!(fires_by_rank(&[0.2, 0.5], &[0.1, 0.3, 0.5]), vec![1, 2]);
    }
}
