//! Small order statistics (linear interpolation between order statistics).

/// The q-quantile of sorted values, linear interpolation between order statistics (NaN if empty).
pub fn quantile_sorted(sorted: &[f64], q: f64) -> f64 {
    match sorted.len() {
        0 => f64::NAN,
        1 => sorted[0],
        len => {
            let pos = q.clamp(0.0, 1.0) * (len - 1) as f64;
            let lo = pos.floor() as usize;
            let hi = (lo + 1).min(len - 1);
            let t = pos - lo as f64;
            sorted[lo] + t * (sorted[hi] - sorted[lo])
        }
    }
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
