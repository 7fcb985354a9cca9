#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The real `sy-margin` binary on files whose margins are computed by hand.

use std::path::Path;
use std::process::Command;

use sy_margin::testkit::{constant_estimators, pair, write_fit, write_splits};
use sy_records::write_jsonl;

fn sy_margin(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_sy-margin"))
        .args(args)
        .output()
        .unwrap()
}

/// Predicted advantage is 150 − 100 = 50 ms for every pair. Measured advantages:
/// a: 40, 70 (errors 10, 20 → score 20); b: 50 (score 0); c: −30 (score 80);
/// d is in the fit split (ignored); e has N outside the Q grid (excluded).
fn run_dir(dir: &Path) {
    let mut records = Vec::new();
    records.extend(pair("a", 0, 140.0, 100.0));
    records.extend(pair("a", 1, 170.0, 100.0));
    records.extend(pair("b", 0, 150.0, 100.0));
    records.extend(pair("c", 0, 70.0, 100.0));
    records.extend(pair("d", 0, 1000.0, 100.0));
    let mut e = pair("e", 0, 150.0, 100.0);
    for r in &mut e {
        r.observed.n = Some(5_000_000);
        r.prompt_tokens = Some(5_000_000);
        r.planned_n = 5_000_000;
    }
    records.extend(e);
    write_jsonl(&records, &dir.join("records.jsonl")).unwrap();
    write_splits(
        &dir.join("splits.json"),
        "run",
        7,
        &[
            ("a", "uncertainty"),
            ("b", "uncertainty"),
            ("c", "uncertainty"),
            ("d", "fit"),
            ("e", "uncertainty"),
        ],
    )
    .unwrap();
    write_fit(
        &dir.join("fit.json"),
        &constant_estimators(150.0).unwrap(),
        &constant_estimators(100.0).unwrap(),
        &[&dir.join("records.jsonl")],
        &dir.join("splits.json"),
    )
    .unwrap();
}

#[test]
fn margins_match_hand_computed_values() {
    let dir = tempfile::tempdir().unwrap();
    run_dir(dir.path());
    let out = sy_margin(&[
        "--run-dir",
        dir.path().to_str().unwrap(),
        "--json",
        "--no-progress",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // Scores 0, 20, 80 → position 1.8 → 20 + 0.8 · 60 = 68.
    assert!((summary["delta_blind_ms"].as_f64().unwrap() - 68.0).abs() < 1e-9);
    assert!((summary["delta_cache_ms"].as_f64().unwrap() - 68.0).abs() < 1e-9);

    let file: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("margins.json")).unwrap()).unwrap();
    let blind = &file["blind"];
    assert_eq!(blind["conditions"], 3);
    // ⌈0.9 · 4⌉ = 4 > G = 3: the conformal bound is infinite (null).
    assert_eq!(blind["conformal_rank"], 4);
    assert!(blind["conformal_ms"].is_null());
    // Per-probe errors 0, 10, 20, 80 → position 2.7 → 20 + 0.7 · 60 = 62.
    assert!((blind["per_probe_delta_ms"].as_f64().unwrap() - 62.0).abs() < 1e-9);
    assert_eq!(blind["pairs_used"], 4);
    assert_eq!(blind["pairs_excluded"], 1);
    assert_eq!(blind["excluded_by_reason"]["out_of_range"], 1);
    assert_eq!(blind["repeats"]["max"], 2);
    assert_eq!(file["pairs_in_split"], 5);
    assert_eq!(file["split_seed"], 7);
    assert_eq!(file["input_files"].as_array().unwrap().len(), 3);
    let warnings = file["warnings"].as_array().unwrap();
    assert!(
        warnings
            .iter()
            .any(|w| w.as_str().unwrap().contains("G = 3")),
        "{warnings:?}"
    );
}

#[test]
fn explicit_out_and_level_override() {
    let dir = tempfile::tempdir().unwrap();
    run_dir(dir.path());
    let out_path = dir.path().join("elsewhere").join("m.json");
    let d = dir.path().to_str().unwrap();
    let out = sy_margin(&[
        "--records",
        &format!("{d}/records.jsonl"),
        "--fit",
        &format!("{d}/fit.json"),
        "--splits",
        &format!("{d}/splits.json"),
        "--out",
        out_path.to_str().unwrap(),
        "--level",
        "0.5",
        "-q",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let file: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&out_path).unwrap()).unwrap();
    // Median of 0, 20, 80 = 20.
    assert!((file["delta_blind_ms"].as_f64().unwrap() - 20.0).abs() < 1e-9);
    assert!(!dir.path().join("margins.json").exists());
}

#[test]
fn bad_inputs_exit_2_and_name_the_file() {
    let dir = tempfile::tempdir().unwrap();
    run_dir(dir.path());
    let d = dir.path().to_str().unwrap();
    std::fs::remove_file(dir.path().join("fit.json")).unwrap();
    let out = sy_margin(&["--run-dir", d]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("fit.json"), "{err}");
    assert!(!dir.path().join("margins.json").exists());

    // A fit file without estimators.
    std::fs::write(dir.path().join("fit.json"), "{\"schema_version\": 2}").unwrap();
    let out = sy_margin(&["--run-dir", d]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no estimators for the efficient model"));
    // Estimators where sy-fit writes them, but not estimators: the member and serde's reason.
    std::fs::write(
        dir.path().join("fit.json"),
        r#"{"schema_version": 2, "models": {"efficient": {"estimators": {"q": 1}}}}"#,
    )
    .unwrap();
    let out = sy_margin(&["--run-dir", d]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("models.efficient.estimators (invalid type"),
        "{err}"
    );

    // No run dir and no flags.
    let out = sy_margin(&[]);
    assert_eq!(out.status.code(), Some(2));

    // Bad level.
    run_dir(dir.path());
    let out = sy_margin(&["--run-dir", d, "--level", "1.5"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--level"));
}
