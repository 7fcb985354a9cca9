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

mod input;
mod sweep;
mod tally;

pub use input::{Mask, Probes, SearchInput};
use input::{Totals, fires_by_rank};
use rayon::prelude::*;
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};
use sweep::{Sweep, search_sweep};
/// The search's results, as `selection.json` holds them: the run directory's types.
pub use sy_rundir::artifact::selection::{
    Landscape, LandscapeRow, RuleFamily, RuleScore, SearchOutcome, ThresholdRule,
};
pub use sy_selector::GuardPass;
use sy_selector::{Thresholds, count_trigger, p_trigger, r_trigger};
use tally::{RankTally, landscape_columns};

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

/// Whether `rule`'s trigger fires for these observations (guard not included):
/// `sy_selector::count_trigger`.
pub fn triggers(rule: &ThresholdRule, r_eff: Option<f64>, p_eff: Option<f64>) -> bool {
    let thresholds = Thresholds {
        r: rule.r,
        p: rule.p,
    };
    count_trigger(&thresholds, r_eff, p_eff)
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
        if guard && triggers(&rule, p.r_eff, p.p_eff) {
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
mod tests;
