//! Overhead benchmark: how much the collector adds to what it measures, and how fast it can go.
//!
//! Runs the embedded simulator with an infinitely fast engine (all step costs zero) and an
//! injected, fixed first-token delay D (`faults.stall_rate = 1`, `stall_ms = D`), on its own
//! runtime thread, and drives it from a second runtime thread with the collector's streaming
//! client. For 1, 64 and 256 concurrent streams it reports the median, p99 and max of
//! |measured TTFT − D|. Then, with no delay, it reports the sustained request rate of the bare
//! streaming client and of the full accounting path (select_and_reserve → pinned stream →
//! prefill_complete → DELETE).
//!
//! Streams are driven in an *open loop*: one probe starts every D / streams, so `streams`
//! probes are in flight at steady state. A *closed loop* of identical requests with a constant
//! delay (each stream sends its next probe when the last one ends) phase-locks: streams whose
//! answers were handled in one wake-up stay synchronised for the rest of the run, clusters
//! only grow, and their first tokens fall due at the same instant — which measures how a
//! server serialises simultaneous first tokens, not what the client adds. The closed loop is
//! still available (SY_BENCH_CLOSED_LOOP=1) to show that effect.
//!
//! `cargo bench -p sy-collect --bench overhead` (env: SY_BENCH_DELAY_MS, default 200;
//! SY_BENCH_SECS per level, default 6; SY_BENCH_CLOSED_LOOP=1 adds the closed-loop table;
//! SY_BENCH_SIM_THREADS / SY_BENCH_CLIENT_THREADS, default 1 each).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use sy_drive::Driver;
use sy_dynamo::{Cancel, ClientConfig, CompletionClient, ProbeRequest, SelectionClient};

fn env_f64(name: &str, default: f64) -> f64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The workspace's one quantile (`sy_selector::quantile_sorted`), NaN when empty.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    sy_selector::quantile_sorted(sorted, q).unwrap_or(f64::NAN)
}

fn prompt(i: u64) -> Vec<u32> {
    (0..16)
        .map(|j| 1000 + ((i * 31 + j * 7) % 1000) as u32)
        .collect()
}

fn main() {
    let delay_ms = env_f64("SY_BENCH_DELAY_MS", 200.0);
    let secs = env_f64("SY_BENCH_SECS", 6.0);
    let sim_threads = env_f64("SY_BENCH_SIM_THREADS", 1.0).max(1.0) as usize;
    let sim_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(sim_threads)
        .thread_name("sim")
        .enable_all()
        .build()
        .unwrap();
    let client_threads = env_f64("SY_BENCH_CLIENT_THREADS", 1.0).max(1.0) as usize;
    let client_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(client_threads)
        .thread_name("client")
        .enable_all()
        .build()
        .unwrap();
    let mut cfg = sy_drive::sim::SimConfig::default();
    for m in &mut cfg.models {
        m.step = sy_drive::sim::StepTimeConfig::zero();
        m.max_num_seqs = 4096;
        m.kv_blocks = 1 << 20;
    }
    cfg.faults.stall_rate = 1.0;
    cfg.faults.stall_ms = delay_ms;
    let sim = sim_rt.block_on(sy_drive::sim::spawn(cfg)).unwrap();
    let config = ClientConfig::new(sim.frontend_url(), sim.selection_url());
    let http = config.http_client().unwrap();
    let client = Arc::new(CompletionClient::new(&config, http.clone()));

    println!("# sy-collect overhead benchmark");
    println!();
    println!(
        "injected first-token delay D = {delay_ms} ms; {secs} s per level; simulator and client on one runtime thread each"
    );
    let closed_loop = std::env::var("SY_BENCH_CLOSED_LOOP").is_ok_and(|v| v == "1");
    let schedules: &[&str] = if closed_loop {
        &["open", "closed"]
    } else {
        &["open"]
    };
    for &schedule in schedules {
        println!();
        println!("{schedule} loop:");
        println!();
        println!("| streams | probes | median abs(TTFT-D) ms | p99 ms | max ms | failures |");
        println!("|---:|---:|---:|---:|---:|---:|");
        for streams in [1u64, 64, 256] {
            let dur = Duration::from_secs_f64(secs);
            let (mut errs, failures) = if schedule == "open" {
                client_rt.block_on(open_loop_errors(client.clone(), streams, delay_ms, dur))
            } else {
                client_rt.block_on(ttft_errors(client.clone(), streams, delay_ms, dur))
            };
            errs.sort_by(f64::total_cmp);
            println!(
                "| {streams} | {} | {:.3} | {:.3} | {:.3} | {failures} |",
                errs.len(),
                quantile(&errs, 0.5),
                quantile(&errs, 0.99),
                errs.last().copied().unwrap_or(f64::NAN)
            );
        }
    }

    // Throughput with no delay.
    let mut no_delay = sim.faults();
    no_delay.stall_rate = 0.0;
    sim.set_faults(no_delay).unwrap();
    let selection = SelectionClient::new(&config, http.clone());
    let driver = Arc::new(Driver::new(
        CompletionClient::new(&config, http),
        selection.clone(),
        Cancel::new(),
        "bench".into(),
    ));
    println!();
    println!("| streams | bare stream req/s | accounting path req/s | failures |");
    println!("|---:|---:|---:|---:|");
    for streams in [16u64, 64, 128] {
        let d = Duration::from_secs_f64(secs / 2.0);
        let (bare, f1) = client_rt.block_on(rate(streams, d, {
            let client = client.clone();
            move |i| {
                let client = client.clone();
                async move {
                    let req = ProbeRequest {
                        model: "efficient".into(),
                        tokens: prompt(i),
                        max_tokens: 1,
                        worker_id: None,
                        dp_rank: None,
                        ignore_eos: false,
                    };
                    client.stream(&req, &Cancel::new(), || {}).await.is_ok()
                }
            }
        }));
        let (acc, f2) = client_rt.block_on(rate(streams, d, {
            let driver = driver.clone();
            move |i| {
                let driver = driver.clone();
                async move {
                    let cancel = driver.cancel.clone();
                    let a = driver
                        .accounted("efficient", prompt(i), 1, false, &cancel, "bench", || {})
                        .await;
                    a.failure().is_none()
                }
            }
        }));
        println!("| {streams} | {bare:.0} | {acc:.0} | {} |", f1 + f2);
    }
    let (r, p) = client_rt.block_on(async {
        sy_dynamo::selection::total_booked(&selection.loads(None).await.unwrap())
    });
    println!();
    println!("booked after the run: {r} requests, {p} prefill tokens (must be 0, 0)");
    sim_rt.block_on(sim.shutdown());
}

/// Open loop: one probe every `delay / streams` for `dur`, each on its own task, so `streams`
/// probes are in flight at steady state. Returns |TTFT − delay| of each probe started after a
/// warm-up of two delays, and the failure count.
async fn open_loop_errors(
    client: Arc<CompletionClient>,
    streams: u64,
    delay_ms: f64,
    dur: Duration,
) -> (Vec<f64>, u64) {
    let start = tokio::time::Instant::now();
    let warm = Duration::from_secs_f64(delay_ms / 1000.0 * 2.0);
    let every = Duration::from_secs_f64(delay_ms / 1000.0 / streams as f64);
    let failures = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for k in 0_u64.. {
        let at = start + every.mul_f64(k as f64);
        if at.duration_since(start) >= dur {
            break;
        }
        tokio::time::sleep_until(at).await;
        let client = client.clone();
        let failures = failures.clone();
        let measured = at.duration_since(start) >= warm;
        tasks.push(tokio::spawn(async move {
            let req = ProbeRequest {
                model: if k % 2 == 0 { "efficient" } else { "capable" }.into(),
                tokens: prompt(k),
                max_tokens: 1,
                worker_id: None,
                dp_rank: None,
                ignore_eos: false,
            };
            let o = client.stream(&req, &Cancel::new(), || {}).await;
            match o.ttft_ms {
                Some(t) if o.is_ok() => measured.then(|| (t - delay_ms).abs()),
                _ => {
                    failures.fetch_add(1, Ordering::Relaxed);
                    None
                }
            }
        }));
    }
    let mut errs = Vec::with_capacity(tasks.len());
    for t in tasks {
        errs.extend(t.await.unwrap());
    }
    (errs, failures.load(Ordering::Relaxed))
}

/// Closed loop of `streams` concurrent streams for `dur`; returns |TTFT − delay| of each probe
/// that started after a warm-up of one delay, and the failure count.
async fn ttft_errors(
    client: Arc<CompletionClient>,
    streams: u64,
    delay_ms: f64,
    dur: Duration,
) -> (Vec<f64>, u64) {
    let start = Instant::now();
    let warm = Duration::from_secs_f64(delay_ms / 1000.0 * 2.0);
    let failures = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for s in 0..streams {
        let client = client.clone();
        let failures = failures.clone();
        tasks.push(tokio::spawn(async move {
            // Stagger the starts over one delay so first tokens do not all land together.
            tokio::time::sleep(Duration::from_secs_f64(
                delay_ms / 1000.0 * s as f64 / streams as f64,
            ))
            .await;
            let mut out = Vec::new();
            let mut i = s << 32;
            while start.elapsed() < dur {
                let t0 = start.elapsed();
                i += 1;
                let req = ProbeRequest {
                    model: if s % 2 == 0 { "efficient" } else { "capable" }.into(),
                    tokens: prompt(i),
                    max_tokens: 1,
                    worker_id: None,
                    dp_rank: None,
                    ignore_eos: false,
                };
                let o = client.stream(&req, &Cancel::new(), || {}).await;
                match o.ttft_ms {
                    Some(t) if o.is_ok() => {
                        if t0 >= warm {
                            out.push((t - delay_ms).abs());
                        }
                    }
                    _ => {
                        failures.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            out
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    (all, failures.load(Ordering::Relaxed))
}

/// Closed loop of `streams` concurrent calls of `f` for `dur`; returns completions per second
/// and the failure count.
async fn rate<F, Fut>(streams: u64, dur: Duration, f: F) -> (f64, u64)
where
    F: Fn(u64) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = bool> + Send,
{
    let start = Instant::now();
    let done = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for s in 0..streams {
        let f = f.clone();
        let done = done.clone();
        let failed = failed.clone();
        tasks.push(tokio::spawn(async move {
            let mut i = (s << 32) | (1 << 31);
            while start.elapsed() < dur {
                i += 1;
                if f(i).await {
                    done.fetch_add(1, Ordering::Relaxed);
                } else {
                    failed.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let elapsed = start.elapsed().as_secs_f64();
    (
        done.load(Ordering::Relaxed) as f64 / elapsed,
        failed.load(Ordering::Relaxed),
    )
}
