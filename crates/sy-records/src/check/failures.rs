//! The run-level checks: failure shares (run, condition, error class) and the load left booked
//! at the end of the run.

use super::*;

pub(super) fn failures(records: &[Record], o: &CheckOptions) -> CheckResult {
    let bound = format!(
        "failure share ≤ {:.1} % over the run and ≤ {:.0} % in any condition",
        o.max_failure_share * 100.0,
        o.max_condition_failure_share * 100.0
    );
    if records.is_empty() {
        return skipped("failures", bound, "no record");
    }
    let failed: Vec<&Record> = records.iter().filter(|r| !ok(r)).collect();
    let by_class = group(failed.iter().copied(), |r| {
        r.error_class
            .map(|c| {
                serde_json::to_value(c)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default()
            })
            .unwrap_or_else(|| "unclassified".into())
    });
    let total = share(failed.len(), records.len());
    let classes = by_class
        .iter()
        .map(|(c, v)| format!("{c} {}", v.len()))
        .collect::<Vec<_>>()
        .join(", ");
    let measured = format!(
        "{} of {} failed ({:.2} %){}",
        failed.len(),
        records.len(),
        total * 100.0,
        if classes.is_empty() {
            String::new()
        } else {
            format!(": {classes}")
        }
    );
    let mut offenders = Vec::new();
    if total > o.max_failure_share {
        for (class, v) in &by_class {
            offenders.push(offender(
                format!("run, class {class}"),
                format!(
                    "{} failures ({:.2} % of the run); e.g. {}",
                    v.len(),
                    share(v.len(), records.len()) * 100.0,
                    v[0].error_message.as_deref().unwrap_or("no message")
                ),
                v.iter().copied(),
            ));
        }
    }
    for (cond, rs) in group(records, |r| (r.run_id.clone(), r.condition_id.clone())) {
        let bad: Vec<&Record> = rs.iter().copied().filter(|r| !ok(r)).collect();
        let sh = share(bad.len(), rs.len());
        if sh > o.max_condition_failure_share {
            offenders.push(offender(
                format!("condition {}", cond.1),
                format!(
                    "{} of {} records failed ({:.0} %)",
                    bad.len(),
                    rs.len(),
                    sh * 100.0
                ),
                bad,
            ));
        }
    }
    result("failures", bound, measured, offenders)
}

pub(super) fn loads_zero(facts: Option<&RunFacts>) -> CheckResult {
    let bound =
        "the selection service shows no booked load and no reservation is left after the run"
            .to_string();
    let Some(f) = facts else {
        return skipped("loads_zero_at_end", bound, "no manifest");
    };
    let Some(zero) = f.loads_zero_at_end else {
        return skipped(
            "loads_zero_at_end",
            bound,
            "the manifest does not say (an interrupted run?)",
        );
    };
    let measured = format!(
        "loads zero at end: {zero}, reservations left: {}",
        f.outstanding_reservations
    );
    let offenders = if zero && f.outstanding_reservations == 0 {
        Vec::new()
    } else {
        vec![Offender {
            cell: "run".into(),
            detail: format!(
                "booked load remained after the run ({} reservations could not be deleted): R \
                 and P of a later run on this deployment would include it",
                f.outstanding_reservations
            ),
            records: Vec::new(),
            record_count: 0,
        }]
    };
    result("loads_zero_at_end", bound, measured, offenders)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::fixture::*;
    use crate::record::ErrorClass;

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
}
