//! The report's opening: the answer (chosen rule and estimator, change versus Stage with its
//! interval, stability over split seeds, caveats).

use super::*;

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

/// An adaptive run's decision (the stop's statistic, recomputed and checked), or why there is
/// none; `None` for a fixed plan.
pub fn adaptive_line(out: &SelectOutput) -> Option<String> {
    Some(match out.adaptive.as_ref()? {
        Ok(a) => a.line(),
        Err(e) => format!(
            "Decision of the adaptive design: not stated — {e}. The selection-split interval above is the only one."
        ),
    })
}

/// The Answer's lines: [`headline_lines_with`], and for an adaptive run its decision
/// ([`adaptive_line`]) right after the selection-split change versus Stage.
pub fn answer_lines(out: &SelectOutput) -> Vec<String> {
    let mut lines = headline_lines_with(&out.selection, Some(&out.failures));
    if let Some(line) = adaptive_line(out) {
        let at = (lines.iter())
            .position(|l| l.starts_with("Change versus Stage"))
            .map_or(lines.len(), |i| i + 1);
        lines.insert(at, line);
    }
    lines
}

pub(super) fn answer(r: &mut Report, out: &SelectOutput) {
    let s = &out.selection;
    let mut md = String::from("## Answer\n\n");
    for line in answer_lines(out) {
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
        "The proposal's selection rule chose it (lower mean selected TTFT on the selection split); intervals resample whole conditions ({} resamples, seed {}): means, mean changes and regret are studentized (bootstrap-t) intervals; the headline's is simultaneous over the compared variants at 97.5 % (half the miss rate per side: at 95 % it covered only 90–92 % where a few conditions carry the effect); p90s, p90 changes and margins are percentile intervals (methods and their measured coverage: docs/methodology.md). Stability repeats split, fit, margins, search and choice with other split seeds on the same records: robustness to the split, not replication. Bundle `bundle.json`, content hash `{}`.\n",
        s.uncertainty.bootstrap.resamples, s.uncertainty.bootstrap.seed, out.bundle.content_hash
    ));
    r.markdown(&md);
}

#[cfg(test)]
mod tests {
    use super::super::testkit::{output, section};
    use super::*;

    #[test]
    fn the_answer_names_the_chosen_rule_first() {
        let out = output();
        let lines = headline_lines(&out.selection);
        assert!(!lines.is_empty());
        let text = section(|r| answer(r, out));
        assert!(text.contains(&rule_text(&out.selection)), "{text}");
    }
}
