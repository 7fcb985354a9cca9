//! The background-load checks: the advisory pick against the reservation, and contention that
//! the probes must see (R, P).

use super::*;

/// Whether the advisory pick differs from the reserved (worker, rank) **and** saw other figures:
/// a tie between equally idle workers, broken one way by the query and the other by the
/// reservation, changes nothing the rule would see.
pub(super) fn differs_materially(r: &Record) -> bool {
    r.pick_differs == Some(true)
        && (r.advisory_k != r.observed.k
            || r.advisory_r != r.observed.r
            || match (r.advisory_p, r.observed.p) {
                (Some(a), Some(b)) => (a - b).abs() > 1e-9,
                (a, b) => a.is_some() != b.is_some(),
            })
}

pub(super) fn advisory_disagreement(records: &[Record], o: &CheckOptions) -> CheckResult {
    let bound = format!(
        "≤ {:.0} % of records whose advisory pick is another (worker, rank) with other K, R or P",
        o.max_pick_differs_share * 100.0
    );
    let known = records.iter().filter(|r| r.pick_differs.is_some());
    let groups = group(known, |r| (r.phase, r.role));
    if groups.is_empty() {
        return skipped(
            "advisory_disagreement",
            bound,
            "no record says whether the picks differ",
        );
    }
    let mut measured = Vec::new();
    let mut offenders = Vec::new();
    for ((phase, role), rs) in groups {
        let other = rs.iter().filter(|r| r.pick_differs == Some(true)).count();
        let differ: Vec<&Record> = rs
            .iter()
            .copied()
            .filter(|r| differs_materially(r))
            .collect();
        let sh = share(differ.len(), rs.len());
        let cell = format!("{}/{}", phase.as_str(), role_name(role));
        measured.push(format!(
            "{cell} {:.1} % ({:.1} % another worker)",
            sh * 100.0,
            share(other, rs.len()) * 100.0
        ));
        if sh > o.max_pick_differs_share {
            offenders.push(offender(
                cell,
                format!(
                    "{} of {} records: the load moved between observing and reserving, so the \
                     observation the rule would see is not the one measured",
                    differ.len(),
                    rs.len()
                ),
                differ,
            ));
        }
    }
    result(
        "advisory_disagreement",
        bound,
        measured.join(", "),
        offenders,
    )
}

/// Whether the prefill and decode background loops of `r`'s condition run on `r`'s model (as
/// sy-collect's background plans them: `target` names the model(s); with a busy capable
/// destination, the capable model's load is the busy slots instead, decode only).
pub(super) fn loops_target(r: &Record) -> bool {
    let capable = r.role == Model::Capable;
    match r.background.target.as_str() {
        "capable" => capable,
        "both" => !capable || !r.background.busy_capable,
        "none" => false,
        _ => !capable,
    }
}

pub(super) fn contention_observed(records: &[Record], opts: &CheckOptions) -> CheckResult {
    let bound = format!(
        "R > 0 on some record of every (condition, model) the plan loads, and P > 0 where it \
         runs prefill contention; at most {:.0} % of those cells unseen, none because the \
         contention cannot reach the probe's (worker, rank)",
        opts.max_unseen_load_share * 100.0
    );
    let contended = records.iter().filter(|r| {
        let b = &r.background;
        r.phase == Phase::Load
            && ok(r)
            && ((loops_target(r) && (b.prefill_requests > 0 || b.decode_requests > 0))
                || (b.busy_capable && r.role == Model::Capable))
    });
    let groups = group(contended, |r| (r.condition_id.clone(), r.role));
    if groups.is_empty() {
        return skipped(
            "contention_observed",
            bound,
            "no load condition with planned contention",
        );
    }
    // The (worker, rank) pairs each model's probes were reserved on, over the whole run.
    let mut pairs: BTreeMap<Model, std::collections::BTreeSet<(u64, u32)>> = BTreeMap::new();
    for r in records {
        if let Some(w) = r.reserved_worker_id {
            pairs
                .entry(r.role)
                .or_default()
                .insert((w, r.reserved_dp_rank.unwrap_or(0)));
        }
    }
    let mut offenders = Vec::new();
    let mut structural = 0usize;
    let n = groups.len();
    for ((cond, role), rs) in groups {
        let prefill = loops_target(rs[0]) && rs[0].background.prefill_requests > 0;
        let b = &rs[0].background;
        let spread = pairs.get(&role).map_or(0, std::collections::BTreeSet::len);
        let requests = if loops_target(rs[0]) {
            b.prefill_requests.max(b.decode_requests) as usize
        } else {
            0
        };
        let spread_out = requests > 0 && requests < spread;
        let cause = if spread_out {
            format!(
                "the background's {requests} request(s) spread over this model's {spread} \
                 (worker, rank) pairs and the probe was reserved on an idle one: raise the \
                 contention levels to at least the number of ranks, or serve the model on fewer"
            )
        } else {
            "the background was not booked through the selection service, or finished before \
             the probes"
                .to_string()
        };
        let r_seen = rs.iter().any(|r| r.observed.r.is_some_and(|v| v > 0));
        let p_seen = rs.iter().any(|r| r.observed.p.is_some_and(|v| v > 0.0));
        let mut missing = Vec::new();
        if !r_seen {
            missing.push("R");
        }
        if prefill && !p_seen {
            missing.push("P");
        }
        if !missing.is_empty() {
            structural += usize::from(spread_out);
            offenders.push(offender(
                format!("condition {cond} ({})", role_name(role)),
                format!(
                    "{} stayed 0 on all {} records although the plan loads this model there ({} \
                     prefill, {} decode background requests{}): {cause}",
                    missing.join(" and "),
                    rs.len(),
                    b.prefill_requests,
                    b.decode_requests,
                    if b.busy_capable {
                        ", busy capable destination"
                    } else {
                        ""
                    }
                ),
                rs,
            ));
        }
    }
    let unseen = offenders.len();
    let measured = format!(
        "{n} loaded (condition, model) cells, {unseen} without load seen ({:.1} %; {structural} \
         where the contention cannot reach the probe's rank)",
        100.0 * unseen as f64 / n as f64
    );
    if structural == 0 && unseen as f64 <= opts.max_unseen_load_share * n as f64 {
        // Within the bound: a pass that still names the cells where load went unseen.
        return CheckResult {
            name: "contention_observed".into(),
            outcome: Outcome::Pass,
            bound,
            measured,
            offenders,
        };
    }
    result("contention_observed", bound, measured, offenders)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::fixture::*;

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
}
