//! The TTFT checks: the client − server gap per (phase, model) and over-saturation inside a
//! condition (Kendall's τ between send time and TTFT).

use super::*;

pub(super) fn ttft_gap(records: &[Record], o: &CheckOptions) -> CheckResult {
    let bound = format!(
        "median client − server TTFT ≤ {} ms per phase and model",
        o.max_ttft_gap_ms
    );
    let with_gap = records.iter().filter(|r| ok(r) && gap(r).is_some());
    let groups = group(with_gap, |r| (r.phase, r.role));
    if groups.is_empty() {
        return skipped("ttft_gap", bound, "no record has a server TTFT");
    }
    let mut measured = Vec::new();
    let mut offenders = Vec::new();
    for ((phase, role), rs) in groups {
        let m = median(rs.iter().filter_map(|r| gap(r)).collect()).unwrap_or(0.0);
        let cell = format!("{}/{}", phase.as_str(), role_name(role));
        measured.push(format!("{cell} {m:.1} ms"));
        if m > o.max_ttft_gap_ms {
            let mut worst = rs.clone();
            worst.sort_by(|a, b| gap(b).unwrap_or(0.0).total_cmp(&gap(a).unwrap_or(0.0)));
            let over: Vec<&Record> = worst
                .into_iter()
                .filter(|r| gap(r).unwrap_or(0.0) > o.max_ttft_gap_ms)
                .collect();
            offenders.push(offender(
                cell,
                format!(
                    "median gap {m:.1} ms over {} records ({} above the bound): transport delay \
                     (delayed ACKs, a proxy, a loaded client) is in the recorded TTFT",
                    rs.len(),
                    over.len()
                ),
                over,
            ));
        }
    }
    result("ttft_gap", bound, measured.join(", "), offenders)
}

pub(super) fn gap(r: &Record) -> Option<f64> {
    r.client_server_gap_ms
        .or_else(|| Some(r.ttft_ms? - r.server_ttft_ms?))
}

/// Kendall's τ-b of `(x, y)` pairs (ties allowed).
pub fn kendall_tau(pairs: &[(f64, f64)]) -> Option<f64> {
    let n = pairs.len();
    if n < 2 {
        return None;
    }
    let (mut c, mut d, mut tx, mut ty) = (0i64, 0i64, 0i64, 0i64);
    for i in 0..n {
        for j in i + 1..n {
            let dx = pairs[i].0 - pairs[j].0;
            let dy = pairs[i].1 - pairs[j].1;
            if dx == 0.0 && dy == 0.0 {
                continue;
            } else if dx == 0.0 {
                tx += 1;
            } else if dy == 0.0 {
                ty += 1;
            } else if (dx > 0.0) == (dy > 0.0) {
                c += 1;
            } else {
                d += 1;
            }
        }
    }
    let denom = (((c + d + tx) as f64) * ((c + d + ty) as f64)).sqrt();
    (denom > 0.0).then(|| (c - d) as f64 / denom)
}

pub(super) fn over_saturation(records: &[Record], o: &CheckOptions) -> CheckResult {
    let bound = format!(
        "inside a condition, TTFT does not rise with time (Kendall τ < {}, or last-third median < \
         {}× and < {} ms above the first third's; ≥ {} records)",
        o.saturation_tau,
        o.saturation_ratio,
        o.saturation_min_rise_ms,
        o.saturation_min_records.max(6)
    );
    let min_records = o.saturation_min_records.max(6);
    let groups = group(
        records.iter().filter(|r| ok(r) && r.ttft_ms.is_some()),
        |r| (r.run_id.clone(), r.condition_id.clone(), r.role),
    );
    let mut judged = 0;
    let mut offenders = Vec::new();
    for ((_, cond, role), mut v) in groups {
        if v.len() < min_records {
            continue;
        }
        judged += 1;
        v.sort_by(|a, b| a.sent_at_unix_ms.total_cmp(&b.sent_at_unix_ms));
        let pairs: Vec<(f64, f64)> = v
            .iter()
            .map(|r| (r.sent_at_unix_ms, r.ttft_ms.unwrap_or(0.0)))
            .collect();
        let Some(tau) = kendall_tau(&pairs) else {
            continue;
        };
        let third = v.len() / 3;
        let first = median(v[..third].iter().filter_map(|r| r.ttft_ms).collect()).unwrap_or(0.0);
        let last = median(
            v[v.len() - third..]
                .iter()
                .filter_map(|r| r.ttft_ms)
                .collect(),
        )
        .unwrap_or(0.0);
        if tau >= o.saturation_tau
            && first > 0.0
            && last >= o.saturation_ratio * first
            && last - first >= o.saturation_min_rise_ms
        {
            offenders.push(offender(
                format!("condition {cond} ({})", role_name(role)),
                format!(
                    "TTFT rises with time: τ {tau:.2}, median {first:.1} → {last:.1} ms from the \
                     first to the last third of its {} records: a queue builds up (background \
                     load above what the workers sustain, or leaked load)",
                    v.len()
                ),
                v[v.len() - third..].iter().copied(),
            ));
        }
    }
    if judged == 0 {
        return skipped(
            "over_saturation",
            bound,
            "no condition has enough ok records",
        );
    }
    let measured = format!(
        "{judged} (condition, model) cells, {} rising",
        offenders.len()
    );
    result("over_saturation", bound, measured, offenders)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::fixture::*;

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
    fn kendall_tau_of_orders() {
        let up: Vec<(f64, f64)> = (0..10).map(|i| (i as f64, i as f64)).collect();
        let down: Vec<(f64, f64)> = (0..10).map(|i| (i as f64, -(i as f64))).collect();
        assert_eq!(kendall_tau(&up), Some(1.0));
        assert_eq!(kendall_tau(&down), Some(-1.0));
        assert_eq!(kendall_tau(&[(1.0, 1.0)]), None);
        let flat: Vec<(f64, f64)> = (0..10).map(|i| (i as f64, 3.0)).collect();
        assert_eq!(kendall_tau(&flat), None);
    }
}
