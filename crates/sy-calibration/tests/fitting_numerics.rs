#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Numerical tests of the fit: known-truth recovery, split isolation, grouped folds, and the ridge
//! against linfa-linear's OLS and explicit refits.

use std::collections::{BTreeMap, BTreeSet};
use sy_selector::Model;

use linfa::DatasetBase;
use linfa::traits::Fit;
use ndarray::{Array1, Array2};
use proptest::prelude::*;
use sy_calibration::fitting::fit::{FitConfig, assign_folds, fit};
use sy_calibration::fitting::ridge::{Ridge, SuffStats, solve};
use sy_records::synth::{SynthSpec, generate};
use sy_records::{Phase, Split, SplitFractions, SplitTable};

fn spec() -> SynthSpec {
    SynthSpec {
        conditions: 400,
        repeats: 4,
        q_repeats: 31,
        seed: 11,
        ..SynthSpec::default()
    }
}

#[test]
fn fit_recovers_known_coefficients() {
    let spec = spec();
    let records = generate(&spec);
    let splits = SplitTable::build(&records, 5, SplitFractions::default());
    let result = fit(
        &sy_records::ProbeTable::from_records(&records).unwrap(),
        &splits,
        &FitConfig::default(),
    )
    .unwrap();
    for role in [Model::Efficient, Model::Capable] {
        let truth = spec.model(role);
        let m = result.models.get(role);
        let s = &m.estimators.standardiser;
        let c = &m.estimators.cache;
        // Back to raw log1p scale: aX = cX / std_X, a0 = c0 − Σ aX mean_X.
        let a: Vec<f64> = (0..3).map(|j| c.coef[j] / s.std[j]).collect();
        let a0 = c.intercept - (0..3).map(|j| a[j] * s.mean[j]).sum::<f64>();
        let msg = format!("{role:?}: fitted a0 {a0} a {a:?}, truth {:?}", truth.load);
        assert!((a[0] - truth.load[1]).abs() < 1.0, "{msg}");
        assert!((a[1] - truth.load[2]).abs() < 0.05 * truth.load[2], "{msg}");
        assert!((a[2] - truth.load[3]).abs() < 0.05 * truth.load[3], "{msg}");
        assert!((a0 - truth.load[0]).abs() < 10.0, "{msg}");
        // The Q table reproduces the bilinear truth at its grid points up to the cell noise.
        let q = &m.estimators.q;
        for (i, &n) in q.n_axis().iter().enumerate() {
            for &f in q.f_row(i) {
                let got = q.lookup(n, f).unwrap();
                let want = truth.q_true(n, (f * n).round() / n);
                assert!(
                    (got - want).abs() < 4.0 * truth.noise_sd_ms,
                    "Q({n},{f}) {got} vs {want}"
                );
            }
        }
        // Residual spread ≈ the noise.
        let std = m.cache.residuals.std_ms;
        assert!(
            (std - truth.noise_sd_ms).abs() < 0.25 * truth.noise_sd_ms,
            "{role:?} residual std {std}"
        );
        assert!(m.cache.r2_ttft.unwrap() > 0.9);
        // The whole CV curve is reported and the chosen alpha is on it.
        assert_eq!(m.cache.cv.len(), FitConfig::default().alpha_grid.len());
        assert!(m.cache.cv.iter().any(|p| p.alpha == m.cache.alpha));
        assert_eq!(m.cache.folds, 5);
    }
}

/// A collection interleaves its conditions' repeats (the schedule shuffles units): the fit is the
/// same as on the records grouped by condition — the coefficients' grouped bootstrap resamples
/// conditions, not rows, and counts each condition once.
#[test]
fn interleaved_repeats_give_the_fit_of_grouped_records() {
    let records = generate(&SynthSpec {
        conditions: 120,
        repeats: 3,
        ..SynthSpec::default()
    });
    let splits = SplitTable::build(&records, 9, SplitFractions::default());
    let grouped = fit(
        &sy_records::ProbeTable::from_records(&records).unwrap(),
        &splits,
        &FitConfig::default(),
    )
    .unwrap();
    // Every condition's first repeat, then every second repeat, then every third.
    let mut interleaved = records.clone();
    interleaved.sort_by_key(|r| r.repeat);
    assert_ne!(
        interleaved.iter().map(|r| &r.probe_id).collect::<Vec<_>>(),
        records.iter().map(|r| &r.probe_id).collect::<Vec<_>>()
    );
    let again = fit(
        &sy_records::ProbeTable::from_records(&interleaved).unwrap(),
        &splits,
        &FitConfig::default(),
    )
    .unwrap();
    // Equal up to the order of floating-point sums: the rows are summed in another order.
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0);
    for (g, a) in [
        (&grouped.models.efficient, &again.models.efficient),
        (&grouped.models.capable, &again.models.capable),
    ] {
        for (gc, ac) in [(&g.blind, &a.blind), (&g.cache, &a.cache)] {
            assert_eq!((gc.rows, gc.conditions), (ac.rows, ac.conditions));
            assert_eq!(
                ac.conditions, splits.counts.fit,
                "each condition counted once"
            );
            let (gi, ai) = (
                gc.coefficient_intervals.as_ref().unwrap(),
                ac.coefficient_intervals.as_ref().unwrap(),
            );
            for (x, y) in gi.iter().zip(ai) {
                assert_eq!(x.groups, y.groups);
                assert!(
                    close(x.estimate, y.estimate) && close(x.lo, y.lo) && close(x.hi, y.hi),
                    "{x:?} against {y:?}"
                );
            }
        }
    }
}

#[test]
fn rows_outside_the_fit_split_do_not_change_the_fit() {
    let records = generate(&SynthSpec {
        conditions: 120,
        repeats: 3,
        ..SynthSpec::default()
    });
    let splits = SplitTable::build(&records, 9, SplitFractions::default());
    let base = fit(
        &sy_records::ProbeTable::from_records(&records).unwrap(),
        &splits,
        &FitConfig::default(),
    )
    .unwrap();
    let mut changed = records.clone();
    let mut touched = 0;
    for r in &mut changed {
        if splits.split_of_record(r) == Some(Split::Uncertainty) {
            r.ttft_ms = r.ttft_ms.map(|t| t * 3.0 + 1000.0);
            r.observed.r = r.observed.r.map(|v| v + 50);
            r.observed.prefill_tokens_booked = Some(123_456);
            touched += 1;
        }
    }
    assert!(touched > 50);
    let again = fit(
        &sy_records::ProbeTable::from_records(&changed).unwrap(),
        &splits,
        &FitConfig::default(),
    )
    .unwrap();
    assert_eq!(base.models, again.models);
    assert_eq!(
        serde_json::to_string(&base.models).unwrap(),
        serde_json::to_string(&again.models).unwrap()
    );
    // Whereas changing fit-split rows does change it.
    let mut fit_changed = records.clone();
    for r in &mut fit_changed {
        if splits.split_of_record(r) == Some(Split::Fit) {
            r.ttft_ms = r.ttft_ms.map(|t| t + 100.0);
        }
    }
    let other = fit(
        &sy_records::ProbeTable::from_records(&fit_changed).unwrap(),
        &splits,
        &FitConfig::default(),
    )
    .unwrap();
    assert_ne!(base.models, other.models);
}

#[test]
fn grouped_folds_never_split_a_condition() {
    let records = generate(&SynthSpec {
        conditions: 97,
        repeats: 5,
        ..SynthSpec::default()
    });
    let splits = SplitTable::build(&records, 2, SplitFractions::default());
    let (folds, k) = assign_folds(&splits, 5, 2).unwrap();
    assert_eq!(k, 5);
    // Every record of a fit-split condition (all repeats, both roles) maps to one fold, and no
    // condition appears in two folds.
    let mut fold_of_condition: BTreeMap<(String, String), BTreeSet<usize>> = BTreeMap::new();
    for r in &records {
        if r.phase != Phase::Load || splits.split_of_record(r) != Some(Split::Fit) {
            continue;
        }
        let f = folds[&r.run_id][&r.condition_id];
        fold_of_condition
            .entry((r.run_id.clone(), r.condition_id.clone()))
            .or_default()
            .insert(f);
    }
    assert_eq!(fold_of_condition.len(), splits.counts.fit);
    assert!(fold_of_condition.values().all(|s| s.len() == 1));
    // Non-fit conditions get no fold at all, and folds are balanced (sizes differ by ≤ 1).
    let mut sizes = vec![0usize; k];
    for s in fold_of_condition.values() {
        sizes[*s.iter().next().unwrap()] += 1;
    }
    assert!(
        sizes.iter().max().unwrap() - sizes.iter().min().unwrap() <= 1,
        "{sizes:?}"
    );
    let fold_conditions: usize = folds.values().map(|m| m.len()).sum();
    assert_eq!(fold_conditions, splits.counts.fit);
    // Deterministic for a seed.
    assert_eq!(assign_folds(&splits, 5, 2).unwrap().0, folds);
}

fn random_problem(rows: usize, seed: u64) -> (Array2<f64>, Array1<f64>) {
    use rand::{RngExt, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let x = Array2::from_shape_fn((rows, 3), |_| rng.random_range(-3.0..3.0));
    let y = x
        .rows()
        .into_iter()
        .map(|r| 100.0 + 7.0 * r[0] - 2.0 * r[1] + 30.0 * r[2] + rng.random_range(-5.0..5.0))
        .collect();
    (x, y)
}

#[test]
fn ridge_with_vanishing_alpha_matches_linfa_linear_ols() {
    let (x, y) = random_problem(500, 4);
    let ds = DatasetBase::new(x, y);
    let ols = linfa_linear::LinearRegression::new().fit(&ds).unwrap();
    let ridge = Ridge::new(1e-10).fit(&ds).unwrap();
    assert!((ols.intercept() - ridge.intercept).abs() < 1e-6);
    for j in 0..3 {
        assert!((ols.params()[j] - ridge.coef[j]).abs() < 1e-6, "{j}");
    }
    // And shrinks toward zero as alpha grows (intercept untouched by the penalty: mean of y).
    let big = Ridge::new(1e12).fit(&ds).unwrap();
    assert!(big.coef.iter().all(|c| c.abs() < 1e-3));
    let ybar = ds.targets().mean().unwrap();
    let xbar = ds.records().mean_axis(ndarray::Axis(0)).unwrap();
    assert!((big.intercept + xbar.dot(&big.coef) - ybar).abs() < 1e-9);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Cross-validation on sufficient statistics ("total − fold", scored from the fold's own
    /// statistics) equals an explicit refit on the raw training rows.
    #[test]
    fn fold_scores_from_statistics_equal_raw_refits(seed in 0u64..10_000, alpha in 0.0f64..50.0, k in 2usize..6) {
        let (x, y) = random_problem(60, seed);
        let fold_of = |i: usize| (i * 7 + seed as usize) % k;
        let mut folds: Vec<SuffStats> = (0..k).map(|_| SuffStats::new(3)).collect();
        for (i, (r, t)) in x.rows().into_iter().zip(y.iter()).enumerate() {
            folds[fold_of(i)].push(&r.to_vec(), *t);
        }
        let mut total = SuffStats::new(3);
        for f in &folds { total.add(f); }
        for (v, fold) in folds.iter().enumerate() {
            if fold.n == 0.0 { continue; }
            let sol = solve(&total.minus(fold), alpha).unwrap();
            let idx: Vec<usize> = (0..60).filter(|i| fold_of(*i) != v).collect();
            let xt = x.select(ndarray::Axis(0), &idx);
            let yt = y.select(ndarray::Axis(0), &idx);
            let raw = Ridge::new(alpha).fit(&DatasetBase::new(xt, yt)).unwrap();
            prop_assert!((raw.intercept - sol.intercept).abs() < 1e-8);
            let mut sse = 0.0;
            let mut n = 0.0;
            for (i, (r, t)) in x.rows().into_iter().zip(y.iter()).enumerate() {
                if fold_of(i) == v {
                    let e = t - raw.intercept - r.dot(&raw.coef);
                    sse += e * e;
                    n += 1.0;
                }
            }
            let want = sse / n;
            prop_assert!((fold.mse(sol.intercept, &sol.coef) - want).abs() < 1e-7 * want.max(1.0));
        }
    }
}

/// The estimators under splits given by condition index (what the stability check assigns per
/// split seed) are those under the split table of the same assignment, bit for bit, whatever
/// the number of folds; too few fit conditions are refused alike.
#[test]
fn estimators_by_index_equal_those_by_split_table() {
    let records = generate(&SynthSpec {
        conditions: 60,
        ..spec()
    });
    let table = sy_records::ProbeTable::from_records(&records).unwrap();
    let prepared = sy_calibration::fitting::ConditionSumsTable::new(&table);
    for (seed, folds) in [(0, 5), (3, 2), (9, 500)] {
        let fractions = SplitFractions::default();
        let named = SplitTable::build(&records, seed, fractions);
        let by_index = sy_records::ConditionSplits::assign(table.conditions(), seed, fractions);
        let config = FitConfig {
            seed,
            folds,
            ..FitConfig::default()
        };
        let want = prepared.estimators(&named, &config).unwrap();
        let got = prepared
            .estimators_by_index(&by_index.by_condition, &config)
            .unwrap();
        assert_eq!(got, want, "seed {seed}, {folds} folds");
    }
    let none = vec![None; table.conditions().count()];
    let err = prepared.estimators_by_index(&none, &FitConfig::default());
    assert!(
        matches!(
            err,
            Err(sy_calibration::fitting::FitError::TooFewConditions(0))
        ),
        "{err:?}"
    );
}

/// `ConditionSumsTable::estimators` (per-condition sums, what the stability check fits each split seed
/// with) gives the estimators `fit` gives from the rows, under several split seeds: the same
/// Q table, standardiser and coefficients to 1e-9 relative.
#[test]
fn estimators_from_condition_sums_equal_the_row_fit() {
    let records = generate(&spec());
    let table = sy_records::ProbeTable::from_records(&records).unwrap();
    let prepared = sy_calibration::fitting::ConditionSumsTable::new(&table);
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1e-3);
    for seed in [0, 3, 7] {
        let splits = SplitTable::build(&records, seed, SplitFractions::default());
        let config = FitConfig {
            seed,
            ..FitConfig::default()
        };
        let rows = fit(&table, &splits, &config).unwrap();
        let (efficient, capable) = prepared.estimators(&splits, &config).unwrap();
        for (role, sums) in [(Model::Efficient, efficient), (Model::Capable, capable)] {
            let want = &rows.models.get(role).estimators;
            assert_eq!(sums.q, want.q, "{role:?} seed {seed}: Q table");
            for d in 0..3 {
                assert!(close(sums.standardiser.mean[d], want.standardiser.mean[d]));
                assert!(close(sums.standardiser.std[d], want.standardiser.std[d]));
            }
            for (got, want) in [(&sums.blind, &want.blind), (&sums.cache, &want.cache)] {
                let msg = format!("{role:?} seed {seed}: {got:?} vs {want:?}");
                assert!(close(got.intercept, want.intercept), "{msg}");
                for j in 0..3 {
                    assert!(close(got.coef[j], want.coef[j]), "{msg}");
                }
            }
        }
    }
}
