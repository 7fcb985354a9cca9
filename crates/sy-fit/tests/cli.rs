#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The real `sy-fit` binary on real files.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use sy_records::synth::{SynthSpec, generate};
use sy_records::{Record, Split, SplitTable, write_csv, write_parquet};

fn sy_fit(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sy-fit"))
        .args(args)
        .output()
        .expect("run sy-fit")
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn records() -> Vec<Record> {
    generate(&SynthSpec {
        conditions: 60,
        repeats: 3,
        q_repeats: 3,
        ..SynthSpec::default()
    })
}

fn schema(name: &str) -> serde_json::Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../schemas")
        .join(name);
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn assert_valid(schema_name: &str, path: &Path) {
    let instance: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let validator = jsonschema::validator_for(&schema(schema_name)).unwrap();
    let errors: Vec<String> = validator
        .iter_errors(&instance)
        .map(|e| format!("{e} at {}", e.instance_path))
        .collect();
    assert!(errors.is_empty(), "{schema_name}: {errors:#?}");
}

#[test]
fn fits_a_run_directory_and_writes_valid_fit_and_splits() {
    let dir = tempfile::tempdir().unwrap();
    write_parquet(&records(), &dir.path().join("records.parquet")).unwrap();
    let out = sy_fit(&[
        "--run-dir",
        s(dir.path()),
        "--seed",
        "3",
        "--json",
        "--no-progress",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["splits_reused"], false);
    assert_eq!(summary["folds"], 5);

    let fit_path = dir.path().join("fit.json");
    let splits_path = dir.path().join("splits.json");
    assert_valid("fit.schema.json", &fit_path);
    assert_valid("splits.schema.json", &splits_path);
    let fit = sy_rundir::artifact::fit::FitFile::read(&fit_path).unwrap();
    let splits = SplitTable::read(&splits_path).unwrap();
    assert_eq!(splits.seed, 3);
    assert_eq!(fit.split.conditions, splits.counts);
    assert_eq!(fit.records.qgrid, 2 * 4 * 5 * 3);
    assert_eq!(
        fit.records.load_fit + fit.records.load_uncertainty + fit.records.load_selection,
        2 * 60 * 3
    );
    // The estimators are usable by the runtime crate as they are.
    let est = fit.estimators(sy_selector::Model::Efficient);
    let r = &records()[200];
    assert!(sy_selector::predict(est, sy_selector::Estimator::Cache, &r.observation()).is_ok());

    // A second run reuses splits.json and gives the same fit, byte for byte.
    let first = std::fs::read(&fit_path).unwrap();
    let out = sy_fit(&["--run-dir", s(dir.path()), "--json"]);
    assert!(out.status.success());
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["splits_reused"], true);
    assert_eq!(std::fs::read(&fit_path).unwrap(), first);

    // A conflicting seed is bad input (exit 2) and leaves fit.json alone.
    let out = sy_fit(&["--run-dir", s(dir.path()), "--seed", "4"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("seed 3"));
    assert_eq!(std::fs::read(&fit_path).unwrap(), first);
}

#[test]
fn changing_only_uncertainty_rows_leaves_fit_json_unchanged() {
    let base = records();
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    write_parquet(&base, &a.path().join("records.parquet")).unwrap();
    let out = sy_fit(&["--run-dir", s(a.path()), "--seed", "8", "-q"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let splits = SplitTable::read(&a.path().join("splits.json")).unwrap();
    let mut changed = base.clone();
    let mut n = 0;
    for r in &mut changed {
        if splits.split_of_record(r) == Some(Split::Uncertainty) {
            r.ttft_ms = r.ttft_ms.map(|t| t * 2.0 + 77.0);
            r.observed.r = r.observed.r.map(|v| v * 3 + 1);
            n += 1;
        }
    }
    assert!(n > 0);
    write_parquet(&changed, &b.path().join("records.parquet")).unwrap();
    let out = sy_fit(&["--run-dir", s(b.path()), "--seed", "8", "-q"]);
    assert!(out.status.success());
    let strip = |dir: &Path| {
        let mut v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("fit.json")).unwrap()).unwrap();
        // Only the paths and the record files' hashes (provenance) differ.
        v.as_object_mut().unwrap().remove("inputs");
        v.as_object_mut().unwrap().remove("input_files");
        v["split"].as_object_mut().unwrap().remove("file");
        v
    };
    assert_eq!(strip(a.path()), strip(b.path()));
}

#[test]
fn bad_records_exit_2_naming_file_row_and_field_or_are_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("records.csv");
    let mut rs = records();
    let bad = rs
        .iter()
        .position(|r| r.phase == sy_records::Phase::Load)
        .unwrap()
        + 4;
    rs[bad].ttft_ms = Some(-12.0);
    write_csv(&rs, &path).unwrap();
    let fit_path = dir.path().join("fit.json");
    let out = sy_fit(&["--records", s(&path), "--out", s(&fit_path)]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("records.csv"), "{err}");
    assert!(err.contains(&format!("row {}", bad + 1)), "{err}");
    assert!(err.contains("ttft_ms"), "{err}");
    assert!(!fit_path.exists());

    let out = sy_fit(&[
        "--records",
        s(&path),
        "--out",
        s(&fit_path),
        "--skip-invalid",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let fit = sy_rundir::artifact::fit::FitFile::read(&fit_path).unwrap();
    assert_eq!(fit.records.skipped_invalid, 2); // the bad row and its partner
    assert!(fit.warnings.iter().any(|w| w.contains("skipped")));
}

#[test]
fn usage_errors_exit_2() {
    let out = sy_fit(&[]);
    assert_eq!(out.status.code(), Some(2));
    let out = sy_fit(&[
        "--run-dir",
        "/nonexistent/dir",
        "--split-fractions",
        "0.5,0.5,0.5",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let dir = tempfile::tempdir().unwrap();
    let out = sy_fit(&["--run-dir", s(dir.path())]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no records"));
}

#[test]
fn gen_synthetic_writes_a_loadable_file() {
    let dir = tempfile::tempdir().unwrap();
    let out = sy_fit(&[
        "gen-synthetic",
        "--out",
        s(dir.path()),
        "--conditions",
        "30",
        "--repeats",
        "2",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let loaded =
        sy_records::load_records(&[dir.path().to_path_buf()], &Default::default()).unwrap();
    assert_eq!(loaded.records.len(), 2 * (30 * 2 + 4 * 5 * 5));
}

/// A collected run (a run directory with a manifest) that fails the data-quality check is
/// refused (exit 2, nothing written) unless `--accept-failed-check`; then fit.json and its
/// warnings say so, and the file still validates against its schema.
#[test]
fn a_run_failing_the_data_check_is_refused_unless_accepted() {
    let dir = tempfile::tempdir().unwrap();
    write_parquet(&records(), &dir.path().join("records.parquet")).unwrap();
    // The collector's end-of-run facts: booked load left on the selection service.
    let manifest = serde_json::json!({
        "schema_version": 1, "units_total": 1, "complete": true,
        "loads_zero_at_end": false, "outstanding_reservations": ["x"]
    });
    std::fs::write(dir.path().join("manifest.json"), manifest.to_string()).unwrap();
    let out = sy_fit(&["--run-dir", s(dir.path()), "--no-progress"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("fails the data-quality check") && err.contains("loads_zero_at_end"),
        "{err}"
    );
    assert!(!dir.path().join("fit.json").exists(), "nothing written");

    let out = sy_fit(&[
        "--run-dir",
        s(dir.path()),
        "--no-progress",
        "--accept-failed-check",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("data-quality check:"));
    let fit_path = dir.path().join("fit.json");
    assert_valid("fit.schema.json", &fit_path);
    let fit = sy_rundir::artifact::fit::FitFile::read(&fit_path).unwrap();
    let dc = fit.data_check.expect("data_check in fit.json");
    assert!(dc.accepted_failing);
    assert_eq!(dc.runs[0].verdict, "fail");
    assert!(dc.runs[0].failed.contains(&"loads_zero_at_end".to_string()));
    assert!(
        fit.warnings
            .iter()
            .any(|w| w.contains("--accept-failed-check"))
    );
}

/// When the observed K/N of the Q grid cannot make an increasing f axis (here every Q-grid
/// record reports K = 0), the axis is the planned fractions, and the run says so on stderr and
/// in fit.json's warnings.
#[test]
fn planned_f_axis_fallback_warns_in_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let mut rs = records();
    for r in rs
        .iter_mut()
        .filter(|r| r.phase == sy_records::Phase::Qgrid)
    {
        r.observed.k = Some(0);
    }
    write_parquet(&rs, &dir.path().join("records.parquet")).unwrap();
    let out = sy_fit(&["--run-dir", s(dir.path()), "--no-progress"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("WARN") && err.contains("f axis is the planned cached fractions"),
        "{err}"
    );
    let fit = sy_rundir::artifact::fit::FitFile::read(&dir.path().join("fit.json")).unwrap();
    let w: Vec<&String> = fit
        .warnings
        .iter()
        .filter(|w| w.contains("planned cached fractions"))
        .collect();
    assert_eq!(w.len(), 2, "one per model: {:#?}", fit.warnings);
    assert!(w[0].contains("does not increase strictly"), "{}", w[0]);

    // The same records with their observed K: no such warning.
    write_parquet(&records(), &dir.path().join("records.parquet")).unwrap();
    let out = sy_fit(&["--run-dir", s(dir.path()), "--no-progress"]);
    assert!(out.status.success());
    let fit = sy_rundir::artifact::fit::FitFile::read(&dir.path().join("fit.json")).unwrap();
    assert!(
        !fit.warnings.iter().any(|w| w.contains("planned cached")),
        "{:#?}",
        fit.warnings
    );
}
