//! The binary's contract on real files: bad input exits 2 naming the file and field and writes
//! nothing; an existing evaluation is not overwritten; `--resume` runs only the missing blocks;
//! a trace drives the sessions.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

fn sy_eval(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sy-eval"))
        .args(args)
        .arg("--no-progress")
        .output()
        .unwrap()
}

fn bundle() -> String {
    repo().join("data/eval/bundle.json").display().to_string()
}

/// A tiny plan: two variants, one round, two sessions of two turns, no background.
fn tiny_plan(dir: &Path, trace: Option<&str>) -> String {
    let sessions = match trace {
        Some(t) => format!("trace = \"{t}\"\ncount = 2\n"),
        None => "count = 2\nturns = [2, 2]\ninitial_tokens = [200, 300]\nappend_tokens = [20, 40]\noutput_tokens = [2, 4]\n".into(),
    };
    let text = format!(
        "seed = 1\nvariants = [\"stage\", \"cache\"]\nrounds = 1\nconcurrency = 2\n[sessions]\n{sessions}[target]\nsim_config = \"{}\"\n",
        repo().join("data/eval/sim-quarter.toml").display()
    );
    let path = dir.join("plan.toml");
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn bad_input_exits_2_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let run_s = run.display().to_string();
    let bad_plan = dir.path().join("bad.toml");
    std::fs::write(
        &bad_plan,
        "seed = 1\n[sessions]\ncount = 2\nturns = [5, 1]\n",
    )
    .unwrap();
    let o = sy_eval(&[
        "--plan",
        &bad_plan.display().to_string(),
        "--bundle",
        &bundle(),
        "--run-dir",
        &run_s,
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("bad.toml") && stderr(&o).contains("`sessions.turns`"),
        "{}",
        stderr(&o)
    );

    let plan = tiny_plan(dir.path(), None);
    let text = std::fs::read_to_string(repo().join("data/eval/bundle.json")).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    let hash = v["content_hash"].as_str().unwrap();
    let tampered = dir.path().join("tampered.json");
    std::fs::write(&tampered, text.replace(hash, &"0".repeat(64))).unwrap();
    let o = sy_eval(&[
        "--plan",
        &plan,
        "--bundle",
        &tampered.display().to_string(),
        "--run-dir",
        &run_s,
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("hash"), "{}", stderr(&o));

    let trace = dir.path().join("t.jsonl");
    std::fs::write(&trace, "{\"session\":\"a\",\"turn\":1,\"append_tokens\":5,\"output_tokens\":1,\"proposal\":\"efficient\"}\n").unwrap();
    let plan = tiny_plan(dir.path(), Some(&trace.display().to_string()));
    let o = sy_eval(&["--plan", &plan, "--bundle", &bundle(), "--run-dir", &run_s]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("t.jsonl line 1"), "{}", stderr(&o));
    assert!(!run.exists(), "a refused run writes nothing");
}

#[test]
fn target_fields_are_read_or_refused() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let plan = tiny_plan(dir.path(), None);
    let text = std::fs::read_to_string(&plan).unwrap();
    for (extra, expected) in [
        ("retries = 3\n", "`target.retries` is not used by sy-eval: "),
        (
            "bearer_token_env = \"SY_EVAL_TEST_TOKEN_NEVER_SET\"\n",
            "environment variable SY_EVAL_TEST_TOKEN_NEVER_SET is not set",
        ),
    ] {
        std::fs::write(&plan, format!("{text}{extra}")).unwrap();
        let o = sy_eval(&[
            "--plan",
            &plan,
            "--bundle",
            &bundle(),
            "--run-dir",
            &run.display().to_string(),
        ]);
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        assert!(stderr(&o).contains(expected), "{extra}: {}", stderr(&o));
        assert!(
            !run.exists(),
            "{extra}: a refused plan wrote {}",
            run.display()
        );
    }
}

#[test]
fn resume_runs_only_the_missing_blocks_and_a_finished_run_is_not_overwritten() {
    let dir = tempfile::tempdir().unwrap();
    let plan = tiny_plan(dir.path(), None);
    let run = dir.path().join("run");
    let run_s = run.display().to_string();
    let args = [
        "--plan",
        plan.as_str(),
        "--bundle",
        &bundle(),
        "--run-dir",
        &run_s,
        "--json",
    ];
    let o = sy_eval(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let first: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(first["blocks_run"], 2);
    let turns = std::fs::read_to_string(run.join("turns.jsonl")).unwrap();
    assert_eq!(turns.lines().count(), 2 * 2 * 2);

    let again = sy_eval(&args);
    assert_eq!(again.status.code(), Some(2));
    assert!(stderr(&again).contains("--resume"), "{}", stderr(&again));

    let kept = std::fs::read_to_string(run.join("blocks/r0-stage.json")).unwrap();
    std::fs::remove_file(run.join("blocks/r0-cache.json")).unwrap();
    let mut resume = args.to_vec();
    resume.push("--resume");
    let o = sy_eval(&resume);
    assert!(o.status.success(), "{}", stderr(&o));
    let second: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(second["blocks_run"], 1, "only the missing block runs");
    assert_eq!(
        std::fs::read_to_string(run.join("blocks/r0-stage.json")).unwrap(),
        kept
    );
    let manifest: Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("eval-manifest.json")).unwrap())
            .unwrap();
    assert_eq!(manifest["invocation_ids"].as_array().unwrap().len(), 2);
    assert_eq!(manifest["complete"], true);
}

#[test]
fn a_trace_drives_the_sessions() {
    let dir = tempfile::tempdir().unwrap();
    let trace = repo().join("data/eval/trace-example.jsonl");
    let plan = tiny_plan(dir.path(), Some(&trace.display().to_string()));
    let run = dir.path().join("run");
    let o = sy_eval(&[
        "--plan",
        &plan,
        "--bundle",
        &bundle(),
        "--run-dir",
        &run.display().to_string(),
        "--json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let sessions = std::fs::read_to_string(run.join("sessions.jsonl")).unwrap();
    let ids: Vec<String> = sessions
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["session_id"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(
        ids,
        ["fix-bug-17", "add-test-3", "fix-bug-17", "add-test-3"]
    );
    // Turn 1 of fix-bug-17 was proposed efficient, turn 0 of add-test-3 capable.
    let turns: Vec<Value> = std::fs::read_to_string(run.join("turns.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let t = turns
        .iter()
        .find(|t| t["session_id"] == "add-test-3" && t["turn"] == 0)
        .unwrap();
    assert_eq!(
        (t["proposal"].as_str(), t["choice"].as_str()),
        (Some("capable"), Some("capable"))
    );
    assert_eq!(t["reason"], "capable_proposal");
    // The prompt grows by the previous output and the appended tokens: 900, 900+24+310, +12+120.
    let lens: Vec<u64> = turns
        .iter()
        .filter(|t| t["session_id"] == "fix-bug-17" && t["variant"] == "stage")
        .map(|t| t["prompt_tokens"].as_u64().unwrap())
        .collect();
    assert_eq!(lens, [900, 1234, 1366]);
}
