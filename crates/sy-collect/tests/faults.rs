//! Fault injection through the simulator: failures are recorded with their class, transient
//! ones are retried, nothing hangs and no reservation leaks.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;
use std::collections::HashSet;
use std::time::{Duration, Instant};

use common::*;
use sy_collect::probe::worker_of_failed_priming;
use sy_records::{ErrorClass, Record, Status};

fn sim_config(faults: &str, extra: &str) -> String {
    format!(
        "seed = 5\ntime_scale = 1.0\n{extra}\n[[models]]\nname = \"efficient\"\n[[models]]\nname = \"capable\"\n[faults]\n{faults}\n"
    )
}

fn attempts(run_dir: &std::path::Path) -> Vec<Record> {
    let p = run_dir.join("attempts.jsonl");
    if !p.exists() {
        return Vec::new();
    }
    sy_records::jsonl::read::<Record>(&p).unwrap().records
}

#[test]
fn transient_errors_are_retried_and_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let sim = write(
        dir.path(),
        "sim.toml",
        &sim_config(
            "error_rate = 0.05\ndrop_rate = 0.05\ndrop_mode = \"close\"\ndrop_after_tokens = 1",
            "",
        ),
    );
    let plan = write(
        dir.path(),
        "plan.toml",
        "seed = 2\n[target]\nretries = 4\nretry_backoff_ms = 5\n[probe]\nmax_tokens = 3\nsettle_ms = 5\n[qgrid]\nn = [64, 256]\nf = [0.0, 0.5]\nrepeats = 5\n",
    );
    let run_dir = dir.path().join("run");
    let started = Instant::now();
    let out = run_sim(&plan, &run_dir, &["--sim-config", sim.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(started.elapsed() < Duration::from_secs(60));

    let recs = records(&run_dir);
    assert_eq!(recs.len(), 40, "every unit recorded once per role");
    let units: HashSet<_> = recs
        .iter()
        .map(|r| (r.condition_id.clone(), r.repeat, r.role))
        .collect();
    assert_eq!(units.len(), 40);
    for r in recs.iter().filter(|r| r.status == Status::Error) {
        assert!(r.error_class.is_some(), "{r:?}");
    }
    // Retried attempts are kept, with their class.
    let tried = attempts(&run_dir);
    assert!(
        !tried.is_empty(),
        "with 10% faulty requests some unit must have been retried"
    );
    let classes: HashSet<_> = tried.iter().filter_map(|r| r.error_class).collect();
    assert!(
        classes
            .iter()
            .all(|c| matches!(c, ErrorClass::Http5xx | ErrorClass::StreamDropped)),
        "{classes:?}"
    );
    assert!(recs.iter().any(|r| r.attempts > 1));
    let m = manifest(&run_dir);
    assert!(m["counts"]["retried_attempts"].as_u64().unwrap() > 0, "{m}");
    assert_eq!(m["loads_zero_at_end"], true, "{m}");
    assert_records_match_schema(&run_dir);
}

#[test]
fn persistent_errors_are_recorded_with_their_class() {
    let dir = tempfile::tempdir().unwrap();
    let sim = write(
        dir.path(),
        "sim.toml",
        &sim_config("error_rate = 1.0\nerror_status = 503", ""),
    );
    let plan = write(
        dir.path(),
        "plan.toml",
        "seed = 2\n[target]\nretries = 1\nretry_backoff_ms = 5\n[qgrid]\nn = [64]\nf = [0.0, 0.5]\nrepeats = 2\n",
    );
    let run_dir = dir.path().join("run");
    let out = run_sim(&plan, &run_dir, &["--sim-config", sim.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "failures are data, not a failed run: {}",
        stderr(&out)
    );
    let recs = records(&run_dir);
    assert_eq!(recs.len(), 8);
    for r in &recs {
        assert_eq!(r.status, Status::Error);
        assert_eq!(r.error_class, Some(ErrorClass::Http5xx), "{r:?}");
        assert_eq!(r.attempts, 2);
        assert!(r.error_message.as_deref().unwrap().contains("503"), "{r:?}");
        assert!(r.ttft_ms.is_none());
    }
    // The first attempts are kept too.
    assert_eq!(attempts(&run_dir).len(), 8);
    assert_eq!(manifest(&run_dir)["loads_zero_at_end"], true);
    assert_records_match_schema(&run_dir);
}

#[test]
fn stalls_time_out_without_hanging() {
    let dir = tempfile::tempdir().unwrap();
    let sim = write(
        dir.path(),
        "sim.toml",
        &sim_config("stall_rate = 1.0\nstall_ms = 20000", ""),
    );
    let plan = write(
        dir.path(),
        "plan.toml",
        "seed = 2\n[target]\nfirst_token_timeout_ms = 150\nrequest_timeout_ms = 1000\nretries = 1\nretry_backoff_ms = 5\n[qgrid]\nn = [64]\nf = [0.0]\nrepeats = 2\n",
    );
    let run_dir = dir.path().join("run");
    let started = Instant::now();
    let out = run_sim(&plan, &run_dir, &["--sim-config", sim.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    let recs = records(&run_dir);
    assert_eq!(recs.len(), 4);
    for r in &recs {
        assert_eq!(r.error_class, Some(ErrorClass::Timeout), "{r:?}");
        assert_eq!(r.attempts, 2);
    }
    assert_eq!(manifest(&run_dir)["loads_zero_at_end"], true);
}

/// A worker restarted mid-run (new id, registered by the deployment): units that hit the dead
/// worker fail with a class, are retried on another worker, and the new worker is used.
#[test]
fn a_vanished_worker_is_stepped_around_and_its_replacement_found() {
    let rt = runtime();
    rt.block_on(async {
        let mut cfg = sy_drive::sim::SimConfig::default();
        cfg.lifecycle.restart_delay_ms = 300.0;
        cfg.lifecycle.auto_register_restarted = true;
        let sim = sy_drive::sim::spawn(cfg).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let plan_path = write(
            dir.path(),
            "plan.toml",
            "seed = 4\n[target]\nretries = 4\nretry_backoff_ms = 20\n[probe]\nmax_tokens = 8\nsettle_ms = 5\n[qgrid]\nn = [256, 1024]\nf = [0.0, 0.5]\nrepeats = 6\n",
        );
        let plan = sy_collect::Plan::from_path(&plan_path).unwrap();
        let run_dir = dir.path().join("run");
        let opts = dynamo_options(&sim, &run_dir);
        let before: HashSet<u64> = sim.worker_ids("efficient").into_iter().collect();
        let victim = *before.iter().next().unwrap();
        let collector = tokio::spawn(sy_collect::run(plan, opts));
        tokio::time::sleep(Duration::from_millis(400)).await;
        let new_id = sim.restart_worker(victim).await.unwrap();
        let summary = tokio::time::timeout(Duration::from_secs(120), collector)
            .await
            .expect("no hang")
            .unwrap()
            .unwrap();
        sim.shutdown().await;
        assert!(summary.manifest.complete, "{:?}", summary.manifest);
        assert_eq!(summary.manifest.loads_zero_at_end, Some(true));
        let recs = records(&run_dir);
        assert_eq!(recs.len(), 48);
        let ok = recs.iter().filter(|r| r.status == Status::Ok).count();
        assert!(ok >= 46, "at most one unit may exhaust its retries: {ok}");
        // Later probes were served by the replacement worker.
        assert!(
            recs.iter().any(|r| r.served_worker_id == Some(new_id)),
            "the new worker {new_id} was never used"
        );
        assert!(recs
            .iter()
            .filter(|r| r.status == Status::Ok)
            .all(|r| r.served_worker_id != Some(victim) || r.sent_at_unix_ms > 0.0));
    });
}

/// Runs `plan_text` in-process against `sim` (as `--target dynamo` with the sim's URLs) while
/// `fault` runs once the first unit is on disk; returns the summary.
async fn run_with_fault<F, Fut>(
    sim: &sy_drive::sim::SimHandle,
    dir: &std::path::Path,
    plan_text: &str,
    fault: F,
) -> sy_collect::RunSummary
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let plan_path = write(dir, "plan.toml", plan_text);
    let plan = sy_collect::Plan::from_path(&plan_path).unwrap();
    let run_dir = dir.join("run");
    let opts = dynamo_options(sim, &run_dir);
    let collector = tokio::spawn(sy_collect::run(plan, opts));
    // Wait until the run is under way (some unit written), then inject.
    let records_path = run_dir.join("records.jsonl");
    let t0 = Instant::now();
    while std::fs::metadata(&records_path).map_or(0, |m| m.len()) == 0 {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the run never started"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    fault().await;
    tokio::time::timeout(Duration::from_secs(120), collector)
        .await
        .expect("no hang")
        .unwrap()
        .unwrap()
}

fn discovery_retries(run_dir: &std::path::Path) -> Vec<Record> {
    retried_with(run_dir, "HTTP 400")
}

/// Retried attempts that failed with `http4xx` whose message has `what` and says why it was
/// transient.
fn retried_with(run_dir: &std::path::Path, what: &str) -> Vec<Record> {
    attempts(run_dir)
        .into_iter()
        .filter(|r| {
            r.error_class == Some(ErrorClass::Http4xx)
                && r.error_message
                    .as_deref()
                    .is_some_and(|m| m.contains(what) && m.contains("transient"))
        })
        .collect()
}

/// The frontend forgets its instances for a while (a restarted frontend re-reading discovery):
/// pinned requests get HTTP 400 `Invalid request`. They are classified as transient (the
/// frontend's `/health` does not list the booked instance), retried with the bounded backoff
/// after re-reserving, and the plan completes with every unit ok and no reservation leaked.
#[test]
fn http_400_while_the_frontend_rediscovers_workers_is_retried() {
    let rt = runtime();
    rt.block_on(async {
        let sim = sy_drive::sim::spawn(sy_drive::sim::SimConfig::default()).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let summary = run_with_fault(
            &sim,
            dir.path(),
            "seed = 8\n[target]\nretries = 8\nretry_backoff_ms = 20\n[probe]\nmax_tokens = 4\nsettle_ms = 5\n[qgrid]\nn = [128, 512]\nf = [0.0, 0.5]\nrepeats = 4\n",
            || async {
                // 400 ms wall at time_scale 1: longer than a unit, shorter than the backoffs.
                sim.rediscover_workers(400.0).unwrap();
            },
        )
        .await;
        sim.shutdown().await;
        let run_dir = dir.path().join("run");
        let recs = assert_recovered(&summary, &run_dir, 32);
        // The 400s happened, were recorded with their class and why they count as transient.
        let retried = discovery_retries(&run_dir);
        assert!(
            !retried.is_empty(),
            "no unit hit the rediscovery window: {:?}",
            attempts(&run_dir)
        );
        assert!(
            retried
                .iter()
                .any(|r| r.error_message.as_deref().unwrap().contains("does not list instance")),
            "{retried:?}"
        );
        assert!(recs.iter().any(|r| r.attempts > 1));
        assert!(summary.manifest.counts.retried_attempts > 0);
        assert_records_match_schema(&run_dir);
    });
}

/// A restarted worker the selection service already books (registered by the deployment) but the
/// frontend has not discovered yet: requests pinned to it get HTTP 400, are retried, and once the
/// frontend lists it the new worker serves.
#[test]
fn http_400_for_a_just_restarted_worker_is_retried_until_it_is_discovered() {
    let rt = runtime();
    rt.block_on(async {
        let mut cfg = sy_drive::sim::SimConfig::default();
        cfg.lifecycle.restart_delay_ms = 100.0;
        cfg.lifecycle.discovery_delay_ms = 600.0;
        cfg.lifecycle.auto_register_restarted = true;
        let sim = sy_drive::sim::spawn(cfg).await.unwrap();
        let (victim, other) = {
            let ids = sim.worker_ids("efficient");
            (ids[0], ids[1])
        };
        let dir = tempfile::tempdir().unwrap();
        let new_id = std::sync::Arc::new(std::sync::Mutex::new(None));
        let summary = run_with_fault(
            &sim,
            dir.path(),
            "seed = 9\n[target]\nretries = 8\nretry_backoff_ms = 20\n[probe]\nmax_tokens = 4\nsettle_ms = 5\n[qgrid]\nn = [128, 512]\nf = [0.0, 0.5]\nrepeats = 5\n",
            || {
                let new_id = new_id.clone();
                let sim = &sim;
                async move {
                    // Only the replacement may be booked for `efficient`, so requests do land on
                    // it while the frontend has not discovered it yet.
                    sim.set_schedulable(other, false).unwrap();
                    let id = sim.restart_worker(victim).await.unwrap();
                    *new_id.lock().unwrap() = Some(id);
                }
            },
        )
        .await;
        sim.shutdown().await;
        let new_id = new_id.lock().unwrap().unwrap();
        let run_dir = dir.path().join("run");
        assert!(summary.manifest.complete, "{:?}", summary.manifest);
        assert_eq!(summary.manifest.loads_zero_at_end, Some(true));
        assert!(summary.manifest.outstanding_reservations.is_empty());
        let recs = records(&run_dir);
        assert_eq!(recs.len(), 40);
        // Units that hit the killed worker may fail before the restart; none fails with a 400.
        assert!(
            recs.iter().all(|r| r.error_class != Some(ErrorClass::Http4xx)),
            "{:?}",
            recs.iter().filter(|r| r.status != Status::Ok).collect::<Vec<_>>()
        );
        let ok = recs.iter().filter(|r| r.status == Status::Ok).count();
        assert!(ok >= 38, "at most one unit may exhaust its retries: {ok}");
        // A probe that hit it was booked on it; a priming that hit it (the fault may land on a
        // primed condition's unit) fails before the probe's reservation, so its record books no
        // worker and its message names the worker the priming was booked on.
        let retried = discovery_retries(&run_dir);
        let on_new = |r: &Record| {
            r.reserved_worker_id == Some(new_id)
                || r.error_message.as_deref().and_then(worker_of_failed_priming) == Some(new_id)
        };
        assert!(
            retried.iter().any(|r| on_new(r)
                && r
                    .error_message
                    .as_deref()
                    .unwrap()
                    .contains(&format!("instance {new_id}"))),
            "no request hit the undiscovered worker {new_id}: {:?}",
            attempts(&run_dir)
        );
        assert!(
            recs.iter().any(|r| r.served_worker_id == Some(new_id)),
            "the new worker {new_id} never served"
        );
        assert_records_match_schema(&run_dir);
    });
}

/// Right after a Dynamo 1.6.1 frontend restart, requests get HTTP 404 `Model not found` for a
/// moment (the instances are already listed). For a model the preflight found served that is
/// transient: retried, and the plan completes with every unit ok.
#[test]
fn http_404_model_not_found_after_a_frontend_restart_is_retried() {
    let rt = runtime();
    rt.block_on(async {
        let sim = sy_drive::sim::spawn(sy_drive::sim::SimConfig::default()).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let summary = run_with_fault(
            &sim,
            dir.path(),
            "seed = 10\n[target]\nretries = 8\nretry_backoff_ms = 20\n[probe]\nmax_tokens = 4\nsettle_ms = 5\n[qgrid]\nn = [128, 512]\nf = [0.0, 0.5]\nrepeats = 3\n",
            || async {
                sim.forget_models(300.0).unwrap();
            },
        )
        .await;
        sim.shutdown().await;
        let run_dir = dir.path().join("run");
        assert_recovered(&summary, &run_dir, 24);
        let retried = retried_with(&run_dir, "HTTP 404");
        assert!(
            retried
                .iter()
                .any(|r| r.error_message.as_deref().unwrap().contains("Model not found")),
            "no unit hit the window: {:?}",
            attempts(&run_dir)
        );
        assert_records_match_schema(&run_dir);
    });
}

/// The run completed, `/loads` is back to zero, no reservation is outstanding, and all
/// `expected` records are ok (every injected failure was retried away). Returns the records.
fn assert_recovered(
    summary: &sy_collect::RunSummary,
    run_dir: &std::path::Path,
    expected: usize,
) -> Vec<Record> {
    assert!(summary.manifest.complete, "{:?}", summary.manifest);
    assert_eq!(summary.manifest.loads_zero_at_end, Some(true));
    assert!(summary.manifest.outstanding_reservations.is_empty());
    let recs = records(run_dir);
    assert_eq!(recs.len(), expected);
    let failed: Vec<_> = recs.iter().filter(|r| r.status != Status::Ok).collect();
    assert!(failed.is_empty(), "every unit recovers: {failed:?}");
    recs
}

/// A client that sees the first token well after the frontend timed it (every model's first
/// event held 40 ms outside the frontend's TTFT timer, as a delayed ACK or a proxy would) is
/// refused by the preflight before anything is collected, naming the median gap over its probes.
#[test]
fn a_client_server_ttft_gap_above_the_bound_blocks_the_run() {
    let rt = runtime();
    rt.block_on(async {
        let mut cfg = sy_drive::sim::SimConfig::default();
        for m in &mut cfg.models {
            m.frontend_untimed_ms = 40.0;
        }
        let sim = sy_drive::sim::spawn(cfg).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let plan_path = write(
            dir.path(),
            "plan.toml",
            "seed = 3\n[probe]\nmax_tokens = 2\n[qgrid]\nn = [64]\nf = [0.0]\nrepeats = 1\n",
        );
        let run_dir = dir.path().join("run");
        let opts = dynamo_options(&sim, &run_dir);
        let plan = sy_collect::Plan::from_path(&plan_path).unwrap();
        let out = tokio::time::timeout(Duration::from_secs(60), sy_collect::run(plan, opts))
            .await
            .expect("no hang");
        sim.shutdown().await;
        let err = out.expect_err("the preflight must refuse the deployment");
        let msg = err.to_string();
        assert!(
            msg.contains("client TTFT exceeds the server's own TTFT by")
                && msg.contains("median over"),
            "{msg}"
        );
        assert!(!run_dir.join("records.jsonl").exists(), "nothing collected");
    });
}
