//! Running the real `sy-collect` binary and reading what it wrote (records.jsonl, attempts.jsonl,
//! manifest.json), plus the record checks shared by the real-Dynamo tests.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::stack::{BLOCK, Stack, repo_root};

/// What one sy-collect run left behind.
#[derive(Debug)]
pub struct CollectRun {
    pub dir: PathBuf,
    pub output: Output,
    pub records: Vec<Value>,
    pub attempts: Vec<Value>,
    pub manifest: Value,
}

impl CollectRun {
    pub fn log(&self) -> String {
        format!(
            "sy-collect in {} exited {:?}\nstdout:\n{}\nstderr:\n{}",
            self.dir.display(),
            self.output.status.code(),
            String::from_utf8_lossy(&self.output.stdout),
            String::from_utf8_lossy(&self.output.stderr)
        )
    }
}

pub fn write_plan(dir: &Path, name: &str, toml: &str) -> PathBuf {
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, toml).expect("write plan");
    path
}

/// A seed nobody used against this stack before. sy-collect derives its prompts from the plan's seed,
/// so the same plan run twice against a warm deployment would find its "uncached" prompts cached.
pub fn fresh_seed() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    nanos ^ (u64::from(std::process::id()) << 32)
}

fn base_command(plan: &Path, run_dir: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sy-collect"));
    cmd.arg("--plan")
        .arg(plan)
        .arg("--run-dir")
        .arg(run_dir)
        .arg("--no-progress");
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    cmd
}

/// `sy-collect --target dynamo` against the stack (URLs from the stack, not the defaults).
pub fn spawn_dynamo(stack: &Stack, plan: &Path, run_dir: &Path, seed: u64) -> Child {
    base_command(plan, run_dir)
        .args(["--seed", &seed.to_string()])
        .args([
            "--target",
            "dynamo",
            "--frontend-url",
            &stack.frontend,
            "--selection-url",
            &stack.select,
        ])
        .spawn()
        .expect("spawn sy-collect")
}

/// The simulator configured like the local mocker stack (capacities, workers).
pub fn mocker_like_sim() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/real_dynamo/mocker-like-sim.toml")
}

/// `sy-collect --target sim --sim-config SIM_CONFIG`.
pub fn spawn_sim(plan: &Path, run_dir: &Path, seed: u64, sim_config: &Path) -> Child {
    base_command(plan, run_dir)
        .args(["--seed", &seed.to_string()])
        .args(["--target", "sim", "--sim-config"])
        .arg(sim_config)
        .spawn()
        .expect("spawn sy-collect")
}

/// Wait for the child (with a deadline: a hang is a failure, and the child is killed) and read the run dir.
pub fn finish(mut child: Child, run_dir: &Path, limit: Duration) -> CollectRun {
    let deadline = Instant::now() + limit;
    loop {
        if child.try_wait().expect("try_wait").is_some() {
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().expect("wait");
            panic!(
                "sy-collect did not finish within {limit:?} (killed)\nstderr:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let output = child.wait_with_output().expect("wait_with_output");
    let manifest = std::fs::read_to_string(run_dir.join("manifest.json"))
        .ok()
        .and_then(|s| serde_json::from_str(&s).ok())
        .unwrap_or(Value::Null);
    CollectRun {
        dir: run_dir.to_path_buf(),
        output,
        records: read_jsonl(&run_dir.join("records.jsonl")),
        attempts: read_jsonl(&run_dir.join("attempts.jsonl")),
        manifest,
    }
}

pub fn read_jsonl(path: &Path) -> Vec<Value> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("{}: bad JSONL line {l:?}: {e}", path.display()))
        })
        .collect()
}

/// Lines currently in the run's records.jsonl (to time a fault mid-run).
pub fn records_so_far(run_dir: &Path) -> usize {
    std::fs::read_to_string(run_dir.join("records.jsonl")).map_or(0, |t| t.lines().count())
}

/// Block until records.jsonl has `n` lines (the run is demonstrably in progress).
pub fn wait_records(child: &mut Child, run_dir: &Path, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while records_so_far(run_dir) < n {
        if let Some(status) = child.try_wait().expect("try_wait") {
            panic!("sy-collect exited ({status}) before writing {n} records");
        }
        assert!(
            Instant::now() < deadline,
            "sy-collect wrote no {n} records in 120 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Every record validates: against schemas/record.schema.json, and through sy-records' loader
/// (the validation sy-fit applies) with nothing skipped, for both records.jsonl and records.parquet.
pub fn assert_records_validate(run: &CollectRun) {
    let schema_text = std::fs::read_to_string(repo_root().join("schemas/record.schema.json"))
        .expect("record schema");
    let schema: Value = serde_json::from_str(&schema_text).expect("schema JSON");
    let validator = jsonschema::validator_for(&schema).expect("compile record schema");
    for (i, r) in run.records.iter().chain(run.attempts.iter()).enumerate() {
        let errors: Vec<String> = validator
            .iter_errors(r)
            .map(|e| format!("{e} at {}", e.instance_path))
            .collect();
        assert!(
            errors.is_empty(),
            "record {i} does not match schemas/record.schema.json: {errors:?}\n{r}"
        );
    }
    for file in ["records.jsonl", "records.parquet"] {
        let loaded =
            sy_records::load_records(&[run.dir.join(file)], &sy_records::LoadOptions::default())
                .unwrap_or_else(|e| panic!("sy-records rejects {file}: {e}"));
        assert_eq!(
            loaded.records.len(),
            run.records.len(),
            "{file}: every record loads"
        );
        assert!(
            loaded.skipped.is_empty(),
            "{file}: skipped {:?}",
            loaded.skipped
        );
    }
}

/// Both candidates are measured for every probe: exactly one efficient and one capable record each.
pub fn assert_pairs(records: &[Value]) {
    let mut by_probe: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for r in records {
        by_probe
            .entry(r["probe_id"].as_str().unwrap())
            .or_default()
            .push(r["role"].as_str().unwrap());
    }
    assert!(!by_probe.is_empty(), "no records");
    for (probe, mut roles) in by_probe {
        roles.sort_unstable();
        assert_eq!(
            roles,
            ["capable", "efficient"],
            "probe {probe}: both candidates, once each"
        );
    }
}

/// The block-aligned prefix a plan's (N, f) primes: round(f·N) rounded down to whole blocks.
pub fn planned_k(r: &Value) -> u64 {
    let n = r["planned_n"].as_u64().unwrap() as f64;
    let f = r["planned_f"].as_f64().unwrap();
    ((f * n).round() as u64 / BLOCK) * BLOCK
}

pub fn is_ok(r: &Value) -> bool {
    r["status"] == "ok"
}

pub fn u(r: &Value, field: &str) -> Option<u64> {
    r[field].as_u64()
}

pub fn f(r: &Value, field: &str) -> Option<f64> {
    r[field].as_f64()
}

/// Selection-service state after a run: nothing booked, and exactly the launcher's workers registered
/// (sy-collect registers nothing).
pub async fn assert_clean_after(stack: &Stack, context: &str) {
    stack.assert_loads_zero(context).await;
    let (_, workers) = stack.sel_get("/workers").await;
    let mut registered: Vec<u64> = workers
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["worker_id"].as_u64().unwrap())
        .collect();
    let mut ours: Vec<u64> = stack.workers().iter().map(|w| w.worker_id).collect();
    registered.sort_unstable();
    ours.sort_unstable();
    assert_eq!(
        registered, ours,
        "{context}: the selection service lists exactly the running workers"
    );
}

pub fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2.0
    }
}
