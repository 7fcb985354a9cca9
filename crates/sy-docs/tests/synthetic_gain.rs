//! The whole chain on generated records with a known truth finds a gain exactly when the truth
//! holds one: with targeted contention (`gen-synthetic`'s default) capable is faster on some
//! turns, and the chosen bundle overrides on some of them and lowers the mean selected TTFT with
//! an interval below zero; with both models always loaded (`--contention both`) capable is never
//! faster and no variant changes a decision.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;

mod common;
use common::run_in;

fn run(tool: &str, args: &[&str], cwd: &Path) {
    run_in(cwd, tool, &[args, &["--no-progress", "-q"]].concat());
}

/// `selection.json` of the chain on 400 generated conditions with `contention`.
fn calibrate(contention: &str) -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path();
    let gen_args = [
        "gen-synthetic",
        "--out",
        "records.parquet",
        "--conditions",
        "400",
        "--repeats",
        "10",
        "--contention",
        contention,
    ];
    run("sy-fit", &gen_args, work);
    let common = ["--run-dir", "run", "--records", "records.parquet"];
    run("sy-fit", &[&common[..], &["--seed", "7"]].concat(), work);
    run("sy-margin", &common, work);
    let select = [
        "--no-report",
        "--stability-seeds",
        "2",
        "--bootstrap-resamples",
        "200",
    ];
    run("sy-select", &[&common[..], &select[..]].concat(), work);
    serde_json::from_slice(&std::fs::read(work.join("run/selection.json")).unwrap()).unwrap()
}

/// Decisions each variant changed in the frozen replay of the selection split.
fn changed(selection: &serde_json::Value) -> Vec<(String, u64)> {
    selection["replay"]["variants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            let name = v["variant"].as_str().unwrap().to_string();
            (name, v["all"]["changed"].as_u64().unwrap())
        })
        .collect()
}

#[test]
fn targeted_contention_gives_a_gain_the_chain_finds() {
    let s = calibrate("targeted");
    let chosen = s["bundle_variant"].as_str().unwrap();
    let changed = changed(&s);
    let (_, by_chosen) = changed.iter().find(|(v, _)| v == chosen).unwrap();
    assert!(*by_chosen > 0, "{chosen} changed nothing: {changed:?}");
    let change = &s["headline"]["mean_change_vs_stage_ms"];
    assert!(change["estimate"].as_f64().unwrap() < 0.0, "{change}");
    assert!(change["hi"].as_f64().unwrap() < 0.0, "{change}");
    assert_eq!(s["headline"]["distinguishable_from_stage"], true);
}

#[test]
fn contention_on_both_models_gives_nothing_to_find() {
    let s = calibrate("both");
    let changed = changed(&s);
    assert!(changed.iter().all(|(_, n)| *n == 0), "{changed:?}");
    let change = &s["headline"]["mean_change_vs_stage_ms"]["estimate"];
    assert_eq!(change.as_f64(), Some(0.0));
}
