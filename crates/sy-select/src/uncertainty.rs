//! How sure the headline numbers are: grouped bootstrap intervals (whole conditions resampled,
//! `sy_stats`) for every variant's mean and p90 selected TTFT on the selection split, their
//! change versus Stage (paired: the same resampled conditions for both), its regret versus the
//! per-probe oracle, and the margins.
//!
//! Methods (their coverage is measured by `crates/sy-stats/benches/coverage_study.rs`):
//! means, the mean change versus Stage and the regret are **studentized** intervals
//! (bootstrap-t), the headline's mean change is in addition **simultaneous over the variants
//! the choice compared** (selection-adjusted: the chosen variant was picked on the same
//! conditions) at half the miss rate per side ([`sy_stats::selection_adjusted_level`]: 97.5 %
//! for 95 %, so that it covers at least 93 % where a few conditions carry the effect); p90s,
//! the p90 change and the margins are percentile intervals. An interval is marked *indicative*
//! when the study found its method short of its level for data like these: a mean change
//! carried by fewer than [`MIN_CHANGED_CONDITIONS`] conditions, a p90 change resting on fewer
//! than [`MIN_TAIL_CONDITIONS`] conditions above the 90th percentile, and always the p90 levels
//! and the margins' δ (percentile intervals of a 90th percentile).

use std::collections::BTreeMap;

use rayon::prelude::*;
use sy_calibration::margins::MarginsFile;
use sy_selector::{Model, Variant};
use sy_stats::{
    BootstrapConfig, GroupDraws, Interval, SeriesIntervals, Tails, bootstrap_quantile,
    selection_adjusted_level,
};

use crate::evaluate::{EvalPair, SelectedTtfts};
/// The intervals and the headline, as `selection.json` holds them: the run directory's types.
pub use sy_rundir::artifact::selection::{
    Comparisons, Headline, SelectionAdjusted, Uncertainty, VariantUncertainty,
};

/// The percentile of the "p90" statistics.
const P90: f64 = 0.9;

/// Below this many conditions in which the chosen variant changes the selection, the headline's
/// mean-change interval is indicative: the coverage study measured 75–90 % coverage with fewer
/// than 5 such conditions where a few conditions carry most of the effect, and 94–99 % with 5–9
/// (docs/methodology.md).
pub const MIN_CHANGED_CONDITIONS: u64 = 5;

/// Below this many conditions with a row above the 90th percentile (the fewer of the variant's
/// and Stage's), the p90 change's interval is indicative: the coverage study measured 87–93 %
/// coverage below 20 and 95 % from 20 (docs/methodology.md).
pub const MIN_TAIL_CONDITIONS: u64 = 20;

/// What the coverage study measured for the variant table's p90 intervals (nominal 95 %).
const P90_LEVEL_COVERAGE: &str =
    "the coverage study measured 87–91 % coverage at 30 conditions, 92–95 % at 60 and 120";

/// What the coverage study measured for the margins' δ intervals (nominal 95 %); below 35
/// conditions no distribution-free 95 % interval of a 90th percentile has a finite upper end.
const DELTA_COVERAGE: &str = "the coverage study measured 83–87 % coverage at 30 conditions, 92–94 % at 60 and 120; below 35 conditions no distribution-free 95 % interval of a 90th percentile has a finite upper end";

/// How each interval is computed (in `selection.json`, so a reader need not look it up).
pub fn interval_methods() -> BTreeMap<String, String> {
    BTreeMap::from([
        (
            "mean_selected_ttft_ms".into(),
            "studentized (bootstrap-t) over conditions, cluster-robust standard error".into(),
        ),
        (
            "p90_selected_ttft_ms".into(),
            "percentile, grouped bootstrap over conditions".into(),
        ),
        (
            "mean_change_vs_stage_ms".into(),
            "studentized (bootstrap-t) over conditions, cluster-robust standard error".into(),
        ),
        (
            "p90_change_vs_stage_ms".into(),
            "percentile, grouped bootstrap over conditions (paired)".into(),
        ),
        (
            "regret_ms".into(),
            "studentized (bootstrap-t) over conditions, versus the per-probe oracle".into(),
        ),
        (
            "headline.mean_change_vs_stage_ms".into(),
            "studentized, simultaneous over the compared variants (max-t; selection-adjusted), at half the miss rate per side (97.5 % for 95 %)"
                .into(),
        ),
        (
            "margins".into(),
            "percentile, grouped bootstrap over uncertainty-split conditions".into(),
        ),
    ])
}

/// A variant without intervals (its bootstrap could not be made).
fn no_intervals(variant: Variant) -> VariantUncertainty {
    tracing::warn!("no intervals for {variant}: its bootstrap panicked");
    VariantUncertainty {
        variant,
        mean_selected_ttft_ms: None,
        p90_selected_ttft_ms: None,
        mean_change_vs_stage_ms: None,
        p90_change_vs_stage_ms: None,
        regret_ms: None,
        changed_conditions: 0,
        p90_tail_conditions: 0,
    }
}

/// The coefficient intervals of `fit.json` by `<model>.<estimator>` (see
/// [`Uncertainty::coefficients`]).
pub fn coefficient_intervals(
    fit: Option<&sy_rundir::artifact::fit::FitFile>,
) -> BTreeMap<String, Vec<Interval>> {
    let Some(fit) = fit else {
        return BTreeMap::new();
    };
    let mut out = BTreeMap::new();
    for model in [Model::Efficient, Model::Capable] {
        let m = fit.models.get(model);
        for (estimator, correction) in m.corrections() {
            if let Some(iv) = &correction.coefficient_intervals {
                let key = format!("{}.{}", model.as_str(), estimator.as_str());
                out.insert(key, iv.clone());
            }
        }
    }
    out
}

fn log_err<T>(what: &str, r: Result<T, sy_stats::BootstrapError>) -> Option<T> {
    r.map_err(|e| tracing::warn!("no interval for {what}: {e}"))
        .ok()
}

/// Intervals of every variant over `pairs` and of both margins; `selected` holds each
/// variant's selected TTFT of every pair, in pair order
/// ([`crate::evaluate::replay_all_keeping`]).
pub fn uncertainty<P: std::borrow::Borrow<EvalPair> + Sync>(
    selected: &SelectedTtfts,
    pairs: &[P],
    margins: &MarginsFile,
    cfg: &BootstrapConfig,
) -> Uncertainty {
    let groups: Vec<u64> = pairs.iter().map(|p| p.borrow().condition).collect();
    // Every interval of every variant is drawn with the same seed: the draws are made once and
    // Stage's resampled mean and p90 once, for all five variants' changes versus Stage
    // (`sy_stats::GroupDraws`: the same numbers as bootstrapping each interval on its own).
    let draws = GroupDraws::new(&groups, cfg);
    let series = |variant: Variant| {
        let draws = draws.as_ref().map_err(Clone::clone)?;
        let ttfts = selected.iter().find(|(v, _)| *v == variant);
        // A variant without its TTFTs fails as a series of the wrong length.
        draws.series(ttfts.map_or(&[][..], |(_, t)| t), P90)
    };
    let stage = series(Variant::Stage);
    let stage_ttfts = selected.iter().find(|(v, _)| *v == Variant::Stage);
    let oracle: Vec<f64> = pairs.iter().map(|p| p.borrow().oracle_ttft()).collect();
    // A mean level is the mean's change versus zero (the same studentized interval).
    let zeros = vec![0.0; pairs.len()];
    let studentized = |variant: Variant| {
        let draws = draws.as_ref().ok()?;
        let (_, own) = selected.iter().find(|(v, _)| *v == variant)?;
        let (_, st) = stage_ttfts?;
        let change = draws.mean_changes_studentized(&[own], st).each.pop()?;
        let regret = draws.mean_changes_studentized(&[own], &oracle).each.pop()?;
        let level = draws.mean_changes_studentized(&[own], &zeros).each.pop()?;
        let changed = changed_conditions(own, st, &groups);
        let tails = sy_stats::tail_groups(own, &groups, P90)
            .min(sy_stats::tail_groups(st, &groups, P90)) as u64;
        Some((level, change, regret, changed, tails))
    };
    let one = |variant: Variant| {
        let name = variant.as_str();
        // `series` fails only without draws or with a wrong length: then all four fail.
        // Stage's own row reuses its resamples (the reference) instead of drawing them again.
        let own = match variant {
            Variant::Stage => stage.clone(),
            _ => series(variant),
        };
        let intervals = match (own, &stage, &draws) {
            (Ok(sel), Ok(stage), Ok(draws)) => draws.intervals(&sel, stage),
            (Err(e), ..) => SeriesIntervals::all(e),
            (_, Err(e), _) | (_, _, Err(e)) => SeriesIntervals::all(e.clone()),
        };
        let (level, change, regret, changed, tails) = match studentized(variant) {
            Some((l, c, r, changed, tails)) => (
                log_err(name, l),
                log_err(name, c),
                log_err(name, r),
                changed,
                tails,
            ),
            None => (None, None, None, 0, 0),
        };
        VariantUncertainty {
            variant,
            mean_selected_ttft_ms: level,
            p90_selected_ttft_ms: log_err(name, intervals.quantile),
            mean_change_vs_stage_ms: change,
            p90_change_vs_stage_ms: log_err(name, intervals.quantile_change),
            regret_ms: regret,
            changed_conditions: changed,
            p90_tail_conditions: tails,
        }
    };
    // The variants are independent: computed in parallel, kept in order.
    let variants: Vec<VariantUncertainty> = Variant::ALL
        .par_iter()
        .map(|&v| {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| one(v)))
                .unwrap_or_else(|_| no_intervals(v))
        })
        .collect();
    let mut conditions = groups.clone();
    conditions.sort_unstable();
    conditions.dedup();
    let margin = |name: &str, e: &sy_calibration::margins::EstimatorMargin| {
        let scores: Vec<f64> = e
            .estimate
            .condition_scores
            .iter()
            .map(|c| c.score_ms)
            .collect();
        let ids: Vec<usize> = (0..scores.len()).collect();
        let level = margins.level;
        (
            name.to_string(),
            log_err(name, bootstrap_quantile(&scores, &ids, level, cfg)),
        )
    };
    Uncertainty {
        bootstrap: *cfg,
        selection_conditions: conditions.len() as u64,
        variants,
        margins: (margins.estimators().into_iter())
            .map(|(e, m)| margin(e.as_str(), m))
            .collect(),
        coefficients: BTreeMap::new(),
        methods: interval_methods(),
        selection_adjusted: None,
    }
}

/// Conditions (of `groups`, one id per row) in which `a` and `b` differ in some row.
fn changed_conditions(a: &[f64], b: &[f64], groups: &[u64]) -> u64 {
    let mut ids: Vec<u64> = (a.iter().zip(b).zip(groups))
        .filter(|((x, y), _)| x != y)
        .map(|(_, g)| *g)
        .collect();
    ids.sort_unstable();
    ids.dedup();
    ids.len() as u64
}

/// The chosen variant's mean change versus Stage, simultaneous over the non-Stage variants in
/// `candidates` (what each candidate selected per pair, in pair order): the choice was made
/// among them on these pairs.
pub fn selection_adjusted<P: std::borrow::Borrow<EvalPair>>(
    candidates: &SelectedTtfts,
    pairs: &[P],
    chosen: Variant,
    cfg: &BootstrapConfig,
) -> SelectionAdjusted {
    let groups: Vec<u64> = pairs.iter().map(|p| p.borrow().condition).collect();
    let compared: Vec<&(Variant, Vec<f64>)> = candidates
        .iter()
        .filter(|(v, t)| *v != Variant::Stage && t.len() == pairs.len())
        .collect();
    let stage = candidates.iter().find(|(v, _)| *v == Variant::Stage);
    let interval = (|| {
        let (_, stage) = stage?;
        let draws = log_err(
            "the selection-adjusted interval",
            GroupDraws::new(&groups, cfg),
        )?;
        let series: Vec<&[f64]> = compared.iter().map(|(_, t)| t.as_slice()).collect();
        let at = compared.iter().position(|(v, _)| *v == chosen)?;
        let tails = Tails::equal(selection_adjusted_level(cfg.level));
        log_err(
            "the selection-adjusted interval",
            draws.studentized(&series, stage).simultaneous(at, tails),
        )
    })();
    SelectionAdjusted {
        compared: compared.iter().map(|(v, _)| *v).collect(),
        mean_change_vs_stage_ms: interval,
    }
}

/// A signed number of milliseconds with one decimal and a typographic minus ("−14.5", "+3.7").
pub fn fmt_signed(v: f64) -> String {
    format!("{v:+.1}").replacen('-', "−", 1)
}

/// "−14.5 ms (95 % CI −27.3 to −3.7)": how the report, the terminal and the caveats print an
/// interval (its own level: "97.5 % CI" for the selection-adjusted headline).
pub fn fmt_interval(i: &Interval) -> String {
    format!(
        "{} ms ({} % CI {} to {})",
        fmt_signed(i.estimate),
        fmt_level(i.level),
        fmt_signed(i.lo),
        fmt_signed(i.hi)
    )
}

/// A level as a percentage without trailing zeros ("95", "97.5").
pub fn fmt_level(level: f64) -> String {
    let pct = format!("{:.2}", 100.0 * level);
    pct.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// Builds the headline and its caveats.
pub fn headline(
    choices: (Variant, Variant, Variant),
    u: &Uncertainty,
    stability: Option<&crate::stability::Stability>,
    compared: Comparisons,
) -> Headline {
    let (bundle_variant, threshold_rule, estimator) = choices;
    let mine = u.get(bundle_variant);
    let unadjusted = mine.and_then(|v| v.mean_change_vs_stage_ms);
    let adjusted = u
        .selection_adjusted
        .as_ref()
        .and_then(|a| a.mean_change_vs_stage_ms);
    let mean_change = adjusted.or(unadjusted);
    let p90_change = mine.and_then(|v| v.p90_change_vs_stage_ms);
    let distinguishable = mean_change.is_some_and(|i| i.excludes_zero() && i.estimate < 0.0);
    let mut indicative = Vec::new();
    if let Some(v) = mine {
        if bundle_variant != Variant::Stage && v.changed_conditions < MIN_CHANGED_CONDITIONS {
            indicative.push(format!(
                "the mean change's interval is indicative: {bundle_variant} changes the selection in {} of {} selection-split conditions (the coverage study measured 75–90 % coverage with fewer than {MIN_CHANGED_CONDITIONS} where a few conditions carry the effect)",
                v.changed_conditions, u.selection_conditions
            ));
        }
        if v.p90_tail_conditions < MIN_TAIL_CONDITIONS {
            indicative.push(format!(
                "the p90 change's interval is indicative: it rests on {} conditions above the 90th percentile (the coverage study measured 87–93 % coverage with fewer than {MIN_TAIL_CONDITIONS})",
                v.p90_tail_conditions
            ));
        }
    }
    indicative.push(format!(
        "the variant table's p90 intervals are indicative: percentile intervals of a 90th percentile over {} conditions ({P90_LEVEL_COVERAGE})",
        u.selection_conditions
    ));
    if let Some(g) = u.margins.values().flatten().map(|i| i.groups).max() {
        indicative.push(format!(
            "the margins' δ intervals are indicative: percentile intervals of a 90th percentile over {g} uncertainty-split conditions ({DELTA_COVERAGE})"
        ));
    }
    let mut caveats = indicative.clone();
    match &mean_change {
        Some(i) if !distinguishable => caveats.push(format!(
            "the gain of {bundle_variant} over Stage is not distinguishable from zero: mean selected TTFT change {} over {} selection-split conditions",
            fmt_interval(i),
            u.selection_conditions
        )),
        None => caveats.push(format!(
            "no interval for the change of {bundle_variant} versus Stage (too few selection-split conditions)"
        )),
        _ => {}
    }
    if let Some(i) = p90_change.filter(|i| i.estimate > 0.0) {
        caveats.push(format!(
            "{bundle_variant} makes the 90th percentile worse than Stage: {}",
            fmt_interval(&i)
        ));
    }
    if let Some(s) = stability.filter(|s| !s.stable) {
        caveats.push(format!(
            "the choice is unstable: {bundle_variant} is chosen with {:.0} % of {} split seeds ({})",
            100.0 * s.chosen_share,
            s.runs.len(),
            s.bundle_variant_counts
                .iter()
                .map(|(k, v)| format!("{k} {v}×"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    Headline {
        bundle_variant,
        threshold_rule,
        estimator,
        mean_change_vs_stage_ms: mean_change,
        mean_change_unadjusted_ms: unadjusted,
        p90_change_vs_stage_ms: p90_change,
        regret_ms: mine.and_then(|v| v.regret_ms),
        compared,
        indicative,
        distinguishable_from_stage: distinguishable,
        stable: stability.map(|s| s.stable),
        caveats,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iv(estimate: f64, lo: f64, hi: f64) -> Interval {
        Interval {
            estimate,
            lo,
            hi,
            level: 0.95,
            resamples: 100,
            groups: 30,
        }
    }

    fn uncertainty_with(changed: u64, tails: u64, adjusted: Option<Interval>) -> Uncertainty {
        let v = VariantUncertainty {
            variant: Variant::Cache,
            mean_selected_ttft_ms: Some(iv(70.0, 60.0, 80.0)),
            p90_selected_ttft_ms: Some(iv(140.0, 120.0, 160.0)),
            mean_change_vs_stage_ms: Some(iv(-10.0, -20.0, -4.0)),
            p90_change_vs_stage_ms: Some(iv(-5.0, -30.0, 2.0)),
            regret_ms: Some(iv(1.0, 0.2, 3.0)),
            changed_conditions: changed,
            p90_tail_conditions: tails,
        };
        Uncertainty {
            bootstrap: BootstrapConfig::default(),
            selection_conditions: 30,
            variants: vec![v],
            margins: BTreeMap::new(),
            coefficients: BTreeMap::new(),
            methods: interval_methods(),
            selection_adjusted: adjusted.map(|i| SelectionAdjusted {
                compared: vec![
                    Variant::Count,
                    Variant::CountPrefill,
                    Variant::Blind,
                    Variant::Cache,
                ],
                mean_change_vs_stage_ms: Some(i),
            }),
        }
    }

    const CHOICE: (Variant, Variant, Variant) = (Variant::Cache, Variant::Count, Variant::Cache);

    #[test]
    fn an_interval_prints_its_own_level() {
        let mut i = iv(-10.0, -25.5, -1.0);
        assert_eq!(fmt_interval(&i), "−10.0 ms (95 % CI −25.5 to −1.0)");
        i.level = 0.975;
        assert_eq!(fmt_interval(&i), "−10.0 ms (97.5 % CI −25.5 to −1.0)");
    }

    #[test]
    fn the_headline_reports_the_adjusted_interval_and_keeps_the_unadjusted_one() {
        let u = uncertainty_with(12, 25, Some(iv(-10.0, -25.0, -1.0)));
        let h = headline(CHOICE, &u, None, Comparisons::default());
        assert_eq!(h.mean_change_vs_stage_ms, Some(iv(-10.0, -25.0, -1.0)));
        assert_eq!(h.mean_change_unadjusted_ms, Some(iv(-10.0, -20.0, -4.0)));
        assert!(h.distinguishable_from_stage);
        assert_eq!(h.indicative.len(), 1, "{:?}", h.indicative);
        assert_eq!(h.regret_ms, Some(iv(1.0, 0.2, 3.0)));
        // An adjusted interval that reaches zero is not distinguishable, whatever the variant's own.
        let u = uncertainty_with(12, 25, Some(iv(-10.0, -25.0, 0.5)));
        let h = headline(CHOICE, &u, None, Comparisons::default());
        assert!(!h.distinguishable_from_stage);
        assert!(h.caveats.iter().any(|c| c.contains("not distinguishable")));
    }

    #[test]
    fn few_changed_or_tail_conditions_make_an_interval_indicative() {
        let u = uncertainty_with(MIN_CHANGED_CONDITIONS - 1, MIN_TAIL_CONDITIONS - 1, None);
        let h = headline(CHOICE, &u, None, Comparisons::default());
        assert_eq!(h.indicative.len(), 3, "{:?}", h.indicative);
        assert!(h.indicative[0].starts_with("the mean change's interval is indicative"));
        assert!(h.indicative[1].starts_with("the p90 change's interval is indicative"));
        assert!(h.indicative[2].starts_with("the variant table's p90 intervals are indicative"));
        // Indicative intervals lead the caveats.
        assert_eq!(h.caveats[..3], h.indicative[..]);
        // Without the adjusted interval the variant's own is the headline.
        assert_eq!(h.mean_change_vs_stage_ms, Some(iv(-10.0, -20.0, -4.0)));
        let mut u = uncertainty_with(MIN_CHANGED_CONDITIONS, MIN_TAIL_CONDITIONS, None);
        let h = headline(CHOICE, &u, None, Comparisons::default());
        assert_eq!(h.indicative.len(), 1, "{:?}", h.indicative);
        // The margins' δ intervals, when there are any, are always indicative.
        u.margins.insert("cache".into(), Some(iv(34.0, 24.0, 72.0)));
        let h = headline(CHOICE, &u, None, Comparisons::default());
        assert!(
            h.indicative[1].starts_with("the margins' δ intervals are indicative")
                && h.indicative[1].contains("over 30 uncertainty-split conditions"),
            "{:?}",
            h.indicative
        );
    }
}
