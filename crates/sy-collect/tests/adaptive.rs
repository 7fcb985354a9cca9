//! `sy-collect --adaptive` on the embedded simulator: rounds, a stop with its reason, every
//! planned unit recorded exactly once, a complete run after every round, `--resume` of a stopped
//! run is a no-op, SIGKILL mid-round then `--resume` finishes the round, and the dry run's range.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;
use sy_collect::adaptive::{ADAPTIVE_FILE, AdaptiveFile, StopReason};
use sy_records::Phase;

/// 2 × 2 × 2 × 3 = 24 load conditions of 2 repeats (48 fixed-plan load units).
const PLAN: &str = r#"name = "adaptive"
seed = 5
[probe]
max_tokens = 2
settle_ms = 5
[qgrid]
n = [128, 512]
f = [0.0, 0.5]
repeats = 2
[load]
n = [256, 512]
f = [0.0, 0.5]
repeats = 2
prefill_contention = [0, 2]
prefill_prompt_tokens = 1024
decode_contention = [0, 2]
short_output_tokens = 4
long_output_tokens = 32
decode_prompt_tokens = 32
warmup_ms = 20
[adaptive]
first_round_conditions = 8
round_conditions = 4
repeats = 1
refine_units = 2
design_conditions = 8
min_conditions = 4
epsilon_ms = 0.5
"#;

fn sim_args() -> Vec<String> {
    let cfg = workspace_root().join("data/sim/ci-fast.toml");
    vec![
        "--adaptive".into(),
        "--sim-config".into(),
        cfg.to_string_lossy().into_owned(),
    ]
}

fn state(run_dir: &Path) -> AdaptiveFile {
    AdaptiveFile::read(run_dir).unwrap().expect("adaptive.json")
}

/// Every load unit recorded is one the rounds planned, each exactly once per role, and the Q grid
/// is whole.
fn assert_units_match_rounds(run_dir: &Path, f: &AdaptiveFile) {
    let planned: BTreeSet<(String, u32)> = f
        .rounds
        .iter()
        .flat_map(|r| r.units(f.spec.repeats))
        .collect();
    let recs = records(run_dir);
    let mut seen = BTreeSet::new();
    for r in &recs {
        assert!(
            seen.insert((r.condition_id.clone(), r.repeat, r.role)),
            "duplicate {} r{} {:?}",
            r.condition_id,
            r.repeat,
            r.role
        );
    }
    let load: BTreeSet<(String, u32)> = recs
        .iter()
        .filter(|r| r.phase == Phase::Load)
        .map(|r| (r.condition_id.clone(), r.repeat))
        .collect();
    assert_eq!(load, planned, "recorded load units = planned units");
    let qgrid = recs.iter().filter(|r| r.phase == Phase::Qgrid).count();
    assert_eq!(qgrid, 2 * 2 * 2 * 2, "the whole Q grid, both roles");
}

#[test]
fn adaptive_rounds_stop_with_a_reason_and_record_every_planned_unit_once() {
    let dir = tempfile::tempdir().unwrap();
    let plan = write(dir.path(), "plan.toml", PLAN);
    let run_dir = dir.path().join("run");
    let args = sim_args();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = run_sim(&plan, &run_dir, &args);
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("Design: adaptive ("), "{err}");
    assert!(err.contains("Stopped: "), "{err}");

    let f = state(&run_dir);
    let stopped = f.stopped.expect("a stop reason");
    assert!(f.rounds.len() >= 2, "at least one judged round");
    assert_eq!(f.rounds[0].new_conditions.len(), 8);
    assert!(f.rounds[1..].iter().all(|r| r.new_conditions.len() <= 4));
    // Every round that ran has its look; a budget stop may leave no round to run.
    assert_eq!(f.looks.len(), f.rounds.len());
    assert_eq!(f.looks[0].judged_conditions, 0, "round 0 only fits");
    let last = f.looks.last().unwrap();
    match stopped {
        StopReason::Budget => {
            assert!(f.planned_units() <= f.budget_units);
            assert_eq!(f.budget_units, 48);
        }
        other => {
            assert_eq!(
                last.verdict.as_str(),
                match other {
                    StopReason::Gain => "gain",
                    StopReason::Loss => "loss",
                    _ => "no_useful_gain",
                }
            );
            assert!(
                last.judged_conditions >= 4,
                "no verdict before min_conditions"
            );
        }
    }
    // Conditions are drawn without repetition, refinement only revisits drawn ones.
    let drawn: Vec<&String> = f.rounds.iter().flat_map(|r| &r.new_conditions).collect();
    let unique: BTreeSet<&&String> = drawn.iter().collect();
    assert_eq!(unique.len(), drawn.len());
    for (i, r) in f.rounds.iter().enumerate() {
        for (c, rep) in &r.refine {
            assert!(*rep >= 1, "refinement repeats follow the first pass");
            assert!(
                f.rounds[..i].iter().any(|e| e.new_conditions.contains(c)),
                "{c} refined before it was drawn"
            );
        }
    }
    assert_units_match_rounds(&run_dir, &f);
    let text =
        std::fs::read_to_string(workspace_root().join("schemas/adaptive.schema.json")).unwrap();
    let schema: serde_json::Value = serde_json::from_str(&text).unwrap();
    let v = jsonschema::validator_for(&schema).unwrap();
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run_dir.join(ADAPTIVE_FILE)).unwrap())
            .unwrap();
    let errors: Vec<String> = v.iter_errors(&doc).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "adaptive.json: {errors:?}");
    let m = manifest(&run_dir);
    assert_eq!(m["complete"], true, "{m}");
    assert_eq!(
        m["sessions"].as_array().unwrap().len(),
        f.rounds.len(),
        "one session per round"
    );

    // Resuming a stopped collection runs nothing.
    let before = std::fs::read(run_dir.join("records.jsonl")).unwrap();
    let mut resume_args = args.clone();
    resume_args.push("--resume");
    let again = run_sim(&plan, &run_dir, &resume_args);
    assert!(again.status.success(), "{}", stderr(&again));
    assert_eq!(
        std::fs::read(run_dir.join("records.jsonl")).unwrap(),
        before
    );
    assert_eq!(state(&run_dir), f);
}

#[test]
fn sigkill_mid_round_then_resume_finishes_the_collection() {
    let dir = tempfile::tempdir().unwrap();
    let plan = write(dir.path(), "plan.toml", PLAN);
    let run_dir = dir.path().join("run");
    let records_path = run_dir.join("records.jsonl");
    let mut child = bin()
        .arg("--plan")
        .arg(&plan)
        .arg("--run-dir")
        .arg(&run_dir)
        .args(["--target", "sim", "--no-progress"])
        .args(sim_args())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Past the Q grid (16 records) into round 0's load units.
    let t = Instant::now();
    while std::fs::read_to_string(&records_path).map_or(0, |s| s.lines().count()) < 20 {
        assert!(t.elapsed() < Duration::from_secs(120), "no progress");
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(
        run_dir.join(ADAPTIVE_FILE).exists(),
        "round 0 planned before it ran"
    );

    let args = sim_args();
    let mut args: Vec<&str> = args.iter().map(String::as_str).collect();
    args.push("--resume");
    let out = run_sim(&plan, &run_dir, &args);
    assert!(out.status.success(), "{}", stderr(&out));
    let f = state(&run_dir);
    assert!(f.stopped.is_some());
    assert_units_match_rounds(&run_dir, &f);
}

#[test]
fn dry_run_prints_the_adaptive_range_and_bad_sections_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let plan = write(dir.path(), "plan.toml", PLAN);
    let out = bin()
        .arg("--plan")
        .arg(&plan)
        .arg("--dry-run")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    // 8 fitting + 1 round of 4 judged (min 4) = 12 conditions × 1 repeat; budget 48.
    assert!(
        text.contains("adaptive (--adaptive): 12 to 48 load units"),
        "{text}"
    );

    let bad = write(
        dir.path(),
        "bad.toml",
        &PLAN.replace("repeats = 1\nrefine", "repeats = 3\nrefine"),
    );
    let out = bin()
        .arg("--plan")
        .arg(&bad)
        .arg("--dry-run")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("adaptive.repeats"),
        "{}",
        stderr(&out)
    );

    let fixed = write(
        dir.path(),
        "fixed.toml",
        PLAN.split("[adaptive]").next().unwrap(),
    );
    let out = run_sim(&fixed, &dir.path().join("r"), &["--adaptive"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("no [adaptive] section"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn sigint_between_rounds_leaves_a_valid_run_and_resume_completes_it() {
    let dir = tempfile::tempdir().unwrap();
    // No verdict before 24 judged conditions: the rounds after round 0 cannot end the
    // collection before the signal lands.
    let plan = write(
        dir.path(),
        "plan.toml",
        &PLAN.replace("min_conditions = 4", "min_conditions = 24"),
    );
    let run_dir = dir.path().join("run");
    let child = bin()
        .arg("--plan")
        .arg(&plan)
        .arg("--run-dir")
        .arg(&run_dir)
        .args(["--target", "sim", "--no-progress"])
        .args(sim_args())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Round 0 looked at (it never stops: it only fits), round 1 not yet done.
    let t = Instant::now();
    while AdaptiveFile::read(&run_dir)
        .ok()
        .flatten()
        .is_none_or(|f| f.looks.is_empty())
    {
        assert!(
            t.elapsed() < Duration::from_secs(120),
            "round 0 never ended"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    let status = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("--adaptive --resume"), "{err}");
    // A valid run: the state reads, every recorded load unit was planned, the records are
    // whole lines, and every reservation was released.
    let f = state(&run_dir);
    assert!(f.stopped.is_none(), "interrupted before a verdict");
    assert!(!f.looks.is_empty());
    let planned: BTreeSet<(String, u32)> = f
        .rounds
        .iter()
        .flat_map(|r| r.units(f.spec.repeats))
        .collect();
    for r in records(&run_dir).iter().filter(|r| r.phase == Phase::Load) {
        assert!(planned.contains(&(r.condition_id.clone(), r.repeat)));
    }
    let text = std::fs::read_to_string(run_dir.join("records.jsonl")).unwrap();
    assert!(text.ends_with('\n'));
    let m = manifest(&run_dir);
    assert_eq!(m["loads_zero_at_end"], true, "{m}");
    assert!(f.spent.is_some_and(|s| s.gpu_seconds > 0.0 && s.gpus == 4));

    let args = sim_args();
    let mut args: Vec<&str> = args.iter().map(String::as_str).collect();
    args.push("--resume");
    let out = run_sim(&plan, &run_dir, &args);
    assert!(out.status.success(), "{}", stderr(&out));
    let f = state(&run_dir);
    assert!(f.stopped.is_some());
    assert_units_match_rounds(&run_dir, &f);
    assert_eq!(manifest(&run_dir)["complete"], true);
}

#[test]
fn a_gpu_time_budget_stops_the_collection_with_budget_spent() {
    let dir = tempfile::tempdir().unwrap();
    // No verdict before 24 judged conditions (the grid has 24, 8 of them only fit): only a
    // budget can stop it, and the GPU-time budget is the one that does.
    let budget = 0.05;
    let text = PLAN
        .replace("min_conditions = 4", "min_conditions = 24")
        .replace(
            "epsilon_ms = 0.5",
            &format!("budget_gpu_seconds = {budget}"),
        );
    let plan = write(dir.path(), "plan.toml", &text);
    let run_dir = dir.path().join("run");
    let args = sim_args();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = run_sim(&plan, &run_dir, &args);
    assert!(out.status.success(), "{}", stderr(&out));
    let f = state(&run_dir);
    assert_eq!(f.stopped, Some(StopReason::Budget), "{f:?}");
    let spent = f.spent.unwrap();
    // The simulator serves each model with 2 workers of 1 rank.
    assert_eq!(spent.gpus, 4);
    assert!((spent.gpu_seconds - spent.seconds * 4.0).abs() < 1e-9);
    let m = manifest(&run_dir);
    let wall: f64 = m["phases"]
        .as_object()
        .unwrap()
        .values()
        .map(|p| p["seconds"].as_f64().unwrap())
        .sum();
    assert!(
        (spent.seconds - wall).abs() < 1e-9,
        "the manifest's wall time"
    );
    // Round 0 always runs; a later round only when the budget left paid for it at the cost
    // measured before it, so no later round overshoots by more than the cost's error.
    let per_unit = spent.gpu_seconds_per_load_unit().unwrap();
    if f.rounds.len() > 1 {
        assert!(
            spent.gpu_seconds <= budget + 2.0 * per_unit * 4.0,
            "{spent:?}"
        );
    }
    assert!(
        f.drawn() < 24 && f.planned_units() < f.budget_units,
        "the GPU budget, not the grid or the units, stopped it"
    );
    assert_units_match_rounds(&run_dir, &f);
    let err = stderr(&out);
    assert!(err.contains("of a budget of 0.05"), "{err}");
    assert!(err.contains("budget is spent"), "{err}");
}

#[test]
fn dry_run_json_has_the_adaptive_range() {
    let dir = tempfile::tempdir().unwrap();
    let plan = write(
        dir.path(),
        "plan.toml",
        &PLAN.replace("epsilon_ms = 0.5", "budget_gpu_seconds = 100.0"),
    );
    let out = bin()
        .arg("--plan")
        .arg(&plan)
        .args(["--dry-run", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["load_units"], 48, "the dry run's own fields stay: {v}");
    let a = &v["adaptive"];
    assert_eq!(a["best_case_load_units"], 12, "{a}");
    assert_eq!(a["budget_load_units"], 48, "{a}");
    assert_eq!(a["gpu_budget"], 100.0);
    let (lo, hi) = (
        a["best_case_seconds"].as_f64().unwrap(),
        a["budget_seconds"].as_f64().unwrap(),
    );
    assert!(0.0 < lo && lo < hi, "{a}");
    assert!((hi - v["estimated_seconds"].as_f64().unwrap()).abs() < 1e-6);
    // GPU-seconds need the target's GPUs: a pilot's (--target), not built-in speeds.
    assert!(a["best_case_gpu_seconds"].is_null());

    // A fixed plan's dry run has no `adaptive` field.
    let fixed = write(
        dir.path(),
        "fixed.toml",
        PLAN.split("[adaptive]").next().unwrap(),
    );
    let out = bin()
        .arg("--plan")
        .arg(&fixed)
        .args(["--dry-run", "--json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v.get("adaptive").is_none(), "{v}");
}
