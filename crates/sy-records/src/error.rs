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
    #[error("{path}: {message}", path = path.display())]
    Read { path: PathBuf, message: String },
    /// An output file could not be written.
    #[error("{path}: {message}", path = path.display())]
    Write { path: PathBuf, message: String },
    /// Not a file format we read (by extension), or a directory without records.
    #[error("{path}: {message}", path = path.display())]
    Format { path: PathBuf, message: String },
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
    /// No input paths, or no records in them.
    #[error("{0}")]
    NoRecords(String),
    /// Records that should form paired probes do not.
    #[error("{0}")]
    Pairing(String),
    /// A split table problem (bad fractions, a condition missing from splits.json, ...).
    #[error("{0}")]
    Splits(String),
}

impl RecordsError {
    /// Whether the error is the input's fault (bad file content or arguments) rather than the
    /// system's (I/O). Tools map this to exit code 2 vs 1.
    pub fn is_bad_input(&self) -> bool {
        !matches!(self, RecordsError::Write { .. })
    }
}
