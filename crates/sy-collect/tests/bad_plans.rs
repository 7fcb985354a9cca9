//! Bad plans get a clear error before any request is sent: exit code 2 (1 for an unreachable
//! target), a message naming the field, and no record file.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;
use common::*;

const GOOD: &str = "seed = 1\n[qgrid]\nn = [64]\nf = [0.0]\nrepeats = 1\n";

fn assert_rejected(plan_text: &str, extra: &[&str], code: i32, needles: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let plan = write(dir.path(), "plan.toml", plan_text);
    let run_dir = dir.path().join("run");
    let out = run_sim(&plan, &run_dir, extra);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(code), "{err}");
    for n in needles {
        assert!(err.contains(n), "expected {n:?} in: {err}");
    }
    assert!(
        !run_dir.join("records.jsonl").exists(),
        "no record may be written for a bad plan"
    );
}

#[test]
fn unknown_field_is_named() {
    assert_rejected(
        &format!("{GOOD}colour = \"red\"\n"),
        &[],
        2,
        &["plan.toml", "unknown field `colour`"],
    );
}

#[test]
fn wrong_type_is_named() {
    assert_rejected(
        "seed = 1\n[qgrid]\nn = \"many\"\nf = [0.0]\nrepeats = 1\n",
        &[],
        2,
        &["plan.toml", "invalid type"],
    );
}

#[test]
fn empty_grid_is_rejected() {
    assert_rejected(
        "seed = 1\n[qgrid]\nn = [64]\nf = []\nrepeats = 1\n",
        &[],
        2,
        &["qgrid.f", "empty grid"],
    );
}

#[test]
fn fraction_outside_unit_interval_is_rejected() {
    assert_rejected(
        "seed = 1\n[load]\nn = [64]\nf = [0.5, 1.01]\nrepeats = 1\n",
        &[],
        2,
        &["load.f[1]", "[0, 1]"],
    );
}

#[test]
fn prompt_larger_than_kv_capacity_is_rejected_before_any_request() {
    // The default simulator has 2048 blocks of 16 tokens per worker.
    assert_rejected(
        "seed = 1\n[qgrid]\nn = [64, 40000]\nf = [0.0]\nrepeats = 1\n",
        &[],
        2,
        &["qgrid.n", "40000", "KV capacity", "32768"],
    );
}

#[test]
fn unreachable_target_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let plan = write(dir.path(), "plan.toml", GOOD);
    let run_dir = dir.path().join("run");
    // Port 9 on loopback: nothing listens there.
    let out = bin()
        .arg("--plan")
        .arg(&plan)
        .arg("--run-dir")
        .arg(&run_dir)
        .args([
            "--target",
            "dynamo",
            "--no-progress",
            "--frontend-url",
            "http://127.0.0.1:9",
            "--selection-url",
            "http://127.0.0.1:9",
        ])
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("unreachable") && err.contains("127.0.0.1:9"),
        "{err}"
    );
    assert!(!run_dir.join("records.jsonl").exists());
}

#[test]
fn an_existing_run_needs_resume() {
    let dir = tempfile::tempdir().unwrap();
    let plan = write(dir.path(), "plan.toml", GOOD);
    let run_dir = dir.path().join("run");
    std::fs::create_dir_all(&run_dir).unwrap();
    std::fs::write(run_dir.join("records.jsonl"), "{}\n").unwrap();
    let out = run_sim(&plan, &run_dir, &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--resume"), "{}", stderr(&out));
}

#[test]
fn dry_run_counts_requests_without_a_target() {
    let dir = tempfile::tempdir().unwrap();
    let plan = write(
        dir.path(),
        "plan.toml",
        "seed = 1\n[qgrid]\nn = [64, 128]\nf = [0.0, 0.5]\nrepeats = 3\n",
    );
    let out = bin()
        .arg("--plan")
        .arg(&plan)
        .args(["--dry-run", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["units"], 12);
    // 6 units with f = 0 (2 probes) + 6 with f = 0.5 (2 probes + 2 primes).
    assert_eq!(v["foreground_requests"], 36);
    assert!(v["estimated_seconds"].as_f64().unwrap() > 0.0);
}

#[test]
fn shipped_plans_validate() {
    for name in [
        "example.toml",
        "ci.toml",
        "demo.toml",
        "vllm-cpu.toml",
        "vllm-cpu-rehearsal.toml",
    ] {
        let path = workspace_root().join("data/plans").join(name);
        let out = bin()
            .arg("--plan")
            .arg(&path)
            .arg("--dry-run")
            .output()
            .unwrap();
        assert!(out.status.success(), "{name}: {}", stderr(&out));
    }
}

#[test]
fn shipped_plans_match_the_plan_schema() {
    let text = std::fs::read_to_string(workspace_root().join("schemas/plan.schema.json")).unwrap();
    let schema: serde_json::Value = serde_json::from_str(&text).unwrap();
    let v = jsonschema::validator_for(&schema).unwrap();
    for name in [
        "example.toml",
        "ci.toml",
        "demo.toml",
        "vllm-cpu.toml",
        "vllm-cpu-rehearsal.toml",
    ] {
        let path = workspace_root().join("data/plans").join(name);
        let doc: toml::Value = toml::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let json = serde_json::to_value(doc).unwrap();
        let errors: Vec<String> = v.iter_errors(&json).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{name}: {errors:?}");
    }
    // And the schema rejects what the parser rejects.
    let bad: toml::Value =
        toml::from_str("seed = 1\ncolour = 2\n[qgrid]\nn=[1]\nf=[1.5]\nrepeats=1\n").unwrap();
    assert!(!v.is_valid(&serde_json::to_value(bad).unwrap()));
}
