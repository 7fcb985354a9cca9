//! Helpers for the simulator's HTTP tests: a tiny streaming client with TTFT timing.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{Value, json};
use sy_sim::{SimConfig, SimHandle};

pub async fn start(cfg: SimConfig) -> SimHandle {
    sy_sim::spawn(cfg).await.expect("simulator starts")
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

/// Distinct token prompts: `n` tokens starting from `base`.
pub fn prompt(base: u32, n: usize) -> Vec<u32> {
    (0..n as u32)
        .map(|i| 5000 + (base.wrapping_mul(7919) + i) % 20000)
        .collect()
}

/// Outcome of one streamed completion.
#[derive(Debug, Default, Clone)]
pub struct Streamed {
    pub status: u16,
    pub ttft: Option<Duration>,
    pub total: Duration,
    pub texts: Vec<String>,
    pub events: Vec<Value>,
    pub done: bool,
    pub body_error: bool,
    pub cached_tokens: Option<u64>,
    pub worker: Option<u64>,
}

impl Streamed {
    pub fn ttft_ms(&self) -> f64 {
        self.ttft.expect("a first token").as_secs_f64() * 1000.0
    }
    /// The server's own timing (`nvext.timing`, on the final chunk): (ttft_ms, prefill_wait_time_ms).
    pub fn server_timing(&self) -> (f64, f64) {
        let t = self
            .events
            .iter()
            .rev()
            .find_map(|e| e["nvext"]["timing"].as_object())
            .expect("nvext.timing on a chunk");
        (
            t["ttft_ms"].as_f64().expect("timing.ttft_ms"),
            t["prefill_wait_time_ms"]
                .as_f64()
                .expect("timing.prefill_wait_time_ms"),
        )
    }
    pub fn errors(&self) -> Vec<&Value> {
        self.events
            .iter()
            .filter(|e| e.get("error").is_some())
            .collect()
    }
}

/// Streams a completion (`include_usage`, `extra_fields: worker_id, timing`).
pub async fn stream(
    c: &reqwest::Client,
    url: &str,
    model: &str,
    tokens: &[u32],
    max_tokens: u32,
    pin: Option<u64>,
) -> Streamed {
    let mut nvext = json!({"extra_fields": ["worker_id", "timing"]});
    if let Some(id) = pin {
        nvext["backend_instance_id"] = json!(id);
    }
    let body = json!({"model": model, "prompt": tokens, "max_tokens": max_tokens, "stream": true,
        "stream_options": {"include_usage": true}, "nvext": nvext});
    let t0 = Instant::now();
    let resp = c
        .post(format!("{url}/v1/completions"))
        .json(&body)
        .send()
        .await
        .unwrap();
    let mut out = Streamed {
        status: resp.status().as_u16(),
        ..Default::default()
    };
    if out.status != 200 {
        out.events.push(resp.json().await.unwrap_or(Value::Null));
        out.total = t0.elapsed();
        return out;
    }
    let mut s = resp.bytes_stream();
    let mut buf = String::new();
    while let Some(chunk) = s.next().await {
        let Ok(chunk) = chunk else {
            out.body_error = true;
            break;
        };
        buf.push_str(std::str::from_utf8(&chunk).unwrap());
        while let Some(pos) = buf.find("\n\n") {
            let ev: String = buf.drain(..pos + 2).collect();
            let data = ev.trim().strip_prefix("data:").unwrap().trim().to_owned();
            if data == "[DONE]" {
                out.done = true;
                continue;
            }
            let v: Value = serde_json::from_str(&data).unwrap();
            if let Some(t) = v["choices"][0]["text"].as_str()
                && !t.is_empty()
            {
                if out.ttft.is_none() {
                    out.ttft = Some(t0.elapsed());
                }
                out.texts.push(t.to_owned());
            }
            if let Some(ct) = v["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64() {
                out.cached_tokens = Some(ct);
            }
            if let Some(w) = v["nvext"]["worker_id"]["decode_worker_id"].as_u64() {
                out.worker = Some(w);
            }
            out.events.push(v);
        }
    }
    out.total = t0.elapsed();
    out
}

pub async fn post(c: &reqwest::Client, url: &str, path: &str, body: &Value) -> (u16, Value) {
    let r = c
        .post(format!("{url}{path}"))
        .json(body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

pub async fn get(c: &reqwest::Client, url: &str, path: &str) -> (u16, Value) {
    let r = c.get(format!("{url}{path}")).send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

pub async fn delete(c: &reqwest::Client, url: &str, path: &str) -> (u16, Value) {
    let r = c.delete(format!("{url}{path}")).send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// A config with one model of `workers` workers and the given step parameters.
pub fn one_model(workers: usize, time_scale: f64) -> SimConfig {
    let mut cfg = SimConfig::default();
    cfg.models.truncate(1);
    cfg.models[0].workers = workers;
    cfg.time_scale = time_scale;
    cfg
}
