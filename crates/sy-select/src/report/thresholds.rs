//! The stability over split seeds and the r / p threshold search.

use super::*;

pub(super) fn stability(r: &mut Report, out: &SelectOutput) {
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

pub(super) fn search(r: &mut Report, out: &SelectOutput) {
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

#[cfg(test)]
mod tests {
    use super::super::testkit::{output, section};
    use super::*;

    #[test]
    fn the_search_and_stability_sections_are_written() {
        let out = output();
        let text = section(|r| {
            stability(r, out);
            search(r, out);
        });
        assert!(text.matches("\n## ").count() >= 2, "{text}");
    }
}
