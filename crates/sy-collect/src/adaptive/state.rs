//! `adaptive.json`: the rounds an adaptive collection planned, what every look saw, and why it
//! stopped. Written (atomically) before a round runs and after its look, so `--resume` continues
//! from it and the report can say how the run was designed.

use std::path::Path;

use serde::{Deserialize, Serialize};
use sy_selector::Variant;

use super::decide::{JUDGED_VARIANT, Look};
use super::design::RoundPlan;
use super::error::AdaptiveError;
use super::spec::AdaptiveSpec;
use crate::estimate::GpuCount;

/// The file's name in the run directory and its layout version: defined with the run
/// directory's layout.
pub const ADAPTIVE_FILE: &str = sy_rundir::Artifact::Adaptive.file_name();
pub use sy_rundir::ADAPTIVE_SCHEMA_VERSION;

/// The stopping rule, named and cited (what the file and the report say).
pub const METHOD: &str = "asymptotic confidence sequence (Robbins normal mixture with plug-in variance; Waudby-Smith, Arbour, Sinha, Kennedy & Ramdas, Ann. Statist. 52(6), 2024) of the per-condition change of the judged variant versus Stage, each round's conditions judged by the rule fitted on the earlier rounds";

/// Why the collection stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The change versus Stage excludes zero: faster than Stage.
    Gain,
    /// The change versus Stage excludes zero: slower than Stage.
    Loss,
    /// The change versus Stage lies within ±ε.
    NoUsefulGain,
    /// The budget (or the plan's grid) is spent before a verdict: the question is open.
    Budget,
}

impl StopReason {
    /// The sentence the summary and the report print.
    pub fn sentence(self, epsilon_ms: f64) -> String {
        match self {
            StopReason::Gain => "the change versus Stage excludes zero: faster than Stage".into(),
            StopReason::Loss => "the change versus Stage excludes zero: slower than Stage".into(),
            StopReason::NoUsefulGain => {
                format!("the change versus Stage lies within ±{epsilon_ms} ms: no useful gain")
            }
            StopReason::Budget => {
                "the budget is spent before a verdict: the question is open".into()
            }
        }
    }
}

/// `adaptive.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdaptiveFile {
    pub schema_version: u32,
    /// The plan's SHA-256 and the seed (a resumed run must use both).
    pub plan_sha256: String,
    pub seed: u64,
    pub spec: AdaptiveSpec,
    /// Load units at most (the spec's budget, or the fixed plan's load units).
    pub budget_units: u64,
    /// The variant the stopping rule judges.
    pub judged_variant: Variant,
    pub method: String,
    pub rounds: Vec<RoundPlan>,
    /// One per finished round.
    pub looks: Vec<Look>,
    pub stopped: Option<StopReason>,
    /// What the run has spent, after its last session (`None` before the first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spent: Option<Spent>,
}

/// What a run has spent so far, from its manifest: the wall time of its units (every phase,
/// every session, retries included) and that time the GPUs of the target hold.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Spent {
    /// Wall time of the run's units, seconds.
    pub seconds: f64,
    /// Load units recorded, and their wall time (seconds).
    pub load_units: u64,
    pub load_seconds: f64,
    /// GPUs serving the two models (data-parallel ranks × GPUs per rank; ranks only when
    /// `gpus_per_rank_known` is false).
    pub gpus: u64,
    pub gpus_per_rank_known: bool,
    /// `seconds × gpus`.
    pub gpu_seconds: f64,
}

impl Spent {
    /// From a run's manifest and the GPUs of its target.
    pub fn of(manifest: &sy_rundir::artifact::manifest::Manifest, gpus: GpuCount) -> Spent {
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

    /// The GPUs it was counted with.
    pub fn gpu_count(&self) -> GpuCount {
        GpuCount {
            gpus: self.gpus,
            per_rank_known: self.gpus_per_rank_known,
        }
    }

    /// GPU-seconds one load unit has cost on average (`None` before the first).
    pub fn gpu_seconds_per_load_unit(&self) -> Option<f64> {
        (self.load_units > 0)
            .then(|| self.load_seconds / self.load_units as f64 * self.gpus as f64)
            .filter(|c| c.is_finite() && *c > 0.0)
    }
}

impl AdaptiveFile {
    pub fn new(plan_sha256: &str, seed: u64, spec: &AdaptiveSpec, budget_units: u64) -> Self {
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

    /// Reads `dir`'s file, if there is one.
    pub fn read(dir: &Path) -> Result<Option<AdaptiveFile>, AdaptiveError> {
        let path = dir.join(ADAPTIVE_FILE);
        if !path.exists() {
            return Ok(None);
        }
        let bad = |message: String| AdaptiveError::State {
            path: path.clone(),
            message,
        };
        let bytes = sy_rundir::read_input(&path, 64 << 20).map_err(|e| bad(e.to_string()))?;
        let file: AdaptiveFile = serde_json::from_slice(&bytes).map_err(|e| bad(e.to_string()))?;
        if file.schema_version != ADAPTIVE_SCHEMA_VERSION {
            return Err(bad(format!(
                "schema_version {} (this sy-collect reads {ADAPTIVE_SCHEMA_VERSION})",
                file.schema_version
            )));
        }
        if file.looks.len() > file.rounds.len() {
            return Err(bad(format!(
                "{} looks for {} rounds",
                file.looks.len(),
                file.rounds.len()
            )));
        }
        Ok(Some(file))
    }

    /// Writes the file into `dir` (atomically).
    pub fn write(&self, dir: &Path) -> Result<(), AdaptiveError> {
        let path = dir.join(ADAPTIVE_FILE);
        sy_cli::atomic_write_json(&path, self).map_err(|e| AdaptiveError::Write {
            path: path.clone(),
            message: e.to_string(),
        })
    }

    /// Load units planned in every round so far.
    pub fn planned_units(&self) -> u64 {
        (self.rounds.iter())
            .map(|r| r.units(self.spec.repeats).len() as u64)
            .sum()
    }

    /// Load conditions drawn so far.
    pub fn drawn(&self) -> usize {
        self.rounds.iter().map(|r| r.new_conditions.len()).sum()
    }

    /// A few lines for the terminal and the report: the design, the rounds, why it stopped.
    pub fn summary_lines(&self) -> Vec<String> {
        let gpu = match (self.spent, self.spec.budget_gpu_seconds > 0.0) {
            (Some(s), budget) => format!(
                ", {:.1} {}-seconds on {} {}{}",
                s.gpu_seconds,
                if s.gpus_per_rank_known { "GPU" } else { "rank" },
                s.gpus,
                if s.gpus_per_rank_known {
                    "GPUs"
                } else {
                    "ranks"
                },
                if budget {
                    format!(" of a budget of {}", self.spec.budget_gpu_seconds)
                } else {
                    String::new()
                }
            ),
            (None, true) => format!(
                ", a GPU-time budget of {} GPU-seconds",
                self.spec.budget_gpu_seconds
            ),
            (None, false) => String::new(),
        };
        let mut out = vec![format!(
            "Design: adaptive ({} rounds, {} load units of a budget of {}{gpu}; stopping rule: {} at α {}).",
            self.rounds.len(),
            self.planned_units(),
            self.budget_units,
            self.method,
            self.spec.alpha
        )];
        if let Some(l) = self.looks.last() {
            let cs = l.sequence.map_or("not yet".to_string(), |s| {
                format!("{:+.1} ms ({:+.1} to {:+.1})", s.mean, s.lo, s.hi)
            });
            out.push(format!(
                "Last look (round {}): {} conditions judged ({} without a measured pair), change of `{}` versus Stage {cs}, verdict {}.",
                l.round,
                l.judged_conditions,
                l.unjudged_conditions,
                self.judged_variant.as_str(),
                l.verdict.as_str()
            ));
        }
        out.push(match self.stopped {
            Some(r) => format!("Stopped: {}.", r.sentence(self.spec.epsilon_ms)),
            None => "Not stopped yet: continue with --adaptive --resume.".to_string(),
        });
        out
    }
}
