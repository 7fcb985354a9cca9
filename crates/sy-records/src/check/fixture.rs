//! The records every check's tests start from: a clean run, and helpers to read a report.

use super::*;
use crate::record::Background;
use crate::synth::template_record;

/// A clean run: a 3×2 no-load grid with TTFT rising in N and falling in f, and two load
/// conditions with prefill contention on the efficient model, R and P seen; cached = K, a
/// 1 ms client − server gap, no failure, time in order.
pub(super) fn clean() -> Vec<Record> {
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

pub(super) fn facts() -> RunFacts {
    RunFacts {
        loads_zero_at_end: Some(true),
        outstanding_reservations: 0,
        complete: Some(true),
    }
}

pub(super) fn check<'a>(rep: &'a CheckReport, name: &str) -> &'a CheckResult {
    rep.checks
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no check {name}"))
}

pub(super) fn failing_only(rep: &CheckReport, name: &str) {
    assert_eq!(rep.failed(), vec![name], "{}", rep.render_text());
    assert_eq!(rep.verdict, Outcome::Fail);
}
