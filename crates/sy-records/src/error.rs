//! Errors of loading, validating, pairing and splitting records.
//!
//! Every error names the file, and where there is one the row (1-based data row: the line of a
//! JSONL file, the line after the header of a CSV file, the row of a Parquet file) and the field.

use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// One invalid row: where it is and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RowIssue {
    /// The file the row came from.
    pub path: PathBuf,
    /// 1-based data row (JSONL: line; CSV: line after the header; Parquet: row).
    pub row: usize,
    /// The column / field that is wrong.
    pub field: String,
    /// What was found and what was expected.
    pub message: String,
}

impl fmt::Display for RowIssue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: row {}, field `{}`: {}",
            self.path.display(),
            self.row,
            self.field,
            self.message
        )
    }
}

/// Errors of the records crate.
#[derive(Debug, thiserror::Error)]
pub enum RecordsError {
    /// An input file could not be read (missing, unreadable, not a valid Parquet/CSV file).
    #[error("{path}: {source}", path = path.display())]
    Read { path: PathBuf, source: ReadError },
    /// An output file could not be written.
    #[error("{path}: {source}", path = path.display())]
    Write { path: PathBuf, source: WriteError },
    /// Not a file format we read (by extension), a directory without records, or a run
    /// directory whose manifest does not say which record file to read.
    #[error("{path}: {source}", path = path.display())]
    Format { path: PathBuf, source: FormatError },
    /// A required column is absent from the file.
    #[error("{path}: missing column `{column}` (expected in every record file)", path = path.display())]
    MissingColumn { path: PathBuf, column: String },
    /// A column has a type that cannot hold the field (e.g. text in a numeric column).
    #[error("{path}: column `{column}` has type {found}, expected {expected}", path = path.display())]
    ColumnType {
        path: PathBuf,
        column: String,
        found: String,
        expected: String,
    },
    /// An invalid row (first one, when not skipping invalid rows).
    #[error("{0}")]
    Row(RowIssue),
    /// No record files given.
    #[error("no record files given (pass --records FILE or --run-dir DIR)")]
    NoFiles,
    /// Record files without a single valid record.
    #[error("no valid records in {}", files.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "))]
    NoValidRecords { files: Vec<PathBuf> },
    /// Records that should form paired probes do not (the first problem found).
    #[error("run {run:?}: {problem}")]
    Pairing { run: String, problem: String },
    /// A split table problem (bad fractions, a condition missing from splits.json, ...).
    #[error(transparent)]
    Splits(#[from] SplitsError),
}

/// Why a file could not be read (the file is named by [`RecordsError::Read`]).
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("no such file or directory")]
    Missing,
    /// Not a regular file (a FIFO would block the reader forever, a device never end).
    #[error("{0}")]
    NotRegular(&'static str),
    /// The run directory's checks or hashing of the file failed.
    #[error("{0}")]
    File(sy_rundir::RunError),
    #[error("not a readable Parquet file: {0}")]
    Parquet(polars::prelude::PolarsError),
    #[error("not a readable CSV file: {0}")]
    Csv(polars::prelude::PolarsError),
    #[error("column `{name}`: {source}")]
    Column {
        name: String,
        source: polars::prelude::PolarsError,
    },
    #[error("a record conversion thread panicked")]
    Panicked,
}

/// Why a file could not be written (the file is named by [`RecordsError::Write`]).
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("cannot encode Parquet: {0}")]
    Parquet(polars::prelude::PolarsError),
    #[error("{0}")]
    Csv(polars::prelude::PolarsError),
    #[error("{0}")]
    Json(serde_json::Error),
    #[error("{0}")]
    File(#[from] sy_rundir::RunError),
}

/// Why a file or run directory is not one records are read from (named by
/// [`RecordsError::Format`]).
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    #[error("unknown record file type: expected .parquet, .csv or .jsonl")]
    UnknownType,
    #[error("run directory has no records (looked for {})", crate::load::rundir::RUN_DIR_RECORD_FILES.join(", "))]
    NoRecordFile,
    #[error("not a run manifest: {0}")]
    NotManifest(serde_json::Error),
    #[error("not a run manifest: expected an object")]
    ManifestNotObject,
    #[error(
        "field `complete` is false: the run is not complete ({done} of {total} units done): \
         finish it with `sy-collect --resume`, or pass --records FILE to read a record file as \
         it is"
    )]
    Incomplete { done: String, total: String },
    #[error("field `complete`: missing or not a boolean")]
    CompleteNotBool,
    #[error("field `records_files`: expected parquet_sha256 and jsonl_bytes")]
    RecordsFilesFields,
    #[error(
        "changed after {} was written ({bytes} bytes, the manifest's `records_files.jsonl_bytes` \
         says {expected}): {} no longer holds the same records; rerun `sy-collect --resume` to \
         bring them together, or pass --records FILE",
        manifest.display(),
        parquet.display()
    )]
    JsonlChanged {
        manifest: PathBuf,
        bytes: u64,
        expected: u64,
        parquet: PathBuf,
    },
    #[error(
        "field `records_files`: neither {} (sha256 differs or missing) nor {} (length differs or \
         missing) is the record file this manifest describes: pass --records FILE",
        parquet.display(),
        jsonl.display()
    )]
    NotDescribed { parquet: PathBuf, jsonl: PathBuf },
}

/// A split table that cannot be used; every message names the file.
#[derive(Debug, thiserror::Error)]
pub enum SplitsError {
    /// Not readable, not JSON, another kind or version, or not the layout.
    #[error(transparent)]
    Artifact(#[from] sy_rundir::ArtifactError),
    #[error("{}: {source}", path.display())]
    Fractions {
        path: PathBuf,
        source: crate::splits::FractionsError,
    },
    #[error("{}: counts {listed:?} do not match the conditions listed {found:?}", path.display())]
    Counts {
        path: PathBuf,
        listed: crate::splits::SplitCounts,
        found: crate::splits::SplitCounts,
    },
    #[error(
        "{}: condition {condition:?} of run {run:?} is not in the split table (re-run sy-fit on \
         these records)",
        path.display()
    )]
    NotInTable {
        path: PathBuf,
        run: String,
        condition: String,
    },
    #[error(
        "{}: the split table was made with seed {made}, but --seed {given} was given; remove the \
         file to re-split or pass --seed {made}",
        path.display()
    )]
    Seed {
        path: PathBuf,
        made: u64,
        given: u64,
    },
    #[error(
        "{}: the split table was made with fractions {},{},{}, but {},{},{} were given; remove \
         the file to re-split",
        path.display(),
        made.fit,
        made.uncertainty,
        made.selection,
        given.fit,
        given.uncertainty,
        given.selection
    )]
    OtherFractions {
        path: PathBuf,
        made: crate::splits::SplitFractions,
        given: crate::splits::SplitFractions,
    },
}

impl RecordsError {
    /// Whether the error is the input's fault (bad file content or arguments) rather than the
    /// system's (I/O). Tools map this to exit code 2 vs 1.
    pub fn is_bad_input(&self) -> bool {
        !matches!(self, RecordsError::Write { .. })
    }
}
