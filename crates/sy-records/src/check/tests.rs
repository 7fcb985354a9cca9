use super::*;
use crate::record::{Background, ErrorClass};
use crate::synth::template_record;

/// A clean run: a 3×2 no-load grid with TTFT rising in N and falling in f, and two load
/// conditions with prefill contention on the efficient model, R and P seen; cached = K, a
/// 1 ms client − server gap, no failure, time in order.
fn clean() -> Vec<Record> {
    let mut out = Vec::new();
    let mut t = 0.0;
    let mut push = |mut r: Record, out: &mut Vec<Record>| {
        t += 100.0;
        r.sent_at_unix_ms = t;
        out.push(r);
    };
    for role in [Model::Efficient, Model::Capable] {
        let slow = if role == Model::Capable { 3.0 } else { 1.0 };
        for (ni, n) in [256u64, 1024, 4096].into_iter().enumerate() {
            for f in [0.0, 0.5] {
                for rep in 0..4 {
                    let mut r = template_record();
                    r.phase = Phase::Qgrid;
                    r.role = role;
                    r.model = role_name(role).into();
                    r.condition_id = format!("q-n{n}-f{f}");
                    r.probe_id = format!("q-n{n}-f{f}-{rep}");
                    r.repeat = rep;
                    r.planned_n = n;
                    r.planned_f = f;
                    let k = (f * n as f64) as u64;
                    r.observed.n = Some(n);
                    r.observed.k = Some(k);
                    r.cached_tokens = Some(k);
                    r.prompt_tokens = Some(n);
                    let ttft =
                        slow * (10.0 + 20.0 * ni as f64) * (1.0 - 0.5 * f) + rep as f64 * 0.1;
                    r.ttft_ms = Some(ttft + 1.0);
                    r.server_ttft_ms = Some(ttft);
                    r.client_server_gap_ms = Some(1.0);
                    r.pick_differs = Some(false);
                    push(r, &mut out);
                }
            }
        }
    }
    for c in 0..2 {
        for rep in 0..6 {
            for role in [Model::Efficient, Model::Capable] {
                let mut r = template_record();
                r.role = role;
                r.model = role_name(role).into();
                r.condition_id = format!("L{c}");
                r.probe_id = format!("L{c}-{rep}");
                r.repeat = rep;
                r.background = Background {
                    prefill_requests: 2,
                    prefill_prompt_tokens: 8192,
                    target: "efficient".into(),
                    ..Background::default()
                };
                let loaded = role == Model::Efficient;
                r.observed.r = Some(if loaded { 2 } else { 0 });
                r.observed.p = Some(if loaded && rep % 2 == 0 { 0.5 } else { 0.0 });
                r.ttft_ms = Some(50.0 + (rep % 3) as f64);
                r.server_ttft_ms = Some(49.0 + (rep % 3) as f64);
                r.client_server_gap_ms = Some(1.0);
                r.pick_differs = Some(rep == 0);
                push(r, &mut out);
            }
        }
    }
    out
}

fn facts() -> RunFacts {
    RunFacts {
        loads_zero_at_end: Some(true),
        outstanding_reservations: 0,
        complete: Some(true),
    }
}

fn check<'a>(rep: &'a CheckReport, name: &str) -> &'a CheckResult {
    rep.checks
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no check {name}"))
}

fn failing_only(rep: &CheckReport, name: &str) {
    assert_eq!(rep.failed(), vec![name], "{}", rep.render_text());
    assert_eq!(rep.verdict, Outcome::Fail);
}

#[test]
fn a_clean_run_passes_every_check() {
    let rep = judge(&clean(), Some(&facts()), &CheckOptions::default());
    assert!(rep.passed(), "{}", rep.render_text());
    for c in &rep.checks {
        assert_eq!(
            c.outcome,
            Outcome::Pass,
            "{}: {}",
            c.name,
            rep.render_text()
        );
    }
    let back: CheckReport = serde_json::from_str(&serde_json::to_string(&rep).unwrap()).unwrap();
    assert_eq!(back, rep);
}

#[test]
fn contamination_of_uncached_probes_names_the_records() {
    let mut rs = clean();
    let victim = rs
        .iter_mut()
        .find(|r| r.planned_f == 0.0 && r.planned_n == 1024 && r.role == Model::Capable)
        .unwrap();
    victim.cached_tokens = Some(512);
    victim.observed.k = Some(512);
    let name = rec_name(victim);
    let rep = judge(&rs, Some(&facts()), &CheckOptions::default());
    failing_only(&rep, "cache_contamination");
    let c = check(&rep, "cache_contamination");
    assert!(
        c.offenders.iter().any(|o| o.records.contains(&name)),
        "{c:?}"
    );
    assert!(c.offenders[0].cell.contains("q-n1024-f0"), "{c:?}");
}

#[test]
fn a_drifting_hit_rate_is_contamination() {
    let mut rs = clean();
    // The second half of one cached cell's records hits the whole prompt.
    let mut cell: Vec<&mut Record> = rs
        .iter_mut()
        .filter(|r| r.condition_id == "q-n4096-f0.5" && r.role == Model::Efficient)
        .collect();
    let n = cell.len();
    for r in cell.iter_mut().skip(n / 2) {
        r.cached_tokens = Some(4096);
        r.observed.k = Some(4096);
    }
    let rep = judge(&rs, Some(&facts()), &CheckOptions::default());
    let c = check(&rep, "cache_contamination");
    assert_eq!(c.outcome, Outcome::Fail, "{}", rep.render_text());
    assert!(
        c.offenders[0].detail.contains("drifts 0.50 → 1.00"),
        "{c:?}"
    );
}

#[test]
fn ttft_rising_inside_a_condition_is_over_saturation() {
    let mut rs = clean();
    let mut i = 0.0;
    for r in rs
        .iter_mut()
        .filter(|r| r.condition_id == "L1" && r.role == Model::Efficient)
    {
        i += 1.0;
        r.ttft_ms = Some(50.0 * i);
        r.server_ttft_ms = Some(50.0 * i - 1.0);
    }
    let rep = judge(&rs, Some(&facts()), &CheckOptions::default());
    failing_only(&rep, "over_saturation");
    let c = check(&rep, "over_saturation");
    assert_eq!(c.offenders.len(), 1);
    assert_eq!(c.offenders[0].cell, "condition L1 (efficient)");
    assert!(
        c.offenders[0]
            .records
            .contains(&"L1-5/efficient".to_string())
    );
}

#[test]
fn failures_are_shared_by_class_and_condition() {
    let mut rs = clean();
    for r in rs.iter_mut().filter(|r| r.condition_id == "L0").take(5) {
        r.status = Status::Error;
        r.error_class = Some(ErrorClass::Http5xx);
        r.error_message = Some("HTTP 500: pinned worker not eligible".into());
        r.ttft_ms = None;
    }
    let rep = judge(&rs, Some(&facts()), &CheckOptions::default());
    let c = check(&rep, "failures");
    assert_eq!(c.outcome, Outcome::Fail, "{}", rep.render_text());
    assert!(c.measured.contains("http5xx 5"), "{}", c.measured);
    assert!(
        c.offenders.iter().any(|o| o.cell == "condition L0"),
        "{c:?}"
    );
    assert!(
        c.offenders.iter().any(|o| o.cell == "run, class http5xx"),
        "{c:?}"
    );
}

#[test]
fn a_large_client_server_gap_fails_per_phase_and_model() {
    let mut rs = clean();
    for r in rs
        .iter_mut()
        .filter(|r| r.phase == Phase::Load && r.role == Model::Capable)
    {
        r.client_server_gap_ms = Some(41.0);
    }
    let rep = judge(&rs, Some(&facts()), &CheckOptions::default());
    failing_only(&rep, "ttft_gap");
    assert_eq!(check(&rep, "ttft_gap").offenders[0].cell, "load/capable");
}

#[test]
fn q_out_of_order_names_the_cells() {
    let mut rs = clean();
    for r in rs
        .iter_mut()
        .filter(|r| r.phase == Phase::Qgrid && r.role == Model::Capable && r.planned_n == 4096)
    {
        r.ttft_ms = Some(5.0);
        r.server_ttft_ms = Some(4.0);
    }
    let rep = judge(&rs, Some(&facts()), &CheckOptions::default());
    failing_only(&rep, "q_monotonic");
    let c = check(&rep, "q_monotonic");
    assert!(
        c.offenders.iter().all(|o| o.cell == "qgrid/capable"),
        "{c:?}"
    );
    assert!(
        c.offenders
            .iter()
            .any(|o| o.detail.contains("N 1024 → 4096")),
        "{c:?}"
    );
}

#[test]
fn contention_that_never_shows_fails() {
    let mut rs = clean();
    for r in rs.iter_mut().filter(|r| r.condition_id == "L1") {
        r.observed.p = Some(0.0);
    }
    let rep = judge(&rs, Some(&facts()), &CheckOptions::default());
    failing_only(&rep, "contention_observed");
    assert!(
        check(&rep, "contention_observed").offenders[0]
            .detail
            .starts_with("P stayed 0")
    );
}

#[test]
fn cached_tokens_disagreeing_with_k() {
    let mut rs = clean();
    for r in rs
        .iter_mut()
        .filter(|r| r.role == Model::Efficient && r.planned_f > 0.0)
    {
        r.cached_tokens = r.observed.k.map(|k| k - 16);
    }
    let rep = judge(&rs, Some(&facts()), &CheckOptions::default());
    failing_only(&rep, "cached_tokens_match_k");
}

#[test]
fn loads_left_and_advisory_disagreement() {
    let rs = clean();
    let left = RunFacts {
        loads_zero_at_end: Some(false),
        outstanding_reservations: 2,
        complete: Some(true),
    };
    failing_only(
        &judge(&rs, Some(&left), &CheckOptions::default()),
        "loads_zero_at_end",
    );
    let no_manifest = judge(&rs, None, &CheckOptions::default());
    assert!(no_manifest.passed());
    assert_eq!(
        check(&no_manifest, "loads_zero_at_end").outcome,
        Outcome::Skipped
    );

    let mut rs = clean();
    for r in rs.iter_mut().filter(|r| r.phase == Phase::Load) {
        r.pick_differs = Some(true);
    }
    failing_only(
        &judge(&rs, Some(&facts()), &CheckOptions::default()),
        "advisory_disagreement",
    );
}

#[test]
fn kendall_tau_of_orders() {
    let up: Vec<(f64, f64)> = (0..10).map(|i| (i as f64, i as f64)).collect();
    let down: Vec<(f64, f64)> = (0..10).map(|i| (i as f64, -(i as f64))).collect();
    assert_eq!(kendall_tau(&up), Some(1.0));
    assert_eq!(kendall_tau(&down), Some(-1.0));
    assert_eq!(kendall_tau(&[(1.0, 1.0)]), None);
    let flat: Vec<(f64, f64)> = (0..10).map(|i| (i as f64, 3.0)).collect();
    assert_eq!(kendall_tau(&flat), None);
}

#[test]
fn no_records_skips_rather_than_passes_silently() {
    let rep = judge(&[], None, &CheckOptions::default());
    assert!(
        rep.checks.iter().all(|c| c.outcome == Outcome::Skipped),
        "{}",
        rep.render_text()
    );
}

#[test]
fn a_few_cells_with_unseen_load_pass_within_the_share_and_are_named() {
    let mut rs = clean();
    for r in rs.iter_mut().filter(|r| r.condition_id == "L1") {
        r.observed.p = Some(0.0);
    }
    // One of the two loaded (condition, model) cells unseen: within a 50 % share.
    let opts = CheckOptions {
        max_unseen_load_share: 0.5,
        ..CheckOptions::default()
    };
    let rep = judge(&rs, Some(&facts()), &opts);
    assert!(rep.passed(), "{}", rep.render_text());
    let c = check(&rep, "contention_observed");
    assert_eq!(c.outcome, Outcome::Pass);
    assert_eq!(c.offenders.len(), 1, "the unseen cell is still named");
    assert!(c.offenders[0].cell.contains("L1"), "{:?}", c.offenders[0]);
}

#[test]
fn contention_that_cannot_reach_the_probes_rank_fails_at_any_share() {
    let mut rs = clean();
    // Probes of the efficient model were reserved on two workers over the run, and L1's
    // background has a single request: the probe can land on the idle one.
    for (i, r) in rs.iter_mut().enumerate() {
        if r.role == Model::Efficient {
            r.reserved_worker_id = Some(1 + (i as u64 % 2));
        }
    }
    for r in rs.iter_mut().filter(|r| r.condition_id == "L1") {
        r.background.prefill_requests = 1;
        r.observed.p = Some(0.0);
        r.observed.r = Some(0);
    }
    let opts = CheckOptions {
        max_unseen_load_share: 1.0,
        ..CheckOptions::default()
    };
    let rep = judge(&rs, Some(&facts()), &opts);
    failing_only(&rep, "contention_observed");
    let c = check(&rep, "contention_observed");
    assert!(
        c.offenders[0]
            .detail
            .contains("raise the contention levels"),
        "{:?}",
        c.offenders[0]
    );
}
