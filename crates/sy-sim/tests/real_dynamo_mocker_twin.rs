//! The simulator with `timing = "mocker"` against a real Dynamo 1.6.1 mocker stack of the same
//! worker table, on topologies other than the default:
//!
//! - `block32`: block 32, two workers per model, one efficient worker half as fast as the other
//!   (speedup 4 and 2), capable workers at speedup 1 with 1,024 blocks and a 1,024-token budget;
//! - `block64`: block 64, efficient speedups 3 and 1.5 with a 1,024-token budget, capable speedups
//!   1 and 0.75 with a 512-token budget (N = 1,536 prefills in three chunks).
//!
//! For each it starts that stack itself (`scripts/dynamo-local.sh start` with `WORKERS` and
//! `BLOCK_SIZE`, run dir `.dynamo/test-run-twin`, ports `SY_TWIN_PORT_BASE` (26000)
//! +0/+92/+100/+200) when the real-Dynamo tier runs (`SY_DYNAMO_FRONTEND` set by
//! `scripts/test.sh`, or `SY_REQUIRE_DYNAMO=1`) and always stops it. The simulator runs in its own
//! tokio runtime (its own threads), as `sy-sim serve` would.
//!
//! Each side runs the same Q grid (N = 128, 512, 1,536 × f = 0, 0.5, 0.875, 5 repeats, every
//! worker, each probe pinned, its prefix primed first, then an advisory `/select` of the probe's
//! prompt) and the same load conditions (on every worker: 2 closed-loop prefill slots of 1,024
//! tokens, or 4 closed-loop decode slots of 64 tokens generating 64, then 25 pinned 512-token
//! probes, each after a seeded random pause of 40–79 ms so that the probes sample every phase of
//! the periodic background). Dynamo runs twice (A before the simulator, B after): its own
//! run-to-run spread is the floor no twin can beat. Each side's client latency − server TTFT and
//! each condition's background rate are printed beside the ratios.
//!
//! Asserted per topology, the reference being Dynamo's pooled A and B samples: every Q-grid cell's
//! median server-TTFT ratio sim / Dynamo within 0.97–1.03 and every load condition's within
//! 0.95–1.05, each widened to Dynamo's own worst A/B deviation — of the same run, or as measured
//! on the shared 2-core machine ([`DYNAMO_FLOOR_Q`], [`DYNAMO_FLOOR_LOAD`]: there Dynamo's
//! processes slow down with the other builds and the simulator's modeled times do not); the median
//! deviation over the cells (conditions) within the same bound or Dynamo's own median A/B deviation
//! plus 0.03; the advisory pick equal to Dynamo A's on at least 99 % of the selections. Every
//! ratio, and how many fall within the bounds, is printed (`--no-capture`).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

/// One worker of a topology: name, model, speedup, KV blocks, batch budget.
type Row = (&'static str, &'static str, f64, u64, u64);

struct Topology {
    name: &'static str,
    block: usize,
    rows: &'static [Row],
}

const TOPOLOGIES: &[Topology] = &[
    Topology {
        name: "block32",
        block: 32,
        rows: &[
            ("efficient-w0", "efficient", 4.0, 2048, 2048),
            ("efficient-w1", "efficient", 2.0, 2048, 2048),
            ("capable-w0", "capable", 1.0, 1024, 1024),
            ("capable-w1", "capable", 1.0, 1024, 1024),
        ],
    },
    Topology {
        name: "block64",
        block: 64,
        rows: &[
            ("efficient-w0", "efficient", 3.0, 1024, 1024),
            ("efficient-w1", "efficient", 1.5, 1024, 1024),
            ("capable-w0", "capable", 1.0, 512, 512),
            ("capable-w1", "capable", 0.75, 512, 512),
        ],
    },
];

const MODELS: [&str; 2] = ["efficient", "capable"];

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn env_nonempty(k: &str) -> Option<String> {
    std::env::var(k).ok().filter(|v| !v.is_empty())
}

/// The stack's environment for `scripts/dynamo-local.sh`.
fn stack_env(t: &Topology) -> Vec<(String, String)> {
    let base: u16 = env_nonempty("SY_TWIN_PORT_BASE").map_or(26000, |v| v.parse().unwrap());
    let run = repo_root().join(".dynamo/test-run-twin");
    let table: Vec<String> = t
        .rows
        .iter()
        .map(|(n, m, s, b, t)| format!("{n} {m} {s} {b} {t}"))
        .collect();
    vec![
        ("RUN_DIR".into(), run.display().to_string()),
        ("FRONTEND_PORT".into(), base.to_string()),
        ("SELECT_PORT".into(), (base + 92).to_string()),
        ("WORKER_SYS_PORT_BASE".into(), (base + 100).to_string()),
        ("ZMQ_KV_PORT_BASE".into(), (base + 200).to_string()),
        ("BLOCK_SIZE".into(), t.block.to_string()),
        ("WORKERS".into(), table.join("\n")),
        ("TOPOLOGY".into(), "default".into()),
    ]
}

fn launcher(t: &Topology, cmd: &str) -> bool {
    Command::new(repo_root().join("scripts/dynamo-local.sh"))
        .arg(cmd)
        .envs(stack_env(t))
        .status()
        .is_ok_and(|s| s.success())
}

/// Stops the stack on the way out, whatever happens.
struct StackGuard(&'static Topology);

impl Drop for StackGuard {
    fn drop(&mut self) {
        launcher(self.0, "stop");
    }
}

fn sim_config(t: &Topology) -> sy_sim::SimConfig {
    let mut cfg = sy_sim::SimConfig::default();
    for m in &mut cfg.models {
        let rows: Vec<&Row> = t.rows.iter().filter(|r| r.1 == m.name).collect();
        m.workers = rows.len();
        m.block_size = u32::try_from(t.block).unwrap();
        m.max_num_seqs = 64;
        m.timing = sy_sim::TimingKind::Mocker;
        m.request_plane_ms = 2.0;
        m.worker_speeds = rows.iter().map(|r| r.2).collect();
        m.kv_blocks = rows[0].3;
        m.max_num_batched_tokens = rows[0].4;
    }
    cfg.time_scale = 1.0;
    cfg
}

#[derive(Clone)]
struct Side {
    frontend: String,
    select: String,
    workers: BTreeMap<String, Vec<u64>>,
}

async fn post(http: &reqwest::Client, url: &str, body: &Value) -> Value {
    let r = http.post(url).json(body).send().await.unwrap();
    assert!(r.status().is_success(), "{url}: HTTP {}", r.status());
    r.json().await.unwrap()
}

/// One pinned completion: the server's TTFT (`nvext.timing`) and the client's latency of the
/// whole (non-streamed) request, both in ms.
async fn ttft(
    http: &reqwest::Client,
    s: &Side,
    model: &str,
    toks: &[u32],
    wid: u64,
    mt: u32,
) -> (f64, f64) {
    let body = json!({"model": model, "prompt": toks, "max_tokens": mt,
        "nvext": {"backend_instance_id": wid, "extra_fields": ["timing"]}});
    let t0 = std::time::Instant::now();
    let a = post(http, &format!("{}/v1/completions", s.frontend), &body).await;
    let client = t0.elapsed().as_secs_f64() * 1e3;
    (a["nvext"]["timing"]["ttft_ms"].as_f64().unwrap(), client)
}

/// Deterministic token ids in [1000, 2000) (the mocker stack's vocabulary).
struct Tokens(u64);

impl Tokens {
    fn next(&mut self) -> u32 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        1000 + ((self.0 >> 33) % 1000) as u32
    }

    fn take(&mut self, n: usize) -> Vec<u32> {
        (0..n).map(|_| self.next()).collect()
    }
}

/// What one side measured: per Q cell and per load condition the server TTFTs, and the advisory
/// picks (model, worker index).
#[derive(Default)]
struct Measured {
    cells: BTreeMap<String, Vec<f64>>,
    load: BTreeMap<String, Vec<f64>>,
    picks: Vec<(String, i64)>,
    /// Per model, the Q-grid probes' client latency − server TTFT (ms).
    gaps: BTreeMap<String, Vec<f64>>,
    /// Per load condition, the background's completed requests per second.
    background_rate: BTreeMap<String, f64>,
}

async fn run_q(http: &reqwest::Client, s: &Side, block: usize, m: &mut Measured) {
    let mut rng = Tokens(7);
    for _ in 0..5 {
        for model in MODELS {
            for (wi, wid) in s.workers[model].iter().enumerate() {
                for n in [128usize, 512, 1536] {
                    for f in [0.0, 0.5, 0.875] {
                        let k = (n as f64 * f) as usize / block * block;
                        let toks = rng.take(n);
                        if k > 0 {
                            ttft(http, s, model, &toks[..k], *wid, 1).await;
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                        let (t, client) = ttft(http, s, model, &toks, *wid, 2).await;
                        m.gaps.entry(model.to_owned()).or_default().push(client - t);
                        m.cells
                            .entry(format!("{model} w{wi} N={n} f={f}"))
                            .or_default()
                            .push(t);
                        tokio::time::sleep(Duration::from_millis(150)).await;
                        let body =
                            json!({"model_name": model, "token_ids": toks, "advisory": true});
                        let a = post(http, &format!("{}/select", s.select), &body).await;
                        let pick = a["worker_id"].as_u64().unwrap();
                        let idx = s.workers[model].iter().position(|w| *w == pick);
                        m.picks
                            .push((model.to_owned(), idx.map_or(-1, |i| i as i64)));
                    }
                }
            }
        }
    }
}

/// Load conditions: closed-loop background slots pinned to one worker (as `sy-collect`'s
/// background), then 25 probes of 512 fresh tokens on that worker.
async fn run_load(http: &reqwest::Client, s: &Side, m: &mut Measured) {
    // (name, slots, prompt tokens, max tokens)
    let conditions: [(&str, usize, usize, u32); 2] =
        [("prefill2", 2, 1024, 1), ("decode4", 4, 64, 64)];
    for model in MODELS {
        for (wi, wid) in s.workers[model].iter().enumerate() {
            for (ci, (name, slots, prompt, max_tokens)) in conditions.iter().enumerate() {
                let stop = Arc::new(AtomicBool::new(false));
                let done = Arc::new(std::sync::atomic::AtomicU64::new(0));
                let mut tasks = Vec::new();
                for slot in 0..*slots {
                    let (http, s, stop, done) =
                        (http.clone(), s.clone(), stop.clone(), done.clone());
                    let (model, wid, prompt, max_tokens) = (model, *wid, *prompt, *max_tokens);
                    let seed = 1000 + (wi * 100 + ci * 10 + slot) as u64;
                    tasks.push(tokio::spawn(async move {
                        let mut rng = Tokens(seed);
                        while !stop.load(Ordering::SeqCst) {
                            ttft(&http, &s, model, &rng.take(prompt), wid, max_tokens).await;
                            done.fetch_add(1, Ordering::SeqCst);
                        }
                    }));
                }
                tokio::time::sleep(Duration::from_millis(400)).await;
                let mut rng = Tokens(500 + (wi * 10 + ci) as u64);
                let key = format!("{model} w{wi} {name}");
                let (t0, done0) = (std::time::Instant::now(), done.load(Ordering::SeqCst));
                for _ in 0..25 {
                    let (t, _) = ttft(http, s, model, &rng.take(512), *wid, 2).await;
                    m.load.entry(key.clone()).or_default().push(t);
                    // A seeded random pause, not a fixed one: the background is periodic (two
                    // closed-loop prefills alternate), and a fixed pause after a probe that ended
                    // on a pass boundary phase-locks every probe to it. Whether the next probe
                    // then arrives before or after a background request's resubmission turns on
                    // the host's per-request overhead, so one Dynamo run measured 21.9 ms and the
                    // next 30.8 ms for the same condition on the same idle machine.
                    tokio::time::sleep(Duration::from_millis(40 + u64::from(rng.next() % 40)))
                        .await;
                }
                let rate =
                    (done.load(Ordering::SeqCst) - done0) as f64 / t0.elapsed().as_secs_f64();
                m.background_rate.insert(key.clone(), rate);
                stop.store(true, Ordering::SeqCst);
                for t in tasks {
                    t.await.unwrap();
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

async fn measure(s: &Side, block: usize) -> Measured {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    let mut m = Measured::default();
    run_q(&http, s, block, &mut m).await;
    run_load(&http, s, &mut m).await;
    m
}

fn median(xs: &[f64]) -> f64 {
    let mut xs = xs.to_vec();
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

/// Per key: sim / Dynamo (A and B pooled) and Dynamo B / A, median TTFTs; printed.
fn ratios(
    test: &str,
    what: &str,
    a: &BTreeMap<String, Vec<f64>>,
    b: &BTreeMap<String, Vec<f64>>,
    sim: &BTreeMap<String, Vec<f64>>,
) -> Vec<(String, f64, f64)> {
    let mut out = Vec::new();
    for (k, ra) in a {
        let pooled: Vec<f64> = ra.iter().chain(&b[k]).copied().collect();
        let (ma, mb, mp, ms) = (median(ra), median(&b[k]), median(&pooled), median(&sim[k]));
        eprintln!(
            "{test}: {what} {k}: Dynamo A {ma:.2} B {mb:.2} pooled {mp:.2} ms, sim {ms:.2} ms; \
             sim/Dynamo {:.3}, B/A {:.3}",
            ms / mp,
            mb / ma
        );
        out.push((k.clone(), ms / mp, mb / ma));
    }
    out
}

/// Dynamo against itself on the shared 2-core machine (load 8–10, other builds), worst per-cell
/// deviation of B/A over four runs of this test (two topologies each; load probes then at a fixed
/// pause): Q-grid cells 0.581–1.379, load conditions 0.832–1.389 (`docs/benchmarks.md`). No twin can be held closer to one Dynamo
/// run than another Dynamo run is.
const DYNAMO_FLOOR_Q: f64 = 0.42;
const DYNAMO_FLOOR_LOAD: f64 = 0.39;

/// How much the simulator's median deviation may exceed Dynamo's own median A/B deviation.
const MEDIAN_SLACK: f64 = 0.03;

/// Checks one kind of ratio: every key within the bound widened to Dynamo's own worst
/// deviation (this run's, or the measured floor), and the median deviation within the bound or
/// Dynamo's own median deviation plus [`MEDIAN_SLACK`].
fn check(
    test: &str,
    what: &str,
    rs: &[(String, f64, f64)],
    bound: f64,
    measured_floor: f64,
) -> Vec<String> {
    let floor = rs.iter().map(|r| (r.2 - 1.0).abs()).fold(0.0, f64::max);
    let allowed = bound.max(floor).max(measured_floor);
    let within = rs.iter().filter(|r| (r.1 - 1.0).abs() <= bound).count();
    let self_within = rs.iter().filter(|r| (r.2 - 1.0).abs() <= bound).count();
    let dev = |i: usize| {
        rs.iter()
            .map(move |r| (if i == 1 { r.1 } else { r.2 } - 1.0).abs())
    };
    eprintln!(
        "{test}: {what}: sim/Dynamo {:.3}-{:.3}, {within}/{} within ±{bound}, mean |1-r| {:.3}; \
         Dynamo B/A {:.3}-{:.3}, {self_within}/{} within, mean |1-r| {:.3}; allowed ±{allowed:.3}",
        rs.iter().map(|r| r.1).fold(f64::INFINITY, f64::min),
        rs.iter().map(|r| r.1).fold(0.0, f64::max),
        rs.len(),
        dev(1).sum::<f64>() / rs.len() as f64,
        rs.iter().map(|r| r.2).fold(f64::INFINITY, f64::min),
        rs.iter().map(|r| r.2).fold(0.0, f64::max),
        rs.len(),
        dev(2).sum::<f64>() / rs.len() as f64,
    );
    let mut failures: Vec<String> = rs
        .iter()
        .filter(|r| (r.1 - 1.0).abs() > allowed)
        .map(|r| format!("{what} {}: ratio {:.3} outside ±{allowed:.3}", r.0, r.1))
        .collect();
    // For the typical cell the simulator is about as close to Dynamo as Dynamo is to itself. The
    // median, not the mean: a simulated condition whose closed-loop background happened to
    // interleave differently (one of eight, 1.35 once on block 64) is bounded above, one by one.
    let typical_of = |i: usize| median(&dev(i).collect::<Vec<_>>());
    let (typical, self_typical) = (typical_of(1), typical_of(2));
    if typical > bound.max(self_typical + MEDIAN_SLACK) {
        failures.push(format!(
            "{what}: median |1 - sim/Dynamo| {typical:.3} above ±{bound} and Dynamo's own {self_typical:.3} + {MEDIAN_SLACK}"
        ));
    }
    failures
}

fn side_of_stack(t: &Topology) -> Side {
    let env: BTreeMap<String, String> = stack_env(t).into_iter().collect();
    let table: Vec<Value> = serde_json::from_str(
        &std::fs::read_to_string(Path::new(&env["RUN_DIR"]).join("workers.json")).unwrap(),
    )
    .unwrap();
    let mut workers: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for w in &table {
        workers
            .entry(w["model"].as_str().unwrap().to_owned())
            .or_default()
            .push(w["worker_id"].as_u64().unwrap());
    }
    Side {
        frontend: format!("http://127.0.0.1:{}", env["FRONTEND_PORT"]),
        select: format!("http://127.0.0.1:{}", env["SELECT_PORT"]),
        workers,
    }
}

/// Runs one topology; returns its failures.
fn twin(test: &str, t: &'static Topology, client: &tokio::runtime::Runtime) -> Vec<String> {
    let test = format!("{test} [{}]", t.name);
    launcher(t, "stop");
    let _guard = StackGuard(t);
    assert!(launcher(t, "start"), "{test}: the twin stack did not start");
    let real = side_of_stack(t);
    let a = client.block_on(measure(&real, t.block));

    let sim_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let h = sim_rt.block_on(sy_sim::spawn(sim_config(t))).unwrap();
    let sim = Side {
        frontend: h.frontend_url(),
        select: h.selection_url(),
        workers: MODELS
            .into_iter()
            .map(|m| (m.to_owned(), h.worker_ids(m)))
            .collect(),
    };
    let s = client.block_on(measure(&sim, t.block));
    sim_rt.block_on(h.shutdown());
    drop(sim_rt);

    let b = client.block_on(measure(&real, t.block));

    for (model, g) in &a.gaps {
        eprintln!(
            "{test}: {model}: client latency - server TTFT, median of the Q-grid probes: Dynamo A {:.2} ms, B {:.2} ms, sim {:.2} ms",
            median(g),
            median(&b.gaps[model]),
            median(&s.gaps[model])
        );
    }
    for (k, r) in &a.background_rate {
        eprintln!(
            "{test}: load {k}: background requests/s: Dynamo A {r:.1}, B {:.1}, sim {:.1}",
            b.background_rate[k], s.background_rate[k]
        );
    }
    let q = ratios(&test, "cell", &a.cells, &b.cells, &s.cells);
    let l = ratios(&test, "load", &a.load, &b.load, &s.load);
    let mut failures = check(&test, "Q-grid cells", &q, 0.03, DYNAMO_FLOOR_Q);
    failures.extend(check(&test, "load conditions", &l, 0.05, DYNAMO_FLOOR_LOAD));
    let same = a.picks.iter().zip(&s.picks).filter(|(x, y)| x == y).count();
    let self_same = a.picks.iter().zip(&b.picks).filter(|(x, y)| x == y).count();
    eprintln!(
        "{test}: advisory picks equal: sim {same}/{}, Dynamo B {self_same}/{}",
        a.picks.len(),
        a.picks.len()
    );
    if same * 100 < a.picks.len() * 99 {
        failures.push(format!("advisory picks equal {same}/{}", a.picks.len()));
    }
    failures
        .into_iter()
        .map(|f| format!("{}: {f}", t.name))
        .collect()
}

#[test]
fn real_dynamo_mocker_twin_matches_ttft_and_picks() {
    let test = "real_dynamo_mocker_twin_matches_ttft_and_picks";
    let tier = env_nonempty("SY_DYNAMO_FRONTEND").is_some()
        || env_nonempty("SY_REQUIRE_DYNAMO").as_deref() == Some("1");
    if !tier {
        eprintln!("{test}: SKIPPED: not the real-Dynamo tier (see scripts/test.sh)");
        return;
    }
    if let Some(log) = env_nonempty("SY_DYNAMO_TEST_LOG") {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .unwrap();
        writeln!(f, "{test}").unwrap();
    }
    let client = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let only = env_nonempty("SY_TWIN_TOPOLOGY");
    let mut failures = Vec::new();
    for t in TOPOLOGIES {
        if only.as_deref().is_some_and(|o| o != t.name) {
            continue;
        }
        failures.extend(twin(test, t, &client));
    }
    assert!(failures.is_empty(), "{test}:\n{}", failures.join("\n"));
}
