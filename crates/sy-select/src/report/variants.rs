//! How often each variant could act, changed the choice or fell back, and where the choice fails
//! (by background generation length and by prompt length).

use super::*;

pub(super) const VARIANT_HEADER: &str = "| variant | probes | could act | changed | fell back | fallback reasons | mean selected TTFT (ms) [95 % CI] | change vs Stage (ms) [95 % CI] | p90 (ms) [95 % CI] | p90 change vs Stage (ms) [95 % CI] | regret vs oracle (ms) [95 % CI] |\n|---|---|---|---|---|---|---|---|---|---|---|\n";

pub(super) fn variant_row(
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
pub(super) fn stage_mean(sel: &SelectionFile) -> f64 {
    sel.replay
        .variants
        .iter()
        .find(|v| v.variant == Variant::Stage)
        .map_or(0.0, |v| v.all.mean_selected_ttft_ms)
}

pub(super) fn variants(r: &mut Report, out: &SelectOutput) {
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
pub(super) fn prompt_bucket(p: &EvalPair) -> Option<u64> {
    let n = p.efficient().valid_n().ok()?;
    (n > 0.0).then(|| 2f64.powf(n.log2().round()) as u64)
}

/// One row of "where it fails": the chosen variant against Stage on a subset of the
/// selection-split pairs (`rows`: their indices), with the TTFTs the frozen replay selected.
pub(super) fn subgroup_row(out: &SelectOutput, label: &str, rows: &[usize]) -> String {
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
pub(super) fn where_it_fails(out: &SelectOutput) -> String {
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

#[cfg(test)]
mod tests {
    use super::super::testkit::{output, section};
    use super::*;

    #[test]
    fn every_variant_has_a_row_and_stage_is_the_reference() {
        let out = output();
        let text = section(|r| variants(r, out));
        for v in &out.selection.replay.variants {
            assert!(
                text.contains(v.variant.as_str()),
                "{}: {text}",
                v.variant.as_str()
            );
        }
        assert!(stage_mean(&out.selection) > 0.0);
        let fails = where_it_fails(out);
        assert!(fails.starts_with("## "), "{fails}");
        let buckets: Vec<u64> = out
            .selection_pairs
            .iter()
            .filter_map(prompt_bucket)
            .collect();
        assert!(buckets.iter().all(|b| b.is_power_of_two()), "{buckets:?}");
    }
}
