//! Real-Dynamo tests of the second topology (`TOPOLOGY=dp64` in `scripts/dynamo-local.sh`): KV block
//! size 64, three efficient workers and one capable worker with data-parallel size 2. `scripts/test.sh`
//! starts that stack for this test binary only (the other real-Dynamo tests assume the default one).
//!
//! What it pins down (issue 11): client TTFT agrees with Dynamo's own `nvext.timing` TTFT (the
//! delayed-ACK stall is gone); every probe pinned to the data-parallel worker names its rank and is
//! served there, on both ranks, with no HTTP 500; and every record's observation (N, K, R, P) is the
//! one of the worker and rank that was reserved and served, with the advisory pick kept beside it.

// End-to-end scenarios read top to bottom: the 120-line limit (clippy.toml) is for library and
// binary code.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

#[path = "real_dynamo/stack.rs"]
#[allow(dead_code)]
mod stack;

#[path = "real_dynamo/collect.rs"]
#[allow(dead_code)]
mod collect;

#[path = "real_dynamo/reference_client.rs"]
mod reference_client;

/// `sy-collect preflight` on every rank of the data-parallel workers.
#[path = "real_dynamo/dp_preflight.rs"]
mod dp_preflight;

use std::collections::BTreeMap;
use std::time::Duration;

use reference_client::Pin;
use serde_json::{Value, json};
use stack::Stack;

/// Preflight registers, primes and probes every (worker, rank) of the data-parallel workers and
/// names each misconfiguration with the worker and the rank.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_dynamo_dp_preflight_every_rank() {
    if !topology_is_dp64() {
        eprintln!("real_dynamo_dp_preflight_every_rank: SKIPPED: the stack is not TOPOLOGY=dp64");
        return;
    }
    let Some(stack) = Stack::acquire("real_dynamo_dp_preflight_every_rank").await else {
        return;
    };
    dp_preflight::every_rank(&stack).await;
}

/// `preflight --wait` against a data-parallel worker that is still starting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_dynamo_dp_preflight_waits_for_a_starting_worker() {
    if !topology_is_dp64() {
        eprintln!(
            "real_dynamo_dp_preflight_waits_for_a_starting_worker: SKIPPED: not TOPOLOGY=dp64"
        );
        return;
    }
    let Some(stack) = Stack::acquire("real_dynamo_dp_preflight_waits_for_a_starting_worker").await
    else {
        return;
    };
    dp_preflight::waits_for_a_starting_worker(&stack).await;
}

/// Q-grid cells over the block-64 grid plus a small load phase with prefill and decode contention.
pub(crate) const DP_PLAN: &str = r#"
name = "real-dynamo-dp64"
seed = 5

[target]
retries = 3
retry_backoff_ms = 300

[prompt]
vocab_min = 1000
vocab_max = 2000

[probe]
max_tokens = 2
settle_ms = 50

[qgrid]
n = [128, 512, 2048]
f = [0.0, 0.5, 0.9]
repeats = 5

[load]
n = [512]
f = [0.0]
repeats = 3
prefill_contention = [0, 3]
prefill_prompt_tokens = 1024
decode_contention = [0, 3]
short_output_tokens = 4
long_output_tokens = 300
decode_prompt_tokens = 64
busy_capable = [false]
warmup_ms = 150
"#;

fn topology_is_dp64() -> bool {
    std::env::var("SY_DYNAMO_TOPOLOGY").as_deref() == Ok("dp64")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_dynamo_dp64_fidelity() {
    if !topology_is_dp64() {
        eprintln!("real_dynamo_dp64_fidelity: SKIPPED: the stack is not TOPOLOGY=dp64");
        return;
    }
    let Some(stack) = Stack::acquire("real_dynamo_dp64_fidelity").await else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let plan = collect::write_plan(tmp.path(), "dp64", DP_PLAN);
    let run_dir = tmp.path().join("run");
    let child = collect::spawn_dynamo(&stack, &plan, &run_dir, collect::fresh_seed());
    let run = collect::finish(child, &run_dir, std::time::Duration::from_secs(300));
    assert!(run.output.status.success(), "{}", run.log());
    assert_eq!(run.manifest["complete"], true, "{}", run.log());
    assert_eq!(run.manifest["loads_zero_at_end"], true);
    assert_eq!(run.manifest["outstanding_reservations"], json!([]));
    collect::assert_records_validate(&run);
    collect::assert_pairs(&run.records);

    assert_clean_run(&run);
    assert_served_as_reserved(&run.records);
    assert_both_ranks_used(&stack, &run.records);
    assert_observation_is_of_the_reserved_worker(&run.records);
    let reference = reference_gaps(&stack).await;
    assert_client_matches_server(&run.records, &reference);
    assert_check_passes(&run_dir);
}

/// `sy-collect check` judges the clean real run fit: every check it can judge passes, and
/// check.json is written.
fn assert_check_passes(run_dir: &std::path::Path) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sy-collect"))
        .arg("check")
        .arg(run_dir)
        .arg("--json")
        .output()
        .unwrap();
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(0), "{text}");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["verdict"], "pass", "{text}");
    for c in v["checks"].as_array().unwrap() {
        // The plan's 3 to 5 records per condition are too few to judge saturation on (6 at least).
        let want = if c["name"] == "over_saturation" {
            "skipped"
        } else {
            "pass"
        };
        assert_eq!(c["outcome"], want, "{c}");
    }
    assert!(run_dir.join("check.json").is_file());
}

/// A clean run: every probe ok at its first attempt (no HTTP 500 for an incomplete pin, no retry).
fn assert_clean_run(run: &collect::CollectRun) {
    let bad: Vec<_> = run
        .records
        .iter()
        .filter(|r| !collect::is_ok(r) || collect::u(r, "attempts") != Some(1))
        .map(|r| (&r["probe_id"], &r["error_message"]))
        .collect();
    assert!(bad.is_empty(), "failed or retried probes: {bad:?}");
    assert!(
        run.attempts.is_empty(),
        "retried attempts: {:?}",
        run.attempts
    );
}

/// The frontend reports the reserved worker and rank for every probe.
fn assert_served_as_reserved(records: &[Value]) {
    for r in records {
        assert_eq!(
            (
                collect::u(r, "served_worker_id"),
                collect::u(r, "served_dp_rank")
            ),
            (
                collect::u(r, "reserved_worker_id"),
                collect::u(r, "reserved_dp_rank")
            ),
            "served = reserved (worker, rank) for {}",
            r["probe_id"]
        );
    }
}

/// The data-parallel worker served probes on both of its ranks.
fn assert_both_ranks_used(stack: &Stack, records: &[Value]) {
    let dp = stack.worker("capable-dp").worker_id;
    let mut ranks: BTreeMap<u64, usize> = BTreeMap::new();
    for r in records
        .iter()
        .filter(|r| collect::u(r, "served_worker_id") == Some(dp))
    {
        *ranks
            .entry(collect::u(r, "served_dp_rank").unwrap())
            .or_default() += 1;
    }
    assert_eq!(
        ranks.keys().copied().collect::<Vec<_>>(),
        [0, 1],
        "probes on both ranks of the DP=2 worker: {ranks:?}"
    );
}

/// N, K, R, P describe the reserved worker and rank: its id and rank are the record's, and K is the
/// cache hit the worker itself reported. The advisory pick is recorded and the disagreement flagged.
fn assert_observation_is_of_the_reserved_worker(records: &[Value]) {
    let mut differs = 0;
    for r in records {
        assert_eq!(
            (collect::u(r, "worker_id"), collect::u(r, "dp_rank")),
            (
                collect::u(r, "reserved_worker_id"),
                collect::u(r, "reserved_dp_rank")
            ),
            "observation of the reserved worker for {}",
            r["probe_id"]
        );
        assert_eq!(
            collect::u(r, "k"),
            collect::u(r, "cached_tokens"),
            "K = the served worker's cached_tokens for {}",
            r["probe_id"]
        );
        let flag = r["pick_differs"].as_bool().expect("pick_differs recorded");
        let same = collect::u(r, "advisory_worker_id") == collect::u(r, "reserved_worker_id")
            && collect::u(r, "advisory_dp_rank") == collect::u(r, "reserved_dp_rank");
        assert_eq!(flag, !same, "pick_differs flags a different advisory pick");
        differs += usize::from(flag);
    }
    eprintln!(
        "advisory pick differed from the reservation in {differs} of {} records",
        records.len()
    );
}

/// The `q`-quantile of ascending `sorted` values: the runtime crate's definition.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    sy_selector::quantile_sorted(sorted, q).expect("at least one gap")
}

/// A Q-grid cell: model, N, f (as the record prints it).
type Cell = (String, u64, String);

/// |gap| values per cell, sorted, and all of them sorted.
#[derive(Debug, Default)]
struct Gaps {
    cells: BTreeMap<Cell, Vec<f64>>,
    all: Vec<f64>,
}

impl Gaps {
    fn push(&mut self, cell: Cell, gap: f64) {
        self.cells.entry(cell).or_default().push(gap.abs());
        self.all.push(gap.abs());
    }

    fn sort(mut self) -> Self {
        for v in self.cells.values_mut() {
            v.sort_by(f64::total_cmp);
        }
        self.all.sort_by(f64::total_cmp);
        self
    }

    /// The `q` quantile over every cell of `model`.
    fn model_quantile(&self, model: &str, q: f64) -> Option<f64> {
        let mut v: Vec<f64> = (self.cells.iter())
            .filter(|(cell, _)| cell.0 == model)
            .flat_map(|(_, v)| v.iter().copied())
            .collect();
        v.sort_by(f64::total_cmp);
        (!v.is_empty()).then(|| quantile(&v, q))
    }
}

/// The plan's `settle_ms`: the quiet time before every Q-grid probe of both clients (50 ms; 150
/// until 3 Dec 2026, when every Q-grid probe started waiting it, not only primed ones: the
/// collection then took 17 s instead of 9, twice as long in which a stretch of a noisy machine
/// could land — one did in a fresh-clone CI run: 1 of 5 repeats of nearly every cell at 2–5.5 ms).
/// 50 ms is well past the ~10 ms after which Dynamo answers as after any longer quiet.
fn plan_settle() -> Duration {
    let plan = sy_collect::Plan::from_toml_str(DP_PLAN, std::path::Path::new("DP_PLAN"))
        .expect("the dp64 plan parses");
    Duration::from_millis(plan.probe.settle_ms)
}

/// Probes per Q-grid cell for the reference client (the collector has the plan's 5).
const REFERENCE_REPEATS: usize = 5;

/// The independent client's gaps on the plan's Q-grid cells, pinned like the collector's probes
/// (efficient workers in turn; the data-parallel capable worker on both ranks in turn), with the
/// plan's priming and settle time. Measured right after the collection, on the same stack.
async fn reference_gaps(stack: &Stack) -> Gaps {
    let efficient: Vec<u64> = stack
        .workers()
        .iter()
        .filter(|w| w.name.starts_with("efficient-w"))
        .map(|w| w.worker_id)
        .collect();
    let capable = stack.worker("capable-dp").worker_id;
    let frontend = stack.frontend.clone();
    tokio::task::spawn_blocking(move || {
        let settle = plan_settle();
        let warm = Pin {
            worker_id: capable,
            dp_rank: Some(0),
        };
        reference_client::probe(&frontend, "capable", warm, 128, 0, settle);
        let mut gaps = Gaps::default();
        for i in 0..REFERENCE_REPEATS {
            for n in [128u64, 512, 2048] {
                for f in [0.0, 0.5, 0.9] {
                    let primed = (f * n as f64).round() as usize;
                    let pins = [
                        (
                            "efficient",
                            Pin {
                                worker_id: efficient[i % efficient.len()],
                                dp_rank: None,
                            },
                        ),
                        (
                            "capable",
                            Pin {
                                worker_id: capable,
                                dp_rank: Some((i % 2) as u32),
                            },
                        ),
                    ];
                    for (model, pin) in pins {
                        let t = reference_client::probe(
                            &frontend, model, pin, n as usize, primed, settle,
                        );
                        gaps.push((model.to_owned(), n, format!("{}", json!(f))), t.gap_ms());
                    }
                }
            }
        }
        gaps.sort()
    })
    .await
    .unwrap()
}

/// How much the collector's |client − server| gap may exceed the independent client's (ms):
/// per Q-grid cell, overall median, and tail. The 35 ms delayed-ACK stall this test was written
/// for is far above each bound.
///
/// Per cell, the collector's median of 5 probes (3 until 3 Dec 2026) is held to the reference
/// client's p99 over the model's 45 probes plus `CELL_MARGIN_MS`, not to the reference's median:
/// a median of 5 draws from the reference's own distribution is above that distribution's p99
/// only when three of the five are (about 1e-5 per cell), so the bound measures an artifact, not
/// the machine's noise. The collector's draws are not quite the reference's: its gaps sit about
/// 0.3 ms higher (3 Dec 2026, idle, its N = 2048 probes 0.85–1.91 ms, every one positive; the
/// reference's in the same cells −0.21 to 1.72 ms), and with 3 probes a cell's median crossed
/// the bound in a fresh-clone CI run (0e333ef: 1.68–2.05 ms in three N = 2048 cells) and in one
/// of six local runs that day, each passing when run again. The history that led here: the
/// cell margin over the reference's median was 0.5 ms, then 0.75 ms after a fresh-clone CI run
/// (2 Dec 2026, e4552c3, quiet machine) measured one cell 0.57 ms over; a later one (2 Dec 2026, 14e1ba3, idle, the machine
/// slower that day: reference median 1.37 ms against 0.85–0.88 before) measured cells 0.93 and
/// 0.82 ms over, while the reference's own cells spread from 1.04 to 2.06 ms, 0.69 ms above its
/// model median — the reference would nearly have failed its own bound. A median of 3 probes
/// spreads that much on two busy cores.
///
/// Measured before the fidelity change (1 Dec 2026, idle, 3 runs): the collector's overall median
/// gap 0.83–0.88 ms, p99 1.21–1.44 ms; the same reference client (then in Python) 0.91–0.94 ms. A
/// CI run on a busier machine measured the collector's overall median at 1.06 ms, and the
/// project's CI machine failed an absolute bound of 1.25 ms: the frontend's own floor (the
/// reference client's gap) grows when the machine is busier, so absolute bounds measure the
/// machine, and every bound here is relative to the reference measured in the same test.
const CELL_MARGIN_MS: f64 = 0.5;
/// The overall median's margin was 0.25 ms until two fresh-clone CI runs on one slow day
/// (2 Dec 2026; the reference client's median 1.37 and 1.30 ms, against 0.85–1.05 ms the day
/// before) measured the collector 0.20 and 0.35 ms above the reference, where earlier runs had
/// it 0.03–0.10 ms above. The collector's excess grew with the machine's slowness; its observations
/// and reservations keep the selection service busy on the same two cores right before each
/// probe, which the reference client does not do (that today's larger excess comes from there was
/// not measured further). 0.5 ms is still 70 times below the stall.
const MEDIAN_MARGIN_MS: f64 = 0.5;
const TAIL_MS: f64 = 3.0;
/// The tail bound: the collector's Q-grid gaps may exceed `TAIL_MS`, or the reference's p99 plus
/// this margin, on at most `STRAY_PROBES` of its 90 probes (54 until 3 Dec 2026). The margin over
/// the reference's p99 was 1 ms until a slow day (2 Dec 2026) measured single probes at 4–5 ms:
/// p99 4.65 ms against the reference's 2.82 (CI, 1e1023d) and 3.85 against 2.63 (local, fresh
/// dp64 stack). 3 ms keeps the bound about six times below the 35 ms stall.
const TAIL_MARGIN_MS: f64 = 3.0;
/// Probes allowed over the tail bound. Until 5 Dec 2026 the bound held the collector's p99, which
/// over 90 probes is interpolated between the two largest: one stray probe failed the project's
/// CI on 088a45a (gaps 9.96 and 3.86 ms, then 1.41 ms and below, against a bound of 4.24 ms; the
/// reference's 90 probes p99 1.24 ms, every cell's median within 0.2 ms of the reference's). A
/// lone stray probe is the machine's; an artifact of the collector shows on many: one stalling
/// every tenth probe puts about 9 of 90 over the bound and fails with probability above 0.99,
/// one stalling every twentieth about 4.5 (fails with probability about 0.83).
const STRAY_PROBES: usize = 2;

/// The collector's five largest Q-grid gaps, with when they were sent (seconds after the first
/// Q-grid probe) and their repeat: a stretch of a noisy machine shows as neighbours in time.
fn print_slowest(records: &[Value]) {
    let mut q: Vec<&Value> = records.iter().filter(|r| r["phase"] == "qgrid").collect();
    let t0 = q
        .iter()
        .filter_map(|r| collect::f(r, "sent_at_unix_ms"))
        .fold(f64::INFINITY, f64::min);
    let gap = |r: &Value| collect::f(r, "client_server_gap_ms").unwrap_or(f64::NAN);
    q.sort_by(|a, b| gap(b).total_cmp(&gap(a)));
    for r in q.iter().take(5) {
        eprintln!(
            "slow probe: gap {:.2} ms, {} {} repeat {}, sent {:.1} s after the first",
            gap(r),
            r["role"].as_str().unwrap_or("?"),
            r["condition_id"].as_str().unwrap_or("?"),
            r["repeat"],
            (collect::f(r, "sent_at_unix_ms").unwrap_or(t0) - t0) / 1e3
        );
    }
}

/// The collector's client TTFT minus the server's own TTFT on every Q-grid cell, against the
/// independent client's on the same cells: the collector adds nothing a careful client does not
/// see (no delayed-ACK stall: it was ~35 ms at no load). See the margins above.
fn assert_client_matches_server(records: &[Value], reference: &Gaps) {
    let mut gaps = Gaps::default();
    for r in records.iter().filter(|r| r["phase"] == "qgrid") {
        let gap = collect::f(r, "client_server_gap_ms").expect("server TTFT reported");
        let cell = (
            r["model"].as_str().unwrap().to_owned(),
            collect::u(r, "planned_n").unwrap(),
            format!("{}", r["planned_f"]),
        );
        gaps.push(cell, gap);
    }
    let gaps = gaps.sort();
    print_slowest(records);
    let mut bad = Vec::new();
    for (cell, v) in &gaps.cells {
        let med = quantile(v, 0.5);
        let ref_cell = quantile(&reference.cells[cell], 0.5);
        let ceiling = reference
            .model_quantile(&cell.0, 0.99)
            .expect("the reference measured every model");
        eprintln!(
            "cell {cell:?}: |client - server| median {med:.2} ms (reference client: this cell {ref_cell:.2}, {} p99 {ceiling:.2}), max {:.2} ms",
            cell.0,
            v[v.len() - 1]
        );
        if med > ceiling + CELL_MARGIN_MS {
            bad.push(format!(
                "{cell:?}: median {med:.2} ms, reference {} p99 {ceiling:.2} ms",
                cell.0
            ));
        }
    }
    let (med, p99) = (quantile(&gaps.all, 0.5), quantile(&gaps.all, 0.99));
    let (ref_med, ref_p99) = (
        quantile(&reference.all, 0.5),
        quantile(&reference.all, 0.99),
    );
    eprintln!(
        "all {} Q-grid probes: |client - server| median {med:.2} ms, p99 {p99:.2} ms; reference client ({} probes): median {ref_med:.2} ms, p99 {ref_p99:.2} ms",
        gaps.all.len(),
        reference.all.len()
    );
    assert!(
        bad.is_empty(),
        "cells more than {CELL_MARGIN_MS} ms over the reference client's p99 on their model:\n{}",
        bad.join("\n")
    );
    assert!(
        med <= ref_med + MEDIAN_MARGIN_MS,
        "median gap {med:.2} ms, reference {ref_med:.2} ms"
    );
    let tail_bound = TAIL_MS.max(ref_p99 + TAIL_MARGIN_MS);
    let over: Vec<f64> = gaps
        .all
        .iter()
        .copied()
        .filter(|g| *g > tail_bound)
        .collect();
    assert!(
        over.len() <= STRAY_PROBES,
        "{} of {} Q-grid probes over the tail bound {tail_bound:.2} ms (at most {STRAY_PROBES}): {over:.2?} ms",
        over.len(),
        gaps.all.len()
    );
}
