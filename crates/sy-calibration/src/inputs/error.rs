//! Why the inputs an earlier tool wrote into a run directory cannot be used ([`InputsError`]).
//!
//! Every message names the file, field or flag and what was expected; `is_bad_input` tells the
//! input's fault (exit code 2) from a runtime failure (exit code 1).

use std::path::PathBuf;

use sy_records::RecordsError;
use sy_rundir::ArtifactError;
use sy_rundir::RunError;
use sy_selector::{InputFile, ParamsError};

/// The files of a provenance list in a message: path and the first 12 characters of the hash.
fn file_list(files: &[InputFile]) -> String {
    files
        .iter()
        .map(|f| {
            let short: String = f.sha256.chars().take(12).collect();
            format!("{} (sha256 {short})", f.path)
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Why the inputs an earlier tool wrote (records, `splits.json`, `fit.json`) cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum InputsError {
    /// Neither the input's flag nor `--run-dir` was given.
    #[error("no {name}: pass {flag} FILE or --run-dir DIR")]
    NoPath { name: String, flag: String },
    /// Neither `--records` nor `--run-dir` was given.
    #[error("no records: pass --records FILE or --run-dir DIR")]
    NoRecordPaths,
    /// Loading, pairing or splitting the records failed.
    #[error(transparent)]
    Records(#[from] RecordsError),
    /// A file could not be hashed (or another run-directory file operation failed).
    #[error(transparent)]
    Run(#[from] RunError),
    /// `splits.json` does not exist.
    #[error("{}: no split table (run sy-fit first, or pass --splits FILE)", .0.display())]
    NoSplits(PathBuf),
    /// `fit.json` cannot be read, is not JSON, is another kind of file or of another version.
    #[error(transparent)]
    Artifact(#[from] ArtifactError),
    /// `fit.json` holds no usable estimators for a model at `models.<model>.estimators`.
    #[error(
        "{}: no estimators for the {model} model at models.{model}.estimators ({why}; expected \
         sy-selector's ModelEstimators: q, standardiser, blind, cache)",
        path.display()
    )]
    NoEstimators {
        path: PathBuf,
        model: &'static str,
        why: String,
    },
    /// A model's estimators hold an unusable parameter.
    #[error("{}: {source}", path.display())]
    BadEstimators {
        path: PathBuf,
        #[source]
        source: ParamsError,
    },
    /// `fit.json`'s `input_files` is not a list of files with hashes.
    #[error(
        "{}: field `input_files`: expected a list of {{path, sha256}}: {source}",
        path.display()
    )]
    InputFilesField {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    /// An artifact was derived from other files than the ones this run was given.
    #[error(
        "{}: field `{field}` says it was derived from {}, but this run was given {}: they are \
         not the same files (artifacts of different runs must not be mixed: redo the step, or \
         pass the files it was made from)",
        derived.display(),
        file_list(expected),
        file_list(given)
    )]
    NotDerivedFrom {
        derived: PathBuf,
        field: String,
        expected: Vec<InputFile>,
        given: Vec<InputFile>,
    },
    /// An artifact does not name the files it was derived from: nothing ties it to this run.
    #[error(
        "{}: field `{field}` is missing or empty: the file does not name the files it was made \
         from (with their hashes), so it cannot be checked against this run's; redo the step \
         that writes it",
        derived.display()
    )]
    NoProvenance { derived: PathBuf, field: String },
    /// `fit.json` was fitted on another split than the split table given.
    #[error(
        "{}: field `split.{field}` is {in_fit}, but {} has {in_splits}: the fit was made on \
         another split (another seed or fractions); pass the splits.json it was fitted with, \
         or refit",
        fit.display(),
        splits.display()
    )]
    OtherSplit {
        fit: PathBuf,
        splits: PathBuf,
        field: &'static str,
        in_fit: String,
        in_splits: String,
    },
}

impl InputsError {
    /// Whether the error is the input's fault (exit code 2) rather than the system's (1).
    pub fn is_bad_input(&self) -> bool {
        match self {
            InputsError::Records(e) => e.is_bad_input(),
            InputsError::Run(e) => e.is_bad_input(),
            _ => true,
        }
    }
}

sy_rundir::impl_fault!(InputsError);
