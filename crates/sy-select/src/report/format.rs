//! How the report writes numbers, intervals, changes, thresholds and rules.

use super::*;

/// Milliseconds as the report's tables print them.
pub fn fmt_ms(v: f64) -> String {
    format!("{v:.1}")
}

pub(super) fn fmt_ci(i: Option<&Interval>) -> String {
    i.map_or("—".into(), |i| {
        format!(
            "{} [{}, {}]",
            fmt_ms(i.estimate),
            fmt_ms(i.lo),
            fmt_ms(i.hi)
        )
    })
}

pub(super) fn fmt_change(i: Option<&Interval>) -> String {
    i.map_or("—".into(), |i| {
        format!(
            "{} [{}, {}]",
            fmt_signed(i.estimate),
            fmt_signed(i.lo),
            fmt_signed(i.hi)
        )
    })
}

pub(super) fn fmt_threshold(v: Option<f64>) -> String {
    v.map_or_else(|| "disabled".to_string(), |x| format!("{x}"))
}

/// One trigger term in words: "R ≥ 5", or "R term off".
pub(super) fn term(name: &str, op: &str, v: Option<f64>) -> String {
    v.map_or_else(
        || format!("{name} term off"),
        |x| format!("{name} {op} {x}"),
    )
}

pub(super) fn pct(v: f64) -> String {
    format!("{:.1} %", 100.0 * v)
}

/// The chosen rule in words: "count_prefill (r disabled, p > 0.125)".
pub fn rule_text(s: &SelectionFile) -> String {
    let t = &s.thresholds;
    match s.bundle_variant {
        Variant::Count => format!("count ({})", term("R", "≥", t.r)),
        Variant::CountPrefill => format!(
            "count_prefill ({}, {})",
            term("R", "≥", t.r),
            term("P", ">", t.p)
        ),
        Variant::Blind => format!("blind (margin {} ms)", fmt_ms(s.margins.blind)),
        Variant::Cache => format!("cache (margin {} ms)", fmt_ms(s.margins.cache)),
        Variant::Stage => "stage".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn interval(estimate: f64, lo: f64, hi: f64) -> Interval {
        Interval {
            estimate,
            lo,
            hi,
            level: 0.95,
            resamples: 2000,
            groups: 30,
        }
    }

    #[test]
    fn numbers_intervals_and_terms_in_words() {
        assert_eq!(fmt_ms(12.345), "12.3");
        assert_eq!(
            fmt_ci(Some(&interval(10.0, 9.04, 11.06))),
            "10.0 [9.0, 11.1]"
        );
        assert_eq!(fmt_ci(None), "—");
        assert_eq!(fmt_change(None), "—");
        assert!(fmt_change(Some(&interval(-2.0, -3.0, -1.0))).starts_with('−'));
        assert_eq!(fmt_threshold(None), "disabled");
        assert_eq!(fmt_threshold(Some(0.125)), "0.125");
        assert_eq!(term("R", "≥", Some(5.0)), "R ≥ 5");
        assert_eq!(term("P", ">", None), "P term off");
        assert_eq!(pct(0.1234), "12.3 %");
    }
}
