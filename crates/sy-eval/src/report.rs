//! `report.md` and plots of an evaluation (drawn by `sy-report`).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use sy_report::{Bar, Bars, Lines, Plot, Report, Series};

use sy_rundir::artifact::comparison::{Comparison, VariantSummary};
use sy_rundir::artifact::eval_block::BlockResult;
use sy_stats::sessions::{Distribution, Estimate, Summary};

fn est(e: &Estimate) -> String {
    match e.ci95 {
        Some(ci) => format!("{:.1} [{:.1}, {:.1}]", e.value, ci.lo, ci.hi),
        None => format!("{:.1}", e.value),
    }
}

fn summary_cells(s: &Option<Summary>) -> String {
    match s {
        Some(s) => format!("{} | {} | {}", est(&s.mean), est(&s.p50), est(&s.p90)),
        None => "– | – | –".into(),
    }
}

fn dist_cells(d: &Option<Distribution>) -> String {
    match d {
        Some(d) => format!(
            "{} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2}",
            d.n, d.mean, d.p50, d.p90, d.p99, d.max
        ),
        None => "0 | – | – | – | – | –".into(),
    }
}

/// The tables of the report (also printed by `--json`-less runs).
pub fn tables(c: &Comparison) -> String {
    let mut md = String::new();
    if c.aa {
        let _ = writeln!(
            md,
            "**A/A check** (`--aa`): `{}` in both arms; in every table the first row is arm A, the second arm B. Any verdict but `no significant difference` is a false one.\n",
            c.baseline
        );
    }
    let _ = writeln!(
        md,
        "## Session completion time and per-turn TTFT (ms)\n\nMean, p50 and p90 with 95% grouped bootstrap intervals (rounds, then whole sessions within them, resampled), over the sessions without a failed turn; the success rate with its Wilson 95% interval.\n\n| variant | sessions (failed) | success rate [95%] | session mean | session p50 | session p90 | turns (failed) | TTFT mean | TTFT p50 | TTFT p90 |\n|---|---|---|---|---|---|---|---|---|---|"
    );
    for v in &c.variants {
        let _ = writeln!(
            md,
            "| {} | {} ({}) | {} | {} | {} ({}) | {} |",
            v.variant,
            v.sessions,
            v.sessions_failed,
            match (v.session_success_rate, v.session_success_ci95) {
                (Some(r), Some((lo, hi))) =>
                    format!("{:.1}% [{:.1}, {:.1}]", 100.0 * r, 100.0 * lo, 100.0 * hi),
                _ => "–".into(),
            },
            summary_cells(&v.session_completion_ms),
            v.turns,
            v.turns_failed,
            summary_cells(&v.turn_ttft_ms)
        );
    }
    let _ = writeln!(
        md,
        "\n## Against the baseline `{}` (paired by session shape)\n\n| variant | pairs | Δ session time ms [95%] | relative | Δ session mean TTFT ms [95%] | turns with another model | verdict |\n|---|---|---|---|---|---|---|",
        c.baseline
    );
    for d in &c.differences {
        let _ = writeln!(
            md,
            "| {} | {} | {} | {} | {} | {} of {} | {} |",
            d.variant,
            d.pairs,
            d.session_time_ms.as_ref().map_or("–".into(), est),
            d.session_time_relative
                .map_or("–".into(), |r| format!("{:+.1}%", r * 100.0)),
            d.session_mean_ttft_ms.as_ref().map_or("–".into(), est),
            d.changed_turns,
            d.paired_turns,
            d.verdict
        );
    }
    let _ = writeln!(
        md,
        "\n## Decisions\n\n| variant | efficient proposals | overrides | override rate | fallbacks | fallback rate | capable share | mean uncached input tokens | reasons |\n|---|---|---|---|---|---|---|---|---|"
    );
    for v in &c.variants {
        let reasons: Vec<String> = v.reasons.iter().map(|(k, n)| format!("{k} {n}")).collect();
        let _ = writeln!(
            md,
            "| {} | {} | {} | {:.1}% | {} | {:.1}% | {:.1}% | {} | {} |",
            v.variant,
            v.efficient_proposals,
            v.overrides,
            v.override_rate * 100.0,
            v.fallbacks,
            v.fallback_rate * 100.0,
            v.capable_share * 100.0,
            v.mean_uncached_input_tokens
                .map_or("–".into(), |u| format!("{u:.0}")),
            reasons.join(", ")
        );
    }
    let _ = writeln!(
        md,
        "\n## Routing overhead per turn (observe both candidates + decide, ms)\n\n| variant | n | mean | p50 | p90 | p99 | max | observation alone: n | mean | p50 | p90 | p99 | max |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for v in &c.variants {
        let _ = writeln!(
            md,
            "| {} | {} | {} |",
            v.variant,
            dist_cells(&v.routing_overhead_ms),
            dist_cells(&v.observe_ms)
        );
    }
    let _ = writeln!(
        md,
        "\n## Competing traffic (background requests that ended while the sessions ran, ms)\n\n| variant | requests (failed) | TTFT n | mean | p50 | p90 | p99 | max | full response n | mean | p50 | p90 | p99 | max |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    );
    for v in &c.variants {
        let _ = writeln!(
            md,
            "| {} | {} ({}) | {} | {} |",
            v.variant,
            v.background_requests,
            v.background_failed,
            dist_cells(&v.background_ttft_ms),
            dist_cells(&v.background_e2e_ms)
        );
    }
    if !c.warnings.is_empty() {
        let _ = writeln!(md, "\n## Warnings\n");
        for w in &c.warnings {
            let _ = writeln!(md, "- {w}");
        }
    }
    md
}

fn cdf(values: &mut [f64]) -> Vec<(f64, f64)> {
    values.sort_by(f64::total_cmp);
    let n = values.len() as f64;
    values
        .iter()
        .enumerate()
        .map(|(i, v)| (*v, (i + 1) as f64 / n))
        .collect()
}

fn cdf_plot(
    title: &str,
    x_label: &str,
    blocks: &[BlockResult],
    c: &Comparison,
    pick: &dyn Fn(&BlockResult) -> Vec<f64>,
) -> Plot {
    let series = c
        .variants
        .iter()
        .map(|v| {
            let mut values: Vec<f64> = blocks
                .iter()
                .filter(|b| b.variant == v.variant)
                .flat_map(pick)
                .filter(|x| x.is_finite())
                .collect();
            Series {
                name: v.variant.to_string(),
                points: cdf(&mut values),
            }
        })
        .collect();
    Plot::Lines(Lines {
        title: title.into(),
        x_label: x_label.into(),
        y_label: "fraction ≤ x".into(),
        series,
        log_x: false,
        x_ticks: None,
        y_range: Some((0.0, 1.0)),
        step: true,
        bands: vec![],
        vlines: vec![],
    })
}

fn bars(variants: &[VariantSummary]) -> Plot {
    Plot::Bars(Bars {
        title: "Mean session completion time (95% interval)".into(),
        x_label: "variant".into(),
        y_label: "ms".into(),
        bars: variants
            .iter()
            .map(|v| {
                let mean = v.session_completion_ms.as_ref().map(|s| s.mean);
                Bar {
                    label: v.variant.to_string(),
                    value: mean.map_or(0.0, |m| m.value),
                    interval: mean.and_then(|m| m.ci95).map(|ci| (ci.lo, ci.hi)),
                    annotation: format!("overrides {:.0}%", v.override_rate * 100.0),
                }
            })
            .collect(),
    })
}

/// Writes `report.md` and its plots into `dir`; returns the report's path.
pub fn write_report(
    dir: &Path,
    title: &str,
    preamble: &str,
    c: &Comparison,
    blocks: &[BlockResult],
) -> Result<PathBuf, sy_report::ReportError> {
    let mut r = Report::new(dir, title)?;
    r.markdown(preamble);
    r.markdown(&tables(c));
    r.markdown("## Plots");
    r.figure("session_time_bars", "Mean session completion time per variant (annotation: override rate of efficient proposals)", bars(&c.variants));
    r.figure(
        "session_time_cdf",
        "Session completion time, distribution per variant",
        cdf_plot("Session completion time", "ms", blocks, c, &|b| {
            b.sessions
                .iter()
                .filter(|s| s.ok)
                .map(|s| s.completion_ms)
                .collect()
        }),
    );
    r.figure(
        "turn_ttft_cdf",
        "Per-turn TTFT, distribution per variant",
        cdf_plot("Per-turn TTFT", "ms", blocks, c, &|b| {
            b.turns.iter().filter_map(|t| t.ttft_ms).collect()
        }),
    );
    r.figure(
        "routing_overhead_cdf",
        "Routing overhead per turn (observe + decide), distribution per variant",
        cdf_plot("Routing overhead per turn", "ms", blocks, c, &|b| {
            b.turns.iter().map(|t| t.routing_overhead_ms).collect()
        }),
    );
    r.figure(
        "background_ttft_cdf",
        "Competing traffic: background TTFT per variant",
        cdf_plot("Background TTFT", "ms", blocks, c, &|b| {
            b.background.iter().filter_map(|s| s.ttft_ms).collect()
        }),
    );
    r.write()
}
