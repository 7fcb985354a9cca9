//! Reading what the earlier tools wrote into a run directory: records, `splits.json`,
//! `fit.json`. Shared by `sy-margin` and `sy-select`.

use std::path::{Path, PathBuf};

use serde_json::Value;
use sy_cli::ToolError;
use sy_fit::FIT_SCHEMA_VERSION;
use sy_records::{LoadOptions, ProbeTable, RecordsError, SplitTable};
use sy_selector::{InputFile, ModelEstimators};

/// Both models' estimators, as `sy-fit` froze them in `fit.json`.
#[derive(Debug, Clone, PartialEq)]
pub struct FitEstimators {
    pub efficient: ModelEstimators,
    pub capable: ModelEstimators,
}

/// Maps a records error to the tool's error (exit 2 for bad input, 1 otherwise).
pub fn records_error(e: RecordsError) -> ToolError {
    if e.is_bad_input() {
        ToolError::BadInput(e.to_string())
    } else {
        ToolError::Runtime(e.to_string())
    }
}

/// The path of an input: the explicit flag, else `run_dir/name`; an error naming the flag when
/// neither is given.
pub fn input_path(
    explicit: Option<&Path>,
    run_dir: Option<&Path>,
    name: &str,
    flag: &str,
) -> Result<PathBuf, ToolError> {
    match (explicit, run_dir) {
        (Some(p), _) => Ok(p.to_path_buf()),
        (None, Some(d)) => Ok(d.join(name)),
        (None, None) => Err(ToolError::BadInput(format!(
            "no {name}: pass {flag} FILE or --run-dir DIR"
        ))),
    }
}

/// The record inputs: the explicit `--records` paths, else the run directory.
pub fn record_paths(
    explicit: &[PathBuf],
    run_dir: Option<&Path>,
) -> Result<Vec<PathBuf>, ToolError> {
    if !explicit.is_empty() {
        return Ok(explicit.to_vec());
    }
    match run_dir {
        Some(d) => Ok(vec![d.to_path_buf()]),
        None => Err(ToolError::BadInput(
            "no records: pass --records FILE or --run-dir DIR".to_string(),
        )),
    }
}

/// Loads and validates the records' calibration columns (see `sy_records::ProbeTable::load`).
pub fn load_records(paths: &[PathBuf], skip_invalid: bool) -> Result<ProbeTable, ToolError> {
    let loaded = ProbeTable::load(paths, &LoadOptions { skip_invalid }).map_err(records_error)?;
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
pub fn read_splits(path: &Path) -> Result<SplitTable, ToolError> {
    if !path.is_file() {
        return Err(ToolError::BadInput(format!(
            "{}: no split table (run sy-fit first, or pass --splits FILE)",
            path.display()
        )));
    }
    SplitTable::read(path).map_err(records_error)
}

/// An input file with its SHA-256, for provenance.
pub fn input_file(path: &Path) -> Result<InputFile, ToolError> {
    Ok(InputFile {
        path: path.display().to_string(),
        sha256: sy_cli::file_sha256(path)?,
    })
}

/// Finds the `ModelEstimators` stored under the key `model` (directly or as its `estimators`
/// member: sy-fit writes `models.<model>.estimators`) anywhere in the document (breadth-first,
/// so the shallowest match wins). Reading by shape keeps the fit file's diagnostics free to
/// evolve without breaking the later tools.
fn find_estimators(root: &Value, model: &str) -> Option<ModelEstimators> {
    let mut queue = std::collections::VecDeque::from([root]);
    while let Some(v) = queue.pop_front() {
        if let Value::Object(map) = v {
            if let Some(candidate) = map.get(model) {
                // `models.<model>` is sy-fit's ModelFit: the estimators plus diagnostics.
                for c in [Some(candidate), candidate.get("estimators")]
                    .into_iter()
                    .flatten()
                {
                    if let Ok(est) = serde_json::from_value::<ModelEstimators>(c.clone()) {
                        return Some(est);
                    }
                }
            }
            queue.extend(map.values());
        } else if let Value::Array(items) = v {
            queue.extend(items.iter());
        }
    }
    None
}

/// Reads both models' estimators from `fit.json`.
pub fn read_fit(path: &Path) -> Result<FitEstimators, ToolError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        ToolError::BadInput(format!(
            "cannot read {}: {e} (run sy-fit first, or pass --fit FILE)",
            path.display()
        ))
    })?;
    let value: Value = serde_json::from_str(&text)
        .map_err(|e| ToolError::BadInput(format!("{}: not valid JSON: {e}", path.display())))?;
    match value.get("schema_version").and_then(Value::as_u64) {
        Some(v) if v == u64::from(FIT_SCHEMA_VERSION) => {}
        found => {
            return Err(ToolError::BadInput(format!(
                "{}: field `schema_version` is {}, this build reads fit files of schema version \
                 {FIT_SCHEMA_VERSION} (refit with this sy-fit)",
                path.display(),
                found.map_or("missing".to_string(), |v| v.to_string())
            )));
        }
    }
    let get = |model: &str| {
        let est = find_estimators(&value, model).ok_or_else(|| {
            ToolError::BadInput(format!(
                "{}: no estimators for the {model} model (expected sy-selector's ModelEstimators: q, standardiser, blind, cache)",
                path.display()
            ))
        })?;
        est.validate(&format!("models.{model}.estimators"))
            .map_err(|e| ToolError::BadInput(format!("{}: {e}", path.display())))?;
        Ok::<_, ToolError>(est)
    };
    Ok(FitEstimators {
        efficient: get("efficient")?,
        capable: get("capable")?,
    })
}

/// The record files `fit.json` was fitted on, with their SHA-256 (its `input_files`; empty for
/// fit files written before it existed).
pub fn fit_record_inputs(path: &Path) -> Result<Vec<InputFile>, ToolError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| ToolError::BadInput(format!("cannot read {}: {e}", path.display())))?;
    let value: Value = serde_json::from_str(&text)
        .map_err(|e| ToolError::BadInput(format!("{}: not valid JSON: {e}", path.display())))?;
    match value.get("input_files") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(v) => serde_json::from_value(v.clone()).map_err(|e| {
            ToolError::BadInput(format!(
                "{}: field `input_files`: expected a list of {{path, sha256}}: {e}",
                path.display()
            ))
        }),
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
) -> Result<(), ToolError> {
    if expected.is_empty() {
        return Ok(());
    }
    let mut want: Vec<&str> = expected.iter().map(|f| f.sha256.as_str()).collect();
    let mut have: Vec<&str> = given.iter().map(|f| f.sha256.as_str()).collect();
    want.sort_unstable();
    have.sort_unstable();
    if want == have {
        return Ok(());
    }
    let list = |files: &[InputFile]| {
        files
            .iter()
            .map(|f| {
                format!(
                    "{} (sha256 {})",
                    f.path,
                    &f.sha256[..f.sha256.len().min(12)]
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    Err(ToolError::BadInput(format!(
        "{}: field `{field}` says it was derived from {}, but this run was given {}: they are \
         not the same files (artifacts of different runs must not be mixed: redo the step, or \
         pass the files it was made from)",
        derived.display(),
        list(expected),
        list(given)
    )))
}
