//! The decision of an adaptive design, for the report's Answer.
//!
//! `sy-collect --adaptive` stops on a statistic of its own: each round's conditions judged by
//! the rule fitted on the earlier rounds (prequential, or progressive, validation: every judged
//! condition held out from the rule that judged it), read in round order by an anytime-valid
//! confidence sequence ([`sy_calibration::prequential`], the one definition both tools call).
//! The selection-split headline rests on about a quarter of the conditions drawn, which after an
//! early stop can be too few to decide although the stop did; the stop's own sequence rests on
//! every judged condition and keeps its level at any stopping time.
//!
//! So for a run directory with `adaptive.json` this recomputes the statistic from the records
//! and the rounds that file keeps (the rounds that were looked at), checks it equals the last
//! look the file recorded (the judged and unjudged conditions, the verdict, the sequence), and
//! gives the decision the report states beside the selection-split headline. A file that does
//! not match its records gives no decision, only the reason. Nothing here changes the fixed-plan
//! analysis, `selection.json` or the bundle.

use std::path::{Path, PathBuf};

use sy_calibration::prequential::{
    JUDGED_VARIANT, Prequential, PrequentialError, Settings, prequential,
};
use sy_records::Record;
use sy_rundir::artifact::adaptive::{AdaptiveFile, AdaptiveFileError, Look, StopReason};
use sy_selector::Variant;
use sy_stats::sequential::{SequenceInterval, Verdict};

use crate::uncertainty::{fmt_level, fmt_signed};

/// Why a run's adaptive decision cannot be stated (the report says so instead).
#[derive(Debug, thiserror::Error)]
pub enum AdaptiveAnswerError {
    #[error(transparent)]
    Read(#[from] AdaptiveFileError),
    #[error("{path}: the records merge {runs} runs: the stop's statistic is one run's")]
    Merged { path: PathBuf, runs: usize },
    #[error(
        "{path}: the stop's statistic judges `{found}`, this sy-select recomputes `{expected}`"
    )]
    Variant {
        path: PathBuf,
        found: Variant,
        expected: Variant,
    },
    #[error("{path}: no round was looked at (the collection stopped before its first look)")]
    NoLook { path: PathBuf },
    #[error("{path}: the records cannot be read: {message}")]
    Records { path: PathBuf, message: String },
    #[error("{path}: the stop's statistic cannot be recomputed: {source}")]
    Statistic {
        path: PathBuf,
        #[source]
        source: Box<PrequentialError>,
    },
    #[error(
        "{path}: the recomputed statistic differs from the recorded last look in {field} \
         (recorded {recorded}, recomputed {recomputed}): the file does not belong to these records"
    )]
    Mismatch {
        path: PathBuf,
        field: &'static str,
        recorded: String,
        recomputed: String,
    },
}

/// The decision of an adaptive design, recomputed and checked.
#[derive(Debug, Clone, PartialEq)]
pub struct AdaptiveAnswer {
    /// `adaptive.json`.
    pub path: PathBuf,
    pub verdict: Verdict,
    /// Why the collection stopped (`adaptive.json`'s `stopped`; `None`: interrupted).
    pub stopped: Option<StopReason>,
    pub judged_variant: Variant,
    /// The change of the judged variant versus Stage (ms) with its confidence sequence at the
    /// last look (`None` with fewer than 2 judged conditions).
    pub sequence: Option<SequenceInterval>,
    pub judged_conditions: u64,
    /// Rounds looked at.
    pub rounds: usize,
    pub epsilon_ms: f64,
}

impl AdaptiveAnswer {
    /// The level of the sequence, `1 − α`.
    pub fn level(&self) -> Option<f64> {
        self.sequence.map(|s| 1.0 - s.alpha)
    }

    /// The report's line.
    pub fn line(&self) -> String {
        let what = match self.verdict {
            Verdict::Gain => "**gain** (faster than Stage)".to_string(),
            Verdict::Loss => "**loss** (slower than Stage)".to_string(),
            Verdict::NoUsefulGain => {
                format!(
                    "**no useful gain** (within ±{} ms of Stage)",
                    self.epsilon_ms
                )
            }
            Verdict::Open => "**open** (no verdict at the last look: the report's decision is the selection-split interval above, as for a fixed plan)".to_string(),
        };
        let interval = self.sequence.map_or(
            "no sequence (fewer than 2 judged conditions)".to_string(),
            |s| {
                format!(
                    "{} ms ({} % anytime-valid confidence sequence {} to {})",
                    fmt_signed(s.mean),
                    fmt_level(1.0 - s.alpha),
                    fmt_signed(s.lo),
                    fmt_signed(s.hi)
                )
            },
        );
        let stopped = match self.stopped {
            Some(StopReason::Budget) => "the budget was spent first".to_string(),
            Some(s) => format!("the collection stopped on it ({})", s.as_str()),
            None => "the collection was interrupted before a stop".to_string(),
        };
        format!(
            "Decision of the adaptive design: {what}; {stopped}. Change of `{}` versus Stage {interval}: prequential, each of the {} judged conditions judged by the rule fitted on the earlier rounds only ({} rounds); the level holds at every look at once, so at the stop; recomputed from the records, equal to {}. It rests on every judged condition, the selection-split interval above on the selection split alone.",
            self.judged_variant.as_str(),
            self.judged_conditions,
            self.rounds,
            self.path.display(),
        )
    }
}

/// The adaptive run `records` name, if any: its `adaptive.json`. `None` for a fixed plan (no
/// such file); an error when several runs are merged and one is adaptive (the stop's statistic
/// is one run's).
fn adaptive_file(records: &[PathBuf]) -> Option<Result<PathBuf, AdaptiveAnswerError>> {
    let files: std::collections::BTreeSet<PathBuf> = (records.iter())
        .map(|r| crate::design::adaptive_file_of(r))
        .collect();
    let adaptive: Vec<&PathBuf> = files.iter().filter(|p| p.is_file()).collect();
    match (adaptive.as_slice(), files.len()) {
        ([], _) => None,
        ([one], 1) => Some(Ok((*one).clone())),
        ([one, ..], runs) => Some(Err(AdaptiveAnswerError::Merged {
            path: (*one).clone(),
            runs,
        })),
    }
}

/// The adaptive decision of the run `records` name: `None` for a fixed plan.
pub fn adaptive_answer(records: &[PathBuf]) -> Option<Result<AdaptiveAnswer, AdaptiveAnswerError>> {
    Some(adaptive_file(records)?.and_then(|path| answer_of(&path)))
}

/// The decision of the adaptive run whose `adaptive.json` is `path`: the records are its run
/// directory's `records.jsonl`, in the order `sy-collect` wrote them (the statistic deals the
/// earlier rounds' conditions to the fit and the margins in that order).
pub fn answer_of(path: &Path) -> Result<AdaptiveAnswer, AdaptiveAnswerError> {
    let doc = AdaptiveFile::read_path(path)?;
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    let records_path = sy_rundir::Artifact::Records.path(dir);
    let records: Vec<Record> = sy_records::jsonl::read::<Record>(&records_path)
        .map_err(|e| AdaptiveAnswerError::Records {
            path: records_path.clone(),
            message: e.to_string(),
        })?
        .records;
    answer_from(path, &doc, &records)
}

fn answer_from(
    path: &Path,
    doc: &AdaptiveFile,
    records: &[Record],
) -> Result<AdaptiveAnswer, AdaptiveAnswerError> {
    let path_buf = path.to_path_buf();
    if doc.judged_variant != JUDGED_VARIANT {
        return Err(AdaptiveAnswerError::Variant {
            path: path_buf,
            found: doc.judged_variant,
            expected: JUDGED_VARIANT,
        });
    }
    let Some(last) = doc.looks.last() else {
        return Err(AdaptiveAnswerError::NoLook { path: path_buf });
    };
    if doc.looks.len() > doc.rounds.len() {
        return Err(AdaptiveFileError::Looks {
            path: path_buf,
            looks: doc.looks.len(),
            rounds: doc.rounds.len(),
        }
        .into());
    }
    // The rounds looked at (an interrupted round after the last look is not).
    let rounds = &doc.rounds[..doc.looks.len()];
    let p = prequential(records, rounds, &Settings::of(&doc.spec), doc.seed).map_err(|source| {
        AdaptiveAnswerError::Statistic {
            path: path_buf.clone(),
            source: Box::new(source),
        }
    })?;
    check_equal(path, last, &p)?;
    Ok(AdaptiveAnswer {
        path: path_buf,
        verdict: p.verdict,
        stopped: doc.stopped,
        judged_variant: doc.judged_variant,
        sequence: p.sequence,
        judged_conditions: p.judged_conditions,
        rounds: rounds.len(),
        epsilon_ms: doc.spec.epsilon_ms,
    })
}

/// Equal up to the last digits JSON's decimal form may change.
fn close(a: f64, b: f64) -> bool {
    a == b || (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

/// The recomputed statistic `p` equals the `recorded` last look.
fn check_equal(path: &Path, recorded: &Look, p: &Prequential) -> Result<(), AdaptiveAnswerError> {
    let differ = |field: &'static str, recorded: String, recomputed: String| {
        Err(AdaptiveAnswerError::Mismatch {
            path: path.to_path_buf(),
            field,
            recorded,
            recomputed,
        })
    };
    if recorded.round != p.round {
        return differ("round", recorded.round.to_string(), p.round.to_string());
    }
    if recorded.judged_conditions != p.judged_conditions {
        return differ(
            "judged_conditions",
            recorded.judged_conditions.to_string(),
            p.judged_conditions.to_string(),
        );
    }
    if recorded.unjudged_conditions != p.unjudged_conditions {
        return differ(
            "unjudged_conditions",
            recorded.unjudged_conditions.to_string(),
            p.unjudged_conditions.to_string(),
        );
    }
    if recorded.verdict != p.verdict {
        return differ(
            "verdict",
            recorded.verdict.as_str().into(),
            p.verdict.as_str().into(),
        );
    }
    let same_sequence = match (recorded.sequence, p.sequence) {
        (None, None) => true,
        (Some(a), Some(b)) => {
            a.n == b.n
                && close(a.mean, b.mean)
                && close(a.lo, b.lo)
                && close(a.hi, b.hi)
                && close(a.alpha, b.alpha)
        }
        _ => false,
    };
    if !same_sequence {
        let show = |s: Option<SequenceInterval>| {
            s.map_or("none".to_string(), |s| {
                format!("n {} mean {} ({} to {})", s.n, s.mean, s.lo, s.hi)
            })
        };
        return differ("sequence", show(recorded.sequence), show(p.sequence));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use sy_records::Phase;
    use sy_records::synth::{SynthSpec, generate};

    /// Synthetic records in three rounds of 20 conditions, and the `adaptive.json` a collection
    /// that looked after each round would have written (its last look recomputed here).
    fn run() -> (Vec<Record>, serde_json::Value) {
        let records = generate(&SynthSpec {
            conditions: 60,
            repeats: 2,
            ..SynthSpec::default()
        });
        let mut ids: Vec<String> = Vec::new();
        for r in records.iter().filter(|r| r.phase == Phase::Load) {
            if !ids.contains(&r.condition_id) {
                ids.push(r.condition_id.clone());
            }
        }
        let rounds: Vec<serde_json::Value> = (0..3)
            .map(|i| {
                serde_json::json!({
                    "round": i,
                    "new_conditions": ids[i * 20..(i + 1) * 20],
                    "refine": [],
                })
            })
            .collect();
        let spec = serde_json::json!({"repeats": 2, "epsilon_ms": 2.0, "alpha": 0.05,
            "design_conditions": 40, "min_conditions": 10});
        let mut doc = serde_json::json!({
            "schema_version": sy_rundir::artifact::adaptive::ADAPTIVE_SCHEMA_VERSION,
            "plan_sha256": "0".repeat(64), "seed": 7, "spec": spec, "budget_units": 1000,
            "judged_variant": "cache", "method": "test", "rounds": rounds,
            "looks": [], "stopped": "gain",
        });
        let parsed: AdaptiveFile = serde_json::from_value(doc.clone()).unwrap();
        let settings = Settings::of(&parsed.spec);
        let look = |n: usize| {
            let p = prequential(&records, &parsed.rounds[..n], &settings, 7).unwrap();
            serde_json::json!({
                "round": p.round, "load_units": p.load_units,
                "judged_conditions": p.judged_conditions,
                "unjudged_conditions": p.unjudged_conditions,
                "sequence": p.sequence, "verdict": p.verdict,
                "margin_cache_ms": p.margin_cache_ms,
            })
        };
        doc["looks"] = serde_json::json!([look(1), look(2), look(3)]);
        (records, doc)
    }

    fn answer(
        records: &[Record],
        doc: &serde_json::Value,
    ) -> Result<AdaptiveAnswer, AdaptiveAnswerError> {
        let parsed: AdaptiveFile = serde_json::from_value(doc.clone()).unwrap();
        answer_from(Path::new("run/adaptive.json"), &parsed, records)
    }

    #[test]
    fn the_recomputed_statistic_is_the_recorded_one_and_the_decision_its_verdict() {
        let (records, doc) = run();
        let a = answer(&records, &doc).unwrap();
        let recorded: SequenceInterval =
            serde_json::from_value(doc["looks"][2]["sequence"].clone()).unwrap();
        assert_eq!(a.sequence, Some(recorded));
        assert_eq!(a.judged_conditions, 40);
        assert_eq!(a.rounds, 3);
        assert_eq!(a.level(), Some(0.95));
        let line = a.line();
        assert!(line.contains("anytime-valid"), "{line}");
        assert!(line.contains("prequential"), "{line}");
        assert!(line.contains("95 %"), "{line}");
        let sequence = format!(
            "{} to {})",
            fmt_signed(recorded.lo),
            fmt_signed(recorded.hi)
        );
        assert!(line.contains(&sequence), "{line}");
        assert!(
            line.contains(&format!("**{}", a.verdict.as_str().replace('_', " "))),
            "{line}"
        );
    }

    #[test]
    fn a_file_that_does_not_match_its_records_gives_no_decision() {
        let (records, doc) = run();
        // Another seed fits other rules.
        let mut other = doc.clone();
        other["looks"][2]["sequence"]["mean"] = serde_json::json!(-1000.0);
        let e = answer(&records, &other).unwrap_err();
        assert!(
            matches!(
                e,
                AdaptiveAnswerError::Mismatch {
                    field: "sequence",
                    ..
                }
            ),
            "{e}"
        );
        let mut other = doc.clone();
        other["looks"][2]["judged_conditions"] = serde_json::json!(39);
        let e = answer(&records, &other).unwrap_err();
        assert!(
            matches!(
                e,
                AdaptiveAnswerError::Mismatch {
                    field: "judged_conditions",
                    ..
                }
            ),
            "{e}"
        );
        // Records missing a round's conditions are judged differently.
        let dropped = doc["rounds"][2]["new_conditions"][0].as_str().unwrap();
        let fewer: Vec<Record> = (records.iter())
            .filter(|r| r.condition_id != dropped)
            .cloned()
            .collect();
        assert!(answer(&fewer, &doc).is_err());
        let mut other = doc.clone();
        other["judged_variant"] = serde_json::json!("blind");
        assert!(matches!(
            answer(&records, &other).unwrap_err(),
            AdaptiveAnswerError::Variant { .. }
        ));
        let mut other = doc;
        other["looks"] = serde_json::json!([]);
        assert!(matches!(
            answer(&records, &other).unwrap_err(),
            AdaptiveAnswerError::NoLook { .. }
        ));
    }

    #[test]
    fn an_interrupted_round_after_the_last_look_is_not_read() {
        let (records, mut doc) = run();
        // The third round was planned and (partly) measured, not looked at: the decision is the
        // second look's, on round 1's judged conditions alone.
        let looks = doc["looks"].as_array().unwrap()[..2].to_vec();
        doc["looks"] = serde_json::Value::Array(looks);
        doc["stopped"] = serde_json::Value::Null;
        let a = answer(&records, &doc).unwrap();
        assert_eq!(a.rounds, 2);
        assert_eq!(a.judged_conditions, 20);
        assert!(a.line().contains("interrupted"), "{}", a.line());
    }

    #[test]
    fn a_fixed_plan_has_no_adaptive_decision() {
        let dir = tempfile::tempdir().unwrap();
        let records = dir.path().join("records.jsonl");
        std::fs::write(&records, "").unwrap();
        assert!(adaptive_answer(&[records, dir.path().to_path_buf()]).is_none());
    }
}
