//! The margins: per-condition scores, their distribution and the margin's coverage.

use super::*;

pub(super) fn ecdf(values: &mut [f64]) -> Vec<(f64, f64)> {
    // Unstable: values equal under `total_cmp` are the same bits.
    values.sort_unstable_by(f64::total_cmp);
    let n = values.len() as f64;
    values
        .iter()
        .enumerate()
        .map(|(i, &x)| (x, (i + 1) as f64 / n))
        .collect()
}

pub(super) fn margins(r: &mut Report, out: &SelectOutput) {
    let m = &out.margins;
    let u = &out.selection.uncertainty.margins;
    let mut t = String::from(
        "## Margins (uncertainty split)\n\n`delta` is the proposal's definition: each condition's largest absolute error of the predicted advantage across its repeats, then the 90th percentile across conditions; its interval resamples conditions. Because it takes a maximum, it grows with the number of repeats; the per-probe 90th percentile does not.\n\n\
         | estimator | delta (ms) [95 % CI] | conformal bound (ms) | rank ⌈0.9(G+1)⌉ | G conditions | per-probe p90 (ms) | repeats min / median / max | pairs used | excluded | mean error (ms) |\n|---|---|---|---|---|---|---|---|---|---|\n",
    );
    let mut series = Vec::new();
    let mut vlines = Vec::new();
    for (estimator, e) in m.estimators() {
        let name = estimator.as_str();
        let e2 = &e.estimate;
        let iv = u.get(name).copied().flatten();
        let excluded = if e.excluded_by_reason.is_empty() {
            "0".to_string()
        } else {
            format!("{} ({:?})", e2.pairs_excluded, e.excluded_by_reason)
        };
        t.push_str(&format!(
            "| {name} | {} | {} | {} | {} | {} | {} | {} | {excluded} | {} |\n",
            iv.as_ref().map_or_else(
                || e2.delta_ms.map_or("—".into(), fmt_ms),
                |i| fmt_ci(Some(i))
            ),
            e2.conformal_ms.map_or("∞".into(), fmt_ms),
            e2.conformal_rank,
            e2.conditions,
            e2.per_probe_delta_ms.map_or("—".into(), fmt_ms),
            e2.repeats.as_ref().map_or("—".into(), |r| format!(
                "{} / {} / {}",
                r.min, r.median, r.max
            )),
            e2.pairs_used,
            e2.mean_error_ms.map_or("—".into(), fmt_ms),
        ));
        let mut scores: Vec<f64> = e2.condition_scores.iter().map(|c| c.score_ms).collect();
        series.push(Series {
            name: format!("{name}: G = {} conditions", scores.len()),
            points: ecdf(&mut scores),
        });
        if let Some(d) = e2.delta_ms {
            vlines.push(VLine {
                x: d,
                name: format!("delta_{name} = {} ms (shaded: 95 % CI)", fmt_ms(d)),
                span: iv.map(|i| (i.lo, i.hi)),
                // the colour of its own CDF
                colour: Some(series.len() - 1),
            });
        }
    }
    r.markdown(&t);
    r.figure(
        "margin_cdf",
        "Empirical CDF of the per-condition advantage error (uncertainty split), the margins delta (dashed) and their 95 % bootstrap intervals (shaded)",
        Plot::Lines(Lines {
            title: "Per-condition maximum advantage error".into(),
            x_label: "max |predicted − measured advantage| over a condition's repeats (ms)".into(),
            y_label: "fraction of conditions".into(),
            series,
            log_x: false,
            x_ticks: None,
            y_range: Some((0.0, 1.0)),
            step: true,
            bands: vec![],
            vlines,
        }),
    );
    margin_coverage(r, out);
}

/// The nominal levels of the margins' reliability plot.
pub(super) const RELIABILITY_LEVELS: [f64; 7] = [0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99];

/// Held-out coverage of the margins: on the selection split (conditions the margins never saw),
/// each condition's score as the margin defines it (the largest |predicted − measured advantage|
/// over its repeats) and the share of conditions whose score is at most δ (target: the margin's
/// level, 0.90); for several levels, δ at that level from the uncertainty split against its
/// held-out share (a reliability plot).
pub(super) fn margin_coverage(r: &mut Report, out: &SelectOutput) {
    let m = &out.margins;
    let mut t = format!(
        "### Margins on held-out conditions\n\nOn the selection split (conditions neither the fit nor the margins saw): each condition's largest |predicted − measured advantage| over its repeats, and the share of conditions within δ; the target is the margin's level ({:.0} %). Wilson 95 % intervals.\n\n| estimator | δ (ms) | held-out conditions | share within δ [95 %] |\n|---|---|---|---|\n",
        100.0 * m.level
    );
    let mut series = vec![Series {
        name: "nominal".into(),
        points: RELIABILITY_LEVELS.iter().map(|&q| (q, q)).collect(),
    }];
    for (estimator, e) in m.estimators() {
        let name = estimator.as_str();
        let mut by_condition: BTreeMap<u64, f64> = BTreeMap::new();
        for p in &out.selection_pairs {
            let observations = (&p.efficient(), &p.capable());
            let Ok(adv) = sy_calibration::margins::predicted_advantage(
                &out.fit,
                estimator,
                observations,
                p.features(),
            ) else {
                continue;
            };
            let err = (adv - (p.ttft_eff_ms - p.ttft_cap_ms)).abs();
            if err.is_finite() {
                let s = by_condition.entry(p.condition).or_insert(0.0);
                *s = s.max(err);
            }
        }
        let held_out: Vec<f64> = by_condition.into_values().collect();
        let share = |delta: f64| {
            let k = held_out.iter().filter(|&&s| s <= delta).count() as u64;
            (k, held_out.len() as u64)
        };
        if let Some(delta) = e.estimate.delta_ms {
            let (k, n) = share(delta);
            let (lo, hi) = sy_stats::binomial::wilson(k, n, 0.95);
            t.push_str(&format!(
                "| {name} | {} | {n} | {} [{}, {}] |\n",
                fmt_ms(delta),
                pct(if n == 0 {
                    f64::NAN
                } else {
                    k as f64 / n as f64
                }),
                pct(lo),
                pct(hi)
            ));
        }
        let mut scores: Vec<f64> = e
            .estimate
            .condition_scores
            .iter()
            .map(|c| c.score_ms)
            .collect();
        scores.sort_by(f64::total_cmp);
        let points: Vec<(f64, f64)> = RELIABILITY_LEVELS
            .iter()
            .filter_map(|&q| {
                let delta = sy_selector::quantile_sorted(&scores, q)?;
                let (k, n) = share(delta);
                (n > 0).then(|| (q, k as f64 / n as f64))
            })
            .collect();
        series.push(Series {
            name: format!("{name}: held-out share within δ at the level"),
            points,
        });
    }
    r.markdown(&t);
    r.figure(
        "margin_reliability",
        "Reliability of the margins: δ at each level from the uncertainty split, and the share of held-out (selection-split) conditions within it",
        Plot::Lines(Lines {
            title: "Margin reliability on held-out conditions".into(),
            x_label: "nominal level of δ (uncertainty split)".into(),
            y_label: "held-out share of conditions within δ".into(),
            series,
            log_x: false,
            x_ticks: None,
            y_range: Some((0.0, 1.0)),
            step: false,
            bands: vec![],
            vlines: vec![],
        }),
    );
}

#[cfg(test)]
mod tests {
    use super::super::testkit::{output, section};
    use super::*;

    #[test]
    fn an_ecdf_rises_to_one_in_value_order() {
        let mut v = vec![3.0, 1.0, 2.0, 2.0];
        assert_eq!(
            ecdf(&mut v),
            vec![(1.0, 0.25), (2.0, 0.5), (2.0, 0.75), (3.0, 1.0)]
        );
        assert!(ecdf(&mut []).is_empty());
    }

    #[test]
    fn the_margins_section_shows_both_margins() {
        let out = output();
        let text = section(|r| margins(r, out));
        assert!(text.contains(&fmt_ms(out.margins.delta_blind_ms)), "{text}");
        assert!(text.contains(&fmt_ms(out.margins.delta_cache_ms)), "{text}");
    }
}
