//! Discovery: what the frontend and the selection service report, polled until the plan's
//! models have their workers and ranks.

use super::*;

/// One GET against a Dynamo service: the body text, or why not.
pub(super) async fn get_text(
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
pub(super) struct Discovery {
    pub(super) models: Vec<String>,
    /// Frontend `generate` instances: id → namespace.
    pub(super) instances: BTreeMap<u64, String>,
    pub(super) gauges: BTreeMap<String, ModelGauges>,
    pub(super) ranks: BTreeMap<u64, BTreeSet<u32>>,
    pub(super) registered: Vec<WorkerRecord>,
}

pub(super) const HINT: &str = "start the deployment (docs/gpu.md; on this machine scripts/dynamo-local.sh \
                    start), point --frontend-url/--selection-url at it, or use --target sim for \
                    the embedded simulator";

pub(super) async fn discover(
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
pub(super) const POLL: Duration = Duration::from_millis(500);

/// Without `--wait`: how long to wait for the rank gauges of instances the frontend already
/// lists (a worker that has just registered its endpoint is routable a moment later).
pub(super) const RANK_WAIT: Duration = Duration::from_secs(10);

/// What the deployment still lacks before it can be checked: each plan model listed by
/// `/v1/models`, at least one `generate` instance per plan model, data-parallel ranks for every
/// instance of a plan model, and the model's capacity gauges. Empty when ready.
pub(super) fn pending(d: &Discovery, plan_models: &[String]) -> Vec<String> {
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
pub(super) async fn pending_registration(
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
pub(super) async fn settle(
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
pub(super) fn instance_model(d: &Discovery, id: u64, namespace: &str) -> Option<String> {
    if d.models.iter().any(|m| m == namespace) {
        return Some(namespace.to_string());
    }
    d.registered
        .iter()
        .find(|w| w.worker_id == id)
        .map(|w| w.model_name.clone())
}
