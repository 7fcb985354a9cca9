//! Interrupted runs: SIGKILL mid-run then `--resume` gives every unit exactly once; Ctrl-C
//! cancels in-flight requests, deletes their reservations and leaves a consistent file.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;
use sha2::Digest;
use std::collections::HashSet;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};
use sy_records::Model;

use common::*;
use sy_records::Status;

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
    for role in [Model::Efficient, Model::Capable] {
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
    // The run directory keeps the plan it was collected with, byte for byte: its hash is the
    // manifest's plan_sha256.
    let copy = std::fs::read(run_dir.join("plan.toml")).unwrap();
    assert_eq!(copy, PLAN.as_bytes());
    let sha = sha2::Sha256::digest(&copy);
    assert_eq!(m["plan_sha256"], hex::encode(sha));
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

/// When a run is killed: each moment is recognised from what the run has written so far.
#[derive(Debug, Clone, Copy)]
enum Moment {
    /// The manifest exists, no record yet.
    BeforeFirstRecord,
    /// The manifest's progress has been rewritten mid-run (units_done > 0).
    AfterProgressWrite,
    /// During a resumed session (after a first kill mid-run).
    DuringResume,
    /// Every record is in records.jsonl; the Parquet copy and final manifest may not be.
    AfterLastRecord,
    /// Mid-run with a torn last line appended afterwards (a kill mid-append).
    MidRunTorn,
}

fn manifest_units_done(run_dir: &Path) -> u64 {
    std::fs::read_to_string(run_dir.join("manifest.json"))
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .and_then(|m| m["units_done"].as_u64())
        .unwrap_or(0)
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let t = Instant::now();
    while !done() {
        assert!(t.elapsed() < Duration::from_secs(60), "never saw: {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn kill(mut child: std::process::Child) {
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
}

/// The fitting tools' loader reads, from the run directory, exactly the records of
/// records.jsonl (the Parquet copy is that copy; nothing lost, nothing doubled).
fn assert_tools_read_the_completed_run(run_dir: &Path) {
    let m = manifest(run_dir);
    assert_eq!(m["complete"], true, "{m}");
    assert_eq!(m["units_done"], UNITS as u64);
    assert_eq!(m["records_files"]["records"], (UNITS * 2) as u64, "{m}");
    let loaded = sy_records::load_records(&[run_dir.to_path_buf()], &Default::default()).unwrap();
    assert!(loaded.files[0].path.ends_with("records.parquet"));
    let key = |r: &sy_records::Record| {
        (
            r.condition_id.clone(),
            r.repeat,
            r.role.as_str(),
            r.probe_id.clone(),
        )
    };
    let mut from_tools: Vec<_> = loaded.records.iter().map(key).collect();
    let mut from_jsonl: Vec<_> = records(run_dir).iter().map(key).collect();
    from_tools.sort();
    from_jsonl.sort();
    assert_eq!(from_tools.len(), UNITS * 2);
    assert_eq!(from_tools, from_jsonl);
}

fn sigkill_then_resume(moment: Moment) {
    let dir = tempfile::tempdir().unwrap();
    let plan = write(dir.path(), "plan.toml", PLAN);
    let run_dir = dir.path().join("run");
    let records_path = run_dir.join("records.jsonl");
    let child = start(&plan, &run_dir, false);
    match moment {
        Moment::BeforeFirstRecord => {
            wait_until("the manifest", || run_dir.join("manifest.json").exists());
            kill(child);
            assert!(lines(&records_path) < UNITS * 2);
        }
        Moment::AfterProgressWrite => {
            wait_until("a progress write", || manifest_units_done(&run_dir) > 0);
            kill(child);
            let m = manifest(&run_dir);
            assert_eq!(m["complete"], false, "{m}");
            assert!(
                m["units_done"].as_u64().unwrap() < UNITS as u64,
                "killed too late"
            );
        }
        Moment::DuringResume => {
            wait_for_lines(&records_path, 10);
            kill(child);
            let before = lines(&records_path);
            let again = start(&plan, &run_dir, true);
            wait_until("the resumed session's records", || {
                lines(&records_path) > before + 6
            });
            kill(again);
        }
        Moment::AfterLastRecord => {
            wait_for_lines(&records_path, UNITS * 2);
            kill(child);
        }
        Moment::MidRunTorn => {
            wait_for_lines(&records_path, 20);
            kill(child);
            let mut bytes = std::fs::read(&records_path).unwrap();
            bytes.extend_from_slice(b"{\"schema_version\":1,\"run_id\":\"x");
            std::fs::write(&records_path, bytes).unwrap();
        }
    }
    // A run directory that a kill left behind is refused by the fitting tools, never read as
    // if it were complete.
    if let Ok(m) = std::fs::read_to_string(run_dir.join("manifest.json"))
        && m.contains("\"complete\": false")
    {
        let err = sy_records::load_records(std::slice::from_ref(&run_dir), &Default::default())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("manifest.json") && err.contains("complete"),
            "{err}"
        );
    }
    let out = start(&plan, &run_dir, true).wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{moment:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_every_unit_once(&run_dir);
    assert_tools_read_the_completed_run(&run_dir);
    assert_eq!(manifest(&run_dir)["loads_zero_at_end"], true);
}

#[test]
fn sigkill_before_the_first_record_then_resume() {
    sigkill_then_resume(Moment::BeforeFirstRecord);
}

#[test]
fn sigkill_after_a_progress_write_then_resume() {
    sigkill_then_resume(Moment::AfterProgressWrite);
}

#[test]
fn sigkill_during_a_resume_then_resume_again() {
    sigkill_then_resume(Moment::DuringResume);
}

#[test]
fn sigkill_after_the_last_record_then_resume() {
    sigkill_then_resume(Moment::AfterLastRecord);
}

#[test]
fn sigkill_mid_append_then_resume() {
    sigkill_then_resume(Moment::MidRunTorn);
}

/// A full disk (simulated with a file-size limit: `ulimit -f`, SIGXFSZ ignored so writes fail
/// with EFBIG like ENOSPC would) fails the run naming records.jsonl, exit 1, without claiming
/// completeness; `--resume` with space again completes it with nothing lost or doubled.
#[test]
fn full_disk_then_resume() {
    let dir = tempfile::tempdir().unwrap();
    let plan = write(dir.path(), "plan.toml", PLAN);
    let run_dir = dir.path().join("run");
    let script = "trap '' XFSZ; ulimit -f 24; exec \"$0\" --plan \"$1\" --run-dir \"$2\" --target sim \
                  --no-progress";
    let out = std::process::Command::new("bash")
        .args(["-c", script])
        .arg(bin().get_program())
        .arg(&plan)
        .arg(&run_dir)
        .output()
        .unwrap();
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("records.jsonl"),
        "the failing file is named: {err}"
    );
    assert!(err.contains("--resume"), "{err}");
    assert!(!err.contains("has every record"), "{err}");
    let m = manifest(&run_dir);
    assert_eq!(m["complete"], false, "{m}");
    assert!(m["records_files"].is_null(), "{m}");
    let partial = lines(&run_dir.join("records.jsonl"));
    assert!(partial > 0 && partial < UNITS * 2, "{partial} lines");
    let err = sy_records::load_records(std::slice::from_ref(&run_dir), &Default::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("manifest.json") && err.contains("complete"),
        "{err}"
    );

    let out = start(&plan, &run_dir, true).wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_every_unit_once(&run_dir);
    assert_tools_read_the_completed_run(&run_dir);
}
