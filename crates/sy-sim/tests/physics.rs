//! Physics through real HTTP on 127.0.0.1: what the calibration measures must move TTFT.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use serde_json::json;

/// A fully cached prompt's TTFT is far below a cold one of the same length, and the worker
/// reports the hit in `cached_tokens`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cached_prompt_is_much_faster_than_cold() {
    let h = start(one_model(1, 0.5)).await;
    let c = client();
    let url = h.frontend_url();
    let p = prompt(1, 2000);
    let cold = stream(&c, &url, "efficient", &p, 2, None).await;
    let warm = stream(&c, &url, "efficient", &p, 2, None).await;
    assert_eq!(cold.cached_tokens, Some(0));
    // A prompt cached in full reuses all blocks but the one holding its last token, which is
    // computed again (vLLM's rule, the mocker's too: Dynamo 1.6.1 answers 480 for a repeated
    // 512-token prompt at block size 32). Block size 16: 124 of 125 blocks.
    assert_eq!(warm.cached_tokens, Some(1984));
    assert!(
        warm.ttft_ms() * 3.0 < cold.ttft_ms(),
        "warm {:.1} ms vs cold {:.1} ms",
        warm.ttft_ms(),
        cold.ttft_ms()
    );
    h.shutdown().await;
}

/// TTFT grows with the uncached part N·(1−f): same N, more cached → faster; more N → slower.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ttft_grows_with_uncached_tokens() {
    let h = start(one_model(1, 0.5)).await;
    let c = client();
    let url = h.frontend_url();
    let n = 2048;
    let mut ttfts = Vec::new();
    for (i, cached) in [0usize, 1024, 1792].into_iter().enumerate() {
        let base = 100 + i as u32;
        let full = prompt(base, n);
        if cached > 0 {
            // Prime the prefix, then send the full prompt.
            let primed = stream(&c, &url, "efficient", &full[..cached], 1, None).await;
            assert_eq!(primed.status, 200);
        }
        let r = stream(&c, &url, "efficient", &full, 1, None).await;
        assert_eq!(r.cached_tokens, Some(cached as u64));
        ttfts.push(r.ttft_ms());
    }
    assert!(ttfts[0] > ttfts[1] && ttfts[1] > ttfts[2], "{ttfts:?}");
    let short = stream(&c, &url, "efficient", &prompt(200, 256), 1, None).await;
    assert!(
        short.ttft_ms() < ttfts[0],
        "{} vs {}",
        short.ttft_ms(),
        ttfts[0]
    );
    h.shutdown().await;
}

/// On an idle worker the server's TTFT is the step-time model's (`sy_sim::fit_config::predict`,
/// chunking included), whatever the simulator's own request handling costs on this host: prefill
/// starts when the request reaches the frontend and the first token carries the step's end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_worker_server_ttft_is_the_step_model() {
    let cfg = one_model(1, 1.0);
    let m = cfg.models[0].clone();
    let h = start(cfg).await;
    let c = client();
    let url = h.frontend_url();
    let mbt = m.max_num_batched_tokens;
    for (i, (n, cached)) in [
        (128usize, 0usize),
        (1536, 1024),
        (2 * mbt as usize + 100, 0),
    ]
    .into_iter()
    .enumerate()
    {
        let full = prompt(500 + i as u32, n);
        if cached > 0 {
            stream(&c, &url, "efficient", &full[..cached], 1, None).await;
        }
        let r = stream(&c, &url, "efficient", &full, 1, None).await;
        assert_eq!(r.cached_tokens, Some(cached as u64));
        let (ttft, wait) = r.server_timing();
        let model = sy_sim::fit_config::predict(&m.step, n as u64, cached as u64, mbt, 1.0);
        assert!(
            (ttft - model).abs() < 0.01 && wait.abs() < 0.01,
            "N {n}, cached {cached}: server TTFT {ttft} ms (prefill wait {wait} ms) vs model {model} ms"
        );
        assert!(
            r.ttft_ms() >= ttft,
            "the client cannot see the token earlier"
        );
    }
    h.shutdown().await;
}

/// `request_plane_ms` is inside Dynamo's TTFT timer: an idle worker's server TTFT is the timing
/// model's plus exactly that much.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_plane_time_is_inside_the_server_ttft() {
    let mut cfg = one_model(1, 1.0);
    cfg.models[0].request_plane_ms = 3.0;
    let m = cfg.models[0].clone();
    let h = start(cfg).await;
    let (c, url) = (client(), h.frontend_url());
    let r = stream(&c, &url, "efficient", &prompt(900, 256), 1, None).await;
    let (ttft, _) = r.server_timing();
    let model = sy_sim::fit_config::predict(&m.step, 256, 0, m.max_num_batched_tokens, 1.0);
    assert!(
        (ttft - model - 3.0).abs() < 0.01,
        "server TTFT {ttft} ms vs model {model} ms + 3 ms"
    );
    h.shutdown().await;
}

/// A request that reaches a worker while its last step runs starts after that step, even when
/// the worker is idle by the time the engine reads it: its server TTFT includes the wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_arriving_during_the_last_step_waits_for_it() {
    let cfg = one_model(1, 1.0);
    let m = cfg.models[0].clone();
    let h = start(cfg).await;
    let (c, url) = (client(), h.frontend_url());
    let (long, short) = (prompt(700, 2000), prompt(701, 128));
    let first = stream(&c, &url, "efficient", &long, 1, None);
    let second = async {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        stream(&c, &url, "efficient", &short, 1, None).await
    };
    let (a, b) = tokio::join!(first, second);
    let mbt = m.max_num_batched_tokens;
    let model_a = sy_sim::fit_config::predict(&m.step, 2000, 0, mbt, 1.0);
    let model_b = sy_sim::fit_config::predict(&m.step, 128, 0, mbt, 1.0);
    let ((ttft_a, _), (ttft_b, wait_b)) = (a.server_timing(), b.server_timing());
    assert!((ttft_a - model_a).abs() < 0.01, "{ttft_a} vs {model_a}");
    // B reached the frontend ~20 ms (at most ~35 ms) after A and waited for A's step to end.
    assert!(
        wait_b > model_a - 35.0 && (ttft_b - wait_b - model_b).abs() < 0.01,
        "B: server TTFT {ttft_b} ms, prefill wait {wait_b} ms; A's step {model_a} ms, B's {model_b} ms"
    );
    h.shutdown().await;
}

/// `frontend_untimed_ms` delays what the client sees, not the server's own TTFT.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frontend_untimed_work_delays_the_client_only() {
    let mut cfg = one_model(1, 1.0);
    cfg.models[0].frontend_untimed_ms = 25.0;
    let m = cfg.models[0].clone();
    let h = start(cfg).await;
    let r = stream(
        &client(),
        &h.frontend_url(),
        "efficient",
        &prompt(600, 256),
        1,
        None,
    )
    .await;
    let (ttft, _) = r.server_timing();
    let model = sy_sim::fit_config::predict(&m.step, 256, 0, m.max_num_batched_tokens, 1.0);
    assert!(
        (ttft - model).abs() < 0.01,
        "server {ttft} vs model {model}"
    );
    assert!(
        r.ttft_ms() >= ttft + 25.0,
        "client {} vs server {ttft} + 25",
        r.ttft_ms()
    );
    h.shutdown().await;
}

/// Cached context is cheaper than fresh prefill but not free: Q(N, f=1) rises with N.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cached_context_is_not_free() {
    let mut cfg = one_model(1, 0.5);
    cfg.models[0].max_num_batched_tokens = 16384;
    cfg.models[0].kv_blocks = 8192;
    let h = start(cfg).await;
    let c = client();
    let url = h.frontend_url();
    let mut warm = Vec::new();
    for (i, n) in [512usize, 12288].into_iter().enumerate() {
        let p = prompt(300 + i as u32, n);
        stream(&c, &url, "efficient", &p, 1, None).await;
        let r = stream(&c, &url, "efficient", &p, 1, None).await;
        // All blocks but the last (see `cached_prompt_is_much_faster_than_cold`).
        assert_eq!(r.cached_tokens, Some(n as u64 - 16));
        warm.push(r.ttft_ms());
    }
    assert!(
        warm[1] > warm[0] + 15.0,
        "fully cached 512 vs 12288 tokens: {warm:?}"
    );
    h.shutdown().await;
}

/// Booked prefill ahead in the queue delays the probe.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ttft_grows_with_prefill_queued_ahead() {
    let h = start(one_model(1, 0.5)).await;
    let c = client();
    let url = h.frontend_url();
    let idle = stream(&c, &url, "efficient", &prompt(400, 512), 1, None).await;
    let mut bg = Vec::new();
    for i in 0..3 {
        let (c, url) = (c.clone(), url.clone());
        bg.push(tokio::spawn(async move {
            stream(&c, &url, "efficient", &prompt(500 + i, 3000), 1, None).await
        }));
    }
    tokio::time::sleep(std::time::Duration::from_millis(30)).await;
    let busy = stream(&c, &url, "efficient", &prompt(401, 512), 1, None).await;
    for b in bg {
        assert_eq!(b.await.unwrap().status, 200);
    }
    assert!(
        busy.ttft_ms() > idle.ttft_ms() + 50.0,
        "idle {:.1} ms, behind 9000 queued prefill tokens {:.1} ms",
        idle.ttft_ms(),
        busy.ttft_ms()
    );
    h.shutdown().await;
}

/// The proposal's key limitation: equal R, different remaining generation work, different TTFT.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn equal_request_counts_with_long_vs_short_generations_differ() {
    let mut cfg = one_model(2, 0.5);
    cfg.models[0].step.decode_ms_per_seq = 4.0;
    let h = start(cfg).await;
    let ids = h.worker_ids("efficient");
    let c = client();
    let url = h.frontend_url();
    let r = 16;
    let mut ttft = Vec::new();
    for (k, (worker, gen_tokens)) in [(ids[0], 3u32), (ids[1], 40u32)].into_iter().enumerate() {
        let mut bg = Vec::new();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<()>();
        for i in 0..r {
            let (c, url, tx) = (c.clone(), url.clone(), tx.clone());
            bg.push(tokio::spawn(async move {
                // Signal once the request is decoding, then finish the stream.
                let body = json!({"model": "efficient", "prompt": prompt(1000 + 100 * k as u32 + i, 64),
                    "max_tokens": gen_tokens, "stream": true, "nvext": {"backend_instance_id": worker}});
                let resp = c.post(format!("{url}/v1/completions")).json(&body).send().await.unwrap();
                let mut s = resp.bytes_stream();
                let mut signalled = false;
                use futures::StreamExt;
                while let Some(x) = s.next().await {
                    x.unwrap();
                    if !signalled {
                        signalled = true;
                        tx.send(()).unwrap();
                    }
                }
            }));
        }
        for _ in 0..r {
            rx.recv().await.unwrap();
        }
        // R background requests are decoding on both workers now; the probe is long enough to
        // need several prefill steps.
        let probe = stream(
            &c,
            &url,
            "efficient",
            &prompt(2000 + k as u32, 8192),
            1,
            Some(worker),
        )
        .await;
        ttft.push(probe.ttft_ms());
        for b in bg {
            b.await.unwrap();
        }
    }
    assert!(
        ttft[1] > ttft[0] * 1.1,
        "R={r} short generations {:.1} ms vs long generations {:.1} ms",
        ttft[0],
        ttft[1]
    );
    h.shutdown().await;
}

/// The accounting loop: `/select` overlap == the worker's `cached_tokens`; booked load moves
/// on reserve / prefill_complete / delete and returns to zero.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cached_tokens_match_select_overlap_and_loads_return_to_zero() {
    let h = start(sy_sim::SimConfig {
        time_scale: 0.05,
        ..Default::default()
    })
    .await;
    let c = client();
    let (fe, sel) = (h.frontend_url(), h.selection_url());
    let full = prompt(77, 100);
    // Prime 64 tokens on one worker.
    let w = h.worker_ids("efficient")[1];
    assert_eq!(
        stream(&c, &fe, "efficient", &full[..64], 1, Some(w))
            .await
            .status,
        200
    );
    let (s, adv) = post(
        &c,
        &sel,
        "/select",
        &json!({"model_name": "efficient", "token_ids": full, "advisory": true}),
    )
    .await;
    assert_eq!(s, 200);
    assert_eq!(adv["worker_id"].as_u64(), Some(w));
    assert_eq!(adv["overlap"]["gpu"], 64);
    assert_eq!(adv["effective_prefill_tokens"], 36);
    assert_eq!(adv["worker_load"]["prefill_token_capacity"], 2048);
    let (s, r) = post(
        &c,
        &sel,
        "/select_and_reserve",
        &json!({"model_name": "efficient", "token_ids": full, "selection_id": "probe-1"}),
    )
    .await;
    assert_eq!(s, 200);
    assert_eq!(r["worker_id"].as_u64(), Some(w));
    let (_, loads) = get(&c, &sel, "/loads?model_name=efficient").await;
    let row = loads[0]["loads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["worker_id"].as_u64() == Some(w))
        .unwrap()
        .clone();
    assert_eq!(row["potential_prefill_tokens"], 36);
    assert_eq!(row["active_requests"], 1);
    let out = stream(&c, &fe, "efficient", &full, 4, Some(w)).await;
    assert_eq!(out.cached_tokens, r["overlap"]["gpu"].as_u64());
    assert_eq!(out.worker, Some(w));
    assert_eq!(
        post(
            &c,
            &sel,
            "/reservations/probe-1/prefill_complete",
            &json!({})
        )
        .await
        .0,
        200
    );
    let (_, loads) = get(&c, &sel, "/loads?model_name=efficient").await;
    let row = loads[0]["loads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["worker_id"].as_u64() == Some(w))
        .unwrap()
        .clone();
    assert_eq!(row["potential_prefill_tokens"], 0);
    assert_eq!(row["active_requests"], 1);
    assert_eq!(delete(&c, &sel, "/reservations/probe-1").await.0, 200);
    assert_eq!(delete(&c, &sel, "/reservations/probe-1").await.0, 404);

    // Many concurrent bookings, every one deleted: everything back to zero.
    let mut tasks = Vec::new();
    for i in 0..40u32 {
        let (c, sel) = (c.clone(), sel.clone());
        tasks.push(tokio::spawn(async move {
            let id = format!("bg-{i}");
            let model = if i % 2 == 0 { "efficient" } else { "capable" };
            let (s, _) = post(&c, &sel, "/select_and_reserve", &json!({"model_name": model, "token_ids": prompt(i, 50 + i as usize * 7), "selection_id": id})).await;
            assert_eq!(s, 200);
            if i % 3 == 0 {
                assert_eq!(post(&c, &sel, &format!("/reservations/{id}/prefill_complete"), &json!({})).await.0, 200);
            }
            assert_eq!(delete(&c, &sel, &format!("/reservations/{id}")).await.0, 200);
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let (_, all) = get(&c, &sel, "/loads").await;
    for m in all.as_array().unwrap() {
        for l in m["loads"].as_array().unwrap() {
            assert_eq!(l["potential_prefill_tokens"], 0, "{l}");
            assert_eq!(l["potential_decode_blocks"], 0, "{l}");
            assert_eq!(l["active_requests"], 0, "{l}");
        }
    }
    h.shutdown().await;
}
