//! How sure the headline numbers are: grouped bootstrap intervals (whole conditions resampled,
//! `sy_stats`) for every variant's mean and p90 selected TTFT on the selection split, their
//! change versus Stage (paired: the same resampled conditions for both), and the margins.

use std::collections::BTreeMap;

use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use sy_calibration::margins::MarginsFile;
use sy_selector::{Model, Variant};
use sy_stats::{BootstrapConfig, GroupDraws, Interval, SeriesIntervals, bootstrap_quantile};

use crate::evaluate::{EvalPair, SelectedTtfts};

/// The percentile of the "p90" statistics.
const P90: f64 = 0.9;

/// One variant's headline numbers with their intervals (ms).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VariantUncertainty {
    pub variant: Variant,
    pub mean_selected_ttft_ms: Option<Interval>,
    pub p90_selected_ttft_ms: Option<Interval>,
    /// Mean selected TTFT of the variant minus Stage's (negative = faster than Stage).
    pub mean_change_vs_stage_ms: Option<Interval>,
    /// p90 selected TTFT of the variant minus Stage's.
    pub p90_change_vs_stage_ms: Option<Interval>,
}

impl VariantUncertainty {
    /// A variant without intervals (its bootstrap could not be made).
    fn none(variant: Variant) -> VariantUncertainty {
        tracing::warn!("no intervals for {variant}: its bootstrap panicked");
        VariantUncertainty {
            variant,
            mean_selected_ttft_ms: None,
            p90_selected_ttft_ms: None,
            mean_change_vs_stage_ms: None,
            p90_change_vs_stage_ms: None,
        }
    }
}

/// The bootstrap intervals of one calibration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Uncertainty {
    /// Resamples, level and seed.
    pub bootstrap: BootstrapConfig,
    /// Conditions of the selection split (the resampled unit of the variant intervals).
    pub selection_conditions: u64,
    /// Every variant with the frozen bundle's parameters on the selection split.
    pub variants: Vec<VariantUncertainty>,
    /// The margins (delta per estimator): conditions of the uncertainty split resampled.
    pub margins: BTreeMap<String, Option<Interval>>,
    /// The load corrections' coefficients (intercept, bN, bR, bP) per `<model>.<estimator>`:
    /// fit-split conditions resampled, as `sy-fit` measured them (`fit.json`'s
    /// `coefficient_intervals`). Empty when the fit file holds none.
    #[serde(default)]
    pub coefficients: BTreeMap<String, Vec<Interval>>,
}

/// The coefficient intervals of `fit.json` by `<model>.<estimator>` (see
/// [`Uncertainty::coefficients`]).
pub fn coefficient_intervals(
    fit: Option<&sy_calibration::fitting::FitFile>,
) -> BTreeMap<String, Vec<Interval>> {
    let Some(fit) = fit else {
        return BTreeMap::new();
    };
    let mut out = BTreeMap::new();
    for model in [Model::Efficient, Model::Capable] {
        let m = fit.models.get(model);
        for (estimator, correction) in [("blind", &m.blind), ("cache", &m.cache)] {
            if let Some(iv) = &correction.coefficient_intervals {
                out.insert(format!("{}.{estimator}", model.as_str()), iv.clone());
            }
        }
    }
    out
}

impl Uncertainty {
    /// The intervals of one variant.
    pub fn get(&self, variant: Variant) -> Option<&VariantUncertainty> {
        self.variants.iter().find(|v| v.variant == variant)
    }
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
        VariantUncertainty {
            variant,
            mean_selected_ttft_ms: log_err(name, intervals.mean),
            p90_selected_ttft_ms: log_err(name, intervals.quantile),
            mean_change_vs_stage_ms: log_err(name, intervals.mean_change),
            p90_change_vs_stage_ms: log_err(name, intervals.quantile_change),
        }
    };
    // The variants are independent: computed in parallel, kept in order.
    let variants: Vec<VariantUncertainty> = Variant::ALL
        .par_iter()
        .map(|&v| {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| one(v)))
                .unwrap_or_else(|_| VariantUncertainty::none(v))
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
        margins: BTreeMap::from([
            margin("blind", &margins.blind),
            margin("cache", &margins.cache),
        ]),
        coefficients: BTreeMap::new(),
    }
}

/// The answer in one place: what was chosen, what it changes versus Stage and how sure that is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Headline {
    pub bundle_variant: Variant,
    pub threshold_rule: Variant,
    pub estimator: Variant,
    /// Mean selected TTFT of the bundle variant minus Stage's on the selection split.
    pub mean_change_vs_stage_ms: Option<Interval>,
    /// The same for the 90th percentile.
    pub p90_change_vs_stage_ms: Option<Interval>,
    /// Whether the mean change's interval excludes zero.
    pub distinguishable_from_stage: bool,
    /// Whether the split seeds agree (`None` when the stability check did not run).
    pub stable: Option<bool>,
    /// The caveats the report prints first and `sy-select` warns about.
    pub caveats: Vec<String>,
}

/// A signed number of milliseconds with one decimal and a typographic minus ("−14.5", "+3.7").
pub fn fmt_signed(v: f64) -> String {
    format!("{v:+.1}").replacen('-', "−", 1)
}

/// "−14.5 ms (95 % CI −27.3 to −3.7)": how the report, the terminal and the caveats print an
/// interval.
pub fn fmt_interval(i: &Interval) -> String {
    format!(
        "{} ms (95 % CI {} to {})",
        fmt_signed(i.estimate),
        fmt_signed(i.lo),
        fmt_signed(i.hi)
    )
}

/// Builds the headline and its caveats.
pub fn headline(
    choices: (Variant, Variant, Variant),
    u: &Uncertainty,
    stability: Option<&crate::stability::Stability>,
) -> Headline {
    let (bundle_variant, threshold_rule, estimator) = choices;
    let mine = u.get(bundle_variant);
    let mean_change = mine.and_then(|v| v.mean_change_vs_stage_ms);
    let p90_change = mine.and_then(|v| v.p90_change_vs_stage_ms);
    let distinguishable = mean_change.is_some_and(|i| i.excludes_zero() && i.estimate < 0.0);
    let mut caveats = Vec::new();
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
        p90_change_vs_stage_ms: p90_change,
        distinguishable_from_stage: distinguishable,
        stable: stability.map(|s| s.stable),
        caveats,
    }
}
