//! End to end through real HTTP: the sy-collect binary against the embedded simulator.
// End-to-end scenarios read top to bottom: the 120-line limit (clippy.toml) is for library and
// binary code.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

mod common;

/// `--dry-run --target sim` against the real run of every committed plan.
#[path = "e2e_sim/estimate.rs"]
mod estimate;
use common::*;
use sy_records::Model;
use sy_records::{Phase, Status};

const PLAN: &str = r#"
name = "e2e"
seed = 3
[probe]
max_tokens = 2
settle_ms = 10
[qgrid]
n = [64, 1024]
f = [0.0, 0.75]
repeats = 2
[load]
n = [256]
f = [0.0]
repeats = 2
prefill_contention = [0, 3]
prefill_prompt_tokens = 2048
decode_contention = [0, 3]
short_output_tokens = 4
long_output_tokens = 200
decode_prompt_tokens = 32
busy_capable = [false, true]
busy_capable_requests = 3
busy_capable_output_tokens = 200
warmup_ms = 40
"#;

#[test]
fn small_plan_completes_with_consistent_records() {
    let dir = tempfile::tempdir().unwrap();
    let plan = write(dir.path(), "plan.toml", PLAN);
    let run_dir = dir.path().join("run");
    let out = run_sim(&plan, &run_dir, &[]);
    assert!(out.status.success(), "{}", stderr(&out));

    // Units: qgrid 2×2×2 = 8; load 1×1×2 prefill × 3 decode levels × 2 busy × 2 repeats = 24.
    let recs = records(&run_dir);
    assert_eq!(recs.len(), 2 * (8 + 24));
    let failed: Vec<_> = recs.iter().filter(|r| r.status != Status::Ok).collect();
    assert!(failed.is_empty(), "{failed:?}");
    // One efficient and one capable record per probe, with the same prompt size.
    let mut units = std::collections::HashSet::new();
    for r in &recs {
        assert!(
            units.insert((r.condition_id.clone(), r.repeat, r.role)),
            "duplicate {r:?}"
        );
        assert_eq!(r.observed.n, Some(r.planned_n));
        assert_eq!(r.prompt_tokens, Some(r.planned_n));
        assert!(r.served_worker_id.is_some(), "{r:?}");
        // The booking is recorded on its own: the worker select_and_reserve booked is the one
        // the frontend reports as serving the pinned request.
        assert!(r.reserved_worker_id.is_some(), "{r:?}");
        assert_eq!(r.reserved_worker_id, r.served_worker_id, "{r:?}");
        assert_eq!(r.reserved_dp_rank, Some(0), "{r:?}");
        assert!(r.ttft_ms.unwrap() > 0.0);
    }
    assert_records_match_schema(&run_dir);

    // Manifest: complete, no leak.
    let m = manifest(&run_dir);
    assert_eq!(m["complete"], true, "{m}");
    assert_eq!(m["loads_zero_at_end"], true, "{m}");
    assert_eq!(m["outstanding_reservations"].as_array().unwrap().len(), 0);
    assert_eq!(m["counts"]["ok"], 64);
    assert!(run_dir.join("records.parquet").is_file());

    // Q grid: TTFT rises with uncached tokens, per model.
    for role in [Model::Efficient, Model::Capable] {
        let q = |n: u64, f: f64| {
            median(
                recs.iter()
                    .filter(|r| {
                        r.phase == Phase::Qgrid
                            && r.role == role
                            && r.planned_n == n
                            && r.planned_f == f
                    })
                    .map(|r| r.ttft_ms.unwrap())
                    .collect(),
            )
        };
        assert!(
            q(1024, 0.0) > q(64, 0.0),
            "{role:?}: {} vs {}",
            q(1024, 0.0),
            q(64, 0.0)
        );
        assert!(
            q(1024, 0.0) > q(1024, 0.75),
            "{role:?}: priming 75% must cut TTFT: {} vs {}",
            q(1024, 0.0),
            q(1024, 0.75)
        );
    }
    // Primed prefixes are seen by the router (K) and the worker (cached_tokens).
    for r in recs.iter().filter(|r| r.phase == Phase::Qgrid) {
        let primed = (r.planned_f * r.planned_n as f64).round() as u64;
        let k = r.observed.k.unwrap();
        assert!(
            k <= primed && primed - k < 16,
            "K {k} vs primed {primed}: {r:?}"
        );
        assert_eq!(r.cached_tokens, Some(k), "{r:?}");
        // No competing requests in the Q grid.
        assert_eq!(r.observed.prefill_tokens_booked, Some(0), "{r:?}");
    }

    // Load: R and P track the background load on the efficient candidate.
    let eff_load = |pred: &dyn Fn(&sy_records::Record) -> bool| -> Vec<&sy_records::Record> {
        recs.iter()
            .filter(|r| r.phase == Phase::Load && r.role == Model::Efficient && pred(r))
            .collect()
    };
    let idle =
        eff_load(&|r| r.background.prefill_requests == 0 && r.background.decode_requests == 0);
    assert!(
        idle.iter()
            .all(|r| r.observed.r == Some(0) && r.observed.p == Some(0.0)),
        "{idle:?}"
    );
    let prefill =
        eff_load(&|r| r.background.prefill_requests == 3 && r.background.decode_requests == 0);
    let mean = |v: &[&sy_records::Record], f: &dyn Fn(&sy_records::Record) -> f64| {
        v.iter().map(|r| f(r)).sum::<f64>() / v.len() as f64
    };
    assert!(
        mean(&prefill, &|r| r.observed.p.unwrap()) > 0.2,
        "prefill contention must show in P: {:?}",
        prefill
            .iter()
            .map(|r| (r.observed.r, r.observed.p))
            .collect::<Vec<_>>()
    );
    assert!(mean(&prefill, &|r| r.observed.r.unwrap() as f64) > 0.4);
    let decode =
        eff_load(&|r| r.background.prefill_requests == 0 && r.background.decode_requests == 3);
    assert!(
        mean(&decode, &|r| r.observed.r.unwrap() as f64) > 0.5,
        "decode contention must show in R: {:?}",
        decode
            .iter()
            .map(|r| (r.observed.r, r.observed.p))
            .collect::<Vec<_>>()
    );
    // A busy capable destination shows on the capable candidate.
    let busy_cap: Vec<_> = recs
        .iter()
        .filter(|r| r.phase == Phase::Load && r.role == Model::Capable && r.background.busy_capable)
        .collect();
    assert!(
        mean(&busy_cap, &|r| r.observed.r.unwrap() as f64) > 0.5,
        "{busy_cap:?}"
    );
    let idle_cap: Vec<_> = recs
        .iter()
        .filter(|r| {
            r.phase == Phase::Load && r.role == Model::Capable && !r.background.busy_capable
        })
        .collect();
    assert!(
        idle_cap.iter().all(|r| r.observed.r == Some(0)),
        "{idle_cap:?}"
    );
}

/// The simulator configuration the fit-config test measures ("the truth"): distinct TTFT
/// parameters per model, a 1024-token step budget (2048-token prompts take two chunks).
const KNOWN_SIM: &str = r#"
seed = 9
time_scale = 1.0
[[models]]
name = "efficient"
max_num_batched_tokens = 1024
[models.step]
base_ms = 8.0
prefill_ms_per_token = 0.01
cached_ms_per_token = 0.002
attention_ms_per_token_ctx = 0.004
[[models]]
name = "capable"
max_num_batched_tokens = 1024
[models.step]
base_ms = 16.0
prefill_ms_per_token = 0.02
cached_ms_per_token = 0.004
attention_ms_per_token_ctx = 0.008
"#;

/// Every Q-grid probe leaves after `settle_ms` with nothing of the collector's in flight: after
/// its priming, after the previous unit's probes when nothing is primed, and between the pair's
/// two candidates. A deployment answers a request that follows another at once sooner than one
/// that follows a quiet spell (docs/dynamo-verification.md, "Quiet before a probe"),
/// so the cells are comparable only when every probe waited the same.
#[test]
fn every_qgrid_probe_follows_settle_ms_of_quiet() {
    const SETTLE_MS: u32 = 60;
    let dir = tempfile::tempdir().unwrap();
    let plan = write(
        dir.path(),
        "plan.toml",
        &format!(
            "name = \"quiet\"\nseed = 4\n[probe]\nmax_tokens = 2\nsettle_ms = {SETTLE_MS}\n\
             [qgrid]\nn = [64, 256]\nf = [0.0, 0.5]\nrepeats = 2\n"
        ),
    );
    let run_dir = dir.path().join("run");
    let out = run_sim(&plan, &run_dir, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let mut recs = records(&run_dir);
    assert_eq!(recs.len(), 2 * 8);
    recs.sort_by(|a, b| a.sent_at_unix_ms.total_cmp(&b.sent_at_unix_ms));
    for w in recs.windows(2) {
        let (prev, next) = (&w[0], &w[1]);
        // The previous probe had its first token at sent + TTFT and ended after it.
        let quiet = next.sent_at_unix_ms - (prev.sent_at_unix_ms + prev.ttft_ms.unwrap());
        assert!(
            quiet >= f64::from(SETTLE_MS) - 1.0,
            "{} {:?} left {quiet:.1} ms after {} {:?} had its first token (settle_ms {SETTLE_MS})",
            next.probe_id,
            next.role,
            prev.probe_id,
            prev.role
        );
    }
    // Each candidate is observed right before its own probe (not both before the first).
    for r in &recs {
        let age = r.sent_at_unix_ms - r.observed.observed_at_unix_ms.unwrap();
        assert!(
            (0.0..f64::from(SETTLE_MS) / 2.0).contains(&age),
            "{} {:?} was sent {age:.1} ms after its observation",
            r.probe_id,
            r.role
        );
    }
}

/// `sy-sim fit-config`'s fitter on records the simulator produced with a known configuration:
/// starting from a base with the same capacities but the default step times, the fitted one predicts every Q-grid cell within 0.1 %
/// of what the known one does, and its base and per-token costs are the known ones (within 1 %).
#[test]
fn fit_config_recovers_the_simulator_configuration_from_its_records() {
    let dir = tempfile::tempdir().unwrap();
    let known = write(dir.path(), "known.toml", KNOWN_SIM);
    let plan = write(
        dir.path(),
        "plan.toml",
        "name = \"fit\"\nseed = 4\n[probe]\nmax_tokens = 2\nsettle_ms = 10\n[qgrid]\nn = [128, 768, 2048]\nf = [0.0, 0.5, 0.875]\nrepeats = 3\n",
    );
    let run_dir = dir.path().join("run");
    let out = run_sim(&plan, &run_dir, &["--sim-config", known.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let truth = sy_drive::sim::SimConfig::from_toml_path(&known).unwrap();
    let mut start = truth.clone();
    for m in &mut start.models {
        m.step = sy_drive::sim::config::StepTimeConfig::default();
    }
    let base = write(dir.path(), "base.toml", &toml::to_string(&start).unwrap());
    let fitted = dir.path().join("fitted.toml");
    let fitted_run =
        sy_drive::sim::fit_config::run(&run_dir.join("records.parquet"), None, &base, &fitted)
            .unwrap();
    let fits = &fitted_run.models;
    assert_eq!(fits.len(), 2);
    assert!(fitted_run.untimed.is_empty());
    let got = sy_drive::sim::SimConfig::from_toml_path(&fitted).unwrap();
    for fit in fits {
        assert_eq!(fit.target, "server_ttft_ms");
        assert_eq!(fit.cells.len(), 9, "{fit:?}");
        let want = &truth.models.iter().find(|m| m.name == fit.model).unwrap();
        let have = got.models.iter().find(|m| m.name == fit.model).unwrap();
        for (c, _) in &fit.cells {
            let p = |s: &sy_drive::sim::config::StepTimeConfig| {
                sy_drive::sim::fit_config::predict(s, c.n, c.cached, 1024, 1.0)
            };
            let (t, f) = (p(&want.step), p(&have.step));
            // An idle worker's server TTFT is the step model's whatever the host's load (the
            // simulator's clock), so the medians are the known model's to the nanosecond and
            // the fit recovers it.
            assert!(
                (f / c.ttft_ms - 1.0).abs() < 1e-3 && (f / t - 1.0).abs() < 1e-3,
                "{} N={} cached={}: fitted {f:.2} ms vs known {t:.2} ms (measured {:.2})",
                fit.model,
                c.n,
                c.cached,
                c.ttft_ms
            );
        }
        for (name, a, b) in [
            ("base_ms", have.step.base_ms, want.step.base_ms),
            (
                "prefill_ms_per_token",
                have.step.prefill_ms_per_token,
                want.step.prefill_ms_per_token,
            ),
        ] {
            assert!(
                (a / b - 1.0).abs() < 0.01,
                "{}: {name} {a} vs {b}",
                fit.model
            );
        }
        // Everything but the TTFT parameters is the base's.
        let d = start.models.iter().find(|m| m.name == fit.model).unwrap();
        assert_eq!(have.max_num_batched_tokens, d.max_num_batched_tokens);
        assert_eq!(have.step.decode_ms_per_seq, d.step.decode_ms_per_seq);
        assert_eq!(have.step.decode_ms_per_ctx, d.step.decode_ms_per_ctx);
    }
}
