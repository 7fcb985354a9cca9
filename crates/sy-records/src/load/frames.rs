//! Reading Parquet and CSV record files through polars: Parquet in row slices, each slice's rows
//! converted on one scoped thread per core and handed over in row order, so errors and row
//! numbers are those of a sequential read.

use std::fs::File;
use std::path::Path;

use polars::prelude::*;

use super::loaded::{FileSummary, RowOrigin, Sink, read_err};
use super::validate::validated;
use crate::codec::layout::{check_parquet_types, unknown_columns};
use crate::codec::rows::frame_to_records;
use crate::error::{ReadError, RecordsError, RowIssue};
use crate::record::Record;

/// Threads that convert rows into records (at most).
const MAX_CONVERT_THREADS: usize = 8;

/// Below this many rows per thread a frame is converted on the calling thread.
const MIN_ROWS_PER_THREAD: usize = 16_384;

/// Threads that convert the rows of one frame: the cores, at most [`MAX_CONVERT_THREADS`].
fn convert_threads() -> usize {
    std::thread::available_parallelism()
        .map_or(1, std::num::NonZeroUsize::get)
        .min(MAX_CONVERT_THREADS)
}

/// `(start, len)` of the contiguous parts a frame of `height` rows is converted in, one per
/// thread; a single part when the frame is too small to be worth splitting.
pub(crate) fn thread_parts(height: usize) -> Vec<(usize, usize)> {
    let threads = convert_threads();
    if threads <= 1 || height < 2 * MIN_ROWS_PER_THREAD {
        return vec![(0, height)];
    }
    let per_thread = height.div_ceil(threads);
    (0..threads)
        .map(|t| {
            let start = (t * per_thread).min(height);
            (start, per_thread.min(height - start))
        })
        .filter(|&(_, len)| len > 0)
        .collect()
}

/// Rows read from a Parquet file per slice (by the record loader and the probe table): a row
/// group of the files sy writes. Decoding a million records' probe-table columns took 0.13 s in
/// slices of a row group against 0.20 s in slices of half a row group (each half decodes its
/// row group's pages again).
pub(crate) const PARQUET_SLICE_ROWS: usize = crate::codec::write::PARQUET_ROW_GROUP_ROWS;

/// Converted and validated rows of one part of a frame, kept across slices so their memory is
/// reused: the valid records, and the issues with the index (within the part) of their row.
#[derive(Default)]
struct RowBuffer {
    records: Vec<Record>,
    issues: Vec<(usize, RowIssue)>,
}

fn push_frame(
    df: &DataFrame,
    path: &Path,
    offset: usize,
    sink: &mut Sink<'_>,
    buffers: &mut Vec<RowBuffer>,
) -> Result<(), RecordsError> {
    let parts = thread_parts(df.height());
    if parts.len() <= 1 {
        // Rows go straight into the sink in row order, so the first error reported is the
        // first bad row's.
        return frame_to_records(df, path, offset, |i, row| {
            sink.push(path, offset + i + 1, row)
        });
    }
    // Row conversion (typed cells → `Record`, with its strings) is the costly part of loading
    // and needs no shared state: convert contiguous parts of the frame on scoped threads, then
    // hand the rows to the sink in row order, which keeps error order and numbering unchanged.
    buffers.resize_with(parts.len(), RowBuffer::default);
    let outcomes: Vec<Result<(), RecordsError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = buffers
            .iter_mut()
            .zip(&parts)
            .map(|(rows, &(start, len))| {
                let part = df.slice(i64::try_from(start).unwrap_or(i64::MAX), len);
                scope.spawn(move || {
                    rows.records.clear();
                    rows.issues.clear();
                    rows.records.reserve(len);
                    frame_to_records(&part, path, offset + start, |i, row| {
                        match row.and_then(|r| validated(path, offset + start + i + 1, r)) {
                            Ok(r) => rows.records.push(r),
                            Err(issue) => rows.issues.push((i, issue)),
                        }
                        Ok(())
                    })
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|handle| {
                handle
                    .join()
                    .unwrap_or_else(|_| Err(read_err(path, ReadError::Panicked)))
            })
            .collect()
    });
    for ((outcome, rows), &(part_start, _)) in
        outcomes.into_iter().zip(buffers.iter_mut()).zip(&parts)
    {
        outcome?;
        let start = offset + part_start;
        if rows.issues.is_empty() {
            // The common case: every row valid, appended in one block.
            let first_row = start + 1;
            sink.out
                .origins
                .extend((0..rows.records.len()).map(|i| RowOrigin {
                    file: sink.file,
                    row: u32::try_from(first_row + i).unwrap_or(u32::MAX),
                }));
            sink.out.records.append(&mut rows.records);
            continue;
        }
        // Interleave records and issues in row order (the first error is the first bad row's).
        let mut issues = rows.issues.drain(..).peekable();
        let mut i = 0;
        for record in rows.records.drain(..) {
            while let Some((_, issue)) = issues.next_if(|(j, _)| *j <= i) {
                sink.push(path, issue.row, Err(issue))?;
                i += 1;
            }
            sink.push(path, start + i + 1, Ok(record))?;
            i += 1;
        }
        for (_, issue) in issues {
            sink.push(path, issue.row, Err(issue))?;
        }
    }
    Ok(())
}

pub(super) fn read_parquet(
    path: &Path,
    sink: &mut Sink<'_>,
    summary: &mut FileSummary,
) -> Result<(), RecordsError> {
    let open = || File::open(path).map_err(|e| read_err(path, e));
    let mut reader = ParquetReader::new(open()?);
    let total = reader
        .num_rows()
        .map_err(|e| read_err(path, ReadError::Parquet(e)))?;
    let schema = reader
        .schema()
        .map_err(|e| read_err(path, ReadError::Parquet(e)))?;
    check_parquet_types(path, &schema)?;
    summary.rows = total;
    sink.out.records.reserve(total);
    sink.out.origins.reserve(total);
    let mut offset = 0;
    let mut first = true;
    let mut buffers = Vec::new();
    while offset < total || first {
        let len = PARQUET_SLICE_ROWS.min(total - offset);
        let df = ParquetReader::new(open()?)
            .with_slice(Some((offset, len)))
            .finish()
            .map_err(|e| read_err(path, ReadError::Parquet(e)))?;
        if first {
            summary.unknown_columns =
                unknown_columns(df.get_column_names().into_iter().map(|n| n.as_str()));
            first = false;
        }
        push_frame(&df, path, offset, sink, &mut buffers)?;
        offset += len;
        if len == 0 {
            break;
        }
    }
    Ok(())
}

pub(super) fn read_csv(
    path: &Path,
    sink: &mut Sink<'_>,
    summary: &mut FileSummary,
) -> Result<(), RecordsError> {
    let df = read_csv_frame(path)?;
    summary.rows = df.height();
    summary.unknown_columns =
        unknown_columns(df.get_column_names().into_iter().map(|n| n.as_str()));
    push_frame(&df, path, 0, sink, &mut Vec::new())
}

/// A CSV record file as a frame of text columns: every cell is parsed by the record layout, so a
/// bad cell is reported with its row and column instead of failing the whole read.
pub(crate) fn read_csv_frame(path: &Path) -> Result<DataFrame, RecordsError> {
    CsvReadOptions::default()
        .with_has_header(true)
        .with_infer_schema_length(Some(0))
        .try_into_reader_with_file_path(Some(path.to_path_buf()))
        .and_then(|r| r.finish())
        .map_err(|e| read_err(path, ReadError::Csv(e)))
}
