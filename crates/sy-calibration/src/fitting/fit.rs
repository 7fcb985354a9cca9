//! The fit: per model, Q table → standardiser → ridge load correction per estimator.
//!
//! Every formula comes from `sy_selector`: the features are [`raw_features`] of the record's
//! [`Observation`](sy_selector::Observation), standardised by a [`Standardiser::fit`] on the fit
//! split; the targets are [`regression_target`] (measured TTFT − `Q(N, 0)` for the cache-blind
//! estimator, − `Q(N, K/N)` for the cache-aware one). This module only chooses rows, accumulates
//! sufficient statistics and picks alpha.
//!
//! Rows: load-phase, status ok, condition in the **fit** split, valid N, R and P (and a valid K
//! and an in-grid Q lookup for the target). Nothing of the uncertainty or selection splits is
//! read, so their rows cannot change the fit.
//!
//! Alpha: grouped k-fold cross-validation inside the fit split (folds are whole conditions, the
//! same folds for both models and both estimators), score = unweighted mean of the fold MSEs; the
//! chosen alpha is the **largest** whose score is within a relative 1e-9 of the minimum (the curve
//! is nearly flat, so the most conservative of the equally good values); the whole curve is
//! reported.

use std::collections::{BTreeMap, HashMap};
use sy_selector::Model;

use rand::SeedableRng;
use rand::seq::SliceRandom;
use sy_records::{ConditionIndex, Phase, ProbeTable, Split, SplitTable, Status};
use sy_selector::{
    Estimator, Field, InvalidInput, LoadCorrection, ModelEstimators, PredictError, QTable,
    Standardiser, quantile_unsorted, raw_features, regression_target,
};

/// The fit's errors (defined in `error.rs`).
pub use crate::fitting::error::{AlphaGridError, FitError, NoRowsCause};
use crate::fitting::qbuild::build_q_table;
use crate::fitting::ridge::{RidgeError, RidgeSolution, SuffStats, solve};
use sy_rundir::artifact::fit::{
    CorrectionReport, CvPoint, ModelFit, ModelFits, QTableReport, ResidualSpread,
    StandardiserReport,
};

/// Default number of cross-validation folds.
pub const DEFAULT_FOLDS: usize = 5;

/// Relative tolerance of the alpha rule: the largest alpha whose CV score is ≤ min · (1 + tol).
pub const ALPHA_RELATIVE_TOLERANCE: f64 = 1e-9;

/// The alpha rule, as written into fit.json.
pub const ALPHA_RULE: &str = "largest alpha whose CV score (unweighted mean of grouped-fold MSEs) is within a relative 1e-9 of the minimum";

/// The default alpha grid: 10^-4 … 10^6, four points per decade.
pub fn default_alpha_grid() -> Vec<f64> {
    (0..=40)
        .map(|i| 10f64.powf(-4.0 + 0.25 * f64::from(i)))
        .collect()
}

/// Parses an alpha grid: `LO:HI:COUNT` (COUNT log-spaced values from LO to HI) or a comma list.
pub fn parse_alpha_grid(s: &str) -> Result<Vec<f64>, AlphaGridError> {
    let grid: Vec<f64> = if s.contains(':') {
        let parts: Vec<&str> = s.split(':').map(str::trim).collect();
        let [lo, hi, count] = parts.as_slice() else {
            return Err(AlphaGridError::Shape(s.to_string()));
        };
        let lo: f64 = lo
            .parse()
            .map_err(|_| AlphaGridError::NotNumber(lo.to_string()))?;
        let hi: f64 = hi
            .parse()
            .map_err(|_| AlphaGridError::NotNumber(hi.to_string()))?;
        let count: usize = count
            .parse()
            .map_err(|_| AlphaGridError::NotCount(count.to_string()))?;
        if !(lo > 0.0 && hi > lo && lo.is_finite() && hi.is_finite()) || count < 2 {
            return Err(AlphaGridError::Range(s.to_string()));
        }
        let (a, b) = (lo.log10(), hi.log10());
        (0..count)
            .map(|i| 10f64.powf(a + (b - a) * i as f64 / (count - 1) as f64))
            .collect()
    } else {
        s.split(',')
            .map(|p| {
                p.trim()
                    .parse::<f64>()
                    .map_err(|_| AlphaGridError::NotNumber(p.to_string()))
            })
            .collect::<Result<_, _>>()?
    };
    if grid.is_empty() {
        return Err(AlphaGridError::Empty);
    }
    if let Some(bad) = grid.iter().find(|a| !(a.is_finite() && **a >= 0.0)) {
        return Err(AlphaGridError::NotAlpha(*bad));
    }
    let mut sorted = grid;
    sorted.sort_by(f64::total_cmp);
    sorted.dedup();
    Ok(sorted)
}

/// Settings of a fit.
#[derive(Debug, Clone, PartialEq)]
pub struct FitConfig {
    pub folds: usize,
    pub alpha_grid: Vec<f64>,
    /// Seed of the fold assignment (the split seed).
    pub seed: u64,
    /// Bootstrap the coefficients' intervals (a repeat of the fit that only needs the
    /// estimators, such as `sy-select`'s stability check, skips them).
    pub coefficient_intervals: bool,
    /// Fit the two models on two threads. A caller that already keeps every core busy with
    /// several fits (the stability check) fits them one after the other: the same result, and
    /// one model's rows in memory at a time per fit.
    pub parallel_models: bool,
}

impl Default for FitConfig {
    fn default() -> Self {
        FitConfig {
            folds: DEFAULT_FOLDS,
            alpha_grid: default_alpha_grid(),
            seed: 0,
            coefficient_intervals: true,
            parallel_models: true,
        }
    }
}

/// The result of [`fit`].
#[derive(Debug, Clone, PartialEq)]
pub struct FitResult {
    pub models: ModelFits,
    pub folds: usize,
    pub warnings: Vec<String>,
}

/// run_id → condition_id → fold.
pub type FoldMap = HashMap<String, HashMap<String, usize>>;

/// A condition's split, fold and running condition number (cached between consecutive records).
type ConditionInfo = Option<(Split, usize, u32)>;

/// Each condition's split and fold, by condition index (`None`: in no split).
pub(crate) type Places = Vec<Option<(Split, usize)>>;

/// Which fold each fit-split condition is in: fit-split conditions in sorted order, shuffled
/// with the seed, dealt round-robin into `k` folds. Returns (run → condition → fold, k used).
pub fn assign_folds(
    splits: &SplitTable,
    k: usize,
    seed: u64,
) -> Result<(FoldMap, usize), FitError> {
    let mut conds: Vec<(&str, &str)> = Vec::new();
    for (run, cs) in &splits.conditions {
        for (c, s) in cs {
            if *s == Split::Fit {
                conds.push((run.as_str(), c.as_str()));
            }
        }
    }
    let (dealt, k) = deal_folds(conds, k, seed)?;
    let mut map: FoldMap = HashMap::new();
    for ((run, c), fold) in dealt {
        map.entry(run.to_string())
            .or_default()
            .insert(c.to_string(), fold);
    }
    Ok((map, k))
}

/// The fold assignment itself: `conds` (the fit-split conditions, sorted by run id then
/// condition id) shuffled with the seed and dealt round-robin into `k` folds (at most one per
/// condition). The shuffle's permutation depends only on the number of conditions and the
/// seed, so conditions named or indexed are dealt alike.
fn deal_folds<T>(
    mut conds: Vec<T>,
    k: usize,
    seed: u64,
) -> Result<(Vec<(T, usize)>, usize), FitError> {
    if conds.len() < 2 {
        return Err(FitError::TooFewConditions(conds.len()));
    }
    if k < 2 {
        return Err(FitError::Folds(k));
    }
    let k = k.min(conds.len());
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ 0x7379_2d66_6f6c_6473); // "sy-folds"
    conds.shuffle(&mut rng);
    let dealt = conds
        .into_iter()
        .enumerate()
        .map(|(i, c)| (c, i % k))
        .collect();
    Ok((dealt, k))
}

/// Each condition's split and fold (by condition index) under splits given by condition index
/// ([`sy_records::ConditionSplits`]): what [`assign_folds`] and [`condition_places`] give for
/// the split table of the same assignment, without its names. Returns the places and `k` used.
pub(crate) fn places_by_index(
    conditions: &ConditionIndex,
    splits: &[Option<Split>],
    k: usize,
    seed: u64,
) -> Result<(Places, usize), FitError> {
    let mut fit: Vec<u32> = (0..conditions.count())
        .filter(|&c| splits.get(c).copied().flatten() == Some(Split::Fit))
        .filter_map(|c| u32::try_from(c).ok())
        .collect();
    // The split table's order: by run id, then condition id.
    fit.sort_unstable_by(|&a, &b| conditions.key(a).cmp(&conditions.key(b)));
    let (dealt, k) = deal_folds(fit, k, seed)?;
    let mut fold = vec![usize::MAX; conditions.count()];
    for (c, f) in dealt {
        if let Some(slot) = fold.get_mut(c as usize) {
            *slot = f;
        }
    }
    let places = (0..conditions.count())
        .zip(&fold)
        .map(|(c, &f)| splits.get(c).copied().flatten().map(|s| (s, f)))
        .collect();
    Ok((places, k))
}

/// One usable fit-split row of one model (72 bytes: a fit at 10 M records holds millions).
struct Row {
    raw: [f64; 3],
    ttft: f64,
    /// The condition's fold (`u32::MAX`: none).
    fold: u32,
    cond: u32,
    /// Regression targets (blind, cache), or why there is none.
    target: [Result<f64, NoTarget>; 2],
}

// Millions of rows per model at 10 M records: every byte is ~10 MB of fresh pages.
const _: () = assert!(std::mem::size_of::<Row>() <= 72);

/// Why a row has no regression target: what `fit.json` counts it under ([`NoTarget::as_str`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NoTarget {
    Invalid(Field),
    OutOfRange,
    NonPositive,
}

impl NoTarget {
    fn of(e: &PredictError) -> NoTarget {
        match e {
            PredictError::Invalid(InvalidInput { field, .. }) => NoTarget::Invalid(*field),
            PredictError::OutOfRange { .. } => NoTarget::OutOfRange,
            PredictError::NonPositive { .. } => NoTarget::NonPositive,
        }
    }

    /// The reason's name: the invalid field's, `q_out_of_range` or `non_positive`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            NoTarget::Invalid(field) => field.as_str(),
            NoTarget::OutOfRange => "q_out_of_range",
            NoTarget::NonPositive => "non_positive",
        }
    }
}

/// Fits both models (see the module docs), one per thread: each reads its Q table and its
/// fit-split rows straight from the table (nothing is prepared for the other splits' rows),
/// then fits them.
pub fn fit(
    records: &ProbeTable,
    splits: &SplitTable,
    config: &FitConfig,
) -> Result<FitResult, FitError> {
    check_alpha_grid(config)?;
    let (folds_of, k) = assign_folds(splits, config.folds, config.seed)?;
    let mut warnings = Vec::new();
    if k < config.folds {
        warnings.push(format!(
            "only {k} fit-split conditions: using {k} folds instead of {}",
            config.folds
        ));
    }
    let places = condition_places(records.conditions(), splits, &folds_of);
    let (efficient, capable) = per_model(config.parallel_models, |role| {
        let mut own = Vec::new();
        fit_model(records, &places, k, role, config, &mut own).map(|fit| (fit, own))
    });
    // Errors and warnings in model order, as one model after the other.
    let (efficient, efficient_warnings) = efficient?;
    let (capable, capable_warnings) = capable?;
    warnings.extend(efficient_warnings);
    warnings.extend(capable_warnings);
    Ok(FitResult {
        models: ModelFits { efficient, capable },
        folds: k,
        warnings,
    })
}

/// Refuses an empty alpha grid (nothing to cross-validate).
pub(crate) fn check_alpha_grid(config: &FitConfig) -> Result<(), FitError> {
    if config.alpha_grid.is_empty() {
        return Err(FitError::EmptyAlphaGrid);
    }
    Ok(())
}

/// The split-independent part of a fit row.
#[derive(Debug)]
pub(crate) struct Usable {
    pub(crate) raw: [f64; 3],
    ttft: f64,
    /// Regression targets (blind, cache), or why there is none.
    pub(crate) target: [Result<f64, NoTarget>; 2],
}

/// `f` of the efficient and of the capable model, in parallel when `parallel` (the models share
/// nothing), else one after the other.
pub(crate) fn per_model<T: Send>(parallel: bool, f: impl Fn(Model) -> T + Sync) -> (T, T) {
    if !parallel {
        return (f(Model::Efficient), f(Model::Capable));
    }
    // A panic is a bug: raised here as a single-threaded run would.
    rayon::join(|| f(Model::Efficient), || f(Model::Capable))
}

/// The ok load-phase rows of one model: the rows a fit reads.
pub(crate) fn load_rows(
    records: &ProbeTable,
    role: Model,
) -> impl Iterator<Item = sy_records::Row<'_>> {
    records
        .rows()
        .filter(move |r| r.phase() == Phase::Load && r.role() == role && r.status() == Status::Ok)
}

/// A row's features and targets, or the first field that makes it unusable.
pub(crate) fn usable_row(r: &sy_records::Row<'_>, q: &QTable) -> Result<Usable, &'static str> {
    let obs = r.rule_observation();
    let raw = raw_features(&obs).map_err(|e| e.field.as_str())?;
    let ttft = r.ttft_ms().ok_or("ttft_ms")?;
    let target = Estimator::ALL
        .map(|e| regression_target(q, e, &obs, ttft).map_err(|err| NoTarget::of(&err)));
    Ok(Usable { raw, ttft, target })
}

/// Each condition of the table (by index): its split and fold, `None` when the split table
/// does not list it.
pub(crate) fn condition_places(
    conditions: &ConditionIndex,
    splits: &SplitTable,
    folds_of: &FoldMap,
) -> Places {
    (0..conditions.count())
        .map(|c| {
            let (run_id, condition_id) = conditions.key(c as u32);
            splits.split_of(run_id, condition_id).map(|s| {
                let fold = folds_of
                    .get(run_id)
                    .and_then(|m| m.get(condition_id))
                    .copied()
                    .unwrap_or(usize::MAX);
                (s, fold)
            })
        })
        .collect()
}

/// Warnings about a model's Q table: empty cells, and cells that are not monotone in the
/// uncached tokens.
fn q_table_warnings(name: &str, q_report: &QTableReport, warnings: &mut Vec<String>) {
    if !q_report.empty_cells.is_empty() {
        warnings.push(format!(
            "{name} Q table: {} empty cell(s) (lookups in cells touching them are invalid): {:?}",
            q_report.empty_cells.len(),
            q_report.empty_cells
        ));
    }
    if let Some(why) = &q_report.f_axis_fallback {
        let first_row = q_report.cells.first().map(|c| c.planned_n);
        let planned: Vec<f64> = q_report
            .cells
            .iter()
            .take_while(|c| Some(c.planned_n) == first_row)
            .map(|c| c.f)
            .collect();
        warnings.push(format!(
            "{name} Q table: its f axis is the planned cached fractions {planned:?}, not the \
             observed K/N: {why}"
        ));
    }
    if q_report.monotone_violation_count > 0 {
        warnings.push(format!(
            "{name} Q table: not monotone in the uncached tokens N·(1−f) ({} cell pair(s) decrease by more than their spread; see q_table.monotone_violations)",
            q_report.monotone_violation_count
        ));
    }
}

/// The fit-split rows of one model, with what was skipped and the served model names.
struct FitRows {
    /// Served model names (sorted, unique).
    served: Vec<String>,
    rows: Vec<Row>,
    /// Fit-split ok rows without valid N, R, P or TTFT, per field.
    skipped: BTreeMap<String, usize>,
}

/// The ok load-phase rows of one model that are in the fit split, with their features and
/// targets, their fold and a running condition number (a new number each time the condition
/// changes between consecutive rows of the model, whatever their split).
fn fit_rows(
    records: &ProbeTable,
    role: Model,
    q: &QTable,
    places: &[Option<(Split, usize)>],
) -> FitRows {
    let mut served: Vec<String> = Vec::new();
    let mut rows: Vec<Row> = Vec::new();
    let mut skipped: BTreeMap<String, usize> = BTreeMap::new();
    let mut last: Option<(u32, ConditionInfo)> = None;
    for r in load_rows(records, role) {
        let condition = r.condition();
        let info = match last {
            Some((l, info)) if l == condition => info,
            _ => {
                let info = places
                    .get(condition as usize)
                    .copied()
                    .flatten()
                    .map(|(s, fold)| (s, fold, condition));
                last = Some((condition, info));
                info
            }
        };
        let Some((Split::Fit, fold, cond)) = info else {
            continue;
        };
        if !served.iter().any(|m| m == r.model()) {
            served.push(r.model().to_string());
        }
        match usable_row(&r, q) {
            Ok(u) => rows.push(Row {
                raw: u.raw,
                ttft: u.ttft,
                fold: u32::try_from(fold).unwrap_or(u32::MAX),
                cond,
                target: u.target,
            }),
            Err(field) => *skipped.entry(field.to_string()).or_insert(0) += 1,
        }
    }
    served.sort();
    FitRows {
        served,
        rows,
        skipped,
    }
}

/// One estimator's load correction of one model, its errors named after the model and the
/// estimator, and its warnings (alpha at the grid's end, rows without a target).
fn model_correction(
    name: &'static str,
    est: Estimator,
    rows: &[Row],
    standardiser: &Standardiser,
    k: usize,
    config: &FitConfig,
    warnings: &mut Vec<String>,
) -> Result<(LoadCorrection, CorrectionReport), FitError> {
    // `Row::target` holds the estimators in the order of `Estimator::ALL`.
    let ei = Estimator::ALL.iter().position(|e| *e == est).unwrap_or(0);
    let estimator = est.as_str();
    let (corr, report) =
        fit_correction(rows, ei, standardiser, k, config).map_err(|e| match e {
            CorrError::Ridge(source) => FitError::Ridge {
                model: name,
                estimator,
                source,
            },
            CorrError::NoRows(skipped) => FitError::NoRows {
                model: name,
                why: NoRowsCause::Target {
                    estimator,
                    skipped: Some(skipped),
                },
            },
        })?;
    if report.alpha_at_grid_edge && config.alpha_grid.len() > 1 {
        warnings.push(format!(
            "{name} {estimator}: the chosen alpha {} is the largest of the grid (the CV curve is flat to its end; the correction is shrunk)",
            report.alpha
        ));
    }
    let dropped: usize = report.skipped.values().sum();
    if dropped > 0 {
        warnings.push(format!(
            "{name} {estimator}: {dropped} fit-split row(s) without a usable target: {:?}",
            report.skipped
        ));
    }
    Ok((corr, report))
}

/// One model: Q table → fit-split rows → standardiser → blind and cache corrections.
fn fit_model(
    records: &ProbeTable,
    places: &[Option<(Split, usize)>],
    k: usize,
    role: Model,
    config: &FitConfig,
    warnings: &mut Vec<String>,
) -> Result<ModelFit, FitError> {
    let name = role.as_str();
    let (q, q_report) = build_q_table(records, role)?;
    q_table_warnings(name, &q_report, warnings);
    let FitRows {
        served,
        rows,
        skipped,
    } = fit_rows(records, role, &q, places);
    if rows.is_empty() {
        return Err(FitError::NoRows {
            model: name,
            why: NoRowsCause::Features {
                skipped: Some(skipped),
            },
        });
    }
    let standardiser =
        Standardiser::fit(rows.iter().map(|r| r.raw)).map_err(|e| FitError::NoRows {
            model: name,
            why: e.into(),
        })?;
    let std_report = StandardiserReport {
        rows: rows.len(),
        skipped,
    };
    let (blind_corr, blind_report) = model_correction(
        name,
        Estimator::Blind,
        &rows,
        &standardiser,
        k,
        config,
        warnings,
    )?;
    let (cache_corr, cache_report) = model_correction(
        name,
        Estimator::Cache,
        &rows,
        &standardiser,
        k,
        config,
        warnings,
    )?;
    Ok(ModelFit {
        served_models: served,
        estimators: ModelEstimators {
            q,
            standardiser,
            blind: blind_corr,
            cache: cache_corr,
        },
        q_table: q_report,
        standardiser: std_report,
        blind: blind_report,
        cache: cache_report,
    })
}

enum CorrError {
    Ridge(RidgeError),
    NoRows(BTreeMap<String, usize>),
}

/// The rows with a usable target for estimator `ei`: their count and sum, and the others'
/// reasons.
fn target_count(rows: &[Row], ei: usize) -> (f64, f64, BTreeMap<String, usize>) {
    let mut skipped: BTreeMap<String, usize> = BTreeMap::new();
    let mut n = 0.0;
    let mut sum = 0.0;
    for r in rows {
        match r.target[ei] {
            Ok(y) => {
                n += 1.0;
                sum += y;
            }
            Err(why) => *skipped.entry(why.as_str().to_string()).or_insert(0) += 1,
        }
    }
    (n, sum, skipped)
}

/// Sufficient statistics of the standardised features against the shifted target, per fold
/// and per condition (in row order: a condition's rows are consecutive, see [`fit_rows`]).
fn fold_and_condition_stats(
    rows: &[Row],
    ei: usize,
    standardiser: &Standardiser,
    shift: f64,
    k: usize,
) -> (Vec<SuffStats>, Vec<SuffStats>) {
    let mut fold_stats: Vec<SuffStats> = (0..k).map(|_| SuffStats::new(3)).collect();
    // One entry per condition in the order of its first row, wherever its rows are: a collection
    // interleaves the repeats of its conditions (the schedule shuffles units), so rows of one
    // condition are not adjacent in general.
    let mut by_condition: Vec<SuffStats> = Vec::new();
    let mut slot_of: HashMap<u32, usize> = HashMap::new();
    for r in rows {
        if let Ok(y) = r.target[ei] {
            let z = standardiser.standardise(r.raw);
            if let Some(s) = fold_stats.get_mut(r.fold as usize) {
                s.push(&z, y - shift);
            }
            let slot = *slot_of.entry(r.cond).or_insert_with(|| {
                by_condition.push(SuffStats::new(3));
                by_condition.len() - 1
            });
            if let Some(s) = by_condition.get_mut(slot) {
                s.push(&z, y - shift);
            }
        }
    }
    (fold_stats, by_condition)
}

/// One point of the CV curve: each fold scored by the ridge solved on the other folds.
fn cv_point(alpha: f64, fold_stats: &[SuffStats], total: &SuffStats) -> CvPoint {
    let mut fold_mse = Vec::with_capacity(fold_stats.len());
    let mut acc = 0.0;
    let mut used = 0usize;
    for s in fold_stats {
        if s.n == 0.0 {
            fold_mse.push(None);
            continue;
        }
        let train = total.minus(s);
        let m = match solve(&train, alpha) {
            Ok(sol) => s.mse(sol.intercept, &sol.coef),
            Err(_) => f64::INFINITY,
        };
        if m.is_finite() {
            fold_mse.push(Some(m));
            acc += m;
            used += 1;
        } else {
            // A fold whose training rows cannot be solved makes the whole alpha unusable.
            fold_mse.push(None);
            acc = f64::INFINITY;
        }
    }
    let cv_mse = if used == 0 || !acc.is_finite() {
        None
    } else {
        Some(acc / used as f64)
    };
    CvPoint {
        alpha,
        cv_mse,
        fold_mse,
    }
}

/// The fit of a correction on its own rows: R² of the target and of the TTFT (`None` for a
/// constant one) and the spread of the residuals. `n` is the number of rows with a target.
fn fit_quality(
    rows: &[Row],
    ei: usize,
    standardiser: &Standardiser,
    correction: &LoadCorrection,
    n: f64,
) -> (Option<f64>, Option<f64>, ResidualSpread) {
    let mut abs = Vec::with_capacity(n as usize);
    let (mut se, mut sres, mut tt, mut tt2, mut ty, mut ty2) = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0);
    for r in rows {
        if let Ok(y) = r.target[ei] {
            let z = standardiser.standardise(r.raw);
            let e = y - correction.apply(z);
            se += e * e;
            sres += e;
            abs.push(e.abs());
            tt += r.ttft;
            tt2 += r.ttft * r.ttft;
            ty += y;
            ty2 += y * y;
        }
    }
    let tss_t = (ty2 - ty * ty / n).max(0.0);
    let tss_ttft = (tt2 - tt * tt / n).max(0.0);
    let r2 = |tss: f64| (tss > 0.0).then(|| 1.0 - se / tss);
    let mean = sres / n;
    let residuals = ResidualSpread {
        mean_ms: mean,
        std_ms: (se / n - mean * mean).max(0.0).sqrt(),
        mae_ms: abs.iter().sum::<f64>() / n,
        // Order statistics by selection (the same numbers as from sorted values).
        p50_abs_ms: quantile_unsorted(&mut abs, 0.5).unwrap_or(f64::NAN),
        p90_abs_ms: quantile_unsorted(&mut abs, 0.9).unwrap_or(f64::NAN),
        p99_abs_ms: quantile_unsorted(&mut abs, 0.99).unwrap_or(f64::NAN),
        max_abs_ms: abs.iter().copied().fold(0.0, f64::max),
    };
    (r2(tss_t), r2(tss_ttft), residuals)
}

/// The load correction of estimator `ei`: target shifted by its mean, alpha by grouped CV, the
/// ridge solved on every row, its bootstrap intervals and diagnostics.
fn fit_correction(
    rows: &[Row],
    ei: usize,
    standardiser: &Standardiser,
    k: usize,
    config: &FitConfig,
) -> Result<(LoadCorrection, CorrectionReport), CorrError> {
    // Shift the target by its mean for numerical stability of the sums of squares.
    let (n, sum, skipped) = target_count(rows, ei);
    if n == 0.0 {
        return Err(CorrError::NoRows(skipped));
    }
    let shift = sum / n;
    let (fold_stats, by_condition) = fold_and_condition_stats(rows, ei, standardiser, shift, k);
    let conditions = by_condition.len();
    let Solved {
        cv,
        alpha,
        largest,
        sol,
    } = cv_and_solve(&fold_stats, config).map_err(CorrError::Ridge)?;
    let condition_stats = by_condition;
    let coefficient_intervals = if config.coefficient_intervals {
        coefficient_intervals(&condition_stats, alpha, shift, config.seed)
    } else {
        None
    };
    let correction = LoadCorrection {
        intercept: sol.intercept + shift,
        coef: [sol.coef[0], sol.coef[1], sol.coef[2]],
    };
    let (r2_target, r2_ttft, residuals) = fit_quality(rows, ei, standardiser, &correction, n);
    Ok((
        correction,
        CorrectionReport {
            rows: n as usize,
            conditions,
            skipped,
            folds: k,
            alpha,
            alpha_at_grid_edge: alpha == largest,
            cv,
            r2_target,
            r2_ttft,
            residuals,
            coefficient_intervals,
        },
    ))
}

/// The CV curve of a correction, its chosen alpha (and the grid's largest) and the ridge
/// solved at it on every fold's rows.
pub(crate) struct Solved {
    pub(crate) cv: Vec<CvPoint>,
    pub(crate) alpha: f64,
    pub(crate) largest: f64,
    pub(crate) sol: RidgeSolution,
}

/// Grouped CV over the alpha grid from per-fold statistics (standardised features, shifted
/// target), then the ridge on their total at the chosen alpha (the grid's last when no score is
/// finite).
pub(crate) fn cv_and_solve(
    fold_stats: &[SuffStats],
    config: &FitConfig,
) -> Result<Solved, RidgeError> {
    let mut total = SuffStats::new(3);
    for s in fold_stats {
        total.add(s);
    }
    let cv: Vec<CvPoint> = config
        .alpha_grid
        .iter()
        .map(|&alpha| cv_point(alpha, fold_stats, &total))
        .collect();
    let largest = config
        .alpha_grid
        .iter()
        .copied()
        .fold(f64::NEG_INFINITY, f64::max);
    let last = config.alpha_grid.last().copied().unwrap_or(largest);
    let alpha = choose_alpha(&cv).unwrap_or(last);
    let sol = solve(&total, alpha)?;
    Ok(Solved {
        cv,
        alpha,
        largest,
        sol,
    })
}

/// Grouped bootstrap intervals of the correction's (intercept, bN, bR, bP): conditions (each with
/// its sufficient statistics) resampled with replacement, the ridge re-solved at `alpha` with the
/// same standardiser. `None` with fewer than 2 conditions or when no resample solves.
fn coefficient_intervals(
    conditions: &[SuffStats],
    alpha: f64,
    shift: f64,
    seed: u64,
) -> Option<Vec<sy_stats::Interval>> {
    if conditions.len() < 2 {
        return None;
    }
    // 1,000 resamples (not the default 2,000): each re-solves the ridge over every condition.
    let cfg = sy_stats::BootstrapConfig {
        resamples: 1000,
        ..sy_stats::BootstrapConfig::default()
    }
    .with_seed(sy_stats::DEFAULT_SEED ^ seed);
    // Conditions packed in one contiguous table, read once per block of resamples: each
    // resample's sums are how often each condition was drawn times its statistics, added in
    // condition order. Only what `solve` reads is packed (14 numbers a condition: 60,000
    // conditions at 10 M records are 6.7 MB, read 63 times instead of 1,000 times).
    let width = SuffStats::packed_len(3);
    let mut packed = Vec::with_capacity(conditions.len() * width);
    for c in conditions {
        c.pack_into(&mut packed);
    }
    let mut sums = BlockSums::new(packed, width);
    sy_stats::bootstrap_counts_multi(conditions.len(), &cfg, 4, RESAMPLE_BLOCK, |counts, b| {
        let totals = sums.totals(counts, b);
        (totals.chunks_exact(width))
            .map(|total| match solve(&SuffStats::unpack(3, total), alpha) {
                Ok(s) => vec![s.intercept + shift, s.coef[0], s.coef[1], s.coef[2]],
                Err(_) => vec![f64::NAN; 4],
            })
            .collect()
    })
    .ok()
}

/// Resamples of the coefficient intervals summed in one pass over the conditions.
const RESAMPLE_BLOCK: usize = 16;

/// The per-resample sums of packed per-condition statistics (one row of `width` numbers a
/// condition), weighted by how often each resample drew each condition, added in condition
/// order.
struct BlockSums {
    packed: Vec<f64>,
    width: usize,
    /// Every packed number is finite: a condition drawn 0 times may then be added as `0 × v`
    /// (which adds +0 or −0 and so leaves every sum as it is), without a branch per draw count.
    finite: bool,
    /// Resample-major sums (`totals[j * width + c]`).
    totals: Vec<f64>,
    /// Component-major sums (`by_component[c * b + j]`) of the branch-free pass.
    by_component: Vec<f64>,
}

impl BlockSums {
    fn new(packed: Vec<f64>, width: usize) -> BlockSums {
        BlockSums {
            finite: packed.iter().all(|v| v.is_finite()),
            packed,
            width,
            totals: vec![0.0; width * RESAMPLE_BLOCK],
            by_component: vec![0.0; width * RESAMPLE_BLOCK],
        }
    }

    /// The sums of a block of `b` resamples (`counts[g * b + j]`), resample-major.
    fn totals(&mut self, counts: &[u32], b: usize) -> &[f64] {
        let width = self.width;
        let totals = &mut self.totals[..width * b];
        totals.fill(0.0);
        let rows = self.packed.chunks_exact(width).zip(counts.chunks_exact(b));
        if self.finite && b == RESAMPLE_BLOCK {
            // Each component times the block's counts: one vectorisable multiply-add per
            // component over the resamples.
            let by_component = &mut self.by_component[..width * RESAMPLE_BLOCK];
            by_component.fill(0.0);
            let mut weight = [0.0; RESAMPLE_BLOCK];
            for (row, drawn) in rows {
                for (w, &d) in weight.iter_mut().zip(drawn) {
                    *w = f64::from(d);
                }
                for (sum, &v) in by_component.chunks_exact_mut(RESAMPLE_BLOCK).zip(row) {
                    for (s, w) in sum.iter_mut().zip(&weight) {
                        *s += w * v;
                    }
                }
            }
            for (c, sum) in by_component.chunks_exact(RESAMPLE_BLOCK).enumerate() {
                for (j, &s) in sum.iter().enumerate() {
                    totals[j * width + c] = s;
                }
            }
        } else {
            for (row, drawn) in rows {
                for (total, &d) in totals.chunks_exact_mut(width).zip(drawn) {
                    if d > 0 {
                        let d = f64::from(d);
                        for (t, v) in total.iter_mut().zip(row) {
                            *t += d * v;
                        }
                    }
                }
            }
        }
        totals
    }
}

/// The largest alpha whose score is within a relative [`ALPHA_RELATIVE_TOLERANCE`] of the
/// minimum; `None` when no score is finite.
pub fn choose_alpha(cv: &[CvPoint]) -> Option<f64> {
    let min = cv
        .iter()
        .filter_map(|p| p.cv_mse)
        .filter(|v| v.is_finite())
        .fold(f64::INFINITY, f64::min);
    if !min.is_finite() {
        return None;
    }
    let limit = min + ALPHA_RELATIVE_TOLERANCE * min.abs();
    cv.iter()
        .filter(|p| p.cv_mse.is_some_and(|v| v <= limit))
        .map(|p| p.alpha)
        .fold(None, |best: Option<f64>, a| {
            Some(best.map_or(a, |b| b.max(a)))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// The branch-free block sums are the per-draw sums, bit for bit (a condition drawn 0
        /// times adds a signed zero).
        #[test]
        fn block_sums_without_branches_are_the_sums_with_them(
            packed in proptest::collection::vec(
                proptest::prop_oneof![proptest::strategy::Just(-0.0), -1e6..1e6f64],
                18 * 40,
            ),
            counts in proptest::collection::vec(0u32..4, 40 * RESAMPLE_BLOCK),
        ) {
            let mut free = BlockSums::new(packed.clone(), 18);
            let mut branching = BlockSums::new(packed, 18);
            branching.finite = false;
            proptest::prop_assert!(free.finite);
            let a: Vec<u64> =
                free.totals(&counts, RESAMPLE_BLOCK).iter().map(|v| v.to_bits()).collect();
            let b: Vec<u64> =
                branching.totals(&counts, RESAMPLE_BLOCK).iter().map(|v| v.to_bits()).collect();
            proptest::prop_assert_eq!(a, b);
        }
    }

    /// The coefficient bootstrap resamples conditions: rows of one condition are pooled wherever
    /// they sit (a collection interleaves its conditions' repeats), and a row without a target
    /// adds nothing.
    #[test]
    fn condition_stats_pool_interleaved_rows_of_one_condition() {
        let standardiser = Standardiser {
            mean: [0.0; 3],
            std: [1.0; 3],
        };
        let row = |cond: u32, y: f64| Row {
            raw: [1.0, 2.0, 3.0],
            ttft: y,
            fold: cond % 2,
            cond,
            target: [Ok(y), Err(NoTarget::OutOfRange)],
        };
        let rows = [
            row(4, 1.0),
            row(9, 2.0),
            row(4, 3.0),
            row(2, 4.0),
            row(9, 5.0),
            row(4, 6.0),
        ];
        let (folds, by_condition) = fold_and_condition_stats(&rows, 0, &standardiser, 0.0, 2);
        // Conditions in the order of their first row: 4, 9, 2.
        let sizes: Vec<f64> = by_condition.iter().map(|s| s.n).collect();
        let sums: Vec<f64> = by_condition.iter().map(|s| s.sy).collect();
        assert_eq!(sizes, vec![3.0, 2.0, 1.0]);
        assert_eq!(sums, vec![10.0, 7.0, 4.0]);
        assert_eq!(folds.iter().map(|s| s.n).sum::<f64>(), 6.0);
        // The cache estimator has no target on any row: no condition at all.
        let (_, none) = fold_and_condition_stats(&rows, 1, &standardiser, 0.0, 2);
        assert!(none.is_empty());
    }

    #[test]
    fn alpha_grid_parsing() {
        let g = parse_alpha_grid("1e-2:1e2:5").unwrap();
        assert_eq!(g.len(), 5);
        assert!((g[2] - 1.0).abs() < 1e-12 && (g[4] - 100.0).abs() < 1e-9);
        assert_eq!(parse_alpha_grid("3, 1,2,2").unwrap(), vec![1.0, 2.0, 3.0]);
        assert!(parse_alpha_grid("1:0.5:3").is_err());
        assert!(parse_alpha_grid("a").is_err());
        assert!(parse_alpha_grid("-1").is_err());
        assert_eq!(default_alpha_grid().len(), 41);
    }

    #[test]
    fn largest_alpha_within_tolerance() {
        let p = |alpha, cv_mse| CvPoint {
            alpha,
            cv_mse,
            fold_mse: vec![],
        };
        let cv = vec![
            p(0.1, Some(5.0)),
            p(1.0, Some(4.0)),
            p(10.0, Some(4.0 * (1.0 + 5e-10))),
            p(100.0, Some(4.1)),
        ];
        assert_eq!(choose_alpha(&cv), Some(10.0));
        let cv = vec![
            p(0.1, Some(5.0)),
            p(1.0, Some(4.0)),
            p(10.0, Some(4.0 * (1.0 + 2e-9))),
        ];
        assert_eq!(choose_alpha(&cv), Some(1.0));
        assert_eq!(choose_alpha(&[p(1.0, None)]), None);
    }
}
