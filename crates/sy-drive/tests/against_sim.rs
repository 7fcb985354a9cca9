//! The clients against the simulator through real HTTP on 127.0.0.1: TTFT timing, failure
//! classes, the accounting path and the observation adapter.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use sy_dynamo::observe::observe_candidate;
use sy_dynamo::selection::total_booked;
use sy_dynamo::{
    Cancel, ClientConfig, CompletionClient, ErrorClass, ProbeRequest, SelectionClient,
};

fn tokens(seed: u32, n: u32) -> Vec<u32> {
    (0..n)
        .map(|i| 1000 + (seed * 7919 + i * 31) % 1000)
        .collect()
}

async fn clients(sim: &sy_sim::SimHandle) -> (CompletionClient, SelectionClient) {
    let mut cfg = ClientConfig::new(sim.frontend_url(), sim.selection_url());
    cfg.first_token_timeout = Duration::from_millis(400);
    let http = cfg.http_client().unwrap();
    (
        CompletionClient::new(&cfg, http.clone()),
        SelectionClient::new(&cfg, http),
    )
}

fn zero_cost() -> sy_sim::SimConfig {
    let mut cfg = sy_sim::SimConfig::default();
    for m in &mut cfg.models {
        m.step = sy_sim::StepTimeConfig::zero();
    }
    cfg
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ttft_tracks_an_injected_first_token_delay() {
    let mut cfg = zero_cost();
    cfg.faults.stall_rate = 1.0;
    cfg.faults.stall_ms = 80.0;
    let sim = sy_sim::spawn(cfg).await.unwrap();
    let (c, _) = clients(&sim).await;
    for i in 0..5 {
        let req = ProbeRequest {
            model: "efficient".into(),
            tokens: tokens(i, 32),
            max_tokens: 3,
            worker_id: None,
            dp_rank: None,
            ignore_eos: true,
        };
        let o = c.stream(&req, &Cancel::new(), || {}).await;
        assert!(o.is_ok(), "{o:?}");
        let t = o.ttft_ms.unwrap();
        assert!((80.0..95.0).contains(&t), "ttft {t}");
        assert!(o.e2e_ms.unwrap() >= t);
        assert_eq!(o.output_tokens, Some(3));
        assert_eq!(o.prompt_tokens, Some(32));
        assert!(o.served_worker_id.is_some());
    }
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_are_classified() {
    let mut cfg = zero_cost();
    cfg.faults.error_rate = 1.0;
    let sim = sy_sim::spawn(cfg).await.unwrap();
    let (c, _) = clients(&sim).await;
    let req = ProbeRequest {
        model: "efficient".into(),
        tokens: tokens(1, 16),
        max_tokens: 2,
        worker_id: None,
        dp_rank: None,
        ignore_eos: false,
    };
    let o = c.stream(&req, &Cancel::new(), || {}).await;
    assert_eq!(o.error.as_ref().unwrap().kind, ErrorClass::Http5xx, "{o:?}");

    let mut f = sim.faults();
    f.error_rate = 0.0;
    f.drop_rate = 1.0;
    f.drop_after_tokens = 1;
    f.drop_mode = sy_sim::DropMode::ErrorEvent;
    sim.set_faults(f.clone()).unwrap();
    let o = c
        .stream(
            &ProbeRequest {
                max_tokens: 4,
                ..req.clone()
            },
            &Cancel::new(),
            || {},
        )
        .await;
    assert_eq!(
        o.error.as_ref().unwrap().kind,
        ErrorClass::StreamError,
        "{o:?}"
    );
    assert!(o.ttft_ms.is_some(), "the first token came before the error");

    f.drop_mode = sy_sim::DropMode::Close;
    sim.set_faults(f.clone()).unwrap();
    let o = c
        .stream(
            &ProbeRequest {
                max_tokens: 4,
                ..req.clone()
            },
            &Cancel::new(),
            || {},
        )
        .await;
    assert_eq!(
        o.error.as_ref().unwrap().kind,
        ErrorClass::StreamDropped,
        "{o:?}"
    );

    f.drop_rate = 0.0;
    f.stall_rate = 1.0;
    f.stall_ms = 5_000.0;
    sim.set_faults(f).unwrap();
    let o = c.stream(&req, &Cancel::new(), || {}).await;
    assert_eq!(o.error.as_ref().unwrap().kind, ErrorClass::Timeout, "{o:?}");

    // Cancellation ends a stalled stream at once.
    let cancel = Cancel::new();
    let c2 = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        c2.cancel();
    });
    let o = c.stream(&req, &cancel, || {}).await;
    assert_eq!(
        o.error.as_ref().unwrap().kind,
        ErrorClass::Cancelled,
        "{o:?}"
    );

    let mut bad = req.clone();
    bad.model = "nope".into();
    let o = c.stream(&bad, &Cancel::new(), || {}).await;
    assert!(o.error.is_some());
    sim.shutdown().await;

    // Nothing listening: a connect failure.
    let cfg = ClientConfig::new("http://127.0.0.1:9", "http://127.0.0.1:9");
    let c = CompletionClient::new(&cfg, cfg.http_client().unwrap());
    let o = c.stream(&req, &Cancel::new(), || {}).await;
    assert_eq!(o.error.as_ref().unwrap().kind, ErrorClass::Connect, "{o:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accounting_path_books_observes_and_releases() {
    let sim = sy_sim::spawn(sy_sim::SimConfig::default()).await.unwrap();
    let (c, s) = clients(&sim).await;
    let prompt = tokens(3, 300);
    let booking = s
        .select_and_reserve("efficient", &prompt, "t-1", Some(2), None)
        .await
        .unwrap();
    // The observation sees the booking on that worker.
    let obs = observe_candidate(&s, "efficient", &prompt).await;
    assert!(obs.error.is_none(), "{obs:?}");
    let f = obs.fields();
    assert_eq!(f.n, Some(300));
    assert_eq!(f.prefill_capacity_tokens, Some(2048));
    assert_eq!(f.schedulable, Some(true));
    assert!(f.observed_at_unix_ms.unwrap() > 1.6e12);
    let (r, p) = total_booked(&s.loads(None).await.unwrap());
    assert_eq!((r, p), (1, 300));
    let o = c
        .stream(
            &ProbeRequest {
                model: "efficient".into(),
                tokens: prompt.clone(),
                max_tokens: 2,
                worker_id: Some(booking.worker_id),
                dp_rank: None,
                ignore_eos: true,
            },
            &Cancel::new(),
            || {},
        )
        .await;
    assert!(o.is_ok(), "{o:?}");
    assert_eq!(o.served_worker_id, Some(booking.worker_id));
    s.prefill_complete("t-1").await.unwrap();
    s.release("t-1").await.unwrap();
    // A second delete is a 404, which counts as done.
    s.release("t-1").await.unwrap();
    assert!(s.ledger().outstanding().is_empty());
    assert_eq!(total_booked(&s.loads(None).await.unwrap()), (0, 0));
    // The same prompt is now cached on that worker: K is whole blocks of it.
    let obs = observe_candidate(&s, "efficient", &prompt).await;
    let f = obs.fields();
    assert_eq!(f.worker_id, Some(booking.worker_id));
    assert_eq!(f.k, Some(288));
    let o = obs.to_observation();
    assert_eq!(o.k, Some(288.0));
    sim.shutdown().await;
}
