//! The generated `report.md` and its figures (drawn by `sy-report`).
//!
//! The report leads with the answer ([`headline_lines`]: chosen rule and estimator, change
//! versus Stage with its 95 % interval, stability over split seeds, caveats), then how often each
//! variant could act / changed / fell back, where the choice fails (by background generation
//! length and by prompt length), and only then the details: the r/p search, the margins, the Q
//! tables, the estimators, the commands that reproduce it and the provenance. Each stage is one
//! function below; [`write_report`] runs them in order.
//!
//! Every number in the variant tables is formatted from `selection.json`'s `replay`, which is
//! exactly what `sy-select replay --split selection` recomputes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use sy_run::Artifact;

use rayon::prelude::*;
use sy_report::{Bar, Bars, Heatmap, Lines, Plot, Report, Scatter, Series, VLine};
use sy_selector::{Estimator, ModelEstimators, Variant};
use sy_stats::{Interval, bootstrap_mean_difference_studentized, mean};

use crate::evaluate::{DecodeLength, EvalPair, VariantStats};
use crate::select::{SelectError, SelectOutput, SelectionFile};

/// Milliseconds as the report's tables print them.
pub fn fmt_ms(v: f64) -> String {
    format!("{v:.1}")
}

pub use crate::uncertainty::{fmt_interval, fmt_signed};

fn fmt_ci(i: Option<&Interval>) -> String {
    i.map_or("—".into(), |i| {
        format!(
            "{} [{}, {}]",
            fmt_ms(i.estimate),
            fmt_ms(i.lo),
            fmt_ms(i.hi)
        )
    })
}

fn fmt_change(i: Option<&Interval>) -> String {
    i.map_or("—".into(), |i| {
        format!(
            "{} [{}, {}]",
            fmt_signed(i.estimate),
            fmt_signed(i.lo),
            fmt_signed(i.hi)
        )
    })
}

fn fmt_threshold(v: Option<f64>) -> String {
    v.map_or_else(|| "disabled".to_string(), |x| format!("{x}"))
}

/// One trigger term in words: "R ≥ 5", or "R term off".
fn term(name: &str, op: &str, v: Option<f64>) -> String {
    v.map_or_else(
        || format!("{name} term off"),
        |x| format!("{name} {op} {x}"),
    )
}

fn pct(v: f64) -> String {
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

/// The answer in a few lines (the report's first screen and `sy-select`'s terminal summary).
pub fn headline_lines(s: &SelectionFile) -> Vec<String> {
    headline_lines_with(s, None)
}

/// [`headline_lines`], with the run's failed records when known (a line flags them).
pub fn headline_lines_with(
    s: &SelectionFile,
    failures: Option<&crate::failures::Failures>,
) -> Vec<String> {
    let h = &s.headline;
    let mut out = vec![format!(
        "Chosen: {} — threshold rule {}, estimator {}.",
        rule_text(s),
        h.threshold_rule,
        h.estimator
    )];
    let mark = |what: &str| {
        if h.indicative.iter().any(|r| r.starts_with(what)) {
            " (indicative)"
        } else {
            ""
        }
    };
    out.push(match &h.mean_change_vs_stage_ms {
        Some(i) => format!(
            "Change versus Stage (selection split, {} probes, {} conditions): mean selected TTFT {}{}, selection-adjusted over {} compared variants (without the adjustment {}); p90 {}{}.",
            s.replay.pairs,
            s.uncertainty.selection_conditions,
            fmt_interval(i),
            mark("the mean change"),
            h.compared.variants,
            h.mean_change_unadjusted_ms
                .as_ref()
                .map_or("—".into(), fmt_interval),
            h.p90_change_vs_stage_ms
                .as_ref()
                .map_or("—".into(), fmt_interval),
            mark("the p90 change"),
        ),
        None => "Change versus Stage: no interval (too few selection-split conditions).".into(),
    });
    if let Some(r) = &h.regret_ms {
        out.push(format!(
            "Regret versus the per-probe oracle (the faster model every time): {}.",
            fmt_interval(r)
        ));
    }
    out.push(format!(
        "Compared to choose: {} variants on the selection split ({} threshold rules, {} estimators), {} (r, p) thresholds searched on the fit split.",
        h.compared.variants,
        h.compared.threshold_rules,
        h.compared.estimators,
        h.compared.thresholds_searched
    ));
    if let Some(f) = failures.filter(|f| !f.conditions.is_empty()) {
        let (failed, records) = f
            .per_model
            .values()
            .fold((0, 0), |(a, b), (x, y)| (a + x, b + y));
        let flagged: std::collections::BTreeSet<&str> = f
            .conditions
            .iter()
            .map(|c| c.condition_id.as_str())
            .collect();
        let (failed_attempts, attempts) = f
            .per_model_attempts
            .values()
            .fold((0, 0), |(a, b), (x, y)| (a + x, b + y));
        out.push(format!(
            "Failures: {failed} of {records} records failed, {failed_attempts} of {attempts} attempts; {} of {} conditions flagged (see Failures).",
            flagged.len(),
            f.conditions_total
        ));
    }
    for (estimator, margin) in [
        (Variant::Blind, s.margins.blind),
        (Variant::Cache, s.margins.cache),
    ] {
        if let Some(v) = s.candidates.get(estimator).filter(|v| v.all.changed == 0) {
            out.push(format!(
                "The {estimator} estimator never acts on the selection split at its margin ({} ms): it changes none of {} probes, so comparing it is comparing Stage.",
                fmt_ms(margin),
                v.all.probes
            ));
        }
    }
    if let Some(st) = &s.stability {
        let counts = st
            .bundle_variant_counts
            .iter()
            .map(|(k, v)| format!("{k} {v}×"))
            .collect::<Vec<_>>()
            .join(", ");
        out.push(format!(
            "Robustness to the split ({} split seeds other than the run's, {}–{}, same records; not a replication): {counts}; {} chosen by {:.0} % — {}; median change versus Stage over the seeds {} ms (this run {} ms).",
            st.runs.len(),
            st.seeds.first().copied().unwrap_or(0),
            st.seeds.last().copied().unwrap_or(0),
            st.chosen,
            100.0 * st.chosen_share,
            if st.stable { "stable" } else { "UNSTABLE" },
            st.median_change_vs_stage_ms.map_or("—".into(), fmt_signed),
            h.mean_change_vs_stage_ms.map_or("—".into(), |i| fmt_signed(i.estimate)),
        ));
    }
    for c in &h.caveats {
        out.push(format!("Caveat: {c}."));
    }
    out
}

fn answer(r: &mut Report, out: &SelectOutput) {
    let s = &out.selection;
    let mut md = String::from("## Answer\n\n");
    for line in headline_lines_with(s, Some(&out.failures)) {
        let line = match line.strip_prefix("Caveat: ") {
            Some(c) => format!("> **Caveat:** {c}"),
            None => line,
        };
        md.push_str(&format!("{line}\n\n"));
    }
    for line in crate::design::design_lines(&out.options.records) {
        md.push_str(&format!("{line}\n\n"));
    }
    md.push_str(&format!(
        "The proposal's selection rule chose it (lower mean selected TTFT on the selection split); intervals resample whole conditions ({} resamples, seed {}): mean changes and regret are studentized (bootstrap-t) intervals, the headline's simultaneous over the compared variants; means, p90s and p90 changes are percentile intervals (methods and their measured coverage: docs/methodology.md). Stability repeats split, fit, margins, search and choice with other split seeds on the same records: robustness to the split, not replication. Bundle `bundle.json`, content hash `{}`.\n",
        s.uncertainty.bootstrap.resamples, s.uncertainty.bootstrap.seed, out.bundle.content_hash
    ));
    r.markdown(&md);
}

const VARIANT_HEADER: &str = "| variant | probes | could act | changed | fell back | fallback reasons | mean selected TTFT (ms) [95 % CI] | change vs Stage (ms) [95 % CI] | p90 (ms) [95 % CI] | p90 change vs Stage (ms) [95 % CI] | regret vs oracle (ms) [95 % CI] |\n|---|---|---|---|---|---|---|---|---|---|---|\n";

fn variant_row(
    name: &str,
    s: &VariantStats,
    u: Option<&crate::uncertainty::VariantUncertainty>,
) -> String {
    let reasons = if s.fallback_reasons.is_empty() {
        "—".to_string()
    } else {
        s.fallback_reasons
            .iter()
            .map(|(k, v)| format!("{k}: {v}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let (m, mc, p, pc, rg) = match u {
        Some(u) => (
            fmt_ci(u.mean_selected_ttft_ms.as_ref()),
            fmt_change(u.mean_change_vs_stage_ms.as_ref()),
            fmt_ci(u.p90_selected_ttft_ms.as_ref()),
            fmt_change(u.p90_change_vs_stage_ms.as_ref()),
            u.regret_ms
                .as_ref()
                .map_or_else(|| fmt_ms(s.regret_ms), |i| fmt_ci(Some(i))),
        ),
        None => (
            fmt_ms(s.mean_selected_ttft_ms),
            "—".into(),
            fmt_ms(s.p90_selected_ttft_ms),
            "—".into(),
            fmt_ms(s.regret_ms),
        ),
    };
    format!(
        "| {name} | {} | {} ({}) | {} ({}) | {} ({}) | {reasons} | {m} | {mc} | {p} | {pc} | {rg} |\n",
        s.probes,
        s.could_act,
        pct(s.could_act_rate),
        s.changed,
        pct(s.override_rate),
        s.fell_back,
        pct(s.fallback_rate),
    )
}

/// Stage's mean selected TTFT on the selection split (0 when it was not replayed).
fn stage_mean(sel: &SelectionFile) -> f64 {
    sel.replay
        .variants
        .iter()
        .find(|v| v.variant == Variant::Stage)
        .map_or(0.0, |v| v.all.mean_selected_ttft_ms)
}

fn variants(r: &mut Report, out: &SelectOutput) {
    let sel = &out.selection;
    let mut t = String::from(
        "## How often each variant could act, changed, fell back (selection split, frozen bundle parameters)\n\nEvery decision goes through `sy_selector::decide` with the parameters of `bundle.json`; Stage's proposal is taken as efficient for every pair. *Could act*: guard G held and the trigger was evaluated; *changed*: efficient → capable; *fell back*: a guard check or prediction failed and Stage's choice was kept. `sy-select replay … --split selection` reproduces this table (see *Reproduce*).\n\n",
    );
    t.push_str(VARIANT_HEADER);
    for v in &sel.replay.variants {
        t.push_str(&variant_row(
            v.variant.as_str(),
            &v.all,
            sel.uncertainty.get(v.variant),
        ));
    }
    r.markdown(&t);
    let bars: Vec<Bar> = sel
        .replay
        .variants
        .iter()
        .map(|v| {
            let u = sel
                .uncertainty
                .get(v.variant)
                .and_then(|u| u.mean_selected_ttft_ms);
            Bar {
                label: v.variant.as_str().to_string(),
                value: v.all.mean_selected_ttft_ms,
                interval: u.map(|i| (i.lo, i.hi)),
                annotation: format!(
                    "{} ms\n{} overrides",
                    fmt_ms(v.all.mean_selected_ttft_ms),
                    pct(v.all.override_rate)
                ),
            }
        })
        .collect();
    r.figure(
        "variants",
        "Mean selected TTFT per variant on the selection split with 95 % grouped-bootstrap intervals (error bars; each variant resampled on its own) and override rates; the paired change versus Stage is the next figure",
        Plot::Bars(Bars {
            title: format!(
                "Mean selected TTFT per variant (n = {} probes, {} conditions)",
                sel.replay.pairs, sel.uncertainty.selection_conditions
            ),
            x_label: "variant (frozen bundle parameters)".into(),
            y_label: "mean selected TTFT (ms)".into(),
            bars,
        }),
    );
    // The paired change: each variant's mean minus Stage's on the same resampled conditions.
    // The per-variant intervals above share the conditions' spread, so they overlap even when
    // the paired change excludes zero.
    // Stage stays in, as the zero line's own bar, so each variant keeps its colour of the
    // figure above.
    let changes: Vec<Bar> = sel
        .replay
        .variants
        .iter()
        .map(|v| {
            let c = sel
                .uncertainty
                .get(v.variant)
                .and_then(|u| u.mean_change_vs_stage_ms);
            let value = c.map_or(v.all.mean_selected_ttft_ms - stage_mean(sel), |c| {
                c.estimate
            });
            let annotation = if v.variant == Variant::Stage {
                "baseline".to_string()
            } else {
                format!("{value:+.1} ms")
            };
            Bar {
                label: v.variant.as_str().to_string(),
                value,
                interval: c.map(|i| (i.lo, i.hi)),
                annotation,
            }
        })
        .collect();
    r.figure(
        "change_vs_stage",
        &format!(
            "Change of the mean selected TTFT versus Stage per variant on the selection split ({} probes, {} conditions), paired: each bootstrap resample draws the same conditions for the variant and for Stage, and the error bar is the 95 % interval of the difference for that variant alone (the answer's interval for the chosen variant is also adjusted for the choice among the compared variants, so it is wider). Below zero is faster than Stage. The intervals of the figure above overlap because they carry the spread between conditions, which the paired difference cancels",
            sel.replay.pairs, sel.uncertainty.selection_conditions
        ),
        Plot::Bars(Bars {
            title: format!(
                "Change of mean selected TTFT versus Stage (paired, n = {} probes, {} conditions)",
                sel.replay.pairs, sel.uncertainty.selection_conditions
            ),
            x_label: "variant (frozen bundle parameters)".into(),
            y_label: "change vs Stage (ms)".into(),
            bars: changes,
        }),
    );
    let mut t = String::from(
        "### Each variant with its own searched thresholds\n\nThe comparison behind the choice of threshold rule (`count` with its own r; `count_prefill` with its own r and p).\n\n",
    );
    t.push_str(VARIANT_HEADER);
    for v in &sel.candidates.variants {
        t.push_str(&variant_row(v.variant.as_str(), &v.all, None));
    }
    r.markdown(&t);
}

/// Prompt-length bucket of a pair: the nearest power of two of the efficient candidate's N.
fn prompt_bucket(p: &EvalPair) -> Option<u64> {
    let n = p.efficient().valid_n().ok()?;
    (n > 0.0).then(|| 2f64.powf(n.log2().round()) as u64)
}

/// One row of "where it fails": the chosen variant against Stage on a subset of the
/// selection-split pairs (`rows`: their indices), with the TTFTs the frozen replay selected.
fn subgroup_row(out: &SelectOutput, label: &str, rows: &[usize]) -> String {
    let s = &out.selection;
    let of = |variant: Variant| -> Vec<f64> {
        let ttfts = out.selected_ttfts.iter().find(|(v, _)| *v == variant);
        let ttfts = ttfts.map_or(&[][..], |(_, t)| t);
        rows.iter().filter_map(|&i| ttfts.get(i).copied()).collect()
    };
    let (chosen, stage) = (of(s.bundle_variant), of(Variant::Stage));
    let pairs = || rows.iter().filter_map(|&i| out.selection_pairs.get(i));
    let oracle: Vec<f64> = pairs().map(|p| p.oracle_ttft()).collect();
    let ids: Vec<u64> = pairs().map(|p| p.condition).collect();
    let mut conds = ids.clone();
    conds.sort_unstable();
    conds.dedup();
    let change =
        bootstrap_mean_difference_studentized(&chosen, &stage, &ids, &s.uncertainty.bootstrap).ok();
    let changed = chosen
        .iter()
        .zip(&stage)
        .filter(|(a, b)| a.to_bits() != b.to_bits())
        .count();
    let mut changed_conditions: Vec<u64> = (chosen.iter().zip(&stage).zip(&ids))
        .filter(|((a, b), _)| a.to_bits() != b.to_bits())
        .map(|(_, c)| *c)
        .collect();
    changed_conditions.sort_unstable();
    changed_conditions.dedup();
    let indicative = (changed_conditions.len() as u64) < crate::uncertainty::MIN_CHANGED_CONDITIONS
        && changed > 0;
    format!(
        "| {label} | {} | {} | {} | {}{} | {} | {} |\n",
        rows.len(),
        conds.len(),
        fmt_ms(mean(&stage)),
        fmt_change(change.as_ref()),
        if indicative { " (indicative)" } else { "" },
        changed,
        fmt_ms(mean(&chosen) - mean(&oracle)),
    )
}

/// The "Where it fails" section's markdown.
fn where_it_fails(out: &SelectOutput) -> String {
    let pairs = &out.selection_pairs;
    let v = out.selection.bundle_variant;
    let mut t = format!(
        "## Where it helps and where it fails\n\nThe chosen variant (`{v}`) against Stage on parts of the selection split: a change whose interval lies below zero is where it helps, one that reaches zero or above is where it does not. The background rows partition the probes, and so do the prompt-length rows. R and P cannot see the remaining generation work of the background requests, so equal request counts with short versus long background generations are the proposal's known blind spot. *Changed TTFT* counts probes whose selected TTFT differs from Stage's. The change's interval is studentized over the subset's conditions, not adjusted for the choice or for the number of subsets, and marked *indicative* when the variant changes fewer than 5 of the subset's conditions.\n\n| subset | probes | conditions | Stage mean (ms) | change vs Stage (ms) [95 % CI] | changed TTFT | regret vs oracle (ms) |\n|---|---|---|---|---|---|---|\n"
    );
    // Each subset as the indices of its pairs.
    let rows_where = |keep: &dyn Fn(&EvalPair) -> bool| -> Vec<usize> {
        (pairs.iter().enumerate())
            .filter_map(|(i, p)| keep(p).then_some(i))
            .collect()
    };
    let mut subsets: Vec<(String, Vec<usize>)> = Vec::new();
    for (label, len) in [
        ("background: short generations", Some(DecodeLength::Short)),
        ("background: long generations", Some(DecodeLength::Long)),
        ("background: other conditions", None),
    ] {
        let sub = rows_where(&|p| p.decode_length == len);
        if !sub.is_empty() {
            subsets.push((label.to_string(), sub));
        }
    }
    // Each pair's bucket once; the buckets in ascending order, each with its pairs in order.
    let mut buckets: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
    for (i, b) in pairs
        .iter()
        .enumerate()
        .filter_map(|(i, p)| Some((i, prompt_bucket(p)?)))
    {
        buckets.entry(b).or_default().push(i);
    }
    for (b, sub) in buckets {
        subsets.push((format!("prompt ≈ {b} tokens"), sub));
    }
    // Each row bootstraps on its own: the rows are computed in parallel, written in order.
    let rows: Vec<String> = subsets
        .par_iter()
        .map(|(label, sub)| subgroup_row(out, label, sub))
        .collect();
    t.extend(rows);
    t
}

fn stability(r: &mut Report, out: &SelectOutput) {
    let Some(st) = &out.selection.stability else {
        r.markdown("## Robustness to the split\n\nNot run (`--stability-seeds 0`).");
        return;
    };
    let counts = |m: &std::collections::BTreeMap<String, u64>| {
        m.iter()
            .map(|(k, v)| format!("{k} {v}×"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut t = format!(
        "## Robustness to the split\n\nThe whole calibration repeated on the same records with split seeds {}–{}, other than the run's own (grouped split, fit, margins, r/p search, evaluation, choice): robustness to the split, not a replication (new records could choose differently). Bundle variant: {}. Threshold rule: {}. Estimator: {}. The run's own choice (`{}`) is made by {:.0} % of the seeds; at least {:.0} % is called stable.\n\n| seed | conditions fit / uncertainty / selection | threshold rule | r | p | estimator | bundle variant | change vs Stage (ms) |\n|---|---|---|---|---|---|---|---|\n",
        st.seeds.first().copied().unwrap_or(0),
        st.seeds.last().copied().unwrap_or(0),
        counts(&st.bundle_variant_counts),
        counts(&st.threshold_rule_counts),
        counts(&st.estimator_counts),
        st.chosen,
        100.0 * st.chosen_share,
        100.0 * crate::stability::STABLE_SHARE,
    );
    for run in &st.runs {
        t.push_str(&format!(
            "| {} | {} / {} / {} | {} | {} | {} | {} | {} | {} |\n",
            run.seed,
            run.conditions[0],
            run.conditions[1],
            run.conditions[2],
            run.threshold_rule,
            fmt_threshold(run.thresholds.r),
            fmt_threshold(run.thresholds.p),
            run.estimator,
            run.bundle_variant,
            fmt_signed(run.mean_change_vs_stage_ms)
        ));
    }
    for (seed, why) in &st.failed {
        t.push_str(&format!("| {seed} | failed: {why} | | | | | | |\n"));
    }
    r.markdown(&t);
}

fn search(r: &mut Report, out: &SelectOutput) {
    let sel = &out.selection;
    let row = |name: &str, o: &crate::search::SearchOutcome| {
        format!(
            "| {name} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            fmt_threshold(o.best.rule.r),
            fmt_threshold(o.best.rule.p),
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
        row("count", &sel.search_count),
        row("count_prefill", &sel.search_count_prefill)
    ));
    let Some(l) = &sel.landscape else {
        return;
    };
    // The chosen threshold rule: `count`'s rules are the `off` column (p disabled).
    let chosen = sel.thresholds;
    let mark = l
        .rows
        .iter()
        .position(|row| row.r == chosen.r)
        .zip(l.p_columns.iter().position(|p| *p == chosen.p));
    let rule = format!(
        "the chosen threshold rule (`{}`: r {}, p {})",
        sel.threshold_rule.variant,
        fmt_threshold(chosen.r),
        fmt_threshold(chosen.p)
    );
    let outline = if mark.is_some() {
        format!("{rule} is outlined in red")
    } else {
        format!("{rule} is not among the columns drawn, so nothing is outlined")
    };
    let caption = format!(
        "r/p objective landscape: mean selected TTFT (ms) on the fit split ({} probes), every rule of the `count_prefill` family; the `off` column (p disabled) holds the `count` rules. {outline}. Columns are the observed p candidates in order (a categorical axis, not to scale){}",
        sel.search_pairs,
        if l.p_columns.len() as u64 <= sel.search_count_prefill.p_candidates {
            ""
        } else {
            "; a sample when there are many"
        }
    );
    r.figure(
        "rp_landscape",
        &caption,
        Plot::Heatmap(Heatmap {
            title: format!(
                "Mean selected TTFT by r and p (fit split, n = {})",
                sel.search_pairs
            ),
            x_label: "p: trigger when P_eff > p (observed values, not to scale)".into(),
            y_label: "r: trigger when R_eff ≥ r".into(),
            value_label: "ms".into(),
            x_ticks: l
                .p_columns
                .iter()
                .map(|p| p.map_or("off".into(), |v| format!("{v:.3}")))
                .collect(),
            y_ticks: l
                .rows
                .iter()
                .map(|row| row.r.map_or("off".into(), |v| format!("{v:.0}")))
                .collect(),
            values: l
                .rows
                .iter()
                .map(|row| row.mean_selected_ttft_ms.clone())
                .collect(),
            decimals: 1,
            counts: None,
            mark,
        }),
    )
}

fn ecdf(values: &mut [f64]) -> Vec<(f64, f64)> {
    // Unstable: values equal under `total_cmp` are the same bits.
    values.sort_unstable_by(f64::total_cmp);
    let n = values.len() as f64;
    values
        .iter()
        .enumerate()
        .map(|(i, &x)| (x, (i + 1) as f64 / n))
        .collect()
}

fn margins(r: &mut Report, out: &SelectOutput) {
    let m = &out.margins;
    let u = &out.selection.uncertainty.margins;
    let mut t = String::from(
        "## Margins (uncertainty split)\n\n`delta` is the proposal's definition: each condition's largest absolute error of the predicted advantage across its repeats, then the 90th percentile across conditions; its interval resamples conditions. Because it takes a maximum, it grows with the number of repeats; the per-probe 90th percentile does not.\n\n\
         | estimator | delta (ms) [95 % CI] | conformal bound (ms) | rank ⌈0.9(G+1)⌉ | G conditions | per-probe p90 (ms) | repeats min / median / max | pairs used | excluded | mean error (ms) |\n|---|---|---|---|---|---|---|---|---|---|\n",
    );
    let mut series = Vec::new();
    let mut vlines = Vec::new();
    for (name, e) in [("blind", &m.blind), ("cache", &m.cache)] {
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
const RELIABILITY_LEVELS: [f64; 7] = [0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99];

/// Held-out coverage of the margins: on the selection split (conditions the margins never saw),
/// each condition's score as the margin defines it (the largest |predicted − measured advantage|
/// over its repeats) and the share of conditions whose score is at most δ (target: the margin's
/// level, 0.90); for several levels, δ at that level from the uncertainty split against its
/// held-out share (a reliability plot).
fn margin_coverage(r: &mut Report, out: &SelectOutput) {
    let m = &out.margins;
    let mut t = format!(
        "### Margins on held-out conditions\n\nOn the selection split (conditions neither the fit nor the margins saw): each condition's largest |predicted − measured advantage| over its repeats, and the share of conditions within δ; the target is the margin's level ({:.0} %). Wilson 95 % intervals.\n\n| estimator | δ (ms) | held-out conditions | share within δ [95 %] |\n|---|---|---|---|\n",
        100.0 * m.level
    );
    let mut series = vec![Series {
        name: "nominal".into(),
        points: RELIABILITY_LEVELS.iter().map(|&q| (q, q)).collect(),
    }];
    for (name, estimator, e) in [
        ("blind", Estimator::Blind, &m.blind),
        ("cache", Estimator::Cache, &m.cache),
    ] {
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

/// Column `j` of a Q table by its cached fraction: the value when every row has the same, else the
/// range over the rows (each row's f axis is the fraction observed at its prompt length).
fn f_column_label(q: &sy_selector::QTable, j: usize) -> String {
    let fs: Vec<f64> = (0..q.n_axis().len())
        .filter_map(|i| q.f_row(i).get(j).copied())
        .collect();
    let (lo, hi) = fs
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &f| {
            (lo.min(f), hi.max(f))
        });
    if format!("{lo:.3}") == format!("{hi:.3}") {
        format!("{lo:.3}")
    } else {
        format!("{lo:.3}–{hi:.3}")
    }
}

fn q_plots(
    name: &str,
    est: &ModelEstimators,
    report: Option<&sy_calibration::fitting::qbuild::QTableReport>,
) -> (Plot, Plot) {
    let q = &est.q;
    let n_axis = q.n_axis();
    let f_labels: Vec<String> = (0..q.f_len()).map(|j| f_column_label(q, j)).collect();
    let cell = |i: usize, j: usize| {
        report?
            .cells
            .iter()
            .find(|c| c.n == n_axis[i] && Some(&c.f) == q.f_row(i).get(j))
    };
    let values: Vec<Vec<f64>> = (0..n_axis.len())
        .map(|i| {
            (0..q.f_len())
                .map(|j| q.value(i, j).unwrap_or(f64::NAN))
                .collect()
        })
        .collect();
    let counts: Vec<Vec<u64>> = (0..n_axis.len())
        .map(|i| {
            (0..q.f_len())
                .map(|j| cell(i, j).map_or(0, |c| c.count as u64))
                .collect()
        })
        .collect();
    let heat = Plot::Heatmap(Heatmap {
        title: format!("Q table, {name} model: median no-load TTFT"),
        x_label: "cached fraction f (observed K/N)".into(),
        y_label: "prompt tokens N (observed)".into(),
        value_label: "TTFT (ms)".into(),
        x_ticks: f_labels.clone(),
        y_ticks: n_axis.iter().map(|n| format!("{n:.0}")).collect(),
        values: values.clone(),
        decimals: 1,
        counts: report.map(|_| counts),
        mark: None,
    });
    let mut series = Vec::new();
    let mut bands = Vec::new();
    for (j, f) in f_labels.iter().enumerate() {
        series.push(Series {
            name: format!("f = {f}"),
            points: n_axis
                .iter()
                .zip(&values)
                .map(|(n, row)| (*n, row[j]))
                .filter(|p| p.1.is_finite())
                .collect(),
        });
        bands.push(sy_report::Band {
            name: "interquartile range of the repeats".into(),
            colour: j,
            points: (0..n_axis.len())
                .filter_map(|i| {
                    let c = cell(i, j)?;
                    Some((n_axis[i], c.p25_ms?, c.p75_ms?))
                })
                .collect(),
        });
    }
    let lines = Plot::Lines(Lines {
        title: match report {
            Some(r) => format!(
                "{name} model: no-load TTFT vs prompt length ({} records)",
                r.records
            ),
            None => format!("{name} model: no-load TTFT vs prompt length"),
        },
        x_label: "prompt tokens N (log scale)".into(),
        y_label: "median TTFT (ms)".into(),
        series,
        log_x: true,
        x_ticks: Some(n_axis.to_vec()),
        y_range: None,
        step: false,
        bands,
        vlines: vec![],
    });
    (heat, lines)
}

fn q_tables(r: &mut Report, out: &SelectOutput) {
    r.markdown("## Q tables (no-load TTFT)\n\nEach cell is the median TTFT of its Q-grid records (n = records in the cell); the cached-fraction axis is the observed K/N of each cell (block-rounded, so it differs by prompt length: a column spanning several values is labelled with their range), the N axis the observed prompt length.");
    for (name, est, rep) in [
        (
            "efficient",
            &out.fit.efficient,
            out.fit_file.as_ref().map(|f| &f.models.efficient.q_table),
        ),
        (
            "capable",
            &out.fit.capable,
            out.fit_file.as_ref().map(|f| &f.models.capable.q_table),
        ),
    ] {
        let (heat, lines) = q_plots(name, est, rep);
        r.figure(
            &format!("q_heatmap_{name}"),
            &format!("Q table of the {name} model (cell: median TTFT in ms and record count)"),
            heat,
        );
        r.figure(
            &format!("q_lines_{name}"),
            &format!("No-load TTFT vs N per cached fraction, {name} model; shaded: interquartile range of the cell's records"),
            lines,
        );
    }
}

/// The client − server TTFT gap per phase and model ([`crate::gap`]) over every record the run
/// was given.
fn client_server_gap(r: &mut Report, out: &SelectOutput) {
    r.markdown(&crate::gap::gap_markdown(&out.gap));
}

/// (efficient?, decode length, predicted, measured) of both candidates of every pair.
type Prediction = (bool, Option<DecodeLength>, f64, f64);

fn predictions(out: &SelectOutput, estimator: Estimator) -> Vec<Prediction> {
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
fn r_squared(points: &[&Prediction]) -> Option<f64> {
    let m = mean(&points.iter().map(|p| p.3).collect::<Vec<_>>());
    let tss: f64 = points.iter().map(|p| (p.3 - m).powi(2)).sum();
    let sse: f64 = points.iter().map(|p| (p.3 - p.2).powi(2)).sum();
    (tss > 0.0).then(|| 1.0 - sse / tss)
}

/// A figure of the report: (name, caption, plot), added in order by [`Report::figure`].
type Figure = (String, String, Plot);

/// The estimator's two figures (predicted vs measured, residuals by background length).
fn estimator_figures(estimator: Estimator, preds: &[Prediction]) -> [Figure; 2] {
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
fn coefficients(r: &mut Report, out: &SelectOutput) {
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
        for (name, c) in [("blind", &m.blind), ("cache", &m.cache)] {
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
fn all_predictions(out: &SelectOutput) -> Vec<Vec<Prediction>> {
    Estimator::ALL
        .par_iter()
        .map(|&estimator| predictions(out, estimator))
        .collect()
}

fn estimators(r: &mut Report, all_preds: Vec<Vec<Prediction>>) {
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
fn estimator_rows(estimator: Estimator, preds: &[Prediction]) -> String {
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

/// A path as a shell word (quoted when it needs it).
fn sh(p: &Path) -> String {
    let s = p.display().to_string();
    if s.chars()
        .all(|c| c.is_ascii_alphanumeric() || "/._-+=:,".contains(c))
    {
        s
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

/// The commands that reproduce the report's tables, as run from the directory `sy-select` ran in.
pub fn reproduce_commands(out: &SelectOutput) -> Vec<String> {
    let o = &out.options;
    let records: Vec<String> = o.records.iter().map(|p| sh(p)).collect();
    let records = records.join(" ");
    let bundle = sh(&o.out_dir.join(Artifact::Bundle.file_name()));
    vec![
        format!(
            "sy-select replay --bundle {bundle} --records {records} --splits {} --split selection",
            sh(&o.splits)
        ),
        format!(
            "sy-select replay --bundle {bundle} --records {records} --splits {} --split selection --decisions {}",
            sh(&o.splits),
            sh(&o.out_dir.join("decisions.parquet"))
        ),
    ]
}

fn reproduce(r: &mut Report, out: &SelectOutput) {
    let cmds = reproduce_commands(out).join("\n");
    r.markdown(&format!(
        "## Reproduce\n\nFrom the directory `sy-select` ran in: the first command recomputes the variant table above from the frozen bundle; the second also writes every decision (inputs, predictions, advantage, reason, chosen and oracle TTFT) to Parquet.\n\n```sh\n{cmds}\n```"
    ));
}

fn provenance(r: &mut Report, out: &SelectOutput) {
    let sel = &out.selection;
    let mut md = String::from("## Provenance\n\n| input | SHA-256 |\n|---|---|\n");
    for f in &sel.input_files {
        md.push_str(&format!("| `{}` | `{}` |\n", f.path, f.sha256));
    }
    md.push_str(&format!(
        "\nSplit seed {}; guard limits: max age {} ms, destination limit {}, local limit {}. Tools: {}.\n",
        sel.split_seed,
        sel.limits.max_age_ms,
        sel.limits.destination_limit,
        sel.limits.local_limit,
        sel.tool_versions
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    if let Some(dc) = out.fit_file.as_ref().and_then(|f| f.data_check.as_ref()) {
        md.push_str("\nData-quality check (`sy-collect check`) of the fitted runs: ");
        let runs: Vec<String> = dc
            .runs
            .iter()
            .map(|r| {
                if r.failed.is_empty() {
                    format!("`{}` **{}**", r.path, r.verdict)
                } else {
                    format!("`{}` **{}** ({})", r.path, r.verdict, r.failed.join(", "))
                }
            })
            .collect();
        md.push_str(&runs.join("; "));
        md.push_str(if dc.accepted_failing {
            ". **A failing run was fitted anyway (`sy-fit --accept-failed-check`): the figures \
             above rest on data that failed its checks.**\n"
        } else {
            ".\n"
        });
    }
    if !sel.warnings.is_empty() {
        md.push_str("\n**All warnings**\n\n");
        for w in &sel.warnings {
            md.push_str(&format!("- {w}\n"));
        }
    }
    r.markdown(&md);
}

/// Writes `report.md` and `plots/` into `dir`.
pub fn write_report(out: &SelectOutput, dir: &Path) -> Result<PathBuf, SelectError> {
    let mut r = Report::new(dir, "Calibration report")?;
    // The two sections that read every selection pair, side by side (each is parallel inside,
    // but not on every core throughout).
    let (fails, predictions) = rayon::join(|| where_it_fails(out), || all_predictions(out));
    answer(&mut r, out);
    variants(&mut r, out);
    r.markdown(&fails);
    stability(&mut r, out);
    search(&mut r, out);
    margins(&mut r, out);
    q_tables(&mut r, out);
    client_server_gap(&mut r, out);
    r.markdown(&crate::failures::markdown(&out.failures));
    estimators(&mut r, predictions);
    coefficients(&mut r, out);
    reproduce(&mut r, out);
    provenance(&mut r, out);
    Ok(r.write()?)
}
