//! Integration tests against a real serving engine: two vLLM 0.31 CPU workers serving SmolLM2-135M
//! under Dynamo 1.6.1 (frontend with the KV router, selection service), started by
//! `TOPOLOGY=vllm-cpu scripts/dynamo-local.sh start` — `scripts/test.sh` runs this binary in a phase
//! of its own against that stack (see `real_engine/engine.rs` for how the stack is found). One at a
//! time: each test holds the stack's lock.
//!
//! What they pin down, each a fact the mocker cannot show: the launcher registers the capacity the
//! engine reports, and `sy-collect preflight` re-registers a worker from it (`--kv-events`); the
//! engine's cached tokens against K, including the block vLLM recomputes on a full-prompt hit; a
//! small plan collected end to end with every probe timed, K = cached tokens and the client − server
//! TTFT gap small; a worker restart in the middle of a run.

// End-to-end scenarios read top to bottom: the 120-line limit (clippy.toml) is for library and
// binary code.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

#[path = "real_engine/engine.rs"]
mod engine;

use std::time::Duration;

use engine::{BLOCK, Engine, fresh_tokens, text};
use serde_json::{Value, json};

/// The engine's plan: prompt lengths a CPU core prefills in well under a second, both phases.
const SMALL_PLAN: &str = r#"
name = "engine-ci"
seed = 1

[target]
first_token_timeout_ms = 60000
request_timeout_ms = 120000

[prompt]
vocab_min = 1000
vocab_max = 20000

[probe]
max_tokens = 2
settle_ms = 20

[qgrid]
n = [128, 512]
f = [0.0, 0.5, 1.0]
repeats = 1

[load]
n = [256]
f = [0.0]
repeats = 1
prefill_contention = [0, 2]
prefill_prompt_tokens = 1024
decode_contention = [0, 2]
short_output_tokens = 4
long_output_tokens = 32
decode_prompt_tokens = 32
busy_capable = [false]
warmup_ms = 100
"#;

/// More units, for a restart in the middle.
const RESTART_PLAN: &str = r#"
name = "engine-restart"
seed = 1

[target]
first_token_timeout_ms = 60000
request_timeout_ms = 120000
retries = 2
retry_backoff_ms = 500

[prompt]
vocab_min = 1000
vocab_max = 20000

[probe]
max_tokens = 2
settle_ms = 20

[qgrid]
n = [128, 256]
f = [0.0, 0.5]
repeats = 6
"#;

fn write_plan(dir: &std::path::Path, name: &str, toml: &str) -> std::path::PathBuf {
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, toml).unwrap();
    path
}

fn is_ok(r: &Value) -> bool {
    r["status"] == "ok"
}

/// The KV cache the engine says it allocated ("CPU KV cache size: 46,592 tokens" in the worker's
/// log), in blocks.
fn logged_kv_blocks(engine: &Engine, name: &str) -> u64 {
    let log = std::fs::read_to_string(engine.run_dir.join(format!("logs/{name}.log"))).unwrap();
    let line = log
        .lines()
        .rev()
        .find(|l| l.contains("KV cache size:"))
        .unwrap_or_else(|| panic!("{name}'s log names no KV cache size"));
    let tokens: u64 = line
        .split("KV cache size:")
        .nth(1)
        .and_then(|s| s.split("tokens").next())
        .map(|s| s.trim().replace(',', ""))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("unreadable: {line}"));
    tokens / BLOCK
}

/// The launcher registered each worker with what the engine reports (its KV cache, its chunked-
/// prefill budget, block size 32); preflight finds the deployment fit, with KV events flowing; a
/// worker deleted from the selection service is registered again by preflight from the frontend's
/// figures and the KV-event endpoint given with `--kv-events`, schedulable at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_engine_preflight_registers_from_the_engine() {
    let Some(engine) = Engine::acquire("real_engine_preflight_registers_from_the_engine").await
    else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let plan = write_plan(tmp.path(), "small", SMALL_PLAN);
    let plan = plan.to_str().unwrap();
    let workers = engine.workers();
    assert_eq!(workers.len(), 2, "{workers:?}");
    for w in &workers {
        assert_eq!(w.block_size, BLOCK);
        assert_eq!(
            w.max_num_batched_tokens, 512,
            "the engine's chunked-prefill budget"
        );
        assert_eq!(
            w.total_kv_blocks,
            logged_kv_blocks(&engine, &w.name),
            "{}: registered KV capacity = what vLLM allocated",
            w.name
        );
        let reg = engine.registered(w.worker_id).await.expect("registered");
        assert_eq!(
            reg["total_kv_blocks"].as_u64(),
            Some(w.total_kv_blocks),
            "{reg}"
        );
        assert_eq!(reg["max_num_batched_tokens"].as_u64(), Some(512), "{reg}");
    }

    let out = engine::sy_collect(&engine, &["preflight", "--plan", plan, "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    for w in &workers {
        let row = report["workers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["worker_id"].as_u64() == Some(w.worker_id))
            .unwrap_or_else(|| panic!("{} missing from {report}", w.name))
            .clone();
        assert_eq!(row["prefill_capacity"].as_u64(), Some(512), "{row}");
        assert_eq!(row["block_size"].as_u64(), Some(BLOCK), "{row}");
        assert_eq!(row["lifecycle"], "schedulable", "{row}");
        assert_eq!(row["kv_events"]["result"], "flowing", "{row}");
        assert!(row["server_ttft_ms"].as_f64().is_some(), "{row}");
    }

    // Deleted from the selection service: preflight registers it again.
    let w = engine.worker("capable-w0");
    let status = engine
        .sel(
            reqwest::Method::DELETE,
            &format!("/workers/{}", w.worker_id),
            None,
        )
        .await
        .0;
    assert!(status < 300, "DELETE /workers: {status}");
    let kv = format!("{}=tcp://127.0.0.1:{}", w.worker_id, w.kv_events_port);
    let out = engine::sy_collect(
        &engine,
        &["preflight", "--plan", plan, "--kv-events", &kv, "--json"],
    )
    .output()
    .unwrap();
    let now = engine.registered(w.worker_id).await;
    if now.is_none() {
        // Leave the stack as it was found for the next test.
        engine.launcher(&["register"]);
    }
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let now = now.expect("preflight registered the worker");
    assert_eq!(
        now["total_kv_blocks"].as_u64(),
        Some(w.total_kv_blocks),
        "{now}"
    );
    assert_eq!(now["max_num_batched_tokens"].as_u64(), Some(512), "{now}");
    assert_eq!(now["block_size"].as_u64(), Some(BLOCK), "{now}");
    assert_eq!(now["lifecycle"], "schedulable", "{now}");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let row = report["workers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["worker_id"].as_u64() == Some(w.worker_id))
        .unwrap()
        .clone();
    assert_eq!(row["registered_now"], true, "{row}");
    assert_eq!(row["kv_events"]["result"], "flowing", "{row}");
}

/// K (the selection service's overlap, fed by the engine's KV events) against the engine's own
/// cached tokens: equal on a partial prefix hit; on a full repeat of a block-aligned prompt the
/// router reports K = N while vLLM recomputes the block holding the last prompt token and reports
/// N − 32 (vllm/v1/core/kv_cache_manager.py, `get_computed_blocks`: the hit is capped at N − 1
/// tokens). Also: the probes' generation settings give exactly max_tokens tokens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_engine_k_against_cached_tokens() {
    let Some(engine) = Engine::acquire("real_engine_k_against_cached_tokens").await else {
        return;
    };
    for w in engine.workers() {
        let model = w.model.as_str();
        let prompt = fresh_tokens(256);
        let first = engine.pinned(model, w.worker_id, &prompt, 3).await;
        assert_eq!(first.status, 200, "{first:?}");
        assert_eq!(
            first.cached_tokens.unwrap_or(0),
            0,
            "a fresh prompt: {first:?}"
        );
        assert_eq!(
            first.completion_tokens,
            Some(3),
            "exactly max_tokens: {first:?}"
        );
        let k = engine.wait_overlap(model, w.worker_id, &prompt, 256).await;
        assert_eq!(
            k, 256,
            "{}: the router sees every block of the primed prompt",
            w.name
        );

        // A partial hit: half the prompt, then fresh tokens.
        let mut half = prompt[..128].to_vec();
        half.extend(fresh_tokens(128));
        let k_half = engine.overlap(model, w.worker_id, &half).await;
        let got = engine.pinned(model, w.worker_id, &half, 2).await;
        assert_eq!(k_half, 128);
        assert_eq!(
            got.cached_tokens,
            Some(128),
            "partial hit: cached = K ({got:?})"
        );
        assert_eq!(
            sy_collect::summary::k_vs_cached(256, k_half, 128),
            sy_collect::summary::KCached::Equal
        );

        // The full repeat: K = N, the engine recomputes the last block.
        let k_full = engine.overlap(model, w.worker_id, &prompt).await;
        let again = engine.pinned(model, w.worker_id, &prompt, 2).await;
        assert_eq!(k_full, 256);
        assert_eq!(
            again.cached_tokens,
            Some(256 - BLOCK),
            "full repeat: vLLM recomputes the block holding the last token ({again:?})"
        );
        assert_eq!(
            sy_collect::summary::k_vs_cached(256, k_full, 256 - BLOCK),
            sy_collect::summary::KCached::FullHitRecomputed
        );
        // An unaligned prompt: the partial last block is never a hit, so K < N and they agree.
        let odd = fresh_tokens(250);
        let _ = engine.pinned(model, w.worker_id, &odd, 1).await;
        let k_odd = engine.wait_overlap(model, w.worker_id, &odd, 224).await;
        let odd_again = engine.pinned(model, w.worker_id, &odd, 1).await;
        assert_eq!(k_odd, 224);
        assert_eq!(odd_again.cached_tokens, Some(224), "{odd_again:?}");
    }
}

/// A small plan collected on the engine: every probe succeeds and is timed, K equals the engine's
/// cached tokens on every probe (the plan never repeats a whole prompt), the client's TTFT is the
/// server's plus a small gap, and the engine shows what the mocker cannot: more prompt tokens take
/// longer, a cached half takes less.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_engine_small_plan() {
    let Some(engine) = Engine::acquire("real_engine_small_plan").await else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let plan = write_plan(tmp.path(), "small", SMALL_PLAN);
    let run_dir = tmp.path().join("run");
    let child = engine::spawn_collect(&engine, &plan, &run_dir);
    let (out, records, manifest) = engine::finish(child, &run_dir, Duration::from_secs(600));
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(manifest["complete"], true, "{manifest}");
    assert_eq!(manifest["loads_zero_at_end"], true, "no reservation leaked");
    assert!(!records.is_empty());
    let failed: Vec<_> = records.iter().filter(|r| !is_ok(r)).collect();
    assert!(
        failed.is_empty(),
        "every probe succeeds on the engine: {failed:?}"
    );

    // K against cached tokens, per probe and in the manifest's summary: equal, except on the
    // full repeats (f = 1), where K = N and vLLM recomputes the last block.
    let mut full = 0;
    for r in &records {
        let k = r["k"].as_u64().unwrap();
        let cached = r["cached_tokens"].as_u64().unwrap();
        if r["planned_f"].as_f64() == Some(1.0) {
            full += 1;
            assert_eq!(
                Some(k),
                r["planned_n"].as_u64(),
                "a full repeat: K = N: {r}"
            );
            assert_eq!(cached, k - BLOCK, "the last block recomputed: {r}");
        } else {
            assert_eq!(cached, k, "K = the engine's cached tokens: {r}");
        }
    }
    assert_eq!(full, 4, "N ∈ {{128, 512}} × both models at f = 1");
    let (mut checked, mut recomputed) = (0, 0);
    for row in manifest["summary"].as_array().unwrap() {
        let t = &row["k_vs_cached"];
        assert_eq!(t["mismatch"], 0, "{row}");
        checked += t["checked"].as_u64().unwrap();
        recomputed += t["full_hit_recomputed"].as_u64().unwrap();
    }
    assert_eq!(checked, records.len() as u64, "{manifest}");
    assert_eq!(recomputed, full, "{manifest}");

    // Client − server TTFT.
    let gaps: Vec<f64> = records
        .iter()
        .filter_map(|r| r["client_server_gap_ms"].as_f64())
        .collect();
    assert_eq!(gaps.len(), records.len(), "every probe has both TTFTs");
    let median_gap = engine::median(gaps.clone());
    eprintln!(
        "client − server TTFT gap over {} probes: median {median_gap:.2} ms, max {:.2} ms",
        gaps.len(),
        gaps.iter().copied().fold(f64::MIN, f64::max)
    );
    assert!(
        gaps.iter().all(|g| *g > -1.0),
        "the client cannot see the first token before the server sent it: {gaps:?}"
    );
    assert!(
        median_gap < 5.0,
        "median client − server gap {median_gap} ms"
    );

    // The engine's TTFT: longer prompts cost more, a cached half less.
    let ttft = |model: &str, n: u64, f: f64| -> f64 {
        records
            .iter()
            .find(|r| {
                r["phase"] == "qgrid"
                    && r["model"] == model
                    && r["planned_n"] == n
                    && (r["planned_f"].as_f64().unwrap() - f).abs() < 1e-9
            })
            .and_then(|r| r["server_ttft_ms"].as_f64())
            .unwrap_or_else(|| panic!("no qgrid record {model} N={n} f={f}"))
    };
    for model in ["efficient", "capable"] {
        let (short, long, half) = (
            ttft(model, 128, 0.0),
            ttft(model, 512, 0.0),
            ttft(model, 512, 0.5),
        );
        eprintln!(
            "{model}: server TTFT N=128 {short:.0} ms, N=512 {long:.0} ms, N=512 half cached {half:.0} ms"
        );
        assert!(
            long > short,
            "{model}: N=512 ({long} ms) vs N=128 ({short} ms)"
        );
        assert!(
            half < long,
            "{model}: half cached ({half} ms) vs uncached ({long} ms)"
        );
    }
}

/// A worker restarted (kill -9 of its whole process tree, then started again with a new instance
/// id) in the middle of a run: the run completes, every failure carries its class, no reservation
/// is left, no process of the old worker survives, the new instance is registered with the
/// engine's capacity and serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_engine_worker_restart_mid_run() {
    let Some(engine) = Engine::acquire("real_engine_worker_restart_mid_run").await else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let plan = write_plan(tmp.path(), "restart", RESTART_PLAN);
    let run_dir = tmp.path().join("run");
    let old = engine.worker("capable-w0");
    let pids = std::fs::read_to_string(engine.run_dir.join("pids")).unwrap();
    let old_pid: i32 = pids
        .lines()
        .find_map(|l| l.strip_prefix("capable-w0 "))
        .and_then(|p| p.trim().parse().ok())
        .expect("capable-w0 in the pid file");
    let mut child = engine::spawn_collect(&engine, &plan, &run_dir);
    engine::wait_records(&mut child, &run_dir, 4);
    engine.launcher(&["restart-worker", "capable-w0"]);
    let new = engine.worker("capable-w0");
    assert_ne!(old.worker_id, new.worker_id, "a new instance");
    // The old process group is gone: no EngineCore or Worker outlived the restart.
    let left: Vec<String> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|s| {
                    let after = s.rsplit_once(')')?.1.to_owned();
                    let fields: Vec<&str> = after.split_whitespace().collect();
                    Some(fields.get(2)?.parse::<i32>().ok()? == old_pid && fields[0] != "Z")
                })
                .unwrap_or(false)
        })
        .map(|pid| pid.to_string())
        .collect();
    assert!(
        left.is_empty(),
        "processes of the old worker's group left: {left:?}"
    );

    let (out, records, manifest) = engine::finish(child, &run_dir, Duration::from_secs(900));
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(manifest["complete"], true, "{manifest}");
    assert_eq!(
        manifest["units_done"], manifest["units_total"],
        "the plan finishes"
    );
    assert_eq!(manifest["loads_zero_at_end"], true, "no reservation leaked");
    assert_eq!(manifest["outstanding_reservations"], json!([]));
    let attempts = engine::read_jsonl(&run_dir.join("attempts.jsonl"));
    let failures: Vec<&Value> = records
        .iter()
        .chain(attempts.iter())
        .filter(|r| !is_ok(r))
        .collect();
    for r in &failures {
        assert!(
            r["error_class"].is_string(),
            "a failure without a class: {r}"
        );
    }
    eprintln!(
        "{} of {} records ok, {} failed attempts or records",
        records.iter().filter(|r| is_ok(r)).count(),
        records.len(),
        failures.len()
    );
    assert!(
        records.iter().any(|r| is_ok(r) && r["model"] == "capable"),
        "capable probes succeed around the restart"
    );

    // The new instance: registered with the engine's capacity, schedulable, and it serves.
    let reg = engine.registered(new.worker_id).await.expect("registered");
    assert_eq!(
        reg["total_kv_blocks"].as_u64(),
        Some(old.total_kv_blocks),
        "{reg}"
    );
    assert_eq!(reg["max_num_batched_tokens"].as_u64(), Some(512), "{reg}");
    assert!(
        engine.registered(old.worker_id).await.is_none(),
        "the old id is deleted"
    );
    let served = engine
        .pinned("capable", new.worker_id, &fresh_tokens(64), 2)
        .await;
    assert_eq!(served.status, 200, "{served:?}");
    assert_eq!(served.completion_tokens, Some(2), "{served:?}");
}
