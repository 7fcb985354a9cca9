//! Integration tests against a real NVIDIA Dynamo 1.6.1 stack (frontend with the KV router, mocker
//! workers, selection service) on 127.0.0.1, started by `scripts/dynamo-local.sh` (via `scripts/test.sh`
//! or `.ci/run`). See `real_dynamo/stack.rs` for how the stack is found and why a missing stack fails
//! under `SY_REQUIRE_DYNAMO=1`. These tests run one at a time (`scripts/test.sh` uses --test-threads 1,
//! and each test holds a lock): several kill workers or restart the frontend.
//!
//! What they pin down is the accounting path sy-collect relies on: select_and_reserve → frontend pinned
//! with backend_instance_id → prefill_complete at the first token → DELETE, with the booked load (R, P),
//! the router's overlap K, the worker's cached_tokens and the served worker all agreeing.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "real_dynamo/stack.rs"]
mod stack;

use serde_json::json;
use stack::{BLOCK, Stack, fresh_tokens};

/// The whole accounting loop for one request per model: booked load appears on the reserved worker,
/// prefill_complete releases the prefill tokens, DELETE releases the request, a second DELETE is 404,
/// the served worker is the reserved one, and /loads is zero afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_dynamo_accounting_loop_books_and_releases() {
    let Some(stack) = Stack::acquire("real_dynamo_accounting_loop_books_and_releases").await else {
        return;
    };
    stack.assert_loads_zero("before").await;
    for model in ["efficient", "capable"] {
        let tokens = fresh_tokens(200);
        let id = format!("acct-{model}-{}", std::process::id());
        let a = stack.accounted(model, &tokens, 8, &id).await;
        assert_eq!(a.status, 200, "{model}: {a:?}");
        assert!(
            a.error_event.is_none() && a.transport_error.is_none(),
            "{model}: {a:?}"
        );
        // Booked at reserve time: one request, the whole uncached prompt as prefill tokens.
        assert_eq!(
            a.load_after_reserve,
            (1, 200),
            "{model}: R and booked prefill after reserve"
        );
        assert_eq!(a.selection["effective_prefill_tokens"].as_u64(), Some(200));
        // prefill_complete moves the booking from prefill to decode: R stays, prefill tokens go.
        assert_eq!(
            a.load_after_prefill_complete,
            (1, 0),
            "{model}: after prefill_complete"
        );
        assert_eq!(
            a.served_worker,
            Some(a.reserved_worker),
            "{model}: served worker = reserved worker"
        );
        assert_eq!(a.prompt_tokens, Some(200));
        assert_eq!(
            a.cached_tokens,
            Some(0),
            "{model}: a fresh prompt has no cache hit"
        );
        assert!(a.ttft.is_some() && a.output_chunks >= 1, "{model}: {a:?}");
        assert_eq!(
            (a.delete_status, a.second_delete_status),
            (200, 404),
            "{model}: DELETE then 404"
        );
    }
    stack.assert_loads_zero("after the loop").await;
}

/// Primed prefixes: K (the selection service's overlap.gpu) equals round(f·N) rounded down to whole
/// blocks, the worker's cached_tokens agrees, and the reservation lands on the primed worker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_dynamo_primed_prefix_k_matches_cached_tokens() {
    let Some(stack) = Stack::acquire("real_dynamo_primed_prefix_k_matches_cached_tokens").await
    else {
        return;
    };
    let n: usize = 256;
    for (i, f) in [0.25_f64, 0.5, 0.7].into_iter().enumerate() {
        for model in ["efficient", "capable"] {
            let prompt = fresh_tokens(n);
            let primed = (f * n as f64).round() as usize;
            let pid = format!("prime-{model}-{i}-{}", std::process::id());
            let prime = stack.accounted(model, &prompt[..primed], 1, &pid).await;
            assert_eq!(prime.status, 200, "{prime:?}");
            let want_k = (primed as u64 / BLOCK) * BLOCK;
            stack
                .wait_cached(model, prime.reserved_worker, &prompt, want_k)
                .await;
            let probe = stack
                .accounted(
                    model,
                    &prompt,
                    2,
                    &format!("probe-{model}-{i}-{}", std::process::id()),
                )
                .await;
            let k = probe.selection["overlap"]["gpu"].as_u64().unwrap();
            assert_eq!(k, want_k, "{model} f={f}: K = block-aligned round(f·N)");
            assert_eq!(
                probe.reserved_worker, prime.reserved_worker,
                "{model} f={f}: the router follows the cache"
            );
            assert_eq!(
                probe.cached_tokens,
                Some(k),
                "{model} f={f}: cached_tokens = K"
            );
            assert_eq!(
                probe.selection["effective_prefill_tokens"].as_u64(),
                Some(n as u64 - k)
            );
            assert_eq!(
                probe.load_after_reserve.1,
                n as u64 - k,
                "{model} f={f}: only uncached tokens are booked"
            );
            assert_eq!(probe.served_worker, Some(probe.reserved_worker));
        }
    }
    stack.assert_loads_zero("after priming").await;
}

/// R and P follow the booked background load: hold background reservations (large uncached prompts) on
/// one capable worker, then observe it the way the runtime does (advisory /select + /loads).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_dynamo_r_and_p_follow_background_bookings() {
    let Some(stack) = Stack::acquire("real_dynamo_r_and_p_follow_background_bookings").await else {
        return;
    };
    let target = stack.worker("capable-w0");
    let capacity = target.max_num_batched_tokens;
    let mut held = Vec::new();
    // Explicit reservations on one worker: each one adds a request to R. (On 1.6.1 the explicit form
    // books no prefill tokens; select_and_reserve, which sy-collect uses for every request, does.)
    for b in 0..3u64 {
        let id = format!("bg-{b}-{}", std::process::id());
        let body = json!({"selection_id": id, "model_name": "capable", "worker_id": target.worker_id,
                          "token_ids": fresh_tokens(300)});
        let (st, v) = stack.sel_post("/reservations", &body).await;
        assert_eq!(st, 201, "explicit reservation: {v}");
        held.push(id);
        assert_eq!(
            stack.load_of(target.worker_id).await.0,
            b + 1,
            "R counts each reservation"
        );
    }
    // select_and_reserve with large uncached prompts: books prefill tokens where it picks.
    let mut per_worker = std::collections::BTreeMap::<u64, (u64, u64)>::new();
    for b in 0..4u64 {
        let isl = 400 + 50 * b;
        let id = format!("bgp-{b}-{}", std::process::id());
        let body = json!({"model_name": "capable", "token_ids": fresh_tokens(isl as usize), "selection_id": id});
        let (st, v) = stack.sel_post("/select_and_reserve", &body).await;
        assert_eq!(st, 200, "{v}");
        let e = per_worker
            .entry(v["worker_id"].as_u64().unwrap())
            .or_default();
        e.0 += 1;
        e.1 += isl;
        held.push(id);
    }
    let booked = per_worker.get(&target.worker_id).map_or(0, |x| x.1);
    // /loads: R = explicit (3) + select_and_reserve on this worker; booked prefill tokens as summed.
    let (r, p_tokens) = stack.load_of(target.worker_id).await;
    assert_eq!(
        r,
        3 + per_worker.get(&target.worker_id).map_or(0, |x| x.0),
        "R on {}",
        target.name
    );
    assert_eq!(p_tokens, booked, "booked prefill tokens on {}", target.name);
    // The advisory select reports the same numerator for whichever worker it picks, and the real capacity.
    let (st, adv) = stack
        .sel_post(
            "/select",
            &json!({"model_name": "capable", "token_ids": fresh_tokens(64), "advisory": true}),
        )
        .await;
    assert_eq!(st, 200);
    let picked = adv["worker_id"].as_u64().unwrap();
    let (_, picked_tokens) = stack.load_of(picked).await;
    assert_eq!(
        adv["worker_load"]["active_prefill_tokens"].as_u64(),
        Some(picked_tokens),
        "{adv}"
    );
    assert_eq!(
        adv["worker_load"]["prefill_token_capacity"].as_u64(),
        Some(capacity),
        "{adv}"
    );
    let picked_blocks = stack
        .workers()
        .iter()
        .find(|w| w.worker_id == picked)
        .map(|w| w.total_kv_blocks);
    assert_eq!(
        adv["worker_load"]["total_kv_blocks"].as_u64(),
        picked_blocks,
        "{adv}"
    );
    // Releasing every booking brings everything back to zero.
    for id in held {
        assert_eq!(stack.sel_delete(&format!("/reservations/{id}")).await, 200);
    }
    stack
        .assert_loads_zero("after releasing the background")
        .await;
}

/// A worker killed with SIGKILL in the middle of a pinned stream: the client sees an error event (or a
/// broken stream), the reservation is still deleted, requests pinned to the dead id fail with 5xx, and
/// the restarted worker comes back with a new id that replaces the old one in the selection service.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_dynamo_worker_killed_mid_stream_then_replaced() {
    let Some(stack) = Stack::acquire("real_dynamo_worker_killed_mid_stream_then_replaced").await
    else {
        return;
    };
    let victim = stack.worker("efficient-w1");
    // Pin a long generation to the victim through the accounting path (explicit reservation on it).
    let id = format!("fault-{}", std::process::id());
    let (st, v) = stack
        .sel_post("/reservations", &json!({"selection_id": id, "model_name": "efficient", "worker_id": victim.worker_id, "token_ids": fresh_tokens(64)}))
        .await;
    assert_eq!(st, 201, "{v}");
    let body = json!({"model": "efficient", "prompt": fresh_tokens(64), "max_tokens": 4000, "stream": true,
                      "nvext": {"backend_instance_id": victim.worker_id}});
    let resp = stack
        .http
        .post(format!("{}/v1/completions", stack.frontend))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let mut stream = resp.bytes_stream();
    use futures::StreamExt;
    let mut seen = Vec::new();
    let mut killed = false;
    while let Some(chunk) = stream.next().await {
        let Ok(chunk) = chunk else { break };
        seen.extend_from_slice(&chunk);
        if !killed && seen.windows(6).filter(|w| w == b"data: ").count() >= 3 {
            stack.launcher(&["kill-worker", "efficient-w1"]);
            killed = true;
        }
    }
    let text = String::from_utf8_lossy(&seen);
    assert!(killed, "the stream ended before the kill: {text}");
    assert!(
        text.contains("\"error\""),
        "an error event must follow the kill: {}",
        &text[text.len().saturating_sub(400)..]
    );
    assert_eq!(
        stack.sel_delete(&format!("/reservations/{id}")).await,
        200,
        "the reservation is still ours to delete"
    );

    // Pinned to the dead id: 5xx, never a hang.
    let (st, _) = stack
        .call(
            reqwest::Method::POST,
            &format!("{}/v1/completions", stack.frontend),
            Some(&json!({"model": "efficient", "prompt": fresh_tokens(32), "max_tokens": 2, "nvext": {"backend_instance_id": victim.worker_id}})),
        )
        .await;
    assert!(
        (400..600).contains(&st),
        "pinned to a dead worker: HTTP {st}"
    );

    stack.launcher(&["start-worker", "efficient-w1"]);
    let back = stack.worker("efficient-w1");
    assert_ne!(
        back.worker_id, victim.worker_id,
        "a restarted worker has a new instance id"
    );
    let (_, workers) = stack.sel_get("/workers").await;
    let ids: Vec<u64> = workers
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["worker_id"].as_u64().unwrap())
        .collect();
    assert!(
        ids.contains(&back.worker_id) && !ids.contains(&victim.worker_id),
        "{ids:?}"
    );
    stack.wait_healthy().await;
    // The new worker serves through the accounting path.
    let tokens = fresh_tokens(48);
    let (st, v) = stack
        .sel_post("/reservations", &json!({"selection_id": format!("{id}-new"), "model_name": "efficient", "worker_id": back.worker_id, "token_ids": tokens}))
        .await;
    assert_eq!(st, 201, "{v}");
    let (st, v) = stack
        .call(
            reqwest::Method::POST,
            &format!("{}/v1/completions", stack.frontend),
            Some(&json!({"model": "efficient", "prompt": tokens, "max_tokens": 2, "nvext": {"backend_instance_id": back.worker_id, "extra_fields": ["worker_id"]}})),
        )
        .await;
    assert_eq!(st, 200, "{v}");
    assert_eq!(
        v["nvext"]["worker_id"]["decode_worker_id"].as_u64(),
        Some(back.worker_id)
    );
    assert_eq!(
        stack.sel_delete(&format!("/reservations/{id}-new")).await,
        200
    );
    stack.assert_loads_zero("after the worker fault").await;
}

/// The frontend killed (-9) and restarted while a stream is in flight: the client sees the stream break (not a hang),
/// the reservation is deleted, and once the frontend is back the accounting loop works again, with the
/// cache knowledge recovered from the workers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_dynamo_frontend_restart_mid_run() {
    let Some(stack) = Stack::acquire("real_dynamo_frontend_restart_mid_run").await else {
        return;
    };
    let prompt = fresh_tokens(128);
    let primed = stack
        .accounted(
            "efficient",
            &prompt[..64],
            1,
            &format!("fe-prime-{}", std::process::id()),
        )
        .await;
    assert_eq!(primed.status, 200);
    stack
        .wait_cached("efficient", primed.reserved_worker, &prompt, 64)
        .await;

    let id = format!("fe-{}", std::process::id());
    let (st, v) = stack
        .sel_post(
            "/select_and_reserve",
            &json!({"model_name": "capable", "token_ids": fresh_tokens(64), "selection_id": id}),
        )
        .await;
    assert_eq!(st, 200, "{v}");
    let worker = v["worker_id"].as_u64().unwrap();
    let body = json!({"model": "capable", "prompt": fresh_tokens(64), "max_tokens": 4000, "stream": true,
                      "nvext": {"backend_instance_id": worker}});
    let resp = stack
        .http
        .post(format!("{}/v1/completions", stack.frontend))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    let mut stream = resp.bytes_stream();
    use futures::StreamExt;
    let mut events = 0;
    let mut restarted = false;
    let mut broken = false;
    let mut done = false;
    while let Some(chunk) = stream.next().await {
        match chunk {
            Err(_) => {
                broken = true;
                break;
            }
            Ok(c) => {
                let s = String::from_utf8_lossy(&c).to_string();
                events += s.matches("data: ").count();
                done |= s.contains("[DONE]");
                if !restarted && events >= 3 {
                    stack.launcher(&["restart-frontend", "--kill"]);
                    restarted = true;
                }
            }
        }
    }
    assert!(restarted, "the stream ended before the restart");
    assert!(
        broken || !done,
        "a stream cut by a frontend restart must not look complete"
    );
    assert_eq!(stack.sel_delete(&format!("/reservations/{id}")).await, 200);
    stack.wait_healthy().await;
    // Back: the loop works, and the router still knows the primed prefix (recovered from the workers).
    let probe = stack
        .accounted(
            "efficient",
            &prompt,
            2,
            &format!("fe-probe-{}", std::process::id()),
        )
        .await;
    assert_eq!(probe.status, 200, "{probe:?}");
    assert_eq!(probe.selection["overlap"]["gpu"].as_u64(), Some(64));
    assert_eq!(probe.cached_tokens, Some(64));
    assert_eq!(probe.served_worker, Some(probe.reserved_worker));
    stack.assert_loads_zero("after the frontend restart").await;
}
