#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The bootstrap's fast paths (means from group sums, quantiles by a weighted scan) give the
//! intervals of the general resample-and-recompute path: quantiles bit for bit, means to the
//! order of their additions.

use proptest::prelude::*;
use sy_stats::{
    BootstrapConfig, Groups, bootstrap, bootstrap_counts_multi, bootstrap_mean,
    bootstrap_mean_difference, bootstrap_paired, bootstrap_quantile, bootstrap_quantile_difference,
    bootstrap_rows_multi, mean,
};

/// The quantile the fast paths bootstrap: the runtime crate's, NaN when empty.
fn quantile(values: &[f64], q: f64) -> f64 {
    sy_selector::quantile_unsorted(&mut values.to_vec(), q).unwrap_or(f64::NAN)
}

fn cfg(seed: u64) -> BootstrapConfig {
    BootstrapConfig {
        resamples: 200,
        ..BootstrapConfig::default()
    }
    .with_seed(seed)
}

/// Equal up to the order of the additions: the values are at most 5,000 in magnitude and a
/// resample sums a few hundred of them, so 1e-12 of the data's scale.
fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-12 * 5000.0
}

proptest! {
    #[test]
    fn fast_paths_equal_the_general_bootstrap(
        rows in prop::collection::vec((0u8..12, -500.0f64..5000.0, -500.0f64..5000.0), 2..300),
        q in prop::sample::select(vec![0.1, 0.5, 0.9, 0.95, 0.99]),
        seed in 0u64..1000,
    ) {
        let groups: Vec<u8> = rows.iter().map(|r| r.0).collect();
        let a: Vec<f64> = rows.iter().map(|r| r.1).collect();
        let b: Vec<f64> = rows.iter().map(|r| r.2).collect();
        let c = cfg(seed);
        let general = bootstrap(&a, &groups, &c, |v| quantile(v, q));
        let fast = bootstrap_quantile(&a, &groups, q, &c);
        prop_assert_eq!(general.ok(), fast.ok());
        let general = bootstrap_paired(&a, &b, &groups, &c, |x, y| quantile(x, q) - quantile(y, q));
        let fast = bootstrap_quantile_difference(&a, Some(&b), &groups, q, &c);
        prop_assert_eq!(general.ok(), fast.ok());
        let (g, f) = (bootstrap(&a, &groups, &c, mean).unwrap(), bootstrap_mean(&a, &groups, &c).unwrap());
        prop_assert!(close(g.lo, f.lo) && close(g.hi, f.hi) && close(g.estimate, f.estimate), "{g:?} {f:?}");
        prop_assert_eq!(g.resamples, f.resamples);
        let g = bootstrap_paired(&a, &b, &groups, &c, |x, y| mean(x) - mean(y)).unwrap();
        let f = bootstrap_mean_difference(&a, Some(&b), &groups, &c).unwrap();
        prop_assert!(close(g.lo, f.lo) && close(g.hi, f.hi), "{g:?} {f:?}");
    }
}

/// Weighted sums of two series by draw counts (`counts(i)`: how often row i was drawn), and a
/// third component that is NaN when row 0 was not drawn (such resamples are left out).
fn weighted(values: &[(f64, f64)], counts: impl Fn(usize) -> u32) -> Vec<f64> {
    let mut t = vec![0.0; 3];
    for (i, v) in values.iter().enumerate() {
        let d = counts(i);
        if d > 0 {
            t[0] += f64::from(d) * v.0;
            t[1] += f64::from(d) * v.1;
        }
    }
    t[2] = if counts(0) == 0 {
        f64::NAN
    } else {
        t[0] - t[1]
    };
    t
}

proptest! {
    #[test]
    fn counts_bootstrap_gives_the_rows_bootstrap(
        values in prop::collection::vec((-500.0f64..5000.0, -1.0f64..1.0), 2..120),
        block in 1usize..40,
        seed in 0u64..1000,
    ) {
        let c = cfg(seed);
        let n = values.len();
        let ids: Vec<usize> = (0..n).collect();
        let by_rows = bootstrap_rows_multi(&Groups::from_ids(&ids), &c, 3, |rows| {
            weighted(&values, |i| rows.iter().filter(|&&r| r == i).count() as u32)
        });
        let by_counts = bootstrap_counts_multi(n, &c, 3, block, |counts, b| {
            (0..b).map(|j| weighted(&values, |i| counts[i * b + j])).collect()
        });
        prop_assert_eq!(by_rows.unwrap(), by_counts.unwrap());
    }
}

#[test]
fn fast_paths_refuse_what_the_general_path_refuses() {
    let none = |_: &[u32], _: usize| Vec::new();
    assert!(bootstrap_counts_multi(0, &cfg(1), 1, 4, none).is_err());
    assert!(bootstrap_counts_multi(3, &cfg(1), 1, 4, none).is_err());
    let c = cfg(1);
    assert!(bootstrap_quantile(&[1.0, 2.0], &[0u8], 0.9, &c).is_err());
    assert!(bootstrap_mean_difference(&[1.0], Some(&[1.0, 2.0]), &[0u8], &c).is_err());
    assert!(bootstrap_mean::<u8>(&[], &[], &c).is_err());
}
