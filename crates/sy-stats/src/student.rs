//! Student's t: the interval of a mean over a few independent units (e.g. `sy-eval`'s rounds,
//! each the mean paired difference of its sessions), exact when the units' values are normal
//! and close to nominal for means of several sessions each.
//!
//! [`t_quantile`] inverts the t distribution function, computed from the regularised incomplete
//! beta function (continued fraction, Lentz's method) by bisection.

use crate::binomial::ln_gamma;

/// The regularised incomplete beta function I_x(a, b).
fn incomplete_beta(x: f64, a: f64, b: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    if x >= 1.0 {
        return 1.0;
    }
    let ln_front = ln_gamma(a + b) - ln_gamma(a) - ln_gamma(b) + a * x.ln() + b * (1.0 - x).ln();
    // The continued fraction converges fast for x < (a + 1) / (a + b + 2); use the symmetry
    // I_x(a, b) = 1 − I_{1−x}(b, a) otherwise.
    if x > (a + 1.0) / (a + b + 2.0) {
        return 1.0 - incomplete_beta(1.0 - x, b, a);
    }
    let tiny = 1e-300;
    let (mut c, mut d) = (1.0, 1.0 - (a + b) * x / (a + 1.0));
    if d.abs() < tiny {
        d = tiny;
    }
    d = 1.0 / d;
    let mut f = d;
    for m in 1..300 {
        let m = f64::from(m);
        let num = m * (b - m) * x / ((a + 2.0 * m - 1.0) * (a + 2.0 * m));
        for num in [
            num,
            -(a + m) * (a + b + m) * x / ((a + 2.0 * m) * (a + 2.0 * m + 1.0)),
        ] {
            d = 1.0 + num * d;
            if d.abs() < tiny {
                d = tiny;
            }
            c = 1.0 + num / c;
            if c.abs() < tiny {
                c = tiny;
            }
            d = 1.0 / d;
            f *= c * d;
        }
        if (c * d - 1.0).abs() < 1e-15 {
            break;
        }
    }
    (ln_front.exp() * f / a).clamp(0.0, 1.0)
}

/// P(T ≤ t) for Student's t with `df` degrees of freedom.
pub fn t_cdf(t: f64, df: f64) -> f64 {
    let x = df / (df + t * t);
    let tail = 0.5 * incomplete_beta(x, 0.5 * df, 0.5);
    if t >= 0.0 { 1.0 - tail } else { tail }
}

/// The `p`-quantile of Student's t with `df` > 0 degrees of freedom (NaN outside (0, 1)).
pub fn t_quantile(p: f64, df: f64) -> f64 {
    if !(p > 0.0 && p < 1.0 && df > 0.0) {
        return f64::NAN;
    }
    if p < 0.5 {
        return -t_quantile(1.0 - p, df);
    }
    let (mut lo, mut hi) = (0.0, 1.0);
    while t_cdf(hi, df) < p && hi < 1e12 {
        hi *= 2.0;
    }
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if t_cdf(mid, df) < p {
            lo = mid;
        } else {
            hi = mid;
        }
        if hi - lo <= 1e-12 * hi.max(1.0) {
            break;
        }
    }
    0.5 * (lo + hi)
}

/// The mean of `values` (independent units) with its Student-t interval at `level`: `(mean,
/// low, high)`; `None` with fewer than two values or a non-finite value.
pub fn mean_t_interval(values: &[f64], level: f64) -> Option<(f64, f64, f64)> {
    if values.len() < 2 || values.iter().any(|v| !v.is_finite()) {
        return None;
    }
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0);
    let half = t_quantile(0.5 + 0.5 * level, n - 1.0) * (var / n).sqrt();
    Some((mean, mean - half, mean + half))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn t_quantiles_match_tables() {
        // Two-sided 95 % critical values.
        for (df, want) in [
            (1.0, 12.706_204_736),
            (2.0, 4.302_652_730),
            (5.0, 2.570_581_836),
            (9.0, 2.262_157_163),
            (29.0, 2.045_229_642),
            (1000.0, 1.962_339_081),
        ] {
            let got = t_quantile(0.975, df);
            assert!((got - want).abs() < 1e-6 * want, "df {df}: {got} vs {want}");
        }
        assert!((t_quantile(0.5, 3.0)).abs() < 1e-9);
        assert!((t_quantile(0.025, 9.0) + 2.262_157_163).abs() < 1e-6);
    }

    #[test]
    fn the_mean_interval_is_centred_and_needs_two_values() {
        let (m, lo, hi) = mean_t_interval(&[1.0, 2.0, 3.0], 0.95).unwrap();
        assert_eq!(m, 2.0);
        // s = 1, se = 1/√3, t(0.975, 2) = 4.3027.
        assert!((hi - m - 4.302_652_730 / 3f64.sqrt()).abs() < 1e-6);
        assert!((m - lo - (hi - m)).abs() < 1e-12);
        assert!(mean_t_interval(&[1.0], 0.95).is_none());
        assert!(mean_t_interval(&[1.0, f64::NAN], 0.95).is_none());
    }
}
