//! How the records were collected, for the report's first lines: a fixed plan, or adaptive
//! rounds (`sy-collect --adaptive` keeps `adaptive.json`, `schemas/adaptive.schema.json`, beside
//! the records). The calibration itself is the same either way.
//!
//! Only the members the lines name are read (rounds, the last look's sequence and verdict, the
//! stop and the method); the file's owner and full type is `sy-collect`'s `adaptive` module.

use std::path::{Path, PathBuf};

use serde_json::Value;

/// The file `sy-collect --adaptive` writes beside the records.
const ADAPTIVE_FILE: &str = sy_rundir::Artifact::Adaptive.file_name();

pub(crate) fn adaptive_file_of(records: &Path) -> PathBuf {
    if records.is_dir() {
        records.join(ADAPTIVE_FILE)
    } else {
        records
            .parent()
            .unwrap_or_else(|| Path::new("."))
            .join(ADAPTIVE_FILE)
    }
}

/// One line per run collected adaptively (none for a fixed plan; an unreadable file says so).
pub fn design_lines(records: &[PathBuf]) -> Vec<String> {
    let mut out = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for r in records {
        let path = adaptive_file_of(r);
        if !seen.insert(path.clone()) || !path.is_file() {
            continue;
        }
        let doc: Option<Value> = sy_rundir::read_input(&path, 64 << 20)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok());
        let Some(doc) = doc else {
            out.push(format!(
                "Design: {} exists but cannot be read: how the run was designed is unknown.",
                path.display()
            ));
            continue;
        };
        let rounds = doc["rounds"].as_array().map_or(0, Vec::len);
        let stopped = doc["stopped"]
            .as_str()
            .unwrap_or("not stopped (interrupted)");
        let look = doc["looks"].as_array().and_then(|l| l.last());
        let sequence = look
            .and_then(|l| l["sequence"].as_object())
            .and_then(|s| {
                Some((
                    s.get("mean")?.as_f64()?,
                    s.get("lo")?.as_f64()?,
                    s.get("hi")?.as_f64()?,
                ))
            })
            .map_or("no sequence".to_string(), |(m, lo, hi)| {
                format!("{m:+.1} ms, {lo:+.1} to {hi:+.1}")
            });
        let judged = look
            .and_then(|l| l["judged_conditions"].as_u64())
            .unwrap_or(0);
        // What it spent: the run's wall time × the GPUs (or ranks) serving the two models.
        let spent = doc["spent"]["gpu_seconds"]
            .as_f64()
            .map_or(String::new(), |g| {
                let unit = if doc["spent"]["gpus_per_rank_known"].as_bool() == Some(true) {
                    "GPU"
                } else {
                    "rank"
                };
                let budget = (doc["spec"]["budget_gpu_seconds"].as_f64())
                    .filter(|b| *b > 0.0)
                    .map_or(String::new(), |b| format!(" of a budget of {b}"));
                format!(", {g:.0} {unit}-seconds spent{budget}")
            });
        out.push(format!(
            "Design: adaptive ({}): {rounds} rounds{spent}, stopped: {stopped}; at the stop {judged} conditions judged, change of `{}` versus Stage {sequence} (anytime-valid confidence sequence, α {}). The intervals below are the calibration's own, on all the records, as for a fixed plan.",
            path.display(),
            doc["judged_variant"].as_str().unwrap_or("?"),
            doc["spec"]["alpha"].as_f64().map_or("?".into(), |a| a.to_string()),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_adaptive_run_is_named_and_a_fixed_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let records = dir.path().join("records.jsonl");
        std::fs::write(&records, "").unwrap();
        assert!(design_lines(std::slice::from_ref(&records)).is_empty());
        std::fs::write(
            dir.path().join(ADAPTIVE_FILE),
            r#"{"rounds":[{},{},{}],"stopped":"gain","judged_variant":"cache","spec":{"alpha":0.05},
               "looks":[{"judged_conditions":24,"sequence":{"mean":-10.0,"lo":-18.5,"hi":-1.5}}]}"#,
        )
        .unwrap();
        let lines = design_lines(&[records, dir.path().to_path_buf()]);
        assert_eq!(lines.len(), 1, "one line per run directory: {lines:?}");
        assert!(lines[0].contains("3 rounds, stopped: gain"), "{}", lines[0]);
        assert!(lines[0].contains("-10.0 ms, -18.5 to -1.5"), "{}", lines[0]);
        std::fs::write(
            dir.path().join(ADAPTIVE_FILE),
            r#"{"rounds":[{}],"stopped":"budget","judged_variant":"cache",
               "spec":{"alpha":0.05,"budget_gpu_seconds":100.0},"looks":[],
               "spent":{"gpu_seconds":98.4,"gpus_per_rank_known":true}}"#,
        )
        .unwrap();
        let lines = design_lines(&[dir.path().to_path_buf()]);
        assert!(
            lines[0].contains("1 rounds, 98 GPU-seconds spent of a budget of 100, stopped: budget"),
            "{}",
            lines[0]
        );
    }
}
