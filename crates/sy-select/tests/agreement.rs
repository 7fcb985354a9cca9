//! The offline evaluation sy-select uses (the threshold search's view of a pair, its guard probe
//! and its direct scoring of a rule; the replay statistics) agrees with `sy_selector::decide` on
//! random inputs, for every variant and every reason: a second definition of guard G or of a
//! trigger would make these disagree.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../../sy-selector/tests/common/mod.rs"]
mod common;

use common::strategies::{NOW, fresh_observation, observation};

use std::collections::BTreeSet;

use proptest::prelude::*;
use sy_select::evaluate::{EvalPair, GuardProbe, replay_variant};
use sy_select::search::{RuleFamily, ThresholdRule, score_rule, search_thresholds};
use sy_selector::{
    DecisionInput, Model, Reason, RuleParams, Thresholds, TriggerReads, Variant, count_trigger,
    decide, guard, ttft_trigger,
};

fn pair() -> impl Strategy<Value = EvalPair> {
    (
        prop_oneof![observation(), fresh_observation()],
        prop_oneof![observation(), fresh_observation()],
        0_u64..6,
        1.0..3_000.0,
        1.0..3_000.0,
    )
        .prop_map(|(efficient, capable, local, eff, cap)| {
            let input = DecisionInput {
                proposal: Model::Efficient,
                efficient,
                capable,
                now_ms: NOW,
                local_capable_in_flight: local,
            };
            let pair = EvalPair::new(&input, (eff, cap), None, 0);
            // The packed pair gives the same input back (NaN included, so compared as text).
            assert_eq!(format!("{:?}", pair.input()), format!("{input:?}"));
            pair
        })
}

fn params() -> impl Strategy<Value = RuleParams> {
    let threshold = |hi: f64| prop_oneof![1 => Just(None), 3 => (0.0..hi).prop_map(Some)];
    (threshold(10.0), threshold(4.0), 0.0..400.0, 0.0..400.0).prop_map(|(r, p, blind, cache)| {
        let mut params = common::params();
        params.thresholds = Thresholds { r, p };
        params.margins.blind = blind;
        params.margins.cache = cache;
        params
    })
}

/// The search's rule for a count variant with these thresholds.
fn rule_of(variant: Variant, t: &Thresholds) -> ThresholdRule {
    ThresholdRule {
        r: t.r,
        p: if variant == Variant::CountPrefill {
            t.p
        } else {
            None
        },
    }
}

/// Checks one pair for one variant; returns the decision's reason code.
fn agree(params: &RuleParams, variant: Variant, pair: &EvalPair) -> &'static str {
    let d = decide(params, variant, &pair.input());
    // The replay statistics of this one pair follow the decision.
    let replay = replay_variant(params, variant, std::slice::from_ref(pair));
    assert_eq!(
        replay.all.changed,
        u64::from(d.changed),
        "{variant} {:?}",
        d.reason
    );
    assert_eq!(replay.all.fell_back, u64::from(d.reason.is_fallback()));
    let selected = pair.selected_ttft(d.choice);
    assert_eq!(replay.all.mean_selected_ttft_ms, selected);
    if d.reason == Reason::CapableProposal {
        // Never changed; the search only sees efficient proposals.
        assert!(!d.changed);
        return d.reason.code();
    }

    // Guard G as a function gives decide's guard reason, and the trigger its choice.
    match TriggerReads::of(variant, &params.thresholds) {
        None => assert!(matches!(
            d.reason,
            Reason::StageBaseline | Reason::TriggerDisabled
        )),
        Some(reads) => match guard(&params.limits, reads, &pair.input()) {
            Err(reason) => assert_eq!(reason, d.reason, "{variant}"),
            Ok(readings) => match variant {
                Variant::Count | Variant::CountPrefill => {
                    let fire = count_trigger(
                        &params.thresholds,
                        readings.efficient_r,
                        readings.efficient_p,
                    );
                    assert_eq!(fire, d.changed);
                    assert!(matches!(d.reason, Reason::TriggerFalse | Reason::Override));
                }
                _ => match (d.advantage_ms, d.margin_ms) {
                    (Some(a), Some(m)) if !d.reason.is_fallback() => {
                        assert_eq!(ttft_trigger(a, m), d.changed)
                    }
                    _ => assert!(matches!(
                        d.reason,
                        Reason::OutOfRange { .. } | Reason::NonPositivePrediction { .. }
                    )),
                },
            },
        },
    }

    // The threshold search's view of the pair scores the count rules exactly as decide does.
    if matches!(variant, Variant::Count | Variant::CountPrefill) {
        let probe = GuardProbe::new(params).search_probe(pair);
        let rule = rule_of(variant, &params.thresholds);
        let score = score_rule(&[probe], rule);
        assert_eq!(
            score.overrides,
            u64::from(d.changed),
            "{variant} {:?}",
            d.reason
        );
        assert_eq!(score.mean_selected_ttft_ms, selected);
        let pass = probe.guard;
        let held = match (rule.r.is_some(), rule.p.is_some()) {
            (true, true) => pass.both,
            (true, false) => pass.r_only,
            (false, true) => pass.p_only,
            (false, false) => false,
        };
        let reached_trigger = matches!(d.reason, Reason::TriggerFalse | Reason::Override);
        assert_eq!(held, reached_trigger, "{variant} {:?}", d.reason);
    }
    d.reason.code()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 3_000, ..ProptestConfig::default() })]

    #[test]
    fn offline_evaluation_agrees_with_decide(p in params(), pair in pair()) {
        for variant in Variant::ALL {
            agree(&p, variant, &pair);
        }
    }

    /// The sweep's best rule scores, over many pairs, what replaying it through decide gives.
    #[test]
    fn searched_rule_replays_to_its_score(
        p in params(),
        pairs in prop::collection::vec(pair(), 1..25),
    ) {
        let guard = GuardProbe::new(&p);
        let probes: Vec<_> = pairs.iter().map(|x| guard.search_probe(x)).collect();
        for (family, variant) in [
            (RuleFamily::Count, Variant::Count),
            (RuleFamily::CountPrefill, Variant::CountPrefill),
        ] {
            let (out, _) = search_thresholds(&probes, family, 0).unwrap();
            let mut params = p.clone();
            params.thresholds = Thresholds { r: out.best.rule.r, p: out.best.rule.p };
            let replay = replay_variant(&params, variant, &pairs);
            let direct = score_rule(&probes, out.best.rule);
            prop_assert_eq!(replay.all.changed, out.best.overrides);
            prop_assert_eq!(direct.overrides, out.best.overrides);
            let tol = 1e-6 * out.best.mean_selected_ttft_ms.abs().max(1.0);
            prop_assert!((replay.all.mean_selected_ttft_ms - out.best.mean_selected_ttft_ms).abs() <= tol);
        }
    }
}

/// One hand-made pair per reason: every reason is reached, and the offline evaluation agrees
/// on each.
#[test]
fn every_reason_is_covered() {
    let pair_of = |input: &DecisionInput| EvalPair::new(input, (900.0, 400.0), None, 0);
    let base = || pair_of(&common::example_input());
    let params = common::params();
    let mut seen = BTreeSet::new();
    let mut check = |params: &RuleParams, pair: &EvalPair| {
        for variant in Variant::ALL {
            seen.insert(agree(params, variant, pair));
        }
    };
    check(&params, &base());
    let mut capable = common::example_input();
    capable.proposal = Model::Capable;
    check(&params, &pair_of(&capable));
    let mut disabled = params.clone();
    disabled.thresholds = Thresholds { r: None, p: None };
    check(&disabled, &base());
    let mut high = params.clone();
    high.thresholds = Thresholds {
        r: Some(100.0),
        p: Some(100.0),
    };
    high.margins.blind = 1e9;
    high.margins.cache = 1e9;
    check(&high, &base());
    let edits: [fn(&mut DecisionInput); 7] = [
        |x| x.capable.schedulable = Some(false),
        |x| x.efficient.r = None,
        |x| x.efficient.observed_at_ms = Some(NOW - 10_000.0),
        |x| x.capable.r = Some(50.0),
        |x| x.local_capable_in_flight = 99,
        |x| x.capable.n = Some(1e7),
        |x| x.efficient.n = Some(1_000.0),
    ];
    for edit in edits {
        let mut input = common::example_input();
        edit(&mut input);
        check(&params, &pair_of(&input));
    }
    // A load correction that drives the efficient prediction below zero.
    let mut negative = params.clone();
    negative.efficient.blind.intercept = -1e9;
    negative.efficient.cache.intercept = -1e9;
    check(&negative, &base());
    let missing: Vec<_> = Reason::CODES
        .iter()
        .filter(|c| !seen.contains(**c))
        .collect();
    assert!(missing.is_empty(), "reasons never reached: {missing:?}");
}

proptest! {
    /// Replaying the five variants together, where those whose trigger cannot fire share
    /// Stage's tally, gives each variant's replay made on its own (statistics and selected
    /// TTFTs), with the count variants' terms enabled or disabled.
    #[test]
    fn variants_that_cannot_fire_replay_as_each_alone(
        pairs in prop::collection::vec(pair(), 1..60),
        count in params(),
        count_prefill in params(),
        full in any::<bool>(),
    ) {
        use sy_select::evaluate::{Detail, replay_variants};
        let detail = if full { Detail::Full } else { Detail::Choice };
        let base = common::params();
        let variants: Vec<(Variant, &RuleParams)> = Variant::ALL
            .iter()
            .map(|&v| match v {
                Variant::Count => (v, &count),
                Variant::CountPrefill => (v, &count_prefill),
                _ => (v, &base),
            })
            .collect();
        let together = replay_variants(&variants, &pairs, detail);
        let alone = variants.iter().fold((Vec::new(), Vec::new()), |(mut r, mut t), &x| {
            let (replays, ttfts) = replay_variants(&[x], &pairs, detail);
            r.extend(replays);
            t.extend(ttfts);
            (r, t)
        });
        // Compared as text: a choice's replay has no p90 (NaN).
        prop_assert_eq!(format!("{together:?}"), format!("{alone:?}"));
    }

    /// The frozen parameters' replay taken partly from the candidates' replays (what the
    /// choice already decided with the same parameters) is the replay of every variant made
    /// anew, statistics and selected TTFTs alike.
    #[test]
    fn frozen_replay_is_the_replay_made_anew(
        pairs in prop::collection::vec(pair(), 1..60),
        base in params(),
    ) {
        use sy_select::choice::choose_on_probes;
        use sy_select::evaluate::{Detail, replay_all_keeping};
        use sy_select::search::SearchInput;
        let guard = GuardProbe::new(&base);
        let probes: Vec<_> = pairs.iter().map(|p| guard.search_probe(p)).collect();
        let input = SearchInput::new(&probes).unwrap();
        let mut base = base;
        base.thresholds = Thresholds::default();
        let mut choices = choose_on_probes(&base, &input.all(), &pairs, 3, 0, Detail::Full).unwrap();
        let anew = replay_all_keeping(&choices.params, &pairs, 3);
        let reused = choices.frozen_replay(&pairs, 3);
        prop_assert_eq!(reused, anew);
    }
}

proptest! {
    /// Pairs whose TTFT turns were settled under the run's ground (`EvalPair::settled`) replay
    /// every variant as the same pairs decided from their observations — under the run's
    /// parameters, under a split seed's (other corrections and margins, the same Q tables and
    /// limits) and under parameters of another ground (other limits: the settled turns are not
    /// used).
    #[test]
    fn settled_pairs_replay_as_pairs_decided_anew(
        pairs in prop::collection::vec(pair(), 1..40),
        base in params(),
        scale in 0.3..3.0,
        shift in -200.0..200.0,
        max_age_ms in 0.0..1_000.0,
    ) {
        use sy_select::evaluate::{Detail, replay_variants};
        let ground = sy_selector::TtftGround::of(&base);
        let settled: Vec<EvalPair> = pairs.iter().map(|p| p.clone().settled(&ground)).collect();
        let mut seed = base.clone();
        for m in [&mut seed.efficient, &mut seed.capable] {
            m.standardiser.std = m.standardiser.std.map(|x| x * scale);
            for c in [&mut m.blind, &mut m.cache] {
                c.intercept = c.intercept * scale + shift;
                c.coef = c.coef.map(|x| x * scale - shift);
            }
        }
        seed.margins.blind += shift;
        let mut other = base.clone();
        other.limits.max_age_ms = max_age_ms;
        for params in [&base, &seed, &other] {
            let variants = Variant::ALL.map(|v| (v, params));
            let anew = replay_variants(&variants, &pairs, Detail::Full);
            let from_turns = replay_variants(&variants, &settled, Detail::Full);
            // Compared as text: NaN p90s compare equal there.
            prop_assert_eq!(format!("{anew:?}"), format!("{from_turns:?}"));
        }
    }
}

/// Counts the rows a [`KnownRows`] answers (to check that the known path is taken).
struct Counting<'a, K>(&'a K, std::sync::atomic::AtomicUsize);

impl<K: sy_calibration::fitting::KnownRows> sy_calibration::fitting::KnownRows for Counting<'_, K> {
    fn q_tables(&self) -> (&sy_selector::QTable, &sy_selector::QTable) {
        self.0.q_tables()
    }

    fn row(&self, role: Model, row: usize) -> Option<sy_calibration::fitting::KnownRow> {
        let known = self.0.row(role, row);
        if known.is_some() {
            self.1.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        known
    }
}

/// The stability seeds' per-condition sums taken from settled pairs (each paired row's features
/// and Q baselines) give every split seed the estimators the sums from the rows give, bit for
/// bit — with rows that cannot be used (no R), pairs without a measured TTFT (an error row) and
/// rows outside any pair's ground left to the rows' own path.
#[test]
fn sums_from_settled_pairs_fit_every_seed_as_the_rows_do() {
    use sy_calibration::fitting::{ConditionSumsTable, FitConfig};
    use sy_records::synth::{Contention, SynthSpec, generate};
    use sy_records::{ConditionSplits, Phase, ProbeTable, SplitFractions, Status};
    let spec = SynthSpec {
        conditions: 120,
        repeats: 4,
        contention: Contention::Targeted,
        ..SynthSpec::default()
    };
    let mut records = generate(&spec);
    let load: Vec<usize> = (0..records.len())
        .filter(|&i| records[i].phase == Phase::Load)
        .collect();
    for (k, &i) in load.iter().enumerate() {
        match k % 17 {
            3 => records[i].observed.r = None,
            7 if records[i].role == Model::Capable => {
                records[i].status = Status::Error;
                records[i].ttft_ms = None;
            }
            _ => {}
        }
    }
    let table = ProbeTable::from_records(&records).unwrap();
    let rows = ConditionSumsTable::new(&table);
    let config = |seed| FitConfig {
        seed,
        coefficient_intervals: false,
        ..FitConfig::default()
    };
    let fractions = SplitFractions::default();
    let split = |seed| ConditionSplits::assign(table.conditions(), seed, fractions).by_condition;
    let (e, c) = rows.estimators_by_index(&split(1), &config(1)).unwrap();
    let ground = sy_selector::TtftGround::new(sy_select::select::DEFAULT_LIMITS, e.q, c.q);
    let all = sy_select::evaluate::AllPairs::settled(&table, Some(&ground));
    let settled = all.known_rows(&table, &ground);
    let counting = Counting(&settled, Default::default());
    let known = ConditionSumsTable::with_known_rows(&table, Some(&counting));
    let taken = counting.1.load(std::sync::atomic::Ordering::Relaxed);
    let measured_pairs = load.len() / 2 - load.len() / 2 / 17;
    assert!(taken > measured_pairs, "{taken} rows taken from the pairs");
    for seed in [1, 2, 3, 5, 8] {
        let from_rows = rows.estimators_by_index(&split(seed), &config(seed));
        let from_pairs = known.estimators_by_index(&split(seed), &config(seed));
        assert_eq!(
            format!("{from_rows:?}"),
            format!("{from_pairs:?}"),
            "seed {seed}"
        );
    }
}
