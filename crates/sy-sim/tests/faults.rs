//! Fault injection through real HTTP: each fault looks to a client like the real Dynamo 1.6.1
//! (see `crates/sy-wire/tests/fixtures/dynamo-1.6.1/`, the `fault.*` exchanges).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::json;
use sy_sim::{DropMode, FaultConfig};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_rate_answers_5xx_in_dynamos_shape() {
    let h = start(one_model(1, 0.0)).await;
    let c = client();
    h.set_faults(FaultConfig {
        error_rate: 1.0,
        ..Default::default()
    })
    .unwrap();
    let r = stream(&c, &h.frontend_url(), "efficient", &prompt(1, 32), 2, None).await;
    assert_eq!(r.status, 503);
    assert_eq!(r.events[0]["code"], 503);
    assert!(r.events[0]["message"].is_string());
    // A fraction: about half fail.
    h.set_faults(FaultConfig {
        error_rate: 0.5,
        ..Default::default()
    })
    .unwrap();
    let mut fails = 0;
    for i in 0..200 {
        let (s, _) = post(
            &c,
            &h.frontend_url(),
            "/v1/completions",
            &json!({"model": "efficient", "prompt": prompt(i, 8), "max_tokens": 1}),
        )
        .await;
        if s == 503 {
            fails += 1;
        }
    }
    assert!(
        (60..140).contains(&fails),
        "{fails} of 200 failed at rate 0.5"
    );
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stall_delays_the_first_token() {
    let h = start(one_model(1, 0.1)).await;
    let c = client();
    let url = h.frontend_url();
    let base = stream(&c, &url, "efficient", &prompt(1, 64), 2, None).await;
    h.set_faults(FaultConfig {
        stall_rate: 1.0,
        stall_ms: 3000.0,
        ..Default::default()
    })
    .unwrap();
    let stalled = stream(&c, &url, "efficient", &prompt(2, 64), 2, None).await;
    assert!(stalled.done && stalled.texts.len() == 2);
    assert!(
        stalled.ttft_ms() >= 300.0,
        "stalled ttft {:.1} ms (base {:.1})",
        stalled.ttft_ms(),
        base.ttft_ms()
    );
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_streams_end_like_a_dead_worker_or_a_closed_connection() {
    let h = start(one_model(1, 0.0)).await;
    let c = client();
    let url = h.frontend_url();
    h.set_faults(FaultConfig {
        drop_rate: 1.0,
        drop_after_tokens: 3,
        ..Default::default()
    })
    .unwrap();
    let r = stream(&c, &url, "efficient", &prompt(1, 64), 10, None).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.texts.len(), 3);
    let errs = r.errors();
    assert_eq!(errs.len(), 1);
    assert_eq!(errs[0]["error"]["code"], 503);
    assert!(r.done, "error event then [DONE]");
    h.set_faults(FaultConfig {
        drop_rate: 1.0,
        drop_after_tokens: 3,
        drop_mode: DropMode::Close,
        ..Default::default()
    })
    .unwrap();
    let r = stream(&c, &url, "efficient", &prompt(2, 64), 10, None).await;
    assert_eq!(r.texts.len(), 3);
    assert!(!r.done, "no [DONE] on a closed connection");
    assert!(r.body_error);
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_worker_behaves_like_sigkill_and_restarts_with_a_new_id() {
    let mut cfg = one_model(2, 0.2);
    cfg.lifecycle.stale_listing_ms = 2000.0;
    cfg.lifecycle.restart_delay_ms = 500.0;
    let h = start(cfg).await;
    let c = client();
    let (fe, sel) = (h.frontend_url(), h.selection_url());
    let ids = h.worker_ids("efficient");
    let victim = ids[0];
    // A long stream on the victim, killed after a few tokens.
    let s = {
        let (c, fe) = (c.clone(), fe.clone());
        tokio::spawn(async move {
            stream(&c, &fe, "efficient", &prompt(1, 64), 2000, Some(victim)).await
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    h.kill_worker(victim).unwrap();
    let r = s.await.unwrap();
    assert_eq!(r.status, 200);
    assert!(!r.texts.is_empty() && r.texts.len() < 2000);
    assert_eq!(r.errors().len(), 1);
    assert_eq!(r.errors()[0]["error"]["code"], 503);
    assert!(r.done);
    // Pinned to the dead (still listed) worker: 500, both streamed and not.
    let (_, health) = get(&c, &fe, "/health").await;
    assert!(
        health["instances"]
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i["instance_id"].as_u64() == Some(victim))
    );
    let p = stream(&c, &fe, "efficient", &prompt(2, 16), 2, Some(victim)).await;
    assert_eq!(p.status, 500);
    assert_eq!(p.events[0]["message"], "Failed to generate completions");
    // Nobody told the selection service.
    let (_, workers) = get(&c, &sel, "/workers").await;
    assert!(
        workers
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w["worker_id"].as_u64() == Some(victim))
    );
    // After the stale period the frontend no longer lists it; unknown instance → 400.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (_, health) = get(&c, &fe, "/health").await;
    assert!(
        !health["instances"]
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i["instance_id"].as_u64() == Some(victim))
    );
    assert_eq!(
        stream(&c, &fe, "efficient", &prompt(3, 16), 2, Some(victim))
            .await
            .status,
        400
    );
    // Restart another worker: new id after the delay, served by the frontend.
    let t0 = Instant::now();
    let new_id = h.restart_worker(ids[1]).await.unwrap();
    assert!(t0.elapsed() >= Duration::from_millis(90));
    assert_ne!(new_id, ids[1]);
    assert!(new_id > (1u64 << 53));
    let ok = stream(&c, &fe, "efficient", &prompt(4, 16), 2, Some(new_id)).await;
    assert_eq!(ok.status, 200);
    assert_eq!(ok.worker, Some(new_id));
    // The selection service learns the new id only when registered.
    let (_, workers) = get(&c, &sel, "/workers").await;
    assert!(
        !workers
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w["worker_id"].as_u64() == Some(new_id))
    );
    let (s, rec) = post(
        &c,
        &sel,
        "/workers",
        &json!({"worker_id": new_id, "model_name": "efficient",
        "endpoint": format!("dyn://efficient.backend.generate/{new_id}"), "block_size": 16,
        "total_kv_blocks": 2048, "max_num_batched_tokens": 2048}),
    )
    .await;
    assert_eq!(s, 201);
    assert_eq!(rec["lifecycle"], "schedulable");
    assert_eq!(delete(&c, &sel, &format!("/workers/{victim}")).await.0, 200);
    assert_eq!(delete(&c, &sel, &format!("/workers/{victim}")).await.0, 404);
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unschedulable_worker_is_never_selected() {
    let h = start(one_model(2, 0.0)).await;
    let c = client();
    let sel = h.selection_url();
    let ids = h.worker_ids("efficient");
    h.set_schedulable(ids[0], false).unwrap();
    let (_, workers) = get(&c, &sel, "/workers").await;
    let w0 = workers
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["worker_id"].as_u64() == Some(ids[0]))
        .unwrap()
        .clone();
    assert_eq!(w0["lifecycle"], "unschedulable");
    for i in 0..20 {
        let (s, a) = post(
            &c,
            &sel,
            "/select",
            &json!({"model_name": "efficient", "token_ids": prompt(i, 40)}),
        )
        .await;
        assert_eq!(s, 200);
        assert_eq!(a["worker_id"].as_u64(), Some(ids[1]));
    }
    h.set_schedulable(ids[1], false).unwrap();
    let (s, e) = post(
        &c,
        &sel,
        "/select",
        &json!({"model_name": "efficient", "token_ids": prompt(1, 40)}),
    )
    .await;
    assert_eq!(s, 503);
    assert!(
        e["error"]
            .as_str()
            .unwrap()
            .contains("no schedulable workers")
    );
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_selection_answers() {
    let h = start(one_model(2, 0.1)).await;
    let c = client();
    h.set_faults(FaultConfig {
        selection_delay_ms: 2000.0,
        ..Default::default()
    })
    .unwrap();
    let t0 = Instant::now();
    let (s, _) = post(
        &c,
        &h.selection_url(),
        "/select",
        &json!({"model_name": "efficient", "token_ids": prompt(1, 40)}),
    )
    .await;
    assert_eq!(s, 200);
    assert!(
        t0.elapsed() >= Duration::from_millis(190),
        "{:?}",
        t0.elapsed()
    );
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_errors_have_dynamos_status_and_shape() {
    let mut cfg = one_model(1, 0.0);
    cfg.models[0].kv_blocks = 64;
    let h = start(cfg).await;
    let c = client();
    let (fe, sel) = (h.frontend_url(), h.selection_url());
    let (s, e) = post(
        &c,
        &fe,
        "/v1/completions",
        &json!({"model": "nope", "prompt": [1, 2], "max_tokens": 1}),
    )
    .await;
    assert_eq!(
        (s, e["code"].as_u64(), e["message"].as_str()),
        (404, Some(404), Some("Model not found"))
    );
    let (s, e) = post(
        &c,
        &fe,
        "/v1/chat/completions",
        &json!({"model": "efficient", "messages": []}),
    )
    .await;
    assert_eq!((s, e["code"].as_u64()), (400, Some(400)));
    let (s, _) = post(&c, &fe, "/v1/completions", &json!({"model": "efficient", "prompt": [1, 2], "nvext": {"backend_instance_id": 12345u64}})).await;
    assert_eq!(s, 400);
    // Larger than the KV capacity (64 blocks × 16): 500, or an error event when streaming.
    let big = prompt(1, 2000);
    let (s, e) = post(
        &c,
        &fe,
        "/v1/completions",
        &json!({"model": "efficient", "prompt": big, "max_tokens": 1}),
    )
    .await;
    assert_eq!((s, e["code"].as_u64()), (500, Some(500)));
    let r = stream(&c, &fe, "efficient", &big, 1, None).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.errors()[0]["error"]["code"], 500);
    assert!(r.done);
    // Selection service errors.
    let (s, e) = post(
        &c,
        &sel,
        "/select",
        &json!({"model_name": "nope", "token_ids": [1, 2, 3]}),
    )
    .await;
    assert_eq!(s, 503);
    assert!(e["error"].is_string());
    assert_eq!(
        post(&c, &sel, "/select", &json!({"model_name": "efficient"}))
            .await
            .0,
        400
    );
    assert_eq!(
        post(&c, &sel, "/workers", &json!({"model_name": "x"}))
            .await
            .0,
        422
    );
    let body = json!({"model_name": "efficient", "token_ids": [1, 2, 3], "selection_id": "dup"});
    assert_eq!(post(&c, &sel, "/select_and_reserve", &body).await.0, 200);
    assert_eq!(post(&c, &sel, "/select_and_reserve", &body).await.0, 409);
    assert_eq!(
        post(&c, &sel, "/reservations/none/prefill_complete", &json!({}))
            .await
            .0,
        404
    );
    assert_eq!(
        post(
            &c,
            &sel,
            "/reservations",
            &json!({"model_name": "efficient", "selection_id": "never"})
        )
        .await
        .0,
        404
    );
    assert_eq!(
        post(
            &c,
            &sel,
            "/reservations",
            &json!({"model_name": "efficient"})
        )
        .await
        .0,
        422
    );
    h.shutdown().await;
}

fn lists(health: &serde_json::Value, id: u64) -> bool {
    health["instances"]
        .as_array()
        .unwrap()
        .iter()
        .any(|i| i["instance_id"].as_u64() == Some(id))
}

/// A frontend rediscovering its workers (as after a restart) and a restarted worker the frontend
/// has not discovered yet: both unlisted in `/health`, pinned requests 400 `Invalid request`
/// (Dynamo 1.6.1's answer), then served once discovered; the selection service is unaffected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undiscovered_instances_answer_400_until_the_frontend_finds_them() {
    let mut cfg = one_model(2, 0.2);
    cfg.lifecycle.restart_delay_ms = 100.0;
    cfg.lifecycle.discovery_delay_ms = 1500.0; // 300 ms wall
    cfg.lifecycle.auto_register_restarted = true;
    let h = start(cfg).await;
    let c = client();
    let (fe, sel) = (h.frontend_url(), h.selection_url());
    let ids = h.worker_ids("efficient");

    // 1. The whole frontend rediscovers for 1000 sim ms (200 ms wall).
    h.rediscover_workers(1000.0).unwrap();
    let (_, health) = get(&c, &fe, "/health").await;
    assert!(
        health["instances"].as_array().unwrap().is_empty(),
        "{health}"
    );
    let p = stream(&c, &fe, "efficient", &prompt(1, 16), 2, Some(ids[0])).await;
    assert_eq!(p.status, 400);
    assert_eq!(p.events[0]["message"], "Invalid request");
    assert_eq!(p.events[0]["code"], 400);
    // The selection service still books it.
    let (_, workers) = get(&c, &sel, "/workers").await;
    assert_eq!(workers.as_array().unwrap().len(), 2);
    tokio::time::sleep(Duration::from_millis(250)).await;
    let (_, health) = get(&c, &fe, "/health").await;
    assert!(lists(&health, ids[0]) && lists(&health, ids[1]), "{health}");
    let ok = stream(&c, &fe, "efficient", &prompt(2, 16), 2, Some(ids[0])).await;
    assert_eq!(ok.status, 200);
    assert!(h.rediscover_workers(-1.0).is_err());

    // 1b. The model registry is empty for a moment: 404 `Model not found`, instances listed.
    h.forget_models(1000.0).unwrap();
    let p = stream(&c, &fe, "efficient", &prompt(5, 16), 2, Some(ids[0])).await;
    assert_eq!(p.status, 404);
    assert_eq!(p.events[0]["message"], "Model not found");
    let (_, health) = get(&c, &fe, "/health").await;
    assert!(lists(&health, ids[0]), "{health}");
    tokio::time::sleep(Duration::from_millis(250)).await;
    let ok = stream(&c, &fe, "efficient", &prompt(6, 16), 2, Some(ids[0])).await;
    assert_eq!(ok.status, 200);
    assert!(h.forget_models(f64::NAN).is_err());

    // 2. A restarted worker: registered and serving, but unknown to the frontend for a while.
    let new_id = h.restart_worker(ids[1]).await.unwrap();
    let (_, workers) = get(&c, &sel, "/workers").await;
    assert!(
        workers
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w["worker_id"].as_u64() == Some(new_id))
    );
    let (_, health) = get(&c, &fe, "/health").await;
    assert!(!lists(&health, new_id), "{health}");
    assert!(lists(&health, ids[0]));
    let p = stream(&c, &fe, "efficient", &prompt(3, 16), 2, Some(new_id)).await;
    assert_eq!(p.status, 400);
    tokio::time::sleep(Duration::from_millis(350)).await;
    let (_, health) = get(&c, &fe, "/health").await;
    assert!(lists(&health, new_id), "{health}");
    let ok = stream(&c, &fe, "efficient", &prompt(4, 16), 2, Some(new_id)).await;
    assert_eq!(ok.status, 200);
    assert_eq!(ok.worker, Some(new_id));
    h.shutdown().await;
}
