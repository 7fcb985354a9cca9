//! Failures are data: how many records failed, per model and per condition, over every record the
//! run was given (both phases), for the report, and how many *attempts* failed: a record's
//! `attempts` counts the unit's tries (the records of the retried ones are in the run
//! directory's `attempts.jsonl`), so a record that answered on its third try carries two failed
//! attempts. A condition with a failed record or a failed attempt is flagged: its pairs without
//! a TTFT on both candidates were left out of the fit, the margins and the choice, and a retried
//! unit was measured on a deployment that had just failed.

use std::collections::BTreeMap;

use sy_records::{ProbeTable, Status};

/// One condition's records of one model that had a failed record or a failed attempt.
#[derive(Debug, Clone, PartialEq)]
pub struct ConditionFailures {
    pub condition_id: String,
    pub phase: String,
    pub model: String,
    pub failed: u64,
    pub records: u64,
    /// Attempts made (every try of every record's unit).
    pub attempts: u64,
    /// Attempts that failed: a failed record's every attempt, an answered record's earlier ones.
    pub failed_attempts: u64,
}

/// Failure counts of one model or one condition.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Counts {
    failed: u64,
    records: u64,
    attempts: u64,
    failed_attempts: u64,
}

/// Failed records per model and the conditions with failures.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Failures {
    /// Per model (served name): (failed, records).
    pub per_model: BTreeMap<String, (u64, u64)>,
    /// Per model (served name): (failed attempts, attempts).
    pub per_model_attempts: BTreeMap<String, (u64, u64)>,
    /// Conditions with at least one failed record or failed attempt, per model.
    pub conditions: Vec<ConditionFailures>,
    /// Conditions in all (both phases).
    pub conditions_total: u64,
}

/// The failures of `records`.
pub fn failures(records: &ProbeTable) -> Failures {
    let mut per_model: BTreeMap<String, Counts> = BTreeMap::new();
    let mut per_condition: BTreeMap<(String, String, String), Counts> = BTreeMap::new();
    let mut conditions = std::collections::BTreeSet::new();
    for row in records.rows() {
        let ok = row.status() != Status::Error;
        let attempts = u64::from(row.attempts().max(1));
        let add = |c: &mut Counts| {
            c.failed += u64::from(!ok);
            c.records += 1;
            c.attempts += attempts;
            c.failed_attempts += attempts - u64::from(ok);
        };
        add(per_model.entry(row.model().to_string()).or_default());
        let key = (
            row.condition_id().to_string(),
            format!("{:?}", row.phase()).to_lowercase(),
            row.model().to_string(),
        );
        conditions.insert(row.condition());
        add(per_condition.entry(key).or_default());
    }
    Failures {
        per_model: (per_model.iter())
            .map(|(m, c)| (m.clone(), (c.failed, c.records)))
            .collect(),
        per_model_attempts: (per_model.iter())
            .map(|(m, c)| (m.clone(), (c.failed_attempts, c.attempts)))
            .collect(),
        conditions: per_condition
            .into_iter()
            .filter(|(_, c)| c.failed_attempts > 0)
            .map(|((condition_id, phase, model), c)| ConditionFailures {
                condition_id,
                phase,
                model,
                failed: c.failed,
                records: c.records,
                attempts: c.attempts,
                failed_attempts: c.failed_attempts,
            })
            .collect(),
        conditions_total: conditions.len() as u64,
    }
}

fn rate_cell(k: u64, n: u64) -> String {
    let (lo, hi) = sy_stats::binomial::wilson(k, n, 0.95);
    let rate = if n == 0 { 0.0 } else { k as f64 / n as f64 };
    format!(
        "{:.2} % [{:.2}, {:.2}]",
        100.0 * rate,
        100.0 * lo,
        100.0 * hi
    )
}

/// The report's section: failure rates of records and of attempts per model with Wilson
/// intervals, then every condition with a failed record or attempt (flagged), with its rates.
pub fn markdown(f: &Failures) -> String {
    let mut md = String::from(
        "## Failures\n\nEvery record the run was given, both phases: a failed record (an HTTP error, a timeout, a dropped stream after the collector's retries) stays in the records; a pair without a TTFT on both candidates is left out of the fit, the margins and the choice. Every attempt counts: a record answered on its third try carries two failed attempts (their own records are in the run directory's `attempts.jsonl`). Rates with Wilson 95 % intervals.\n\n| model | records | failed | rate [95 %] | attempts | failed attempts | attempt failure rate [95 %] |\n|---|---|---|---|---|---|---|\n",
    );
    for (model, (failed, records)) in &f.per_model {
        let (failed_attempts, attempts) = f
            .per_model_attempts
            .get(model)
            .copied()
            .unwrap_or((*failed, *records));
        md.push_str(&format!(
            "| {model} | {records} | {failed} | {} | {attempts} | {failed_attempts} | {} |\n",
            rate_cell(*failed, *records),
            rate_cell(failed_attempts, attempts),
        ));
    }
    if f.conditions.is_empty() {
        md.push_str(&format!(
            "\nNo condition had a failed record or a failed attempt ({} conditions).\n",
            f.conditions_total
        ));
    } else {
        let flagged: std::collections::BTreeSet<&str> = f
            .conditions
            .iter()
            .map(|c| c.condition_id.as_str())
            .collect();
        md.push_str(&format!(
            "\n**Flagged: {} of {} conditions had a failed record or a failed attempt.**\n\n| condition | phase | model | failed / records | failed / attempts | attempt failure rate [95 %] |\n|---|---|---|---|---|---|\n",
            flagged.len(),
            f.conditions_total
        ));
        for c in &f.conditions {
            md.push_str(&format!(
                "| ⚠ {} | {} | {} | {} / {} | {} / {} | {} |\n",
                c.condition_id,
                c.phase,
                c.model,
                c.failed,
                c.records,
                c.failed_attempts,
                c.attempts,
                rate_cell(c.failed_attempts, c.attempts)
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

    #[test]
    fn retried_attempts_count_and_flag_their_condition() {
        let spec = SynthSpec {
            conditions: 20,
            repeats: 2,
            ..SynthSpec::default()
        };
        let mut records = generate(&spec);
        let n = records.len() as u64;
        // Record 3 answered on its third try; record j (another condition) failed after two.
        let j = (4..records.len())
            .find(|&i| records[i].condition_id != records[3].condition_id)
            .unwrap();
        records[3].attempts = 3;
        records[j].attempts = 2;
        records[j].status = Status::Error;
        records[j].ttft_ms = None;
        let table = ProbeTable::from_records(&records).unwrap();
        let f = failures(&table);
        let (failed_attempts, attempts) = f
            .per_model_attempts
            .values()
            .fold((0, 0), |(a, b), (x, y)| (a + x, b + y));
        assert_eq!(attempts, n + 2 + 1);
        assert_eq!(failed_attempts, 2 + 2);
        let failed: u64 = f.per_model.values().map(|v| v.0).sum();
        assert_eq!(failed, 1, "only record j failed for good");
        let flagged: std::collections::BTreeSet<&str> = f
            .conditions
            .iter()
            .map(|c| c.condition_id.as_str())
            .collect();
        let expected: std::collections::BTreeSet<&str> = [3usize, j]
            .iter()
            .map(|&i| records[i].condition_id.as_str())
            .collect();
        assert_eq!(
            flagged, expected,
            "a retried-then-answered unit is flagged too"
        );
        let retried = f
            .conditions
            .iter()
            .find(|c| c.condition_id == records[3].condition_id && c.model == records[3].model)
            .unwrap();
        assert_eq!((retried.failed, retried.failed_attempts), (0, 2));
        let md = markdown(&f);
        assert!(md.contains("failed / attempts"), "{md}");
    }
}
