//! Intervals for a proportion (k successes in n trials): what a coverage study or an A/A study
//! reports beside its rate, so that "94 % of 1,000 studies" is read with its own uncertainty.
//!
//! * [`wilson`]: the Wilson score interval (Wilson 1927), close to nominal for every n and k;
//! * [`clopper_pearson`]: the exact (conservative) interval (Clopper and Pearson 1934), whose
//!   coverage is at least the nominal level for every true proportion.
//!
//! [`normal_quantile`] is the standard normal quantile both need.

/// The standard normal quantile Φ⁻¹(p), p in (0, 1) (Acklam's rational approximation, relative
/// error below 1.2e-9). NaN outside (0, 1).
pub fn normal_quantile(p: f64) -> f64 {
    if !(p > 0.0 && p < 1.0) {
        return f64::NAN;
    }
    const A: [f64; 6] = [
        -3.969_683_028_665_376e1,
        2.209_460_984_245_205e2,
        -2.759_285_104_469_687e2,
        1.383_577_518_672_69e2,
        -3.066_479_806_614_716e1,
        2.506_628_277_459_239,
    ];
    const B: [f64; 5] = [
        -5.447_609_879_822_406e1,
        1.615_858_368_580_409e2,
        -1.556_989_798_598_866e2,
        6.680_131_188_771_972e1,
        -1.328_068_155_288_572e1,
    ];
    const C: [f64; 6] = [
        -7.784_894_002_430_293e-3,
        -3.223_964_580_411_365e-1,
        -2.400_758_277_161_838,
        -2.549_732_539_343_734,
        4.374_664_141_464_968,
        2.938_163_982_698_783,
    ];
    const D: [f64; 4] = [
        7.784_695_709_041_462e-3,
        3.224_671_290_700_398e-1,
        2.445_134_137_142_996,
        3.754_408_661_907_416,
    ];
    let low = 0.02425;
    if p < low {
        let q = (-2.0 * p.ln()).sqrt();
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    } else if p <= 1.0 - low {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    } else {
        let q = (-2.0 * (1.0 - p).ln()).sqrt();
        -(((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    }
}

/// The Wilson score interval of a proportion `k / n` at `level` (e.g. 0.95); `(0, 1)` when
/// `n = 0`.
pub fn wilson(k: u64, n: u64, level: f64) -> (f64, f64) {
    if n == 0 {
        return (0.0, 1.0);
    }
    let z = normal_quantile(0.5 + 0.5 * level);
    let (k, n) = (k.min(n) as f64, n as f64);
    let p = k / n;
    let z2 = z * z;
    let centre = (p + z2 / (2.0 * n)) / (1.0 + z2 / n);
    let half = z / (1.0 + z2 / n) * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt();
    ((centre - half).max(0.0), (centre + half).min(1.0))
}

/// ln Γ(x) for x > 0 (Lanczos, g = 7, 9 terms; relative error ~1e-15).
pub(crate) fn ln_gamma(x: f64) -> f64 {
    const G: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        let pi = std::f64::consts::PI;
        return (pi / (pi * x).sin()).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let mut a = G[0];
    let t = x + 7.5;
    for (i, g) in G.iter().enumerate().skip(1) {
        a += g / (x + i as f64);
    }
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + a.ln()
}

/// P(X ≥ k) for X ~ Binomial(n, p), summed in log space.
fn upper_tail(k: u64, n: u64, p: f64) -> f64 {
    if k == 0 {
        return 1.0;
    }
    if p <= 0.0 {
        return 0.0;
    }
    if p >= 1.0 {
        return 1.0;
    }
    let nf = n as f64;
    let ln_choose = |j: f64| ln_gamma(nf + 1.0) - ln_gamma(j + 1.0) - ln_gamma(nf - j + 1.0);
    (k..=n)
        .map(|j| {
            let j = j as f64;
            (ln_choose(j) + j * p.ln() + (nf - j) * (1.0 - p).ln()).exp()
        })
        .sum::<f64>()
        .min(1.0)
}

/// The p in [0, 1] at which the decreasing-or-increasing `f(p) − target` changes sign (60
/// bisections: below 1e-18).
fn bisect(mut lo: f64, mut hi: f64, below: impl Fn(f64) -> bool) -> f64 {
    for _ in 0..60 {
        let mid = 0.5 * (lo + hi);
        if below(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    0.5 * (lo + hi)
}

/// The Clopper–Pearson (exact) interval of a proportion `k / n` at `level`: the lower end is
/// the p with P(X ≥ k | p) = α/2, the upper end the p with P(X ≤ k | p) = α/2. `(0, 1)` when
/// `n = 0`.
pub fn clopper_pearson(k: u64, n: u64, level: f64) -> (f64, f64) {
    if n == 0 {
        return (0.0, 1.0);
    }
    let k = k.min(n);
    let tail = 0.5 * (1.0 - level);
    let lo = if k == 0 {
        0.0
    } else {
        // P(X ≥ k | p) grows with p.
        bisect(0.0, 1.0, |p| upper_tail(k, n, p) < tail)
    };
    let hi = if k == n {
        1.0
    } else {
        // P(X ≤ k | p) = 1 − P(X ≥ k + 1 | p) falls with p.
        bisect(0.0, 1.0, |p| 1.0 - upper_tail(k + 1, n, p) > tail)
    };
    (lo, hi)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normal_quantile_matches_known_values() {
        assert!((normal_quantile(0.975) - 1.959_963_984_540_054).abs() < 1e-8);
        assert!((normal_quantile(0.5)).abs() < 1e-12);
        assert!((normal_quantile(0.001) + 3.090_232_306_167_813).abs() < 1e-7);
        assert!(normal_quantile(0.0).is_nan());
    }

    #[test]
    fn wilson_matches_a_worked_value() {
        // 940 of 1000 at 95 %: 0.9235 to 0.9531 (Wilson score, by hand).
        let (lo, hi) = wilson(940, 1000, 0.95);
        assert!((lo - 0.92353).abs() < 1e-4, "{lo}");
        assert!((hi - 0.95310).abs() < 1e-4, "{hi}");
        assert_eq!(wilson(0, 0, 0.95), (0.0, 1.0));
    }

    #[test]
    fn clopper_pearson_matches_closed_forms_and_contains_wilson_centre() {
        // k = 0: upper end 1 − (α/2)^(1/n).
        let (lo, hi) = clopper_pearson(0, 20, 0.95);
        assert_eq!(lo, 0.0);
        assert!(
            (hi - (1.0 - 0.025f64.powf(1.0 / 20.0))).abs() < 1e-9,
            "{hi}"
        );
        // k = n: lower end (α/2)^(1/n).
        let (lo, hi) = clopper_pearson(20, 20, 0.95);
        assert!((lo - 0.025f64.powf(1.0 / 20.0)).abs() < 1e-9, "{lo}");
        assert_eq!(hi, 1.0);
        // The exact interval is wider than Wilson's.
        let (cl, ch) = clopper_pearson(94, 100, 0.95);
        let (wl, wh) = wilson(94, 100, 0.95);
        assert!(cl < wl && ch > wh, "{cl} {ch} {wl} {wh}");
        // A textbook value: 94/100 → 0.8740 to 0.9777.
        assert!(
            (cl - 0.8740).abs() < 5e-4 && (ch - 0.9777).abs() < 5e-4,
            "{cl} {ch}"
        );
    }

    proptest::proptest! {
        #[test]
        fn binomial_intervals_are_ordered_and_hold_the_rate(k in 0u64..300, extra in 0u64..300) {
            let n = k + extra;
            let p = if n == 0 { 0.5 } else { k as f64 / n as f64 };
            for (lo, hi) in [wilson(k, n, 0.95), clopper_pearson(k, n, 0.95)] {
                proptest::prop_assert!((0.0..=1.0).contains(&lo) && (0.0..=1.0).contains(&hi));
                proptest::prop_assert!(lo <= p + 1e-12 && p <= hi + 1e-12, "{lo} {p} {hi}");
            }
        }
    }
}
