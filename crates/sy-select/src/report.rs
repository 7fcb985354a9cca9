//! The generated `report.md` and its figures (drawn by `sy-report`).
//!
//! Every number in the report's variant tables is formatted by [`fmt_ms`] from `selection.json`'s
//! `replay`, which is exactly what `sy-select replay --bundle bundle.json --split selection`
//! recomputes.

use std::path::{Path, PathBuf};

use sy_cli::ToolError;
use sy_report::{Bar, Plot, Report, Series};
use sy_selector::{Estimator, ModelEstimators};

use crate::evaluate::{DecodeLength, VariantStats};
use crate::select::SelectOutput;

/// Milliseconds as the report prints them.
pub fn fmt_ms(v: f64) -> String {
    format!("{v:.3}")
}

fn fmt_opt(v: Option<f64>) -> String {
    v.map_or_else(|| "disabled".to_string(), |x| format!("{x}"))
}

fn pct(v: f64) -> String {
    format!("{:.1}%", 100.0 * v)
}

/// At most `max` evenly spaced items (deterministic).
fn thin<T: Clone>(items: &[T], max: usize) -> Vec<T> {
    if items.len() <= max {
        return items.to_vec();
    }
    let step = items.len() as f64 / max as f64;
    (0..max)
        .map(|i| items[(i as f64 * step) as usize].clone())
        .collect()
}

fn q_plots(name: &str, est: &ModelEstimators) -> (Plot, Plot) {
    let q = &est.q;
    let (n_axis, f_axis) = (q.n_axis(), q.f_axis());
    let values: Vec<Vec<f64>> = (0..n_axis.len())
        .map(|i| {
            (0..f_axis.len())
                .map(|j| q.value(i, j).unwrap_or(f64::NAN))
                .collect()
        })
        .collect();
    let heat = Plot::Heatmap {
        title: format!("Q table of the {name} model: no-load TTFT (ms)"),
        x_label: "cached fraction f".into(),
        y_label: "prompt tokens N".into(),
        x_ticks: f_axis.iter().map(|f| format!("{f}")).collect(),
        y_ticks: n_axis.iter().map(|n| format!("{n}")).collect(),
        values: values.clone(),
        mark: None,
    };
    let lines = Plot::Lines {
        title: format!("{name}: no-load TTFT vs prompt length"),
        x_label: "prompt tokens N".into(),
        y_label: "TTFT (ms)".into(),
        series: f_axis
            .iter()
            .enumerate()
            .map(|(j, f)| Series {
                name: format!("f = {f}"),
                points: n_axis
                    .iter()
                    .zip(&values)
                    .map(|(n, row)| (*n, row[j]))
                    .filter(|p| p.1.is_finite())
                    .collect(),
            })
            .collect(),
        log_x: true,
        vlines: vec![],
    };
    (heat, lines)
}

/// Predicted and measured TTFT of both candidates of every pair for one estimator (pairs whose
/// prediction is unusable are left out).
fn predictions(
    out: &SelectOutput,
    estimator: Estimator,
) -> Vec<(bool, Option<DecodeLength>, f64, f64)> {
    let mut v = Vec::new();
    for p in &out.selection_pairs {
        for (efficient, est, obs, measured) in [
            (true, &out.fit.efficient, &p.input.efficient, p.ttft_eff_ms),
            (false, &out.fit.capable, &p.input.capable, p.ttft_cap_ms),
        ] {
            if let Ok(pred) = sy_selector::predict(est, estimator, obs) {
                v.push((efficient, p.decode_length, pred, measured));
            }
        }
    }
    v
}

fn ecdf(values: &mut [f64]) -> Vec<(f64, f64)> {
    values.sort_by(f64::total_cmp);
    let n = values.len() as f64;
    let pts: Vec<(f64, f64)> = values
        .iter()
        .enumerate()
        .map(|(i, &x)| (x, (i + 1) as f64 / n))
        .collect();
    thin(&pts, 2000)
}

fn variant_row(name: &str, s: &VariantStats) -> String {
    let reasons = if s.fallback_reasons.is_empty() {
        "—".to_string()
    } else {
        s.fallback_reasons
            .iter()
            .map(|(k, v)| format!("{k}: {v}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!(
        "| {name} | {} | {} ({}) | {} ({}) | {} ({}) | {} | {} | {} | {} |\n",
        s.probes,
        s.could_act,
        pct(s.could_act_rate),
        s.changed,
        pct(s.override_rate),
        s.fell_back,
        pct(s.fallback_rate),
        fmt_ms(s.mean_selected_ttft_ms),
        fmt_ms(s.p90_selected_ttft_ms),
        fmt_ms(s.regret_ms),
        reasons
    )
}

const VARIANT_HEADER: &str = "| variant | probes | could act | changed | fell back | mean selected TTFT (ms) | p90 (ms) | regret vs oracle (ms) | fallback reasons |\n|---|---|---|---|---|---|---|---|---|\n";

/// Writes `report.md` and `plots/` into `dir`.
pub fn write_report(out: &SelectOutput, dir: &Path) -> Result<PathBuf, ToolError> {
    let draw_err = |e: sy_report::ReportError| ToolError::Runtime(e.to_string());
    let sel = &out.selection;
    let m = &out.margins;
    let mut r = Report::new(dir, "Calibration report");

    // Summary.
    r.markdown(&format!(
        "## Summary\n\n\
         | | |\n|---|---|\n\
         | bundle | `bundle.json` — variant **{}**, content hash `{}` |\n\
         | threshold rule | **{}** (r = {}, p = {}) — {} |\n\
         | estimator | **{}** (delta_blind = {} ms, delta_cache = {} ms) — {} |\n\
         | guard limits | max age {} ms, destination limit {}, local limit {} |\n\
         | split seed | {} |\n\
         | pairs | search (fit split): {}; selection split: {} ({} unmeasured) |\n",
        out.bundle.variant,
        out.bundle.content_hash,
        sel.threshold_rule.variant,
        fmt_opt(sel.thresholds.r),
        fmt_opt(sel.thresholds.p),
        sel.threshold_rule.reason,
        sel.estimator.variant,
        fmt_ms(sel.margins.blind),
        fmt_ms(sel.margins.cache),
        sel.estimator.reason,
        sel.limits.max_age_ms,
        sel.limits.destination_limit,
        sel.limits.local_limit,
        sel.split_seed,
        sel.search_pairs,
        sel.replay.pairs,
        sel.replay.pairs_unmeasured,
    ));
    if !sel.warnings.is_empty() {
        let mut w = String::from("**Warnings**\n\n");
        for x in &sel.warnings {
            w.push_str(&format!("- {x}\n"));
        }
        r.markdown(&w);
    }

    // Variants (the numbers `replay` reproduces).
    let mut t = String::from(
        "## Variants on the selection split (frozen bundle parameters)\n\nEvery decision goes through `sy_selector::decide` with the parameters of `bundle.json`; Stage's proposal is taken as efficient for every pair. `sy-select replay --bundle bundle.json --records RUN_DIR --splits RUN_DIR/splits.json --split selection` reproduces this table.\n\n",
    );
    t.push_str(VARIANT_HEADER);
    for v in &sel.replay.variants {
        t.push_str(&variant_row(v.variant.as_str(), &v.all));
    }
    r.markdown(&t);
    let mut t = String::from(
        "### By background generation length\n\nEqual request counts with short versus long background generations: R and P cannot see the remaining generation work, so a gap between these rows is the proposal's known limitation.\n\n",
    );
    t.push_str(VARIANT_HEADER);
    for v in &sel.replay.variants {
        for (len, s) in &v.by_decode_length {
            t.push_str(&variant_row(&format!("{} / {len}", v.variant), s));
        }
    }
    r.markdown(&t);
    let bars: Vec<Bar> = sel
        .replay
        .variants
        .iter()
        .map(|v| Bar {
            label: v.variant.as_str().to_string(),
            value: v.all.mean_selected_ttft_ms,
            annotation: format!("{} overrides", pct(v.all.override_rate)),
        })
        .collect();
    r.figure(
        "variants",
        "Mean selected TTFT per variant (selection split), with override rates",
        &Plot::Bars {
            title: "Mean selected TTFT per variant".into(),
            y_label: "mean selected TTFT (ms)".into(),
            bars,
        },
    )
    .map_err(draw_err)?;
    let mut t = String::from(
        "### Each variant with its own searched thresholds\n\nThe comparison behind the choice of threshold rule (`count` with its own r; `count_prefill` with its own r and p).\n\n",
    );
    t.push_str(VARIANT_HEADER);
    for v in &sel.candidates.variants {
        t.push_str(&variant_row(v.variant.as_str(), &v.all));
    }
    r.markdown(&t);

    // Search.
    let s = |o: &crate::search::SearchOutcome| {
        format!(
            "| {:?} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            o.family,
            fmt_opt(o.best.rule.r),
            fmt_opt(o.best.rule.p),
            fmt_ms(o.best.mean_selected_ttft_ms),
            o.best.overrides,
            fmt_ms(o.stage_mean_ttft_ms),
            fmt_ms(o.oracle_mean_ttft_ms),
            o.rules_evaluated,
            o.tied_rules
        )
    };
    r.markdown(&format!(
        "## r/p search (fit split)\n\nMinimises the mean selected TTFT over {} paired probes; ties (within 1e-9 ms) go to fewer overrides, fewer terms, the larger r, the larger p.\n\n\
         | family | r | p | mean selected TTFT (ms) | overrides | Stage (ms) | oracle (ms) | rules evaluated | tied |\n|---|---|---|---|---|---|---|---|---|\n{}{}",
        sel.search_pairs,
        s(&sel.search_count),
        s(&sel.search_count_prefill)
    ));
    if let Some(l) = &sel.landscape {
        let best = sel.search_count_prefill.best.rule;
        let mark = l
            .rows
            .iter()
            .position(|row| row.r == best.r)
            .zip(l.p_columns.iter().position(|p| *p == best.p));
        r.figure(
            "rp_landscape",
            "r/p objective landscape: mean selected TTFT (ms) on the fit split; the chosen count_prefill rule is outlined (columns are a sample of the p candidates)",
            &Plot::Heatmap {
                title: "mean selected TTFT (ms) by r and p".into(),
                x_label: "p (P_eff > p)".into(),
                y_label: "r (R_eff >= r)".into(),
                x_ticks: l.p_columns.iter().map(|p| p.map_or("off".into(), |v| format!("{v:.3}"))).collect(),
                y_ticks: l.rows.iter().map(|row| row.r.map_or("off".into(), |v| format!("{v}"))).collect(),
                values: l.rows.iter().map(|row| row.mean_selected_ttft_ms.clone()).collect(),
                mark,
            },
        )
        .map_err(draw_err)?;
    }

    // Margins.
    let mut t = String::from(
        "## Margins (uncertainty split)\n\n`delta` is the proposal's definition: each condition's largest absolute error of the predicted advantage across its repeats, then the 90th percentile across conditions. Because it takes a maximum, it grows with the number of repeats; the per-probe 90th percentile does not. Both are shown so the effect is visible.\n\n\
         | estimator | delta (ms) | conformal bound (ms) | rank ⌈0.9(G+1)⌉ | G conditions | per-probe p90 (ms) | repeats min / median / max | pairs used | excluded | mean error (ms) |\n|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for (name, e) in [("blind", &m.blind), ("cache", &m.cache)] {
        let e2 = &e.estimate;
        t.push_str(&format!(
            "| {name} | {} | {} | {} | {} | {} | {} | {} | {} {:?} | {} |\n",
            e2.delta_ms.map_or("—".into(), fmt_ms),
            e2.conformal_ms.map_or("∞".into(), fmt_ms),
            e2.conformal_rank,
            e2.conditions,
            e2.per_probe_delta_ms.map_or("—".into(), fmt_ms),
            e2.repeats.as_ref().map_or("—".into(), |r| format!(
                "{} / {} / {}",
                r.min, r.median, r.max
            )),
            e2.pairs_used,
            e2.pairs_excluded,
            e.excluded_by_reason,
            e2.mean_error_ms.map_or("—".into(), fmt_ms),
        ));
    }
    r.markdown(&t);
    let mut series = Vec::new();
    let mut vlines = Vec::new();
    for (name, e) in [("blind", &m.blind.estimate), ("cache", &m.cache.estimate)] {
        let mut scores: Vec<f64> = e.condition_scores.iter().map(|c| c.score_ms).collect();
        series.push(Series {
            name: format!("{name}: per-condition max error"),
            points: ecdf(&mut scores),
        });
        if let Some(d) = e.delta_ms {
            vlines.push((d, format!("delta_{name} = {} ms", fmt_ms(d))));
        }
        if let Some(d) = e.per_probe_delta_ms {
            vlines.push((d, format!("{name} per-probe p90 = {} ms", fmt_ms(d))));
        }
    }
    r.figure(
        "margin_cdf",
        "CDF of per-condition advantage errors with the margins marked",
        &Plot::Lines {
            title: "per-condition absolute advantage error".into(),
            x_label: "max |predicted − measured advantage| (ms)".into(),
            y_label: "fraction of conditions".into(),
            series,
            log_x: false,
            vlines,
        },
    )
    .map_err(draw_err)?;

    // Q tables.
    r.markdown("## Q tables (no-load TTFT)");
    for (name, est) in [
        ("efficient", &out.fit.efficient),
        ("capable", &out.fit.capable),
    ] {
        let (heat, lines) = q_plots(name, est);
        r.figure(
            &format!("q_heatmap_{name}"),
            &format!("Q table of the {name} model"),
            &heat,
        )
        .map_err(draw_err)?;
        r.figure(
            &format!("q_lines_{name}"),
            &format!("No-load TTFT vs N per cached fraction, {name} model"),
            &lines,
        )
        .map_err(draw_err)?;
    }

    // Estimators.
    let mut t = String::from(
        "## Estimators on the selection split\n\n| estimator | model | points | mean error (ms) | mean |error| (ms) | mean residual short (ms) | mean residual long (ms) |\n|---|---|---|---|---|---|---|\n",
    );
    for estimator in Estimator::ALL {
        let preds = predictions(out, estimator);
        for (efficient, model) in [(true, "efficient"), (false, "capable")] {
            let mine: Vec<_> = preds.iter().filter(|p| p.0 == efficient).collect();
            let n = mine.len().max(1) as f64;
            let bias = mine.iter().map(|p| p.2 - p.3).sum::<f64>() / n;
            let mae = mine.iter().map(|p| (p.2 - p.3).abs()).sum::<f64>() / n;
            let resid = |len: DecodeLength| {
                let v: Vec<f64> = mine
                    .iter()
                    .filter(|p| p.1 == Some(len))
                    .map(|p| p.3 - p.2)
                    .collect();
                if v.is_empty() {
                    "—".to_string()
                } else {
                    fmt_ms(v.iter().sum::<f64>() / v.len() as f64)
                }
            };
            t.push_str(&format!(
                "| {} | {model} | {} | {} | {} | {} | {} |\n",
                estimator.as_str(),
                mine.len(),
                fmt_ms(bias),
                fmt_ms(mae),
                resid(DecodeLength::Short),
                resid(DecodeLength::Long)
            ));
        }
        let series: Vec<Series> = [(true, "efficient"), (false, "capable")]
            .iter()
            .map(|&(efficient, model)| {
                let pts: Vec<(f64, f64)> = preds
                    .iter()
                    .filter(|p| p.0 == efficient)
                    .map(|p| (p.3, p.2))
                    .collect();
                Series {
                    name: model.to_string(),
                    points: thin(&pts, 3000),
                }
            })
            .collect();
        r.figure(
            &format!("predicted_vs_measured_{}", estimator.as_str()),
            &format!(
                "Predicted vs measured TTFT, {} estimator (selection split)",
                estimator.as_str()
            ),
            &Plot::Scatter {
                title: format!("T_{} predicted vs measured", estimator.as_str()),
                x_label: "measured TTFT (ms)".into(),
                y_label: "predicted TTFT (ms)".into(),
                series,
                diagonal: true,
            },
        )
        .map_err(draw_err)?;
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
                        name: format!("{model}, {} background", len.as_str()),
                        points: ecdf(&mut v),
                    });
                }
            }
        }
        r.figure(
            &format!("residuals_by_decode_length_{}", estimator.as_str()),
            &format!(
                "Residuals (measured − predicted) by background generation length, {} estimator",
                estimator.as_str()
            ),
            &Plot::Lines {
                title: format!(
                    "T_{} residuals: short vs long background generations",
                    estimator.as_str()
                ),
                x_label: "measured − predicted TTFT (ms)".into(),
                y_label: "fraction of probes".into(),
                series,
                log_x: false,
                vlines: vec![(0.0, "zero".into())],
            },
        )
        .map_err(draw_err)?;
    }
    r.markdown(&t);
    r.markdown(&format!(
        "## Provenance\n\nInputs:\n\n{}\nTools: {:?}",
        sel.input_files
            .iter()
            .map(|f| format!("- `{}` sha256 `{}`\n", f.path, f.sha256))
            .collect::<String>(),
        sel.tool_versions
    ));
    r.write().map_err(draw_err)
}
