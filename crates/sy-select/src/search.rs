//! The r/p threshold search: a pure function over paired calibration probes.
//!
//! # What it minimises
//!
//! For one paired probe the calibration treats Stage's proposal as *efficient*. A threshold rule
//! (`count`: `R_eff >= r`; `count_prefill`: `R_eff >= r OR P_eff > p`) overrides to *capable*
//! when guard G holds and the trigger is true. The *selected TTFT* of the probe is then the
//! measured TTFT of the capable candidate, otherwise that of the efficient one. The search picks the
//! (r, p) — each taken from the observed calibration values or *disabled* — that minimises the
//! mean selected TTFT over all probes.
//!
//! # Ties
//!
//! Every candidate whose mean selected TTFT is within [`TIE_TOLERANCE_MS`] of the best mean is a
//! tie; among the ties the search prefers, in order: fewer overrides, fewer enabled terms, the larger
//! r, then the larger p (a disabled term counts as +∞: it is the more conservative rule).
//!
//! # How it avoids the naive product
//!
//! The naive search evaluates every (r, p) pair over every probe: `|r| · |p| · n`. Here the selected
//! TTFT is written as `Σ eff + Σ_{triggered} (cap − eff)`, so only the sum of the *gains*
//! `cap − eff` over the triggered set matters. Each probe's R and P are ranked once among the
//! distinct observed values of each term ([`SearchInput`]), and the probes are kept in order of
//! their R rank (a counting sort). One pass over the probes then tallies, per rank, the gains of
//! each guard class ([`RankTally`]):
//!
//! * `R >= r` alone: the gain sum and override count for every r are suffix sums over the R
//!   ranks.
//! * `P > p` alone: the same over the P ranks.
//! * both terms: the triggered set is `{R >= r} ∪ {P > p, R < r}`. For each r the first part is
//!   the suffix sum above; for the second, the probes are let in by ascending R as r passes them,
//!   each into the bucket of the p values its P fires at, which gives every p for that r in one
//!   pass over the buckets ([`ExtraRows`]).
//!
//! The cost is `O(n + |r| · |p|)` per search, where `|r|` is the number of distinct observed
//! booked-request counts (small: R is an integer count of requests on one worker); the ranking
//! and the counting sort, `O(n)` with a hash of the distinct values, are made once per set of
//! probes: both rule families read them, and a subset (another seed's fit split,
//! [`SearchInput::subset`]) is a filter of them, so the stability seeds search without ranking
//! or copying the probes. A subset is a set of the probes' groups (their conditions, in
//! `sy-select`): its flags are a few kilobytes, read at cache speed while the probes are
//! filtered through them; the totals every rule's mean is relative to are summed per group once.
//!
//! Sums are exact: TTFTs are quantised to integer units of 1e-9 ms and summed in `i128`, so two
//! rules that trigger the same probes always tie exactly, whatever the summation order.

use rayon::prelude::*;
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};
pub use sy_selector::GuardPass;
use sy_selector::{Thresholds, count_trigger, p_trigger, r_trigger};

/// Two means closer than this (in ms) are a tie.
pub const TIE_TOLERANCE_MS: f64 = 1e-9;

/// How many distinct P values a search's tally by P may have before each R's probes are
/// sorted by P. A search tallies its probes' gains by the rank of their P (32 bytes a rank):
/// up to here the tally fits a core's cache (2 MiB of L2 on the benchmarks' machine) wherever
/// the probes' P fall; with more (a deployment's token counts can give a distinct P for most
/// probes) the probes of each R come in ascending P, so the tally is read in order. Measured
/// on 300,000 probes in groups of 50, R one of 64 values (`benches/search.rs`): with ~300,000
/// distinct P, a search of 60 % of the groups took 77 ms with each R's probes in probe order
/// and 66–71 ms with them sorted by P (the sort made the preparation 38 → 42–57 ms); with
/// 40,000 distinct P, 13 ms either way, and the sort only added to the preparation (22 → 34
/// ms).
const P_RANKS_IN_CACHE: usize = 1 << 16;

/// Quantisation of TTFTs: integer units per millisecond.
const UNITS_PER_MS: f64 = 1e9;

/// One paired probe as the search sees it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SearchProbe {
    /// The efficient candidate's booked requests R (`None` when invalid).
    pub r_eff: Option<f64>,
    /// The efficient candidate's prefill pressure P (`None` when invalid).
    pub p_eff: Option<f64>,
    /// Measured TTFT of the efficient candidate (ms).
    pub ttft_eff_ms: f64,
    /// Measured TTFT of the capable candidate (ms).
    pub ttft_cap_ms: f64,
    /// Guard G per set of enabled terms.
    pub guard: GuardPass,
}

/// A threshold rule: each term is a value or `None` (disabled).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ThresholdRule {
    /// Trigger on `R_eff >= r`; `None` = term disabled.
    pub r: Option<f64>,
    /// Trigger on `P_eff > p`; `None` = term disabled.
    pub p: Option<f64>,
}

impl ThresholdRule {
    /// Both terms disabled: never overrides (behaves like Stage).
    pub const DISABLED: ThresholdRule = ThresholdRule { r: None, p: None };

    /// Number of enabled terms (0, 1 or 2).
    pub fn enabled_terms(&self) -> u8 {
        u8::from(self.r.is_some()) + u8::from(self.p.is_some())
    }

    /// Whether the trigger fires for these observations (guard not included):
    /// `sy_selector::count_trigger`.
    pub fn triggers(&self, r_eff: Option<f64>, p_eff: Option<f64>) -> bool {
        let thresholds = Thresholds {
            r: self.r,
            p: self.p,
        };
        count_trigger(&thresholds, r_eff, p_eff)
    }
}

/// Which terms the search may enable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RuleFamily {
    /// `count`: only `R >= r` (or disabled).
    Count,
    /// `count_prefill`: `R >= r`, `P > p`, both, or neither.
    CountPrefill,
}

/// The objective of one rule over the probes.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RuleScore {
    pub rule: ThresholdRule,
    /// Mean selected TTFT over all probes (ms).
    pub mean_selected_ttft_ms: f64,
    /// How many probes the rule overrides to capable.
    pub overrides: u64,
}

/// One row of the objective landscape (for the report's r/p plot).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LandscapeRow {
    /// The r threshold of this row (`None` = disabled).
    pub r: Option<f64>,
    /// The p thresholds of the columns (`None` = disabled), shared by every row.
    pub mean_selected_ttft_ms: Vec<f64>,
}

/// The objective over a grid of (r, p) for plotting: every r candidate and up to
/// `max_p_columns` p candidates (evenly spaced in rank), plus disabled for both.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Landscape {
    /// The p of each column (`None` = disabled).
    pub p_columns: Vec<Option<f64>>,
    pub rows: Vec<LandscapeRow>,
}

/// What the search found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchOutcome {
    pub family: RuleFamily,
    /// The chosen rule and its objective.
    pub best: RuleScore,
    /// Mean selected TTFT with both terms disabled (Stage), for reference.
    pub stage_mean_ttft_ms: f64,
    /// Mean TTFT of the per-probe oracle (the faster candidate every time).
    pub oracle_mean_ttft_ms: f64,
    /// Probes searched over.
    pub probes: u64,
    /// Distinct r candidates (excluding disabled).
    pub r_candidates: u64,
    /// Distinct p candidates (excluding disabled).
    pub p_candidates: u64,
    /// Rules evaluated (including disabled terms).
    pub rules_evaluated: u64,
    /// How many rules tied with the best mean (within the tolerance).
    pub tied_rules: u64,
}

/// Why the search cannot run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SearchError {
    #[error("no paired probes to search over")]
    NoProbes,
    #[error(
        "probe {index}: measured TTFT must be finite and non-negative (efficient {eff}, capable {cap})"
    )]
    BadTtft { index: usize, eff: f64, cap: f64 },
}

fn quantise(ms: f64) -> i64 {
    // Finite, non-negative and below ~9e9 ms by validation; `as` saturates otherwise.
    (ms * UNITS_PER_MS).round() as i64
}

/// A candidate under comparison: exact gain sum (units) and its tie-break keys.
#[derive(Debug, Clone, Copy)]
struct Candidate {
    gain: i128,
    overrides: u64,
    rule: ThresholdRule,
}

/// Order for the tie-break among candidates already within tolerance of the best mean:
/// fewer overrides, fewer terms, larger r, larger p (disabled = +∞). Returns true if `a` is better.
fn tie_better(a: &ThresholdRule, a_over: u64, b: &ThresholdRule, b_over: u64) -> bool {
    if a_over != b_over {
        return a_over < b_over;
    }
    let (ta, tb) = (a.enabled_terms(), b.enabled_terms());
    if ta != tb {
        return ta < tb;
    }
    let key = |v: Option<f64>| v.unwrap_or(f64::INFINITY);
    if key(a.r) != key(b.r) {
        return key(a.r) > key(b.r);
    }
    key(a.p) > key(b.p)
}

/// One probe as the sweep reads it: the rank of its R and of its P among the input's distinct
/// valid values of each term (1 + the index in [`SearchInput`]'s ascending lists; 0 when the
/// value is not valid), its gain, its guard and its group. 24 bytes.
#[derive(Debug, Clone, Copy)]
struct Cell {
    r: u32,
    p: u32,
    gain: i64,
    /// The probe's group (see [`SearchInput::grouped`]).
    group: u32,
    guard: GuardPass,
}

impl Cell {
    /// What a slot holds until a probe's cell is written to it.
    const UNSET: Cell = Cell {
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
    len: usize,
    /// Per group: its probes' count and summed efficient and oracle TTFTs in units (what
    /// [`Totals`] adds up over the kept groups).
    group_totals: Vec<Totals>,
    /// Every distinct valid R, ascending.
    r_distinct: Vec<f64>,
    /// Every distinct valid P, ascending.
    p_distinct: Vec<f64>,
    /// Every probe by ascending R rank (those without a valid R first): the both-term rules
    /// let probes in by ascending R ([`ExtraRows`]). Within one R in probe order, or by P when
    /// there are more distinct P than [`P_RANKS_IN_CACHE`].
    cells: Vec<Cell>,
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
    fn grouped_sorting_p_above(
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
fn ranked(probes: &[SearchProbe], value: fn(&SearchProbe) -> Option<f64>) -> (Vec<f64>, Vec<u32>) {
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
fn by_rank(
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
    input: &'a SearchInput,
    /// Kept probes by probe index; `None`: all.
    keep: Option<&'a Mask>,
}

/// One flag per group of probes, packed 64 to a word. The cells meet the groups in their own
/// order (by R), so the flags should stay in the fastest cache: a seed's flags over 20,000
/// conditions are 2.5 kB (a flag per probe was 625 kB at 5 M probes, built for every seed from a
/// flag per pair).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mask {
    words: Vec<u64>,
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
    fn kept(&self, group: u32) -> bool {
        self.keep.is_none_or(|k| k.get(group as usize))
    }

    /// The kept probes' cells, by ascending R rank.
    fn cells(&self) -> impl Iterator<Item = &'a Cell> {
        let this = *self;
        self.input.cells.iter().filter(move |c| this.kept(c.group))
    }

    /// The kept groups' totals.
    fn group_totals(&self) -> impl Iterator<Item = &'a Totals> {
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
fn fires_by_rank(distinct: &[f64], p_values: &[f64]) -> Vec<u32> {
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

/// One term's kept probes by the rank of their value (index 0: not valid): whether a kept
/// probe has that value, and per guard class the gain sum and count of those whose guard
/// passes in that class.
struct RankTally<const K: usize> {
    present: Vec<bool>,
    sums: [Vec<(i128, u64)>; K],
}

impl<const K: usize> RankTally<K> {
    /// Room for ranks `0..=ranks`.
    fn new(ranks: usize) -> Self {
        RankTally {
            present: vec![false; ranks + 1],
            sums: std::array::from_fn(|_| vec![(0, 0); ranks + 1]),
        }
    }

    #[inline]
    fn add(&mut self, rank: u32, classes: [bool; K], gain: i64) {
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
    fn thresholds(&self, distinct: &[f64], fires: fn(f64, f64) -> bool) -> TermSums<K> {
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
struct TermSums<const K: usize> {
    values: Vec<f64>,
    sums: [Vec<i128>; K],
    counts: [Vec<u64>; K],
}

impl<const K: usize> TermSums<K> {
    /// Class `k`'s sums and counts.
    fn class(&mut self, k: usize) -> (Vec<i128>, Vec<u64>) {
        (
            std::mem::take(&mut self.sums[k]),
            std::mem::take(&mut self.counts[k]),
        )
    }
}

/// Column indices of the landscape: up to `max` p candidates evenly spaced by rank.
fn landscape_columns(p_len: usize, max: usize) -> Vec<usize> {
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

/// The probes' TTFTs in exact integer units, (efficient, capable) per probe; an error names
/// the first probe whose TTFT is not finite and non-negative.
fn quantised(probes: &[SearchProbe]) -> Result<Vec<(i64, i64)>, SearchError> {
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

fn valid(v: Option<f64>) -> Option<f64> {
    v.filter(|x| x.is_finite())
}

/// A probe of the both-term rules: its R's rank among the input's distinct R values (0 when it
/// has none, see [`Cell`]), how many of the sweep's p values its P fires at, and its gain. 16
/// bytes: a seed's list of ~3 M at 10 M records was a quarter of sy-select's page faults at 32
/// bytes an entry (the value as `Option<f64>`, the count as `usize`).
type Joining = (u32, u32, i64);

/// The candidate thresholds and the per-term prefix sums the sweep reads.
struct Sweep<'a> {
    family: RuleFamily,
    r_values: Vec<f64>,
    p_values: Vec<f64>,
    /// `R >= r` alone (guard with the r term only), per r.
    r_sum: Vec<i128>,
    r_cnt: Vec<u64>,
    /// `P > p` alone (guard with the p term only), per p.
    p_sum: Vec<i128>,
    p_cnt: Vec<u64>,
    /// The `R >= r` part of the both-term rules (guard with both terms), per r.
    br_sum: Vec<i128>,
    br_cnt: Vec<u64>,
    /// The input's distinct valid R values (what a [`Joining`]'s rank indexes).
    r_distinct: &'a [f64],
    /// Probes eligible for both terms with a valid P, by ascending R (invalid R first).
    joining: Vec<Joining>,
}

impl<'a> Sweep<'a> {
    /// One pass over the kept probes by ascending R: per rank of each term, whether a probe has
    /// it and the gain sums of each guard class (the thresholds' sums are then suffix sums over
    /// the ranks), and the both-term probes with a valid P in the order the both-term rules let
    /// them in.
    fn new(input: &Probes<'a>, family: RuleFamily) -> Sweep<'a> {
        let prefill = family == RuleFamily::CountPrefill;
        let all = input.input;
        // `count` reads no P: its P tally stays empty.
        let mut by_r = RankTally::<2>::new(all.r_distinct.len());
        let mut by_p = RankTally::<1>::new(if prefill { all.p_distinct.len() } else { 0 });
        // Sized for every probe at once (address space only: the pages a shorter list never
        // reaches are never touched), so it is never copied while it grows.
        let mut joining: Vec<Joining> =
            Vec::with_capacity(if prefill { all.cells.len() } else { 0 });
        for c in input.cells() {
            by_r.add(c.r, [c.guard.r_only, prefill && c.guard.both], c.gain);
            if prefill {
                by_p.add(c.p, [c.guard.p_only], c.gain);
                if c.guard.both && c.p != 0 {
                    joining.push((c.r, c.p, c.gain));
                }
            }
        }
        let mut by_r = by_r.thresholds(&all.r_distinct, r_trigger);
        let mut by_p = by_p.thresholds(if prefill { &all.p_distinct } else { &[] }, p_trigger);
        // Each joining probe's P rank becomes the number of p values its P fires at.
        let fires = fires_by_rank(&all.p_distinct, &by_p.values);
        for entry in &mut joining {
            let rank = (entry.1 as usize).checked_sub(1);
            entry.1 = rank.and_then(|i| fires.get(i)).copied().unwrap_or(0);
        }
        let (p_sum, p_cnt) = by_p.class(0);
        let (r_sum, r_cnt) = by_r.class(0);
        let (br_sum, br_cnt) = by_r.class(1);
        Sweep {
            family,
            r_values: by_r.values,
            p_values: by_p.values,
            r_sum,
            r_cnt,
            p_sum,
            p_cnt,
            br_sum,
            br_cnt,
            r_distinct: &all.r_distinct,
            joining,
        }
    }

    /// The `count` family's sweep from the `count_prefill` one: the same r values and `R >= r`
    /// sums (both are read from the same list by R), no p term.
    fn count_only(&self) -> Sweep<'a> {
        Sweep {
            family: RuleFamily::Count,
            r_values: self.r_values.clone(),
            p_values: Vec::new(),
            r_sum: self.r_sum.clone(),
            r_cnt: self.r_cnt.clone(),
            p_sum: Vec::new(),
            p_cnt: Vec::new(),
            br_sum: vec![0; self.r_values.len()],
            br_cnt: vec![0; self.r_values.len()],
            r_distinct: self.r_distinct,
            joining: Vec::new(),
        }
    }

    /// Visits every candidate rule as (gain, overrides, rule) — disabled, r alone, p alone, then
    /// both terms r by r — and calls `row(a, extra)` after the rules of the a-th r (with the
    /// per-p extra gains of the both-term rules; empty for `count`). The both-term rules of an
    /// r for which `skip_row(a)` holds are neither visited nor computed.
    fn visit(
        &self,
        visit: &mut impl FnMut(i128, u64, ThresholdRule),
        row: &mut impl FnMut(usize, &[i128]),
        skip_row: &dyn Fn(usize) -> bool,
    ) {
        visit(0, 0, ThresholdRule::DISABLED);
        for (j, &r) in self.r_values.iter().enumerate() {
            visit(
                self.r_sum[j],
                self.r_cnt[j],
                ThresholdRule {
                    r: Some(r),
                    p: None,
                },
            );
        }
        for (j, &p) in self.p_values.iter().enumerate() {
            visit(
                self.p_sum[j],
                self.p_cnt[j],
                ThresholdRule {
                    r: None,
                    p: Some(p),
                },
            );
        }
        let mut extra = ExtraRows::new(self, &self.joining);
        for (a, &r) in self.r_values.iter().enumerate() {
            if self.family != RuleFamily::CountPrefill {
                row(a, &[]);
                continue;
            }
            extra.advance(a);
            if skip_row(a) {
                continue;
            }
            let (extra_sum, extra_cnt) = extra.row();
            for (j, &p) in self.p_values.iter().enumerate() {
                let rule = ThresholdRule {
                    r: Some(r),
                    p: Some(p),
                };
                visit(
                    self.br_sum[a] + extra_sum[j],
                    self.br_cnt[a] + extra_cnt[j],
                    rule,
                );
            }
            row(a, &extra_sum);
        }
    }
}

/// The both-term rules' extra gains, r by r in ascending order: per p, the gain sum and count
/// of the probes with `P > p` that `R >= r` does not trigger. A probe joins once, when r
/// passes its R, into the bucket of the p values its P fires at, so a row costs the number of
/// p values rather than the number of probes.
struct ExtraRows<'a> {
    p_values: &'a [f64],
    r_values: &'a [f64],
    /// What a [`Joining`]'s R rank indexes.
    r_distinct: &'a [f64],
    joining: &'a [Joining],
    next: usize,
    /// Gains and counts of the joined probes by how many p values they fire at (0..=len).
    bucket_sum: Vec<i128>,
    bucket_cnt: Vec<u64>,
}

impl<'a> ExtraRows<'a> {
    fn new(sweep: &'a Sweep<'_>, joining: &'a [Joining]) -> Self {
        let p_len = sweep.p_values.len();
        ExtraRows {
            p_values: &sweep.p_values,
            r_values: &sweep.r_values,
            r_distinct: sweep.r_distinct,
            joining,
            next: 0,
            bucket_sum: vec![0; p_len + 1],
            bucket_cnt: vec![0; p_len + 1],
        }
    }

    /// Lets in the probes that `R >= r` does not trigger at the a-th r value (thresholds come
    /// in ascending order).
    fn advance(&mut self, a: usize) {
        let r = self.r_values[a];
        while let Some(&(key, fires, gain)) = self.joining.get(self.next) {
            let rv = key
                .checked_sub(1)
                .and_then(|k| self.r_distinct.get(k as usize));
            if rv.is_some_and(|&rv| r_trigger(rv, r)) {
                break;
            }
            self.bucket_sum[fires as usize] += i128::from(gain);
            self.bucket_cnt[fires as usize] += 1;
            self.next += 1;
        }
    }

    /// The current row: per p value j, the joined probes firing at it (those firing at more
    /// than j values).
    fn row(&self) -> (Vec<i128>, Vec<u64>) {
        let n = self.p_values.len();
        let mut extra_sum = vec![0i128; n];
        let mut extra_cnt = vec![0u64; n];
        let (mut acc, mut cnt) = (0i128, 0u64);
        for j in (0..n).rev() {
            acc += self.bucket_sum[j + 1];
            cnt += self.bucket_cnt[j + 1];
            extra_sum[j] = acc;
            extra_cnt[j] = cnt;
        }
        (extra_sum, extra_cnt)
    }
}

/// The two passes over the candidates: the first finds the best gain, the second the tie-break
/// winner among the candidates within tolerance of it.
struct Chooser {
    tol_units: i128,
    /// The all-disabled rule's gain to start with.
    best_gain: i128,
    /// Starts as the disabled rule; replaced by the first candidate within tolerance if the
    /// disabled rule itself is not one.
    chosen: Candidate,
    evaluated: u64,
    tied: u64,
}

impl Chooser {
    fn first(&mut self, gain: i128) {
        self.evaluated += 1;
        self.best_gain = self.best_gain.min(gain);
    }

    /// The largest gain within tolerance of the best (after the first pass).
    fn cutoff(&self) -> i128 {
        self.best_gain + self.tol_units
    }

    fn second(&mut self, gain: i128, overrides: u64, rule: ThresholdRule) {
        let cutoff = self.cutoff();
        let within = |g: i128| g <= cutoff;
        if !within(gain) {
            return;
        }
        self.tied += 1;
        if tie_better(&rule, overrides, &self.chosen.rule, self.chosen.overrides)
            || !within(self.chosen.gain)
        {
            self.chosen = Candidate {
                gain,
                overrides,
                rule,
            };
        }
    }
}

/// Runs the threshold search for one rule family.
///
/// `landscape_p_columns` bounds the width of the returned landscape (0 = no landscape).
pub fn search_thresholds(
    probes: &[SearchProbe],
    family: RuleFamily,
    landscape_p_columns: usize,
) -> Result<(SearchOutcome, Option<Landscape>), SearchError> {
    search_prepared(
        &SearchInput::new(probes)?.all(),
        family,
        landscape_p_columns,
    )
}

/// [`search_thresholds`] on probes already prepared (ranked) for it.
pub fn search_prepared(
    input: &Probes<'_>,
    family: RuleFamily,
    landscape_p_columns: usize,
) -> Result<(SearchOutcome, Option<Landscape>), SearchError> {
    let totals = Totals::of(input)?;
    Ok(search_sweep(
        &Sweep::new(input, family),
        &totals,
        landscape_p_columns,
    ))
}

/// Both families' searches ([`search_prepared`] with [`RuleFamily::Count`], then with
/// [`RuleFamily::CountPrefill`] and its landscape) from one pass over the probes: the `count`
/// sweep is a part of the `count_prefill` one.
pub fn search_families(
    input: &Probes<'_>,
    landscape_p_columns: usize,
) -> Result<(SearchOutcome, SearchOutcome, Option<Landscape>), SearchError> {
    let totals = Totals::of(input)?;
    let both = Sweep::new(input, RuleFamily::CountPrefill);
    let (count, _) = search_sweep(&both.count_only(), &totals, 0);
    let (count_prefill, landscape) = search_sweep(&both, &totals, landscape_p_columns);
    Ok((count, count_prefill, landscape))
}

/// What every rule's mean is relative to: the probes' count and their summed efficient and
/// oracle TTFTs (units).
#[derive(Debug, Clone, Copy, Default)]
struct Totals {
    n: usize,
    base: i128,
    oracle: i128,
}

impl Totals {
    /// The totals of each group of the probes (`units` and `groups` by probe).
    fn per_group(units: &[(i64, i64)], groups: &[u32]) -> Vec<Totals> {
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

    fn add(&mut self, other: &Totals) {
        self.n += other.n;
        self.base += other.base;
        self.oracle += other.oracle;
    }

    /// The kept probes' totals: those of their groups, added (exact integers, so in any order).
    fn of(input: &Probes<'_>) -> Result<Totals, SearchError> {
        let mut totals = Totals::default();
        input.group_totals().for_each(|t| totals.add(t));
        if totals.n == 0 {
            return Err(SearchError::NoProbes);
        }
        Ok(totals)
    }
}

/// The search over one family's sweep.
fn search_sweep(
    sweep: &Sweep<'_>,
    &Totals { n, base, oracle }: &Totals,
    landscape_p_columns: usize,
) -> (SearchOutcome, Option<Landscape>) {
    let family = sweep.family;
    let n_f = n as f64;
    let to_mean = |gain: i128| (base + gain) as f64 / UNITS_PER_MS / n_f;
    let mut chooser = Chooser {
        // Tolerance on the mean (1e-9 ms) as a tolerance on the summed units: n units.
        tol_units: (TIE_TOLERANCE_MS * UNITS_PER_MS).round() as i128 * n as i128,
        best_gain: 0,
        chosen: Candidate {
            gain: 0,
            overrides: 0,
            rule: ThresholdRule::DISABLED,
        },
        evaluated: 0,
        tied: 0,
    };
    // The best gain of each r's both-term rules, so that the second pass skips the rows with no
    // rule within tolerance of the best (the chooser would ignore all of them).
    let mut row_best = vec![i128::MAX; sweep.r_values.len()];
    sweep.visit(
        &mut |gain, _, _| chooser.first(gain),
        &mut |a, extra| {
            let best = extra
                .iter()
                .min()
                .map_or(i128::MAX, |m| sweep.br_sum[a] + m);
            row_best[a] = best;
        },
        &|_| false,
    );
    let cols = landscape_columns(sweep.p_values.len(), landscape_p_columns);
    let mut rows = Vec::new();
    let cutoff = chooser.cutoff();
    sweep.visit(
        &mut |gain, overrides, rule| chooser.second(gain, overrides, rule),
        &mut |a, extra| {
            if landscape_p_columns == 0 {
                return;
            }
            let mut row = vec![to_mean(sweep.r_sum[a])];
            row.extend(cols.iter().map(|&j| to_mean(sweep.br_sum[a] + extra[j])));
            rows.push(LandscapeRow {
                r: Some(sweep.r_values[a]),
                mean_selected_ttft_ms: row,
            });
        },
        &|a| landscape_p_columns == 0 && row_best[a] > cutoff,
    );
    let landscape = (landscape_p_columns > 0).then(|| {
        let mut none_row = vec![to_mean(0)];
        none_row.extend(cols.iter().map(|&j| to_mean(sweep.p_sum[j])));
        rows.push(LandscapeRow {
            r: None,
            mean_selected_ttft_ms: none_row,
        });
        Landscape {
            p_columns: std::iter::once(None)
                .chain(cols.iter().map(|&j| Some(sweep.p_values[j])))
                .collect(),
            rows,
        }
    });
    let chosen = chooser.chosen;
    let outcome = SearchOutcome {
        family,
        best: RuleScore {
            rule: chosen.rule,
            mean_selected_ttft_ms: to_mean(chosen.gain),
            overrides: chosen.overrides,
        },
        stage_mean_ttft_ms: to_mean(0),
        oracle_mean_ttft_ms: oracle as f64 / UNITS_PER_MS / n_f,
        probes: n as u64,
        r_candidates: sweep.r_values.len() as u64,
        p_candidates: sweep.p_values.len() as u64,
        rules_evaluated: chooser.evaluated,
        tied_rules: chooser.tied,
    };
    (outcome, landscape)
}

/// The objective of one rule by direct evaluation over every probe (the reference the sweep is
/// tested against; also used to report a given rule's score).
pub fn score_rule(probes: &[SearchProbe], rule: ThresholdRule) -> RuleScore {
    let mut total = 0.0;
    let mut overrides = 0;
    for p in probes {
        let guard = match (rule.r.is_some(), rule.p.is_some()) {
            (true, true) => p.guard.both,
            (true, false) => p.guard.r_only,
            (false, true) => p.guard.p_only,
            (false, false) => false,
        };
        if guard && rule.triggers(p.r_eff, p.p_eff) {
            overrides += 1;
            total += p.ttft_cap_ms;
        } else {
            total += p.ttft_eff_ms;
        }
    }
    RuleScore {
        rule,
        mean_selected_ttft_ms: if probes.is_empty() {
            f64::NAN
        } else {
            total / probes.len() as f64
        },
        overrides,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe(r: Option<f64>, p: Option<f64>, eff: f64, cap: f64) -> SearchProbe {
        SearchProbe {
            r_eff: r,
            p_eff: p,
            ttft_eff_ms: eff,
            ttft_cap_ms: cap,
            guard: GuardPass::ALL,
        }
    }

    /// Five probes where the count optimum is r = 1 and the count_prefill optimum triggers
    /// exactly {3, 4, 5}, reachable by three (r, p) pairs that the tie-break must settle.
    fn five() -> Vec<SearchProbe> {
        vec![
            probe(Some(0.0), Some(0.1), 100.0, 200.0),
            probe(Some(1.0), Some(0.5), 150.0, 200.0),
            probe(Some(2.0), Some(1.5), 300.0, 200.0),
            probe(Some(3.0), Some(0.2), 400.0, 200.0),
            probe(Some(1.0), Some(2.0), 500.0, 250.0),
        ]
    }

    #[test]
    fn count_optimum_is_known() {
        let (out, _) = search_thresholds(&five(), RuleFamily::Count, 0).unwrap();
        assert_eq!(
            out.best.rule,
            ThresholdRule {
                r: Some(1.0),
                p: None
            }
        );
        assert_eq!(out.best.overrides, 4);
        assert!((out.best.mean_selected_ttft_ms - 190.0).abs() < 1e-12);
        assert!((out.stage_mean_ttft_ms - 290.0).abs() < 1e-12);
        // Oracle: 100 + 150 + 200 + 200 + 250 = 900.
        assert!((out.oracle_mean_ttft_ms - 180.0).abs() < 1e-12);
        assert_eq!(out.r_candidates, 4);
        assert_eq!(out.p_candidates, 0);
        // disabled + 4 r values
        assert_eq!(out.rules_evaluated, 5);
    }

    #[test]
    fn count_prefill_tie_goes_to_larger_r_then_larger_p() {
        // {3,4,5} (gain -550) is reached by (2, 0.5), (2, 1.5) and (3, 0.5): same overrides and
        // terms, so the larger r wins: (3, 0.5).
        let (out, land) = search_thresholds(&five(), RuleFamily::CountPrefill, 10).unwrap();
        assert_eq!(
            out.best.rule,
            ThresholdRule {
                r: Some(3.0),
                p: Some(0.5)
            }
        );
        assert_eq!(out.best.overrides, 3);
        assert!((out.best.mean_selected_ttft_ms - 180.0).abs() < 1e-12);
        assert_eq!(out.tied_rules, 3);
        // 1 + 4 + 5 + 4*5
        assert_eq!(out.rules_evaluated, 30);
        let land = land.unwrap();
        assert_eq!(land.p_columns.len(), 6);
        assert_eq!(land.rows.len(), 5);
        // Row r = 3, column p = 0.5 (index 3: None, 0.1, 0.2, 0.5) is the optimum.
        let row = land.rows.iter().find(|r| r.r == Some(3.0)).unwrap();
        assert!((row.mean_selected_ttft_ms[3] - 180.0).abs() < 1e-12);
        // Column "p disabled" of the disabled row is Stage.
        let stage = land.rows.iter().find(|r| r.r.is_none()).unwrap();
        assert!((stage.mean_selected_ttft_ms[0] - 290.0).abs() < 1e-12);
    }

    #[test]
    fn fewer_overrides_beats_fewer_terms() {
        let probes = vec![
            probe(Some(4.0), Some(0.1), 100.0, 100.0),
            probe(Some(5.0), Some(0.2), 400.0, 100.0),
            probe(Some(1.0), Some(3.0), 400.0, 100.0),
            probe(Some(1.0), Some(0.2), 100.0, 100.0),
        ];
        let (out, _) = search_thresholds(&probes, RuleFamily::CountPrefill, 0).unwrap();
        assert_eq!(
            out.best.rule,
            ThresholdRule {
                r: Some(5.0),
                p: Some(0.2)
            }
        );
        assert_eq!(out.best.overrides, 2);
        assert!((out.best.mean_selected_ttft_ms - 100.0).abs() < 1e-12);
    }

    #[test]
    fn fewer_terms_wins_when_a_second_term_adds_nothing() {
        // The count optimum r = 2 triggers {b, c}; (2, p = max P) triggers the same set with two
        // terms, and must lose to r alone.
        let probes = vec![
            probe(Some(0.0), Some(0.5), 100.0, 300.0),
            probe(Some(2.0), Some(0.1), 400.0, 100.0),
            probe(Some(3.0), Some(0.9), 400.0, 100.0),
        ];
        let (out, _) = search_thresholds(&probes, RuleFamily::CountPrefill, 0).unwrap();
        assert_eq!(
            out.best.rule,
            ThresholdRule {
                r: Some(2.0),
                p: None
            }
        );
        assert_eq!(out.best.overrides, 2);
    }

    #[test]
    fn both_terms_disabled_when_capable_is_never_faster() {
        let probes = vec![
            probe(Some(0.0), Some(0.5), 100.0, 300.0),
            probe(Some(7.0), Some(3.1), 400.0, 400.0),
        ];
        for family in [RuleFamily::Count, RuleFamily::CountPrefill] {
            let (out, _) = search_thresholds(&probes, family, 0).unwrap();
            // The zero-gain override of the second probe ties with Stage: fewer overrides wins.
            assert_eq!(out.best.rule, ThresholdRule::DISABLED, "{family:?}");
            assert_eq!(out.best.overrides, 0);
            assert!((out.best.mean_selected_ttft_ms - 250.0).abs() < 1e-12);
        }
    }

    #[test]
    fn p_only_rule_when_r_carries_no_signal() {
        // All R equal; P separates fast from slow: p disabled loses to P > 1.0.
        let probes = vec![
            probe(Some(2.0), Some(0.5), 100.0, 300.0),
            probe(Some(2.0), Some(1.0), 100.0, 300.0),
            probe(Some(2.0), Some(2.0), 900.0, 300.0),
        ];
        let (out, _) = search_thresholds(&probes, RuleFamily::CountPrefill, 0).unwrap();
        assert_eq!(
            out.best.rule,
            ThresholdRule {
                r: None,
                p: Some(1.0)
            }
        );
        assert_eq!(out.best.overrides, 1);
    }

    #[test]
    fn means_within_tolerance_tie_and_go_to_fewer_overrides() {
        // r = 1 also overrides the second probe and gains 1.2e-9 ms in total: 0.6e-9 ms on the
        // mean, inside the tolerance, so the rule with fewer overrides (r = 3) wins.
        let probes = vec![
            probe(Some(3.0), None, 10.0, 9.0),
            probe(Some(1.0), None, 10.0, 10.0 - 1.2e-9),
        ];
        let (out, _) = search_thresholds(&probes, RuleFamily::Count, 0).unwrap();
        assert_eq!(out.best.rule.r, Some(3.0));
        assert_eq!(out.tied_rules, 2);
        // 5e-9 ms in total (2.5e-9 on the mean) is outside: r = 1 wins.
        let probes = vec![
            probe(Some(3.0), None, 10.0, 9.0),
            probe(Some(1.0), None, 10.0, 10.0 - 5e-9),
        ];
        let (out, _) = search_thresholds(&probes, RuleFamily::Count, 0).unwrap();
        assert_eq!(out.best.rule.r, Some(1.0));
    }

    #[test]
    fn guard_failures_and_invalid_inputs_never_trigger() {
        let mut probes = five();
        // Probe 5 (the largest gain) fails the guard whatever the terms; probe 4 has no valid R.
        probes[4].guard = GuardPass {
            r_only: false,
            p_only: false,
            both: false,
        };
        probes[3].r_eff = None;
        let (out, _) = search_thresholds(&probes, RuleFamily::Count, 0).unwrap();
        // Remaining gains by R: R0 +100, R1 +50, R2 -100 -> r = 2 triggers only probe 3.
        assert_eq!(out.best.rule.r, Some(2.0));
        assert_eq!(out.best.overrides, 1);
        assert_eq!(out.best, score_rule(&probes, out.best.rule));
    }

    #[test]
    fn bad_ttft_and_empty_input_are_errors() {
        assert_eq!(
            search_thresholds(&[], RuleFamily::Count, 0).unwrap_err(),
            SearchError::NoProbes
        );
        let probes = vec![probe(Some(1.0), None, f64::NAN, 1.0)];
        assert!(matches!(
            search_thresholds(&probes, RuleFamily::Count, 0),
            Err(SearchError::BadTtft { index: 0, .. })
        ));
        // The first bad probe is named, however the check is split between threads.
        let mut many = vec![probe(Some(1.0), None, 10.0, 20.0); 100_000];
        many[70_000].ttft_cap_ms = -1.0;
        many[31_337].ttft_eff_ms = f64::INFINITY;
        many[99_999].ttft_eff_ms = f64::NAN;
        assert!(matches!(
            search_thresholds(&many, RuleFamily::Count, 0),
            Err(SearchError::BadTtft { index: 31_337, .. })
        ));
    }

    /// Sorted distinct finite values (the brute force's own candidate list).
    fn distinct(values: impl Iterator<Item = f64>) -> Vec<f64> {
        let mut v: Vec<f64> = values.filter(|x| x.is_finite()).collect();
        v.sort_by(f64::total_cmp);
        v.dedup();
        v
    }

    /// Brute force: every candidate scored directly, the same tie-break.
    fn brute(probes: &[SearchProbe], family: RuleFamily) -> RuleScore {
        let rs: Vec<Option<f64>> = std::iter::once(None)
            .chain(
                distinct(probes.iter().filter_map(|p| p.r_eff))
                    .into_iter()
                    .map(Some),
            )
            .collect();
        let ps: Vec<Option<f64>> = if family == RuleFamily::Count {
            vec![None]
        } else {
            std::iter::once(None)
                .chain(
                    distinct(probes.iter().filter_map(|p| p.p_eff))
                        .into_iter()
                        .map(Some),
                )
                .collect()
        };
        let scores: Vec<RuleScore> = rs
            .iter()
            .flat_map(|&r| ps.iter().map(move |&p| ThresholdRule { r, p }))
            .map(|rule| score_rule(probes, rule))
            .collect();
        let best = scores
            .iter()
            .map(|s| s.mean_selected_ttft_ms)
            .fold(f64::INFINITY, f64::min);
        let mut chosen: Option<RuleScore> = None;
        for s in scores {
            if s.mean_selected_ttft_ms <= best + 1e-9 {
                chosen = match chosen {
                    Some(c) if !tie_better(&s.rule, s.overrides, &c.rule, c.overrides) => Some(c),
                    _ => Some(s),
                };
            }
        }
        chosen.unwrap()
    }

    /// Small integer-valued probes (many ties), each guard flag true 80 % of the time.
    fn arb_probe() -> impl proptest::strategy::Strategy<Value = SearchProbe> {
        use proptest::prelude::*;
        let guard = (
            proptest::bool::weighted(0.8),
            proptest::bool::weighted(0.8),
            proptest::bool::weighted(0.8),
        );
        (
            proptest::option::weighted(0.9, 0u8..6),
            proptest::option::weighted(0.9, 0u8..8),
            0u16..50,
            0u16..50,
            guard,
        )
            .prop_map(|(r, p, e, c, (r_only, p_only, both))| SearchProbe {
                r_eff: r.map(f64::from),
                p_eff: p.map(|p| f64::from(p) / 4.0),
                ttft_eff_ms: f64::from(e) * 10.0,
                ttft_cap_ms: f64::from(c) * 10.0,
                guard: GuardPass {
                    r_only,
                    p_only,
                    both,
                },
            })
    }

    proptest::proptest! {
        #[test]
        fn sweep_matches_brute_force(
            probes in proptest::collection::vec(arb_probe(), 1..40),
            prefill in proptest::bool::ANY,
        ) {
            let family = if prefill { RuleFamily::CountPrefill } else { RuleFamily::Count };
            let (out, _) = search_thresholds(&probes, family, 0).unwrap();
            let expect = brute(&probes, family);
            proptest::prop_assert_eq!(out.best.rule, expect.rule);
            proptest::prop_assert_eq!(out.best.overrides, expect.overrides);
            proptest::prop_assert!((out.best.mean_selected_ttft_ms - expect.mean_selected_ttft_ms).abs() < 1e-9);
        }

        /// A subset taken from prepared probes searches exactly like the subset prepared anew
        /// (what the stability seeds rely on): same outcome and landscape, bit for bit, and the
        /// same count; with each probe a group of its own ([`SearchInput::new`]) and with
        /// probes in a few groups (conditions, as the seeds take them).
        #[test]
        fn a_subset_searches_like_its_probes(
            raw in proptest::collection::vec((arb_probe(), 0u32..6, proptest::bool::ANY), 1..60),
            keep_groups in proptest::collection::vec(proptest::bool::ANY, 6),
            own_groups in proptest::bool::ANY,
            prefill in proptest::bool::ANY,
        ) {
            let probes: Vec<SearchProbe> = raw.iter().map(|t| t.0).collect();
            let (input, keep, kept_flag): (SearchInput, Mask, Vec<bool>) = if own_groups {
                let flags: Vec<bool> = raw.iter().map(|t| t.2).collect();
                (SearchInput::new(&probes).unwrap(), Mask::from_fn(raw.len(), |i| raw[i].2), flags)
            } else {
                let flags = raw.iter().map(|t| keep_groups[t.1 as usize]).collect();
                let input = SearchInput::grouped(&probes, |i| raw[i].1).unwrap();
                (input, Mask::from_fn(keep_groups.len(), |g| keep_groups[g]), flags)
            };
            let kept: Vec<SearchProbe> =
                probes.iter().zip(&kept_flag).filter(|(_, k)| **k).map(|(p, _)| *p).collect();
            let family = if prefill { RuleFamily::CountPrefill } else { RuleFamily::Count };
            let subset = input.subset(&keep);
            proptest::prop_assert_eq!(subset.len(), kept.len());
            let from_subset = search_prepared(&subset, family, 7);
            let anew = search_thresholds(&kept, family, 7);
            match (from_subset, anew) {
                (Ok(a), Ok(b)) => proptest::prop_assert_eq!(a, b),
                (Err(a), Err(b)) => proptest::prop_assert_eq!(a, b),
                (a, b) => proptest::prop_assert!(false, "{:?} vs {:?}", a, b),
            }
        }

        /// Each R's probes sorted by P or left in probe order: the same searches, bit for
        /// bit (what the sums read does not depend on the order within one R).
        #[test]
        fn sorting_by_p_within_r_changes_no_search(
            raw in proptest::collection::vec((arb_probe(), 0u32..6), 1..60),
            keep_groups in proptest::collection::vec(proptest::bool::ANY, 6),
        ) {
            let probes: Vec<SearchProbe> = raw.iter().map(|t| t.0).collect();
            let group_of = |i: usize| raw[i].1;
            let sorted = SearchInput::grouped_sorting_p_above(&probes, group_of, 0).unwrap();
            let unsorted = SearchInput::grouped_sorting_p_above(&probes, group_of, usize::MAX).unwrap();
            let keep = Mask::from_fn(keep_groups.len(), |g| keep_groups[g]);
            for (a, b) in [(sorted.all(), unsorted.all()), (sorted.subset(&keep), unsorted.subset(&keep))] {
                match (search_families(&a, 7), search_families(&b, 7)) {
                    (Ok(x), Ok(y)) => proptest::prop_assert_eq!(x, y),
                    (Err(x), Err(y)) => proptest::prop_assert_eq!(x, y),
                    (x, y) => proptest::prop_assert!(false, "{:?} vs {:?}", x, y),
                }
            }
        }

        /// Both families from one sweep are each family searched alone, bit for bit.
        #[test]
        fn both_families_at_once_search_like_each_alone(
            probes in proptest::collection::vec(arb_probe(), 1..60),
        ) {
            let input = SearchInput::new(&probes).unwrap();
            let (count, count_prefill, landscape) = search_families(&input.all(), 7).unwrap();
            let alone = |family| search_prepared(&input.all(), family, 7).unwrap();
            proptest::prop_assert_eq!((count, None), (alone(RuleFamily::Count).0, None::<Landscape>));
            proptest::prop_assert_eq!((count_prefill, landscape), alone(RuleFamily::CountPrefill));
        }
    }
}
