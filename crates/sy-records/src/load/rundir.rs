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

use crate::error::{FormatError, RecordsError};

/// Record file names looked for in a run directory, in order of preference.
pub const RUN_DIR_RECORD_FILES: &[&str] = &[
    Artifact::RecordsParquet.file_name(),
    Artifact::Records.file_name(),
    "records.csv",
];

fn format_err(path: &Path, source: FormatError) -> RecordsError {
    RecordsError::Format {
        path: path.to_path_buf(),
        source,
    }
}

fn sha256_of(path: &Path) -> Result<String, RecordsError> {
    let bytes = std::fs::read(path).map_err(|e| RecordsError::Read {
        path: path.to_path_buf(),
        source: e.into(),
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
        .ok_or_else(|| format_err(dir, FormatError::NoRecordFile))
}

fn read_manifest(path: &Path) -> Result<Value, RecordsError> {
    let text = std::fs::read_to_string(path).map_err(|e| RecordsError::Read {
        path: path.to_path_buf(),
        source: e.into(),
    })?;
    let value: Value =
        serde_json::from_str(&text).map_err(|e| format_err(path, FormatError::NotManifest(e)))?;
    if !value.is_object() {
        return Err(format_err(path, FormatError::ManifestNotObject));
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
                FormatError::Incomplete {
                    done: n("units_done"),
                    total: n("units_total"),
                },
            ))
        }
        _ => Err(format_err(path, FormatError::CompleteNotBool)),
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
        return Err(format_err(manifest_path, FormatError::RecordsFilesFields));
    };
    let jsonl_now = std::fs::metadata(jsonl).ok().map(|m| m.len());
    let jsonl_same = jsonl_now == Some(jsonl_len);
    if parquet.is_file() && sha256_of(parquet)? == parquet_sha {
        if jsonl_now.is_none() || jsonl_same {
            return Ok(parquet.to_path_buf());
        }
        return Err(format_err(
            jsonl,
            FormatError::JsonlChanged {
                manifest: manifest_path.to_path_buf(),
                bytes: jsonl_now.unwrap_or(0),
                expected: jsonl_len,
                parquet: parquet.to_path_buf(),
            },
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
        FormatError::NotDescribed {
            parquet: parquet.to_path_buf(),
            jsonl: jsonl.to_path_buf(),
        },
    ))
}
