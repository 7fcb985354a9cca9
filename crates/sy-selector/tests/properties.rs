//! Property tests of `decide` over arbitrary observations, including NaN, infinities, negative and
//! huge values.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::strategies::{NOW, fresh_observation, observation};

use proptest::prelude::*;
use sy_selector::{
    CandidateFeatures, Decision, DecisionInput, Estimator, Model, RawFeatures, Reason, RuleParams,
    Thresholds, TriggerReads, TtftGround, Variant, count_guards, decide, decide_prepared, guard,
    predict, predict_prepared, required_inputs,
};

fn input() -> impl Strategy<Value = DecisionInput> {
    (
        prop_oneof![Just(Model::Efficient), Just(Model::Capable)],
        observation(),
        observation(),
        prop_oneof![1 => any::<f64>(), 8 => Just(NOW)],
        prop_oneof![4 => 0_u64..6, 1 => any::<u64>()],
    )
        .prop_map(
            |(proposal, efficient, capable, now_ms, local)| DecisionInput {
                proposal,
                efficient,
                capable,
                now_ms,
                local_capable_in_flight: local,
            },
        )
}

/// A turn whose observations are all valid and fresh (guard G then depends on the limits alone,
/// and the TTFT triggers compare real predictions).
fn valid_input() -> impl Strategy<Value = DecisionInput> {
    let obs = fresh_observation;
    (obs(), obs(), 0_u64..6).prop_map(|(efficient, capable, local)| DecisionInput {
        proposal: Model::Efficient,
        efficient,
        capable,
        now_ms: NOW,
        local_capable_in_flight: local,
    })
}

fn variant() -> impl Strategy<Value = Variant> {
    prop::sample::select(Variant::ALL.to_vec())
}

fn threshold(realistic: std::ops::Range<f64>) -> impl Strategy<Value = Option<f64>> {
    prop_oneof![1 => Just(None), 3 => realistic.prop_map(Some)]
}

fn params() -> impl Strategy<Value = RuleParams> {
    (
        threshold(0.0..10.0),
        threshold(0.0..4.0),
        0.0..400.0,
        0.0..400.0,
    )
        .prop_map(|(r, p, blind, cache)| {
            let mut params = common::params();
            params.thresholds = Thresholds { r, p };
            params.margins.blind = blind;
            params.margins.cache = cache;
            params
        })
}

/// `p` refitted as a split seed refits it: other standardisers, corrections and margins, the same
/// Q tables and limits (`scale` and `shift` move every fitted number).
fn refitted(p: &RuleParams, scale: f64, shift: f64) -> RuleParams {
    let mut q = p.clone();
    for m in [&mut q.efficient, &mut q.capable] {
        m.standardiser.mean = m.standardiser.mean.map(|x| x + shift / 100.0);
        m.standardiser.std = m.standardiser.std.map(|x| x * scale);
        for c in [&mut m.blind, &mut m.cache] {
            c.intercept = c.intercept * scale + shift;
            c.coef = c.coef.map(|x| x * scale - shift);
        }
    }
    q.margins.blind += shift;
    q.margins.cache -= shift;
    q
}

/// Decisions compared through JSON (NaN-safe: a NaN prediction is `null` on both sides).
fn same(a: &Decision, b: &Decision) -> bool {
    serde_json::to_string(a).unwrap() == serde_json::to_string(b).unwrap()
}

/// Overwrites every input the variant does not read with garbage.
fn scramble_unread(
    variant: Variant,
    t: &Thresholds,
    i: &DecisionInput,
    junk: f64,
) -> DecisionInput {
    let needs = required_inputs(variant, t);
    let mut out = i.clone();
    for (obs, need) in [
        (&mut out.efficient, needs.efficient),
        (&mut out.capable, needs.capable),
    ] {
        if !need.n && !need.k {
            obs.n = Some(junk);
        }
        if !need.k {
            obs.k = Some(junk);
        }
        if !need.r {
            obs.r = Some(junk);
        }
        if !need.p {
            obs.prefill_tokens_booked = Some(junk);
            obs.prefill_capacity_tokens = None;
        }
        if !need.observed_at {
            obs.observed_at_ms = Some(junk);
        }
        if !need.schedulable {
            obs.schedulable = None;
        }
        obs.recorded = Some(Box::new(sy_selector::Recorded {
            worker_id: Some(42),
            endpoint: Some("junk".to_string()),
            ..Default::default()
        }));
    }
    if !needs.efficient.any() && !needs.capable.any() {
        out.now_ms = junk;
        out.local_capable_in_flight = u64::MAX;
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2_000, ..ProptestConfig::default() })]

    /// A decision from features computed beforehand is the decision (every variant, valid or
    /// not), and so is each prediction.
    #[test]
    fn prepared_features_decide_and_predict_the_same(p in params(), v in variant(), i in input()) {
        let features = CandidateFeatures::of(&i);
        prop_assert!(same(&decide_prepared(&p, v, &i, &features), &decide(&p, v, &i)));
        for estimator in [Estimator::Blind, Estimator::Cache] {
            for (model, obs) in [(&p.efficient, &i.efficient), (&p.capable, &i.capable)] {
                let prepared = predict_prepared(model, estimator, obs, RawFeatures::of(obs));
                let direct = predict(model, estimator, obs);
                prop_assert_eq!(format!("{prepared:?}"), format!("{direct:?}"));
            }
        }
    }

    /// A turn settled once under the limits and Q tables decides every TTFT variant as `decide`
    /// does under refitted corrections and margins (a split seed's), and gives the predicted
    /// advantage the margins read.
    #[test]
    fn settled_ttft_turns_decide_and_predict_as_decide_does(
        p in params(),
        i in prop_oneof![input(), valid_input()],
        scale in 0.2..3.0,
        shift in -300.0..300.0,
    ) {
        let features = CandidateFeatures::of(&i);
        let ground = TtftGround::of(&p);
        let seed = refitted(&p, scale, shift);
        prop_assert!(ground.fits(&seed));
        for (variant, estimator) in [(Variant::Blind, Estimator::Blind), (Variant::Cache, Estimator::Cache)] {
            let turn = ground.settle(estimator, &i, &features).unwrap();
            for params in [&p, &seed] {
                let reason = turn.decide(params, estimator, &features);
                prop_assert_eq!(reason, decide(params, variant, &i).reason);
                let models = (&params.efficient, &params.capable);
                let predicted = predict(models.0, estimator, &i.efficient)
                    .and_then(|e| Ok(e - predict(models.1, estimator, &i.capable)?))
                    .ok();
                let settled = turn.advantage_ms(models, estimator, &features);
                prop_assert_eq!(settled.map(f64::to_bits), predicted.map(f64::to_bits));
            }
        }
    }

    /// Guard G for every set of count-trigger terms at once is guard G with each set (limits
    /// drawn too: a turn can fail on its ages, its destination or its local calls).
    #[test]
    fn count_guards_are_the_guard_of_each_set_of_terms(
        p in params(),
        i in input(),
        max_age_ms in prop_oneof![Just(f64::INFINITY), 0.0..2_000.0],
        destination_limit in 0.0..8.0,
        local_limit in 0_u64..6,
    ) {
        let mut limits = p.limits;
        limits.max_age_ms = max_age_ms;
        limits.destination_limit = destination_limit;
        limits.local_limit = local_limit;
        let each = |r: bool, p: bool| guard(&limits, TriggerReads::Counts { r, p }, &i).is_ok();
        let all = count_guards(&limits, &i);
        prop_assert_eq!(
            (all.r_only, all.p_only, all.both),
            (each(true, false), each(false, true), each(true, true))
        );
    }

    #[test]
    fn never_changes_a_capable_proposal(p in params(), v in variant(), mut i in input()) {
        i.proposal = Model::Capable;
        let d = decide(&p, v, &i);
        prop_assert_eq!(d.choice, Model::Capable);
        prop_assert!(!d.changed);
        prop_assert_eq!(d.reason, Reason::CapableProposal);
    }

    #[test]
    fn changes_only_by_override(p in params(), v in variant(), i in input()) {
        let d = decide(&p, v, &i);
        prop_assert_eq!(d.proposal, i.proposal);
        prop_assert_eq!(d.changed, d.choice != d.proposal);
        if d.changed {
            prop_assert_eq!(d.reason, Reason::Override);
            prop_assert_eq!(d.proposal, Model::Efficient);
            prop_assert_eq!(d.choice, Model::Capable);
            prop_assert!(v != Variant::Stage);
            prop_assert!(d.capable_age_ms.unwrap() <= p.limits.max_age_ms);
            prop_assert!(d.capable_r.unwrap() < p.limits.destination_limit);
            prop_assert!(i.local_capable_in_flight < p.limits.local_limit);
            prop_assert_eq!(i.capable.schedulable, Some(true));
            if let (Some(e), Some(c), Some(a)) =
                (d.predicted_efficient_ms, d.predicted_capable_ms, d.advantage_ms)
            {
                prop_assert!(e > 0.0 && c > 0.0 && e.is_finite() && c.is_finite());
                prop_assert!(a > d.margin_ms.unwrap());
            }
        } else {
            prop_assert!(d.reason != Reason::Override);
        }
    }

    #[test]
    fn falls_back_to_stage_when_a_needed_input_is_invalid(
        p in params(), v in variant(), mut i in input()
    ) {
        i.proposal = Model::Efficient;
        let needs = required_inputs(v, &p.thresholds);
        let eff_bad = needs.efficient.check(&i.efficient, i.now_ms).is_err();
        let cap_bad = needs.capable.check(&i.capable, i.now_ms).is_err();
        let d = decide(&p, v, &i);
        if eff_bad || cap_bad {
            prop_assert_eq!(d.choice, Model::Efficient);
            prop_assert!(!d.changed);
            prop_assert!(d.reason.is_fallback(), "{:?}", d.reason);
            prop_assert!(
                matches!(d.reason, Reason::InvalidInput { .. } | Reason::NotSchedulable),
                "{:?}", d.reason
            );
        }
        if let Reason::InvalidInput { model, .. } = d.reason {
            let named_bad = if model == Model::Efficient { eff_bad } else { cap_bad };
            prop_assert!(named_bad);
        }
        // The reason names the *first* problem in the documented order: the capable worker
        // not schedulable, then the capable candidate's first invalid input, then the efficient
        // one's (each in `Needs::check` order).
        let expected = if needs.capable.schedulable && i.capable.schedulable == Some(false) {
            Some(Reason::NotSchedulable)
        } else if let Err(e) = needs.capable.check(&i.capable, i.now_ms) {
            Some(Reason::InvalidInput { model: Model::Capable, field: e.field, problem: e.problem })
        } else if let Err(e) = needs.efficient.check(&i.efficient, i.now_ms) {
            Some(Reason::InvalidInput { model: Model::Efficient, field: e.field, problem: e.problem })
        } else {
            None
        };
        if let Some(expected) = expected {
            prop_assert_eq!(d.reason, expected);
        }
    }

    #[test]
    fn inputs_a_variant_does_not_need_never_matter(
        p in params(), v in variant(), i in input(), junk in any::<f64>()
    ) {
        let scrambled = scramble_unread(v, &p.thresholds, &i, junk);
        let a = decide(&p, v, &i);
        let b = decide(&p, v, &scrambled);
        prop_assert!(same(&a, &b), "{:?}\n{:?}", a, b);
    }

    #[test]
    fn count_prefill_with_both_terms_disabled_is_stage(p in params(), i in input()) {
        let mut off = p.clone();
        off.thresholds = Thresholds { r: None, p: None };
        let stage = decide(&p, Variant::Stage, &i);
        let cp = decide(&off, Variant::CountPrefill, &i);
        prop_assert_eq!(cp.choice, stage.choice);
        prop_assert_eq!(cp.changed, stage.changed);
        prop_assert_eq!(cp.choice, i.proposal);
        prop_assert!(!cp.changed);
    }

    #[test]
    fn stage_always_follows_stage(p in params(), i in input()) {
        let d = decide(&p, Variant::Stage, &i);
        prop_assert_eq!(d.choice, i.proposal);
        prop_assert!(!d.changed);
    }

    #[test]
    fn decision_serialises(p in params(), v in variant(), i in input()) {
        let d = decide(&p, v, &i);
        let json = serde_json::to_value(d).unwrap();
        prop_assert_eq!(json["reason"]["kind"].as_str(), Some(d.reason.code()));
    }

    #[test]
    fn q_lookup_total_and_inside_hull(n in any::<f64>(), f in any::<f64>(), n2 in 1_000.0..128_000.0, f2 in 0.0..1.0) {
        let q = &common::params().efficient.q;
        // Never panics on anything; whatever it returns is inside the corner values.
        let _ = q.lookup(n, f);
        let v = q.lookup(n2, f2).unwrap();
        let lo = (0..5).flat_map(|i| (0..6).map(move |j| (i, j))).filter_map(|(i, j)| q.value(i, j)).fold(f64::INFINITY, f64::min);
        let hi = (0..5).flat_map(|i| (0..6).map(move |j| (i, j))).filter_map(|(i, j)| q.value(i, j)).fold(f64::NEG_INFINITY, f64::max);
        prop_assert!(v >= lo - 1e-9 && v <= hi + 1e-9);
    }
}
