//! Loading records from Parquet, CSV and JSONL files or run directories, with validation.
//!
//! Parquet and CSV go through polars (Parquet in row slices, so a million records never sit in
//! memory twice; each slice's rows are converted on one scoped thread per core and handed over in
//! row order, so errors and row numbers are those of a sequential read); JSONL is read line by line with serde so that 64-bit worker ids stay exact and
//! a torn last line (a crash while appending) is recovered like [`crate::jsonl::read`] does.
//!
//! Validation, in order, per row: the value types (text in a numeric column, a negative or
//! fractional count, an unknown phase / role / status), then the meaning of an ok record (a
//! missing, NaN, infinite or negative `ttft_ms`), K > N, and finally across rows the pairing of
//! every load-phase probe (exactly one efficient and one capable record with the same condition
//! and repeat). Every problem names the file, the row and the field. Without `skip_invalid` the
//! first problem is an error; with it, invalid rows (and both records of a probe that does not
//! pair up) are skipped, counted and returned in [`LoadedRecords::skipped`].
//!
//! Several files and run directories can be loaded at once; records keep their `run_id`, and
//! everything downstream keys conditions by `(run_id, condition_id)` (see [`crate::condition_key`]),
//! so condition ids of different runs never collide.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use polars::prelude::*;
use serde::{Deserialize, Serialize};

use crate::error::{RecordsError, RowIssue};
use crate::frame::{frame_to_records, unknown_columns};
use crate::pairing::{PairIssue, PairKeys, check_pairing};
use crate::record::{Phase, Record, Status};

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
pub(crate) const PARQUET_SLICE_ROWS: usize = crate::write::PARQUET_ROW_GROUP_ROWS;

/// Record file names looked for in a run directory, in order of preference.
pub const RUN_DIR_RECORD_FILES: &[&str] = &[
    sy_run::Artifact::RecordsParquet.file_name(),
    sy_run::Artifact::Records.file_name(),
    "records.csv",
];

/// How to treat invalid rows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoadOptions {
    /// Skip (count and report) invalid rows instead of failing on the first one.
    pub skip_invalid: bool,
}

/// Record file format (by extension).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    Parquet,
    Csv,
    Jsonl,
}

impl Format {
    /// The format of a path by its extension (`.parquet`/`.pq`, `.csv`, `.jsonl`/`.ndjson`).
    pub fn from_path(path: &Path) -> Option<Format> {
        let ext = path.extension()?.to_str()?.to_ascii_lowercase();
        match ext.as_str() {
            "parquet" | "pq" => Some(Format::Parquet),
            "csv" => Some(Format::Csv),
            "jsonl" | "ndjson" => Some(Format::Jsonl),
            _ => None,
        }
    }
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
            message: "unknown record file type: expected .parquet, .csv or .jsonl".to_string(),
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
    RecordsError::NoRecords(format!(
        "no valid records in {}",
        files
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    ))
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

/// Turns the arguments (files or run directories) into record files. A directory contributes
/// its newest complete record file (see [`crate::rundir`]).
pub fn resolve_inputs(paths: &[PathBuf]) -> Result<Vec<PathBuf>, RecordsError> {
    if paths.is_empty() {
        return Err(RecordsError::NoRecords(
            "no record files given (pass --records FILE or --run-dir DIR)".to_string(),
        ));
    }
    let mut out = Vec::with_capacity(paths.len());
    for p in paths {
        if p.is_dir() {
            out.push(crate::rundir::record_file_of_run_dir(p)?);
        } else if !p.exists() {
            return Err(RecordsError::Read {
                path: p.clone(),
                message: "no such file or directory".to_string(),
            });
        } else {
            out.push(p.clone());
        }
    }
    // Only regular files: a FIFO would block the reader forever, a device never end.
    for p in &out {
        sy_run::check_input_file(p).map_err(|e| RecordsError::Read {
            path: p.clone(),
            message: match e {
                sy_run::RunError::NotRegular { what, .. } => what.to_string(),
                other => other.to_string(),
            },
        })?;
    }
    Ok(out)
}

/// Loads and validates records from files or run directories (see the module docs).
pub fn load_records(
    paths: &[PathBuf],
    options: &LoadOptions,
) -> Result<LoadedRecords, RecordsError> {
    let files = resolve_inputs(paths)?;
    let mut out = LoadedRecords::default();
    for (file_index, path) in files.iter().enumerate() {
        let mut summary = FileSummary::before_reading(path)?;
        let before = out.records.len();
        let skipped_before = out.skipped.len();
        let file_u32 = u32::try_from(file_index).unwrap_or(u32::MAX);
        let mut sink = Sink {
            out: &mut out,
            file: file_u32,
            options,
        };
        match summary.format {
            Format::Parquet => read_parquet(path, &mut sink, &mut summary)?,
            Format::Csv => read_csv(path, &mut sink, &mut summary)?,
            Format::Jsonl => read_jsonl(path, &mut sink, &mut summary)?,
        }
        summary.loaded = out.records.len() - before;
        summary.skipped = out.skipped.len() - skipped_before;
        out.files.push(summary);
    }
    check_pairs(&mut out, options)?;
    count_per_file(&mut out.files, &out.origins, &out.skipped);
    if out.records.is_empty() {
        return Err(no_valid_records(&files));
    }
    Ok(out)
}

/// Collects records and issues of one file.
struct Sink<'a> {
    out: &'a mut LoadedRecords,
    file: u32,
    options: &'a LoadOptions,
}

impl Sink<'_> {
    /// Takes a parsed record (after semantic validation) or its issue.
    fn push(
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

/// `record` if it passes [`validate_record`], else the issue naming `path` and `row`.
fn validated(path: &Path, row: usize, record: Record) -> Result<Record, RowIssue> {
    match validate_record(&record) {
        Ok(()) => Ok(record),
        Err((field, message)) => Err(RowIssue {
            path: path.to_path_buf(),
            row,
            field: field.to_string(),
            message,
        }),
    }
}

/// The fields of one row that [`validate_fields`] checks (borrowed from a [`Record`] or from
/// the columns of a [`crate::ProbeTable`] being loaded).
#[derive(Debug, Clone, Copy)]
pub(crate) struct CheckedFields<'a> {
    pub status: Status,
    pub ttft_ms: Option<f64>,
    pub n: Option<u64>,
    pub k: Option<u64>,
    pub schema_version: u32,
    pub served_worker_id: Option<u64>,
    pub reserved_worker_id: Option<u64>,
    pub served_dp_rank: Option<u32>,
    pub reserved_dp_rank: Option<u32>,
    pub run_id: &'a str,
    pub condition_id: &'a str,
    pub probe_id: &'a str,
}

impl<'a> CheckedFields<'a> {
    fn of(r: &'a Record) -> Self {
        CheckedFields {
            status: r.status,
            ttft_ms: r.ttft_ms,
            n: r.observed.n,
            k: r.observed.k,
            schema_version: r.schema_version,
            served_worker_id: r.served_worker_id,
            reserved_worker_id: r.reserved_worker_id,
            served_dp_rank: r.served_dp_rank,
            reserved_dp_rank: r.reserved_dp_rank,
            run_id: &r.run_id,
            condition_id: &r.condition_id,
            probe_id: &r.probe_id,
        }
    }
}

/// The checks of one record that its types do not already guarantee: an ok record has a finite,
/// non-negative TTFT; K ≤ N. Returns the field and the message of the first problem.
pub fn validate_record(r: &Record) -> Result<(), (&'static str, String)> {
    validate_fields(&CheckedFields::of(r))
}

/// [`validate_record`] on the fields it reads: the one definition of a row's semantic checks,
/// shared by the record loader and the columnar probe table.
pub(crate) fn validate_fields(r: &CheckedFields<'_>) -> Result<(), (&'static str, String)> {
    if r.status == Status::Ok {
        match r.ttft_ms {
            None => return Err(("ttft_ms", "missing on an ok record".to_string())),
            Some(t) if t.is_nan() => return Err(("ttft_ms", "NaN on an ok record".to_string())),
            Some(t) if !t.is_finite() => {
                return Err(("ttft_ms", format!("{t} on an ok record")));
            }
            Some(t) if t < 0.0 => {
                return Err(("ttft_ms", format!("negative ({t}) on an ok record")));
            }
            Some(_) => {}
        }
    }
    if let (Some(k), Some(n)) = (r.k, r.n)
        && k > n
    {
        return Err(("k", format!("K = {k} is greater than N = {n}")));
    }
    if r.schema_version == 0 || r.schema_version > crate::record::RECORD_SCHEMA_VERSION {
        return Err((
            "schema_version",
            format!(
                "record schema version {} is not one this tool reads (1..={})",
                r.schema_version,
                crate::record::RECORD_SCHEMA_VERSION
            ),
        ));
    }
    if r.status == Status::Ok {
        served_as_reserved(r)?;
    }
    if r.run_id.is_empty() {
        return Err(("run_id", "empty".to_string()));
    }
    if r.condition_id.is_empty() {
        return Err(("condition_id", "empty".to_string()));
    }
    if r.probe_id.is_empty() {
        return Err(("probe_id", "empty".to_string()));
    }
    Ok(())
}

/// An ok record's TTFT belongs to its observation only if the worker and rank that served are the
/// reserved ones (where both are known). The collector marks a mismatch as `served_elsewhere`;
/// an ok record that still carries one is refused.
fn served_as_reserved(r: &CheckedFields<'_>) -> Result<(), (&'static str, String)> {
    if let (Some(s), Some(b)) = (r.served_worker_id, r.reserved_worker_id)
        && s != b
    {
        return Err((
            "served_worker_id",
            format!(
                "served by worker {s} but reserved on worker {b} (status ok): the observation does not describe the measured worker"
            ),
        ));
    }
    if let (Some(s), Some(b)) = (r.served_dp_rank, r.reserved_dp_rank)
        && s != b
    {
        return Err((
            "served_dp_rank",
            format!(
                "served on rank {s} but reserved rank {b} (status ok): the observation does not describe the measured rank"
            ),
        ));
    }
    Ok(())
}

/// How the records' observations relate to the advisory pick (see `docs/formats.md`): every
/// observation describes the reserved worker and rank; `pick_differs` counts those where the
/// query-only advisory pick named another one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct PickSummary {
    /// Records with a reservation and a known advisory pick.
    pub compared: usize,
    /// Of those, records whose advisory pick differs from the reservation.
    pub pick_differs: usize,
    /// Records written before the advisory pick was recorded (their observation is of the
    /// advisory pick, which may not be the worker that served).
    pub legacy: usize,
}

impl PickSummary {
    /// Counts over `records` (reserved records only).
    pub fn of(records: &[Record]) -> Self {
        let mut s = PickSummary::default();
        for r in records {
            s.count(r.reserved_worker_id.is_some(), r.pick_differs);
        }
        s
    }

    /// Counts one record: whether it has a reservation, and its `pick_differs`.
    #[inline]
    pub(crate) fn count(&mut self, reserved: bool, pick_differs: Option<bool>) {
        if !reserved {
            return;
        }
        match pick_differs {
            Some(d) => {
                self.compared += 1;
                self.pick_differs += usize::from(d);
            }
            None => self.legacy += 1,
        }
    }
}

impl std::fmt::Display for PickSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "advisory pick differed from the reservation in {} of {} records ({:.1} %); their observation is of the reserved worker and they are used as is",
            self.pick_differs,
            self.compared,
            100.0 * self.pick_differs as f64 / self.compared.max(1) as f64
        )?;
        if self.legacy > 0 {
            write!(
                f,
                "; {} records predate this check (observation of the advisory pick)",
                self.legacy
            )?;
        }
        Ok(())
    }
}

fn read_err(path: &Path, e: impl std::fmt::Display) -> RecordsError {
    RecordsError::Read {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

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
                    .unwrap_or_else(|_| Err(read_err(path, "a record conversion thread panicked")))
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

fn read_parquet(
    path: &Path,
    sink: &mut Sink<'_>,
    summary: &mut FileSummary,
) -> Result<(), RecordsError> {
    let open = || File::open(path).map_err(|e| read_err(path, e));
    let mut reader = ParquetReader::new(open()?);
    let total = reader
        .num_rows()
        .map_err(|e| read_err(path, format!("not a readable Parquet file: {e}")))?;
    let schema = reader
        .schema()
        .map_err(|e| read_err(path, format!("not a readable Parquet file: {e}")))?;
    crate::frame::check_parquet_types(path, &schema)?;
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
            .map_err(|e| read_err(path, format!("not a readable Parquet file: {e}")))?;
        if first {
            summary.unknown_columns = unknown_columns(&df);
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

fn read_csv(
    path: &Path,
    sink: &mut Sink<'_>,
    summary: &mut FileSummary,
) -> Result<(), RecordsError> {
    let df = read_csv_frame(path)?;
    summary.rows = df.height();
    summary.unknown_columns = unknown_columns(&df);
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
        .map_err(|e| read_err(path, format!("not a readable CSV file: {e}")))
}

/// Reads a JSONL record file into `out` (records of file index `file`).
pub(crate) fn read_jsonl_into(
    path: &Path,
    file: u32,
    options: &LoadOptions,
    out: &mut LoadedRecords,
    summary: &mut FileSummary,
) -> Result<(), RecordsError> {
    let mut sink = Sink { out, file, options };
    read_jsonl(path, &mut sink, summary)
}

fn read_jsonl(
    path: &Path,
    sink: &mut Sink<'_>,
    summary: &mut FileSummary,
) -> Result<(), RecordsError> {
    let file = File::open(path).map_err(|e| read_err(path, e))?;
    let mut reader = BufReader::new(file);
    let mut line = String::new();
    let mut line_no = 0usize;
    loop {
        line.clear();
        let read = reader.read_line(&mut line).map_err(|e| read_err(path, e))?;
        if read == 0 {
            break;
        }
        line_no += 1;
        let complete = line.ends_with('\n');
        let text = line.trim_end_matches(['\n', '\r']);
        if text.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Record>(text) {
            Ok(rec) => {
                summary.rows += 1;
                sink.push(path, line_no, Ok(rec))?;
            }
            Err(_) if !complete => {
                // A torn last line: the writer crashed mid-append. Ignored and reported.
                summary.torn_tail = true;
                tracing::warn!(
                    "{}:{line_no}: torn last line (no newline, not a whole record: a crash \
                     while appending) ignored",
                    path.display()
                );
                break;
            }
            Err(e) => {
                summary.rows += 1;
                let (field, message) = diagnose_json_line(text, &e);
                let issue = RowIssue {
                    path: path.to_path_buf(),
                    row: line_no,
                    field,
                    message,
                };
                sink.push(path, line_no, Err(issue))?;
            }
        }
    }
    Ok(())
}

/// Finds which member of a JSON line makes it an invalid record.
fn diagnose_json_line(text: &str, err: &serde_json::Error) -> (String, String) {
    use serde_json::Value;
    let value: Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => return ("(line)".to_string(), format!("not valid JSON: {e}")),
    };
    let Value::Object(obj) = value else {
        return ("(line)".to_string(), "expected a JSON object".to_string());
    };
    let Ok(Value::Object(template)) = serde_json::to_value(crate::synth::template_record()) else {
        return ("(record)".to_string(), err.to_string());
    };
    for key in obj.keys() {
        if !template.contains_key(key) {
            return (key.clone(), "unknown field".to_string());
        }
    }
    // Required members (non-optional fields).
    for key in template.keys() {
        if !obj.contains_key(key) {
            let mut t = template.clone();
            t.remove(key);
            if serde_json::from_value::<Record>(Value::Object(t)).is_err() {
                return (key.clone(), "missing value".to_string());
            }
        }
    }
    for (key, val) in &obj {
        let mut t = template.clone();
        t.insert(key.clone(), val.clone());
        if let Err(e) = serde_json::from_value::<Record>(Value::Object(t)) {
            let msg = e.to_string();
            if key == "background"
                && let (Value::Object(bg), Some(Value::Object(bg_t))) = (val, template.get(key))
            {
                for (bk, bv) in bg {
                    let mut t2 = bg_t.clone();
                    t2.insert(bk.clone(), bv.clone());
                    if serde_json::from_value::<crate::record::Background>(Value::Object(t2))
                        .is_err()
                    {
                        return (format!("background.{bk}"), msg);
                    }
                }
            }
            return (key.clone(), msg);
        }
    }
    ("(record)".to_string(), err.to_string())
}

/// Checks that every load-phase probe pairs up (see [`crate::pairing::check_pairing`]): without
/// `skip_invalid` the first offending row (in file/row order) is the error; with it, the
/// offending records and their partners are dropped and reported.
fn check_pairs(out: &mut LoadedRecords, options: &LoadOptions) -> Result<(), RecordsError> {
    let describe = |i: usize| describe(out, i);
    let torn = |i: usize| torn_note(&out.origins, &out.files, i);
    let mut bad = check_pairing(out.records.as_slice(), &describe, &torn).bad;
    if bad.is_empty() {
        return Ok(());
    }
    sort_by_origin(&mut bad, &out.origins);
    let issue = |b: &PairIssue| pair_row_issue(&out.origins, &out.files, b);
    if !options.skip_invalid {
        return Err(RecordsError::Row(issue(&bad[0])));
    }
    let mut issues: Vec<RowIssue> = bad.iter().map(issue).collect();
    let drop = drop_mask(out.records.as_slice(), &bad, |i| {
        issues.push(partner_issue(
            &out.origins,
            &out.files,
            i,
            &out.records[i].probe_id,
        ));
    });
    out.skipped.extend(issues);
    let mut keep = drop.iter().map(|d| !d);
    out.records.retain(|_| keep.next().unwrap_or(true));
    let mut keep = drop.iter().map(|d| !d);
    out.origins.retain(|_| keep.next().unwrap_or(true));
    Ok(())
}

/// Sorts pairing issues into file/row order.
pub(crate) fn sort_by_origin(bad: &mut [PairIssue], origins: &[RowOrigin]) {
    bad.sort_by_key(|(i, _, _)| origins.get(*i).map(|o| (o.file, o.row)));
}

/// The [`RowIssue`] of a pairing issue.
pub(crate) fn pair_row_issue(
    origins: &[RowOrigin],
    files: &[FileSummary],
    (i, field, message): &PairIssue,
) -> RowIssue {
    let (path, row) = origin_of(origins, files, *i);
    RowIssue {
        path,
        row,
        field: (*field).to_string(),
        message: message.clone(),
    }
}

/// The issue of a valid record dropped because its partner is invalid.
pub(crate) fn partner_issue(
    origins: &[RowOrigin],
    files: &[FileSummary],
    i: usize,
    probe_id: &str,
) -> RowIssue {
    let (path, row) = origin_of(origins, files, i);
    RowIssue {
        path,
        row,
        field: "probe_id".to_string(),
        message: format!("partner of an invalid record of probe {probe_id:?}"),
    }
}

/// Rows to drop with `skip_invalid`: the offending ones and every load-phase row of the same
/// probe (a probe is usable only as a pair); `partner(i)` is called for each partner dropped.
pub(crate) fn drop_mask<K: PairKeys + ?Sized>(
    keys: &K,
    bad: &[PairIssue],
    mut partner: impl FnMut(usize),
) -> Vec<bool> {
    let mut drop = vec![false; keys.rows()];
    let mut bad_probes: std::collections::HashSet<(&str, &str)> = Default::default();
    for b in bad {
        bad_probes.insert((keys.run_id(b.0), keys.probe_id(b.0)));
        drop[b.0] = true;
    }
    for (i, d) in drop.iter_mut().enumerate() {
        if keys.phase(i) == Phase::Load
            && !*d
            && bad_probes.contains(&(keys.run_id(i), keys.probe_id(i)))
        {
            *d = true;
            partner(i);
        }
    }
    drop
}

/// The file and row of row `i`.
fn origin_of(origins: &[RowOrigin], files: &[FileSummary], i: usize) -> (PathBuf, usize) {
    origins
        .get(i)
        .and_then(|o| Some((files.get(o.file as usize)?.path.clone(), o.row as usize)))
        .unwrap_or_default()
}

/// The hint for a row whose partner is missing when its file ends in a torn line.
pub(crate) fn torn_note(origins: &[RowOrigin], files: &[FileSummary], i: usize) -> String {
    origins
        .get(i)
        .and_then(|o| files.get(o.file as usize))
        .filter(|f| f.torn_tail)
        .map(|f| {
            format!(
                " (the last line of {} is torn — a crash while appending — and was ignored: it \
                 may have been this partner)",
                f.path.display()
            )
        })
        .unwrap_or_default()
}

/// Row `i` as "FILE row N", for messages.
pub(crate) fn describe_origin(origins: &[RowOrigin], files: &[FileSummary], i: usize) -> String {
    match origins
        .get(i)
        .and_then(|o| Some((files.get(o.file as usize)?, o.row)))
    {
        Some((f, row)) => format!("{} row {row}", f.path.display()),
        None => format!("record {i}"),
    }
}

fn describe(out: &LoadedRecords, i: usize) -> String {
    describe_origin(&out.origins, &out.files, i)
}
