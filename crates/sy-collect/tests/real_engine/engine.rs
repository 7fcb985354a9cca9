//! The real-engine stack the `real_engine` tests talk to: two vLLM-CPU workers (SmolLM2-135M,
//! "efficient" on core 0, "capable" on core 1) under Dynamo 1.6.1, started by
//! `TOPOLOGY=vllm-cpu scripts/dynamo-local.sh start` (`scripts/test.sh` does it in a phase of its
//! own), and a small independent HTTP client for it (reqwest + serde_json, not sy-dynamo: these
//! tests check sy's tools against the engine, so they do not share the code under test).
//!
//! How a test finds the stack: `SY_ENGINE_FRONTEND`, `SY_ENGINE_SELECT` and `SY_ENGINE_RUN_DIR`
//! (printed by `TOPOLOGY=vllm-cpu scripts/dynamo-local.sh env`). Without them a test prints that it
//! skipped — unless `SY_REQUIRE_ENGINE=1`, then it fails. Every test that ran appends its name to
//! `$SY_DYNAMO_TEST_LOG`. Tests hold an exclusive lock on `$SY_ENGINE_RUN_DIR/tests.lock`: one of
//! them restarts a worker.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// The block size of the vllm-cpu topology (vLLM's CPU attention needs a multiple of 32).
pub const BLOCK: u64 = 32;

#[derive(Debug, Clone)]
pub struct Worker {
    pub name: String,
    pub model: String,
    pub worker_id: u64,
    pub total_kv_blocks: u64,
    pub max_num_batched_tokens: u64,
    pub block_size: u64,
    pub kv_events_port: u64,
}

#[derive(Debug)]
pub struct Engine {
    pub frontend: String,
    pub select: String,
    pub run_dir: PathBuf,
    pub http: reqwest::Client,
    _lock: File,
}

fn env_nonempty(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

impl Engine {
    /// The stack, or None (test skipped) when none is configured and SY_REQUIRE_ENGINE is not 1.
    pub async fn acquire(test: &str) -> Option<Engine> {
        let (Some(frontend), Some(select), Some(run_dir)) = (
            env_nonempty("SY_ENGINE_FRONTEND"),
            env_nonempty("SY_ENGINE_SELECT"),
            env_nonempty("SY_ENGINE_RUN_DIR"),
        ) else {
            assert!(
                env_nonempty("SY_REQUIRE_ENGINE").as_deref() != Some("1"),
                "{test}: SY_REQUIRE_ENGINE=1 but SY_ENGINE_FRONTEND / SY_ENGINE_SELECT / \
                 SY_ENGINE_RUN_DIR are not set: run scripts/test.sh, or TOPOLOGY=vllm-cpu \
                 scripts/dynamo-local.sh start and eval \"$(TOPOLOGY=vllm-cpu scripts/dynamo-local.sh env)\""
            );
            eprintln!("{test}: SKIPPED: no real-engine stack (SY_ENGINE_FRONTEND unset)");
            return None;
        };
        for url in [&frontend, &select] {
            assert!(
                url.starts_with("http://127.0.0.1:"),
                "real-engine tests only talk to 127.0.0.1; got {url}"
            );
        }
        let run_dir = PathBuf::from(run_dir);
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(run_dir.join("tests.lock"))
            .expect("open tests.lock in SY_ENGINE_RUN_DIR");
        lock.lock().expect("lock tests.lock");
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(120))
            .connect_timeout(Duration::from_secs(2))
            .build()
            .expect("reqwest client");
        let engine = Engine {
            frontend,
            select,
            run_dir,
            http,
            _lock: lock,
        };
        if let Some(log) = env_nonempty("SY_DYNAMO_TEST_LOG") {
            let mut f = OpenOptions::new()
                .create(true)
                .append(true)
                .open(log)
                .expect("open SY_DYNAMO_TEST_LOG");
            writeln!(f, "{test}").expect("append SY_DYNAMO_TEST_LOG");
        }
        eprintln!(
            "{test}: running against the real engine at {}",
            engine.frontend
        );
        Some(engine)
    }

    /// The launcher's table of the running workers.
    pub fn workers(&self) -> Vec<Worker> {
        let text =
            std::fs::read_to_string(self.run_dir.join("workers.json")).expect("read workers.json");
        let table: Vec<Value> = serde_json::from_str(&text).expect("parse workers.json");
        table
            .iter()
            .filter(|w| w["running"] == json!(true))
            .map(|w| Worker {
                name: w["name"].as_str().unwrap().to_owned(),
                model: w["model"].as_str().unwrap().to_owned(),
                worker_id: w["worker_id"].as_u64().unwrap(),
                total_kv_blocks: w["total_kv_blocks"].as_u64().unwrap(),
                max_num_batched_tokens: w["max_num_batched_tokens"].as_u64().unwrap(),
                block_size: w["block_size"].as_u64().unwrap(),
                kv_events_port: w["kv_events_port"].as_u64().unwrap(),
            })
            .collect()
    }

    pub fn worker(&self, name: &str) -> Worker {
        self.workers()
            .into_iter()
            .find(|w| w.name == name)
            .unwrap_or_else(|| panic!("no running worker {name}"))
    }

    /// `scripts/dynamo-local.sh ARGS` on this stack (RUN_DIR and the ports from the environment
    /// scripts/test.sh set; TOPOLOGY=vllm-cpu).
    pub fn launcher(&self, args: &[&str]) -> Output {
        // The stack's own ports, whatever the environment says: from its URLs and its table.
        let port = |url: &str| url.rsplit(':').next().unwrap_or_default().to_owned();
        let rows =
            std::fs::read_to_string(self.run_dir.join("workers.json")).expect("read workers.json");
        let table: Vec<Value> = serde_json::from_str(&rows).expect("parse workers.json");
        let first = table.first().expect("a worker row");
        let out = Command::new(repo_root().join("scripts/dynamo-local.sh"))
            .args(args)
            .env("RUN_DIR", &self.run_dir)
            .env("TOPOLOGY", "vllm-cpu")
            .env("FRONTEND_PORT", port(&self.frontend))
            .env("SELECT_PORT", port(&self.select))
            .env("WORKER_SYS_PORT_BASE", first["system_port"].to_string())
            .env("ZMQ_KV_PORT_BASE", first["kv_events_port"].to_string())
            .output()
            .expect("run scripts/dynamo-local.sh");
        assert!(
            out.status.success(),
            "scripts/dynamo-local.sh {args:?} failed: {}",
            text(&out)
        );
        out
    }

    pub async fn call(
        &self,
        method: reqwest::Method,
        url: &str,
        body: Option<&Value>,
    ) -> (u16, Value) {
        let mut req = self.http.request(method, url);
        if let Some(b) = body {
            req = req.json(b);
        }
        let resp = req.send().await.unwrap_or_else(|e| panic!("{url}: {e}"));
        let status = resp.status().as_u16();
        let bytes = resp.bytes().await.unwrap_or_else(|e| panic!("{url}: {e}"));
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }

    pub async fn sel(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
    ) -> (u16, Value) {
        self.call(method, &format!("{}{path}", self.select), body)
            .await
    }

    /// The selection service's record of a worker (GET /workers).
    pub async fn registered(&self, id: u64) -> Option<Value> {
        let (_, all) = self.sel(reqwest::Method::GET, "/workers", None).await;
        all.as_array()?
            .iter()
            .find(|w| w["worker_id"].as_u64() == Some(id))
            .cloned()
    }

    /// The selection service's overlap of `tokens` on `worker`, in tokens (device blocks × block).
    pub async fn overlap(&self, model: &str, worker: u64, tokens: &[u64]) -> u64 {
        let (status, v) = self
            .sel(
                reqwest::Method::POST,
                "/overlap_scores",
                Some(&json!({"model_name": model, "token_ids": tokens})),
            )
            .await;
        assert_eq!(status, 200, "/overlap_scores: {v}");
        v["workers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|w| w["worker_id"].as_u64() == Some(worker))
            .and_then(|w| w["device_blocks"].as_u64())
            .unwrap_or(0)
            * BLOCK
    }

    /// Polls the overlap until it reaches `want` tokens (KV events travel asynchronously).
    pub async fn wait_overlap(&self, model: &str, worker: u64, tokens: &[u64], want: u64) -> u64 {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let k = self.overlap(model, worker, tokens).await;
            if k >= want || Instant::now() > deadline {
                return k;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// One streamed completion pinned to `worker` (no reservation): (HTTP status, the usage's
    /// prompt and cached tokens, completion tokens, the server's TTFT, the text).
    pub async fn pinned(
        &self,
        model: &str,
        worker: u64,
        tokens: &[u64],
        max_tokens: u32,
    ) -> Pinned {
        let body = json!({
            "model": model, "prompt": tokens, "max_tokens": max_tokens, "min_tokens": max_tokens,
            "ignore_eos": true, "temperature": 0.0, "stream": true,
            "stream_options": {"include_usage": true},
            "nvext": {"backend_instance_id": worker, "extra_fields": ["worker_id", "timing"]},
        });
        let resp = self
            .http
            .post(format!("{}/v1/completions", self.frontend))
            .json(&body)
            .send()
            .await
            .expect("POST /v1/completions");
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap_or_default();
        let mut out = Pinned {
            status,
            ..Pinned::default()
        };
        for line in text.lines() {
            let Some(data) = line.strip_prefix("data: ") else {
                continue;
            };
            let Ok(v) = serde_json::from_str::<Value>(data) else {
                continue;
            };
            if let Some(t) = v["choices"][0]["text"].as_str() {
                out.text.push_str(t);
            }
            if let Some(u) = v.get("usage").filter(|u| !u.is_null()) {
                out.prompt_tokens = u["prompt_tokens"].as_u64();
                out.completion_tokens = u["completion_tokens"].as_u64();
                out.cached_tokens = u["prompt_tokens_details"]["cached_tokens"].as_u64();
            }
            if let Some(t) = v["nvext"]["timing"]["ttft_ms"].as_f64() {
                out.server_ttft_ms = Some(t);
            }
        }
        out
    }
}

#[derive(Debug, Default)]
pub struct Pinned {
    pub status: u16,
    pub prompt_tokens: Option<u64>,
    pub completion_tokens: Option<u64>,
    pub cached_tokens: Option<u64>,
    pub server_ttft_ms: Option<f64>,
    pub text: String,
}

pub fn text(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Ordinary token ids of SmolLM2's vocabulary (1000..20000: no special or byte tokens), unique per
/// call, so no two prompts share a prefix by accident.
pub fn fresh_tokens(n: usize) -> Vec<u64> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let mut state = nanos
        ^ COUNTER
            .fetch_add(1, Ordering::Relaxed)
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ u64::from(std::process::id());
    (0..n)
        .map(|_| {
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            1000 + z % 19_000
        })
        .collect()
}

/// A seed nobody used against this stack before (prompts derive from the plan's seed).
pub fn fresh_seed() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    nanos ^ (u64::from(std::process::id()) << 32)
}

/// `sy-collect SUBCOMMAND… --frontend-url … --selection-url …` on this stack.
pub fn sy_collect(engine: &Engine, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sy-collect"));
    cmd.args(args).args([
        "--frontend-url",
        &engine.frontend,
        "--selection-url",
        &engine.select,
    ]);
    cmd
}

/// A collection run in the background.
pub fn spawn_collect(engine: &Engine, plan: &Path, run_dir: &Path) -> Child {
    let seed = fresh_seed().to_string();
    let plan = plan.to_str().unwrap();
    let run = run_dir.to_str().unwrap();
    sy_collect(
        engine,
        &[
            "--plan",
            plan,
            "--run-dir",
            run,
            "--no-progress",
            "--target",
            "dynamo",
            "--seed",
            &seed,
        ],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .expect("spawn sy-collect")
}

pub fn read_jsonl(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

/// Waits for the child (killed after `limit`); its output, records and manifest.
pub fn finish(mut child: Child, run_dir: &Path, limit: Duration) -> (Output, Vec<Value>, Value) {
    let deadline = Instant::now() + limit;
    while child.try_wait().expect("try_wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().expect("wait");
            panic!("sy-collect did not finish within {limit:?}: {}", text(&out));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let out = child.wait_with_output().expect("wait_with_output");
    let manifest = std::fs::read_to_string(run_dir.join("manifest.json"))
        .ok()
        .and_then(|s| serde_json::from_str(&s).ok())
        .unwrap_or(Value::Null);
    (out, read_jsonl(&run_dir.join("records.jsonl")), manifest)
}

/// Blocks until records.jsonl has `n` lines.
pub fn wait_records(child: &mut Child, run_dir: &Path, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(300);
    while read_jsonl(&run_dir.join("records.jsonl")).len() < n {
        if let Some(status) = child.try_wait().expect("try_wait") {
            panic!("sy-collect exited ({status}) before writing {n} records");
        }
        assert!(
            Instant::now() < deadline,
            "sy-collect wrote no {n} records in 300 s"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

pub fn median(mut xs: Vec<f64>) -> f64 {
    assert!(!xs.is_empty(), "median of nothing");
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}
