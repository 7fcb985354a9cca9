//! The client − server TTFT gap (`client_server_gap_ms` = `ttft_ms − server_ttft_ms`) per phase and
//! model: what the client and the network add to the engine's own time to first token. At no load
//! on loopback it is about a millisecond; a large gap means the records time the transport, not the
//! engine (docs/dynamo-verification.md, "Client TTFT against the frontend's own TTFT").

use std::collections::BTreeMap;

use sy_records::{ProbeTable, Status};
use sy_selector::quantile_sorted;

/// One phase × model row of the gap table.
#[derive(Debug, Clone, PartialEq)]
pub struct GapRow {
    pub phase: String,
    pub model: String,
    /// Successful records of this phase and model.
    pub ok: usize,
    /// Of those, records without a server timing (no `client_server_gap_ms`).
    pub without_server_timing: usize,
    /// Quantiles of the gap over the records that have it, ms; `None` when none has it.
    pub stats: Option<GapStats>,
}

/// Distribution of the gap, ms.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GapStats {
    pub count: usize,
    pub median: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

/// Per phase and model (sorted by phase, then model) over the successful records: how many carry
/// the gap, and its median, p90, p99 and max.
pub fn gap_rows(records: &ProbeTable) -> Vec<GapRow> {
    let mut groups: BTreeMap<(&str, &str), (usize, Vec<f64>)> = BTreeMap::new();
    for r in records.rows().filter(|r| r.status() == Status::Ok) {
        let e = groups.entry((r.phase().as_str(), r.model())).or_default();
        e.0 += 1;
        if let Some(g) = r.client_server_gap_ms().filter(|g| g.is_finite()) {
            e.1.push(g);
        }
    }
    groups
        .into_iter()
        .map(|((phase, model), (ok, mut gaps))| {
            gaps.sort_by(f64::total_cmp);
            let q = |p: f64| quantile_sorted(&gaps, p).unwrap_or(f64::NAN);
            let stats = (!gaps.is_empty()).then(|| GapStats {
                count: gaps.len(),
                median: q(0.5),
                p90: q(0.9),
                p99: q(0.99),
                max: gaps[gaps.len() - 1],
            });
            GapRow {
                phase: phase.to_owned(),
                model: model.to_owned(),
                ok,
                without_server_timing: ok - gaps.len(),
                stats,
            }
        })
        .collect()
}

/// The report's markdown for [`gap_rows`]: a table, or one sentence saying the gap is not available
/// when no record carries it (records written before the field existed, or a deployment that
/// reports no `nvext.timing`).
pub fn gap_markdown(rows: &[GapRow]) -> String {
    let mut md = String::from("## Client − server TTFT gap\n\n");
    let total: usize = rows.iter().map(|r| r.ok).sum();
    if rows.iter().all(|r| r.stats.is_none()) {
        md.push_str(&format!(
            "Not available: none of the {total} successful records carries `client_server_gap_ms` (records written before the field existed, or a deployment that reports no server timing).\n"
        ));
        return md;
    }
    md.push_str("`client_server_gap_ms` = client TTFT − the server's own TTFT (`nvext.timing`), per phase and model over the successful records; about a millisecond on loopback at no load. A large gap means the records time the transport, not the engine.\n\n| phase | model | records with the gap | without a server timing | median (ms) | p90 (ms) | p99 (ms) | max (ms) |\n|---|---|---|---|---|---|---|---|\n");
    for r in rows {
        let cells = match &r.stats {
            Some(s) => format!(
                "{} | {} | {:.2} | {:.2} | {:.2} | {:.2}",
                s.count, r.without_server_timing, s.median, s.p90, s.p99, s.max
            ),
            None => format!("0 | {} | — | — | — | —", r.without_server_timing),
        };
        md.push_str(&format!("| {} | {} | {cells} |\n", r.phase, r.model));
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;
    use sy_records::{Phase, Record};
    use sy_selector::Model;

    fn rec(phase: Phase, model: &str, gap: Option<f64>, ok: bool) -> Record {
        let mut r = sy_records::synth::template_record();
        r.phase = phase;
        r.model = model.to_owned();
        r.client_server_gap_ms = gap;
        if !ok {
            r.status = Status::Error;
        }
        r
    }

    #[test]
    fn quantiles_per_phase_and_model_and_missing_timings_counted() {
        let mut records: Vec<Record> = (1..=10)
            .map(|i| rec(Phase::Qgrid, "efficient", Some(f64::from(i) / 10.0), true))
            .collect();
        records.push(rec(Phase::Qgrid, "efficient", None, true));
        records.push(rec(Phase::Qgrid, "efficient", Some(99.0), false)); // failed: not counted
        let mut capable = rec(Phase::Load, "capable", None, true);
        capable.role = Model::Capable;
        records.push(capable);
        records.push(rec(Phase::Load, "efficient", None, false)); // its failed partner
        let rows = gap_rows(&ProbeTable::from_records(&records).unwrap());
        assert_eq!(rows.len(), 2);
        let load = &rows[0];
        assert_eq!(
            (load.phase.as_str(), load.model.as_str()),
            ("load", "capable")
        );
        assert_eq!(
            (load.ok, load.without_server_timing, load.stats),
            (1, 1, None)
        );
        let q = &rows[1];
        assert_eq!((q.ok, q.without_server_timing), (11, 1));
        let s = q.stats.unwrap();
        assert_eq!(s.count, 10);
        assert!((s.median - 0.55).abs() < 1e-12, "{s:?}");
        assert!((s.p90 - 0.91).abs() < 1e-12, "{s:?}");
        assert!((s.max - 1.0).abs() < 1e-12, "{s:?}");
        let md = gap_markdown(&rows);
        assert!(
            md.contains("| qgrid | efficient | 10 | 1 | 0.55 | 0.91 |"),
            "{md}"
        );
        assert!(md.contains("| load | capable | 0 | 1 | — |"), "{md}");
    }

    #[test]
    fn records_without_the_column_say_not_available() {
        let records = vec![rec(Phase::Qgrid, "efficient", None, true); 3];
        let md = gap_markdown(&gap_rows(&ProbeTable::from_records(&records).unwrap()));
        assert!(md.contains("Not available: none of the 3"), "{md}");
        assert!(!md.contains("| qgrid"), "{md}");
    }
}
