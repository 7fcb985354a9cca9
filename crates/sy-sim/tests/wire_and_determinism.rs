//! The simulator's JSON has the real Dynamo 1.6.1 shapes (every non-null field of the captured
//! fixtures is present), and a seed fixes token ids, worker ids and cache decisions.
// End-to-end scenarios read top to bottom: the 120-line limit (clippy.toml) is for library and
// binary code.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

mod common;

use std::path::Path;

use common::*;
use serde_json::{Value, json};
use sy_sim::SimConfig;

fn fixture(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../sy-wire/tests/fixtures/dynamo-1.6.1")
        .join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn fixture_json(name: &str) -> Value {
    serde_json::from_str(&fixture(name)).unwrap()
}

fn fixture_sse(name: &str) -> Vec<Value> {
    fixture(name)
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

/// Every non-null key of `real` (recursively; arrays by their first element) exists in `sim`.
fn has_shape(sim: &Value, real: &Value, at: &str) {
    match (sim, real) {
        (Value::Object(s), Value::Object(r)) => {
            for (k, rv) in r {
                if rv.is_null() {
                    continue;
                }
                let sv = s
                    .get(k)
                    .unwrap_or_else(|| panic!("{at}.{k} missing in the simulator's answer: {sim}"));
                has_shape(sv, rv, &format!("{at}.{k}"));
            }
        }
        (Value::Array(s), Value::Array(r)) => {
            if let (Some(s0), Some(r0)) = (s.first(), r.first()) {
                has_shape(s0, r0, &format!("{at}[0]"));
            }
        }
        (s, r) => assert_eq!(
            std::mem::discriminant(s),
            std::mem::discriminant(r),
            "{at}: {s} vs real {r}"
        ),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_have_the_captured_shapes() {
    let h = start(SimConfig {
        time_scale: 0.0,
        ..Default::default()
    })
    .await;
    let c = client();
    let (fe, sel) = (h.frontend_url(), h.selection_url());
    let p = prompt(5, 40);
    let (_, models) = get(&c, &fe, "/v1/models").await;
    has_shape(
        &models,
        &fixture_json("frontend.models.response.json"),
        "models",
    );
    let (_, health) = get(&c, &fe, "/health").await;
    has_shape(
        &health,
        &fixture_json("frontend.health.response.json"),
        "health",
    );
    let (_, full) = post(
        &c,
        &fe,
        "/v1/completions",
        &json!({"model": "efficient", "prompt": p, "max_tokens": 4,
        "nvext": {"extra_fields": ["worker_id", "timing"]}}),
    )
    .await;
    has_shape(
        &full,
        &fixture_json("completions.nonstream.extra_fields.response.json"),
        "completion",
    );
    let (_, chat) = post(
        &c,
        &fe,
        "/v1/chat/completions",
        &json!({"model": "efficient", "max_tokens": 4,
        "messages": [{"role": "user", "content": "hello"}], "nvext": {"token_data": p}}),
    )
    .await;
    has_shape(&chat, &fixture_json("chat.nonstream.response.json"), "chat");
    let (_, q) = post(
        &c,
        &fe,
        "/v1/completions",
        &json!({"model": "efficient", "prompt": p,
        "nvext": {"annotations": ["query_instance_id:"]}}),
    )
    .await;
    has_shape(
        &q,
        &fixture_json("completions.query_instance_id.response.json"),
        "query_instance_id",
    );
    assert_eq!(q["nvext"]["token_ids"], json!(p));
    let s = stream(&c, &fe, "capable", &p, 4, None).await;
    let real = fixture_sse("completions.stream.usage_extra_fields.response.sse");
    assert_eq!(
        s.events.len(),
        real.len(),
        "one chunk per token, a finish chunk, a usage chunk"
    );
    for (i, (a, b)) in s.events.iter().zip(&real).enumerate() {
        has_shape(a, b, &format!("chunk{i}"));
    }
    let (_, e) = post(
        &c,
        &fe,
        "/v1/completions",
        &json!({"model": "nope", "prompt": p}),
    )
    .await;
    assert_eq!(e, fixture_json("completions.unknown_model.response.json"));
    // Selection service.
    for (path, body, real) in [
        (
            "/select",
            json!({"model_name": "efficient", "token_ids": p}),
            "select.select.response.json",
        ),
        (
            "/select",
            json!({"model_name": "efficient", "token_ids": p, "advisory": true}),
            "select.select.advisory.response.json",
        ),
        (
            "/select_and_reserve",
            json!({"model_name": "efficient", "token_ids": p, "selection_id": "s1"}),
            "select.select_and_reserve.response.json",
        ),
        (
            "/potential_loads",
            json!({"model_name": "efficient", "token_ids": p}),
            "select.potential_loads.response.json",
        ),
        (
            "/overlap_scores",
            json!({"model_name": "efficient", "token_ids": p}),
            "select.overlap_scores.response.json",
        ),
        (
            "/reservations/s1/prefill_complete",
            json!({}),
            "select.prefill_complete.response.json",
        ),
    ] {
        let (_, v) = post(&c, &sel, path, &body).await;
        has_shape(&v, &fixture_json(real), path);
    }
    let (_, loads) = get(&c, &sel, "/loads?model_name=efficient").await;
    has_shape(
        &loads,
        &fixture_json("select.loads.reserved.response.json"),
        "loads",
    );
    let (_, workers) = get(&c, &sel, "/workers").await;
    has_shape(
        &workers,
        &fixture_json("select.workers.list.response.json"),
        "workers",
    );
    let (_, ready) = get(&c, &sel, "/ready").await;
    has_shape(&ready, &fixture_json("select.ready.response.json"), "ready");
    let metrics = c
        .get(format!("{fe}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("dynamo_frontend_worker_active_prefill_tokens{dp_rank=\"0\",worker_id=\"")
    );
    assert!(
        metrics.contains("dynamo_frontend_model_max_num_batched_tokens{model=\"capable\"} 2048")
    );
    h.shutdown().await;
}

/// Runs a fixed sequence of requests; returns what must not depend on timing.
async fn scripted_run(seed: u64) -> (Vec<u64>, Vec<String>, Vec<Option<u64>>, Vec<u64>) {
    let mut cfg = SimConfig {
        seed,
        time_scale: 0.02,
        ..Default::default()
    };
    cfg.models[0].kv_blocks = 40;
    let h = start(cfg).await;
    let c = client();
    let (fe, sel) = (h.frontend_url(), h.selection_url());
    let ids = h.worker_ids("efficient");
    let mut texts = Vec::new();
    let mut cached = Vec::new();
    let mut picks = Vec::new();
    for i in 0..12u32 {
        // Shared prefixes and a small cache: hits and evictions both happen.
        let mut p = prompt(i % 3, 160);
        p.extend(prompt(100 + i, 48));
        let (_, a) = post(
            &c,
            &sel,
            "/select",
            &json!({"model_name": "efficient", "token_ids": p}),
        )
        .await;
        picks.push(a["worker_id"].as_u64().unwrap());
        let r = stream(&c, &fe, "efficient", &p, 5, Some(ids[(i % 2) as usize])).await;
        texts.push(r.texts.concat());
        cached.push(r.cached_tokens);
    }
    h.shutdown().await;
    (ids, texts, cached, picks)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_seed_same_tokens_ids_and_cache_decisions() {
    let a = scripted_run(7).await;
    let b = scripted_run(7).await;
    assert_eq!(a, b);
    assert!(
        a.2.iter().any(|c| c.unwrap_or(0) > 0),
        "some cache hits: {:?}",
        a.2
    );
    let other = scripted_run(8).await;
    assert_ne!(a.0, other.0, "worker ids depend on the seed");
    assert_ne!(a.1, other.1, "token ids depend on the seed");
}
