//! The arguments of a tool (record files or run directories) as the record files to read.

use std::path::PathBuf;

use crate::error::{ReadError, RecordsError};

/// Turns the arguments (files or run directories) into record files. A directory contributes
/// its newest complete record file (see [`crate::rundir`]).
pub fn resolve_inputs(paths: &[PathBuf]) -> Result<Vec<PathBuf>, RecordsError> {
    if paths.is_empty() {
        return Err(RecordsError::NoFiles);
    }
    let mut out = Vec::with_capacity(paths.len());
    for p in paths {
        if p.is_dir() {
            out.push(super::rundir::record_file_of_run_dir(p)?);
        } else if !p.exists() {
            return Err(RecordsError::Read {
                path: p.clone(),
                source: ReadError::Missing,
            });
        } else {
            out.push(p.clone());
        }
    }
    // Only regular files: a FIFO would block the reader forever, a device never end.
    for p in &out {
        sy_rundir::check_input_file(p).map_err(|e| RecordsError::Read {
            path: p.clone(),
            source: match e {
                sy_rundir::RunError::NotRegular { what, .. } => ReadError::NotRegular(what),
                other => ReadError::File(other),
            },
        })?;
    }
    Ok(out)
}
