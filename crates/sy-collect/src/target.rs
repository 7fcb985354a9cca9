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

/// The manifest's version key of the embedded simulator.
pub const SIM_COMPONENT: &str = "sy-sim";

/// A started target.
#[derive(Debug)]
pub struct Target {
    pub kind: TargetKind,
    pub frontend_url: String,
    pub selection_url: String,
    /// What is known without asking (the embedded simulator's version); a Dynamo target is
    /// asked by [`Target::versions`].
    pub versions: BTreeMap<String, String>,
    sim: Option<sy_sim::SimHandle>,
}

/// Written for a component whose version the target does not report.
pub const UNKNOWN_VERSION: &str = "unknown";

/// Versions of the target's components (component → version, [`UNKNOWN_VERSION`] when it does
/// not say), and where each came from (component → source), for the manifest.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TargetVersions {
    pub versions: BTreeMap<String, String>,
    pub sources: BTreeMap<String, String>,
}

impl TargetVersions {
    fn set(&mut self, component: &str, version: &str, source: String) {
        self.versions.insert(component.into(), version.into());
        self.sources.insert(component.into(), source);
    }
}

/// `info.version` (and `info.title`) of an OpenAPI document at `url`: Dynamo's frontend serves
/// one at `/openapi.json` whose version is the Dynamo release (1.6.1: `"1.6.1"`).
async fn openapi_version(
    http: &reqwest::Client,
    bearer: Option<&str>,
    url: &str,
) -> Result<(String, String), String> {
    let mut req = http.get(url).timeout(std::time::Duration::from_secs(5));
    if let Some(t) = bearer {
        req = req.bearer_auth(t);
    }
    let resp = req
        .send()
        .await
        .map_err(|e| sy_dynamo::CallError::from_reqwest("", &e).message)?;
    let status = resp.status();
    if !status.is_success() {
        return Err(format!("HTTP {}", status.as_u16()));
    }
    let doc: serde_json::Value = resp.json().await.map_err(|e| format!("not JSON: {e}"))?;
    let info = &doc["info"];
    match info["version"].as_str().map(str::trim) {
        Some(v) if !v.is_empty() => Ok((
            v.to_string(),
            info["title"].as_str().unwrap_or("").to_string(),
        )),
        _ => Err("no info.version".into()),
    }
}

/// Asks a Dynamo deployment for its versions. What Dynamo 1.6.1 exposes (checked on the local
/// stack): the frontend's `GET /openapi.json` carries the release as `info.version`; its
/// `/health`, `/metrics` and `/v1/models` carry none; the selection service has no version
/// route (`/openapi.json`, `/version`: 404); worker versions are reachable through neither.
/// Whatever is not reported is recorded as [`UNKNOWN_VERSION`], with the reason as its source.
pub async fn dynamo_versions(
    http: &reqwest::Client,
    bearer: Option<&str>,
    frontend_url: &str,
    selection_url: &str,
) -> TargetVersions {
    let mut out = TargetVersions::default();
    for (component, base) in [
        ("dynamo-frontend", frontend_url),
        ("dynamo-selection-service", selection_url),
    ] {
        let url = format!("{base}/openapi.json");
        match openapi_version(http, bearer, &url).await {
            Ok((version, title)) => out.set(
                component,
                &version,
                format!("GET {url} info.version (title {title:?})"),
            ),
            Err(why) => out.set(
                component,
                UNKNOWN_VERSION,
                format!("not reported (GET {url}: {why})"),
            ),
        }
    }
    out.set(
        "dynamo-workers",
        UNKNOWN_VERSION,
        "not reported: neither the frontend nor the selection service exposes worker versions"
            .into(),
    );
    out
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
                // sy-sim is compiled into this binary from the same workspace, which gives every
                // crate one version: sy-collect's version is sy-sim's.
                let mut versions = BTreeMap::new();
                versions.insert(SIM_COMPONENT.into(), env!("CARGO_PKG_VERSION").into());
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

    /// The versions of the target's components, for the manifest: the embedded simulator's
    /// own version, or what a Dynamo deployment reports ([`dynamo_versions`]).
    pub async fn versions(&self, http: &reqwest::Client, bearer: Option<&str>) -> TargetVersions {
        match self.kind {
            TargetKind::Sim => {
                let mut out = TargetVersions::default();
                for (k, v) in &self.versions {
                    out.set(
                        k,
                        v,
                        "the embedded simulator (compiled into this sy-collect; same workspace \
                         version); it emulates the Dynamo 1.6.1 HTTP interfaces"
                            .into(),
                    );
                }
                out
            }
            TargetKind::Dynamo => {
                dynamo_versions(http, bearer, &self.frontend_url, &self.selection_url).await
            }
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
            let output = u64::from(plan.probe.max_tokens);
            let need = largest.saturating_add(output);
            // Blame what does not fit: the output alone, else the largest prompt.
            let field = if output >= cap || output > largest {
                "probe.max_tokens"
            } else {
                largest_field
            };
            if need > cap {
                return Err(CollectError::BadInput(format!(
                    "plan field `{field}`: a prompt of {largest} tokens (`{largest_field}`) plus \
                     {output} output tokens (`probe.max_tokens`) does not fit the KV capacity of \
                     model `{model}`: {cap} tokens per worker (total_kv_blocks × block_size); \
                     the server would reject it"
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

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A one-route HTTP server on 127.0.0.1: `GET /openapi.json` answers `openapi` (200) when
    /// given, 404 otherwise.
    async fn stub(openapi: Option<&'static str>) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut sock, _)) = listener.accept().await {
                let mut buf = vec![0u8; 4096];
                let n = sock.read(&mut buf).await.unwrap_or(0);
                let head = String::from_utf8_lossy(&buf[..n]).to_string();
                let (status, body) = match openapi {
                    Some(b) if head.starts_with("GET /openapi.json ") => ("200 OK", b),
                    _ => ("404 Not Found", r#"{"error":"route not found"}"#),
                };
                let resp = format!(
                    "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = sock.write_all(resp.as_bytes()).await;
            }
        });
        format!("http://{addr}")
    }

    #[tokio::test]
    async fn dynamo_versions_report_what_is_exposed_and_unknown_otherwise() {
        // Shaped like Dynamo 1.6.1: the frontend's OpenAPI document carries the release, the
        // selection service has no version route.
        let frontend = stub(Some(
            r#"{"openapi":"3.1.0","info":{"title":"NVIDIA Dynamo OpenAI Frontend","version":"1.6.1"},"paths":{}}"#,
        ))
        .await;
        let selection = stub(None).await;
        let http = reqwest::Client::new();
        let v = dynamo_versions(&http, None, &frontend, &selection).await;
        assert_eq!(v.versions["dynamo-frontend"], "1.6.1");
        assert!(
            v.sources["dynamo-frontend"].contains("/openapi.json info.version"),
            "{v:?}"
        );
        assert!(v.sources["dynamo-frontend"].contains("NVIDIA Dynamo OpenAI Frontend"));
        assert_eq!(v.versions["dynamo-selection-service"], UNKNOWN_VERSION);
        assert!(
            v.sources["dynamo-selection-service"].contains("HTTP 404"),
            "{v:?}"
        );
        assert_eq!(v.versions["dynamo-workers"], UNKNOWN_VERSION);
        assert_eq!(v.versions.len(), 3);

        // An OpenAPI document without a version, and a target that does not answer at all.
        let no_version = stub(Some(r#"{"info":{"title":"x"}}"#)).await;
        let v = dynamo_versions(&http, None, &no_version, "http://127.0.0.1:1").await;
        assert_eq!(v.versions["dynamo-frontend"], UNKNOWN_VERSION);
        assert!(v.sources["dynamo-frontend"].contains("no info.version"));
        assert_eq!(v.versions["dynamo-selection-service"], UNKNOWN_VERSION);
    }
}
