//! `adaptive.json`: the rounds an adaptive collection planned, what every look saw, and why it
//! stopped (`schemas/adaptive.schema.json`). `sy-collect --adaptive` writes it (atomically)
//! before a round runs and after its look, so `--resume` continues from it; `sy-select` reads
//! it for the report's first lines. The rounds' design, the looks and the plan's checks of the
//! `[adaptive]` section are `sy_collect::adaptive`'s; the stopping rule is
//! `sy_stats::sequential`'s.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sy_selector::Variant;
use sy_stats::sequential::{SequenceInterval, SequentialConfig, Verdict};

/// Defined with the run directory's layout.
pub use crate::layout::ADAPTIVE_SCHEMA_VERSION;
use crate::layout::{Artifact, ArtifactError};

/// The file's name in the run directory.
pub const ADAPTIVE_FILE: &str = Artifact::Adaptive.file_name();

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
    /// Its name in the file (`gain`, `loss`, `no_useful_gain`, `budget`).
    pub const fn as_str(self) -> &'static str {
        match self {
            StopReason::Gain => "gain",
            StopReason::Loss => "loss",
            StopReason::NoUsefulGain => "no_useful_gain",
            StopReason::Budget => "budget",
        }
    }

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

/// The plan's `[adaptive]` section, as the run used it: collect the `[load]` grid's conditions
/// in rounds, in a seeded random order, and stop when the change versus Stage is known (or the
/// budget is spent). The `[qgrid]` phase runs whole in the first round (the Q tables need every
/// cell). Its checks against the rest of the plan are `sy-collect`'s.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdaptiveSpec {
    /// New load conditions in the first round: they only fit the rule the next rounds are
    /// judged with (no rule has been fitted before them).
    pub first_round_conditions: u32,
    /// New load conditions in every later round.
    pub round_conditions: u32,
    /// Repeats of every new condition (at most `[load] repeats`). The stopping rule reads these.
    pub repeats: u32,
    /// Extra units per round given to the conditions whose measured advantage is least certain
    /// near the margin, one more repeat each (up to `[load] repeats`). They sharpen the fit and
    /// the margins; the stopping rule does not read them.
    pub refine_units: u32,
    /// The no-useful-gain band: a change versus Stage known to lie within ±epsilon_ms is an
    /// answer.
    pub epsilon_ms: f64,
    /// Error rate of the stopping rule over every look together.
    pub alpha: f64,
    /// Judged conditions at which the confidence sequence is tightest (t*).
    pub design_conditions: u32,
    /// No verdict before this many judged conditions.
    pub min_conditions: u32,
    /// Load units (paired probes) at most, every round together; 0 = the fixed plan's load
    /// units (`[load]`'s conditions × repeats).
    pub budget_units: u64,
    /// GPU-seconds at most, every round together (0 = no GPU-time budget): the wall time of
    /// the run's units, every phase and session, times the GPUs serving the two models (what
    /// the dry run's GPU time counts). Round 0 always runs (it measures what a unit costs);
    /// every later round takes only the load units the rest of the budget pays for at the
    /// cost per load unit measured so far, and the collection stops when it cannot pay for
    /// one more condition.
    pub budget_gpu_seconds: f64,
}

impl Default for AdaptiveSpec {
    fn default() -> Self {
        AdaptiveSpec {
            first_round_conditions: 24,
            round_conditions: 12,
            repeats: 2,
            refine_units: 0,
            epsilon_ms: 2.0,
            alpha: 0.05,
            design_conditions: 60,
            min_conditions: 20,
            budget_units: 0,
            budget_gpu_seconds: 0.0,
        }
    }
}

impl AdaptiveSpec {
    /// The stopping rule's settings.
    pub fn sequential(&self) -> SequentialConfig {
        SequentialConfig {
            alpha: self.alpha,
            design_n: f64::from(self.design_conditions),
            min_n: u64::from(self.min_conditions),
        }
    }
}

/// A unit: (condition id, repeat).
pub type UnitKey = (String, u32);

/// One round: the new load conditions it draws (each with repeats `0..repeats`) and the extra
/// repeats it gives to uncertain conditions of earlier rounds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoundPlan {
    pub round: u32,
    pub new_conditions: Vec<String>,
    pub refine: Vec<UnitKey>,
}

impl RoundPlan {
    /// The round's load units.
    pub fn units(&self, repeats: u32) -> Vec<UnitKey> {
        let mut out: Vec<UnitKey> = (self.new_conditions.iter())
            .flat_map(|c| (0..repeats).map(move |r| (c.clone(), r)))
            .collect();
        out.extend(self.refine.iter().cloned());
        out
    }
}

/// What one look (after a round) saw.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Look {
    /// The round just finished (0-based).
    pub round: u32,
    /// Load units recorded so far.
    pub load_units: u64,
    /// Conditions judged so far (their values, in round order, are what the sequence reads).
    pub judged_conditions: u64,
    /// Drawn conditions without a measured pair on both models (not judged).
    pub unjudged_conditions: u64,
    /// The confidence sequence of the change versus Stage (ms), once 2 conditions are judged.
    pub sequence: Option<SequenceInterval>,
    /// The confidence sequence of the attainable change (ms): per judged condition the mean of
    /// `min(0, TTFT_cap − TTFT_eff)` over its pairs, the most any rule could gain there. While
    /// the judged rule has not acted in any judged condition, a *no useful gain* verdict needs
    /// its lower end within ε (`sy_stats::sequential::verdict_bounded`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attainable: Option<SequenceInterval>,
    pub verdict: Verdict,
    /// The latest rule's cache margin (ms), when fitted.
    pub margin_cache_ms: Option<f64>,
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
    /// GPU-seconds one load unit has cost on average (`None` before the first).
    pub fn gpu_seconds_per_load_unit(&self) -> Option<f64> {
        (self.load_units > 0)
            .then(|| self.load_seconds / self.load_units as f64 * self.gpus as f64)
            .filter(|c| c.is_finite() && *c > 0.0)
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
    /// The stopping rule, named and cited.
    pub method: String,
    pub rounds: Vec<RoundPlan>,
    /// One per finished round.
    pub looks: Vec<Look>,
    pub stopped: Option<StopReason>,
    /// What the run has spent, after its last session (`None` before the first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spent: Option<Spent>,
}

impl AdaptiveFile {
    /// Reads run directory `dir`'s file, if there is one.
    pub fn read(dir: &Path) -> Result<Option<AdaptiveFile>, AdaptiveFileError> {
        let path = dir.join(ADAPTIVE_FILE);
        if !path.exists() {
            return Ok(None);
        }
        AdaptiveFile::read_path(&path).map(Some)
    }

    /// Reads and checks the file at `path`: its kind and version ([`crate::read_artifact`]),
    /// its members (the first that does not fit is named) and no more looks than rounds.
    pub fn read_path(path: &Path) -> Result<AdaptiveFile, AdaptiveFileError> {
        let file: AdaptiveFile = crate::read_artifact(Artifact::Adaptive, path)?;
        if file.looks.len() > file.rounds.len() {
            return Err(AdaptiveFileError::Looks {
                path: path.to_path_buf(),
                looks: file.looks.len(),
                rounds: file.rounds.len(),
            });
        }
        Ok(file)
    }

    /// Writes the file into run directory `dir` (atomically).
    pub fn write(&self, dir: &Path) -> Result<(), AdaptiveFileError> {
        crate::atomic_write_json(&dir.join(ADAPTIVE_FILE), self).map_err(AdaptiveFileError::Write)
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

    /// A few lines for the terminal: the design, the rounds, why it stopped.
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

/// Why an `adaptive.json` cannot be read or written; every message names the file.
#[derive(Debug, thiserror::Error)]
pub enum AdaptiveFileError {
    /// Not readable, not JSON, another kind of file, another version, or not the layout (the
    /// member is named).
    #[error(transparent)]
    Artifact(#[from] ArtifactError),
    #[error("{}: {looks} looks for {rounds} rounds (a look follows its round)", path.display())]
    Looks {
        path: PathBuf,
        looks: usize,
        rounds: usize,
    },
    /// The atomic write failed (the path is named).
    #[error(transparent)]
    Write(crate::RunError),
}

impl AdaptiveFileError {
    /// A file that cannot be read is the input's fault (exit code 2); a failed write is the
    /// run's (exit code 1).
    pub fn is_bad_input(&self) -> bool {
        !matches!(self, AdaptiveFileError::Write(_))
    }
}

crate::impl_fault!(AdaptiveFileError);

#[cfg(test)]
mod tests {
    use super::*;

    fn file() -> AdaptiveFile {
        AdaptiveFile {
            schema_version: ADAPTIVE_SCHEMA_VERSION,
            plan_sha256: "ab".repeat(32),
            seed: 7,
            spec: AdaptiveSpec::default(),
            budget_units: 100,
            judged_variant: Variant::Cache,
            method: "a confidence sequence".to_string(),
            rounds: vec![RoundPlan {
                round: 0,
                new_conditions: vec!["c1".into(), "c2".into()],
                refine: vec![("c0".into(), 3)],
            }],
            looks: Vec::new(),
            stopped: Some(StopReason::NoUsefulGain),
            spent: None,
        }
    }

    #[test]
    fn the_file_round_trips_and_counts_its_units() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(AdaptiveFile::read(dir.path()), Ok(None)));
        let f = file();
        f.write(dir.path()).unwrap_or_else(|e| panic!("{e}"));
        let back = AdaptiveFile::read(dir.path()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(back.as_ref(), Some(&f));
        assert_eq!(f.planned_units(), 2 * 2 + 1);
        assert_eq!(f.drawn(), 2);
        let text = std::fs::read_to_string(dir.path().join(ADAPTIVE_FILE)).unwrap_or_default();
        assert!(text.contains("\"stopped\": \"no_useful_gain\""), "{text}");
        assert_eq!(StopReason::NoUsefulGain.as_str(), "no_useful_gain");
    }

    #[test]
    fn a_bad_file_is_refused_with_its_name_and_field() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join(ADAPTIVE_FILE);
        let err = |text: &str| {
            std::fs::write(&path, text).unwrap_or_else(|e| panic!("{e}"));
            let e = AdaptiveFile::read(dir.path()).err();
            assert!(e.as_ref().is_some_and(AdaptiveFileError::is_bad_input));
            e.map(|e| e.to_string()).unwrap_or_default()
        };
        let mut f = file();
        f.schema_version = 9;
        let e = err(&serde_json::to_string(&f).unwrap_or_default());
        assert!(
            e.contains("adaptive.json") && e.contains("schema_version 9"),
            "{e}"
        );
        let e = err(r#"{"schema_version": 1, "seed": "x"}"#);
        assert!(e.contains("adaptive.json") && e.contains("`seed`"), "{e}");
        let mut f = file();
        f.looks = vec![
            Look {
                round: 0,
                load_units: 4,
                judged_conditions: 0,
                unjudged_conditions: 0,
                sequence: None,
                attainable: None,
                verdict: Verdict::Open,
                margin_cache_ms: None,
            };
            2
        ];
        let e = err(&serde_json::to_string(&f).unwrap_or_default());
        assert!(e.contains("2 looks for 1 rounds"), "{e}");
    }

    #[test]
    fn the_summary_names_the_stop_and_the_gpu_time() {
        let mut f = file();
        f.spent = Some(Spent {
            seconds: 10.0,
            load_units: 4,
            load_seconds: 8.0,
            gpus: 2,
            gpus_per_rank_known: true,
            gpu_seconds: 20.0,
        });
        let lines = f.summary_lines();
        assert!(
            lines[0]
                .contains("1 rounds, 5 load units of a budget of 100, 20.0 GPU-seconds on 2 GPUs"),
            "{lines:?}"
        );
        assert!(
            lines.last().is_some_and(|l| l.contains("no useful gain")),
            "{lines:?}"
        );
        assert_eq!(
            f.spent.and_then(|s| s.gpu_seconds_per_load_unit()),
            Some(4.0)
        );
    }
}
