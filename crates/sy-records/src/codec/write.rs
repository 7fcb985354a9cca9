//! Writing records as Parquet (what `sy-collect` does at the end of a run).

use std::io::Cursor;
use std::path::Path;

use polars::prelude::*;

use crate::codec::Format;
use crate::codec::rows::records_to_frame;
use crate::error::{FormatError, RecordsError, WriteError};
use crate::record::Record;

/// Rows per Parquet row group (the loader reads the file in slices of about this size).
pub const PARQUET_ROW_GROUP_ROWS: usize = 131_072;

/// Encodes records as Parquet bytes (flat layout of [`crate::ALL_COLUMNS`], zstd).
pub fn parquet_bytes(records: &[Record]) -> Result<Vec<u8>, PolarsError> {
    let mut df = records_to_frame(records)?;
    let mut buf = Cursor::new(Vec::new());
    ParquetWriter::new(&mut buf)
        .with_compression(ParquetCompression::Zstd(None))
        .with_row_group_size(Some(PARQUET_ROW_GROUP_ROWS))
        .finish(&mut df)?;
    Ok(buf.into_inner())
}

/// Writes records to `path` as Parquet, atomically (temporary file beside it, fsync, rename): a
/// reader sees the old file or the complete new one, never a partial file.
pub fn write_parquet(records: &[Record], path: &Path) -> Result<(), RecordsError> {
    let bytes = parquet_bytes(records).map_err(|e| write_err(path, WriteError::Parquet(e)))?;
    sy_rundir::atomic_write(path, &bytes).map_err(|e| write_err(path, e.into()))
}

/// Writes records to `path` as JSONL (one record per line), atomically.
pub fn write_jsonl(records: &[Record], path: &Path) -> Result<(), RecordsError> {
    let mut bytes = Vec::with_capacity(records.len() * 900);
    for r in records {
        serde_json::to_writer(&mut bytes, r).map_err(|e| write_err(path, WriteError::Json(e)))?;
        bytes.push(b'\n');
    }
    sy_rundir::atomic_write(path, &bytes).map_err(|e| write_err(path, e.into()))
}

/// Writes records to `path` as CSV (flat layout, header row), atomically.
pub fn write_csv(records: &[Record], path: &Path) -> Result<(), RecordsError> {
    let werr = |e: PolarsError| write_err(path, WriteError::Csv(e));
    let mut df = records_to_frame(records).map_err(werr)?;
    let mut buf = Vec::new();
    CsvWriter::new(&mut buf)
        .include_header(true)
        .finish(&mut df)
        .map_err(werr)?;
    sy_rundir::atomic_write(path, &buf).map_err(|e| write_err(path, e.into()))
}

/// Writes records in the format of `path`'s extension (`.parquet`, `.csv`, `.jsonl`).
pub fn write_records(records: &[Record], path: &Path) -> Result<(), RecordsError> {
    match Format::from_path(path) {
        Some(Format::Parquet) => write_parquet(records, path),
        Some(Format::Csv) => write_csv(records, path),
        Some(Format::Jsonl) => write_jsonl(records, path),
        None => Err(RecordsError::Format {
            path: path.to_path_buf(),
            source: FormatError::UnknownType,
        }),
    }
}

fn write_err(path: &Path, source: WriteError) -> RecordsError {
    RecordsError::Write {
        path: path.to_path_buf(),
        source,
    }
}
