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
use sy_dynamo::{Cancel, SelectionClient};
use sy_wire::metric_names as mn;
use sy_wire::{HealthResponse, ModelList, WorkerLifecycle, WorkerRecord, WorkerRegistration};

use crate::accounting::{Booking, Driver};
use crate::error::CollectError;
use crate::plan::Plan;
use crate::prompt::PromptFactory;

/// What Dynamo 1.6.1 silently uses as the prefill capacity of a worker registered without
/// `max_num_batched_tokens`: P would read as ≈ 0 whatever the load.
pub const CAPACITY_SENTINEL: u64 = 10_000_000;

/// A client TTFT more than this above the server's own TTFT (median over the probes) is
/// reported: the collector would record transport delay as engine time.
pub const TTFT_GAP_WARN_MS: f64 = 15.0;

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
    pub kv_events: KvEvents,
    pub client_ttft_ms: Option<f64>,
    pub server_ttft_ms: Option<f64>,
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
    /// KV-event endpoints for workers registered here (worker id → `tcp://host:port`); the
    /// frontend does not report them.
    pub kv_events: BTreeMap<u64, String>,
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

    /// The first blocking problem as an error (what `sy-collect` stops on before a run).
    pub fn blocking_error(&self) -> Option<CollectError> {
        let worst = self.problems.iter().max_by_key(|p| p.severity)?;
        let all: Vec<&str> = self
            .problems
            .iter()
            .filter(|p| p.severity != Severity::Warning)
            .map(|p| p.message.as_str())
            .collect();
        let text = format!(
            "preflight failed: {} (run `sy-collect preflight` for the full table; \
             --no-preflight skips it)",
            all.join("; ")
        );
        match worst.severity {
            Severity::Plan => Some(CollectError::BadInput(text)),
            Severity::Deployment => Some(CollectError::Runtime(text)),
            Severity::Warning => None,
        }
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
            let kv = match &w.kv_events {
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
            };
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
        if name == mn::WORKER_ACTIVE_PREFILL_TOKENS {
            if let (Some(w), Some(r)) = (label("worker_id"), label("dp_rank"))
                && let (Some(w), Ok(r)) = (parse_worker_label(w), r.parse())
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

/// One GET against a Dynamo service: the body text, or why not.
async fn get_text(
    http: &reqwest::Client,
    bearer: Option<&str>,
    url: &str,
) -> Result<String, String> {
    let mut req = http.get(url).timeout(Duration::from_secs(5));
    if let Some(t) = bearer {
        req = req.bearer_auth(t);
    }
    let resp = req.send().await.map_err(|e| {
        sy_dynamo::CallError::from_reqwest("", &e)
            .message
            .trim_start_matches(": ")
            .to_string()
    })?;
    let status = resp.status();
    let text = resp.text().await.map_err(|e| e.to_string())?;
    if !status.is_success() {
        return Err(format!(
            "HTTP {}: {}",
            status.as_u16(),
            text.chars().take(200).collect::<String>()
        ));
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
) -> Result<Discovery, CollectError> {
    let models_text = get_text(http, bearer, &format!("{frontend_url}/v1/models"))
        .await
        .map_err(|e| {
            CollectError::Runtime(format!(
                "target unreachable: the frontend at {frontend_url} did not answer GET \
                 /v1/models ({e}): {HINT}"
            ))
        })?;
    let models: Vec<String> = serde_json::from_str::<ModelList>(&models_text)
        .map(|l| l.data.into_iter().map(|m| m.id).collect())
        .map_err(|e| {
            CollectError::Runtime(format!(
                "GET {frontend_url}/v1/models: not an OpenAI model list: {e}"
            ))
        })?;
    let registered = selection.workers().await.map_err(|e| {
        CollectError::Runtime(format!(
            "target unreachable: the selection service at {} did not answer GET /workers ({e}): \
             {HINT}",
            selection.base_url()
        ))
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
    let mut kv: Vec<String> = w
        .kv_events_endpoints
        .iter()
        .flat_map(|m| m.values().cloned())
        .collect();
    kv.extend(w.kv_events_endpoint.clone());
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
        kv_events: KvEvents::NotChecked {
            reason: "probes off".into(),
        },
        client_ttft_ms: None,
        server_ttft_ms: None,
    }
}

/// Registers a worker the frontend lists, from the frontend's own figures for its model.
async fn register(
    http: &reqwest::Client,
    bearer: Option<&str>,
    selection_url: &str,
    reg: &WorkerRegistration,
) -> Result<WorkerRecord, String> {
    let mut req = http
        .post(format!("{selection_url}/workers"))
        .timeout(Duration::from_secs(5))
        .json(reg);
    if let Some(t) = bearer {
        req = req.bearer_auth(t);
    }
    let resp = req.send().await.map_err(|e| e.to_string())?;
    let status = resp.status();
    let text = resp.text().await.map_err(|e| e.to_string())?;
    if !status.is_success() {
        return Err(format!("HTTP {}: {}", status.as_u16(), text));
    }
    serde_json::from_str(&text).map_err(|e| format!("unexpected answer: {e}"))
}

fn registration_for(
    id: u64,
    model: &str,
    d: &Discovery,
    opts: &PreflightOptions,
) -> WorkerRegistration {
    let g = d.gauges.get(model).cloned().unwrap_or_default();
    let ranks: Vec<u32> = d
        .ranks
        .get(&id)
        .map(|r| r.iter().copied().collect())
        .unwrap_or_else(|| vec![0]);
    let start = ranks.first().copied().unwrap_or(0);
    WorkerRegistration {
        worker_id: id,
        model_name: Some(model.to_string()),
        routing_group: Some("default".into()),
        endpoint: Some(format!("dyn://{model}.backend.generate/{id}")),
        kv_events_endpoints: opts
            .kv_events
            .get(&id)
            .map(|e| BTreeMap::from([(start.to_string(), e.clone())])),
        block_size: g.block_size,
        data_parallel_start_rank: Some(start),
        data_parallel_size: Some(ranks.len().max(1) as u32),
        max_num_batched_tokens: g.max_num_batched_tokens,
        total_kv_blocks: g.total_kv_blocks,
        ..WorkerRegistration::default()
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
) -> Result<PreflightReport, CollectError> {
    let t0 = Instant::now();
    let selection = &driver.selection;
    let d = discover(http, bearer, frontend_url, selection).await?;
    let plan_models = vec![plan.models.efficient.clone(), plan.models.capable.clone()];
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
                Severity::Plan,
                format!(
                    "plan field `{field}`: model `{model}` is not served by the frontend at \
                     {frontend_url} (it serves: {})",
                    if d.models.is_empty() {
                        "nothing".to_string()
                    } else {
                        d.models.join(", ")
                    }
                ),
            );
        }
    }
    collect_rows(&mut report, &d, http, bearer, opts).await;
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
/// registering the latter when asked.
async fn collect_rows(
    report: &mut PreflightReport,
    d: &Discovery,
    http: &reqwest::Client,
    bearer: Option<&str>,
    opts: &PreflightOptions,
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
    for (&id, ns) in &d.instances {
        if d.registered.iter().any(|w| w.worker_id == id) {
            continue;
        }
        let Some(model) = instance_model(d, id, ns).filter(|m| plan_models.contains(m)) else {
            continue;
        };
        let reg = registration_for(id, &model, d, opts);
        // Dynamo 1.6.1 leaves a worker registered without a KV-event endpoint `incomplete`
        // (never scheduled): registering it would only add a useless entry.
        let rec = if opts.register && reg.kv_events_endpoints.is_none() {
            report.problem(
                Severity::Deployment,
                format!(
                    "worker {id} ({model}) is not registered with the selection service and the                      frontend does not report its KV-event endpoint: pass --kv-events                      {id}=tcp://HOST:PORT to register it"
                ),
            );
            None
        } else if opts.register {
            match register(http, bearer, &report.selection_url, &reg).await {
                Ok(rec) => Some(rec),
                Err(e) => {
                    report.problem(
                        Severity::Deployment,
                        format!("worker {id} ({model}): POST /workers failed: {e}"),
                    );
                    None
                }
            }
        } else {
            None
        };
        let mut row = match &rec {
            Some(r) => row_from_record(r, true, d.ranks.get(&id)),
            None => {
                let mut r = row_from_record(&record_of(&reg), true, d.ranks.get(&id));
                r.registered = false;
                r
            }
        };
        row.registered_now = rec.is_some();
        row.model = model;
        report.workers.push(row);
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
                format!("model `{model}`: the frontend lists no worker instance for it"),
            ));
        }
        for w in &mine {
            let who = format!("worker {} ({model})", w.worker_id);
            let already = report.problems.iter().any(|p| {
                p.message.starts_with(&format!(
                    "worker {} ({model}) is not registered",
                    w.worker_id
                ))
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

/// Primes a prefix on each checkable worker, waits for its KV events to show in the selection
/// service's overlap, then sends the whole prompt and compares client and server TTFT.
async fn probe_workers(report: &mut PreflightReport, driver: &Arc<Driver>, plan: &Plan) {
    let prompts = PromptFactory::new(plan.seed, &crate::prompt::new_invocation_id(), &plan.prompt);
    let mut gaps = Vec::new();
    // Request failures are warnings: the collector records failures as data and retries
    // transient ones; what fails the preflight is a check that ran and failed.
    let mut warnings = Vec::new();
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
        let tokens = prompts.tokens(&format!("preflight/{i}"), PROBE_BLOCKS * bs);
        let primed = (PRIME_BLOCKS * bs) as usize;
        let who = format!("worker {} ({})", w.worker_id, w.model);
        let primed_req = pinned(
            driver,
            &w.model,
            w.worker_id,
            &tokens[..primed],
            1,
            "pf-prime",
        )
        .await;
        if let Err(e) = primed_req {
            w.kv_events = KvEvents::NotChecked {
                reason: format!("priming failed: {e}"),
            };
            warnings.push(format!(
                "{who}: a priming request failed ({e}): KV events not checked"
            ));
            continue;
        }
        w.kv_events = wait_overlap(driver, &w.model, w.worker_id, &tokens, primed as u64).await;
        if let KvEvents::NotFlowing { seen_tokens, .. } = &w.kv_events {
            problems.push(format!(
                "{who}: KV events are not reaching the selection service: {primed} tokens primed \
                 on it, the selection service sees {seen_tokens} after {} s (check the worker's \
                 KV-event publisher and the registered kv_events_endpoints {:?}); K would read 0",
                KV_EVENT_WAIT.as_secs(),
                w.kv_events_endpoints
            ));
        }
        match pinned(driver, &w.model, w.worker_id, &tokens, 2, "pf-probe").await {
            Ok((c, s)) => {
                w.client_ttft_ms = c;
                w.server_ttft_ms = s;
                if let (Some(c), Some(s)) = (c, s) {
                    gaps.push(c - s);
                }
            }
            Err(e) => warnings.push(format!("{who}: a probe request failed: {e}")),
        }
    }
    for m in problems {
        report.problem(Severity::Deployment, m);
    }
    for m in warnings {
        report.problem(Severity::Warning, m);
    }
    gaps.sort_by(f64::total_cmp);
    if let Some(&median) = gaps.get(gaps.len() / 2)
        && median > TTFT_GAP_WARN_MS
    {
        report.problem(
            Severity::Warning,
            format!(
                "client TTFT exceeds the server's own TTFT by {median:.1} ms (median over {} \
                 probes): transport delay (e.g. delayed ACKs on a reused connection) would be \
                 recorded as engine time",
                gaps.len()
            ),
        );
    }
}

/// One request through the accounting path, reserved on and pinned to `worker`: client and
/// server TTFT, or the failure.
async fn pinned(
    driver: &Arc<Driver>,
    model: &str,
    worker: u64,
    tokens: &[u32],
    max_tokens: u32,
    tag: &str,
) -> Result<(Option<f64>, Option<f64>), String> {
    let id = driver.new_selection_id(tag);
    let answer = match driver
        .selection
        .select_and_reserve(model, tokens, &id, Some(max_tokens), Some(&[worker]))
        .await
    {
        Ok(a) => a,
        Err(e) => {
            // A failed or lost answer may still have booked: delete to be sure (404 is fine).
            if e.status != Some(409) {
                let _ = driver.selection.release(&id).await;
            }
            return Err(e.to_string());
        }
    };
    driver
        .stats
        .in_flight
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let booking = Booking {
        selection_id: id,
        answer,
    };
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
        Some(e) => Err(e.to_string()),
        None => Ok((out.ttft_ms, out.server_ttft_ms)),
    }
}

/// Polls the selection service's overlap of `tokens` on `worker` until the primed prefix (whole
/// blocks) shows, or the wait runs out.
async fn wait_overlap(
    driver: &Arc<Driver>,
    model: &str,
    worker: u64,
    tokens: &[u32],
    primed: u64,
) -> KvEvents {
    let t0 = Instant::now();
    let mut seen = 0;
    loop {
        if let Ok(a) = driver
            .selection
            .select_among(model, tokens, false, Some(&[worker]))
            .await
            && a.worker_id == worker
        {
            seen = a.overlap.gpu;
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
        assert!(matches!(r.blocking_error(), Some(CollectError::Runtime(_))));
        r.problem(Severity::Plan, "p".into());
        assert_eq!(r.exit_code(), 2);
        assert!(
            matches!(r.blocking_error(), Some(CollectError::BadInput(m)) if m.contains("d; p"))
        );
    }
}
