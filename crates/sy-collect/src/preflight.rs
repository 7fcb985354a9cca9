//! `sy-collect preflight`: what the deployment is, whether it can be calibrated, and what to fix
//! before spending GPU hours.
//!
//! It discovers the deployment from what it reports — the frontend's `/v1/models`, `/health`
//! (worker instances) and `/metrics` (per-model `total_kv_blocks`, `kv_cache_block_size`,
//! `max_num_batched_tokens`, per-worker `dp_rank` labels) and the selection service's
//! `/workers` — and then checks, per worker of the plan's two models:
//!
//! - it is registered with the selection service (registered here from the frontend's figures
//!   when it is not, unless `--no-register`);
//! - its registered prefill capacity (`max_num_batched_tokens`, P's denominator) is present and
//!   not Dynamo's silent 10,000,000 sentinel, and its KV capacity holds the plan's largest prompt;
//! - its KV events reach the selection service: a prefix is primed on that worker through the
//!   accounting path and the selection service must then report the overlap;
//! - client TTFT against the server's own `nvext.timing.ttft_ms` on the same probe (a gap of
//!   tens of milliseconds is a transport artefact such as delayed ACKs, not engine time).
//!
//! Every problem names the worker or plan field concerned. Exit status: 2 when the plan does
//! not fit the deployment (a model it names is not served, a prompt larger than the KV
//! capacity), 1 when the deployment is not fit to calibrate (unreachable, capacity missing, KV
//! events not flowing, a worker not schedulable), 0 otherwise (warnings do not fail).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use sy_drive::{Driver, PromptFactory};
use sy_dynamo::{Cancel, SelectionClient};
use sy_wire::metric_names as mn;
use sy_wire::{HealthResponse, ModelList, WorkerLifecycle, WorkerRecord, WorkerRegistration};

use crate::plan::Plan;

/// What Dynamo 1.6.1 silently uses as the prefill capacity of a worker registered without
/// `max_num_batched_tokens`: P would read as ≈ 0 whatever the load.
pub const CAPACITY_SENTINEL: u64 = 10_000_000;

/// A client TTFT more than this above the server's own TTFT (median over the probes) fails the
/// preflight: the collector would record transport delay as engine time. On loopback the two
/// agree within a few milliseconds; a delayed-ACK stall costs about 40 ms (docs/dynamo.md).
pub const TTFT_GAP_MAX_MS: f64 = 20.0;

/// How long a primed prefix may take to appear in the selection service's overlap.
const KV_EVENT_WAIT: Duration = Duration::from_secs(4);

/// Blocks in a preflight probe prompt; the first `PRIME_BLOCKS` are primed.
const PROBE_BLOCKS: u64 = 4;
const PRIME_BLOCKS: u64 = 3;

/// How a problem affects the exit status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// Reported, does not fail.
    Warning,
    /// The deployment is not fit to calibrate (exit 1).
    Deployment,
    /// The plan does not fit the deployment (exit 2).
    Plan,
}

#[derive(Debug, Clone, Serialize)]
pub struct Problem {
    pub severity: Severity,
    pub message: String,
}

/// Per-model figures the frontend reports in `/metrics`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ModelGauges {
    pub total_kv_blocks: Option<u64>,
    pub block_size: Option<u32>,
    pub max_num_batched_tokens: Option<u64>,
}

/// The KV-event check of one worker.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum KvEvents {
    /// The primed prefix appeared in the selection service's overlap.
    Flowing {
        primed_tokens: u64,
        seen_tokens: u64,
        after_ms: f64,
    },
    /// It did not appear within the wait.
    NotFlowing {
        primed_tokens: u64,
        seen_tokens: u64,
        waited_ms: f64,
    },
    /// Not checked (why).
    NotChecked { reason: String },
}

/// The checks of one data-parallel rank of a worker.
#[derive(Debug, Clone, Serialize)]
pub struct RankCheck {
    pub dp_rank: u32,
    /// The registered KV-event endpoint of this rank.
    pub kv_events_endpoint: Option<String>,
    pub kv_events: KvEvents,
    pub client_ttft_ms: Option<f64>,
    pub server_ttft_ms: Option<f64>,
    /// Why the pinned probe (or priming request) on this rank failed, with its named cause.
    pub probe_error: Option<String>,
}

/// One worker as the deployment reports it.
#[derive(Debug, Clone, Serialize)]
pub struct WorkerRow {
    pub model: String,
    pub worker_id: u64,
    /// Listed by the frontend's `/health` (a `generate` instance).
    pub listed_by_frontend: bool,
    /// Registered with the selection service (before this preflight, or by it).
    pub registered: bool,
    /// Registered by this preflight.
    pub registered_now: bool,
    pub lifecycle: Option<String>,
    /// Why the selection service does not schedule it (its `not_schedulable_reasons`).
    pub not_schedulable_reasons: Vec<String>,
    /// Data-parallel ranks: the registered ones, else the frontend's `dp_rank` labels.
    pub dp_ranks: Vec<u32>,
    pub block_size: Option<u32>,
    pub total_kv_blocks: Option<u64>,
    /// Registered `max_num_batched_tokens` (P's denominator).
    pub prefill_capacity: Option<u64>,
    pub kv_events_endpoints: Vec<String>,
    /// The registered KV-event endpoint of each rank.
    pub kv_events_by_rank: BTreeMap<u32, String>,
    /// The worst rank's KV-event check (every rank's is in `ranks`).
    pub kv_events: KvEvents,
    /// The first rank's probe.
    pub client_ttft_ms: Option<f64>,
    pub server_ttft_ms: Option<f64>,
    /// The data-parallel ranks the frontend's router knows for this instance (its gauges).
    pub frontend_ranks: Vec<u32>,
    /// Per rank: KV events primed and observed there, and one pinned probe.
    pub ranks: Vec<RankCheck>,
}

/// Everything the preflight found.
#[derive(Debug, Clone, Serialize)]
pub struct PreflightReport {
    pub frontend_url: String,
    pub selection_url: String,
    pub models_served: Vec<String>,
    pub plan_models: Vec<String>,
    pub gauges: BTreeMap<String, ModelGauges>,
    pub workers: Vec<WorkerRow>,
    /// Smallest KV capacity (tokens) over a model's workers.
    pub kv_capacity_tokens: BTreeMap<String, u64>,
    pub booked_requests_before: u64,
    pub problems: Vec<Problem>,
    pub duration_ms: f64,
}

/// How to run the preflight.
#[derive(Debug, Clone, Default)]
pub struct PreflightOptions {
    /// Register workers the frontend lists but the selection service does not know.
    pub register: bool,
    /// KV-event endpoints for workers registered here (worker id → one `tcp://host:port` per
    /// data-parallel rank, rank order); the frontend does not report them.
    pub kv_events: BTreeMap<u64, Vec<String>>,
    /// The deployment description (`--describe`): KV-event endpoints by system URL, provenance.
    pub describe: Option<crate::deployment::LoadedDescription>,
    /// `--wait`: poll until both models and every instance with its ranks are listed and stable.
    pub wait: Option<Duration>,
    /// Send the priming and TTFT probes (off: discovery and registration only).
    pub probes: bool,
}

impl PreflightReport {
    /// 0 fit, 1 deployment problem, 2 plan problem.
    pub fn exit_code(&self) -> i32 {
        match self.problems.iter().map(|p| p.severity).max() {
            Some(Severity::Plan) => 2,
            Some(Severity::Deployment) => 1,
            _ => 0,
        }
    }

    /// The blocking problems as an error (what `sy-collect` stops on before a run).
    pub fn blocking_error(&self) -> Option<PreflightError> {
        let worst = self.problems.iter().max_by_key(|p| p.severity)?;
        if worst.severity == Severity::Warning {
            return None;
        }
        Some(PreflightError::Blocked {
            problems: self
                .problems
                .iter()
                .filter(|p| p.severity != Severity::Warning)
                .map(|p| p.message.clone())
                .collect(),
            plan_at_fault: worst.severity == Severity::Plan,
        })
    }

    fn problem(&mut self, severity: Severity, message: String) {
        self.problems.push(Problem { severity, message });
    }

    /// The table, then the problems, as printed by `sy-collect preflight`.
    pub fn render_text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "frontend {}  selection service {}",
            self.frontend_url, self.selection_url
        );
        let _ = writeln!(
            s,
            "models served: {}  (plan: {})",
            if self.models_served.is_empty() {
                "none".to_string()
            } else {
                self.models_served.join(", ")
            },
            self.plan_models.join(", ")
        );
        for (m, g) in &self.gauges {
            let _ = writeln!(
                s,
                "  {m}: frontend /metrics total_kv_blocks {} block_size {} max_num_batched_tokens {}",
                opt(g.total_kv_blocks),
                opt(g.block_size),
                opt(g.max_num_batched_tokens)
            );
        }
        let _ = writeln!(
            s,
            "\n{:<10} {:>20} {:<9} {:<12} {:<5} {:>5} {:>8} {:>10} {:<22} {:>14}",
            "model",
            "worker",
            "frontend",
            "registered",
            "ranks",
            "block",
            "kv_blks",
            "prefill_P",
            "kv_events",
            "ttft cli/srv"
        );
        for w in &self.workers {
            let reg = match (w.registered, w.registered_now) {
                (true, true) => "now".to_string(),
                (true, false) => w.lifecycle.clone().unwrap_or_else(|| "yes".into()),
                _ => "NO".into(),
            };
            let cap = match w.prefill_capacity {
                None => "MISSING".to_string(),
                Some(c) if c >= CAPACITY_SENTINEL => format!("{c}!"),
                Some(c) => c.to_string(),
            };
            let kv = kv_text(&w.kv_events);
            let ttft = match (w.client_ttft_ms, w.server_ttft_ms) {
                (Some(c), Some(sv)) => format!("{c:.1}/{sv:.1}"),
                (Some(c), None) => format!("{c:.1}/-"),
                _ => "-".into(),
            };
            let ranks = w
                .dp_ranks
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(",");
            let _ = writeln!(
                s,
                "{:<10} {:>20} {:<9} {:<12} {:<5} {:>5} {:>8} {:>10} {:<22} {:>14}",
                w.model,
                w.worker_id,
                if w.listed_by_frontend {
                    "listed"
                } else {
                    "NOT"
                },
                reg,
                ranks,
                opt(w.block_size),
                opt(w.total_kv_blocks),
                cap,
                kv,
                ttft
            );
            rank_lines(&mut s, w);
        }
        if self.problems.is_empty() {
            let _ = writeln!(s, "\npreflight ok ({:.1} s)", self.duration_ms / 1e3);
        } else {
            let _ = writeln!(s);
            for p in &self.problems {
                let tag = match p.severity {
                    Severity::Warning => "warning",
                    Severity::Deployment => "PROBLEM",
                    Severity::Plan => "PLAN",
                };
                let _ = writeln!(s, "{tag}: {}", p.message);
            }
            let _ = writeln!(
                s,
                "preflight {} ({:.1} s)",
                match self.exit_code() {
                    0 => "ok, with warnings",
                    1 => "FAILED: the deployment is not fit to calibrate",
                    _ => "FAILED: the plan does not fit the deployment",
                },
                self.duration_ms / 1e3
            );
        }
        s
    }
}

/// A data-parallel worker's lines: one per rank (what was primed and probed there).
fn rank_lines(s: &mut String, w: &WorkerRow) {
    if w.ranks.len() <= 1 {
        return;
    }
    for r in &w.ranks {
        let _ = writeln!(
            s,
            "{:<10} {:>20}   rank {:<3} kv {:<22} {:<22} {:>14}",
            "",
            "",
            r.dp_rank,
            r.kv_events_endpoint.as_deref().unwrap_or("-"),
            kv_text(&r.kv_events),
            match (r.client_ttft_ms, r.server_ttft_ms, &r.probe_error) {
                (_, _, Some(_)) => "FAILED".to_string(),
                (Some(c), Some(sv), _) => format!("{c:.1}/{sv:.1}"),
                _ => "-".into(),
            }
        );
    }
}

/// A registered worker's rank problems: registered with other ranks than the frontend routes,
/// or a rank without a KV-event endpoint.
fn rank_problems(w: &WorkerRow, who: &str, selection_url: &str) -> Vec<(Severity, String)> {
    let mut problems = Vec::new();
    if !w.frontend_ranks.is_empty() && w.frontend_ranks != w.dp_ranks {
        problems.push((
            Severity::Deployment,
            format!(
                "{who} is registered with data-parallel ranks {:?} but the frontend routes ranks \
                 {:?}: the selection service would not observe the others (DELETE \
                 {selection_url}/workers/{} and re-run preflight with {})",
                w.dp_ranks,
                w.frontend_ranks,
                w.worker_id,
                kv_events_arg(w.worker_id, &w.frontend_ranks)
            ),
        ));
    }
    let missing: Vec<u32> = w
        .dp_ranks
        .iter()
        .copied()
        .filter(|r| !w.kv_events_by_rank.contains_key(r))
        .collect();
    if !missing.is_empty() && !w.kv_events_endpoints.is_empty() {
        problems.push((
            Severity::Deployment,
            format!(
                "{who}: rank(s) {missing:?} have no registered KV-event endpoint (it has {:?}): K \
                 would read 0 there",
                w.kv_events_endpoints
            ),
        ));
    }
    problems
}

fn kv_text(k: &KvEvents) -> String {
    match k {
        KvEvents::Flowing {
            seen_tokens,
            after_ms,
            ..
        } => format!("ok {seen_tokens} tok {after_ms:.0} ms"),
        KvEvents::NotFlowing {
            primed_tokens,
            seen_tokens,
            ..
        } => format!("NO {seen_tokens}/{primed_tokens} tok"),
        KvEvents::NotChecked { .. } => "not checked".into(),
    }
}

fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or_else(|| "-".to_string(), |v| v.to_string())
}

/// The frontend's per-model gauges and per-worker `dp_rank` labels from a Prometheus text page.
pub fn parse_metrics(text: &str) -> (BTreeMap<String, ModelGauges>, BTreeMap<u64, BTreeSet<u32>>) {
    let mut gauges: BTreeMap<String, ModelGauges> = BTreeMap::new();
    let mut ranks: BTreeMap<u64, BTreeSet<u32>> = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((name, rest)) = line.split_once('{') else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once('}') else {
            continue;
        };
        let label = |key: &str| -> Option<&str> {
            labels.split(',').find_map(|kv| {
                let (k, v) = kv.split_once('=')?;
                (k.trim() == key).then(|| v.trim().trim_matches('"'))
            })
        };
        let value: Option<f64> = value.trim().parse().ok();
        let as_u64 = value
            .filter(|v| v.is_finite() && *v > 0.0)
            .map(|v| v as u64);
        if name == mn::WORKER_ACTIVE_PREFILL_TOKENS || name == mn::WORKER_ACTIVE_DECODE_BLOCKS {
            if let (Some(w), Some(r)) = (label("worker_id"), label("dp_rank"))
                && let (Some(w), Ok(r)) = (parse_worker_label(w), r.parse())
            {
                ranks.entry(w).or_default().insert(r);
            }
            continue;
        }
        if name == mn::ROUTER_WORKER_REGISTERED {
            // `router_worker_id` is the instance id in decimal; this series' `worker_id` label
            // is the frontend's own id, not the worker's.
            if let (Some(w), Some(r)) = (label("router_worker_id"), label("dp_rank"))
                && let (Ok(w), Ok(r)) = (w.parse(), r.parse())
                && value.is_some_and(|v| v > 0.0)
            {
                ranks.entry(w).or_default().insert(r);
            }
            continue;
        }
        let Some(model) = label("model") else {
            continue;
        };
        let g = || ModelGauges::default();
        if name == mn::MODEL_TOTAL_KV_BLOCKS {
            gauges.entry(model.into()).or_insert_with(g).total_kv_blocks = as_u64;
        } else if name == mn::MODEL_KV_CACHE_BLOCK_SIZE {
            gauges.entry(model.into()).or_insert_with(g).block_size =
                as_u64.and_then(|v| u32::try_from(v).ok());
        } else if name == mn::MODEL_MAX_NUM_BATCHED_TOKENS {
            gauges
                .entry(model.into())
                .or_insert_with(g)
                .max_num_batched_tokens = as_u64;
        }
    }
    (gauges, ranks)
}

/// A `worker_id` label: decimal, or hexadecimal (Dynamo's component metrics).
fn parse_worker_label(s: &str) -> Option<u64> {
    s.parse()
        .ok()
        .or_else(|| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok())
}

/// Why the preflight could not run or stops the run. Bad input only when a blocking problem is
/// the plan's.
#[derive(Debug, thiserror::Error)]
pub enum PreflightError {
    #[error(
        "preflight failed: {} (run `sy-collect preflight` for the full table; --no-preflight \
         skips it)",
        .problems.join("; ")
    )]
    Blocked {
        problems: Vec<String>,
        /// The worst problem is the plan's (exit 2), not the deployment's (exit 1).
        plan_at_fault: bool,
    },
    #[error(
        "target unreachable: the frontend at {frontend_url} did not answer GET /v1/models \
         ({source}): {HINT}"
    )]
    FrontendUnreachable {
        frontend_url: String,
        #[source]
        source: GetError,
    },
    #[error("GET {frontend_url}/v1/models: not an OpenAI model list: {source}")]
    NotAModelList {
        frontend_url: String,
        #[source]
        source: serde_json::Error,
    },
    #[error(
        "target unreachable: the selection service at {selection_url} did not answer GET \
         /workers ({source}): {HINT}"
    )]
    SelectionUnreachable {
        selection_url: String,
        #[source]
        source: sy_dynamo::CallError,
    },
    #[error("preflight failed: no pilot run")]
    NoPilot,
}

impl PreflightError {
    /// Whether the plan is at fault (exit 2) rather than the deployment (exit 1).
    pub fn is_bad_input(&self) -> bool {
        matches!(
            self,
            PreflightError::Blocked {
                plan_at_fault: true,
                ..
            }
        )
    }
}

/// Why one GET against a Dynamo service gave no body.
#[derive(Debug, thiserror::Error)]
pub enum GetError {
    /// No answer (the transport's message).
    #[error("{0}")]
    Unreachable(String),
    #[error("{0}")]
    Body(#[source] reqwest::Error),
    /// Not 2xx: the status and the start of the body.
    #[error("HTTP {status}: {body}")]
    Status { status: u16, body: String },
}

/// One GET against a Dynamo service: the body text, or why not.
async fn get_text(
    http: &reqwest::Client,
    bearer: Option<&str>,
    url: &str,
) -> Result<String, GetError> {
    let mut req = http.get(url).timeout(Duration::from_secs(5));
    if let Some(t) = bearer {
        req = req.bearer_auth(t);
    }
    let resp = req.send().await.map_err(|e| {
        GetError::Unreachable(
            sy_dynamo::CallError::from_reqwest("", &e)
                .message
                .trim_start_matches(": ")
                .to_string(),
        )
    })?;
    let status = resp.status();
    let text = resp.text().await.map_err(GetError::Body)?;
    if !status.is_success() {
        return Err(GetError::Status {
            status: status.as_u16(),
            body: text.chars().take(200).collect(),
        });
    }
    Ok(text)
}

/// What the deployment reports, before any check.
struct Discovery {
    models: Vec<String>,
    /// Frontend `generate` instances: id → namespace.
    instances: BTreeMap<u64, String>,
    gauges: BTreeMap<String, ModelGauges>,
    ranks: BTreeMap<u64, BTreeSet<u32>>,
    registered: Vec<WorkerRecord>,
}

const HINT: &str = "start the deployment (docs/gpu.md; on this machine scripts/dynamo-local.sh \
                    start), point --frontend-url/--selection-url at it, or use --target sim for \
                    the embedded simulator";

async fn discover(
    http: &reqwest::Client,
    bearer: Option<&str>,
    frontend_url: &str,
    selection: &SelectionClient,
) -> Result<Discovery, PreflightError> {
    let models_text = get_text(http, bearer, &format!("{frontend_url}/v1/models"))
        .await
        .map_err(|source| PreflightError::FrontendUnreachable {
            frontend_url: frontend_url.to_string(),
            source,
        })?;
    let models: Vec<String> = serde_json::from_str::<ModelList>(&models_text)
        .map(|l| l.data.into_iter().map(|m| m.id).collect())
        .map_err(|source| PreflightError::NotAModelList {
            frontend_url: frontend_url.to_string(),
            source,
        })?;
    let registered =
        selection
            .workers()
            .await
            .map_err(|source| PreflightError::SelectionUnreachable {
                selection_url: selection.base_url().to_string(),
                source,
            })?;
    let mut instances = BTreeMap::new();
    match get_text(http, bearer, &format!("{frontend_url}/health")).await {
        Ok(t) => {
            if let Ok(h) = serde_json::from_str::<HealthResponse>(&t) {
                for i in h.instances.into_iter().filter(|i| i.endpoint == "generate") {
                    instances.insert(i.instance_id, i.namespace);
                }
            }
        }
        Err(e) => tracing::warn!("GET {frontend_url}/health: {e}"),
    }
    let (gauges, ranks) = match get_text(http, bearer, &format!("{frontend_url}/metrics")).await {
        Ok(t) => parse_metrics(&t),
        Err(e) => {
            tracing::warn!("GET {frontend_url}/metrics: {e}");
            Default::default()
        }
    };
    Ok(Discovery {
        models,
        instances,
        gauges,
        ranks,
        registered,
    })
}

/// How often `settle` polls the frontend.
const POLL: Duration = Duration::from_millis(500);

/// Without `--wait`: how long to wait for the rank gauges of instances the frontend already
/// lists (a worker that has just registered its endpoint is routable a moment later).
const RANK_WAIT: Duration = Duration::from_secs(10);

/// What the deployment still lacks before it can be checked: each plan model listed by
/// `/v1/models`, at least one `generate` instance per plan model, data-parallel ranks for every
/// instance of a plan model, and the model's capacity gauges. Empty when ready.
fn pending(d: &Discovery, plan_models: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for m in plan_models {
        if !d.models.contains(m) {
            out.push(format!("model `{m}` not yet listed by /v1/models"));
            continue;
        }
        let ids: Vec<u64> = d
            .instances
            .iter()
            .filter(|(id, ns)| instance_model(d, **id, ns).as_deref() == Some(m.as_str()))
            .map(|(id, _)| *id)
            .collect();
        if ids.is_empty() {
            out.push(format!("model `{m}`: no worker instance in /health yet"));
        }
        for id in ids {
            if !d.ranks.contains_key(&id) {
                out.push(format!(
                    "worker {id} ({m}): no data-parallel rank in /metrics yet"
                ));
            }
        }
        let g = d.gauges.get(m);
        if g.and_then(|g| g.total_kv_blocks).is_none() || g.and_then(|g| g.block_size).is_none() {
            out.push(format!(
                "model `{m}`: total_kv_blocks / kv_cache_block_size not in /metrics yet"
            ));
        }
    }
    out
}

/// With `--wait`, what registration still waits for: every described worker up and listed, and
/// every listed instance of a plan model either registered or with KV-event endpoints given (a
/// dead instance stays listed for a few seconds; a worker missing from the description never
/// comes right by waiting, and is reported after the wait).
async fn pending_registration(
    http: &reqwest::Client,
    d: &Discovery,
    plan_models: &[String],
    opts: &PreflightOptions,
) -> Vec<String> {
    let mut out = Vec::new();
    let mut known: BTreeSet<u64> = opts.kv_events.keys().copied().collect();
    if let Some(desc) = &opts.describe {
        let (ids, problems) = crate::deployment::resolve(http, desc).await;
        out.extend(problems);
        for (id, (i, _)) in &ids {
            if !d.instances.contains_key(id) {
                out.push(format!(
                    "worker {id} ({}) not yet listed by the frontend",
                    desc.description.workers[*i].system_url
                ));
            }
        }
        known.extend(ids.keys());
    }
    for (id, ns) in &d.instances {
        let Some(m) = instance_model(d, *id, ns).filter(|m| plan_models.contains(m)) else {
            continue;
        };
        if !known.contains(id) && !d.registered.iter().any(|w| w.worker_id == *id) {
            out.push(format!(
                "worker {id} ({m}): listed, not registered, and no KV-event endpoint known for it \
                 (a stopped worker the frontend still lists, or one missing from --kv-events / \
                 --describe)"
            ));
        }
    }
    out
}

/// Discovers the deployment, waiting as asked: with `--wait`, until nothing is pending and the
/// instances and their ranks are the same on two polls in a row (what it waits for is printed
/// to stderr as it changes); without, only for the rank gauges of listed instances (bounded).
/// Returns the discovery and what is still pending.
async fn settle(
    http: &reqwest::Client,
    bearer: Option<&str>,
    frontend_url: &str,
    selection: &SelectionClient,
    plan_models: &[String],
    opts: &PreflightOptions,
) -> Result<(Discovery, Vec<String>), PreflightError> {
    let t0 = Instant::now();
    let only_ranks = opts.wait.is_none();
    let limit = opts.wait.unwrap_or(RANK_WAIT);
    let mut last_shape = None;
    let mut last_said = Vec::new();
    loop {
        let d = match discover(http, bearer, frontend_url, selection).await {
            Ok(d) => d,
            // Not up yet: keep waiting when asked to.
            Err(e) if opts.wait.is_some() && t0.elapsed() < limit => {
                let said = vec![e.to_string()];
                if said != last_said {
                    eprintln!("preflight: waiting: {}", said[0]);
                    last_said = said;
                }
                tokio::time::sleep(POLL).await;
                continue;
            }
            Err(e) => return Err(e),
        };
        let mut p = pending(&d, plan_models);
        if !only_ranks {
            p.extend(pending_registration(http, &d, plan_models, opts).await);
        }
        if only_ranks {
            // Without --wait only the missing ranks of a listed instance that preflight may
            // have to register are worth a short wait.
            p.retain(|m| {
                m.contains("no data-parallel rank")
                    && !d
                        .registered
                        .iter()
                        .any(|w| m.starts_with(&format!("worker {} ", w.worker_id)))
            });
        }
        let shape = (d.instances.clone(), d.ranks.clone(), d.models.clone());
        let stable = last_shape.as_ref() == Some(&shape);
        last_shape = Some(shape);
        if (p.is_empty() && (stable || only_ranks)) || t0.elapsed() >= limit {
            let mut all = pending(&d, plan_models);
            if only_ranks && !d.models.is_empty() {
                // A model missing while others are served is the plan's problem (reported as
                // such), unless --wait was asked for.
                all.retain(|m| !m.contains("not yet listed by /v1/models"));
            }
            return Ok((d, all));
        }
        if opts.wait.is_some() && p != last_said {
            if p.is_empty() {
                eprintln!("preflight: waiting: the deployment to stay unchanged for one poll");
            } else {
                eprintln!("preflight: waiting for: {}", p.join("; "));
            }
            last_said = p;
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The model a frontend instance serves: its namespace when that is a model name (one
/// namespace per model, as in docs/gpu.md and scripts/dynamo-local.sh), else the registered one.
fn instance_model(d: &Discovery, id: u64, namespace: &str) -> Option<String> {
    if d.models.iter().any(|m| m == namespace) {
        return Some(namespace.to_string());
    }
    d.registered
        .iter()
        .find(|w| w.worker_id == id)
        .map(|w| w.model_name.clone())
}

fn row_from_record(w: &WorkerRecord, listed: bool, ranks: Option<&BTreeSet<u32>>) -> WorkerRow {
    let start = w.data_parallel_start_rank.unwrap_or(0);
    let dp_ranks = match w.data_parallel_size {
        Some(n) if n > 0 => (start..start + n).collect(),
        _ => ranks
            .map(|r| r.iter().copied().collect())
            .unwrap_or_default(),
    };
    let by_rank = registered_endpoints(w);
    let mut kv: Vec<String> = by_rank.values().cloned().collect();
    if by_rank.is_empty() {
        kv.extend(w.kv_events_endpoint.clone());
    }
    let frontend_ranks: Vec<u32> = ranks
        .map(|r| r.iter().copied().collect())
        .unwrap_or_default();
    WorkerRow {
        model: w.model_name.clone(),
        worker_id: w.worker_id,
        listed_by_frontend: listed,
        registered: true,
        registered_now: false,
        lifecycle: serde_json::to_value(w.lifecycle)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned)),
        not_schedulable_reasons: w.not_schedulable_reasons.clone().unwrap_or_default(),
        dp_ranks,
        block_size: w.block_size,
        total_kv_blocks: w.total_kv_blocks,
        prefill_capacity: w.max_num_batched_tokens,
        kv_events_endpoints: kv,
        kv_events_by_rank: by_rank,
        kv_events: KvEvents::NotChecked {
            reason: "probes off".into(),
        },
        client_ttft_ms: None,
        server_ttft_ms: None,
        frontend_ranks,
        ranks: Vec::new(),
    }
}

/// A registered worker's KV-event endpoints by rank (`kv_events_endpoints` is keyed by the rank
/// as a string; a single `kv_events_endpoint` is the start rank's).
fn registered_endpoints(w: &WorkerRecord) -> BTreeMap<u32, String> {
    let mut m: BTreeMap<u32, String> = w
        .kv_events_endpoints
        .iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.parse().ok()?, v.clone())))
        .collect();
    if m.is_empty()
        && let Some(e) = &w.kv_events_endpoint
    {
        m.insert(w.data_parallel_start_rank.unwrap_or(0), e.clone());
    }
    m
}

/// Why `POST /workers` did not register a worker.
#[derive(Debug, thiserror::Error)]
pub enum RegisterError {
    #[error("{0}")]
    Http(#[source] reqwest::Error),
    #[error("HTTP {status}: {body}")]
    Status { status: u16, body: String },
    #[error("unexpected answer: {0}")]
    Answer(#[source] serde_json::Error),
}

/// Registers a worker the frontend lists, from the frontend's own figures for its model.
async fn register(
    http: &reqwest::Client,
    bearer: Option<&str>,
    selection_url: &str,
    reg: &WorkerRegistration,
) -> Result<WorkerRecord, RegisterError> {
    let mut req = http
        .post(format!("{selection_url}/workers"))
        .timeout(Duration::from_secs(5))
        .json(reg);
    if let Some(t) = bearer {
        req = req.bearer_auth(t);
    }
    let resp = req.send().await.map_err(RegisterError::Http)?;
    let status = resp.status();
    let text = resp.text().await.map_err(RegisterError::Http)?;
    if !status.is_success() {
        return Err(RegisterError::Status {
            status: status.as_u16(),
            body: text,
        });
    }
    serde_json::from_str(&text).map_err(RegisterError::Answer)
}

/// Why the preflight cannot register a worker the frontend lists (names the worker and what to
/// pass).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RegistrationProblem {
    #[error(
        "worker {id} ({model}) is not registered and the frontend reports no data-parallel rank \
         for it yet ({} has no series for it): it is still starting; re-run with --wait \
         DURATION",
        mn::ROUTER_WORKER_REGISTERED
    )]
    NoRanks { id: u64, model: String },
    #[error("worker {id} ({model}): the frontend reports ranks {ranks:?}, not a contiguous range")]
    RanksNotContiguous {
        id: u64,
        model: String,
        ranks: Vec<u32>,
    },
    #[error(
        "worker {id} ({model}) is not registered with the selection service and the frontend \
         does not report its KV-event endpoint: pass {}",
        kv_events_arg(.id.to_owned(), .ranks)
    )]
    NoKvEvents {
        id: u64,
        model: String,
        ranks: Vec<u32>,
    },
    #[error(
        "worker {id} ({model}) has {} data-parallel rank(s) {ranks:?} but {} KV-event \
         endpoint(s) were given ({}): give one per rank, e.g. {}",
        .ranks.len(),
        .endpoints.len(),
        .endpoints.join(","),
        kv_events_arg(.id.to_owned(), .ranks)
    )]
    KvEventsPerRank {
        id: u64,
        model: String,
        ranks: Vec<u32>,
        endpoints: Vec<String>,
    },
}

/// The registration of an instance from the frontend's figures: its ranks (the router's gauges;
/// never guessed), the model's capacities, and the KV-event endpoints given for it, one per
/// rank. `Err`: why it cannot be registered.
fn registration_for(
    id: u64,
    model: &str,
    d: &Discovery,
    endpoints: Option<&Vec<String>>,
) -> Result<WorkerRegistration, RegistrationProblem> {
    let g = d.gauges.get(model).cloned().unwrap_or_default();
    let ranks: Vec<u32> = d
        .ranks
        .get(&id)
        .map(|r| r.iter().copied().collect())
        .unwrap_or_default();
    let model_name = || model.to_string();
    if ranks.is_empty() {
        return Err(RegistrationProblem::NoRanks {
            id,
            model: model_name(),
        });
    }
    let start = ranks[0];
    let contiguous = ranks
        .iter()
        .enumerate()
        .all(|(i, r)| *r == start + i as u32);
    if !contiguous {
        return Err(RegistrationProblem::RanksNotContiguous {
            id,
            model: model_name(),
            ranks,
        });
    }
    let Some(eps) = endpoints else {
        return Err(RegistrationProblem::NoKvEvents {
            id,
            model: model_name(),
            ranks,
        });
    };
    if eps.len() != ranks.len() {
        return Err(RegistrationProblem::KvEventsPerRank {
            id,
            model: model_name(),
            ranks,
            endpoints: eps.clone(),
        });
    }
    Ok(WorkerRegistration {
        worker_id: id,
        model_name: Some(model.to_string()),
        routing_group: Some("default".into()),
        endpoint: Some(format!("dyn://{model}.backend.generate/{id}")),
        kv_events_endpoints: Some(
            ranks
                .iter()
                .zip(eps)
                .map(|(r, e)| (r.to_string(), e.clone()))
                .collect(),
        ),
        block_size: g.block_size,
        data_parallel_start_rank: Some(start),
        data_parallel_size: Some(ranks.len().max(1) as u32),
        max_num_batched_tokens: g.max_num_batched_tokens,
        total_kv_blocks: g.total_kv_blocks,
        ..WorkerRegistration::default()
    })
}

/// The `--kv-events` argument a worker needs, its id and rank count filled in: one port per
/// rank (vLLM and SGLang publish rank r on the configured port + r; see docs/gpu.md).
pub fn kv_events_arg(id: u64, ranks: &[u32]) -> String {
    if ranks.len() > 1 {
        format!(
            "--kv-events {id}=tcp://WORKER_HOST:KV_PORT-KV_PORT+{} ({} ranks: one port each)",
            ranks.len() - 1,
            ranks.len()
        )
    } else {
        format!("--kv-events {id}=tcp://WORKER_HOST:KV_PORT")
    }
}

/// Discovers the deployment, registers what is missing, and checks every worker of the plan's
/// models. Errors only when a service cannot be reached at all; everything else is a problem
/// in the report.
#[allow(clippy::too_many_arguments)]
pub async fn preflight(
    http: &reqwest::Client,
    bearer: Option<&str>,
    frontend_url: &str,
    driver: &Arc<Driver>,
    plan: &Plan,
    opts: &PreflightOptions,
) -> Result<PreflightReport, PreflightError> {
    let t0 = Instant::now();
    let selection = &driver.selection;
    let plan_models = vec![plan.models.efficient.clone(), plan.models.capable.clone()];
    let (d, still_waiting) =
        settle(http, bearer, frontend_url, selection, &plan_models, opts).await?;
    let mut report = PreflightReport {
        frontend_url: frontend_url.to_string(),
        selection_url: selection.base_url().to_string(),
        models_served: d.models.clone(),
        plan_models: plan_models.clone(),
        gauges: d
            .gauges
            .iter()
            .filter(|(m, _)| plan_models.contains(m))
            .map(|(m, g)| (m.clone(), g.clone()))
            .collect(),
        workers: Vec::new(),
        kv_capacity_tokens: BTreeMap::new(),
        booked_requests_before: 0,
        problems: Vec::new(),
        duration_ms: 0.0,
    };
    for (field, model) in [
        ("models.efficient", &plan.models.efficient),
        ("models.capable", &plan.models.capable),
    ] {
        if !d.models.contains(model) {
            report.problem(
                // Nothing served at all is a deployment still loading, not a plan mistake.
                if d.models.is_empty() {
                    Severity::Deployment
                } else {
                    Severity::Plan
                },
                format!(
                    "plan field `{field}`: model `{model}` is not served by the frontend at \
                     {frontend_url} (it serves: {}; if its workers are still loading, wait for \
                     them: sy-collect preflight --wait 10m)",
                    if d.models.is_empty() {
                        "nothing yet".to_string()
                    } else {
                        d.models.join(", ")
                    }
                ),
            );
        }
    }
    if !still_waiting.is_empty() {
        report.problem(
            Severity::Deployment,
            match opts.wait {
                Some(w) => format!(
                    "the deployment was still not ready after --wait {} s: {}",
                    w.as_secs(),
                    still_waiting.join("; ")
                ),
                None => format!(
                    "the deployment looks still loading: {} (wait for it: sy-collect preflight \
                     --wait 10m)",
                    still_waiting.join("; ")
                ),
            },
        );
    }
    let mut kv = opts.kv_events.clone();
    if let Some(desc) = &opts.describe {
        let (by_id, problems) = crate::deployment::resolve(http, desc).await;
        for m in problems {
            report.problem(Severity::Deployment, m);
        }
        for (id, (i, eps)) in by_id {
            let w = &desc.description.workers[i];
            if let (Some(want), Some(ns)) = (&w.model, d.instances.get(&id))
                && want != ns
            {
                report.problem(
                    Severity::Deployment,
                    format!(
                        "{}: workers[{i}] ({}) says model `{want}` but the frontend lists \
                         instance {id} under `{ns}`",
                        desc.path.display(),
                        w.system_url
                    ),
                );
            }
            kv.entry(id).or_insert(eps);
        }
    }
    collect_rows(&mut report, &d, http, bearer, opts.register, &kv).await;
    check_rows(&mut report, plan);
    if opts.probes {
        probe_workers(&mut report, driver, plan).await;
    }
    if let Ok(loads) = selection.loads(None).await {
        let (r, _) = sy_dynamo::selection::total_booked(&loads);
        report.booked_requests_before = r;
        if r > 0 {
            report.problem(
                Severity::Warning,
                format!(
                    "{r} requests are already booked on the selection service (another client, \
                     or reservations leaked by a killed run): R and P will include them"
                ),
            );
        }
    }
    report.duration_ms = t0.elapsed().as_secs_f64() * 1e3;
    Ok(report)
}

/// One row per worker of a plan model: the registered ones and the frontend's instances,
/// registering the latter when asked (`kv` gives their KV-event endpoints, rank order).
async fn collect_rows(
    report: &mut PreflightReport,
    d: &Discovery,
    http: &reqwest::Client,
    bearer: Option<&str>,
    register_missing: bool,
    kv: &BTreeMap<u64, Vec<String>>,
) {
    let plan_models = report.plan_models.clone();
    for w in d
        .registered
        .iter()
        .filter(|w| plan_models.contains(&w.model_name))
    {
        let listed = d.instances.contains_key(&w.worker_id);
        report
            .workers
            .push(row_from_record(w, listed, d.ranks.get(&w.worker_id)));
    }
    let mut needed = Vec::new();
    for (&id, ns) in &d.instances {
        if d.registered.iter().any(|w| w.worker_id == id) {
            continue;
        }
        let Some(model) = instance_model(d, id, ns).filter(|m| plan_models.contains(m)) else {
            continue;
        };
        let reg = registration_for(id, &model, d, kv.get(&id));
        let rec = match (&reg, register_missing) {
            (Err(why), _) => {
                if kv.get(&id).is_none() {
                    let ranks: Vec<u32> = d
                        .ranks
                        .get(&id)
                        .map(|r| r.iter().copied().collect())
                        .unwrap_or_default();
                    needed.push(kv_events_arg(id, &ranks));
                }
                report.problem(Severity::Deployment, why.to_string());
                None
            }
            (Ok(_), false) => None,
            (Ok(reg), true) => match register(http, bearer, &report.selection_url, reg).await {
                Ok(rec) => Some(rec),
                Err(e) => {
                    report.problem(
                        Severity::Deployment,
                        format!("worker {id} ({model}): POST /workers failed: {e}"),
                    );
                    None
                }
            },
        };
        let mut row = match (&rec, &reg) {
            (Some(r), _) => row_from_record(r, true, d.ranks.get(&id)),
            (None, Ok(reg)) => {
                let mut r = row_from_record(&record_of(reg), true, d.ranks.get(&id));
                r.registered = false;
                r
            }
            (None, Err(_)) => {
                let stub = WorkerRegistration {
                    worker_id: id,
                    model_name: Some(model.clone()),
                    ..WorkerRegistration::default()
                };
                let mut r = row_from_record(&record_of(&stub), true, d.ranks.get(&id));
                r.registered = false;
                r.dp_ranks = r.frontend_ranks.clone();
                r
            }
        };
        row.registered_now = rec.is_some();
        row.model = model;
        report.workers.push(row);
    }
    if needed.len() > 1 {
        report.problem(
            Severity::Deployment,
            format!(
                "to register every unregistered worker, add: {} (or list the workers in a \
                 --describe file: docs/gpu.md)",
                needed
                    .iter()
                    .map(|a| a.split(" (").next().unwrap_or(a))
                    .collect::<Vec<_>>()
                    .join(" ")
            ),
        );
    }
    report
        .workers
        .sort_by(|a, b| (&a.model, a.worker_id).cmp(&(&b.model, b.worker_id)));
}

/// A registration seen as the record it would become (for the table of an unregistered worker).
fn record_of(reg: &WorkerRegistration) -> WorkerRecord {
    WorkerRecord {
        worker_id: reg.worker_id,
        model_name: reg.model_name.clone().unwrap_or_default(),
        routing_group: String::new(),
        lifecycle: WorkerLifecycle::Unschedulable,
        endpoint: reg.endpoint.clone(),
        kv_events_endpoint: None,
        kv_events_endpoints: reg.kv_events_endpoints.clone(),
        block_size: reg.block_size,
        data_parallel_start_rank: reg.data_parallel_start_rank,
        data_parallel_size: reg.data_parallel_size,
        max_num_batched_tokens: reg.max_num_batched_tokens,
        total_kv_blocks: reg.total_kv_blocks,
        taints: Vec::new(),
        topology_domains: BTreeMap::new(),
        not_schedulable_reasons: None,
        extra: Default::default(),
    }
}

/// The static checks of every row: listed, registered, schedulable, capacities.
fn check_rows(report: &mut PreflightReport, plan: &Plan) {
    let (largest, largest_field) = plan.largest_prompt();
    let output = u64::from(plan.probe.max_tokens);
    let need = largest.saturating_add(output);
    let mut problems = Vec::new();
    for model in report.plan_models.clone() {
        let mine: Vec<&WorkerRow> = report.workers.iter().filter(|w| w.model == model).collect();
        if report.models_served.contains(&model) && !mine.iter().any(|w| w.listed_by_frontend) {
            problems.push((
                Severity::Deployment,
                format!(
                    "model `{model}`: the frontend serves it but lists no worker instance for it \
                     yet: its workers are still loading or registering (wait for them: \
                     sy-collect preflight --wait 10m)"
                ),
            ));
        }
        for w in &mine {
            let who = format!("worker {} ({model})", w.worker_id);
            // Registration already explained (no endpoint, wrong count, no ranks yet).
            let already = report.problems.iter().any(|p| {
                p.message
                    .starts_with(&format!("worker {} ({model})", w.worker_id))
            });
            if !w.registered && !already {
                problems.push((
                    Severity::Deployment,
                    format!(
                        "{who} is not registered with the selection service (run preflight \
                         without --no-register, or POST /workers)"
                    ),
                ));
            }
            if !w.registered {
                continue;
            }
            if !w.listed_by_frontend {
                problems.push((
                    Severity::Deployment,
                    format!(
                        "{who} is registered but the frontend does not list it (a stale id: \
                         DELETE {}/workers/{})",
                        report.selection_url, w.worker_id
                    ),
                ));
            }
            problems.extend(rank_problems(w, &who, &report.selection_url));
            if w.lifecycle.as_deref() != Some("schedulable") {
                let mut why = w.not_schedulable_reasons.join("; ");
                if why.contains("kv_events") {
                    why.push_str(
                        " (give the worker's KV-event publisher: --kv-events ID=tcp://HOST:PORT)",
                    );
                }
                problems.push((
                    Severity::Deployment,
                    format!(
                        "{who} is {} in the selection service{}{why}",
                        w.lifecycle.as_deref().unwrap_or("of unknown state"),
                        if why.is_empty() { "" } else { ": " }
                    ),
                ));
            }
            match w.prefill_capacity {
                None => problems.push((
                    Severity::Deployment,
                    format!(
                        "{who}: registered prefill capacity (max_num_batched_tokens, P's \
                         denominator) is missing: Dynamo would use {CAPACITY_SENTINEL} and P \
                         would read ≈ 0; register the engine's prefill token budget"
                    ),
                )),
                Some(c) if c >= CAPACITY_SENTINEL => problems.push((
                    Severity::Deployment,
                    format!(
                        "{who}: registered prefill capacity is {c}, Dynamo's placeholder for a \
                         missing value; register the engine's prefill token budget"
                    ),
                )),
                _ => {}
            }
            if w.total_kv_blocks.is_none() {
                problems.push((
                    Severity::Deployment,
                    format!("{who}: total_kv_blocks is not registered"),
                ));
            }
        }
        let cap = mine
            .iter()
            .filter_map(|w| Some(w.total_kv_blocks? * u64::from(w.block_size?)))
            .min();
        if let Some(cap) = cap {
            report.kv_capacity_tokens.insert(model.clone(), cap);
            // Blame what does not fit: the output alone, else the largest prompt.
            let field = if output >= cap || output > largest {
                "probe.max_tokens"
            } else {
                largest_field
            };
            if need > cap {
                problems.push((
                    Severity::Plan,
                    format!(
                        "plan field `{field}`: a prompt of {largest} tokens (`{largest_field}`) \
                         plus {output} output tokens (`probe.max_tokens`) does not fit the KV \
                         capacity of model `{model}`: {cap} tokens per worker (total_kv_blocks × \
                         block_size); the server would reject it"
                    ),
                ));
            }
        }
    }
    for (s, m) in problems {
        report.problem(s, m);
    }
}

/// On every rank of each checkable worker: primes a prefix pinned to that (worker, rank), waits
/// for its KV events to show in the selection service's overlap **of that rank**, then sends
/// the whole prompt pinned there and compares client and server TTFT. A failed request is a
/// problem naming the worker, the rank and the likely cause.
async fn probe_workers(report: &mut PreflightReport, driver: &Arc<Driver>, plan: &Plan) {
    let prompts = PromptFactory::new(plan.seed, &sy_drive::new_invocation_id(), &plan.prompt);
    let mut gaps = Vec::new();
    let mut problems = Vec::new();
    for (i, w) in report.workers.iter_mut().enumerate() {
        if !(w.registered && w.listed_by_frontend && w.lifecycle.as_deref() == Some("schedulable"))
        {
            w.kv_events = KvEvents::NotChecked {
                reason: "not registered, listed and schedulable".into(),
            };
            continue;
        }
        let bs = u64::from(w.block_size.unwrap_or(16).max(1));
        let primed = (PRIME_BLOCKS * bs) as usize;
        let ranks = if w.dp_ranks.is_empty() {
            vec![0]
        } else {
            w.dp_ranks.clone()
        };
        for rank in ranks {
            let who = format!("worker {} ({}) rank {rank}", w.worker_id, w.model);
            let tokens = prompts.tokens(&format!("preflight/{i}/{rank}"), PROBE_BLOCKS * bs);
            let mut check = RankCheck {
                dp_rank: rank,
                kv_events_endpoint: w.kv_events_by_rank.get(&rank).cloned(),
                kv_events: KvEvents::NotChecked {
                    reason: "not run".into(),
                },
                client_ttft_ms: None,
                server_ttft_ms: None,
                probe_error: None,
            };
            let prime = pinned(
                driver,
                &w.model,
                w.worker_id,
                rank,
                &tokens[..primed],
                1,
                "pf-prime",
            )
            .await;
            if let Err(e) = prime {
                let msg = format!("{who}: a pinned priming request failed: {}", e.message);
                check.kv_events = KvEvents::NotChecked {
                    reason: msg.clone(),
                };
                check.probe_error = Some(msg.clone());
                problems.push((e.severity, msg));
                w.ranks.push(check);
                continue;
            }
            check.kv_events =
                wait_overlap(driver, &w.model, w.worker_id, rank, &tokens, primed as u64).await;
            if let KvEvents::NotFlowing { seen_tokens, .. } = &check.kv_events {
                problems.push((
                    Severity::Deployment,
                    format!(
                        "{who}: KV events are not reaching the selection service: {primed} tokens \
                     primed on that rank, the selection service sees {seen_tokens} there after \
                     {} s (check the worker's KV-event publisher for rank {rank} and its \
                     registered endpoint {}); K would read 0",
                        KV_EVENT_WAIT.as_secs(),
                        check.kv_events_endpoint.as_deref().unwrap_or("(none)")
                    ),
                ));
            }
            match pinned(driver, &w.model, w.worker_id, rank, &tokens, 2, "pf-probe").await {
                Ok((c, sv)) => {
                    check.client_ttft_ms = c;
                    check.server_ttft_ms = sv;
                    if let (Some(c), Some(sv)) = (c, sv) {
                        gaps.push(c - sv);
                    }
                }
                Err(e) => {
                    let msg = format!("{who}: the pinned probe failed: {}", e.message);
                    check.probe_error = Some(msg.clone());
                    problems.push((e.severity, msg));
                }
            }
            w.ranks.push(check);
        }
        w.kv_events = worst_kv(&w.ranks);
        if let Some(first) = w.ranks.first() {
            w.client_ttft_ms = first.client_ttft_ms;
            w.server_ttft_ms = first.server_ttft_ms;
        }
    }
    for (sev, m) in problems {
        report.problem(sev, m);
    }
    gaps.sort_by(f64::total_cmp);
    if let Some(&median) = gaps.get(gaps.len() / 2)
        && median > TTFT_GAP_MAX_MS
    {
        report.problem(
            Severity::Deployment,
            format!(
                "client TTFT exceeds the server's own TTFT by {median:.1} ms (median over {} \
                 probes; the bound is {TTFT_GAP_MAX_MS} ms): the collector would record \
                 transport delay as engine time. Likely cause: delayed ACKs on a reused \
                 connection, a proxy or load balancer between sy-collect and the frontend, or a \
                 client machine too loaded to read the stream promptly; run sy-collect on the \
                 frontend's node against its loopback address",
                gaps.len()
            ),
        );
    }
}

/// A row's KV-event verdict over its ranks: the first not flowing, else the first not
/// checked, else the slowest flowing one.
fn worst_kv(ranks: &[RankCheck]) -> KvEvents {
    if let Some(r) = ranks
        .iter()
        .find(|r| matches!(r.kv_events, KvEvents::NotFlowing { .. }))
    {
        return r.kv_events.clone();
    }
    if let Some(r) = ranks
        .iter()
        .find(|r| matches!(r.kv_events, KvEvents::NotChecked { .. }))
    {
        return r.kv_events.clone();
    }
    ranks
        .iter()
        .max_by(|a, b| after(&a.kv_events).total_cmp(&after(&b.kv_events)))
        .map_or(
            KvEvents::NotChecked {
                reason: "no rank".into(),
            },
            |r| r.kv_events.clone(),
        )
}

fn after(k: &KvEvents) -> f64 {
    match k {
        KvEvents::Flowing { after_ms, .. } => *after_ms,
        _ => 0.0,
    }
}

/// The likely cause of a failed pinned request, for the operator.
pub fn named_cause(status: Option<u16>, message: &str) -> &'static str {
    let m = message.to_ascii_lowercase();
    if m.contains("not eligible") || m.contains("dp_rank") {
        "the frontend will not route to this (worker, rank): the pinned worker is not eligible \
         (the rank is not registered with the frontend's router, or the worker is still loading)"
    } else if m.contains("model not found") || status == Some(404) {
        "the frontend does not serve the model (yet)"
    } else if status == Some(409) {
        "the selection id is already in use on the selection service"
    } else if status.is_some_and(|s| s >= 500) {
        "the frontend or the worker failed the request (an engine error or a crashed worker: \
         see the worker's log)"
    } else if status.is_some_and(|s| s >= 400) {
        "the request was refused (a bad request for this deployment: see the message)"
    } else if m.contains("timed out") || m.contains("timeout") {
        "no first token within the timeout (the worker is overloaded, still compiling, or hung)"
    } else if m.contains("connect") || m.contains("refused") {
        "the service could not be reached"
    } else {
        "see the message"
    }
}

/// A pinned request that failed: the message with its named cause, and how it affects the
/// preflight. A refusal that no retry changes — the frontend will not route the (worker, rank),
/// the selection service refuses or books another rank — fails it; a failed request (an HTTP
/// 5xx, a timeout) is reported as a warning, since the collector records failures as data and
/// retries transient ones.
#[derive(Debug)]
struct PinFailure {
    message: String,
    severity: Severity,
}

impl PinFailure {
    fn from_call(prefix: &str, e: &sy_dynamo::CallError) -> Self {
        let blocking = e.kind == sy_wire::ErrorClass::Configuration
            || e.message.to_ascii_lowercase().contains("not eligible")
            || e.status
                .is_some_and(|s| (400..500).contains(&s) && s != 404 && s != 409);
        Self {
            message: format!(
                "{prefix}{} — {}",
                e.message,
                named_cause(e.status, &e.message)
            ),
            severity: if blocking {
                Severity::Deployment
            } else {
                Severity::Warning
            },
        }
    }
}

/// One request through the accounting path, reserved on and pinned to (`worker`, `rank`):
/// client and server TTFT, or the failure with its named cause.
async fn pinned(
    driver: &Arc<Driver>,
    model: &str,
    worker: u64,
    rank: u32,
    tokens: &[u32],
    max_tokens: u32,
    tag: &str,
) -> Result<(Option<f64>, Option<f64>), PinFailure> {
    let booking = driver
        .reserve_on_rank(model, tokens, max_tokens, (worker, rank), tag)
        .await
        .map_err(|e| {
            PinFailure::from_call("the selection service refused the reservation: ", &e)
        })?;
    let answer = &booking.answer;
    if (answer.worker_id, answer.dp_rank) != (worker, rank) {
        driver.release(&booking).await;
        return Err(PinFailure {
            message: format!(
                "the selection service booked worker {} rank {} instead — it does not know rank \
                 {rank} of this worker (re-register it with one KV-event endpoint per rank)",
                answer.worker_id, answer.dp_rank
            ),
            severity: Severity::Deployment,
        });
    }
    let out = driver
        .send(
            &booking,
            model,
            tokens.to_vec(),
            max_tokens,
            true, // exactly max_tokens: never end of sequence first
            &Cancel::new(),
            || {},
        )
        .await;
    driver.release(&booking).await;
    let mut out = out;
    if tag == "pf-prime" && out.generated_without_text() {
        out.error = None; // a priming needs the prefill, not a visible token
    }
    match out.error {
        Some(e) => Err(PinFailure::from_call("", &e)),
        None => Ok((out.ttft_ms, out.server_ttft_ms)),
    }
}

/// Polls the selection service's overlap of `tokens` on (`worker`, `rank`) until the primed
/// prefix (whole blocks) shows there, or the wait runs out.
async fn wait_overlap(
    driver: &Arc<Driver>,
    model: &str,
    worker: u64,
    rank: u32,
    tokens: &[u32],
    primed: u64,
) -> KvEvents {
    let t0 = Instant::now();
    let mut seen = 0;
    loop {
        if let Ok(a) = driver
            .selection
            .select_on_rank(model, tokens, worker, rank)
            .await
            && a.worker_id == worker
        {
            // Per-rank overlap when the service reports it (a data-parallel worker), else the
            // picked rank's device overlap.
            seen = match a.overlap.dp.get(&rank.to_string()) {
                Some(&v) => v,
                None if a.dp_rank == rank => a.overlap.gpu,
                None => 0,
            };
            if seen >= primed {
                return KvEvents::Flowing {
                    primed_tokens: primed,
                    seen_tokens: seen,
                    after_ms: t0.elapsed().as_secs_f64() * 1e3,
                };
            }
        }
        if t0.elapsed() >= KV_EVENT_WAIT {
            return KvEvents::NotFlowing {
                primed_tokens: primed,
                seen_tokens: seen,
                waited_ms: t0.elapsed().as_secs_f64() * 1e3,
            };
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_give_model_gauges_and_worker_ranks() {
        let text = "# HELP x\n\
            dynamo_frontend_model_total_kv_blocks{model=\"capable\"} 1024\n\
            dynamo_frontend_model_kv_cache_block_size{model=\"capable\"} 16\n\
            dynamo_frontend_model_max_num_batched_tokens{model=\"capable\"} 0\n\
            dynamo_frontend_worker_active_prefill_tokens{dp_rank=\"1\",worker_id=\"42\",worker_type=\"decode\"} 0\n\
            dynamo_frontend_worker_active_prefill_tokens{dp_rank=\"0\",worker_id=\"42\"} 3\n\
            dynamo_frontend_worker_active_prefill_tokens{dp_rank=\"0\",worker_id=\"ff\"} 3\n";
        let (g, r) = parse_metrics(text);
        let c = &g["capable"];
        assert_eq!(c.total_kv_blocks, Some(1024));
        assert_eq!(c.block_size, Some(16));
        assert_eq!(c.max_num_batched_tokens, None, "0 is no capacity");
        assert_eq!(r[&42].iter().copied().collect::<Vec<_>>(), vec![0, 1]);
        assert!(r.contains_key(&255), "hex worker ids");
    }

    #[test]
    fn exit_code_is_the_worst_problem() {
        let mut r = PreflightReport {
            frontend_url: String::new(),
            selection_url: String::new(),
            models_served: vec![],
            plan_models: vec![],
            gauges: BTreeMap::new(),
            workers: vec![],
            kv_capacity_tokens: BTreeMap::new(),
            booked_requests_before: 0,
            problems: vec![],
            duration_ms: 0.0,
        };
        assert_eq!(r.exit_code(), 0);
        assert!(r.blocking_error().is_none());
        r.problem(Severity::Warning, "w".into());
        assert_eq!(r.exit_code(), 0);
        assert!(r.blocking_error().is_none());
        r.problem(Severity::Deployment, "d".into());
        assert_eq!(r.exit_code(), 1);
        assert!(matches!(
            r.blocking_error(),
            Some(PreflightError::Blocked {
                plan_at_fault: false,
                ..
            })
        ));
        r.problem(Severity::Plan, "p".into());
        assert_eq!(r.exit_code(), 2);
        let e = r.blocking_error().unwrap();
        assert!(e.is_bad_input() && e.to_string().contains("d; p"), "{e}");
    }
}
