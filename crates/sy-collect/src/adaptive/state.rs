//! `adaptive.json`, the collection's state: written (atomically) before a round runs and after
//! its look, so `--resume` continues from it and the report can say how the run was designed.
//! The document type, its read and its write are the run directory's
//! (`sy_rundir::artifact::adaptive`); what fills it from this tool's run is here.

use sy_rundir::artifact::manifest::Manifest;

pub use sy_rundir::artifact::adaptive::{
    ADAPTIVE_FILE, ADAPTIVE_SCHEMA_VERSION, AdaptiveFile, AdaptiveFileError, Spent, StopReason,
};

use super::decide::JUDGED_VARIANT;
use super::spec::AdaptiveSpec;
use crate::estimate::GpuCount;

/// The stopping rule, named and cited (what the file and the report say).
pub const METHOD: &str = "asymptotic confidence sequence (Robbins normal mixture with plug-in variance; Waudby-Smith, Arbour, Sinha, Kennedy & Ramdas, Ann. Statist. 52(6), 2024) of the per-condition change of the judged variant versus Stage, each round's conditions judged by the rule fitted on the earlier rounds";

/// The state of a new adaptive collection: no round yet, this tool's judged variant and
/// stopping rule.
pub fn start(plan_sha256: &str, seed: u64, spec: &AdaptiveSpec, budget_units: u64) -> AdaptiveFile {
    AdaptiveFile {
        schema_version: ADAPTIVE_SCHEMA_VERSION,
        plan_sha256: plan_sha256.to_string(),
        seed,
        spec: spec.clone(),
        budget_units,
        judged_variant: JUDGED_VARIANT,
        method: METHOD.to_string(),
        rounds: Vec::new(),
        looks: Vec::new(),
        stopped: None,
        spent: None,
    }
}

/// What a run has spent, from its manifest and the GPUs of its target.
pub fn spent(manifest: &Manifest, gpus: GpuCount) -> Spent {
    let seconds: f64 = manifest.phases.values().map(|p| p.seconds).sum();
    let load = manifest.phases.get(sy_records::Phase::Load.as_str());
    Spent {
        seconds,
        load_units: load.map_or(0, |p| p.units),
        load_seconds: load.map_or(0.0, |p| p.seconds),
        gpus: gpus.gpus,
        gpus_per_rank_known: gpus.per_rank_known,
        gpu_seconds: seconds * gpus.gpus as f64,
    }
}

/// The GPUs a run's spending was counted with.
impl From<&Spent> for GpuCount {
    fn from(spent: &Spent) -> GpuCount {
        GpuCount {
            gpus: spent.gpus,
            per_rank_known: spent.gpus_per_rank_known,
        }
    }
}
