//! Failures are data: how many records failed, per model and per condition, over every record the
//! run was given (both phases), for the report. A condition with a failed record is flagged: its
//! pairs without a TTFT on both candidates were left out of the fit, the margins and the choice.

use std::collections::BTreeMap;

use sy_records::{ProbeTable, Status};

/// One condition's records of one model that had a failure.
#[derive(Debug, Clone, PartialEq)]
pub struct ConditionFailures {
    pub condition_id: String,
    pub phase: String,
    pub model: String,
    pub failed: u64,
    pub records: u64,
}

/// Failed records per model and the conditions with failures.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Failures {
    /// Per model (served name): (failed, records).
    pub per_model: BTreeMap<String, (u64, u64)>,
    /// Conditions with at least one failed record, per model.
    pub conditions: Vec<ConditionFailures>,
    /// Conditions in all (both phases).
    pub conditions_total: u64,
}

/// The failures of `records`.
pub fn failures(records: &ProbeTable) -> Failures {
    let mut per_model: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let mut per_condition: BTreeMap<(String, String, String), (u64, u64)> = BTreeMap::new();
    let mut conditions = std::collections::BTreeSet::new();
    for row in records.rows() {
        let failed = u64::from(row.status() == Status::Error);
        let m = per_model.entry(row.model().to_string()).or_default();
        m.0 += failed;
        m.1 += 1;
        let key = (
            row.condition_id().to_string(),
            format!("{:?}", row.phase()).to_lowercase(),
            row.model().to_string(),
        );
        conditions.insert(row.condition());
        let c = per_condition.entry(key).or_default();
        c.0 += failed;
        c.1 += 1;
    }
    Failures {
        per_model,
        conditions: per_condition
            .into_iter()
            .filter(|(_, (failed, _))| *failed > 0)
            .map(
                |((condition_id, phase, model), (failed, records))| ConditionFailures {
                    condition_id,
                    phase,
                    model,
                    failed,
                    records,
                },
            )
            .collect(),
        conditions_total: conditions.len() as u64,
    }
}

/// The report's section: failure rates per model with Wilson intervals, then every condition
/// with a failure (flagged).
pub fn markdown(f: &Failures) -> String {
    let mut md = String::from(
        "## Failures\n\nEvery record the run was given, both phases: a failed record (an HTTP error, a timeout, a dropped stream after the collector's retries) stays in the records; a pair without a TTFT on both candidates is left out of the fit, the margins and the choice. Rates with Wilson 95 % intervals.\n\n| model | records | failed | rate [95 %] |\n|---|---|---|---|\n",
    );
    for (model, (failed, records)) in &f.per_model {
        let (lo, hi) = sy_stats::binomial::wilson(*failed, *records, 0.95);
        let rate = if *records == 0 {
            0.0
        } else {
            *failed as f64 / *records as f64
        };
        md.push_str(&format!(
            "| {model} | {records} | {failed} | {:.2} % [{:.2}, {:.2}] |\n",
            100.0 * rate,
            100.0 * lo,
            100.0 * hi
        ));
    }
    if f.conditions.is_empty() {
        md.push_str(&format!(
            "\nNo condition had a failed record ({} conditions).\n",
            f.conditions_total
        ));
    } else {
        let flagged: std::collections::BTreeSet<&str> = f
            .conditions
            .iter()
            .map(|c| c.condition_id.as_str())
            .collect();
        md.push_str(&format!(
            "\n**Flagged: {} of {} conditions had a failed record.**\n\n| condition | phase | model | failed / records |\n|---|---|---|---|\n",
            flagged.len(),
            f.conditions_total
        ));
        for c in &f.conditions {
            md.push_str(&format!(
                "| ⚠ {} | {} | {} | {} / {} |\n",
                c.condition_id, c.phase, c.model, c.failed, c.records
            ));
        }
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;
    use sy_records::synth::{SynthSpec, generate};

    #[test]
    fn failed_records_are_counted_per_model_and_condition() {
        let spec = SynthSpec {
            conditions: 20,
            repeats: 2,
            ..SynthSpec::default()
        };
        let mut records = generate(&spec);
        let n = records.len() as u64;
        // Fail the first record and the fifth.
        for i in [0usize, 4] {
            records[i].status = Status::Error;
            records[i].ttft_ms = None;
        }
        let bad_conditions: std::collections::BTreeSet<String> = [0usize, 4]
            .iter()
            .map(|&i| records[i].condition_id.clone())
            .collect();
        let table = ProbeTable::from_records(&records).unwrap();
        let f = failures(&table);
        let failed: u64 = f.per_model.values().map(|v| v.0).sum();
        let total: u64 = f.per_model.values().map(|v| v.1).sum();
        assert_eq!((failed, total), (2, n));
        let flagged: std::collections::BTreeSet<String> = f
            .conditions
            .iter()
            .map(|c| c.condition_id.clone())
            .collect();
        assert_eq!(flagged, bad_conditions);
        let md = markdown(&f);
        assert!(md.contains("**Flagged:"), "{md}");
        assert!(md.contains("⚠"), "{md}");
    }
}
