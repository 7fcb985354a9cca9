//! Fits under many split tables from per-condition sums.
//!
//! A condition belongs to one split and one fold, so everything a fit sums over rows can be
//! summed per condition once and then added up under any split table: the feature moments the
//! standardiser is fitted from ([`FeatureMoments`], merged), and each estimator's sufficient
//! statistics of the raw features against the unshifted target ([`SuffStats`]), moved to the
//! standardised, shifted space the ridge is solved in by [`standardised`] (exact algebra: the
//! results equal the row path's to rounding). `sy-select`'s stability check fits ten split seeds
//! this way ([`ConditionSumsTable::estimators`]) without visiting a row again; `sy-fit` itself,
//! whose `fit.json` also reports residuals and R² over the rows, keeps the row path.
//!
//! Memory: the table keeps per model its Q table and one [`ConditionSums`] per condition (about
//! 0.6 kB), not the rows.

use sy_records::{ConditionIndex, ProbeTable, Split, SplitTable};
use sy_selector::{
    Estimator, FeatureMoments, LoadCorrection, Model, ModelEstimators, QTable, Standardiser,
    target_from_baseline,
};

use crate::fitting::fit::{
    FitConfig, FitError, NoRowsCause, NoTarget, assign_folds, check_alpha_grid, condition_places,
    cv_and_solve, load_rows, per_model, places_by_index, usable_row,
};
use sy_rundir::artifact::fit::QTableReport;

use crate::fitting::qbuild::{QBuildError, build_q_table};
use crate::fitting::ridge::SuffStats;

/// What every fit of the same records shares, whatever the split table: each model's Q table
/// (from the Q-grid records) and the sums of its ok load-phase rows per condition. Made once by
/// [`ConditionSumsTable::new`], it gives the estimators of any number of split tables
/// (`sy-select`'s stability check fits ten).
#[derive(Debug)]
pub struct ConditionSumsTable {
    conditions: ConditionIndex,
    efficient: ModelSums,
    capable: ModelSums,
}

/// One model's Q table (or why there is none) and its sums per condition (by condition index).
#[derive(Debug)]
struct ModelSums {
    q: Result<(QTable, QTableReport), QBuildError>,
    sums: Vec<ConditionSums>,
}

/// Load rows whose raw features and Q baselines were computed elsewhere (`sy-select`'s pairs,
/// settled once: `sy_selector::TtftTurn`), so [`ConditionSumsTable::with_known_rows`] does not
/// compute them again.
pub trait KnownRows: Sync {
    /// The Q tables (efficient, capable) the baselines were looked up in: a model's rows are
    /// taken from here only when its table is the one the sums are built with.
    fn q_tables(&self) -> (&QTable, &QTable);

    /// Load row `row` (a row of model `role`), `None` when it is not known here.
    fn row(&self, role: Model, row: usize) -> Option<KnownRow>;
}

/// A known row ([`KnownRows::row`]): its raw features, `None` when they are not valid (the row is
/// not usable, as [`sy_selector::raw_features`] says), and its Q baselines (blind, cache), `None`
/// where [`sy_selector::q_baseline`] gives none.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KnownRow {
    pub raw: Option<[f64; 3]>,
    pub baselines: [Option<f64>; 2],
}

impl ConditionSumsTable {
    /// Builds both Q tables and sums every usable load-phase row per condition, one model per
    /// thread. The table keeps a copy of the conditions, not the records.
    pub fn new(records: &ProbeTable) -> Self {
        ConditionSumsTable::with_known_rows(records, None)
    }

    /// [`ConditionSumsTable::new`], each row that `known` knows (under the same Q tables) summed
    /// from its known features and baselines instead of its observation: the same sums, bit for
    /// bit, in the same row order.
    pub fn with_known_rows(records: &ProbeTable, known: Option<&dyn KnownRows>) -> Self {
        let (efficient, capable) = per_model(true, |role| model_sums(records, role, known));
        ConditionSumsTable {
            conditions: records.conditions().clone(),
            efficient,
            capable,
        }
    }

    /// The records' conditions (what a split table is built from).
    pub fn conditions(&self) -> &ConditionIndex {
        &self.conditions
    }

    /// The estimators of both models (efficient, capable) that
    /// [`crate::fitting::fit`](fn@crate::fitting::fit) gives under `splits`, equal to rounding, without visiting a row and without the diagnostics (R²,
    /// residuals, intervals, warnings).
    pub fn estimators(
        &self,
        splits: &SplitTable,
        config: &FitConfig,
    ) -> Result<(ModelEstimators, ModelEstimators), FitError> {
        check_alpha_grid(config)?;
        let (folds_of, k) = assign_folds(splits, config.folds, config.seed)?;
        let places = condition_places(&self.conditions, splits, &folds_of);
        self.estimators_placed(&places, k, config)
    }

    /// [`ConditionSumsTable::estimators`] under the splits of this table's conditions by
    /// condition index ([`sy_records::ConditionSplits::assign`]): the same estimators as under
    /// the split table of the same assignment, without its names.
    pub fn estimators_by_index(
        &self,
        splits: &[Option<Split>],
        config: &FitConfig,
    ) -> Result<(ModelEstimators, ModelEstimators), FitError> {
        check_alpha_grid(config)?;
        let (places, k) = places_by_index(&self.conditions, splits, config.folds, config.seed)?;
        self.estimators_placed(&places, k, config)
    }

    fn estimators_placed(
        &self,
        places: &[Option<(Split, usize)>],
        k: usize,
        config: &FitConfig,
    ) -> Result<(ModelEstimators, ModelEstimators), FitError> {
        let efficient = model_estimators(&self.efficient, places, k, Model::Efficient, config)?;
        let capable = model_estimators(&self.capable, places, k, Model::Capable, config)?;
        Ok((efficient, capable))
    }
}

/// One model's Q table and per-condition sums of its usable rows (those `known` knows under
/// this Q table from their known values, the others from their observations).
fn model_sums(records: &ProbeTable, role: Model, known: Option<&dyn KnownRows>) -> ModelSums {
    let q = build_q_table(records, role);
    let mut sums = vec![ConditionSums::default(); records.condition_count()];
    if let Ok((q, _)) = &q {
        let known = known.filter(|k| {
            let (e, c) = k.q_tables();
            *q == *if role == Model::Efficient { e } else { c }
        });
        for r in load_rows(records, role) {
            let Some(s) = sums.get_mut(r.condition() as usize) else {
                continue;
            };
            match known.and_then(|k| k.row(role, r.index())) {
                Some(k) => s.push_known(&r, k),
                None => {
                    if let Ok(u) = usable_row(&r, q) {
                        s.push(u.raw, &u.target);
                    }
                }
            }
        }
    }
    ModelSums { q, sums }
}

/// One model's estimators from its per-condition sums (see [`ConditionSumsTable::estimators`]).
fn model_estimators(
    model: &ModelSums,
    places: &[Option<(Split, usize)>],
    k: usize,
    role: Model,
    config: &FitConfig,
) -> Result<ModelEstimators, FitError> {
    let name = role.as_str();
    let (q, _) = model.q.clone()?;
    let no_rows = |why: NoRowsCause| FitError::NoRows { model: name, why };
    let standardiser = fit_moments(&model.sums, places)
        .standardiser()
        .map_err(|_| no_rows(NoRowsCause::Features { skipped: None }))?;
    // `ei` indexes `Estimator::ALL` (blind, cache), as the targets do.
    let correction = |ei: usize| {
        let estimator = Estimator::ALL[ei].as_str();
        let folds = fold_sums(&model.sums, places, ei, k);
        let (n, sum) = folds
            .iter()
            .fold((0.0, 0.0), |(n, s), f| (n + f.n, s + f.sy));
        if n == 0.0 {
            return Err(no_rows(NoRowsCause::Target {
                estimator,
                skipped: None,
            }));
        }
        let shift = sum / n;
        let z: Vec<SuffStats> = folds
            .iter()
            .map(|f| standardised(f, &standardiser, shift))
            .collect();
        let sol = cv_and_solve(&z, config)
            .map_err(|source| FitError::Ridge {
                model: name,
                estimator,
                source,
            })?
            .sol;
        Ok(LoadCorrection {
            intercept: sol.intercept + shift,
            coef: [sol.coef[0], sol.coef[1], sol.coef[2]],
        })
    };
    let blind = correction(0)?;
    let cache = correction(1)?;
    Ok(ModelEstimators {
        q,
        standardiser,
        blind,
        cache,
    })
}

/// One condition's sums for one model: the moments of its usable rows' raw features, and per
/// estimator (blind, cache) the statistics of the raw features against the unshifted target
/// over the rows that have one.
#[derive(Debug, Clone)]
struct ConditionSums {
    features: FeatureMoments,
    targets: [SuffStats; 2],
}

impl Default for ConditionSums {
    fn default() -> Self {
        ConditionSums {
            features: FeatureMoments::default(),
            targets: [SuffStats::new(3), SuffStats::new(3)],
        }
    }
}

impl ConditionSums {
    /// Adds one usable row.
    fn push(&mut self, raw: [f64; 3], targets: &[Result<f64, NoTarget>; 2]) {
        self.features.push(raw);
        for (stats, target) in self.targets.iter_mut().zip(targets) {
            if let Ok(y) = target {
                stats.push(&raw, *y);
            }
        }
    }

    /// Adds row `r` from its known features and baselines: what [`ConditionSums::push`] adds
    /// of its [`usable_row`] (nothing when the features are not valid or the TTFT is missing;
    /// the targets [`target_from_baseline`] gives).
    fn push_known(&mut self, r: &sy_records::Row<'_>, known: KnownRow) {
        let (Some(raw), Some(ttft)) = (known.raw, r.ttft_ms()) else {
            return;
        };
        self.features.push(raw);
        for (stats, base) in self.targets.iter_mut().zip(known.baselines) {
            if let Some(Ok(y)) = base.map(|b| target_from_baseline(ttft, b)) {
                stats.push(&raw, y);
            }
        }
    }
}

/// The feature moments of the fit split's conditions (`places[c]`: condition c's split and
/// fold).
fn fit_moments(sums: &[ConditionSums], places: &[Option<(Split, usize)>]) -> FeatureMoments {
    let mut moments = FeatureMoments::default();
    for (s, place) in sums.iter().zip(places) {
        if matches!(place, Some((Split::Fit, _))) {
            moments.merge(&s.features);
        }
    }
    moments
}

/// Estimator `ei`'s raw statistics of the fit split's conditions, per fold (`k` folds).
fn fold_sums(
    sums: &[ConditionSums],
    places: &[Option<(Split, usize)>],
    ei: usize,
    k: usize,
) -> Vec<SuffStats> {
    let mut folds: Vec<SuffStats> = (0..k).map(|_| SuffStats::new(3)).collect();
    for (s, place) in sums.iter().zip(places) {
        if let Some((Split::Fit, fold)) = place
            && let Some(f) = folds.get_mut(*fold)
        {
            f.add(&s.targets[ei]);
        }
    }
    folds
}

/// Statistics of raw features `x` against target `y` → those of the standardised features
/// `z = (x − mean) / std` against the shifted target `y − shift`, over the same rows.
fn standardised(raw: &SuffStats, st: &Standardiser, shift: f64) -> SuffStats {
    let (n, m, s, c) = (raw.n, st.mean, st.std, shift);
    let mut out = SuffStats::new(3);
    out.n = n;
    out.sy = raw.sy - n * c;
    out.syy = raw.syy - 2.0 * c * raw.sy + n * c * c;
    for a in 0..3 {
        out.sx[a] = (raw.sx[a] - n * m[a]) / s[a];
        out.sxy[a] = (raw.sxy[a] - c * raw.sx[a] - m[a] * raw.sy + n * m[a] * c) / s[a];
        for b in 0..3 {
            let sxx = raw.sxx[a * 3 + b] - m[a] * raw.sx[b] - m[b] * raw.sx[a] + n * m[a] * m[b];
            out.sxx[a * 3 + b] = sxx / (s[a] * s[b]);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn standardised_sums_equal_sums_of_standardised_rows() {
        let rows: Vec<([f64; 3], f64)> = (0..50)
            .map(|i| {
                let x = f64::from(i);
                (
                    [(x * 0.37).sin() + 7.0, (x * 0.11).cos(), x / 50.0],
                    30.0 + x.sqrt(),
                )
            })
            .collect();
        let st = Standardiser::fit(rows.iter().map(|r| r.0)).unwrap();
        let shift = 33.0;
        let mut raw = SuffStats::new(3);
        let mut direct = SuffStats::new(3);
        for (x, y) in &rows {
            raw.push(x, *y);
            direct.push(&st.standardise(*x), y - shift);
        }
        let got = standardised(&raw, &st, shift);
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * (1.0 + b.abs());
        assert!(close(got.sy, direct.sy) && close(got.syy, direct.syy));
        for i in 0..3 {
            assert!(close(got.sx[i], direct.sx[i]), "sx[{i}]");
            assert!(close(got.sxy[i], direct.sxy[i]), "sxy[{i}]");
        }
        for i in 0..9 {
            assert!(close(got.sxx[i], direct.sxx[i]), "sxx[{i}]");
        }
    }

    #[test]
    fn merged_moments_equal_one_pass() {
        let xs: Vec<[f64; 3]> = (0..40)
            .map(|i| [f64::from(i).ln_1p(), f64::from(i % 7), 3.0])
            .collect();
        let mut one = FeatureMoments::default();
        xs.iter().for_each(|x| one.push(*x));
        let mut merged = FeatureMoments::default();
        for chunk in xs.chunks(9) {
            let mut part = FeatureMoments::default();
            chunk.iter().for_each(|x| part.push(*x));
            merged.merge(&part);
        }
        let (a, b) = (one.standardiser().unwrap(), merged.standardiser().unwrap());
        for d in 0..3 {
            assert!((a.mean[d] - b.mean[d]).abs() < 1e-12);
            assert!((a.std[d] - b.std[d]).abs() < 1e-12);
        }
        // The constant feature stays exactly constant: std 1.
        assert_eq!(b.std[2], 1.0);
    }
}
