//! Stability of the choice: the whole calibration — grouped split, fit, margins, r/p search,
//! evaluation, choice — repeated over several split seeds on the same records, counting how
//! often each threshold rule, estimator and bundle variant is chosen.
//!
//! The seeds are other than the run's own (its split is not counted twice), on the same records:
//! this measures **robustness to the split**, not replication — new records could still choose
//! differently. Beside the run's own change versus Stage the report gives the median change
//! over the seeds (each seed's own choice on its own selection split).
//!
//! A choice is called **stable** when the run's own bundle variant is also the choice of at
//! least [`STABLE_SHARE`] of the seeds. The proposal's selection rule is unchanged: stability is
//! reported (and warned about), never used to pick.

use std::collections::BTreeMap;

use sy_calibration::fitting::ConditionSumsTable;
use sy_calibration::inputs::FitEstimators;
use sy_records::{ConditionSplits, Split, SplitFractions};
use sy_selector::{Margins, RuleParams, Thresholds, Variant};

use crate::choice::{ChoiceError, Searched, choose_searched};
pub use crate::error::SeedError;
use crate::evaluate::{AllPairs, Detail};
use crate::search::search_families;
use crate::search_view::SearchView;
use sy_calibration::margins::{margin_values_of_advantages, predicted_advantage};
/// What the seeds chose, as `selection.json` holds it: the run directory's types.
pub use sy_rundir::artifact::selection::{SeedChoice, Stability};
use sy_selector::{Estimator, TtftGround};

/// Share of seeds that must agree with the run's choice for it to be called stable.
pub const STABLE_SHARE: f64 = 0.8;

/// Settings of the repeated calibration (those of the run being checked).
#[derive(Debug, Clone)]
pub struct StabilitySettings {
    pub seeds: Vec<u64>,
    pub fractions: SplitFractions,
    pub folds: usize,
    pub alpha_grid: Vec<f64>,
    pub margin_level: f64,
    pub limits: sy_selector::GuardLimits,
}

/// What every seed's calibration shares: the seed inputs, every pair's decision input and
/// the search view of every measured pair (made once for the run: [`SearchView`]).
struct Shared<'a> {
    inputs: &'a ConditionSumsTable,
    pairs: &'a AllPairs,
    view: &'a SearchView,
}

impl<'a> Shared<'a> {
    /// The margins of both estimators over the measured pairs of the uncertainty split (what
    /// `sy-margin` computes from the records, read here from the shared decision inputs).
    fn margins(
        &self,
        fit: &FitEstimators,
        condition_splits: &[Option<Split>],
        (level, limits): (f64, &sy_selector::GuardLimits),
    ) -> Result<Margins, SeedError> {
        // Each pair's advantages from its settled turns when their ground has this fit's Q
        // tables (the run's, as every seed's are), else predicted from its observations.
        let models = (&fit.efficient, &fit.capable);
        let ground = TtftGround::id_of(limits, models);
        let pairs = self
            .pairs
            .indexed_in_split(condition_splits, Split::Uncertainty)
            .map(|(c, p)| {
                let advantage = |e| {
                    p.settled_advantage(models, e, ground).unwrap_or_else(|| {
                        let observations = (&p.efficient(), &p.capable());
                        predicted_advantage(fit, e, observations, p.features()).ok()
                    })
                };
                let advantages = Estimator::ALL.map(advantage);
                (c, advantages, p.ttft_eff_ms - p.ttft_cap_ms)
            });
        margin_values_of_advantages(pairs, condition_splits.len(), level)
            .map_err(|e| SeedError::NoUncertaintyPair(e.as_str()))
    }
}

fn one_seed(
    shared: &Shared<'_>,
    seed: u64,
    s: &StabilitySettings,
) -> Result<SeedChoice, SeedError> {
    let splits = ConditionSplits::assign(shared.inputs.conditions(), seed, s.fractions);
    let config = sy_calibration::fitting::FitConfig {
        folds: s.folds,
        alpha_grid: s.alpha_grid.clone(),
        seed,
        coefficient_intervals: false,
        // The seeds already run on every core.
        parallel_models: false,
    };
    let (efficient, capable) = shared
        .inputs
        .estimators_by_index(&splits.by_condition, &config)
        .map_err(SeedError::Fit)?;
    let fit = FitEstimators { efficient, capable };
    let condition_splits = splits.by_condition;
    // The margins and the search of the fit split side by side (neither reads the other): the
    // pool's threads share a seed's work, so the last seeds do not leave a core idle.
    let (margins, searched) = rayon::join(
        || shared.margins(&fit, &condition_splits, (s.margin_level, &s.limits)),
        || search_fit_split(shared, &condition_splits),
    );
    let base = RuleParams {
        efficient: fit.efficient,
        capable: fit.capable,
        thresholds: Thresholds::default(),
        margins: margins?,
        limits: s.limits,
    };
    base.validate().map_err(SeedError::Params)?;
    let searched = searched?;
    let (sel_pairs, sel_unmeasured) = shared.pairs.of_split(&condition_splits, Split::Selection);
    let Some(searched) = searched.filter(|_| !sel_pairs.is_empty()) else {
        return Err(SeedError::EmptySplit);
    };
    let c = choose_searched(&base, searched, &sel_pairs, sel_unmeasured, Detail::Choice)
        .map_err(SeedError::Choice)?;
    // The replays' means are those of the selected TTFTs (`sy_stats::mean`, same order).
    let mean = |v: Variant| {
        c.candidates
            .get(v)
            .map(|r| r.all.mean_selected_ttft_ms)
            .ok_or(SeedError::Choice(ChoiceError::MissingReplay(v)))
    };
    let mean_change_vs_stage_ms = mean(c.bundle_choice.variant)? - mean(Variant::Stage)?;
    Ok(SeedChoice {
        seed,
        threshold_rule: c.threshold_rule.variant,
        thresholds: c.thresholds,
        estimator: c.estimator.variant,
        bundle_variant: c.bundle_choice.variant,
        mean_change_vs_stage_ms,
        conditions: [Split::Fit, Split::Uncertainty, Split::Selection]
            .map(|x| splits.counts.get(x) as u64),
    })
}

/// Both rule families' searches of a seed's fit split (`None` when it has no probe).
fn search_fit_split(
    shared: &Shared<'_>,
    condition_splits: &[Option<Split>],
) -> Result<Option<Searched>, SeedError> {
    let search_error = |e| SeedError::Choice(ChoiceError::Search(e));
    let (all_probes, fit_keep) = shared
        .view
        .of_split(condition_splits, Split::Fit)
        .map_err(search_error)?;
    let fit_probes = all_probes.subset(&fit_keep);
    if fit_probes.is_empty() {
        return Ok(None);
    }
    let searched = search_families(&fit_probes, 0).map_err(search_error)?;
    Ok(Some(searched))
}

/// [`one_seed`] of every seed, in seed order, on a rayon pool of their own, one thread per core
/// (each seed's calibration is independent and deterministic; a thread that is done takes the
/// next seed, so seeds of unequal cost keep every core busy). Their own pool leaves rayon's
/// global one to the run's calibration, which runs meanwhile: its parallel steps share the
/// cores with the seeds instead of queueing behind them. A seed whose calibration panics is
/// reported as failed.
fn all_seeds(
    inputs: &ConditionSumsTable,
    (pairs, view): (&AllPairs, &SearchView),
    s: &StabilitySettings,
) -> Vec<Result<SeedChoice, SeedError>> {
    use rayon::prelude::*;
    let shared = Shared {
        inputs,
        pairs,
        view,
    };
    let shared = &shared;
    let run = || {
        s.seeds
            .par_iter()
            .map(|&seed| {
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| one_seed(shared, seed, s)))
                    .unwrap_or(Err(SeedError::Panicked))
            })
            .collect()
    };
    match rayon::ThreadPoolBuilder::new()
        .thread_name(|i| format!("sy-seed-{i}"))
        .build()
    {
        Ok(pool) => pool.install(run),
        // No threads to spare: the global pool, where the run's steps queue behind the seeds.
        Err(_) => run(),
    }
}

fn count(runs: &[SeedChoice], key: impl Fn(&SeedChoice) -> Variant) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    for r in runs {
        *m.entry(key(r).as_str().to_string()).or_insert(0) += 1;
    }
    m
}

/// Every seed's calibration (see [`SeedRuns::summarise`]), from the records `inputs` were made
/// from (`pairs`: their [`AllPairs`]; `view`: their [`SearchView`] with the settings' limits).
/// Independent of the run's own choice, so it can run while the run makes it.
pub fn run_seeds(
    inputs: &ConditionSumsTable,
    pairs: (&AllPairs, &SearchView),
    settings: &StabilitySettings,
) -> SeedRuns {
    SeedRuns(all_seeds(inputs, pairs, settings))
}

/// What every seed chose (or why it could not), in seed order.
#[derive(Debug)]
pub struct SeedRuns(Vec<Result<SeedChoice, SeedError>>);

impl SeedRuns {
    /// Every seed failed (its calibration thread did not finish).
    pub fn panicked(settings: &StabilitySettings) -> SeedRuns {
        SeedRuns(
            settings
                .seeds
                .iter()
                .map(|_| Err(SeedError::Panicked))
                .collect(),
        )
    }

    /// The counts, and whether the run's own bundle variant `chosen` is stable.
    pub fn summarise(self, settings: &StabilitySettings, chosen: Variant) -> Stability {
        let mut runs = Vec::new();
        let mut failed = BTreeMap::new();
        for (&seed, outcome) in settings.seeds.iter().zip(self.0) {
            match outcome {
                Ok(r) => runs.push(r),
                Err(why) => {
                    tracing::warn!("stability: split seed {seed}: {why}");
                    failed.insert(seed, why.to_string());
                }
            }
        }
        let agree = runs.iter().filter(|r| r.bundle_variant == chosen).count();
        let chosen_share = if runs.is_empty() {
            0.0
        } else {
            agree as f64 / runs.len() as f64
        };
        let mut changes: Vec<f64> = runs.iter().map(|r| r.mean_change_vs_stage_ms).collect();
        changes.sort_by(f64::total_cmp);
        let median_change_vs_stage_ms = sy_selector::quantile_sorted(&changes, 0.5);
        Stability {
            median_change_vs_stage_ms,
            seeds: settings.seeds.clone(),
            threshold_rule_counts: count(&runs, |r| r.threshold_rule),
            estimator_counts: count(&runs, |r| r.estimator),
            bundle_variant_counts: count(&runs, |r| r.bundle_variant),
            runs,
            failed,
            chosen,
            chosen_share,
            stable: chosen_share >= STABLE_SHARE,
        }
    }
}
