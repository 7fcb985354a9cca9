//! Each frontend route's success and error answers, against the router served on
//! 127.0.0.1:0 in-process (no timing is asserted: `time_scale = 0` never sleeps).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use serde_json::{Value, json};

use crate::{FaultConfig, SimConfig, SimHandle};

async fn sim() -> SimHandle {
    sim_scaled(0.0).await
}

/// A simulator whose simulated time runs at `time_scale` (fault windows need one above 0).
async fn sim_scaled(time_scale: f64) -> SimHandle {
    let cfg = SimConfig {
        time_scale,
        ..SimConfig::default()
    };
    crate::spawn(cfg).await.unwrap()
}

async fn post(h: &SimHandle, path: &str, body: &str) -> (u16, String, String) {
    let r = reqwest::Client::new()
        .post(format!("{}{path}", h.frontend_url()))
        .header("content-type", "application/json")
        .body(body.to_owned())
        .send()
        .await
        .unwrap();
    answer(r).await
}

async fn get(h: &SimHandle, path: &str) -> (u16, String, String) {
    let r = reqwest::get(format!("{}{path}", h.frontend_url()))
        .await
        .unwrap();
    answer(r).await
}

/// Status, content type and body of an answer.
async fn answer(r: reqwest::Response) -> (u16, String, String) {
    let status = r.status().as_u16();
    let ctype = r
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    (status, ctype, r.text().await.unwrap())
}

fn json_of(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
}

/// Dynamo's error body: `{"error": {"message", "type", "code"}}` (or the flat variant); returns
/// the message.
fn error_message(body: &str) -> String {
    let v = json_of(body);
    let m = v
        .pointer("/error/message")
        .or_else(|| v.get("message"))
        .or_else(|| v.get("error"))
        .unwrap_or_else(|| panic!("no error message in {body}"));
    m.as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| m.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completions_answers_with_text_usage_and_worker() {
    let h = sim().await;
    let body = json!({
        "model": "efficient", "prompt": "hello there general", "max_tokens": 3,
        "nvext": {"extra_fields": ["worker_id", "timing"]}
    });
    let (status, ctype, text) = post(&h, "/v1/completions", &body.to_string()).await;
    assert_eq!(status, 200, "{text}");
    assert!(ctype.starts_with("application/json"));
    let v = json_of(&text);
    assert_eq!(v["model"], "efficient");
    assert_eq!(v["choices"].as_array().unwrap().len(), 1);
    assert_eq!(v["usage"]["completion_tokens"], 3);
    let worker = v.pointer("/nvext/worker_id").expect("worker id requested");
    let ids = h.worker_ids("efficient");
    let decode = worker["decode_worker_id"]
        .as_u64()
        .or(worker.as_u64())
        .unwrap();
    assert!(ids.contains(&decode), "{worker} not in {ids:?}");
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completions_streams_server_sent_events() {
    let h = sim().await;
    let body = json!({
        "model": "efficient", "prompt": [1, 2, 3, 4], "max_tokens": 2, "stream": true,
        "stream_options": {"include_usage": true}
    });
    let (status, ctype, text) = post(&h, "/v1/completions", &body.to_string()).await;
    assert_eq!(status, 200, "{text}");
    assert!(ctype.starts_with("text/event-stream"), "{ctype}");
    let events: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .collect();
    assert_eq!(events.last(), Some(&"[DONE]"), "{text}");
    let usage = events
        .iter()
        .filter(|e| **e != "[DONE]")
        .map(|e| json_of(e))
        .find(|v| !v["usage"].is_null())
        .expect("a usage chunk");
    assert_eq!(usage["usage"]["prompt_tokens"], 4);
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completions_refuses_bad_requests() {
    let h = sim().await;
    let (status, _, text) = post(&h, "/v1/completions", "not json").await;
    assert_eq!(status, 400);
    assert!(
        error_message(&text).contains("Invalid request body"),
        "{text}"
    );

    let unknown = json!({"model": "nope", "prompt": "x"}).to_string();
    let (status, _, text) = post(&h, "/v1/completions", &unknown).await;
    assert_eq!(status, 404);
    assert_eq!(error_message(&text), "Model not found");

    let batch = json!({"model": "efficient", "prompt": ["a", "b"]}).to_string();
    let (status, _, text) = post(&h, "/v1/completions", &batch).await;
    assert_eq!(status, 400);
    assert!(error_message(&text).contains("Batched prompts"), "{text}");

    let pinned = json!({
        "model": "efficient", "prompt": "x", "nvext": {"backend_instance_id": 12345}
    });
    let (status, _, text) = post(&h, "/v1/completions", &pinned.to_string()).await;
    assert_eq!(status, 400);
    assert_eq!(error_message(&text), "Invalid request");
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completions_answer_injected_errors_and_missing_instances() {
    let h = sim_scaled(1.0).await;
    h.set_faults(FaultConfig {
        error_rate: 1.0,
        error_status: 503,
        ..h.faults()
    })
    .unwrap();
    let body = json!({"model": "efficient", "prompt": "x", "max_tokens": 1}).to_string();
    let (status, _, text) = post(&h, "/v1/completions", &body).await;
    assert_eq!(status, 503);
    assert_eq!(error_message(&text), "Service temporarily unavailable");
    h.set_faults(FaultConfig::default()).unwrap();

    // The frontend forgot every instance: unpinned requests get 503.
    h.rediscover_workers(1e12).unwrap();
    let (status, _, text) = post(&h, "/v1/completions", &body).await;
    assert_eq!(status, 503);
    assert_eq!(error_message(&text), "No instances available");
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_answers_and_refuses() {
    let h = sim_scaled(1.0).await;
    let ok = json!({
        "model": "capable", "max_completion_tokens": 2,
        "messages": [{"role": "user", "content": "hi there"}]
    });
    let (status, _, text) = post(&h, "/v1/chat/completions", &ok.to_string()).await;
    assert_eq!(status, 200, "{text}");
    let v = json_of(&text);
    assert_eq!(v["model"], "capable");
    assert_eq!(v["choices"][0]["message"]["role"], "assistant");
    assert_eq!(v["usage"]["completion_tokens"], 2);

    let empty = json!({"model": "capable", "messages": []}).to_string();
    let (status, _, text) = post(&h, "/v1/chat/completions", &empty).await;
    assert_eq!(status, 400);
    assert!(error_message(&text).contains("'messages' field cannot be empty"));

    let unknown = json!({"model": "nope", "messages": [{"role": "user", "content": "x"}]});
    let (status, _, text) = post(&h, "/v1/chat/completions", &unknown.to_string()).await;
    assert_eq!(status, 404);
    assert_eq!(error_message(&text), "Model not found");

    let (status, _, text) = post(&h, "/v1/chat/completions", "[]").await;
    assert_eq!(status, 400);
    assert!(
        error_message(&text).contains("Invalid request body"),
        "{text}"
    );

    // The model registry is empty for a while: 404 even for a served model.
    h.forget_models(1e12).unwrap();
    let (status, _, _) = post(&h, "/v1/chat/completions", &ok.to_string()).await;
    assert_eq!(status, 404);
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn models_lists_every_model_sorted() {
    let h = sim().await;
    let (status, ctype, text) = get(&h, "/v1/models").await;
    assert_eq!(status, 200);
    assert!(ctype.starts_with("application/json"));
    let v = json_of(&text);
    let ids: Vec<&str> = v["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["capable", "efficient"]);
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_and_live_list_known_instances() {
    let h = sim_scaled(1.0).await;
    for path in ["/health", "/live"] {
        let (status, _, text) = get(&h, path).await;
        assert_eq!(status, 200, "{path}");
        let v = json_of(&text);
        assert_eq!(v["status"], "healthy");
        assert_eq!(v["instances"].as_array().unwrap().len(), 4, "{path}");
    }
    // While the frontend rediscovers its workers, it lists none.
    h.rediscover_workers(1e12).unwrap();
    let (status, _, text) = get(&h, "/health").await;
    assert_eq!(status, 200);
    assert!(json_of(&text)["instances"].as_array().unwrap().is_empty());
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_exposes_per_worker_and_per_model_gauges() {
    let h = sim().await;
    let (status, ctype, text) = get(&h, "/metrics").await;
    assert_eq!(status, 200);
    assert!(ctype.starts_with("text/plain"), "{ctype}");
    for id in h.worker_ids("efficient") {
        let line = format!(
            "{}{{dp_rank=\"0\",worker_id=\"{id}\",worker_type=\"decode\"}} 0",
            sy_wire::metric_names::WORKER_ACTIVE_PREFILL_TOKENS
        );
        assert!(text.contains(&line), "missing {line} in\n{text}");
    }
    let block = format!(
        "{}{{model=\"capable\"}} 16",
        sy_wire::metric_names::MODEL_KV_CACHE_BLOCK_SIZE
    );
    assert!(text.contains(&block), "missing {block} in\n{text}");
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_route_and_wrong_method_are_refused() {
    let h = sim().await;
    let (status, _, _) = get(&h, "/v1/nothing").await;
    assert_eq!(status, 404);
    let (status, _, _) = get(&h, "/v1/completions").await;
    assert_eq!(status, 405);
    h.shutdown().await;
}
