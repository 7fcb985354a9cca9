//! The same plan and seed run twice against one (warm) deployment: the second run must not find
//! its "uncached" prompts in the prefix cache the first run filled. Each invocation mixes a
//! random invocation id into every prompt nonce (recorded in the manifest), so K and
//! `cached_tokens` are exactly what the plan primed, in both runs.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;
use std::collections::HashSet;
use std::time::Duration;

use common::*;
use sy_records::{Phase, Record, Status};

const PLAN: &str = "name = \"warm\"\nseed = 11\n[probe]\nmax_tokens = 2\nsettle_ms = 5\n\
                    [qgrid]\nn = [64, 256]\nf = [0.0, 0.5]\nrepeats = 3\n";

/// Block-aligned primed prefix: what the router can see as K (block size 16).
fn planned_k(r: &Record) -> u64 {
    let primed = sy_collect::schedule::primed_tokens(r.planned_n, r.planned_f);
    primed / 16 * 16
}

async fn run_once(
    sim: &sy_drive::sim::SimHandle,
    plan_path: &std::path::Path,
    run_dir: &std::path::Path,
) -> sy_collect::RunSummary {
    let plan = sy_collect::Plan::from_path(plan_path).unwrap();
    let opts = dynamo_options(sim, run_dir);
    tokio::time::timeout(Duration::from_secs(120), sy_collect::run(plan, opts))
        .await
        .expect("no hang")
        .expect("run")
}

fn assert_cache_as_planned(recs: &[Record], which: &str) {
    assert_eq!(recs.len(), 2 * 2 * 2 * 3, "{which}: every unit, both roles");
    let units: HashSet<_> = recs
        .iter()
        .map(|r| (r.condition_id.clone(), r.repeat, r.role))
        .collect();
    assert_eq!(units.len(), recs.len(), "{which}: no duplicate unit");
    for r in recs {
        assert_eq!(r.status, Status::Ok, "{which}: {r:?}");
        assert_eq!(r.phase, Phase::Qgrid);
        // Token-exact.
        assert_eq!(r.observed.n, Some(r.planned_n), "{which}: {r:?}");
        assert_eq!(r.prompt_tokens, Some(r.planned_n), "{which}: {r:?}");
        // No unplanned cache hit: the router sees exactly the primed prefix (whole blocks),
        // and so does the worker. An f = 0 unit of the second run would show K = N here if
        // it reused the first run's prompt.
        assert_eq!(r.observed.k, Some(planned_k(r)), "{which}: router K: {r:?}");
        assert_eq!(
            r.cached_tokens,
            Some(planned_k(r)),
            "{which}: cached_tokens: {r:?}"
        );
    }
}

#[test]
fn a_second_run_of_the_same_plan_and_seed_gets_no_unplanned_cache_hits() {
    let rt = runtime();
    rt.block_on(async {
        // One simulator for both runs: its prefix cache keeps what the first run sent.
        let cfg = sy_drive::sim::SimConfig {
            time_scale: 0.2,
            ..Default::default()
        };
        let sim = sy_drive::sim::spawn(cfg).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let plan = write(dir.path(), "plan.toml", PLAN);
        let (dir_a, dir_b) = (dir.path().join("a"), dir.path().join("b"));

        let workers: HashSet<u64> = ["efficient", "capable"]
            .iter()
            .flat_map(|m| sim.worker_ids(m))
            .collect();
        let a = run_once(&sim, &plan, &dir_a).await;
        let b = run_once(&sim, &plan, &dir_b).await;
        sim.shutdown().await;

        assert_cache_as_planned(&records(&dir_a), "first run");
        assert_cache_as_planned(&records(&dir_b), "second run (warm deployment)");
        // Every record names the worker its reservation booked: a real simulated worker, the one
        // that served the pinned request.
        for r in records(&dir_a).iter().chain(records(&dir_b).iter()) {
            let reserved = r.reserved_worker_id.expect("reserved worker recorded");
            assert!(workers.contains(&reserved), "{r:?}");
            assert_eq!(r.served_worker_id, Some(reserved), "{r:?}");
            assert_eq!(r.reserved_dp_rank, Some(0));
        }
        for (m, which) in [(&a.manifest, "first"), (&b.manifest, "second")] {
            assert!(m.complete, "{which}: {m:?}");
            assert_eq!(m.seed, 11);
            assert_eq!(m.loads_zero_at_end, Some(true));
            assert_eq!(m.invocation_ids.len(), 1, "{which}: {m:?}");
            assert_eq!(m.sessions[0].invocation_id, m.invocation_ids[0]);
        }
        assert_ne!(
            a.manifest.invocation_ids, b.manifest.invocation_ids,
            "each invocation draws its own id"
        );
        assert_eq!(a.manifest.plan_sha256, b.manifest.plan_sha256);
    });
}

/// A resumed run records one more invocation id, and units it runs use the new id.
#[test]
fn resume_records_a_new_invocation_id() {
    let dir = tempfile::tempdir().unwrap();
    let plan = write(dir.path(), "plan.toml", PLAN);
    let run_dir = dir.path().join("run");
    let out = run_sim(&plan, &run_dir, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let first = manifest(&run_dir);
    let out = run_sim(&plan, &run_dir, &["--resume"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let m = manifest(&run_dir);
    let ids: Vec<&str> = m["invocation_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 2, "{m}");
    assert_eq!(ids[0], first["invocation_ids"][0].as_str().unwrap());
    assert_ne!(ids[0], ids[1]);
    let sessions = m["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), 2);
    assert_eq!(sessions[1]["invocation_id"], ids[1]);
    assert_eq!(sessions[1]["resumed"], true);
}
