//! `sy-select replay` and `sy-select decide`: run a frozen bundle over records, or over one
//! observation document.

use std::path::{Path, PathBuf};

use sy_calibration::inputs;
use sy_records::{ProbePair, Split};
use sy_selector::{Bundle, Decision, DecisionInput, Variant};

pub use crate::error::{ObservationsError, ReplayError};
use crate::evaluate::{Replay, eval_pairs, replay_all};

/// Loads and checks a bundle (schema version, structure, content hash, parameters).
pub fn load_bundle(path: &Path) -> Result<Bundle, ReplayError> {
    Bundle::from_path(path).map_err(|e| match e {
        sy_selector::BundleError::Io { .. } => ReplayError::BundleUnreadable(e),
        source => ReplayError::Bundle {
            path: path.to_path_buf(),
            source,
        },
    })
}

/// Which pairs to replay.
#[derive(Debug, Clone)]
pub struct ReplayOptions {
    pub bundle: PathBuf,
    pub records: Vec<PathBuf>,
    /// Restrict to one split of this table (`None` = every load-phase pair).
    pub split: Option<(PathBuf, Split)>,
    pub skip_invalid: bool,
    /// Also write every decision (JSON Lines, or Parquet for a `.parquet` name).
    pub decisions: Option<PathBuf>,
}

/// What a replay produced.
#[derive(Debug)]
pub struct ReplayResult {
    pub bundle: Bundle,
    pub replay: Replay,
    /// The records include the bundle's own calibration records outside the selection split:
    /// the numbers are (partly) in-sample.
    pub in_sample: bool,
    /// Decision rows written to `decisions`.
    pub decisions_written: usize,
}

/// The in-sample warning.
pub const IN_SAMPLE_WARNING: &str = "these records include the bundle's own calibration records (its fit split among them): the replay is in-sample and flatters the bundle; pass --split selection (with the run's splits.json) for an out-of-sample evaluation";

/// Replays every variant with the bundle's parameters.
pub fn replay(opts: &ReplayOptions) -> Result<ReplayResult, ReplayError> {
    let bundle = load_bundle(&opts.bundle)?;
    let loaded = inputs::load_records(&opts.records, opts.skip_invalid, None)?;
    let table = match &opts.split {
        Some((path, split)) => {
            let t = inputs::read_splits(path)?;
            t.check_covers(&loaded, path)?;
            Some((t, *split))
        }
        None => None,
    };
    let condition_splits = table
        .as_ref()
        .map(|(t, s)| (loaded.condition_splits(t), *s));
    let keep = |p: &ProbePair| match &condition_splits {
        Some((splits, s)) => splits[p.condition() as usize] == Some(*s),
        None => true,
    };
    let (eval, unmeasured) = eval_pairs(loaded.pairs().filter(keep));
    if eval.is_empty() {
        return Err(ReplayError::NoPairs {
            split: opts.split.as_ref().map(|(_, s)| *s),
        });
    }
    let files: Vec<PathBuf> = loaded.files().iter().map(|f| f.path.clone()).collect();
    let out_of_sample = matches!(opts.split, Some((_, Split::Selection | Split::Uncertainty)));
    let in_sample = !out_of_sample && shares_calibration_records(&bundle, &files)?;
    let mut decisions_written = 0;
    if let Some(path) = &opts.decisions {
        let rows = decision_rows(&bundle, loaded.pairs().filter(keep));
        write_decisions(&rows, path)?;
        decisions_written = rows.len();
    }
    let replay = replay_all(&bundle.params, &eval, unmeasured);
    Ok(ReplayResult {
        bundle,
        replay,
        in_sample,
        decisions_written,
    })
}

/// Parses the observation document of `sy-select decide` (a `sy_selector::DecisionInput`). The
/// shape is checked first so a member of the wrong kind (`"capable": []`, which serde would read
/// as an observation with every field absent) is refused, naming the file and the member.
pub fn read_observations(path: &Path) -> Result<DecisionInput, ObservationsError> {
    let path_buf = || path.to_path_buf();
    if let Ok(m) = std::fs::metadata(path)
        && !m.is_file()
    {
        return Err(ObservationsError::Read {
            path: path_buf(),
            source: std::io::Error::other("not a regular file"),
        });
    }
    let text = std::fs::read_to_string(path).map_err(|source| ObservationsError::Read {
        path: path_buf(),
        source,
    })?;
    let value: serde_json::Value =
        serde_json::from_str(&text).map_err(|source| ObservationsError::Json {
            path: path_buf(),
            source,
        })?;
    let Some(doc) = value.as_object() else {
        return Err(ObservationsError::NotAnObject { path: path_buf() });
    };
    if !doc.contains_key("proposal") {
        return Err(ObservationsError::Missing {
            path: path_buf(),
            field: "proposal",
        });
    }
    for field in ["efficient", "capable"] {
        match doc.get(field) {
            Some(serde_json::Value::Object(_)) => {}
            Some(other) => {
                return Err(ObservationsError::NotAnObservation {
                    path: path_buf(),
                    field,
                    found: json_kind(other),
                });
            }
            None => {
                return Err(ObservationsError::Missing {
                    path: path_buf(),
                    field,
                });
            }
        }
    }
    serde_json::from_value(value).map_err(|source| ObservationsError::Invalid {
        path: path_buf(),
        source,
    })
}

fn json_kind(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

/// One decision with the bundle's parameters and its variant (or `variant`).
pub fn decide_one(bundle: &Bundle, variant: Option<Variant>, input: &DecisionInput) -> Decision {
    sy_selector::decide(&bundle.params, variant.unwrap_or(bundle.variant), input)
}

/// One decision of one variant on one paired probe: what `sy-select replay --decisions` writes.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct DecisionRow {
    pub run_id: String,
    pub condition_id: String,
    pub repeat: u32,
    /// Background generation length of the condition (`short`, `long`), if any.
    pub decode_length: Option<&'static str>,
    /// Inputs: both candidates' observations.
    pub n_efficient: Option<f64>,
    pub k_efficient: Option<f64>,
    pub r_efficient: Option<f64>,
    pub p_efficient: Option<f64>,
    pub n_capable: Option<f64>,
    pub k_capable: Option<f64>,
    pub r_capable: Option<f64>,
    pub p_capable: Option<f64>,
    /// The decision (variant, choice, reason, predictions, advantage, margin, thresholds).
    #[serde(flatten)]
    pub decision: Decision,
    /// Measured TTFTs.
    pub ttft_efficient_ms: f64,
    pub ttft_capable_ms: f64,
    pub selected_ttft_ms: f64,
    pub oracle_ttft_ms: f64,
}

/// Every variant's decision on every measured pair among `pairs`, with the bundle's parameters.
pub fn decision_rows<'r>(
    bundle: &Bundle,
    pairs: impl IntoIterator<Item = ProbePair<'r>>,
) -> Vec<DecisionRow> {
    let mut rows = Vec::new();
    for p in pairs {
        let Some(e) = crate::evaluate::EvalPair::from_pair(&p) else {
            continue;
        };
        let input = e.input();
        let (oe, oc) = (&input.efficient, &input.capable);
        for variant in Variant::ALL {
            let d = sy_selector::decide(&bundle.params, variant, &input);
            rows.push(DecisionRow {
                run_id: p.run_id().to_string(),
                condition_id: p.condition_id().to_string(),
                repeat: p.repeat(),
                decode_length: e.decode_length.map(|l| l.as_str()),
                n_efficient: oe.valid_n().ok(),
                k_efficient: oe.k,
                r_efficient: oe.valid_r().ok(),
                p_efficient: oe.valid_p().ok(),
                n_capable: oc.valid_n().ok(),
                k_capable: oc.k,
                r_capable: oc.valid_r().ok(),
                p_capable: oc.valid_p().ok(),
                decision: d,
                ttft_efficient_ms: e.ttft_eff_ms,
                ttft_capable_ms: e.ttft_cap_ms,
                selected_ttft_ms: e.selected_ttft(d.choice),
                oracle_ttft_ms: e.oracle_ttft(),
            });
        }
    }
    rows
}

/// Writes decision rows as JSON Lines, or as Parquet when `path` ends in `.parquet` (atomic).
pub fn write_decisions(rows: &[DecisionRow], path: &Path) -> Result<(), ReplayError> {
    let mut jsonl = Vec::new();
    for r in rows {
        serde_json::to_writer(&mut jsonl, r).map_err(ReplayError::SerialiseDecision)?;
        jsonl.push(b'\n');
    }
    let parquet = path
        .extension()
        .is_some_and(|x| x.eq_ignore_ascii_case("parquet"));
    if !parquet {
        return Ok(sy_cli::atomic_write(path, &jsonl)?);
    }
    use polars::prelude::*;
    let err = |source: PolarsError| ReplayError::Parquet {
        path: path.to_path_buf(),
        source,
    };
    let mut df = crate::jsonl_frame::jsonl_frame(&jsonl).map_err(err)?;
    let mut bytes = Vec::new();
    ParquetWriter::new(&mut bytes)
        .finish(&mut df)
        .map_err(err)?;
    Ok(sy_cli::atomic_write(path, &bytes)?)
}

/// Whether any of the record files is one the bundle was calibrated on (same SHA-256 as an input
/// of its provenance).
pub fn shares_calibration_records(bundle: &Bundle, files: &[PathBuf]) -> Result<bool, ReplayError> {
    for f in files {
        let mine = inputs::input_file(f)?;
        if bundle
            .provenance
            .input_files
            .iter()
            .any(|i| i.sha256 == mine.sha256)
        {
            return Ok(true);
        }
    }
    Ok(false)
}
