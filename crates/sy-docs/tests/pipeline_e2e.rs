//! The whole pipeline through real HTTP on 127.0.0.1: the embedded simulator → `sy-collect` →
//! `sy-fit` → `sy-margin` → `sy-select` → a bundle that loads in the runtime crate and replays
//! to the same numbers that `selection.json` and `report.md` show.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;
use common::{repo, run_in};

use serde_json::Value;
use sy_selector::Bundle;

#[test]
fn simulator_to_bundle_end_to_end() {
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    let plan = repo().join("data/plans/demo.toml");
    let plan = plan.to_str().unwrap();
    run_in(
        w,
        "sy-collect",
        &[
            "--plan",
            plan,
            "--run-dir",
            "run",
            "--target",
            "sim",
            "--no-progress",
            "-q",
        ],
    );
    for tool in ["sy-fit", "sy-margin", "sy-select"] {
        run_in(
            w,
            tool,
            &["--run-dir", "run", "--seed", "3", "--no-progress", "-q"],
        );
    }
    let run_dir = w.join("run");
    for f in [
        "records.jsonl",
        "records.parquet",
        "manifest.json",
        "splits.json",
        "fit.json",
        "margins.json",
        "selection.json",
        "bundle.json",
        "report.md",
    ] {
        assert!(run_dir.join(f).exists(), "{f} missing");
    }
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(run_dir.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["complete"], true);

    // The bundle loads in the runtime crate (schema version and content hash checked).
    let bundle = Bundle::from_path(run_dir.join("bundle.json")).unwrap();
    let selection: Value =
        serde_json::from_slice(&std::fs::read(run_dir.join("selection.json")).unwrap()).unwrap();

    // Replaying the frozen bundle over the selection split reproduces selection.json exactly.
    let out = run_in(
        w,
        "sy-select",
        &[
            "replay",
            "--bundle",
            "run/bundle.json",
            "--run-dir",
            "run",
            "--split",
            "selection",
            "--json",
        ],
    );
    let replayed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(replayed["replay"], selection["replay"]);

    // ... and report.md shows those numbers.
    let report = std::fs::read_to_string(run_dir.join("report.md")).unwrap();
    let variants = selection["replay"]["variants"].as_array().unwrap();
    assert_eq!(variants.len(), 5);
    for v in variants {
        let mean = v["all"]["mean_selected_ttft_ms"].as_f64().unwrap();
        assert!(mean > 0.0);
        // report.md prints milliseconds with one decimal (sy_select::report::fmt_ms).
        let shown = format!("{mean:.1}");
        assert!(report.contains(&shown), "report.md lacks {shown}");
    }
    let chosen = format!("Chosen: {}", bundle.variant.as_str());
    assert!(report.contains(&chosen), "report.md lacks {chosen}");
}
