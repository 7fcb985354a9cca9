//! The quantile the margins and every offline summary use.

/// The `q`-quantile (q in [0, 1]) of ascending `sorted` values with linear interpolation between
/// order statistics: position `(n − 1) · q`, numpy's default "linear" method. `None` when empty
/// or when `q` is outside [0, 1].
///
/// The margin `delta` is this quantile at 0.9 of the per-condition scores (`sy-margin`); the
/// offline tools (`sy-fit`, `sy-select`, `sy-stats`, …) call this one definition.
pub fn quantile_sorted(sorted: &[f64], q: f64) -> Option<f64> {
    let n = sorted.len();
    if n == 0 || !(0.0..=1.0).contains(&q) {
        return None;
    }
    let h = (n - 1) as f64 * q;
    let lo = h.floor() as usize;
    let hi = (lo + 1).min(n - 1);
    Some(sorted[lo] + (h - lo as f64) * (sorted[hi] - sorted[lo]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interpolates_linearly_like_numpy() {
        let x = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0];
        // position 9 * 0.9 = 8.1 -> 9 + 0.1 * (10 - 9) = 9.1
        assert!((quantile_sorted(&x, 0.9).unwrap_or(f64::NAN) - 9.1).abs() < 1e-12);
        assert_eq!(quantile_sorted(&x, 0.0), Some(1.0));
        assert_eq!(quantile_sorted(&x, 1.0), Some(10.0));
        assert_eq!(quantile_sorted(&[4.0], 0.9), Some(4.0));
        assert_eq!(quantile_sorted(&[], 0.9), None);
        assert_eq!(quantile_sorted(&x, 1.5), None);
        assert_eq!(quantile_sorted(&x, -0.1), None);
        // numpy.percentile([0, 10, 30], 90) = 26.0: position 1.8 -> 10 + 0.8 * 20
        let v = quantile_sorted(&[0.0, 10.0, 30.0], 0.9).unwrap_or(f64::NAN);
        assert!((v - 26.0).abs() < 1e-12);
    }
}
