//! Which record file of a run directory to read: the newest complete source, or a clear refusal.
//!
//! A run directory written by `sy-collect` holds `records.jsonl` (appended as units finish),
//! `records.parquet` (a copy written when a session ends) and `manifest.json`. After an
//! interrupted and resumed collection they can disagree: an old Parquet copy beside a newer
//! JSONL file, or a run that never finished. The rules:
//!
//! 1. A manifest that says the run is not `complete` is refused (finish it with
//!    `sy-collect --resume`, or name a record file explicitly with `--records`).
//! 2. A manifest with `records_files` ties the Parquet copy to the JSONL it was written from
//!    (record count, the JSONL's byte length and both hashes): the Parquet copy is read when it
//!    is that copy and the JSONL is unchanged; the JSONL is read when only it matches (the copy
//!    is missing or stale); anything else is refused, naming both files.
//! 3. Without such a manifest (older runs, hand-made directories), the newer of
//!    `records.parquet` and `records.jsonl` (by modification time) wins, then `records.csv`.

use std::path::{Path, PathBuf};
use sy_rundir::Artifact;

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::error::RecordsError;

/// Record file names looked for in a run directory, in order of preference.
pub const RUN_DIR_RECORD_FILES: &[&str] = &[
    Artifact::RecordsParquet.file_name(),
    Artifact::Records.file_name(),
    "records.csv",
];

fn format_err(path: &Path, message: String) -> RecordsError {
    RecordsError::Format {
        path: path.to_path_buf(),
        message,
    }
}

fn sha256_of(path: &Path) -> Result<String, RecordsError> {
    let bytes = std::fs::read(path).map_err(|e| RecordsError::Read {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    Ok(hex::encode(Sha256::digest(&bytes)))
}

/// The record file to read from run directory `dir` (see the module docs).
pub fn record_file_of_run_dir(dir: &Path) -> Result<PathBuf, RecordsError> {
    let parquet = Artifact::RecordsParquet.path(dir);
    let jsonl = Artifact::Records.path(dir);
    let manifest_path = dir.join(Artifact::Manifest.file_name());
    if manifest_path.is_file() {
        let manifest = read_manifest(&manifest_path)?;
        check_complete(&manifest_path, &manifest)?;
        if let Some(files) = manifest.get("records_files").filter(|v| !v.is_null()) {
            return by_manifest(&manifest_path, files, &parquet, &jsonl);
        }
    }
    let newer = |a: &Path, b: &Path| -> bool {
        let m = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
        matches!((m(a), m(b)), (Some(x), Some(y)) if x > y)
    };
    if parquet.is_file() && jsonl.is_file() && newer(&jsonl, &parquet) {
        return Ok(jsonl);
    }
    RUN_DIR_RECORD_FILES
        .iter()
        .map(|name| dir.join(name))
        .find(|c| c.is_file())
        .ok_or_else(|| {
            format_err(
                dir,
                format!(
                    "run directory has no records (looked for {})",
                    RUN_DIR_RECORD_FILES.join(", ")
                ),
            )
        })
}

fn read_manifest(path: &Path) -> Result<Value, RecordsError> {
    let text = std::fs::read_to_string(path).map_err(|e| RecordsError::Read {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    let value: Value = serde_json::from_str(&text)
        .map_err(|e| format_err(path, format!("not a run manifest: {e}")))?;
    if !value.is_object() {
        return Err(format_err(
            path,
            "not a run manifest: expected an object".into(),
        ));
    }
    Ok(value)
}

fn check_complete(path: &Path, manifest: &Value) -> Result<(), RecordsError> {
    match manifest.get("complete") {
        Some(Value::Bool(true)) => Ok(()),
        Some(Value::Bool(false)) => {
            let n = |k: &str| {
                manifest
                    .get(k)
                    .and_then(Value::as_u64)
                    .map_or("?".to_string(), |v| v.to_string())
            };
            Err(format_err(
                path,
                format!(
                    "field `complete` is false: the run is not complete ({} of {} units done): \
                     finish it with `sy-collect --resume`, or pass --records FILE to read a \
                     record file as it is",
                    n("units_done"),
                    n("units_total")
                ),
            ))
        }
        _ => Err(format_err(
            path,
            "field `complete`: missing or not a boolean".into(),
        )),
    }
}

/// Rule 2 of the module docs.
fn by_manifest(
    manifest_path: &Path,
    files: &Value,
    parquet: &Path,
    jsonl: &Path,
) -> Result<PathBuf, RecordsError> {
    let text = |k: &str| files.get(k).and_then(Value::as_str).map(str::to_owned);
    let (Some(parquet_sha), Some(jsonl_len)) = (
        text("parquet_sha256"),
        files.get("jsonl_bytes").and_then(Value::as_u64),
    ) else {
        return Err(format_err(
            manifest_path,
            "field `records_files`: expected parquet_sha256 and jsonl_bytes".into(),
        ));
    };
    let jsonl_now = std::fs::metadata(jsonl).ok().map(|m| m.len());
    let jsonl_same = jsonl_now == Some(jsonl_len);
    if parquet.is_file() && sha256_of(parquet)? == parquet_sha {
        if jsonl_now.is_none() || jsonl_same {
            return Ok(parquet.to_path_buf());
        }
        return Err(format_err(
            jsonl,
            format!(
                "changed after {} was written ({} bytes, the manifest's `records_files.jsonl_bytes` \
                 says {jsonl_len}): {} no longer holds the same records; rerun `sy-collect \
                 --resume` to bring them together, or pass --records FILE",
                manifest_path.display(),
                jsonl_now.unwrap_or(0),
                parquet.display()
            ),
        ));
    }
    if jsonl_same {
        tracing::warn!(
            "{} is missing or is not the copy {} describes; reading {} (the newest complete \
             source)",
            parquet.display(),
            manifest_path.display(),
            jsonl.display()
        );
        return Ok(jsonl.to_path_buf());
    }
    Err(format_err(
        manifest_path,
        format!(
            "field `records_files`: neither {} (sha256 differs or missing) nor {} (length \
             differs or missing) is the record file this manifest describes: pass --records \
             FILE",
            parquet.display(),
            jsonl.display()
        ),
    ))
}
