//! The documented example turn (`data/examples/observations.json` with the example bundle),
//! checked against values computed by hand from the fixture's parameters.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use sy_selector::{Estimator, Model, Reason, Variant, decide, predict, q_baseline};

fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol
}

#[test]
fn hand_computed_predictions() {
    let p = common::params();
    let eff = common::example_efficient();
    let cap = common::example_capable();
    // Q_eff = 25 + 0.012 N (1 - f) + 0.0015 N f; the table is exact for this bilinear form.
    // N = 100,000, f = 0.9: 25 + 120 + 135 = 280; blind (f = 0): 25 + 1200 = 1225.
    assert!(close(
        q_baseline(&p.efficient.q, Estimator::Cache, &eff).unwrap(),
        280.0,
        1e-9
    ));
    assert!(close(
        q_baseline(&p.efficient.q, Estimator::Blind, &eff).unwrap(),
        1225.0,
        1e-9
    ));
    // Q_cap(98,500, 0) = 60 + 0.03 · 98,500 = 3015.
    assert!(close(
        q_baseline(&p.capable.q, Estimator::Cache, &cap).unwrap(),
        3015.0,
        1e-9
    ));
    // z_eff = ((ln 100001 − 9.9)/1.4, (ln 5 − 1.2)/0.8, (ln 3 − 0.45)/0.5)
    //       ≈ (1.152097, 0.511805, 1.297224)
    // T_cache_eff = 280 + 120 + 15·1.152097 + 140·0.511805 + 240·1.297224 ≈ 800.267
    // T_blind_eff = 1225 + 180 + 40·1.152097 + 150·0.511805 + 260·1.297224 ≈ 1865.132
    // z_cap = ((ln 98501 − 9.9)/1.4, (ln 2 − 0.9)/0.7, (0 − 0.3)/0.45)
    //       ≈ (1.141357, −0.295496, −0.666667)
    // T_cache_cap = 3015 + 70 + 25·1.141357 − 110·0.295496 − 280·0.666667 ≈ 2894.360
    // T_blind_cap = 3015 + 90 + 60·1.141357 − 120·0.295496 − 300·0.666667 ≈ 2938.018
    let t = |m: &sy_selector::ModelEstimators, e, o| predict(m, e, o).unwrap();
    assert!(close(
        t(&p.efficient, Estimator::Cache, &eff),
        800.267,
        1e-3
    ));
    assert!(close(
        t(&p.efficient, Estimator::Blind, &eff),
        1865.132,
        1e-3
    ));
    assert!(close(t(&p.capable, Estimator::Cache, &cap), 2894.360, 1e-3));
    assert!(close(t(&p.capable, Estimator::Blind, &cap), 2938.018, 1e-3));
}

#[test]
fn hand_computed_decisions() {
    let p = common::params();
    let i = common::example_input();
    // Count rules: R_eff = 4 >= r = 4 (and P_eff = 2 > 1.5); guard: capable R = 1 < 8, local
    // 1 < 4, ages 40 and 39 ms <= 500 → override.
    for v in [Variant::Count, Variant::CountPrefill] {
        let d = decide(&p, v, &i);
        assert_eq!(
            (d.choice, d.reason),
            (Model::Capable, Reason::Override),
            "{v}"
        );
        assert_eq!(d.efficient_age_ms, Some(40.0));
        assert_eq!(d.capable_age_ms, Some(39.0));
    }
    assert_eq!(decide(&p, Variant::CountPrefill, &i).efficient_p, Some(2.0));
    // TTFT rules: the efficient worker holds 90% of the prompt, the capable one is cold, so
    // both estimators predict efficient is faster → keep efficient.
    let d = decide(&p, Variant::Cache, &i);
    assert_eq!(
        (d.choice, d.reason),
        (Model::Efficient, Reason::TriggerFalse)
    );
    assert!(close(d.advantage_ms.unwrap(), 800.267 - 2894.360, 2e-3));
    let d = decide(&p, Variant::Blind, &i);
    assert_eq!(
        (d.choice, d.reason),
        (Model::Efficient, Reason::TriggerFalse)
    );
    assert!(close(d.advantage_ms.unwrap(), 1865.132 - 2938.018, 2e-3));
    assert_eq!(decide(&p, Variant::Stage, &i).reason, Reason::StageBaseline);
}
