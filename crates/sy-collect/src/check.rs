//! `sy-collect check RUN_DIR`: the data-quality verdict of a collected run (the judging is
//! `sy_records::check`, shared with `sy-fit`), printed and written to `RUN_DIR/check.json`.
//!
//! Exit status: 0 the run passes, 1 it fails a check, 2 bad input (no records, an unreadable
//! file, an unknown bound).

use std::path::{Path, PathBuf};

use sy_cli::ToolError;
use sy_records::check::{CheckOptions, CheckReport, judge_paths};

/// Why `sy-collect check` could not judge a run (bad input, except a failed write or an
/// internal conversion).
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error("--bound {name}: unknown bound (known: {})", .known.join(", "))]
    UnknownBound { name: String, known: Vec<String> },
    #[error("--bound: {0}")]
    Bounds(#[source] serde_json::Error),
    #[error("{}: not a run directory", .0.display())]
    NotARunDir(PathBuf),
    /// The default bounds could not be written as JSON (not the caller's fault).
    #[error("{0}")]
    Defaults(#[source] serde_json::Error),
}

impl From<CheckError> for ToolError {
    fn from(e: CheckError) -> Self {
        match e {
            CheckError::Defaults(_) => ToolError::Runtime(e.to_string()),
            _ => ToolError::BadInput(e.to_string()),
        }
    }
}

/// A `--bound` argument that cannot be read; the message quotes it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BoundArgError {
    #[error("{0}: expected NAME=VALUE (e.g. max_ttft_gap_ms=30)")]
    NoValue(String),
    #[error("{arg}: {value:?} is not a number")]
    NotANumber { arg: String, value: String },
    #[error("{0}: must be a finite number ≥ 0")]
    OutOfRange(String),
}

/// `--bound NAME=VALUE` applied to the default bounds (names as in `check.json`'s `options`).
pub fn options_with(bounds: &[(String, f64)]) -> Result<CheckOptions, CheckError> {
    let mut v = serde_json::to_value(CheckOptions::default()).map_err(CheckError::Defaults)?;
    for (name, value) in bounds {
        let Some(slot) = v.get_mut(name) else {
            let known: Vec<String> = v
                .as_object()
                .map(|o| o.keys().cloned().collect())
                .unwrap_or_default();
            return Err(CheckError::UnknownBound {
                name: name.clone(),
                known,
            });
        };
        *slot = if slot.is_u64() {
            serde_json::json!(*value as u64)
        } else {
            serde_json::json!(value)
        };
    }
    serde_json::from_value(v).map_err(CheckError::Bounds)
}

/// Parses `NAME=VALUE`.
pub fn parse_bound(s: &str) -> Result<(String, f64), BoundArgError> {
    let (k, v) = s
        .split_once('=')
        .ok_or_else(|| BoundArgError::NoValue(s.to_string()))?;
    let v: f64 = v.trim().parse().map_err(|_| BoundArgError::NotANumber {
        arg: s.to_string(),
        value: v.to_string(),
    })?;
    if !v.is_finite() || v < 0.0 {
        return Err(BoundArgError::OutOfRange(s.to_string()));
    }
    Ok((k.trim().to_string(), v))
}

/// Judges `run_dir` and writes `check.json` there. `Err` only for bad input or I/O; a failing
/// verdict is in the report.
pub fn check_run_dir(run_dir: &Path, opts: &CheckOptions) -> Result<CheckReport, ToolError> {
    if !run_dir.is_dir() {
        return Err(CheckError::NotARunDir(run_dir.to_path_buf()).into());
    }
    let report = judge_paths(&[PathBuf::from(run_dir)], opts).map_err(|e| {
        if e.is_bad_input() {
            ToolError::BadInput(e.to_string())
        } else {
            ToolError::Runtime(e.to_string())
        }
    })?;
    sy_rundir::atomic_write_json(&sy_rundir::Artifact::Check.path(run_dir), &report)
        .map_err(|e| ToolError::Runtime(e.to_string()))?;
    Ok(report)
}
