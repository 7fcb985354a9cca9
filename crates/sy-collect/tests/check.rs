//! `sy-collect check RUN_DIR`: a clean collection on the simulator passes; the same records with
//! injected contamination, saturation, failures or leaked load fail, naming the cells and
//! records; bad input exits 2. (`sy-fit`'s refusal of a failing run: crates/sy-fit/tests.)
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn text(o: &Output) -> String {
    format!(
        "exit {:?}\n{}\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn check(dir: &Path, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sy-collect"))
        .arg("check")
        .arg(dir)
        .args(extra)
        .output()
        .unwrap()
}

/// data/plans/ci.toml with six repeats per load condition (enough records per condition for
/// the saturation test).
fn plan(dir: &Path) -> PathBuf {
    let text = std::fs::read_to_string(repo().join("data/plans/ci.toml"))
        .unwrap()
        .replace(
            "[load]\nn = [256]\nf = [0.0]\nrepeats = 2",
            "[load]\nn = [256]\nf = [0.0]\nrepeats = 6",
        );
    assert!(
        text.contains("repeats = 6"),
        "data/plans/ci.toml changed shape"
    );
    let p = dir.join("plan.toml");
    std::fs::write(&p, text).unwrap();
    p
}

/// A clean simulator collection of that plan.
fn collect(dir: &Path) -> PathBuf {
    let run = dir.join("clean");
    let out = Command::new(env!("CARGO_BIN_EXE_sy-collect"))
        .args(["--plan"])
        .arg(plan(dir))
        .arg("--run-dir")
        .arg(&run)
        .args(["--target", "sim", "--no-progress", "--sim-config"])
        .arg(repo().join("data/sim/ci-fast.toml"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    run
}

fn records(run: &Path) -> Vec<Value> {
    std::fs::read_to_string(run.join("records.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// A copy of `run` whose records are `edit`ed (the JSONL is then the source: the Parquet copy
/// and the manifest's hashes of it are dropped); `manifest` edits the manifest.
fn tampered(
    run: &Path,
    name: &str,
    edit: impl Fn(&mut Vec<Value>),
    manifest: impl Fn(&mut Value),
) -> PathBuf {
    let dir = run.parent().unwrap().join(name);
    std::fs::create_dir_all(&dir).unwrap();
    let mut rs = records(run);
    edit(&mut rs);
    let lines: Vec<String> = rs.iter().map(|r| r.to_string()).collect();
    std::fs::write(dir.join("records.jsonl"), lines.join("\n") + "\n").unwrap();
    let mut m: Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("manifest.json")).unwrap()).unwrap();
    m["records_files"] = Value::Null;
    manifest(&mut m);
    std::fs::write(dir.join("manifest.json"), m.to_string()).unwrap();
    dir
}

fn json(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(o)))
}

fn failed(v: &Value) -> Vec<String> {
    v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["outcome"] == "fail")
        .map(|c| c["name"].as_str().unwrap().to_string())
        .collect()
}

fn offenders(v: &Value, name: &str) -> String {
    v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap()["offenders"]
        .to_string()
}

#[test]
fn check_passes_a_clean_run_and_names_what_is_wrong_in_a_bad_one() {
    let tmp = tempfile::tempdir().unwrap();
    let run = collect(tmp.path());

    // Clean: exit 0, check.json written.
    let out = check(&run, &["--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(json(&out)["verdict"], "pass");
    assert!(run.join("check.json").is_file());
    let table = check(&run, &[]);
    assert!(
        String::from_utf8_lossy(&table.stdout).contains("verdict: PASS"),
        "{}",
        text(&table)
    );

    // Contamination: an uncached probe that hit the cache.
    let victim = records(&run)
        .into_iter()
        .find(|r| r["planned_f"] == 0.0 && r["phase"] == "qgrid")
        .unwrap();
    let name = format!(
        "{}/{}",
        victim["probe_id"].as_str().unwrap(),
        victim["role"].as_str().unwrap()
    );
    let pid = victim["probe_id"].clone();
    let role = victim["role"].clone();
    let bad = tampered(
        &run,
        "contaminated",
        |rs| {
            for r in rs.iter_mut() {
                if r["probe_id"] == pid && r["role"] == role {
                    let n = r["prompt_tokens"].as_u64().unwrap();
                    r["cached_tokens"] = (n / 2).into();
                    r["k"] = (n / 2).into();
                }
            }
        },
        |_| {},
    );
    let out = check(&bad, &["--json"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let v = json(&out);
    assert_eq!(failed(&v), vec!["cache_contamination"], "{v}");
    assert!(offenders(&v, "cache_contamination").contains(&name), "{v}");
    let plain = check(&bad, &[]);
    let s = text(&plain);
    assert!(
        s.contains("FAIL  cache_contamination") && s.contains(&name),
        "{s}"
    );

    // Saturation: TTFT rising through one load condition.
    let cond = records(&run)
        .into_iter()
        .find(|r| r["phase"] == "load")
        .unwrap()["condition_id"]
        .clone();
    let bad = tampered(
        &run,
        "saturated",
        |rs| {
            let mut i = 0.0;
            for r in rs.iter_mut().filter(|r| r["condition_id"] == cond) {
                i += 1.0;
                r["sent_at_unix_ms"] = (1e12 + i * 1000.0).into();
                r["ttft_ms"] = (20.0 * i * i).into();
                r["server_ttft_ms"] = (20.0 * i * i - 1.0).into();
                r["client_server_gap_ms"] = 1.0.into();
            }
        },
        |_| {},
    );
    let out = check(&bad, &["--json"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let v = json(&out);
    assert!(failed(&v).contains(&"over_saturation".to_string()), "{v}");
    assert!(
        offenders(&v, "over_saturation").contains(cond.as_str().unwrap()),
        "{v}"
    );

    // Failures and load left at the end.
    let bad = tampered(
        &run,
        "failing",
        |rs| {
            for r in rs.iter_mut().filter(|r| r["condition_id"] == cond) {
                r["status"] = "error".into();
                r["error_class"] = "http5xx".into();
                r["error_message"] = "HTTP 500: pinned worker not eligible".into();
                r["ttft_ms"] = Value::Null;
                r["server_ttft_ms"] = Value::Null;
                r["client_server_gap_ms"] = Value::Null;
                r["cached_tokens"] = Value::Null;
            }
        },
        |m| m["loads_zero_at_end"] = false.into(),
    );
    let out = check(&bad, &["--json"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let v = json(&out);
    let f = failed(&v);
    assert!(
        f.contains(&"failures".to_string()) && f.contains(&"loads_zero_at_end".to_string()),
        "{v}"
    );
    assert!(
        offenders(&v, "failures").contains(&format!("condition {}", cond.as_str().unwrap())),
        "{v}"
    );

    // Bad input: exit 2.
    let empty = tmp.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    assert_eq!(check(&empty, &[]).status.code(), Some(2));
    assert_eq!(check(&tmp.path().join("nope"), &[]).status.code(), Some(2));
    let out = check(&run, &["--bound", "no_such_bound=1"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("unknown bound"), "{}", text(&out));
}
