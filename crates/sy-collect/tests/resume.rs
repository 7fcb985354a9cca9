//! Interrupted runs: SIGKILL mid-run then `--resume` gives every unit exactly once; Ctrl-C
//! cancels in-flight requests, deletes their reservations and leaves a consistent file.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;
use std::collections::HashSet;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;
use sy_records::{Role, Status};

const PLAN: &str = "name = \"resume\"\nseed = 9\n[probe]\nmax_tokens = 2\nsettle_ms = 5\n[qgrid]\nn = [64, 512, 1024]\nf = [0.0, 0.5, 0.75]\nrepeats = 6\n";
const UNITS: usize = 3 * 3 * 6;

fn lines(path: &Path) -> usize {
    std::fs::read_to_string(path)
        .map(|t| t.lines().count())
        .unwrap_or(0)
}

fn start(plan: &Path, run_dir: &Path, resume: bool) -> std::process::Child {
    let mut cmd = bin();
    cmd.arg("--plan")
        .arg(plan)
        .arg("--run-dir")
        .arg(run_dir)
        .args(["--target", "sim", "--no-progress"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if resume {
        cmd.arg("--resume");
    }
    cmd.spawn().unwrap()
}

fn wait_for_lines(path: &Path, n: usize) {
    let t = Instant::now();
    while lines(path) < n {
        assert!(
            t.elapsed() < Duration::from_secs(60),
            "run made no progress"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn assert_every_unit_once(run_dir: &Path) {
    let recs = records(run_dir);
    let mut seen = HashSet::new();
    for r in &recs {
        assert!(
            seen.insert((r.condition_id.clone(), r.repeat, r.role)),
            "duplicate unit {} r{} {:?}",
            r.condition_id,
            r.repeat,
            r.role
        );
        assert_eq!(r.status, Status::Ok, "{r:?}");
    }
    assert_eq!(seen.len(), UNITS * 2, "missing units");
    for role in [Role::Efficient, Role::Capable] {
        assert_eq!(seen.iter().filter(|u| u.2 == role).count(), UNITS);
    }
}

#[test]
fn sigkill_mid_run_then_resume_gives_every_unit_once() {
    let dir = tempfile::tempdir().unwrap();
    let plan = write(dir.path(), "plan.toml", PLAN);
    let run_dir = dir.path().join("run");
    let records_path = run_dir.join("records.jsonl");
    let mut child = start(&plan, &run_dir, false);
    wait_for_lines(&records_path, 12);
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let partial = lines(&records_path);
    assert!(partial < UNITS * 2, "killed too late: the run had finished");
    // Simulate the worst case too: a torn last line.
    let mut bytes = std::fs::read(&records_path).unwrap();
    bytes.extend_from_slice(b"{\"schema_version\":1,\"run_id\":");
    std::fs::write(&records_path, bytes).unwrap();

    let out = start(&plan, &run_dir, true).wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_every_unit_once(&run_dir);
    let m = manifest(&run_dir);
    assert_eq!(m["complete"], true);
    let sessions = m["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), 2);
    assert_eq!(sessions[1]["resumed"], true);
    assert_eq!(sessions[1]["torn_tail_ignored"], true);
    assert_eq!(m["loads_zero_at_end"], true);
    assert_records_match_schema(&run_dir);
}

#[test]
fn ctrl_c_cancels_cleanly_and_resume_completes() {
    let dir = tempfile::tempdir().unwrap();
    let plan = write(dir.path(), "plan.toml", PLAN);
    let run_dir = dir.path().join("run");
    let records_path = run_dir.join("records.jsonl");
    let child = start(&plan, &run_dir, false);
    wait_for_lines(&records_path, 8);
    let status = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("interrupted") && err.contains("--resume"),
        "{err}"
    );
    let m = manifest(&run_dir);
    assert_eq!(m["complete"], false);
    assert_eq!(m["sessions"][0]["interrupted"], true);
    // Every reservation of the cancelled requests was deleted before exit.
    assert_eq!(m["loads_zero_at_end"], true, "{m}");
    assert_eq!(m["outstanding_reservations"].as_array().unwrap().len(), 0);
    // The file is consistent: whole lines only.
    let text = std::fs::read_to_string(&records_path).unwrap();
    assert!(text.is_empty() || text.ends_with('\n'));

    let out = start(&plan, &run_dir, true).wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_every_unit_once(&run_dir);
}

#[test]
fn resume_refuses_a_different_plan() {
    let dir = tempfile::tempdir().unwrap();
    let plan = write(
        dir.path(),
        "plan.toml",
        "seed = 1\n[qgrid]\nn = [64]\nf = [0.0]\nrepeats = 1\n",
    );
    let run_dir = dir.path().join("run");
    let out = run_sim(&plan, &run_dir, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let other = write(
        dir.path(),
        "other.toml",
        "seed = 1\n[qgrid]\nn = [64]\nf = [0.0]\nrepeats = 2\n",
    );
    let out = run_sim(&other, &run_dir, &["--resume"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("same plan"), "{}", stderr(&out));
    // Resuming a finished run with its own plan is a no-op.
    let out = run_sim(&plan, &run_dir, &["--resume"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(records(&run_dir).len(), 2);
}
