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

mod checks;
mod discover;
mod error;
mod metrics;
mod probe;
mod register;
mod report;

use checks::*;
use discover::*;
pub use error::*;
pub use metrics::*;
pub use probe::*;
pub use register::*;
pub use report::*;

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
/// Pinned probes per (worker, rank) whose client − server TTFT gaps enter the median: the first
/// meets the primed prefix, the others the whole prompt cached (cheap on any engine). One probe
/// per rank made the verdict of a two-worker deployment the larger of two gaps, so one stall of
/// the client's scheduler on a loaded machine failed the preflight.
const GAP_PROBES: usize = 3;

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
