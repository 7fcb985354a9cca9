#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Today's calibration chain reproduces the outputs written before the columnar probe table
//! (`data/golden/`, see its README) to 1e-12 relative, on the committed dataset and on a
//! generated 100k-record set.

use std::path::{Path, PathBuf};
use std::process::Command;

mod common;
use common::{bin, repo};

use serde_json::Value;

fn run(tool: &str, args: &[&str]) {
    let out = Command::new(bin(tool)).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{tool} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Fields that name files, hashes of files or versions: they differ by where the test runs.
const NOT_COMPARED: &[&str] = &[
    "inputs",
    "input_files",
    "file",
    "tool",
    "tool_versions",
    "bundles",
];

fn compare(path: &str, golden: &Value, now: &Value, diffs: &mut Vec<String>) {
    match (golden, now) {
        (Value::Object(a), Value::Object(b)) => {
            let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for k in keys {
                if NOT_COMPARED.contains(&k.as_str()) {
                    continue;
                }
                match (a.get(k), b.get(k)) {
                    (Some(x), Some(y)) => compare(&format!("{path}/{k}"), x, y, diffs),
                    _ => diffs.push(format!("{path}/{k}: present on one side only")),
                }
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            if a.len() != b.len() {
                diffs.push(format!("{path}: {} vs {} items", a.len(), b.len()));
                return;
            }
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                compare(&format!("{path}[{i}]"), x, y, diffs);
            }
        }
        (Value::Number(a), Value::Number(b)) => {
            let (x, y) = (a.as_f64().unwrap(), b.as_f64().unwrap());
            let scale = x.abs().max(y.abs());
            if (x - y).abs() > 1e-12 * scale {
                diffs.push(format!("{path}: {x} vs {y}"));
            }
        }
        (a, b) if a != b => diffs.push(format!("{path}: {a} vs {b}")),
        _ => {}
    }
}

fn chain_matches_golden(records: &Path, golden: &str) {
    let dir = tempfile::tempdir().unwrap();
    let run_dir = dir.path().to_str().unwrap();
    let records = records.to_str().unwrap();
    let common = [
        "--run-dir",
        run_dir,
        "--records",
        records,
        "--no-progress",
        "-q",
    ];
    run("sy-fit", &[&common[..], &["--seed", "7"]].concat());
    // sy-margin and sy-select read the records from the probe-table cache sy-fit left.
    assert!(dir.path().join("probe-table.cache").is_file());
    run("sy-margin", &common);
    let select = [
        "--no-report",
        "--stability-seeds",
        "3",
        "--bootstrap-resamples",
        "200",
    ];
    run("sy-select", &[&common[..], &select[..]].concat());
    let golden_dir = repo().join("data/golden").join(golden);
    let mut diffs = Vec::new();
    for file in ["fit.json", "margins.json", "selection.json", "splits.json"] {
        let read = |p: PathBuf| -> Value {
            serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap()
        };
        let (g, n) = (read(golden_dir.join(file)), read(dir.path().join(file)));
        compare(file, &g, &n, &mut diffs);
    }
    assert!(
        diffs.is_empty(),
        "{golden}: {} difference(s):\n{}",
        diffs.len(),
        diffs
            .iter()
            .take(30)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn committed_dataset_reproduces_the_golden_outputs() {
    chain_matches_golden(&repo().join("data/demo/records.parquet"), "demo");
}

#[test]
fn generated_100k_records_reproduce_the_golden_outputs() {
    let dir = tempfile::tempdir().unwrap();
    let records = dir.path().join("records.parquet");
    let out = records.to_str().unwrap();
    run(
        "sy-fit",
        &[
            "gen-synthetic",
            "--out",
            out,
            "--conditions",
            "1000",
            "--repeats",
            "50",
            "--contention",
            "both",
            "-q",
        ],
    );
    chain_matches_golden(&records, "synth-100k");
}
