//! Where the requests go: the embedded simulator (`--target sim`) or a Dynamo deployment
//! (`--target dynamo`, URLs from flags, the plan, or the defaults of `scripts/dynamo-local.sh`),
//! and the preflight checks that must pass before the first request is sent.

use std::collections::BTreeMap;
use std::path::PathBuf;

use sy_dynamo::SelectionClient;
use sy_wire::{ModelList, WorkerLifecycle};

use crate::error::CollectError;
use crate::plan::{DEFAULT_FRONTEND_URL, DEFAULT_SELECTION_URL, Plan};

/// Which deployment a run drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TargetKind {
    /// The embedded Dynamo-compatible simulator, started in-process.
    Sim,
    /// A running Dynamo deployment.
    Dynamo,
}

impl TargetKind {
    pub fn as_str(self) -> &'static str {
        match self {
            TargetKind::Sim => "sim",
            TargetKind::Dynamo => "dynamo",
        }
    }
}

/// URL overrides from the command line.
#[derive(Debug, Clone, Default)]
pub struct UrlOverrides {
    pub frontend_url: Option<String>,
    pub selection_url: Option<String>,
    pub sim_config: Option<PathBuf>,
}

/// A started target.
#[derive(Debug)]
pub struct Target {
    pub kind: TargetKind,
    pub frontend_url: String,
    pub selection_url: String,
    pub versions: BTreeMap<String, String>,
    sim: Option<sy_sim::SimHandle>,
}

impl Target {
    pub async fn start(
        kind: TargetKind,
        plan: &Plan,
        overrides: &UrlOverrides,
    ) -> Result<Target, CollectError> {
        match kind {
            TargetKind::Sim => {
                let config = match &overrides.sim_config {
                    Some(p) => sy_sim::SimConfig::from_toml_path(p)
                        .map_err(|e| CollectError::BadInput(e.to_string()))?,
                    None => sy_sim::SimConfig::default(),
                };
                let handle = sy_sim::spawn(config).await.map_err(|e| {
                    CollectError::Runtime(format!("cannot start the simulator: {e}"))
                })?;
                let mut versions = BTreeMap::new();
                versions.insert("sy-sim".into(), env!("CARGO_PKG_VERSION").into());
                Ok(Target {
                    kind,
                    frontend_url: handle.frontend_url(),
                    selection_url: handle.selection_url(),
                    versions,
                    sim: Some(handle),
                })
            }
            TargetKind::Dynamo => Ok(Target {
                kind,
                frontend_url: overrides
                    .frontend_url
                    .clone()
                    .or_else(|| plan.target.frontend_url.clone())
                    .unwrap_or_else(|| DEFAULT_FRONTEND_URL.into()),
                selection_url: overrides
                    .selection_url
                    .clone()
                    .or_else(|| plan.target.selection_url.clone())
                    .unwrap_or_else(|| DEFAULT_SELECTION_URL.into()),
                versions: BTreeMap::new(),
                sim: None,
            }),
        }
    }

    /// The simulator handle (tests inject faults through it).
    pub fn sim(&self) -> Option<&sy_sim::SimHandle> {
        self.sim.as_ref()
    }

    pub async fn shutdown(self) {
        if let Some(h) = self.sim {
            h.shutdown().await;
        }
    }
}

/// What the preflight learned.
#[derive(Debug, Clone, Default)]
pub struct Preflight {
    /// Smallest KV capacity (tokens) over the schedulable workers, per model.
    pub kv_capacity_tokens: BTreeMap<String, u64>,
    /// Booked requests already on the selection service before the run.
    pub booked_requests_before: u64,
}

/// Checks the target before any inference request: both services answer, both models are
/// served and have a schedulable worker, and the plan's largest prompt fits the KV capacity.
pub async fn preflight(
    http: &reqwest::Client,
    bearer: Option<&str>,
    frontend_url: &str,
    selection: &SelectionClient,
    plan: &Plan,
) -> Result<Preflight, CollectError> {
    let workers = selection.workers().await.map_err(|e| {
        CollectError::Runtime(format!(
            "target unreachable: the selection service at {} did not answer GET /workers: {e}",
            selection.base_url()
        ))
    })?;
    let mut req = http
        .get(format!("{frontend_url}/v1/models"))
        .timeout(std::time::Duration::from_secs(5));
    if let Some(t) = bearer {
        req = req.bearer_auth(t);
    }
    let resp = req.send().await.map_err(|e| {
        CollectError::Runtime(format!(
            "target unreachable: the frontend at {frontend_url} did not answer GET /v1/models: {}",
            sy_dynamo::CallError::from_reqwest("", &e)
                .message
                .trim_start_matches(": ")
        ))
    })?;
    if resp.status().is_success() {
        if let Ok(list) = resp.json::<ModelList>().await {
            let served: Vec<&str> = list.data.iter().map(|m| m.id.as_str()).collect();
            for (field, model) in [
                ("models.efficient", &plan.models.efficient),
                ("models.capable", &plan.models.capable),
            ] {
                if !served.is_empty() && !served.contains(&model.as_str()) {
                    return Err(CollectError::BadInput(format!(
                        "plan field `{field}`: model `{model}` is not served by the frontend at \
                         {frontend_url} (it serves: {})",
                        served.join(", ")
                    )));
                }
            }
        }
    } else {
        tracing::warn!(
            "GET {frontend_url}/v1/models answered {}: model names not checked",
            resp.status()
        );
    }
    let mut info = Preflight::default();
    let (largest, largest_field) = plan.largest_prompt();
    for (field, model) in [
        ("models.efficient", &plan.models.efficient),
        ("models.capable", &plan.models.capable),
    ] {
        let mine: Vec<_> = workers
            .iter()
            .filter(|w| w.model_name == *model && w.lifecycle == WorkerLifecycle::Schedulable)
            .collect();
        if mine.is_empty() {
            return Err(CollectError::BadInput(format!(
                "plan field `{field}`: model `{model}` has no schedulable worker in the selection \
                 service at {} ({} workers registered)",
                selection.base_url(),
                workers.len()
            )));
        }
        let mut block_size = mine.iter().find_map(|w| w.block_size);
        if block_size.is_none() {
            // Learn it from a query-only select of one token (books nothing).
            block_size = selection
                .select(model, &[plan.prompt.vocab_min], true)
                .await
                .ok()
                .map(|s| s.block_size)
                .filter(|&b| b > 0);
        }
        let capacity = mine
            .iter()
            .filter_map(|w| w.total_kv_blocks)
            .min()
            .zip(block_size)
            .map(|(blocks, bs)| blocks * u64::from(bs));
        if let Some(cap) = capacity {
            info.kv_capacity_tokens.insert(model.clone(), cap);
            let need = largest + u64::from(plan.probe.max_tokens);
            if need > cap {
                return Err(CollectError::BadInput(format!(
                    "plan field `{largest_field}`: a prompt of {largest} tokens (+{} output) does \
                     not fit the KV capacity of model `{model}`: {cap} tokens per worker \
                     (total_kv_blocks × block_size); the server would reject it",
                    plan.probe.max_tokens
                )));
            }
        } else {
            tracing::warn!("model {model}: KV capacity unknown; prompt sizes not checked");
        }
    }
    if let Ok(loads) = selection.loads(None).await {
        let (r, _) = sy_dynamo::selection::total_booked(&loads);
        info.booked_requests_before = r;
        if r > 0 {
            tracing::warn!(
                "{r} requests are already booked on the selection service before the run \
                 (another client, or reservations leaked by a killed run)"
            );
        }
    }
    Ok(info)
}
