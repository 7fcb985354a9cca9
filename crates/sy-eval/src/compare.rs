//! The comparison: per variant, session completion time and per-turn TTFT (mean, p50, p90)
//! with grouped bootstrap intervals over sessions, override and fallback rates, routing
//! overhead and competing traffic; per non-baseline variant, the paired difference to the
//! baseline (the plan's first variant) over the same session shapes.

use std::collections::BTreeMap;

use sy_rundir::artifact::comparison::{Comparison, Difference, VariantSummary};
use sy_rundir::artifact::eval_block::{BlockResult, SessionRecord, TurnRecord};
use sy_selector::{Model, Variant};
use sy_stats::sessions::{distribution, paired_mean_difference, summarise};

/// Defined with the run directory's layout.
pub use sy_rundir::COMPARISON_SCHEMA_VERSION;

/// Mean think-time overshoot per think (ms) above which the client is said to lag its schedule.
pub const LAG_LIMIT_MS: f64 = 10.0;

/// The smallest relative change of mean session time called a gain or a loss: a difference
/// whose interval excludes zero but whose size is below 1% of the baseline's mean is reported as
/// `no material difference` (timing jitter of a few milliseconds on identical decisions is
/// statistically detectable with enough sessions, and is not an effect of the rule).
pub const MIN_MATERIAL_EFFECT: f64 = 0.01;

/// The verdict when the variant chose the baseline's model on every paired turn. The two then
/// sent the same requests, and their times still differ: the router places a turn on another
/// worker when the one holding its prefix is busy with another session (a cache miss in one
/// variant and a hit in the other, tens of milliseconds), and the machine adds its jitter. In 20
/// runs of `data/eval/no-gain.toml` on an idle machine the interval excluded zero by more than 1%
/// twice (−5.9%, from 12 turns placed differently; +1.1%, none): a "gain" or "loss" there would
/// be the deployment's variation credited to a rule that did nothing (docs/eval.md).
pub const SAME_DECISIONS: &str = "same decisions";

/// The verdict when the variant lost more sessions to failures than the baseline and its
/// session time would otherwise not be a `loss`. Session times are compared over the sessions
/// both arms completed (complete cases): a failed session has no completion time, and a
/// variant that makes the slow sessions fail would look faster. Failures are therefore counted
/// separately (per arm, with a Wilson interval of the success rate), and more of them is never
/// a `gain`.
pub const MORE_FAILURES: &str = "more failures";

/// Values per round, per session (the two levels of the bootstrap).
fn by_session(
    turns: &[&TurnRecord],
    value: impl Fn(&TurnRecord) -> Option<f64>,
) -> Vec<Vec<Vec<f64>>> {
    let mut groups: BTreeMap<u32, BTreeMap<u32, Vec<f64>>> = BTreeMap::new();
    for t in turns {
        if let Some(v) = value(t).filter(|v| v.is_finite()) {
            groups
                .entry(t.round)
                .or_default()
                .entry(t.session)
                .or_default()
                .push(v);
        }
    }
    groups
        .into_values()
        .map(|r| r.into_values().collect())
        .collect()
}

fn rate(num: usize, den: usize) -> f64 {
    if den == 0 {
        0.0
    } else {
        num as f64 / den as f64
    }
}

/// Summarises one variant's blocks.
pub fn summarise_variant(variant: Variant, blocks: &[&BlockResult], seed: u64) -> VariantSummary {
    let turns: Vec<&TurnRecord> = blocks.iter().flat_map(|b| &b.turns).collect();
    let sessions: Vec<&SessionRecord> = blocks.iter().flat_map(|b| &b.sessions).collect();
    let mut ok_sessions: BTreeMap<u32, Vec<Vec<f64>>> = BTreeMap::new();
    for s in sessions.iter().filter(|s| s.ok) {
        ok_sessions
            .entry(s.round)
            .or_default()
            .push(vec![s.completion_ms]);
    }
    let ok_sessions: Vec<Vec<Vec<f64>>> = ok_sessions.into_values().collect();
    let ok_turns: Vec<&TurnRecord> = turns
        .iter()
        .copied()
        .filter(|t| t.error.is_none())
        .collect();
    let efficient_proposals = turns
        .iter()
        .filter(|t| t.proposal == Model::Efficient)
        .count();
    let overrides = turns.iter().filter(|t| t.choice != t.proposal).count();
    let fallbacks = turns.iter().filter(|t| t.fallback).count();
    let mut reasons = BTreeMap::new();
    for t in &turns {
        *reasons.entry(t.reason.clone()).or_insert(0) += 1;
    }
    let uncached: Vec<f64> = ok_turns
        .iter()
        .filter_map(|t| t.uncached_input_tokens.map(|u| u as f64))
        .collect();
    let background: Vec<_> = blocks.iter().flat_map(|b| &b.background).collect();
    let bg_values =
        |f: fn(&sy_rundir::artifact::eval_block::BackgroundSample) -> Option<f64>| -> Vec<f64> {
            background
                .iter()
                .filter(|b| b.ok)
                .filter_map(|b| f(b))
                .collect()
        };
    let overhead: Vec<f64> = turns.iter().map(|t| t.routing_overhead_ms).collect();
    let observe: Vec<f64> = turns.iter().filter_map(|t| t.observe_ms).collect();
    let sessions_ok = sessions.iter().filter(|s| s.ok).count();
    VariantSummary {
        variant,
        blocks: blocks.len(),
        sessions: sessions.len(),
        sessions_failed: sessions.len() - sessions_ok,
        session_success_rate: (!sessions.is_empty())
            .then(|| sessions_ok as f64 / sessions.len() as f64),
        session_success_ci95: (!sessions.is_empty())
            .then(|| sy_stats::binomial::wilson(sessions_ok as u64, sessions.len() as u64, 0.95)),
        turns: turns.len(),
        turns_failed: turns.len() - ok_turns.len(),
        session_completion_ms: summarise(&ok_sessions, seed),
        turn_ttft_ms: summarise(&by_session(&ok_turns, |t| t.ttft_ms), seed.wrapping_add(10)),
        turn_e2e_ms: summarise(&by_session(&ok_turns, |t| t.e2e_ms), seed.wrapping_add(20)),
        efficient_proposals,
        overrides,
        override_rate: rate(overrides, efficient_proposals),
        fallbacks,
        fallback_rate: rate(fallbacks, turns.len()),
        reasons,
        capable_share: rate(
            turns.iter().filter(|t| t.choice == Model::Capable).count(),
            turns.len(),
        ),
        mean_uncached_input_tokens: (!uncached.is_empty())
            .then(|| uncached.iter().sum::<f64>() / uncached.len() as f64),
        routing_overhead_ms: distribution(&overhead),
        observe_ms: distribution(&observe),
        background_requests: background.len(),
        background_failed: background.iter().filter(|b| !b.ok).count(),
        background_ttft_ms: distribution(&bg_values(|b| b.ttft_ms)),
        background_e2e_ms: distribution(&bg_values(|b| b.e2e_ms)),
    }
}

/// Per (round, session): completion time and mean turn TTFT of the ok sessions of a variant.
fn session_outcomes(blocks: &[&BlockResult]) -> BTreeMap<(u32, u32), (f64, Option<f64>)> {
    let mut out = BTreeMap::new();
    for b in blocks {
        for s in b.sessions.iter().filter(|s| s.ok) {
            let ttfts: Vec<f64> = b
                .turns
                .iter()
                .filter(|t| t.session == s.session)
                .filter_map(|t| t.ttft_ms)
                .collect();
            let mean_ttft =
                (!ttfts.is_empty()).then(|| ttfts.iter().sum::<f64>() / ttfts.len() as f64);
            out.insert((s.round, s.session), (s.completion_ms, mean_ttft));
        }
    }
    out
}

/// (paired turns, turns whose choice differs) over the sessions both variants completed
/// (`var_ok`, `base_ok`: the keys of [`session_outcomes`]).
fn changed_turns<V>(
    var_blocks: &[&BlockResult],
    base_blocks: &[&BlockResult],
    var_ok: &BTreeMap<(u32, u32), V>,
    base_ok: &BTreeMap<(u32, u32), V>,
) -> (usize, usize) {
    let choices = |blocks: &[&BlockResult], ok: &BTreeMap<(u32, u32), V>| {
        blocks
            .iter()
            .flat_map(|b| &b.turns)
            .filter(|t| ok.contains_key(&(t.round, t.session)))
            .map(|t| ((t.round, t.session, t.turn), t.choice))
            .collect::<BTreeMap<_, _>>()
    };
    let base = choices(base_blocks, base_ok);
    let mut paired = 0;
    let mut changed = 0;
    for (key, choice) in choices(var_blocks, var_ok) {
        if let Some(b) = base.get(&key) {
            paired += 1;
            changed += usize::from(*b != choice);
        }
    }
    (paired, changed)
}

/// The paired difference of `variant` against `baseline`.
pub fn difference(
    variant: Variant,
    baseline: Variant,
    var_blocks: &[&BlockResult],
    base_blocks: &[&BlockResult],
    seed: u64,
) -> Difference {
    difference_of(variant, baseline, (var_blocks, base_blocks), seed, false)
}

/// [`difference`]; `aa`: an A/A comparison, whose verdict is the interval's alone (the
/// `same decisions` rule would hide the false verdicts an A/A check exists to count).
fn difference_of(
    variant: Variant,
    baseline: Variant,
    (var_blocks, base_blocks): (&[&BlockResult], &[&BlockResult]),
    seed: u64,
    aa: bool,
) -> Difference {
    let a = session_outcomes(base_blocks);
    let b = session_outcomes(var_blocks);
    let mut time_pairs: BTreeMap<u32, Vec<(f64, f64)>> = BTreeMap::new();
    let mut ttft_pairs: BTreeMap<u32, Vec<(f64, f64)>> = BTreeMap::new();
    for (key, (base_time, base_ttft)) in &a {
        if let Some((var_time, var_ttft)) = b.get(key) {
            time_pairs
                .entry(key.0)
                .or_default()
                .push((*base_time, *var_time));
            if let (Some(x), Some(y)) = (base_ttft, var_ttft) {
                ttft_pairs.entry(key.0).or_default().push((*x, *y));
            }
        }
    }
    let time_pairs: Vec<Vec<(f64, f64)>> = time_pairs.into_values().collect();
    let ttft_pairs: Vec<Vec<(f64, f64)>> = ttft_pairs.into_values().collect();
    let session_time_ms = paired_mean_difference(&time_pairs, seed);
    let all_pairs: Vec<(f64, f64)> = time_pairs.concat();
    let base_mean = if all_pairs.is_empty() {
        None
    } else {
        Some(all_pairs.iter().map(|p| p.0).sum::<f64>() / all_pairs.len() as f64)
    };
    let relative = match (session_time_ms, base_mean) {
        (Some(d), Some(m)) if m > 0.0 => Some(d.value / m),
        _ => None,
    };
    let material = relative.is_some_and(|r| r.abs() >= MIN_MATERIAL_EFFECT);
    let (paired_turns, changed_turns) = changed_turns(var_blocks, base_blocks, &b, &a);
    let failed = |blocks: &[&BlockResult]| {
        blocks
            .iter()
            .flat_map(|b| &b.sessions)
            .filter(|s| !s.ok)
            .count()
    };
    let failed_sessions = (failed(var_blocks), failed(base_blocks));
    let verdict = match session_time_ms.and_then(|e| e.ci95) {
        _ if !aa && paired_turns > 0 && changed_turns == 0 => SAME_DECISIONS,
        Some(ci) if ci.lo > 0.0 && material => "loss",
        _ if failed_sessions.0 > failed_sessions.1 => MORE_FAILURES,
        Some(ci) if ci.excludes_zero() && !material => "no material difference",
        Some(ci) if ci.hi < 0.0 => "gain",
        _ => "no significant difference",
    };
    Difference {
        variant,
        baseline,
        pairs: all_pairs.len(),
        session_time_relative: relative,
        session_time_ms,
        session_mean_ttft_ms: paired_mean_difference(&ttft_pairs, seed.wrapping_add(1)),
        paired_turns,
        changed_turns,
        failed_sessions,
        verdict: verdict.into(),
    }
}

/// Compares every variant of `blocks`; `variants[0]` is the baseline.
pub fn compare(variants: &[Variant], blocks: &[BlockResult], seed: u64) -> Comparison {
    let of =
        |v: Variant| -> Vec<&BlockResult> { blocks.iter().filter(|b| b.variant == v).collect() };
    let baseline = variants.first().copied().unwrap_or(Variant::Stage);
    let summaries: Vec<VariantSummary> = variants
        .iter()
        .map(|&v| summarise_variant(v, &of(v), seed))
        .collect();
    let differences: Vec<Difference> = variants
        .iter()
        .skip(1)
        .map(|&v| difference(v, baseline, &of(v), &of(baseline), seed.wrapping_add(100)))
        .collect();
    let mut warnings = warnings(&summaries, blocks);
    warnings.extend(differences.iter().filter_map(same_decisions_warning));
    let rounds: std::collections::BTreeSet<u32> = blocks.iter().map(|b| b.round).collect();
    if variants.len() > 1 && rounds.len() < 2 {
        warnings.push(format!(
            "{} round: the comparison's interval resamples the sessions of one round instead of rounds (the independent unit), so it is too narrow and its verdict is not one to act on; plans default to 10 rounds",
            rounds.len()
        ));
    }
    Comparison {
        schema_version: COMPARISON_SCHEMA_VERSION,
        baseline,
        warnings,
        variants: summaries,
        differences,
        aa: false,
    }
}

/// Which arm of an A/A run a round belongs to: rounds are taken in pairs (2k, 2k + 1), one of
/// each pair is arm A and the other arm B, both compared as pair k. The arm of the first round
/// of a pair is a seeded coin (`Order::Random`) or alternates A, B / B, A (`Order::Abba`: a
/// linear drift over the run cancels).
pub fn aa_arm(round: u32, order: crate::plan::Order, seed: u64) -> (u32, bool) {
    let pair = round / 2;
    let first_is_a = match order {
        crate::plan::Order::Abba => pair.is_multiple_of(2),
        crate::plan::Order::Random => {
            // SplitMix64 of (seed, pair): one coin per pair.
            let mut z = seed ^ 0x0a0a_0a0a ^ u64::from(pair).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            (z ^ (z >> 31)) & 1 == 0
        }
    };
    (pair, round.is_multiple_of(2) == first_is_a)
}

/// The A/A comparison of one variant's blocks: arm A against arm B ([`aa_arm`]), paired by
/// (pair of rounds, session), with the same statistics as [`compare`].
pub fn compare_aa(
    variant: Variant,
    blocks: &[BlockResult],
    order: crate::plan::Order,
    seed: u64,
) -> Comparison {
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for block in blocks.iter().filter(|x| x.variant == variant) {
        let (pair, is_a) = aa_arm(block.round, order, seed);
        let mut block = block.clone();
        block.round = pair;
        block.turns.iter_mut().for_each(|t| t.round = pair);
        block.sessions.iter_mut().for_each(|s| s.round = pair);
        if is_a { a.push(block) } else { b.push(block) }
    }
    let (ra, rb): (Vec<&BlockResult>, Vec<&BlockResult>) = (a.iter().collect(), b.iter().collect());
    let summaries = vec![
        summarise_variant(variant, &ra, seed),
        summarise_variant(variant, &rb, seed),
    ];
    let differences = vec![difference_of(
        variant,
        variant,
        (&rb, &ra),
        seed.wrapping_add(100),
        true,
    )];
    let all: Vec<BlockResult> = a.into_iter().chain(b).collect();
    Comparison {
        schema_version: COMPARISON_SCHEMA_VERSION,
        baseline: variant,
        warnings: warnings(&summaries, &all),
        variants: summaries,
        differences,
        aa: true,
    }
}

/// A variant with the baseline's decisions whose session time still differs significantly:
/// what differs is not the rule's choices, and the reader is told where to look.
fn same_decisions_warning(d: &Difference) -> Option<String> {
    let est = d.session_time_ms?;
    let ci = est.ci95?;
    (d.verdict == SAME_DECISIONS && ci.excludes_zero()).then(|| {
        format!(
            "{}: the same model as {} on all {} paired turns, yet the session time differs by {:+.1} ms [{:.1}, {:.1}]: not an effect of the rule's choices but of worker placement, timing jitter or the routing overhead (see its table)",
            d.variant, d.baseline, d.paired_turns, est.value, ci.lo, ci.hi
        )
    })
}

fn warnings(summaries: &[VariantSummary], blocks: &[BlockResult]) -> Vec<String> {
    let mut out = Vec::new();
    for s in summaries {
        for (what, summary) in [
            ("session completion time", &s.session_completion_ms),
            ("turn TTFT", &s.turn_ttft_ms),
        ] {
            if let Some(w) = summary.as_ref().and_then(|x| x.tail_warning.as_ref()) {
                out.push(format!("{}: {what}: {w}", s.variant));
            }
        }
        if s.sessions_failed > 0 {
            out.push(format!(
                "{}: {} of {} sessions had a failed turn and are left out of the session times",
                s.variant, s.sessions_failed, s.sessions
            ));
        }
    }
    let thinks: Vec<&SessionRecord> = blocks
        .iter()
        .flat_map(|b| &b.sessions)
        .filter(|s| s.think_planned_ms > 0.0)
        .collect();
    let turns_with_think: f64 = thinks
        .iter()
        .map(|s| f64::from(s.turns.saturating_sub(1)))
        .sum();
    let overshoot: f64 = thinks.iter().map(|s| s.think_overshoot_ms).sum();
    if turns_with_think > 0.0 && overshoot / turns_with_think > LAG_LIMIT_MS {
        out.push(format!(
            "the client lagged its schedule: think times overshot by {:.1} ms on average (limit {LAG_LIMIT_MS} ms); the machine running sy-eval was too busy for these figures to be trusted",
            overshoot / turns_with_think
        ));
    }
    for b in blocks {
        if !b.outstanding_reservations.is_empty() || b.loads_zero_at_end == Some(false) {
            out.push(format!(
                "block r{}-{}: load was still booked after the block ({} reservations left)",
                b.round,
                b.variant,
                b.outstanding_reservations.len()
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use sy_rundir::artifact::eval_block::BLOCK_SCHEMA_VERSION;

    fn turn(variant: Variant, round: u32, session: u32, ttft: f64, changed: bool) -> TurnRecord {
        TurnRecord {
            round,
            variant,
            session,
            session_id: format!("g{session}"),
            turn: 0,
            proposal: Model::Efficient,
            choice: if changed {
                Model::Capable
            } else {
                Model::Efficient
            },
            reason: if changed {
                "override".into()
            } else {
                "trigger_false".into()
            },
            fallback: false,
            decision: None,
            efficient: None,
            capable: None,
            route_failure: None,
            routing_overhead_ms: 1.5,
            observe_ms: Some(1.2),
            prompt_tokens: 100,
            max_tokens: 8,
            reserved_worker: Some(1),
            served_worker: Some(1),
            ttft_ms: Some(ttft),
            e2e_ms: Some(ttft * 2.0),
            server_ttft_ms: None,
            output_tokens: Some(8),
            cached_tokens: Some(0),
            uncached_input_tokens: Some(100),
            started_at_unix_ms: 0.0,
            error: None,
        }
    }

    fn block(variant: Variant, round: u32, times: &[f64], changed: bool) -> BlockResult {
        BlockResult {
            schema_version: BLOCK_SCHEMA_VERSION,
            run_id: "t".into(),
            round,
            position: 0,
            variant,
            started_at: String::new(),
            ended_at: String::new(),
            start_state: String::new(),
            turns: times
                .iter()
                .enumerate()
                .map(|(i, &t)| turn(variant, round, i as u32, t / 2.0, changed))
                .collect(),
            sessions: times
                .iter()
                .enumerate()
                .map(|(i, &t)| SessionRecord {
                    round,
                    variant,
                    session: i as u32,
                    session_id: format!("g{i}"),
                    turns: 1,
                    completion_ms: t,
                    ok: true,
                    think_planned_ms: 0.0,
                    think_overshoot_ms: 0.0,
                })
                .collect(),
            background: vec![],
            outstanding_reservations: vec![],
            loads_zero_at_end: Some(true),
        }
    }

    #[test]
    fn a_faster_variant_is_a_gain_and_an_equal_one_is_not() {
        let base: Vec<f64> = (0..12).map(|i| 1000.0 + 40.0 * f64::from(i)).collect();
        let fast: Vec<f64> = base
            .iter()
            .enumerate()
            .map(|(i, t)| t - 200.0 + (i % 3) as f64 * 5.0)
            .collect();
        let blocks = vec![
            block(Variant::Stage, 0, &base, false),
            block(Variant::Cache, 0, &fast, true),
            block(Variant::Count, 0, &base, false),
        ];
        let c = compare(
            &[Variant::Stage, Variant::Cache, Variant::Count],
            &blocks,
            5,
        );
        assert_eq!(c.baseline, Variant::Stage);
        // One round: the verdict comes with a warning that it rests on sessions, not rounds.
        assert!(
            c.warnings.iter().any(|w| w.starts_with("1 round:")),
            "{:?}",
            c.warnings
        );
        let cache = &c.differences[0];
        assert_eq!((cache.variant, cache.pairs), (Variant::Cache, 12));
        assert_eq!(cache.verdict, "gain");
        assert!(cache.session_time_ms.unwrap().ci95.unwrap().hi < 0.0);
        // Count chose Stage's model on every turn: the rule changed nothing.
        let count = &c.differences[1];
        assert_eq!((count.paired_turns, count.changed_turns), (12, 0));
        assert_eq!(count.verdict, SAME_DECISIONS);
        assert_eq!((cache.paired_turns, cache.changed_turns), (12, 12));
        assert_eq!(c.variants[1].override_rate, 1.0);
        assert_eq!(c.variants[0].override_rate, 0.0);
        assert_eq!(c.variants[1].reasons.get("override"), Some(&12));
        assert_eq!(c.variants[0].routing_overhead_ms.unwrap().p50, 1.5);
        // Other decisions, consistently 0.5% slower: detectable, but below the material 1%.
        let slower: Vec<f64> = base.iter().map(|t| t * 1.005).collect();
        let blocks2 = vec![
            block(Variant::Stage, 0, &base, false),
            block(Variant::Blind, 0, &slower, true),
        ];
        let d = &compare(&[Variant::Stage, Variant::Blind], &blocks2, 5).differences[0];
        assert!(
            d.session_time_ms.unwrap().ci95.unwrap().excludes_zero(),
            "{d:?}"
        );
        assert_eq!(d.verdict, "no material difference");
        // The same 0.5% and 20% slower with the same decisions: no verdict on the rule.
        for factor in [1.005, 1.2] {
            let slower: Vec<f64> = base.iter().map(|t| t * factor).collect();
            let same = vec![
                block(Variant::Stage, 0, &base, false),
                block(Variant::Blind, 0, &slower, false),
            ];
            let c = compare(&[Variant::Stage, Variant::Blind], &same, 5);
            let d = &c.differences[0];
            assert_eq!(d.verdict, SAME_DECISIONS, "{d:?}");
            assert!(d.session_time_ms.unwrap().value > 0.0, "{d:?}");
            // A consistent shift is significant: the comparison says it is not the rule's.
            assert!(
                c.warnings
                    .iter()
                    .any(|w| w.starts_with("blind: the same model as stage on all 12")),
                "{:?}",
                c.warnings
            );
        }
        // 12 sessions: the p90 rests on 1.2 values beyond it.
        assert!(
            c.warnings.iter().any(|w| w.contains("p90")),
            "{:?}",
            c.warnings
        );
    }

    #[test]
    fn a_variant_with_more_failed_sessions_is_never_a_gain() {
        let base: Vec<f64> = (0..12).map(|i| 1000.0 + 40.0 * f64::from(i)).collect();
        let fast: Vec<f64> = base.iter().map(|t| t - 300.0).collect();
        let mut failing = block(Variant::Cache, 0, &fast, true);
        // Its two slowest sessions failed: the complete cases alone would make it a gain.
        for s in failing.sessions.iter_mut().skip(10) {
            s.ok = false;
        }
        let blocks = vec![block(Variant::Stage, 0, &base, false), failing];
        let c = compare(&[Variant::Stage, Variant::Cache], &blocks, 5);
        let d = &c.differences[0];
        assert!(d.session_time_ms.unwrap().ci95.unwrap().hi < 0.0, "{d:?}");
        assert_eq!(d.failed_sessions, (2, 0));
        assert_eq!(d.verdict, MORE_FAILURES);
        // The success rate per arm, with its Wilson interval.
        let v = &c.variants[1];
        assert_eq!(v.session_success_rate, Some(10.0 / 12.0));
        let (lo, hi) = v.session_success_ci95.unwrap();
        assert!(
            lo < 10.0 / 12.0 && 10.0 / 12.0 < hi && hi < 1.0,
            "{lo} {hi}"
        );
        assert_eq!(c.variants[0].session_success_rate, Some(1.0));
    }

    #[test]
    fn the_difference_over_rounds_is_a_t_interval() {
        // Four rounds whose mean differences are −10, −12, −8, −10: mean −10, s = 1.633, se =
        // 0.8165, t(0.975, 3) = 3.1824.
        let base: Vec<f64> = (0..4).map(|i| 500.0 + f64::from(i)).collect();
        let mut blocks = Vec::new();
        for (round, shift) in [(0u32, -10.0), (1, -12.0), (2, -8.0), (3, -10.0)] {
            let var: Vec<f64> = base.iter().map(|t| t + shift).collect();
            blocks.push(block(Variant::Stage, round, &base, false));
            blocks.push(block(Variant::Cache, round, &var, true));
        }
        let c = compare(&[Variant::Stage, Variant::Cache], &blocks, 5);
        assert!(
            !c.warnings.iter().any(|w| w.contains("round:")),
            "{:?}",
            c.warnings
        );
        let d = &c.differences[0];
        let e = d.session_time_ms.unwrap();
        let ci = e.ci95.unwrap();
        assert!((e.value + 10.0).abs() < 1e-9, "{e:?}");
        let half = 3.182_446_305 * (8.0f64 / 3.0).sqrt() / 2.0;
        assert!((ci.hi - (-10.0 + half)).abs() < 1e-6, "{ci:?}");
        assert!((ci.lo - (-10.0 - half)).abs() < 1e-6, "{ci:?}");
    }

    #[test]
    fn an_aa_comparison_splits_rounds_into_two_arms_of_the_same_variant() {
        let times: Vec<f64> = (0..6).map(|i| 800.0 + 10.0 * f64::from(i)).collect();
        // Eight rounds of the same variant, the same times but for a small per-round wobble.
        let blocks: Vec<BlockResult> = (0..8u32)
            .map(|r| {
                let t: Vec<f64> = times.iter().map(|x| x + f64::from(r % 3)).collect();
                block(Variant::Cache, r, &t, true)
            })
            .collect();
        for order in [crate::plan::Order::Random, crate::plan::Order::Abba] {
            let c = compare_aa(Variant::Cache, &blocks, order, 3);
            assert!(c.aa);
            assert_eq!(c.variants.len(), 2);
            assert_eq!((c.variants[0].blocks, c.variants[1].blocks), (4, 4));
            let d = &c.differences[0];
            // Four pairs of rounds × 6 sessions; the same decisions do not decide the verdict.
            assert_eq!(d.pairs, 24);
            assert_ne!(d.verdict, SAME_DECISIONS);
            // Each pair of rounds has one block in each arm.
            for pair in 0..4 {
                let (_, a0) = aa_arm(2 * pair, order, 3);
                let (_, a1) = aa_arm(2 * pair + 1, order, 3);
                assert_ne!(a0, a1);
            }
        }
        // ABBA alternates which round of a pair is arm A.
        assert!(aa_arm(0, crate::plan::Order::Abba, 0).1);
        assert!(!aa_arm(2, crate::plan::Order::Abba, 0).1);
    }
}
