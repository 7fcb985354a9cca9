//! How the records were collected, for the report's first lines: a fixed plan, or adaptive
//! rounds (`sy-collect --adaptive` keeps `adaptive.json`, `schemas/adaptive.schema.json`, beside
//! the records). The calibration itself is the same either way.
//!
//! The file is read with its one type, `sy_rundir::artifact::adaptive::AdaptiveFile`, checked
//! as `sy-collect --resume` checks it.

use std::path::{Path, PathBuf};

use sy_rundir::artifact::adaptive::{ADAPTIVE_FILE, AdaptiveFile};

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
        let Ok(doc) = AdaptiveFile::read_path(&path) else {
            out.push(format!(
                "Design: {} exists but cannot be read: how the run was designed is unknown.",
                path.display()
            ));
            continue;
        };
        out.push(design_line(&path, &doc));
    }
    out
}

/// The report's line for one adaptive run.
fn design_line(path: &Path, doc: &AdaptiveFile) -> String {
    let rounds = doc.rounds.len();
    let stopped = doc
        .stopped
        .map_or("not stopped (interrupted)", |s| s.as_str());
    let look = doc.looks.last();
    let sequence = look
        .and_then(|l| l.sequence)
        .map_or("no sequence".to_string(), |s| {
            format!("{:+.1} ms, {:+.1} to {:+.1}", s.mean, s.lo, s.hi)
        });
    let judged = look.map_or(0, |l| l.judged_conditions);
    // What it spent: the run's wall time × the GPUs (or ranks) serving the two models.
    let spent = doc.spent.map_or(String::new(), |s| {
        let unit = if s.gpus_per_rank_known { "GPU" } else { "rank" };
        let b = doc.spec.budget_gpu_seconds;
        let budget = if b > 0.0 {
            format!(" of a budget of {b}")
        } else {
            String::new()
        };
        format!(", {:.0} {unit}-seconds spent{budget}", s.gpu_seconds)
    });
    format!(
        "Design: adaptive ({}): {rounds} rounds{spent}, stopped: {stopped}; at the stop {judged} conditions judged, change of `{}` versus Stage {sequence} (anytime-valid confidence sequence, α {}). The fit, the margins, the selection and their intervals below are made as for a fixed plan; the Answer also states the decision of the adaptive design, recomputed from the records.",
        path.display(),
        doc.judged_variant.as_str(),
        doc.spec.alpha,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use sy_rundir::artifact::adaptive::{
        ADAPTIVE_SCHEMA_VERSION, AdaptiveSpec, Look, RoundPlan, Spent, StopReason,
    };
    use sy_selector::Variant;
    use sy_stats::sequential::{SequenceInterval, Verdict};

    fn round(round: u32) -> RoundPlan {
        RoundPlan {
            round,
            new_conditions: vec![format!("c{round}")],
            refine: Vec::new(),
        }
    }

    fn file(rounds: u32, stopped: StopReason, looks: Vec<Look>) -> AdaptiveFile {
        AdaptiveFile {
            schema_version: ADAPTIVE_SCHEMA_VERSION,
            plan_sha256: "0".repeat(64),
            seed: 1,
            spec: AdaptiveSpec::default(),
            budget_units: 100,
            judged_variant: Variant::Cache,
            method: "a confidence sequence".to_string(),
            rounds: (0..rounds).map(round).collect(),
            looks,
            stopped: Some(stopped),
            spent: None,
        }
    }

    #[test]
    fn an_adaptive_run_is_named_and_a_fixed_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let records = dir.path().join("records.jsonl");
        std::fs::write(&records, "").unwrap();
        assert!(design_lines(std::slice::from_ref(&records)).is_empty());
        let look = Look {
            round: 2,
            load_units: 48,
            judged_conditions: 24,
            unjudged_conditions: 0,
            sequence: Some(SequenceInterval {
                n: 24,
                mean: -10.0,
                sd: 12.0,
                lo: -18.5,
                hi: -1.5,
                alpha: 0.05,
            }),
            attainable: None,
            verdict: Verdict::Gain,
            margin_cache_ms: None,
        };
        file(3, StopReason::Gain, vec![look])
            .write(dir.path())
            .unwrap();
        let lines = design_lines(&[records, dir.path().to_path_buf()]);
        assert_eq!(lines.len(), 1, "one line per run directory: {lines:?}");
        assert!(lines[0].contains("3 rounds, stopped: gain"), "{}", lines[0]);
        assert!(lines[0].contains("-10.0 ms, -18.5 to -1.5"), "{}", lines[0]);
        assert!(lines[0].contains("`cache` versus Stage"), "{}", lines[0]);
        let mut f = file(1, StopReason::Budget, Vec::new());
        f.spec.budget_gpu_seconds = 100.0;
        f.spent = Some(Spent {
            seconds: 49.2,
            load_units: 4,
            load_seconds: 40.0,
            gpus: 2,
            gpus_per_rank_known: true,
            gpu_seconds: 98.4,
        });
        f.write(dir.path()).unwrap();
        let lines = design_lines(&[dir.path().to_path_buf()]);
        assert!(
            lines[0].contains("1 rounds, 98 GPU-seconds spent of a budget of 100, stopped: budget"),
            "{}",
            lines[0]
        );
        assert!(lines[0].contains("no sequence"), "{}", lines[0]);
    }

    #[test]
    fn a_file_that_is_not_an_adaptive_design_says_so() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(ADAPTIVE_FILE), r#"{"rounds": [{}]}"#).unwrap();
        let lines = design_lines(&[dir.path().to_path_buf()]);
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(lines[0].contains("cannot be read"), "{}", lines[0]);
    }
}
