//! A multi-node study: eight run directories (one per node, each its own run id) calibrated
//! together with `--records` repeated give the same splits, fit, margins and selection as one
//! directory holding all of their records in one file.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::Command;

mod common;
use common::bin;

const NODES: usize = 8;

fn run(tool: &str, args: &[&str], inputs: &[PathBuf], cwd: &Path) {
    let mut cmd = Command::new(bin(tool));
    cmd.args(args)
        .args(["--no-progress", "-q"])
        .current_dir(cwd);
    for p in inputs {
        cmd.arg("--records").arg(p);
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{tool} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Eight nodes' runs, each in its own directory (`node-i/records.parquet`).
fn node_runs(work: &Path) -> Vec<PathBuf> {
    (0..NODES)
        .map(|i| {
            let dir = work.join(format!("node-{i}"));
            std::fs::create_dir_all(&dir).unwrap();
            let seed = (i + 1).to_string();
            let run_id = format!("node-{i}");
            let args = [
                "gen-synthetic",
                "--out",
                "records.parquet",
                "--conditions",
                "24",
                "--repeats",
                "4",
                "--seed",
                &seed,
                "--run-id",
                &run_id,
            ];
            run("sy-fit", &args, &[], &dir);
            dir
        })
        .collect()
}

/// sy-fit → sy-margin → sy-select in `work/run` over `inputs`; the outputs without the fields
/// that name the input files or the time.
fn calibrate(work: &Path, inputs: &[PathBuf]) -> serde_json::Value {
    std::fs::create_dir_all(work).unwrap();
    for tool in ["sy-fit", "sy-margin", "sy-select"] {
        run(tool, &["--run-dir", "run", "--seed", "7"], inputs, work);
    }
    let read = |f: &str| -> serde_json::Value {
        let mut v: serde_json::Value =
            serde_json::from_slice(&std::fs::read(work.join("run").join(f)).unwrap()).unwrap();
        strip(&mut v);
        v
    };
    serde_json::json!({
        "splits": read("splits.json"),
        "fit": read("fit.json"),
        "margins": read("margins.json"),
        "selection": read("selection.json"),
    })
}

/// Removes provenance that differs by construction: input file lists, hashes of outputs that
/// embed them, and creation times.
fn strip(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(m) => {
            for k in ["input_files", "inputs", "bundles", "created_at"] {
                m.remove(k);
            }
            m.values_mut().for_each(strip);
        }
        serde_json::Value::Array(a) => a.iter_mut().for_each(strip),
        _ => {}
    }
}

/// The path of the first value that differs, if any.
fn first_difference(a: &serde_json::Value, b: &serde_json::Value, at: &str) -> Option<String> {
    use serde_json::Value::{Array, Object};
    match (a, b) {
        (Object(x), Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            keys.into_iter().find_map(|k| match (x.get(k), y.get(k)) {
                (Some(u), Some(v)) => first_difference(u, v, &format!("{at}.{k}")),
                _ => Some(format!("{at}.{k} (present on one side only)")),
            })
        }
        (Array(x), Array(y)) if x.len() == y.len() => x
            .iter()
            .zip(y)
            .enumerate()
            .find_map(|(i, (u, v))| first_difference(u, v, &format!("{at}[{i}]"))),
        _ => (a != b).then(|| format!("{at}: {a} vs {b}")),
    }
}

#[test]
fn eight_run_directories_calibrate_like_one() {
    let work = tempfile::tempdir().unwrap();
    let nodes = node_runs(work.path());
    // One directory holding every node's records, in node order, in one file.
    let all = sy_records::load_records(&nodes, &sy_records::LoadOptions::default()).unwrap();
    let merged_dir = work.path().join("merged");
    std::fs::create_dir_all(&merged_dir).unwrap();
    let merged = merged_dir.join("records.parquet");
    sy_records::write_records(&all.records, &merged).unwrap();

    let separate = calibrate(&work.path().join("separate"), &nodes);
    let together = calibrate(&work.path().join("together"), &[merged]);
    for part in ["splits", "fit", "margins", "selection"] {
        if let Some(at) = first_difference(&separate[part], &together[part], part) {
            panic!("eight run directories and one merged file disagree at {at}");
        }
    }
    // The study really spans the eight runs.
    let runs = separate["splits"]["conditions"].as_object().unwrap();
    assert_eq!(runs.len(), NODES, "splits cover every node's run");
}
