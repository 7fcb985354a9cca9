//! Reading what the earlier tools wrote into a run directory, checked: records (through the
//! probe-table cache), `splits.json`, the estimators of `fit.json`, and the provenance that ties
//! an artifact to the files it was made from. Shared by `sy-margin` and `sy-select`.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;
use sy_records::{LoadOptions, ProbeTable, SplitTable};
use sy_rundir::Artifact;
use sy_selector::{InputFile, ModelEstimators};

mod error;

pub use error::InputsError;

/// Both models' estimators, as `sy-fit` froze them in `fit.json`.
#[derive(Debug, Clone, PartialEq)]
pub struct FitEstimators {
    pub efficient: ModelEstimators,
    pub capable: ModelEstimators,
}

/// The path of an input: the explicit flag, else `run_dir/name`; an error naming the flag when
/// neither is given.
pub fn input_path(
    explicit: Option<&Path>,
    run_dir: Option<&Path>,
    artifact: Artifact,
    flag: &str,
) -> Result<PathBuf, InputsError> {
    match (explicit, run_dir) {
        (Some(p), _) => Ok(p.to_path_buf()),
        (None, Some(d)) => Ok(artifact.path(d)),
        (None, None) => Err(InputsError::NoPath {
            name: artifact.file_name().to_string(),
            flag: flag.to_string(),
        }),
    }
}

/// The record inputs: the explicit `--records` paths, else the run directory.
pub fn record_paths(
    explicit: &[PathBuf],
    run_dir: Option<&Path>,
) -> Result<Vec<PathBuf>, InputsError> {
    if !explicit.is_empty() {
        return Ok(explicit.to_vec());
    }
    match run_dir {
        Some(d) => Ok(vec![d.to_path_buf()]),
        None => Err(InputsError::NoRecordPaths),
    }
}

/// Loads and validates the records' calibration columns (see `sy_records::ProbeTable::load`),
/// through the probe-table cache `cache` when given (`sy_records::ProbeTable::load_cached`).
pub fn load_records(
    paths: &[PathBuf],
    skip_invalid: bool,
    cache: Option<&Path>,
) -> Result<ProbeTable, InputsError> {
    let loaded = ProbeTable::load_cached(paths, &LoadOptions { skip_invalid }, cache)?;
    if !loaded.skipped().is_empty() {
        tracing::warn!(
            skipped = loaded.skipped().len(),
            "skipped invalid rows: {:?}",
            loaded.skipped_by_field()
        );
    }
    Ok(loaded)
}

/// Reads `splits.json` written by `sy-fit`.
pub fn read_splits(path: &Path) -> Result<SplitTable, InputsError> {
    if !path.is_file() {
        return Err(InputsError::NoSplits(path.to_path_buf()));
    }
    Ok(SplitTable::read(path)?)
}

/// Refuses a split table other than the one `fit.json` was fitted on: its `split` member's
/// seed, fractions and per-split condition counts must be the table's (the split is a
/// function of the records, seed and fractions; the records are checked by hash).
pub fn check_split_of_fit(
    fit: &Path,
    splits: &SplitTable,
    splits_path: &Path,
) -> Result<(), InputsError> {
    let (_, value) = sy_rundir::read_document(Artifact::Fit, fit)?;
    let split = value.get("split").cloned().unwrap_or(Value::Null);
    let to_value = |v: serde_json::Result<Value>| v.unwrap_or(Value::Null);
    for (field, in_splits) in [
        ("seed", Value::from(splits.seed)),
        (
            "fractions",
            to_value(serde_json::to_value(splits.fractions)),
        ),
        ("conditions", to_value(serde_json::to_value(splits.counts))),
    ] {
        let in_fit = split.get(field).cloned().unwrap_or(Value::Null);
        if in_fit != in_splits {
            return Err(InputsError::OtherSplit {
                fit: fit.to_path_buf(),
                splits: splits_path.to_path_buf(),
                field,
                in_fit: sy_rundir::escape_control(&in_fit.to_string()),
                in_splits: in_splits.to_string(),
            });
        }
    }
    Ok(())
}

/// An input file with its SHA-256, for provenance.
pub fn input_file(path: &Path) -> Result<InputFile, InputsError> {
    Ok(InputFile {
        path: path.display().to_string(),
        sha256: sy_rundir::file_sha256(path)?,
    })
}

/// The estimators of `model` in a `fit.json` document: `models.<model>.estimators`, as `sy-fit`
/// writes them ([`sy_rundir::artifact::fit::FitFile`]; the document's kind and version are already checked). Only
/// this member is read, so the fit file's diagnostics may grow without breaking the later tools.
fn estimators_of(root: &Value, model: &str) -> Result<ModelEstimators, String> {
    let at = root
        .get("models")
        .and_then(|m| m.get(model))
        .and_then(|m| m.get("estimators"))
        .ok_or_else(|| "absent".to_string())?;
    ModelEstimators::deserialize(at).map_err(|e| e.to_string())
}

/// Reads both models' estimators from `fit.json`.
pub fn read_fit(path: &Path) -> Result<FitEstimators, InputsError> {
    let (_, value) = sy_rundir::read_document(Artifact::Fit, path)?;
    let get = |model: &'static str| {
        let est = estimators_of(&value, model).map_err(|why| InputsError::NoEstimators {
            path: path.to_path_buf(),
            model,
            why,
        })?;
        est.validate(&format!("models.{model}.estimators"))
            .map_err(|source| InputsError::BadEstimators {
                path: path.to_path_buf(),
                source,
            })?;
        Ok::<_, InputsError>(est)
    };
    Ok(FitEstimators {
        efficient: get("efficient")?,
        capable: get("capable")?,
    })
}

/// The record files `fit.json` was fitted on, with their SHA-256 (its `input_files`; empty for
/// fit files written before it existed).
pub fn fit_record_inputs(path: &Path) -> Result<Vec<InputFile>, InputsError> {
    let (_, value) = sy_rundir::read_document(Artifact::Fit, path)?;
    match value.get("input_files") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(v) => {
            serde_json::from_value(v.clone()).map_err(|source| InputsError::InputFilesField {
                path: path.to_path_buf(),
                source,
            })
        }
    }
}

/// Refuses inputs that are not the files an artifact was derived from: `derived` (e.g.
/// `fit.json`) lists in `field` the files (`expected`, with hashes) it came from, and `given`
/// are the files this tool was given. Compared by content hash, so a moved run directory is
/// fine but records, a fit or margins of another run are not. Nothing is checked when
/// `expected` is empty (an artifact written before provenance existed).
pub fn check_derived_from(
    derived: &Path,
    field: &str,
    expected: &[InputFile],
    given: &[InputFile],
) -> Result<(), InputsError> {
    if expected.is_empty() {
        return Err(InputsError::NoProvenance {
            derived: derived.to_path_buf(),
            field: field.to_string(),
        });
    }
    let mut want: Vec<&str> = expected.iter().map(|f| f.sha256.as_str()).collect();
    let mut have: Vec<&str> = given.iter().map(|f| f.sha256.as_str()).collect();
    want.sort_unstable();
    have.sort_unstable();
    if want == have {
        return Ok(());
    }
    Err(InputsError::NotDerivedFrom {
        derived: derived.to_path_buf(),
        field: field.to_string(),
        expected: expected.to_vec(),
        given: given.to_vec(),
    })
}
