//! The quantile the margins and every offline summary use.

/// The `q`-quantile (q in [0, 1]) of ascending `sorted` values with linear interpolation between
/// order statistics: position `(n − 1) · q`, numpy's default "linear" method. `None` when empty
/// or when `q` is outside [0, 1].
///
/// The margin `delta` is this quantile at 0.9 of the per-condition scores (`sy-margin`); the
/// offline tools (`sy-fit`, `sy-select`, `sy-stats`, …) call this one definition.
pub fn quantile_sorted(sorted: &[f64], q: f64) -> Option<f64> {
    quantile_by_rank(sorted.len(), q, |k| sorted[k])
}

/// [`quantile_sorted`] of `n` values known only through `at_rank(k)`, the k-th smallest
/// (0-based): for callers that find order statistics without sorting (e.g. a weighted scan).
pub fn quantile_by_rank(n: usize, q: f64, mut at_rank: impl FnMut(usize) -> f64) -> Option<f64> {
    let (lo, hi, frac) = position(n, q)?;
    let at_lo = at_rank(lo);
    let at_hi = if hi == lo { at_lo } else { at_rank(hi) };
    Some(interpolate(at_lo, at_hi, frac))
}

/// [`quantile_sorted`] of values in any order, reordering them in place: the two order statistics
/// it needs are found by selection (O(n)) instead of a sort, so the result is the same number.
pub fn quantile_unsorted(values: &mut [f64], q: f64) -> Option<f64> {
    let (lo, hi, frac) = position(values.len(), q)?;
    let (_, at_lo, above) = values.select_nth_unstable_by(lo, f64::total_cmp);
    let at_lo = *at_lo;
    let at_hi = if hi == lo {
        at_lo
    } else {
        above
            .iter()
            .copied()
            .min_by(f64::total_cmp)
            .unwrap_or(at_lo)
    };
    Some(interpolate(at_lo, at_hi, frac))
}

/// The order statistics `(lo, hi)` and the interpolation weight of the `q`-quantile of `n` values.
fn position(n: usize, q: f64) -> Option<(usize, usize, f64)> {
    if n == 0 || !(0.0..=1.0).contains(&q) {
        return None;
    }
    let h = (n - 1) as f64 * q;
    let lo = h.floor() as usize;
    Some((lo, (lo + 1).min(n - 1), h - lo as f64))
}

#[inline]
fn interpolate(lo: f64, hi: f64, frac: f64) -> f64 {
    lo + frac * (hi - lo)
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

    #[test]
    fn selection_gives_the_sorted_answer_bit_for_bit() {
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        for n in [1usize, 2, 3, 10, 101, 1000] {
            let values: Vec<f64> = (0..n)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    (state % 10_000) as f64 / 7.0
                })
                .collect();
            let mut sorted = values.clone();
            sorted.sort_by(f64::total_cmp);
            for q in [0.0, 0.1, 0.5, 0.9, 0.99, 1.0] {
                let mut work = values.clone();
                let a = quantile_unsorted(&mut work, q).map(f64::to_bits);
                assert_eq!(
                    a,
                    quantile_sorted(&sorted, q).map(f64::to_bits),
                    "n {n} q {q}"
                );
            }
        }
        assert_eq!(quantile_unsorted(&mut [], 0.5), None);
    }
}
