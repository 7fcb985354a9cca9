//! The search's outcomes on small known cases and, as a property, against a brute-force search.

use super::sweep::tie_better;
use super::*;

fn probe(r: Option<f64>, p: Option<f64>, eff: f64, cap: f64) -> SearchProbe {
    SearchProbe {
        r_eff: r,
        p_eff: p,
        ttft_eff_ms: eff,
        ttft_cap_ms: cap,
        guard: GuardPass::ALL,
    }
}

/// Five probes where the count optimum is r = 1 and the count_prefill optimum triggers
/// exactly {3, 4, 5}, reachable by three (r, p) pairs that the tie-break must settle.
fn five() -> Vec<SearchProbe> {
    vec![
        probe(Some(0.0), Some(0.1), 100.0, 200.0),
        probe(Some(1.0), Some(0.5), 150.0, 200.0),
        probe(Some(2.0), Some(1.5), 300.0, 200.0),
        probe(Some(3.0), Some(0.2), 400.0, 200.0),
        probe(Some(1.0), Some(2.0), 500.0, 250.0),
    ]
}

#[test]
fn count_optimum_is_known() {
    let (out, _) = search_thresholds(&five(), RuleFamily::Count, 0).unwrap();
    assert_eq!(
        out.best.rule,
        ThresholdRule {
            r: Some(1.0),
            p: None
        }
    );
    assert_eq!(out.best.overrides, 4);
    assert!((out.best.mean_selected_ttft_ms - 190.0).abs() < 1e-12);
    assert!((out.stage_mean_ttft_ms - 290.0).abs() < 1e-12);
    // Oracle: 100 + 150 + 200 + 200 + 250 = 900.
    assert!((out.oracle_mean_ttft_ms - 180.0).abs() < 1e-12);
    assert_eq!(out.r_candidates, 4);
    assert_eq!(out.p_candidates, 0);
    // disabled + 4 r values
    assert_eq!(out.rules_evaluated, 5);
}

#[test]
fn count_prefill_tie_goes_to_larger_r_then_larger_p() {
    // {3,4,5} (gain -550) is reached by (2, 0.5), (2, 1.5) and (3, 0.5): same overrides and
    // terms, so the larger r wins: (3, 0.5).
    let (out, land) = search_thresholds(&five(), RuleFamily::CountPrefill, 10).unwrap();
    assert_eq!(
        out.best.rule,
        ThresholdRule {
            r: Some(3.0),
            p: Some(0.5)
        }
    );
    assert_eq!(out.best.overrides, 3);
    assert!((out.best.mean_selected_ttft_ms - 180.0).abs() < 1e-12);
    assert_eq!(out.tied_rules, 3);
    // 1 + 4 + 5 + 4*5
    assert_eq!(out.rules_evaluated, 30);
    let land = land.unwrap();
    assert_eq!(land.p_columns.len(), 6);
    assert_eq!(land.rows.len(), 5);
    // Row r = 3, column p = 0.5 (index 3: None, 0.1, 0.2, 0.5) is the optimum.
    let row = land.rows.iter().find(|r| r.r == Some(3.0)).unwrap();
    assert!((row.mean_selected_ttft_ms[3] - 180.0).abs() < 1e-12);
    // Column "p disabled" of the disabled row is Stage.
    let stage = land.rows.iter().find(|r| r.r.is_none()).unwrap();
    assert!((stage.mean_selected_ttft_ms[0] - 290.0).abs() < 1e-12);
}

#[test]
fn fewer_overrides_beats_fewer_terms() {
    let probes = vec![
        probe(Some(4.0), Some(0.1), 100.0, 100.0),
        probe(Some(5.0), Some(0.2), 400.0, 100.0),
        probe(Some(1.0), Some(3.0), 400.0, 100.0),
        probe(Some(1.0), Some(0.2), 100.0, 100.0),
    ];
    let (out, _) = search_thresholds(&probes, RuleFamily::CountPrefill, 0).unwrap();
    assert_eq!(
        out.best.rule,
        ThresholdRule {
            r: Some(5.0),
            p: Some(0.2)
        }
    );
    assert_eq!(out.best.overrides, 2);
    assert!((out.best.mean_selected_ttft_ms - 100.0).abs() < 1e-12);
}

#[test]
fn fewer_terms_wins_when_a_second_term_adds_nothing() {
    // The count optimum r = 2 triggers {b, c}; (2, p = max P) triggers the same set with two
    // terms, and must lose to r alone.
    let probes = vec![
        probe(Some(0.0), Some(0.5), 100.0, 300.0),
        probe(Some(2.0), Some(0.1), 400.0, 100.0),
        probe(Some(3.0), Some(0.9), 400.0, 100.0),
    ];
    let (out, _) = search_thresholds(&probes, RuleFamily::CountPrefill, 0).unwrap();
    assert_eq!(
        out.best.rule,
        ThresholdRule {
            r: Some(2.0),
            p: None
        }
    );
    assert_eq!(out.best.overrides, 2);
}

#[test]
fn both_terms_disabled_when_capable_is_never_faster() {
    let probes = vec![
        probe(Some(0.0), Some(0.5), 100.0, 300.0),
        probe(Some(7.0), Some(3.1), 400.0, 400.0),
    ];
    for family in [RuleFamily::Count, RuleFamily::CountPrefill] {
        let (out, _) = search_thresholds(&probes, family, 0).unwrap();
        // The zero-gain override of the second probe ties with Stage: fewer overrides wins.
        assert_eq!(out.best.rule, ThresholdRule::DISABLED, "{family:?}");
        assert_eq!(out.best.overrides, 0);
        assert!((out.best.mean_selected_ttft_ms - 250.0).abs() < 1e-12);
    }
}

#[test]
fn p_only_rule_when_r_carries_no_signal() {
    // All R equal; P separates fast from slow: p disabled loses to P > 1.0.
    let probes = vec![
        probe(Some(2.0), Some(0.5), 100.0, 300.0),
        probe(Some(2.0), Some(1.0), 100.0, 300.0),
        probe(Some(2.0), Some(2.0), 900.0, 300.0),
    ];
    let (out, _) = search_thresholds(&probes, RuleFamily::CountPrefill, 0).unwrap();
    assert_eq!(
        out.best.rule,
        ThresholdRule {
            r: None,
            p: Some(1.0)
        }
    );
    assert_eq!(out.best.overrides, 1);
}

#[test]
fn means_within_tolerance_tie_and_go_to_fewer_overrides() {
    // r = 1 also overrides the second probe and gains 1.2e-9 ms in total: 0.6e-9 ms on the
    // mean, inside the tolerance, so the rule with fewer overrides (r = 3) wins.
    let probes = vec![
        probe(Some(3.0), None, 10.0, 9.0),
        probe(Some(1.0), None, 10.0, 10.0 - 1.2e-9),
    ];
    let (out, _) = search_thresholds(&probes, RuleFamily::Count, 0).unwrap();
    assert_eq!(out.best.rule.r, Some(3.0));
    assert_eq!(out.tied_rules, 2);
    // 5e-9 ms in total (2.5e-9 on the mean) is outside: r = 1 wins.
    let probes = vec![
        probe(Some(3.0), None, 10.0, 9.0),
        probe(Some(1.0), None, 10.0, 10.0 - 5e-9),
    ];
    let (out, _) = search_thresholds(&probes, RuleFamily::Count, 0).unwrap();
    assert_eq!(out.best.rule.r, Some(1.0));
}

#[test]
fn guard_failures_and_invalid_inputs_never_trigger() {
    let mut probes = five();
    // Probe 5 (the largest gain) fails the guard whatever the terms; probe 4 has no valid R.
    probes[4].guard = GuardPass {
        r_only: false,
        p_only: false,
        both: false,
    };
    probes[3].r_eff = None;
    let (out, _) = search_thresholds(&probes, RuleFamily::Count, 0).unwrap();
    // Remaining gains by R: R0 +100, R1 +50, R2 -100 -> r = 2 triggers only probe 3.
    assert_eq!(out.best.rule.r, Some(2.0));
    assert_eq!(out.best.overrides, 1);
    assert_eq!(out.best, score_rule(&probes, out.best.rule));
}

#[test]
fn bad_ttft_and_empty_input_are_errors() {
    assert_eq!(
        search_thresholds(&[], RuleFamily::Count, 0).unwrap_err(),
        SearchError::NoProbes
    );
    let probes = vec![probe(Some(1.0), None, f64::NAN, 1.0)];
    assert!(matches!(
        search_thresholds(&probes, RuleFamily::Count, 0),
        Err(SearchError::BadTtft { index: 0, .. })
    ));
    // The first bad probe is named, however the check is split between threads.
    let mut many = vec![probe(Some(1.0), None, 10.0, 20.0); 100_000];
    many[70_000].ttft_cap_ms = -1.0;
    many[31_337].ttft_eff_ms = f64::INFINITY;
    many[99_999].ttft_eff_ms = f64::NAN;
    assert!(matches!(
        search_thresholds(&many, RuleFamily::Count, 0),
        Err(SearchError::BadTtft { index: 31_337, .. })
    ));
}

/// Sorted distinct finite values (the brute force's own candidate list).
fn distinct(values: impl Iterator<Item = f64>) -> Vec<f64> {
    let mut v: Vec<f64> = values.filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    v.dedup();
    v
}

/// Brute force: every candidate scored directly, the same tie-break.
fn brute(probes: &[SearchProbe], family: RuleFamily) -> RuleScore {
    let rs: Vec<Option<f64>> = std::iter::once(None)
        .chain(
            distinct(probes.iter().filter_map(|p| p.r_eff))
                .into_iter()
                .map(Some),
        )
        .collect();
    let ps: Vec<Option<f64>> = if family == RuleFamily::Count {
        vec![None]
    } else {
        std::iter::once(None)
            .chain(
                distinct(probes.iter().filter_map(|p| p.p_eff))
                    .into_iter()
                    .map(Some),
            )
            .collect()
    };
    let scores: Vec<RuleScore> = rs
        .iter()
        .flat_map(|&r| ps.iter().map(move |&p| ThresholdRule { r, p }))
        .map(|rule| score_rule(probes, rule))
        .collect();
    let best = scores
        .iter()
        .map(|s| s.mean_selected_ttft_ms)
        .fold(f64::INFINITY, f64::min);
    let mut chosen: Option<RuleScore> = None;
    for s in scores {
        if s.mean_selected_ttft_ms <= best + 1e-9 {
            chosen = match chosen {
                Some(c) if !tie_better(&s.rule, s.overrides, &c.rule, c.overrides) => Some(c),
                _ => Some(s),
            };
        }
    }
    chosen.unwrap()
}

/// Small integer-valued probes (many ties), each guard flag true 80 % of the time.
fn arb_probe() -> impl proptest::strategy::Strategy<Value = SearchProbe> {
    use proptest::prelude::*;
    let guard = (
        proptest::bool::weighted(0.8),
        proptest::bool::weighted(0.8),
        proptest::bool::weighted(0.8),
    );
    (
        proptest::option::weighted(0.9, 0u8..6),
        proptest::option::weighted(0.9, 0u8..8),
        0u16..50,
        0u16..50,
        guard,
    )
        .prop_map(|(r, p, e, c, (r_only, p_only, both))| SearchProbe {
            r_eff: r.map(f64::from),
            p_eff: p.map(|p| f64::from(p) / 4.0),
            ttft_eff_ms: f64::from(e) * 10.0,
            ttft_cap_ms: f64::from(c) * 10.0,
            guard: GuardPass {
                r_only,
                p_only,
                both,
            },
        })
}

proptest::proptest! {
    #[test]
    fn sweep_matches_brute_force(
        probes in proptest::collection::vec(arb_probe(), 1..40),
        prefill in proptest::bool::ANY,
    ) {
        let family = if prefill { RuleFamily::CountPrefill } else { RuleFamily::Count };
        let (out, _) = search_thresholds(&probes, family, 0).unwrap();
        let expect = brute(&probes, family);
        proptest::prop_assert_eq!(out.best.rule, expect.rule);
        proptest::prop_assert_eq!(out.best.overrides, expect.overrides);
        proptest::prop_assert!((out.best.mean_selected_ttft_ms - expect.mean_selected_ttft_ms).abs() < 1e-9);
    }

    /// A subset taken from prepared probes searches exactly like the subset prepared anew
    /// (what the stability seeds rely on): same outcome and landscape, bit for bit, and the
    /// same count; with each probe a group of its own ([`SearchInput::new`]) and with
    /// probes in a few groups (conditions, as the seeds take them).
    #[test]
    fn a_subset_searches_like_its_probes(
        raw in proptest::collection::vec((arb_probe(), 0u32..6, proptest::bool::ANY), 1..60),
        keep_groups in proptest::collection::vec(proptest::bool::ANY, 6),
        own_groups in proptest::bool::ANY,
        prefill in proptest::bool::ANY,
    ) {
        let probes: Vec<SearchProbe> = raw.iter().map(|t| t.0).collect();
        let (input, keep, kept_flag): (SearchInput, Mask, Vec<bool>) = if own_groups {
            let flags: Vec<bool> = raw.iter().map(|t| t.2).collect();
            (SearchInput::new(&probes).unwrap(), Mask::from_fn(raw.len(), |i| raw[i].2), flags)
        } else {
            let flags = raw.iter().map(|t| keep_groups[t.1 as usize]).collect();
            let input = SearchInput::grouped(&probes, |i| raw[i].1).unwrap();
            (input, Mask::from_fn(keep_groups.len(), |g| keep_groups[g]), flags)
        };
        let kept: Vec<SearchProbe> =
            probes.iter().zip(&kept_flag).filter(|(_, k)| **k).map(|(p, _)| *p).collect();
        let family = if prefill { RuleFamily::CountPrefill } else { RuleFamily::Count };
        let subset = input.subset(&keep);
        proptest::prop_assert_eq!(subset.len(), kept.len());
        let from_subset = search_prepared(&subset, family, 7);
        let anew = search_thresholds(&kept, family, 7);
        match (from_subset, anew) {
            (Ok(a), Ok(b)) => proptest::prop_assert_eq!(a, b),
            (Err(a), Err(b)) => proptest::prop_assert_eq!(a, b),
            (a, b) => proptest::prop_assert!(false, "{:?} vs {:?}", a, b),
        }
    }

    /// Each R's probes sorted by P or left in probe order: the same searches, bit for
    /// bit (what the sums read does not depend on the order within one R).
    #[test]
    fn sorting_by_p_within_r_changes_no_search(
        raw in proptest::collection::vec((arb_probe(), 0u32..6), 1..60),
        keep_groups in proptest::collection::vec(proptest::bool::ANY, 6),
    ) {
        let probes: Vec<SearchProbe> = raw.iter().map(|t| t.0).collect();
        let group_of = |i: usize| raw[i].1;
        let sorted = SearchInput::grouped_sorting_p_above(&probes, group_of, 0).unwrap();
        let unsorted = SearchInput::grouped_sorting_p_above(&probes, group_of, usize::MAX).unwrap();
        let keep = Mask::from_fn(keep_groups.len(), |g| keep_groups[g]);
        for (a, b) in [(sorted.all(), unsorted.all()), (sorted.subset(&keep), unsorted.subset(&keep))] {
            match (search_families(&a, 7), search_families(&b, 7)) {
                (Ok(x), Ok(y)) => proptest::prop_assert_eq!(x, y),
                (Err(x), Err(y)) => proptest::prop_assert_eq!(x, y),
                (x, y) => proptest::prop_assert!(false, "{:?} vs {:?}", x, y),
            }
        }
    }

    /// Both families from one sweep are each family searched alone, bit for bit.
    #[test]
    fn both_families_at_once_search_like_each_alone(
        probes in proptest::collection::vec(arb_probe(), 1..60),
    ) {
        let input = SearchInput::new(&probes).unwrap();
        let (count, count_prefill, landscape) = search_families(&input.all(), 7).unwrap();
        let alone = |family| search_prepared(&input.all(), family, 7).unwrap();
        proptest::prop_assert_eq!((count, None), (alone(RuleFamily::Count).0, None::<Landscape>));
        proptest::prop_assert_eq!((count_prefill, landscape), alone(RuleFamily::CountPrefill));
    }
}
