//! `manifest.json`: what a calibration run collected, against what, and how it ended
//! (`sy-collect` writes it when a run starts, at most once a second while it runs and when it
//! ends, with the counts per status and error class and the end-of-run reservation check).

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// Defined with the run directory's layout.
pub use crate::layout::MANIFEST_SCHEMA_VERSION;
use crate::layout::{Artifact, ArtifactError};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub schema_version: u32,
    pub tool: String,
    pub tool_version: String,
    pub run_id: String,
    pub plan_path: String,
    pub plan_sha256: String,
    pub seed: u64,
    pub target: TargetInfo,
    pub started_at: String,
    pub ended_at: Option<String>,
    pub sessions: Vec<Session>,
    /// The random id of every invocation of the tool on this run directory (the first run and
    /// each `--resume`), in order. Mixed into every prompt nonce, so no invocation reuses a
    /// prompt of another (see `prompt`). Empty in manifests written before it existed.
    #[serde(default)]
    pub invocation_ids: Vec<String>,
    pub units_total: u64,
    pub units_done: u64,
    pub complete: bool,
    pub counts: Counts,
    pub background: BackgroundCounts,
    /// Whether `/loads` showed no booked request or prefill token after the run.
    pub loads_zero_at_end: Option<bool>,
    /// Reservations whose delete failed (should be empty).
    pub outstanding_reservations: Vec<String>,
    /// Wall time and background traffic per phase, summed over sessions. Empty in manifests
    /// written before it existed.
    #[serde(default)]
    pub phases: BTreeMap<String, PhaseTime>,
    /// The end-of-run table (per phase and model), over every record of the run.
    #[serde(default)]
    pub summary: Vec<SummaryRow>,
    /// The record files as of the last finished session: records.parquet is the copy of
    /// records.jsonl with these hashes. `None` while a session runs and when the Parquet copy
    /// could not be written (then `complete` is false). Readers pick the source by it.
    #[serde(default)]
    pub records_files: Option<RecordFiles>,
    /// What produced the data beyond what the deployment reports (GPU, driver, engines, launch
    /// commands): the `--describe` file of the latest invocation. Absent without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment: Option<DeploymentInfo>,
}

/// The operator's description of the deployment (`--describe`), as recorded in the manifest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeploymentInfo {
    /// The description file (as given).
    pub file: String,
    pub provenance: Provenance,
    pub workers: Vec<WorkerDescription>,
}

impl Manifest {
    /// Reads and checks `manifest.json` (kind, schema version, layout).
    pub fn read(path: &Path) -> Result<Manifest, ArtifactError> {
        crate::read_artifact(Artifact::Manifest, path)
    }
}

/// The hashes tying records.parquet to the records.jsonl it was written from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordFiles {
    /// Records in both files.
    pub records: u64,
    /// Byte length of records.jsonl when records.parquet was written from it.
    pub jsonl_bytes: u64,
    /// SHA-256 of records.jsonl when records.parquet was written from it.
    pub jsonl_sha256: String,
    /// SHA-256 of that records.parquet.
    pub parquet_sha256: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TargetInfo {
    /// `sim` or `dynamo`.
    pub kind: String,
    pub frontend_url: String,
    pub selection_url: String,
    pub efficient_model: String,
    pub capable_model: String,
    /// Versions of the target's components as of the latest invocation (component → version;
    /// `"unknown"` where the target does not report one). For `dynamo`: `dynamo-frontend`,
    /// `dynamo-selection-service`, `dynamo-workers`; for `sim`: `sy-sim`.
    pub versions: BTreeMap<String, String>,
    /// Where each version came from (component → source, or why it is unknown).
    #[serde(default)]
    pub version_sources: BTreeMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Session {
    /// This invocation's random id (also in `Manifest::invocation_ids`).
    #[serde(default)]
    pub invocation_id: String,
    pub started_at: String,
    pub ended_at: Option<String>,
    pub resumed: bool,
    pub units_run: u64,
    pub interrupted: bool,
    /// Records of incomplete units moved to attempts.jsonl when resuming.
    pub records_moved: u64,
    pub torn_tail_ignored: bool,
    /// The target's versions as this invocation saw them (a resumed run may meet an upgraded
    /// deployment).
    #[serde(default)]
    pub target_versions: BTreeMap<String, String>,
    /// This invocation's unrecorded warm-up (`None`: none ran).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warmup: Option<WarmupSummary>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Counts {
    pub records: u64,
    pub ok: u64,
    pub error: u64,
    pub by_error_class: BTreeMap<String, u64>,
    /// Unit attempts that failed transiently and were retried (their records are in
    /// attempts.jsonl).
    pub retried_attempts: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BackgroundCounts {
    pub requests: u64,
    pub errors: BTreeMap<String, u64>,
}

/// Time and background traffic of one phase, summed over the sessions of a run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PhaseTime {
    /// Wall time spent running this phase's units (retries and back-off included).
    pub seconds: f64,
    /// Units completed (each two probes).
    pub units: u64,
    pub background_requests: u64,
    /// Background failures by class.
    pub background_errors: BTreeMap<String, u64>,
}

impl PhaseTime {
    /// What happened between `before` and `after` (background counters), plus `seconds`.
    pub fn delta(before: &PhaseTime, after: &PhaseTime, seconds: f64) -> PhaseTime {
        let mut errors = BTreeMap::new();
        for (k, v) in &after.background_errors {
            let d = v.saturating_sub(before.background_errors.get(k).copied().unwrap_or(0));
            if d > 0 {
                errors.insert(k.clone(), d);
            }
        }
        PhaseTime {
            seconds,
            units: 1,
            background_requests: after
                .background_requests
                .saturating_sub(before.background_requests),
            background_errors: errors,
        }
    }

    pub fn add(&mut self, other: &PhaseTime) {
        self.seconds += other.seconds;
        self.units += other.units;
        self.background_requests += other.background_requests;
        for (k, v) in &other.background_errors {
            *self.background_errors.entry(k.clone()).or_default() += v;
        }
    }
}

/// One row of the end-of-run table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SummaryRow {
    pub phase: String,
    pub model: String,
    /// Probe records (one per probe of this model).
    pub probes: u64,
    pub ok: u64,
    pub ttft_p50_ms: Option<f64>,
    pub ttft_p90_ms: Option<f64>,
    pub ttft_p99_ms: Option<f64>,
    /// Failed probes by error class.
    pub failures: BTreeMap<String, u64>,
    /// The phase's background requests and failures (the same on each model's row of a phase).
    pub phase_background_requests: u64,
    pub phase_background_failures: u64,
    /// The phase's wall time, and its probes (both models) per second.
    pub phase_seconds: f64,
    pub phase_probes_per_s: Option<f64>,
    /// K (the selection service's overlap, what the fit indexes by) against the engine's own
    /// `cached_tokens`, over the successful probes that report both.
    #[serde(default)]
    pub k_vs_cached: KVsCached,
}

/// How K compares with the engine's `cached_tokens` (`sy_records::check::k_vs_cached`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KVsCached {
    /// Probes with both K and `cached_tokens`.
    pub checked: u64,
    /// `cached_tokens = K`.
    pub equal: u64,
    /// K covers the whole prompt (K = N) and the engine reports less: it recomputed the block
    /// holding the last prompt token, as vLLM does to get that token's logits
    /// (docs/methodology.md, "K and the engine's cached tokens"). Expected; K stays the index.
    pub full_hit_recomputed: u64,
    /// Any other difference: the router's view and the engine's cache disagree (evicted blocks,
    /// lost KV events, a block-size mismatch). Should be 0.
    pub mismatch: u64,
}

/// What produced the data, as the operator states it (the deployment does not report GPU type,
/// driver or launch commands).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Provenance {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dynamo_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub launch: Vec<String>,
}

/// One worker process.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerDescription {
    /// The worker's system status server (`DYN_SYSTEM_PORT`), e.g. `http://127.0.0.1:8100`.
    pub system_url: String,
    /// Its KV-event publishers, one per data-parallel rank (see the module docs).
    pub kv_events: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<String>,
    /// GPUs per data-parallel rank (the tensor-parallel size); 1 when not given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus_per_rank: Option<u32>,
}

/// What the warm-up did (kept in the manifest).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WarmupSummary {
    /// (worker, rank) pairs warmed.
    pub ranks: u64,
    pub requests: u64,
    pub failed: u64,
    /// Prompt lengths used (tokens).
    pub prompt_tokens: Vec<u64>,
    pub seconds: f64,
    /// The first failures (worker, rank and message), at most five.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failures: Vec<String>,
}
