//! `sy-collect check RUN_DIR`: the data-quality verdict of a collected run (the judging is
//! `sy_records::check`, shared with `sy-fit`), printed and written to `RUN_DIR/check.json`.
//!
//! Exit status: 0 the run passes, 1 it fails a check, 2 bad input (no records, an unreadable
//! file, an unknown bound).

use std::path::{Path, PathBuf};

use sy_cli::ToolError;
use sy_records::check::{CHECK_FILE, CheckOptions, CheckReport, judge_paths};

/// `--bound NAME=VALUE` applied to the default bounds (names as in `check.json`'s `options`).
pub fn options_with(bounds: &[(String, f64)]) -> Result<CheckOptions, ToolError> {
    let mut v = serde_json::to_value(CheckOptions::default())
        .map_err(|e| ToolError::Runtime(e.to_string()))?;
    for (name, value) in bounds {
        let Some(slot) = v.get_mut(name) else {
            let known: Vec<String> = v
                .as_object()
                .map(|o| o.keys().cloned().collect())
                .unwrap_or_default();
            return Err(ToolError::BadInput(format!(
                "--bound {name}: unknown bound (known: {})",
                known.join(", ")
            )));
        };
        *slot = if slot.is_u64() {
            serde_json::json!(*value as u64)
        } else {
            serde_json::json!(value)
        };
    }
    serde_json::from_value(v).map_err(|e| ToolError::BadInput(format!("--bound: {e}")))
}

/// Parses `NAME=VALUE`.
pub fn parse_bound(s: &str) -> Result<(String, f64), String> {
    let (k, v) = s
        .split_once('=')
        .ok_or_else(|| format!("{s}: expected NAME=VALUE (e.g. max_ttft_gap_ms=30)"))?;
    let v: f64 = v
        .trim()
        .parse()
        .map_err(|_| format!("{s}: {v:?} is not a number"))?;
    if !v.is_finite() || v < 0.0 {
        return Err(format!("{s}: must be a finite number ≥ 0"));
    }
    Ok((k.trim().to_string(), v))
}

/// Judges `run_dir` and writes `check.json` there. `Err` only for bad input or I/O; a failing
/// verdict is in the report.
pub fn check_run_dir(run_dir: &Path, opts: &CheckOptions) -> Result<CheckReport, ToolError> {
    if !run_dir.is_dir() {
        return Err(ToolError::BadInput(format!(
            "{}: not a run directory",
            run_dir.display()
        )));
    }
    let report = judge_paths(&[PathBuf::from(run_dir)], opts).map_err(|e| {
        if e.is_bad_input() {
            ToolError::BadInput(e.to_string())
        } else {
            ToolError::Runtime(e.to_string())
        }
    })?;
    sy_run::atomic_write_json(&run_dir.join(CHECK_FILE), &report)
        .map_err(|e| ToolError::Runtime(e.to_string()))?;
    Ok(report)
}
