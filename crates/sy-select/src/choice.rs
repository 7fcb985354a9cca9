//! The choice itself, as one function of in-memory inputs: search r/p on the fit split, replay
//! each variant with its own thresholds on the selection split, choose one threshold rule, one
//! estimator and the bundle's variant. `select::run` calls it once; the stability check
//! ([`crate::stability`]) calls it once per split seed.

use std::collections::BTreeMap;

use sy_selector::{RuleParams, Thresholds, Variant, thresholds_read};

pub use crate::error::ChoiceError;
use crate::evaluate::{
    Detail, EvalPair, Replay, SelectedTtfts, VariantReplay, VariantStats, replay_variants,
};
use crate::search::{
    Landscape, Probes, SearchOutcome, TIE_TOLERANCE_MS, ThresholdRule, search_families,
};
/// How a candidate was chosen: the run directory's type (`selection.json` holds three).
pub use sy_rundir::artifact::selection::Choice;

/// Everything the choice produced.
#[derive(Debug, Clone)]
pub struct Choices {
    pub search_count: SearchOutcome,
    pub search_count_prefill: SearchOutcome,
    pub landscape: Option<Landscape>,
    /// Each variant with its own searched thresholds, on the selection split.
    pub candidates: Replay,
    /// The parameters each candidate was replayed with, in the order of `candidates`.
    pub candidate_params: Vec<(Variant, RuleParams)>,
    /// What each candidate selected for every pair, in pair order (empty unless the replay
    /// was made with [`Detail::Full`]).
    pub candidate_selected: SelectedTtfts,
    pub threshold_rule: Choice,
    pub estimator: Choice,
    /// The better of the chosen threshold rule and the chosen estimator.
    pub bundle_choice: Choice,
    /// The thresholds of the chosen threshold rule.
    pub thresholds: Thresholds,
    /// The frozen parameters (`base` with `thresholds`).
    pub params: RuleParams,
}

impl Choices {
    /// The frozen parameters' (`params`) replay of every variant on the selection split
    /// (`pairs`, the candidates' pairs), and what it selected, in [`Variant::ALL`] order: what
    /// [`crate::evaluate::replay_all_keeping`] gives. A variant whose candidate replay read the
    /// same parameters ([`thresholds_read`]: every variant but, when its thresholds differ, the
    /// threshold rule not chosen) is taken from the candidates, which made the same decisions,
    /// instead of deciding every pair again; the selected TTFTs it takes are moved out of
    /// `candidate_selected`.
    pub fn frozen_replay<P: std::borrow::Borrow<EvalPair>>(
        &mut self,
        pairs: &[P],
        unmeasured: u64,
    ) -> (Replay, SelectedTtfts) {
        let frozen = &self.params;
        let read = |v: Variant, p: &RuleParams| RuleParams {
            thresholds: thresholds_read(v, &p.thresholds),
            ..p.clone()
        };
        let mut reused: Vec<Option<(VariantReplay, Vec<f64>)>> = Variant::ALL
            .iter()
            .map(|&v| {
                let (_, used) = self.candidate_params.iter().find(|(c, _)| *c == v)?;
                let replay = self.candidates.get(v)?;
                let (_, selected) = self.candidate_selected.iter_mut().find(|(c, _)| *c == v)?;
                let same = read(v, used) == read(v, frozen) && selected.len() == pairs.len();
                same.then(|| (replay.clone(), std::mem::take(selected)))
            })
            .collect();
        let missing: Vec<(Variant, &RuleParams)> = (Variant::ALL.iter().zip(&reused))
            .filter(|(_, r)| r.is_none())
            .map(|(&v, _)| (v, frozen))
            .collect();
        let (replayed, selected) = replay_variants(&missing, pairs, Detail::Full);
        let mut replayed = replayed.into_iter().zip(selected);
        let (variants, selected) = (Variant::ALL.iter().zip(&mut reused))
            .filter_map(|(&v, r)| {
                let (replay, ttfts) = r.take().or_else(|| {
                    let (replay, (_, ttfts)) = replayed.next()?;
                    Some((replay, ttfts))
                })?;
                Some((replay, (v, ttfts)))
            })
            .unzip();
        (Replay::of(pairs, unmeasured, variants), selected)
    }
}

/// Compares two variants' replays: better mean (beyond the tie tolerance), then fewer
/// overrides, then the first (simpler) one.
pub fn choose(first: (Variant, &VariantStats), second: (Variant, &VariantStats)) -> Choice {
    let (a, sa) = first;
    let (b, sb) = second;
    let means = BTreeMap::from([
        (a.as_str().to_string(), sa.mean_selected_ttft_ms),
        (b.as_str().to_string(), sb.mean_selected_ttft_ms),
    ]);
    let diff = sb.mean_selected_ttft_ms - sa.mean_selected_ttft_ms;
    let better = "lower mean selected TTFT on the selection split".to_string();
    let fewer = "tie on mean selected TTFT; fewer overrides".to_string();
    let (variant, against, reason) = if diff.abs() > TIE_TOLERANCE_MS || diff.is_nan() {
        if diff < 0.0 {
            (b, a, better)
        } else {
            (a, b, better)
        }
    } else if sb.changed < sa.changed {
        (b, a, fewer)
    } else if sa.changed < sb.changed {
        (a, b, fewer)
    } else {
        (
            a,
            b,
            format!("tie on mean selected TTFT and overrides; the simpler rule ({a})"),
        )
    };
    Choice {
        variant,
        against,
        mean_selected_ttft_ms: means,
        reason,
    }
}

fn with_rule(base: &RuleParams, t: ThresholdRule) -> RuleParams {
    let mut p = base.clone();
    p.thresholds = Thresholds { r: t.r, p: t.p };
    p
}

/// Searches the fit split's `probes` (guard G with `base`'s limits: a subset of the run's
/// [`crate::search_view::SearchView`]), replays the candidates on `sel_pairs` with `detail` and
/// chooses (see the module docs).
pub fn choose_on_probes<P: std::borrow::Borrow<EvalPair>>(
    base: &RuleParams,
    probes: &Probes<'_>,
    sel_pairs: &[P],
    sel_unmeasured: u64,
    landscape_columns: usize,
    detail: Detail,
) -> Result<Choices, ChoiceError> {
    let searched = search_families(probes, landscape_columns).map_err(ChoiceError::Search)?;
    choose_searched(base, searched, sel_pairs, sel_unmeasured, detail)
}

/// Both rule families' searches of the fit split ([`search_families`]): `count`,
/// `count_prefill` and its landscape.
pub type Searched = (SearchOutcome, SearchOutcome, Option<Landscape>);

/// [`choose_on_probes`] after its search: replays the candidates on `sel_pairs` with `detail`
/// (the threshold rules with their searched thresholds) and chooses.
pub fn choose_searched<P: std::borrow::Borrow<EvalPair>>(
    base: &RuleParams,
    (search_count, search_cp, landscape): Searched,
    sel_pairs: &[P],
    sel_unmeasured: u64,
    detail: Detail,
) -> Result<Choices, ChoiceError> {
    let count_params = with_rule(base, search_count.best.rule);
    let cp_params = with_rule(base, search_cp.best.rule);
    // Each variant replayed once, the threshold rules with their own searched thresholds.
    let variants = Variant::ALL.map(|v| {
        let params = match v {
            Variant::Count => &count_params,
            Variant::CountPrefill => &cp_params,
            _ => base,
        };
        (v, params)
    });
    let (replays, candidate_selected) = replay_variants(&variants, sel_pairs, detail);
    let candidates = Replay::of(sel_pairs, sel_unmeasured, replays);
    let candidate_params = variants.map(|(v, p)| (v, p.clone())).to_vec();
    let stats = |v: Variant| {
        candidates
            .get(v)
            .map(|r| r.all.clone())
            .ok_or(ChoiceError::MissingReplay(v))
    };
    let threshold_rule = choose(
        (Variant::Count, &stats(Variant::Count)?),
        (Variant::CountPrefill, &stats(Variant::CountPrefill)?),
    );
    let estimator = choose(
        (Variant::Blind, &stats(Variant::Blind)?),
        (Variant::Cache, &stats(Variant::Cache)?),
    );
    let thresholds = match threshold_rule.variant {
        Variant::Count => Thresholds {
            r: search_count.best.rule.r,
            p: None,
        },
        _ => Thresholds {
            r: search_cp.best.rule.r,
            p: search_cp.best.rule.p,
        },
    };
    let bundle_choice = choose(
        (estimator.variant, &stats(estimator.variant)?),
        (threshold_rule.variant, &stats(threshold_rule.variant)?),
    );
    let mut params = base.clone();
    params.thresholds = thresholds;
    Ok(Choices {
        search_count,
        search_count_prefill: search_cp,
        landscape,
        candidates,
        candidate_params,
        candidate_selected,
        threshold_rule,
        estimator,
        bundle_choice,
        thresholds,
        params,
    })
}
