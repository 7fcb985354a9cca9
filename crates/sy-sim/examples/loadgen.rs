//! Load generator for the simulator's own throughput (zero step time).
//!
//! ```sh
//! cargo run --release -p sy-sim --example loadgen -- --concurrency 64 --seconds 5
//! cargo run --release -p sy-sim --example loadgen -- --concurrency 256 --seconds 5 --stream --max-tokens 16
//! ```
//! Starts the simulator in-process (time_scale 0, all step-time parameters 0) and drives
//! `POST /v1/completions` over keep-alive loopback connections; prints requests per second.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use sy_sim::{SimConfig, StepTimeConfig};

fn arg<T: std::str::FromStr>(name: &str, default: T) -> T {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() -> anyhow::Result<()> {
    let concurrency: usize = arg("--concurrency", 64);
    let seconds: f64 = arg("--seconds", 5.0);
    let max_tokens: u32 = arg("--max-tokens", 1);
    let threads: usize = arg("--threads", 2);
    let stream = std::env::args().any(|a| a == "--stream");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let mut cfg = SimConfig {
            time_scale: 0.0,
            ..SimConfig::default()
        };
        for m in &mut cfg.models {
            m.step = StepTimeConfig::zero();
        }
        let h = sy_sim::spawn(cfg).await?;
        let url: hyper::Uri = format!("{}/v1/completions", h.frontend_url()).parse()?;
        let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(concurrency)
            .build_http();
        let done = Arc::new(AtomicU64::new(0));
        let failed = Arc::new(AtomicU64::new(0));
        let tokens = Arc::new(AtomicU64::new(0));
        let deadline = Instant::now() + Duration::from_secs_f64(seconds);
        let t0 = Instant::now();
        let mut tasks = Vec::new();
        for t in 0..concurrency {
            let (client, url) = (client.clone(), url.clone());
            let (done, failed, tokens) = (done.clone(), failed.clone(), tokens.clone());
            tasks.push(tokio::spawn(async move {
                let mut i = 0u64;
                while Instant::now() < deadline {
                    i += 1;
                    let body = format!(
                        r#"{{"model":"efficient","prompt":[{t},{i},3,4,5,6,7,8],"max_tokens":{max_tokens},"stream":{stream}}}"#
                    );
                    let req = hyper::Request::post(url.clone())
                        .header("content-type", "application/json")
                        .body(Full::new(Bytes::from(body)));
                    let Ok(req) = req else { continue };
                    match client.request(req).await {
                        Ok(resp) if resp.status().is_success() => {
                            match resp.into_body().collect().await {
                                Ok(b) => {
                                    let b = b.to_bytes();
                                    if stream {
                                        let n = b.windows(6).filter(|w| w == b"data: ").count();
                                        tokens.fetch_add(n as u64, Ordering::Relaxed);
                                    }
                                    done.fetch_add(1, Ordering::Relaxed);
                                }
                                Err(_) => {
                                    failed.fetch_add(1, Ordering::Relaxed);
                                }
                            }
                        }
                        _ => {
                            failed.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
            }));
        }
        for t in tasks {
            let _ = t.await;
        }
        let secs = t0.elapsed().as_secs_f64();
        let n = done.load(Ordering::Relaxed);
        println!(
            "{} requests ({} failed) in {:.2} s: {:.0} req/s; concurrency {concurrency}, stream {stream}, max_tokens {max_tokens}, threads {threads}{}",
            n,
            failed.load(Ordering::Relaxed),
            secs,
            n as f64 / secs,
            if stream {
                format!(", {:.0} SSE events/s", tokens.load(Ordering::Relaxed) as f64 / secs)
            } else {
                String::new()
            }
        );
        h.shutdown().await;
        anyhow::Ok(())
    })
}
