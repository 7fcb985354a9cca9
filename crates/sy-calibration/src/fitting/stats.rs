//! Small order statistics (linear interpolation between order statistics).

/// The q-quantile of sorted values (q clamped to [0, 1]; NaN if empty): the runtime crate's
/// [`sy_selector::quantile_sorted`], the one definition of the percentile.
pub fn quantile_sorted(sorted: &[f64], q: f64) -> f64 {
    sy_selector::quantile_sorted(sorted, q.clamp(0.0, 1.0)).unwrap_or(f64::NAN)
}

/// [`quantile_sorted`] of values in any order (reordered in place; NaN if empty), by selection.
pub fn quantile_unsorted(values: &mut [f64], q: f64) -> f64 {
    sy_selector::quantile_unsorted(values, q.clamp(0.0, 1.0)).unwrap_or(f64::NAN)
}

/// The median of values (sorts them in place); `None` if empty.
pub fn median(values: &mut [f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    Some(quantile_sorted(values, 0.5))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_interpolate() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&mut []), None);
        assert_eq!(quantile_sorted(&[0.0, 10.0], 0.9), 9.0);
        assert!(quantile_sorted(&[], 0.5).is_nan());
    }
}
