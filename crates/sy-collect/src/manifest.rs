//! The run manifest (`manifest.json`): what ran, against what, and how it ended.
//!
//! Written atomically when a run starts (so `--resume` can check that the plan is unchanged even
//! after a crash), at most once a second while it runs (units done so far) and again when it ends, with the counts per status and error class and the
//! end-of-run reservation check.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use sy_records::{Record, Status};
/// Defined with the run directory's layout (`sy_rundir::layout`).
pub use sy_rundir::MANIFEST_SCHEMA_VERSION;

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
    pub phases: BTreeMap<String, crate::summary::PhaseTime>,
    /// The end-of-run table (per phase and model), over every record of the run.
    #[serde(default)]
    pub summary: Vec<crate::summary::SummaryRow>,
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
    pub provenance: crate::deployment::Provenance,
    pub workers: Vec<crate::deployment::WorkerDescription>,
}

impl DeploymentInfo {
    pub fn from_description(d: &crate::deployment::LoadedDescription) -> Self {
        Self {
            file: d.path.display().to_string(),
            provenance: d.description.deployment.clone(),
            workers: d.description.workers.clone(),
        }
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
    pub warmup: Option<crate::warmup::WarmupSummary>,
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

impl Counts {
    pub fn from_records(records: &[Record], retried_attempts: u64) -> Self {
        let mut c = Counts {
            retried_attempts,
            ..Counts::default()
        };
        for r in records {
            c.records += 1;
            match r.status {
                Status::Ok => c.ok += 1,
                Status::Error => c.error += 1,
            }
            if let Some(class) = r.error_class {
                let name = serde_json::to_value(class)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_else(|| format!("{class:?}"));
                *c.by_error_class.entry(name).or_default() += 1;
            }
        }
        c
    }
}

impl Manifest {
    pub fn read(path: &Path) -> Result<Manifest, sy_rundir::ArtifactError> {
        sy_rundir::read_artifact(sy_rundir::Artifact::Manifest, path)
    }
}
