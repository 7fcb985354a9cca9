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
        let mut out = vec![format!(
            "Design: adaptive ({} rounds, {} load units of a budget of {}; stopping rule: {} at α {}).",
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
