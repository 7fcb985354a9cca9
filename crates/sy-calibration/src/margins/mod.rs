//! Margins: how much predicted TTFT advantage to demand before overriding (`sy-margin` writes
//! them; the stability seeds of `sy-select` recompute them per split seed)
//!
//! The TTFT variants (`blind`, `cache`) override Stage's efficient proposal when the predicted
//! advantage `T_eff − T_cap` exceeds a margin. The margin absorbs the estimator's error: on the
//! **uncertainty split** (conditions never used for fitting or selection) `sy-margin` predicts both
//! candidates of every paired probe with the fitted estimators (through `sy_selector::predict`,
//! the one definition of the formulas), takes each workload condition's **largest** absolute
//! error of the predicted advantage, then the **90th percentile across conditions** (linear
//! interpolation) → `delta_blind`, `delta_cache`.
//!
//! Alongside it reports what a researcher needs to judge that number
//! (docs/methodology.md, "Margin and repeats"):
//!
//! * G, the number of conditions, and the finite-sample conformal bound — the
//!   `⌈0.9 (G + 1)⌉`-th smallest condition score — with a warning when G < 10;
//! * the repeats per condition (the per-condition maximum grows with them) and the margin a
//!   per-probe 90th percentile would give (it does not);
//! * pairs excluded because a prediction was invalid, out of the Q grid, non-finite or
//!   non-positive, counted by reason.
//!
//! Output: `margins.json` in the run directory (`schemas/margins.schema.json`).
//!
//! [`write_margins`] is `sy-margin`'s run. Errors are typed ([`error`]); the binaries turn them
//! into their exit code at the edge (through `sy_rundir::Fault`).

pub mod error;
mod run;
pub mod stats;
pub mod testkit;

use std::collections::BTreeMap;

use sy_records::{ProbePair, condition_key};
use sy_selector::{
    CandidateFeatures, Estimator, Margins, Observation, PredictError, predict_prepared,
};

pub use crate::inputs::FitEstimators;
pub use error::MarginError;
pub use run::{MarginOptions, write_margins};
pub use stats::{AdvantageError, ConditionMaxima, margin_from_pairs};
/// `margins.json`'s document, its read and its error: defined with the run directory's
/// artifacts; re-exported here beside the computation that fills it.
pub use sy_rundir::artifact::margins::{
    ConditionScore, EstimatorMargin, MARGINS_SCHEMA_VERSION, MarginEstimate, MarginsFile,
    MarginsFileError, RepeatSummary,
};
/// The proposal's percentile level.
pub const DEFAULT_LEVEL: f64 = 0.9;
/// Fewer conditions than this and the margin is unreliable: warn.
pub const MIN_CONDITIONS: u64 = 10;

fn exclusion_reason(e: &PredictError) -> &'static str {
    match e {
        PredictError::Invalid(_) => "invalid_input",
        PredictError::OutOfRange { .. } => "out_of_range",
        PredictError::NonPositive { .. } => "non_positive",
    }
}

/// One measured pair as the margins read it: its condition's name, both candidates' rule
/// observations (owned, or borrowed from decision inputs built before) and the measured
/// advantage `TTFT_eff − TTFT_cap`.
#[derive(Debug, Clone, Copy)]
pub struct MarginPair<'a, O> {
    pub condition_id: &'a str,
    pub efficient: O,
    pub capable: O,
    pub measured_ms: f64,
}

/// The predicted advantage `T_eff − T_cap` of one pair, or why there is none (`features`: both
/// observations' raw features when computed beforehand, else [`CandidateFeatures::UNKNOWN`]).
pub fn predicted_advantage(
    fit: &FitEstimators,
    estimator: Estimator,
    (efficient, capable): (&Observation, &Observation),
    features: &CandidateFeatures,
) -> Result<f64, PredictError> {
    let t_eff = predict_prepared(&fit.efficient, estimator, efficient, features.efficient)?;
    let t_cap = predict_prepared(&fit.capable, estimator, capable, features.capable)?;
    Ok(t_eff - t_cap)
}

/// The measured advantage `TTFT_eff − TTFT_cap` of a pair where both probes answered.
pub fn measured_advantage(pair: &ProbePair) -> Option<f64> {
    if !pair.both_ok() {
        return None;
    }
    let (e, c) = (pair.efficient.ttft_ms()?, pair.capable.ttft_ms()?);
    (e.is_finite() && c.is_finite()).then_some(e - c)
}

/// Margins of both estimators over the given pairs (already restricted to the uncertainty
/// split). Returns the margins and the number of unmeasured pairs.
pub fn compute_margins(
    fit: &FitEstimators,
    pairs: &[ProbePair],
    level: f64,
) -> (EstimatorMargin, EstimatorMargin, u64) {
    // Each condition's key built once (pairs of one condition share it).
    let mut names: BTreeMap<u32, String> = BTreeMap::new();
    for p in pairs {
        names
            .entry(p.condition())
            .or_insert_with(|| condition_key(p.run_id(), p.condition_id()));
    }
    let name = |p: &ProbePair| names.get(&p.condition()).map_or("", String::as_str);
    // The observations are read from the columns as each estimator visits a pair: holding them
    // for both would cost ~0.25 kB per pair.
    let view = pairs.iter().filter_map(|p| {
        Some(MarginPair {
            condition_id: name(p),
            measured_ms: measured_advantage(p)?,
            efficient: p.efficient.rule_observation(),
            capable: p.capable.rule_observation(),
        })
    });
    let unmeasured = pairs
        .iter()
        .filter(|p| measured_advantage(p).is_none())
        .count() as u64;
    let (blind, cache) = margins_of_pairs(fit, view, level);
    (blind, cache, unmeasured)
}

/// Margins of both estimators over measured pairs (already restricted to the uncertainty
/// split): what [`compute_margins`] computes once it has read the pairs. The two estimators'
/// passes run side by side (each reads every pair; neither reads the other's).
pub fn margins_of_pairs<'a, O: std::borrow::Borrow<Observation>>(
    fit: &FitEstimators,
    pairs: impl Iterator<Item = MarginPair<'a, O>> + Clone + Send + Sync,
    level: f64,
) -> (EstimatorMargin, EstimatorMargin) {
    let one = |estimator: Estimator| {
        let mut excluded: BTreeMap<String, u64> = BTreeMap::new();
        let errors: Vec<AdvantageError<'a>> = pairs
            .clone()
            .map(|pair| {
                let observations = (pair.efficient.borrow(), pair.capable.borrow());
                let unknown = &CandidateFeatures::UNKNOWN;
                let predicted = match predicted_advantage(fit, estimator, observations, unknown) {
                    Ok(v) => Some(v),
                    Err(e) => {
                        *excluded
                            .entry(exclusion_reason(&e).to_string())
                            .or_insert(0) += 1;
                        None
                    }
                };
                AdvantageError {
                    condition_id: pair.condition_id,
                    predicted_ms: predicted,
                    measured_ms: pair.measured_ms,
                }
            })
            .collect();
        EstimatorMargin {
            estimate: margin_from_pairs(errors, level),
            excluded_by_reason: excluded,
        }
    };
    rayon::join(|| one(Estimator::Blind), || one(Estimator::Cache))
}

/// The margins alone of measured pairs given as `(condition index, [blind, cache] predicted
/// advantage, or `None` where a prediction is unusable ([`predicted_advantage`]), measured
/// advantage)`: the same values as [`margins_of_pairs`] on the same pairs (grouped by
/// condition index rather than name); what the stability seeds need. `Err` names the first
/// estimator (in the order of [`Estimator::ALL`]) without a usable pair.
pub fn margin_values_of_advantages(
    pairs: impl Iterator<Item = (u32, [Option<f64>; 2], f64)>,
    conditions: usize,
    level: f64,
) -> Result<Margins, Estimator> {
    let mut blind = ConditionMaxima::new(conditions);
    let mut cache = ConditionMaxima::new(conditions);
    for (c, [b, k], measured) in pairs {
        blind.add(c, b, measured);
        cache.add(c, k, measured);
    }
    Margins::try_from_fn(|e| {
        match e {
            Estimator::Blind => blind.margin(level),
            Estimator::Cache => cache.margin(level),
        }
        .ok_or(e)
    })
}
