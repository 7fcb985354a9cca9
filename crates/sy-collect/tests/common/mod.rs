//! Helpers shared by sy-collect's integration tests: run the real binary, read its outputs.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use sy_records::Record;

/// The sy-collect binary: cargo's, or `$SY_TEST_BIN_DIR/sy-collect` when that is set (a copy
/// that a concurrent build in a shared target directory cannot replace mid-test).
pub fn bin() -> Command {
    match std::env::var_os("SY_TEST_BIN_DIR") {
        Some(dir) => Command::new(PathBuf::from(dir).join("sy-collect")),
        None => Command::new(env!("CARGO_BIN_EXE_sy-collect")),
    }
}

pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .expect("workspace root")
}

/// The multi-threaded runtime the in-process tests run the simulator and the collector on.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// In-process run options that drive `sim` as a Dynamo deployment (its frontend and
/// selection-service URLs), writing into `run_dir`.
pub fn dynamo_options(sim: &sy_drive::sim::SimHandle, run_dir: &Path) -> sy_collect::RunOptions {
    sy_collect::RunOptions {
        run_dir: run_dir.to_path_buf(),
        target: sy_drive::TargetKind::Dynamo,
        urls: sy_drive::Endpoints {
            frontend_url: Some(sim.frontend_url()),
            selection_url: Some(sim.selection_url()),
            sim_config: None,
        },
        resume: false,
        show_progress: false,
        seed: None,
        preflight: Some(sy_collect::preflight::PreflightOptions {
            register: true,
            probes: true,
            ..Default::default()
        }),
        warmup: None,
        describe: None,
    }
}

pub fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).expect("write");
    p
}

pub fn run_sim(plan: &Path, run_dir: &Path, extra: &[&str]) -> Output {
    bin()
        .arg("--plan")
        .arg(plan)
        .arg("--run-dir")
        .arg(run_dir)
        .args(["--target", "sim", "--no-progress"])
        .args(extra)
        .output()
        .expect("run sy-collect")
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn records(run_dir: &Path) -> Vec<Record> {
    sy_records::jsonl::read::<Record>(&run_dir.join("records.jsonl"))
        .expect("records.jsonl")
        .records
}

pub fn manifest(run_dir: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(run_dir.join("manifest.json")).expect("manifest"))
        .expect("manifest json")
}

pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    assert!(n > 0, "median of nothing");
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

pub fn record_validator() -> jsonschema::Validator {
    let text = std::fs::read_to_string(workspace_root().join("schemas/record.schema.json"))
        .expect("record schema");
    let schema: serde_json::Value = serde_json::from_str(&text).expect("schema json");
    jsonschema::validator_for(&schema).expect("valid schema")
}

/// Every line of records.jsonl validates against schemas/record.schema.json.
pub fn assert_records_match_schema(run_dir: &Path) {
    let v = record_validator();
    let text = std::fs::read_to_string(run_dir.join("records.jsonl")).expect("records");
    for (i, line) in text.lines().enumerate() {
        let value: serde_json::Value = serde_json::from_str(line).expect("json line");
        let errors: Vec<String> = v.iter_errors(&value).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "records.jsonl:{}: {errors:?}", i + 1);
    }
}
