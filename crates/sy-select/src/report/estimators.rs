//! The estimators: predicted against measured TTFT per model, R², and the fitted coefficients.

use super::*;

/// (efficient?, decode length, predicted, measured) of both candidates of every pair.
pub(super) type Prediction = (bool, Option<DecodeLength>, f64, f64);

pub(super) fn predictions(out: &SelectOutput, estimator: Estimator) -> Vec<Prediction> {
    let mut v = Vec::new();
    for p in &out.selection_pairs {
        let f = p.features();
        for (efficient, est, obs, raw, measured) in [
            (
                true,
                &out.fit.efficient,
                p.efficient(),
                f.efficient,
                p.ttft_eff_ms,
            ),
            (
                false,
                &out.fit.capable,
                p.capable(),
                f.capable,
                p.ttft_cap_ms,
            ),
        ] {
            if let Ok(pred) = sy_selector::predict_prepared(est, estimator, &obs, raw) {
                v.push((efficient, p.decode_length, pred, measured));
            }
        }
    }
    v
}

/// R² of predictions against measurements (`None` for a constant measurement).
pub(super) fn r_squared(points: &[&Prediction]) -> Option<f64> {
    let m = mean(&points.iter().map(|p| p.3).collect::<Vec<_>>());
    let tss: f64 = points.iter().map(|p| (p.3 - m).powi(2)).sum();
    let sse: f64 = points.iter().map(|p| (p.3 - p.2).powi(2)).sum();
    (tss > 0.0).then(|| 1.0 - sse / tss)
}

/// A figure of the report: (name, caption, plot), added in order by [`Report::figure`].
pub(super) type Figure = (String, String, Plot);

/// The estimator's two figures (predicted vs measured, residuals by background length).
pub(super) fn estimator_figures(estimator: Estimator, preds: &[Prediction]) -> [Figure; 2] {
    let e = estimator.as_str();
    let series: Vec<Series> = [(true, "efficient"), (false, "capable")]
        .iter()
        .map(|&(efficient, model)| {
            let mine: Vec<&Prediction> = preds.iter().filter(|p| p.0 == efficient).collect();
            Series {
                name: format!(
                    "{model}: n = {}, R² = {}",
                    mine.len(),
                    r_squared(&mine).map_or("—".into(), |v| format!("{v:.3}"))
                ),
                points: mine.iter().map(|p| (p.3, p.2)).collect(),
            }
        })
        .collect();
    let scatter = (
        format!("predicted_vs_measured_{e}"),
        format!(
            "Predicted vs measured TTFT, {e} estimator: every load-phase probe of the selection split, both models (the Q-grid, fit and uncertainty splits are left out); R² on the measured TTFT"
        ),
        Plot::Scatter(Scatter {
            title: format!("T_{e}: predicted vs measured TTFT (selection split)"),
            x_label: "measured TTFT (ms)".into(),
            y_label: "predicted TTFT (ms)".into(),
            series,
            diagonal: true,
        }),
    );
    let mut series = Vec::new();
    for (efficient, model) in [(true, "efficient"), (false, "capable")] {
        for len in [DecodeLength::Short, DecodeLength::Long] {
            let mut v: Vec<f64> = preds
                .iter()
                .filter(|p| p.0 == efficient && p.1 == Some(len))
                .map(|p| p.3 - p.2)
                .collect();
            if !v.is_empty() {
                series.push(Series {
                    name: format!("{model}, {} background (n = {})", len.as_str(), v.len()),
                    points: ecdf(&mut v),
                });
            }
        }
    }
    let left_out = preds.iter().filter(|p| p.1.is_none()).count();
    let residuals = (
        format!("residuals_by_decode_length_{e}"),
        format!(
            "Empirical CDF of the residuals (measured − predicted) by background generation length, {e} estimator, selection split: only the probes of conditions with short or long background generations; the {left_out} predictions (one per model and probe) of other conditions, without decode contention, are left out"
        ),
        Plot::Lines(Lines {
            title: format!("T_{e} residuals: short vs long background generations"),
            x_label: "measured − predicted TTFT (ms)".into(),
            y_label: "fraction of probes".into(),
            series,
            log_x: false,
            x_ticks: None,
            y_range: Some((0.0, 1.0)),
            step: true,
            bands: vec![],
            vlines: vec![VLine {
                x: 0.0,
                name: "zero error".into(),
                span: None,
                colour: None,
            }],
        }),
    );
    [scatter, residuals]
}

/// The fitted load corrections with their bootstrap intervals (from fit.json).
pub(super) fn coefficients(r: &mut Report, out: &SelectOutput) {
    let Some(f) = &out.fit_file else {
        return;
    };
    let mut t = String::from(
        "### Load-correction coefficients (fit split)\n\n`T = Q(N, f) + b0 + bN·zN + bR·zR + bP·zP` (z: standardised log1p features). Estimate [95 % interval]: fit-split conditions resampled, the standardiser and alpha held fixed.\n\n| model | estimator | rows / conditions | alpha | b0 (ms) | bN (ms) | bR (ms) | bP (ms) |\n|---|---|---|---|---|---|---|---|\n",
    );
    for (model, m) in [
        ("efficient", &f.models.efficient),
        ("capable", &f.models.capable),
    ] {
        for (estimator, c) in m.corrections() {
            let name = estimator.as_str();
            let cells: Vec<String> = match &c.coefficient_intervals {
                Some(iv) => iv.iter().map(|i| fmt_ci(Some(i))).collect(),
                None => vec!["—".to_string(); 4],
            };
            t.push_str(&format!(
                "| {model} | {name} | {} / {} | {:.3e} | {} |\n",
                c.rows,
                c.conditions,
                c.alpha,
                cells.join(" | ")
            ));
        }
    }
    r.markdown(&t);
}

/// Both estimators' predictions of the selection split (in the order of [`Estimator::ALL`]),
/// on every core.
pub(super) fn all_predictions(out: &SelectOutput) -> Vec<Vec<Prediction>> {
    Estimator::ALL
        .par_iter()
        .map(|&estimator| predictions(out, estimator))
        .collect()
}

pub(super) fn estimators(r: &mut Report, all_preds: Vec<Vec<Prediction>>) {
    let mut t = String::from(
        "## Estimators on the selection split\n\n| estimator | model | points | R² (TTFT) | mean error (ms) | mean abs. error (ms) | mean residual, short background (ms) | mean residual, long background (ms) |\n|---|---|---|---|---|---|---|---|\n",
    );
    // Each estimator's rows and figures on a core of its own (each reads a million or more
    // predictions at 10 M records), added in estimator order.
    let parts: Vec<(String, [Figure; 2])> = (Estimator::ALL.into_iter().zip(all_preds))
        .collect::<Vec<_>>()
        .into_par_iter()
        .map(|(estimator, preds)| {
            let rows = estimator_rows(estimator, &preds);
            (rows, estimator_figures(estimator, &preds))
        })
        .collect();
    for (rows, figures) in parts {
        t.push_str(&rows);
        for (name, caption, plot) in figures {
            r.figure(&name, &caption, plot);
        }
    }
    r.markdown(&t);
}

/// The estimator's rows of the estimators table, efficient then capable.
pub(super) fn estimator_rows(estimator: Estimator, preds: &[Prediction]) -> String {
    let mut t = String::new();
    for (efficient, model) in [(true, "efficient"), (false, "capable")] {
        let mine: Vec<&Prediction> = preds.iter().filter(|p| p.0 == efficient).collect();
        let errs: Vec<f64> = mine.iter().map(|p| p.2 - p.3).collect();
        let abs: Vec<f64> = errs.iter().map(|e| e.abs()).collect();
        let resid = |len: DecodeLength| {
            let v: Vec<f64> = mine
                .iter()
                .filter(|p| p.1 == Some(len))
                .map(|p| p.3 - p.2)
                .collect();
            if v.is_empty() {
                "—".to_string()
            } else {
                fmt_ms(mean(&v))
            }
        };
        t.push_str(&format!(
            "| {} | {model} | {} | {} | {} | {} | {} | {} |\n",
            estimator.as_str(),
            mine.len(),
            r_squared(&mine).map_or("—".into(), |v| format!("{v:.3}")),
            fmt_ms(mean(&errs)),
            fmt_ms(mean(&abs)),
            resid(DecodeLength::Short),
            resid(DecodeLength::Long)
        ));
    }
    t
}

#[cfg(test)]
mod tests {
    use super::super::testkit::{output, section};
    use super::*;

    #[test]
    fn r_squared_is_one_for_exact_predictions_and_none_without_spread() {
        let exact: Vec<Prediction> = (0..4)
            .map(|i| (true, None, f64::from(i), f64::from(i)))
            .collect();
        let refs: Vec<&Prediction> = exact.iter().collect();
        assert_eq!(r_squared(&refs), Some(1.0));
        let flat = [(true, None, 1.0, 5.0), (false, None, 2.0, 5.0)];
        let refs: Vec<&Prediction> = flat.iter().collect();
        assert_eq!(r_squared(&refs), None);
    }

    #[test]
    fn both_estimators_are_shown() {
        let out = output();
        let text = section(|r| estimators(r, all_predictions(out)));
        assert!(text.contains("blind") && text.contains("cache"), "{text}");
    }
}
