//! What an adaptive run's prequential sequence estimates, measured on a population: every rule
//! the run's statistic fitted (one per round after the first, on the rounds before it) applied to
//! every load condition of a large run of the same grid, averaged over that run's conditions, and
//! weighted by the conditions each rule judged in the adaptive run. That is the running average
//! of the judged values' conditional means, the quantity the anytime-valid sequence covers; the
//! benchmark (`scripts/adaptive-bench.sh`) compares it with the sequence at the stop.
//!
//! ```text
//! cargo run --release -p sy-calibration --example prequential_estimand -- ADAPTIVE_RUN_DIR LARGE_RUN_DIR
//! ```
//! Prints one JSON line: `estimand` (ms), `lo`, `hi` (the recorded sequence at the last look),
//! `covered`, and each rule's `rounds` (round, judged conditions, mean change on the large run).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use sy_calibration::prequential::{condition_changes, judged_rounds};
use sy_records::{Phase, Record};
use sy_rundir::artifact::adaptive::{ADAPTIVE_FILE, AdaptiveFile};

fn records(dir: &Path) -> Vec<Record> {
    sy_records::jsonl::read::<Record>(&dir.join("records.jsonl"))
        .expect("records.jsonl")
        .records
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (run, large) = (Path::new(&args[1]), Path::new(&args[2]));
    let doc = AdaptiveFile::read_path(&run.join(ADAPTIVE_FILE)).unwrap();
    let looked = &doc.rounds[..doc.looks.len()];
    let judged = judged_rounds(&records(run), looked, doc.spec.repeats, doc.seed).unwrap();
    let population: Vec<Record> = (records(large).into_iter())
        .filter(|r| r.phase == Phase::Load)
        .collect();
    let (mut sum, mut n) = (0.0, 0u64);
    let mut per_round = Vec::new();
    for j in &judged {
        let k = j.values.iter().filter(|(_, v)| v.is_some()).count() as u64;
        let Some(rule) = &j.rule else { continue };
        if k == 0 {
            continue;
        }
        let changes = condition_changes(rule, &population, u32::MAX).unwrap();
        let values: Vec<f64> = changes.values().flatten().map(|c| c.change).collect();
        let mean = values.iter().sum::<f64>() / values.len() as f64;
        sum += mean * k as f64;
        n += k;
        per_round.push(serde_json::json!([j.round, k, mean]));
    }
    let estimand = sum / n as f64;
    let seq = doc.looks.last().and_then(|l| l.sequence);
    let (lo, hi) = (seq.map(|s| s.lo), seq.map(|s| s.hi));
    let covered = lo.zip(hi).map(|(lo, hi)| lo <= estimand && estimand <= hi);
    println!(
        "{}",
        serde_json::json!({"estimand": estimand, "lo": lo, "hi": hi, "covered": covered,
            "rounds": per_round})
    );
}
