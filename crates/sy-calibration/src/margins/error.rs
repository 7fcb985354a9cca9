//! The error of reading `margins.json` ([`MarginsFileError`]); `sy-margin`'s own run (flags,
//! inputs, output) has its errors in that crate (`sy_margin::MarginError`).
//!
//! Every message names the file and field and what was expected. The binaries turn it into
//! `sy_cli::ToolError` at the edge (the `From` impl at the end).

use std::path::PathBuf;

use sy_run::ArtifactError;

/// Why a `margins.json` cannot be used (always the input's fault).
#[derive(Debug, thiserror::Error)]
pub enum MarginsFileError {
    /// Not readable, not JSON, another kind of file, another version, or not the layout (the
    /// member is named).
    #[error(transparent)]
    Artifact(#[from] ArtifactError),
    #[error(
        "{}: field `{field}` = {value}, expected a finite non-negative number of ms of at most \
         {} (one hour)",
        path.display(),
        sy_selector::MAX_PLAUSIBLE_MS
    )]
    Delta {
        path: PathBuf,
        field: &'static str,
        value: f64,
    },
}

impl MarginsFileError {
    /// Always: a margins file that cannot be used is the input's fault (exit code 2).
    pub fn is_bad_input(&self) -> bool {
        true
    }
}

sy_cli::tool_error_from!(MarginsFileError);
