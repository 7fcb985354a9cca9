//! The real Dynamo 1.6.1 stack the `real_dynamo` tests talk to, and a small independent HTTP client
//! for it (reqwest + serde_json, deliberately not sy-dynamo: these tests check Dynamo's behaviour and
//! sy's tools against it, so they must not share the code under test).
//!
//! How a test finds the stack: `SY_DYNAMO_FRONTEND`, `SY_DYNAMO_SELECT` and `SY_DYNAMO_RUN_DIR` (printed by
//! `scripts/dynamo-local.sh env`; `scripts/test.sh` and `.ci/run` set them after starting the stack).
//! Without them a test prints that it skipped — unless `SY_REQUIRE_DYNAMO=1`, then it fails. Every test
//! that ran against the stack appends its name to `$SY_DYNAMO_TEST_LOG`, which `scripts/test.sh` counts.
//! Tests hold an exclusive lock on `$SY_DYNAMO_RUN_DIR/tests.lock`, because several of them kill workers
//! or restart the frontend.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{Value, json};

/// Block size of every worker started by `scripts/dynamo-local.sh`.
pub const BLOCK: u64 = 16;

#[derive(Debug, Clone)]
pub struct WorkerInfo {
    pub name: String,
    pub worker_id: u64,
    pub total_kv_blocks: u64,
    pub max_num_batched_tokens: u64,
}

#[derive(Debug)]
pub struct Stack {
    pub frontend: String,
    pub select: String,
    pub run_dir: PathBuf,
    pub http: reqwest::Client,
    _lock: File,
}

fn env_nonempty(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn assert_loopback(url: &str) {
    assert!(
        url.starts_with("http://127.0.0.1:") || url.starts_with("http://localhost:"),
        "real-Dynamo tests only talk to 127.0.0.1; got {url}"
    );
}

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

impl Stack {
    /// The stack, or None (test skipped) when none is configured and SY_REQUIRE_DYNAMO is not 1.
    pub async fn acquire(test: &str) -> Option<Stack> {
        let (Some(frontend), Some(select), Some(run_dir)) = (
            env_nonempty("SY_DYNAMO_FRONTEND"),
            env_nonempty("SY_DYNAMO_SELECT"),
            env_nonempty("SY_DYNAMO_RUN_DIR"),
        ) else {
            if env_nonempty("SY_REQUIRE_DYNAMO").as_deref() == Some("1") {
                panic!(
                    "{test}: SY_REQUIRE_DYNAMO=1 but SY_DYNAMO_FRONTEND / SY_DYNAMO_SELECT / SY_DYNAMO_RUN_DIR \
                     are not set. Run scripts/test.sh, or scripts/dynamo-local.sh start and \
                     eval \"$(scripts/dynamo-local.sh env)\"."
                );
            }
            eprintln!(
                "{test}: SKIPPED: no real Dynamo stack (SY_DYNAMO_FRONTEND unset; see scripts/test.sh)"
            );
            return None;
        };
        assert_loopback(&frontend);
        assert_loopback(&select);
        let run_dir = PathBuf::from(run_dir);
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(run_dir.join("tests.lock"))
            .expect("open tests.lock in SY_DYNAMO_RUN_DIR");
        lock.lock().expect("lock tests.lock");
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .connect_timeout(Duration::from_secs(2))
            .build()
            .expect("reqwest client");
        let stack = Stack {
            frontend,
            select,
            run_dir,
            http,
            _lock: lock,
        };
        stack.wait_healthy().await;
        if let Some(log) = env_nonempty("SY_DYNAMO_TEST_LOG") {
            let mut f = OpenOptions::new()
                .create(true)
                .append(true)
                .open(log)
                .expect("open SY_DYNAMO_TEST_LOG");
            writeln!(f, "{test}").expect("append SY_DYNAMO_TEST_LOG");
        }
        eprintln!(
            "{test}: running against real Dynamo at {} / {}",
            stack.frontend, stack.select
        );
        Some(stack)
    }

    /// The launcher's table of the current workers (rewritten on every (re)start).
    pub fn workers(&self) -> Vec<WorkerInfo> {
        let text =
            std::fs::read_to_string(self.run_dir.join("workers.json")).expect("read workers.json");
        let table: Vec<Value> = serde_json::from_str(&text).expect("parse workers.json");
        table
            .iter()
            .filter(|w| w["running"] == json!(true))
            .map(|w| WorkerInfo {
                name: w["name"].as_str().unwrap().to_owned(),
                worker_id: w["worker_id"].as_u64().expect("worker_id must be a u64"),
                total_kv_blocks: w["total_kv_blocks"].as_u64().unwrap(),
                max_num_batched_tokens: w["max_num_batched_tokens"].as_u64().unwrap(),
            })
            .collect()
    }

    pub fn worker(&self, name: &str) -> WorkerInfo {
        self.workers()
            .into_iter()
            .find(|w| w.name == name)
            .unwrap_or_else(|| panic!("no running worker {name}"))
    }

    /// Run `scripts/dynamo-local.sh ARGS` against this stack (same RUN_DIR and ports via the environment).
    pub fn launcher(&self, args: &[&str]) {
        let out = Command::new(repo_root().join("scripts/dynamo-local.sh"))
            .args(args)
            .env("RUN_DIR", &self.run_dir)
            .output()
            .expect("run scripts/dynamo-local.sh");
        assert!(
            out.status.success(),
            "scripts/dynamo-local.sh {args:?} failed: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
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
        let value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap_or(Value::Null)
        };
        (status, value)
    }

    pub async fn sel_get(&self, path: &str) -> (u16, Value) {
        self.call(
            reqwest::Method::GET,
            &format!("{}{path}", self.select),
            None,
        )
        .await
    }

    pub async fn sel_post(&self, path: &str, body: &Value) -> (u16, Value) {
        self.call(
            reqwest::Method::POST,
            &format!("{}{path}", self.select),
            Some(body),
        )
        .await
    }

    pub async fn sel_delete(&self, path: &str) -> u16 {
        self.call(
            reqwest::Method::DELETE,
            &format!("{}{path}", self.select),
            None,
        )
        .await
        .0
    }

    /// Per worker (id → (potential_prefill_tokens, active_requests)) over every model, from GET /loads.
    pub async fn loads(&self) -> Vec<(String, u64, u64, u64)> {
        let (status, v) = self.sel_get("/loads").await;
        assert_eq!(status, 200, "GET /loads: {v}");
        let mut rows = Vec::new();
        for model in v.as_array().expect("/loads is an array") {
            let name = model["model_name"].as_str().unwrap_or_default().to_owned();
            for w in model["loads"].as_array().expect("loads[]") {
                rows.push((
                    name.clone(),
                    w["worker_id"].as_u64().expect("worker_id u64"),
                    w["potential_prefill_tokens"]
                        .as_u64()
                        .expect("potential_prefill_tokens"),
                    w["active_requests"].as_u64().expect("active_requests"),
                ));
            }
        }
        rows
    }

    /// R and the booked prefill tokens of one worker.
    pub async fn load_of(&self, worker: u64) -> (u64, u64) {
        self.loads()
            .await
            .into_iter()
            .find(|r| r.1 == worker)
            .map(|r| (r.3, r.2))
            .unwrap_or_else(|| panic!("worker {worker} not in /loads"))
    }

    pub async fn assert_loads_zero(&self, context: &str) {
        // A DELETE returns after the booking is released, but allow a short settle anyway.
        let deadline = Instant::now() + Duration::from_secs(3);
        loop {
            let rows = self.loads().await;
            let busy: Vec<_> = rows.iter().filter(|r| r.2 != 0 || r.3 != 0).collect();
            if busy.is_empty() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{context}: /loads not zero (leaked reservations): {busy:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Every worker in workers.json is registered in the selection service (and nothing else for our
    /// models is), and the frontend lists exactly those workers (no stale instance of a killed one).
    pub async fn wait_healthy(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut last = String::new();
        while Instant::now() < deadline {
            let ids: std::collections::BTreeSet<u64> =
                self.workers().iter().map(|w| w.worker_id).collect();
            let registered: std::collections::BTreeSet<u64> =
                match self.sel_get_quiet("/workers").await {
                    Some(v) => v
                        .as_array()
                        .map(|a| a.iter().filter_map(|w| w["worker_id"].as_u64()).collect())
                        .unwrap_or_default(),
                    None => Default::default(),
                };
            let listed: std::collections::BTreeSet<u64> = match self.fe_get_quiet("/health").await {
                Some(v) => v["instances"]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .filter(|i| i["endpoint"] == "generate")
                            .filter_map(|i| i["instance_id"].as_u64())
                            .collect()
                    })
                    .unwrap_or_default(),
                None => Default::default(),
            };
            // The frontend lists exactly the running workers: a killed one stays listed for about
            // 9 s, and sy-collect's preflight refuses a listed worker the selection service lacks.
            // Every row of the launcher's table running (4 in the default topology, 5 in the
            // data-parallel one of scripts/test.sh).
            let rows = std::fs::read_to_string(self.run_dir.join("workers.json"))
                .ok()
                .and_then(|t| serde_json::from_str::<Vec<Value>>(&t).ok())
                .map_or(0, |t| t.len());
            if !ids.is_empty() && ids.len() == rows && ids == registered && ids == listed {
                return;
            }
            last = format!("workers.json {ids:?}, selection {registered:?}, frontend {listed:?}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        panic!("the Dynamo stack is not healthy: {last}");
    }

    async fn sel_get_quiet(&self, path: &str) -> Option<Value> {
        let r = self
            .http
            .get(format!("{}{path}", self.select))
            .send()
            .await
            .ok()?;
        r.json().await.ok()
    }

    async fn fe_get_quiet(&self, path: &str) -> Option<Value> {
        let r = self
            .http
            .get(format!("{}{path}", self.frontend))
            .send()
            .await
            .ok()?;
        r.json().await.ok()
    }

    /// Wait until the selection service has seen (through KV events) `want_tokens` cached on `worker`.
    pub async fn wait_cached(&self, model: &str, worker: u64, tokens: &[u64], want_tokens: u64) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let (status, v) = self
                .sel_post(
                    "/overlap_scores",
                    &json!({"model_name": model, "token_ids": tokens}),
                )
                .await;
            assert_eq!(status, 200, "/overlap_scores: {v}");
            let blocks = v["workers"]
                .as_array()
                .unwrap()
                .iter()
                .find(|w| w["worker_id"].as_u64() == Some(worker))
                .and_then(|w| w["device_blocks"].as_u64())
                .unwrap_or(0);
            if blocks * BLOCK >= want_tokens {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "worker {worker} never reported {want_tokens} cached tokens (has {blocks} blocks)"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Token ids the tiny model accepts (5..4000; 0..4 are special), unique per call: a splitmix64 stream
/// seeded from the clock and a per-process counter, so no two prompts share a prefix by accident.
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
            5 + z % 3995
        })
        .collect()
}

/// What one request through the accounting path saw.
#[derive(Debug, Default)]
pub struct Accounted {
    pub selection: Value,
    pub reserved_worker: u64,
    /// (R, booked prefill tokens) of the reserved worker right after select_and_reserve.
    pub load_after_reserve: (u64, u64),
    /// Same, right after prefill_complete.
    pub load_after_prefill_complete: (u64, u64),
    pub status: u16,
    pub ttft: Option<Duration>,
    pub served_worker: Option<u64>,
    pub cached_tokens: Option<u64>,
    pub prompt_tokens: Option<u64>,
    pub output_chunks: usize,
    pub error_event: Option<Value>,
    pub transport_error: Option<String>,
    pub delete_status: u16,
    pub second_delete_status: u16,
}

impl Stack {
    /// select_and_reserve → streamed completion pinned with backend_instance_id → prefill_complete at the
    /// first token → DELETE at the end (always, also on error), then a second DELETE (must be 404).
    pub async fn accounted(
        &self,
        model: &str,
        tokens: &[u64],
        max_tokens: u64,
        selection_id: &str,
    ) -> Accounted {
        let mut out = Accounted::default();
        let (status, sel) = self
            .sel_post(
                "/select_and_reserve",
                &json!({"model_name": model, "token_ids": tokens, "selection_id": selection_id}),
            )
            .await;
        assert_eq!(status, 200, "select_and_reserve {selection_id}: {sel}");
        out.reserved_worker = sel["worker_id"].as_u64().expect("worker_id u64");
        out.selection = sel;
        out.load_after_reserve = self.load_of(out.reserved_worker).await;

        let body = json!({
            "model": model, "prompt": tokens, "max_tokens": max_tokens, "stream": true,
            "stream_options": {"include_usage": true},
            "nvext": {"backend_instance_id": out.reserved_worker, "extra_fields": ["worker_id", "timing"]},
        });
        let t0 = Instant::now();
        match self
            .http
            .post(format!("{}/v1/completions", self.frontend))
            .json(&body)
            .send()
            .await
        {
            Err(e) => out.transport_error = Some(e.to_string()),
            Ok(resp) => {
                out.status = resp.status().as_u16();
                if out.status == 200 {
                    let mut stream = resp.bytes_stream();
                    let mut buf = Vec::new();
                    'read: while let Some(chunk) = stream.next().await {
                        let chunk = match chunk {
                            Ok(c) => c,
                            Err(e) => {
                                out.transport_error = Some(e.to_string());
                                break;
                            }
                        };
                        buf.extend_from_slice(&chunk);
                        while let Some(pos) = buf.windows(2).position(|w| w == b"\n\n") {
                            let event: Vec<u8> = buf.drain(..pos + 2).collect();
                            let line = String::from_utf8_lossy(&event);
                            let Some(data) = line.trim().strip_prefix("data: ") else {
                                continue;
                            };
                            if data == "[DONE]" {
                                break 'read;
                            }
                            let v: Value = serde_json::from_str(data).expect("SSE data is JSON");
                            if v.get("error").is_some() {
                                out.error_event = Some(v);
                                continue;
                            }
                            if let Some(w) = v["nvext"]["worker_id"]["decode_worker_id"].as_u64() {
                                out.served_worker = Some(w);
                            }
                            if let Some(u) = v.get("usage").filter(|u| !u.is_null()) {
                                out.cached_tokens =
                                    u["prompt_tokens_details"]["cached_tokens"].as_u64();
                                out.prompt_tokens = u["prompt_tokens"].as_u64();
                            }
                            let text = v["choices"][0]["text"].as_str().unwrap_or("");
                            if !text.is_empty() {
                                out.output_chunks += 1;
                                if out.ttft.is_none() {
                                    out.ttft = Some(t0.elapsed());
                                    let st = self
                                        .sel_post_empty(&format!(
                                            "/reservations/{selection_id}/prefill_complete"
                                        ))
                                        .await;
                                    assert_eq!(st, 200, "prefill_complete {selection_id}");
                                    out.load_after_prefill_complete =
                                        self.load_of(out.reserved_worker).await;
                                }
                            }
                        }
                    }
                } else {
                    let _ = resp.bytes().await;
                }
            }
        }
        out.delete_status = self
            .sel_delete(&format!("/reservations/{selection_id}"))
            .await;
        out.second_delete_status = self
            .sel_delete(&format!("/reservations/{selection_id}"))
            .await;
        out
    }

    async fn sel_post_empty(&self, path: &str) -> u16 {
        self.call(
            reqwest::Method::POST,
            &format!("{}{path}", self.select),
            None,
        )
        .await
        .0
    }
}
