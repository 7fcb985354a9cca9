//! Wire-format tests.
//!
//! 1. Hand-written samples in Dynamo 1.6.1's shapes (from the notes) round-trip.
//! 2. Every JSON fixture captured from the real Dynamo 1.6.1 under
//!    `tests/fixtures/dynamo-1.6.1/` deserialises into the struct named by its file name and
//!    re-serialises field for field (no field lost; `null` and absent are treated alike).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use sy_wire::*;

/// Drops `null` members (Dynamo writes `null` for some absent options; we skip them).
fn strip_nulls(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), strip_nulls(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(strip_nulls).collect()),
        other => other.clone(),
    }
}

fn roundtrip<T: DeserializeOwned + Serialize>(original: &Value, what: &str) -> T {
    let parsed: T = serde_json::from_value(original.clone())
        .unwrap_or_else(|e| panic!("{what}: does not deserialise: {e}\n{original}"));
    let back = serde_json::to_value(&parsed).unwrap();
    assert_eq!(
        strip_nulls(&back),
        strip_nulls(original),
        "{what}: round trip changed the JSON"
    );
    parsed
}

#[test]
fn worker_ids_above_2_pow_53_survive() {
    let id: u64 = 7_587_889_123_456_789_123;
    let v = serde_json::json!({
        "worker_id": id, "dp_rank": 0, "endpoint": "dyn://efficient.backend.generate/x",
        "block_size": 16,
        "overlap": {"longest_matched": 32, "gpu": 32, "dp": {"0": 32}, "cpu": 0, "disk": 0},
        "effective_prefill_tokens": 68, "potential_decode_blocks": 7,
        "sequence_hashes": [-5_000_000_000_000_000_123i64, 42],
        "worker_load": {"active_prefill_tokens": 0, "prefill_token_capacity": 2048, "total_kv_blocks": 2048}
    });
    let s: SelectResponse = roundtrip(&v, "select answer");
    assert_eq!(s.worker_id, id);
    assert_eq!(s.overlap.gpu, 32);
    assert_eq!(s.worker_load.unwrap().prefill_token_capacity, 2048);
    // Serialised as an integer literal, not a float.
    let text = serde_json::to_string(&SelectResponse {
        worker_id: id,
        ..SelectResponse::default()
    })
    .unwrap();
    assert!(text.contains("7587889123456789123"), "{text}");
}

#[test]
fn unknown_fields_are_kept() {
    let v = serde_json::json!({"worker_id": 1, "dp_rank": 0, "potential_prefill_tokens": 300,
        "potential_decode_blocks": 3, "active_requests": 1, "some_future_field": {"a": [1]}});
    let l: PotentialLoad = roundtrip(&v, "load");
    assert!(l.extra.contains_key("some_future_field"));
}

#[test]
fn requests_round_trip() {
    roundtrip::<CompletionRequest>(
        &serde_json::json!({"model": "efficient", "prompt": [1, 2, 3], "max_tokens": 8,
            "stream": true, "stream_options": {"include_usage": true},
            "nvext": {"backend_instance_id": 9_007_199_254_740_993u64,
                      "extra_fields": ["worker_id", "timing"], "ignore_eos": true}}),
        "completion request",
    );
    let chat: ChatCompletionRequest = roundtrip(
        &serde_json::json!({"model": "capable", "messages": [{"role": "user", "content": "hi"}],
            "nvext": {"token_data": [5, 6], "annotations": ["query_instance_id:"]}}),
        "chat request",
    );
    assert!(chat.nvext.unwrap().is_query_instance_id());
    let text: CompletionRequest =
        serde_json::from_value(serde_json::json!({"model": "m", "prompt": "hello"})).unwrap();
    assert_eq!(text.prompt, Prompt::Text("hello".into()));
}

#[test]
fn error_shapes() {
    let http: ErrorBody = roundtrip(
        &serde_json::json!({"message": "Model not found: x", "type": "Not Found", "code": 404}),
        "http error",
    );
    assert_eq!(http.status_code(), Some(404));
    let stream: ErrorBody = roundtrip(
        &serde_json::json!({"error": {"message": "worker gone", "type": "Service Unavailable", "code": 503}}),
        "stream error",
    );
    assert_eq!(stream.status_code(), Some(503));
    assert_eq!(stream.message_text(), Some("worker gone"));
    let sel: ErrorBody = roundtrip(
        &serde_json::json!({"error": "unknown model"}),
        "selection error",
    );
    assert_eq!(sel.message_text(), Some("unknown model"));
}

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/dynamo-1.6.1")
}

/// `data:` payloads of an SSE body, `[DONE]` excluded; also says whether `[DONE]` ended it.
fn sse_events(text: &str) -> (Vec<Value>, bool) {
    let mut out = Vec::new();
    let mut done = false;
    for line in text.lines() {
        let Some(data) = line.strip_prefix("data:") else {
            continue;
        };
        let data = data.trim();
        if data == SSE_DONE {
            done = true;
            continue;
        }
        out.push(serde_json::from_str(data).unwrap_or_else(|e| panic!("bad SSE data {data}: {e}")));
    }
    (out, done)
}

/// Checks one exchange of `index.json`; returns how many JSON bodies were round-tripped.
fn check_exchange(dir: &Path, ex: &Value) -> usize {
    let name = ex["name"].as_str().unwrap_or("?");
    let service = ex["service"].as_str().unwrap_or("");
    let method = ex["method"].as_str().unwrap_or("");
    let path = ex["path"].as_str().unwrap_or("");
    let status = ex["status"].as_u64().unwrap_or(0);
    let Some(resp_file) = ex["response"].as_str() else {
        return 0;
    };
    let text = std::fs::read_to_string(dir.join(resp_file)).unwrap();
    let what = format!("{name} ({resp_file})");
    let mut n = 0;
    // The request body, when one was sent and the server accepted it.
    if let Some(req_file) = ex.get("request").and_then(|r| r.as_str())
        && status < 400
    {
        let req: Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join(req_file)).unwrap()).unwrap();
        let what = format!("{name} ({req_file})");
        match (service, path) {
            ("frontend", "/v1/completions") => {
                roundtrip::<CompletionRequest>(&req, &what);
            }
            ("frontend", "/v1/chat/completions") => {
                roundtrip::<ChatCompletionRequest>(&req, &what);
            }
            ("selection", "/workers") => {
                roundtrip::<WorkerRegistration>(&req, &what);
            }
            ("selection", "/select" | "/select_and_reserve") => {
                roundtrip::<SelectRequest>(&req, &what);
            }
            ("selection", "/reservations") => {
                roundtrip::<ReservationRequest>(&req, &what);
            }
            ("selection", "/potential_loads" | "/overlap_scores") => {
                roundtrip::<PromptQuery>(&req, &what);
            }
            _ => {}
        }
        n += 1;
    }
    if path == "/metrics" || service == "worker" {
        return n;
    }
    if text.starts_with("data:") {
        let (events, done) = sse_events(&text);
        assert!(done, "{what}: stream did not end with [DONE]");
        for e in &events {
            if e.get("error").is_some() {
                let err: ErrorBody = roundtrip(e, &what);
                assert!(err.status_code().is_some_and(|c| c >= 500), "{what}");
            } else if path == "/v1/chat/completions" {
                roundtrip::<ChatCompletionChunk>(e, &what);
            } else {
                roundtrip::<CompletionResponse>(e, &what);
            }
            n += 1;
        }
        return n;
    }
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{what}: {e}"));
    if status >= 400 {
        let err: ErrorBody = roundtrip(&v, &what);
        assert!(err.message_text().is_some(), "{what}: no message");
        return n + 1;
    }
    match (service, method, path) {
        ("frontend", _, "/v1/models") => {
            roundtrip::<ModelList>(&v, &what);
        }
        ("frontend", _, "/health") => {
            let h: HealthResponse = roundtrip(&v, &what);
            assert!(h.instances.iter().all(|i| i.instance_id > 0));
        }
        ("frontend", _, "/v1/completions") => {
            roundtrip::<CompletionResponse>(&v, &what);
        }
        ("frontend", _, "/v1/chat/completions") => {
            roundtrip::<ChatCompletionResponse>(&v, &what);
        }
        ("selection", "GET", "/workers") => {
            roundtrip::<Vec<WorkerRecord>>(&v, &what);
        }
        ("selection", _, p) if p.starts_with("/workers") => {
            roundtrip::<WorkerRecord>(&v, &what);
        }
        ("selection", _, "/ready") => {
            roundtrip::<ReadyResponse>(&v, &what);
        }
        ("selection", _, "/select" | "/select_and_reserve") => {
            roundtrip::<SelectResponse>(&v, &what);
        }
        ("selection", _, "/potential_loads") => {
            roundtrip::<Vec<PotentialLoad>>(&v, &what);
        }
        ("selection", _, "/overlap_scores") => {
            roundtrip::<OverlapScoresResponse>(&v, &what);
        }
        ("selection", _, p) if p.starts_with("/loads") => {
            roundtrip::<Vec<ModelLoads>>(&v, &what);
        }
        ("selection", "POST", "/reservations") => {
            roundtrip::<ReservationResponse>(&v, &what);
        }
        ("selection", _, p) if p.starts_with("/reservations/") => {
            let s: StatusResponse = roundtrip(&v, &what);
            assert_eq!(s.status, "ok");
        }
        other => panic!("{what}: exchange {other:?} not mapped to a wire type"),
    }
    n + 1
}

#[test]
fn captured_dynamo_fixtures_round_trip() {
    let dir = fixtures_dir();
    let index: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("index.json")).expect("fixtures index.json"),
    )
    .unwrap();
    let exchanges = index.as_array().expect("index.json is a list");
    let bodies: usize = exchanges.iter().map(|ex| check_exchange(&dir, ex)).sum();
    assert!(bodies >= 100, "only {bodies} bodies checked");
}

#[test]
fn captured_metrics_have_the_gauges_we_read() {
    let text =
        std::fs::read_to_string(fixtures_dir().join("frontend.metrics.response.txt")).unwrap();
    for name in [
        metric_names::WORKER_ACTIVE_PREFILL_TOKENS,
        metric_names::WORKER_ACTIVE_DECODE_BLOCKS,
        metric_names::MODEL_TOTAL_KV_BLOCKS,
        metric_names::MODEL_KV_CACHE_BLOCK_SIZE,
        metric_names::MODEL_MAX_NUM_BATCHED_TOKENS,
    ] {
        assert!(text.contains(&format!("{name}{{")), "{name} missing");
    }
}
