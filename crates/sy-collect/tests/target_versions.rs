//! The manifest records the target's versions: the embedded simulator's own version for
//! `--target sim`; for `--target dynamo` whatever the deployment reports, and "unknown" with the
//! reason for what it does not (the simulator serves no `/openapi.json`, so against it every
//! Dynamo component is explicitly unknown). The positive Dynamo case (the frontend's
//! `/openapi.json` says 1.6.1) is a unit test in `sy-drive`'s `src/target/versions.rs` and
//! `real_dynamo_target_versions` in `real_dynamo.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;
use std::time::Duration;

use common::*;

const PLAN: &str = "seed = 1\n[probe]\nmax_tokens = 2\n[qgrid]\nn = [64]\nf = [0.0]\nrepeats = 1\n";

#[test]
fn sim_target_records_the_simulator_version() {
    let dir = tempfile::tempdir().unwrap();
    let plan = write(dir.path(), "plan.toml", PLAN);
    let run_dir = dir.path().join("run");
    let out = run_sim(&plan, &run_dir, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let m = manifest(&run_dir);
    let t = &m["target"];
    assert_eq!(t["kind"], "sim");
    assert_eq!(
        t["versions"],
        serde_json::json!({"sy-sim": env!("CARGO_PKG_VERSION")}),
        "{m}"
    );
    assert!(
        t["version_sources"]["sy-sim"]
            .as_str()
            .unwrap()
            .contains("embedded simulator"),
        "{m}"
    );
    assert_eq!(m["sessions"][0]["target_versions"], t["versions"]);
}

#[test]
fn dynamo_target_records_unknown_explicitly_when_nothing_is_reported() {
    let rt = runtime();
    rt.block_on(async {
        let sim = sy_drive::sim::spawn(sy_drive::sim::SimConfig::default())
            .await
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let plan_path = write(dir.path(), "plan.toml", PLAN);
        let run_dir = dir.path().join("run");
        let opts = dynamo_options(&sim, &run_dir);
        let plan = sy_collect::Plan::from_path(&plan_path).unwrap();
        let summary = tokio::time::timeout(Duration::from_secs(60), sy_collect::run(plan, opts))
            .await
            .expect("no hang")
            .unwrap();
        sim.shutdown().await;
        let t = &summary.manifest.target;
        assert_eq!(t.kind, "dynamo");
        let keys: Vec<&str> = t.versions.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "dynamo-frontend",
                "dynamo-selection-service",
                "dynamo-workers"
            ]
        );
        for (k, v) in &t.versions {
            assert_eq!(v, sy_drive::target::UNKNOWN_VERSION, "{k}");
            assert!(t.version_sources[k].starts_with("not reported"), "{t:?}");
        }
        assert!(
            t.version_sources["dynamo-frontend"].contains("/openapi.json: HTTP 404"),
            "{t:?}"
        );
        // The file on disk says the same.
        let m = manifest(&run_dir);
        assert_eq!(m["target"]["versions"]["dynamo-frontend"], "unknown");
    });
}
