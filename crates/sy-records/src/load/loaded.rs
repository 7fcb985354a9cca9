//! What a load returns ([`LoadedRecords`]: records, where each came from, what each file gave)
//! and the sink the readers hand rows to.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::validate::validated;
use crate::codec::Format;
use crate::error::{FormatError, ReadError, RecordsError, RowIssue};
use crate::record::Record;

/// How to treat invalid rows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoadOptions {
    /// Skip (count and report) invalid rows instead of failing on the first one.
    pub skip_invalid: bool,
}

/// Where a loaded record came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, bytemuck::Pod, bytemuck::Zeroable)]
#[repr(C)]
pub struct RowOrigin {
    /// Index into [`LoadedRecords::files`].
    pub file: u32,
    /// 1-based data row in that file.
    pub row: u32,
}

/// What was read from one file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileSummary {
    pub path: PathBuf,
    pub format: Format,
    /// Data rows in the file (a torn JSONL tail not counted).
    pub rows: usize,
    /// Records kept.
    pub loaded: usize,
    /// Rows skipped as invalid (only with `skip_invalid`).
    pub skipped: usize,
    /// A torn last JSONL line was found and ignored.
    pub torn_tail: bool,
    /// Columns that are not part of the record layout (ignored).
    pub unknown_columns: Vec<String>,
}

impl FileSummary {
    /// The summary of a record file about to be read: its format (by extension), nothing read
    /// yet.
    pub(crate) fn before_reading(path: &Path) -> Result<FileSummary, RecordsError> {
        let format = Format::from_path(path).ok_or_else(|| RecordsError::Format {
            path: path.to_path_buf(),
            source: FormatError::UnknownType,
        })?;
        Ok(FileSummary {
            path: path.to_path_buf(),
            format,
            rows: 0,
            loaded: 0,
            skipped: 0,
            torn_tail: false,
            unknown_columns: Vec::new(),
        })
    }
}

/// Recounts each file's loaded and skipped rows (pairing removes records after the files were
/// read).
pub(crate) fn count_per_file(
    files: &mut [FileSummary],
    origins: &[RowOrigin],
    skipped: &[RowIssue],
) {
    for f in files.iter_mut() {
        f.loaded = 0;
        f.skipped = 0;
    }
    for o in origins {
        if let Some(f) = files.get_mut(o.file as usize) {
            f.loaded += 1;
        }
    }
    for s in skipped {
        if let Some(f) = files.iter_mut().find(|f| f.path == s.path) {
            f.skipped += 1;
        }
    }
}

/// The error of inputs without a single valid record, naming the files read.
pub(crate) fn no_valid_records(files: &[PathBuf]) -> RecordsError {
    RecordsError::NoValidRecords {
        files: files.to_vec(),
    }
}

/// The result of [`load_records`].
#[derive(Debug, Clone, Default)]
pub struct LoadedRecords {
    /// Valid records, files in argument order, rows in file order.
    pub records: Vec<Record>,
    /// Parallel to `records`.
    pub origins: Vec<RowOrigin>,
    pub files: Vec<FileSummary>,
    /// Rows skipped as invalid (empty unless `skip_invalid`).
    pub skipped: Vec<RowIssue>,
}

impl LoadedRecords {
    /// The file and row of record `index`, for messages.
    pub fn origin_of(&self, index: usize) -> Option<(&Path, usize)> {
        let o = self.origins.get(index)?;
        let f = self.files.get(o.file as usize)?;
        Some((f.path.as_path(), o.row as usize))
    }

    /// Skipped rows counted per field, for summaries.
    pub fn skipped_by_field(&self) -> std::collections::BTreeMap<String, usize> {
        let mut m = std::collections::BTreeMap::new();
        for s in &self.skipped {
            *m.entry(s.field.clone()).or_insert(0) += 1;
        }
        m
    }
}

/// Collects records and issues of one file.
pub(crate) struct Sink<'a> {
    pub(crate) out: &'a mut LoadedRecords,
    pub(crate) file: u32,
    pub(crate) options: &'a LoadOptions,
}

impl Sink<'_> {
    /// Takes a parsed record (after semantic validation) or its issue.
    pub(crate) fn push(
        &mut self,
        path: &Path,
        row: usize,
        record: Result<Record, RowIssue>,
    ) -> Result<(), RecordsError> {
        let record = record.and_then(|r| validated(path, row, r));
        match record {
            Ok(r) => {
                self.out.records.push(r);
                self.out.origins.push(RowOrigin {
                    file: self.file,
                    row: u32::try_from(row).unwrap_or(u32::MAX),
                });
                Ok(())
            }
            Err(issue) => {
                if self.options.skip_invalid {
                    self.out.skipped.push(issue);
                    Ok(())
                } else {
                    Err(RecordsError::Row(issue))
                }
            }
        }
    }
}

pub(crate) fn read_err(path: &Path, source: impl Into<ReadError>) -> RecordsError {
    RecordsError::Read {
        path: path.to_path_buf(),
        source: source.into(),
    }
}
