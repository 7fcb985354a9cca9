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
//!
//! The parts: [`inputs`] turns arguments into record files (a run directory's newest complete
//! one, [`rundir`]); [`frames`] reads Parquet and CSV, [`lines`] JSONL; [`validate`] holds the
//! checks of one row and [`pairs`] those across rows; [`loaded`] what a load returns.

mod frames;
mod inputs;
mod lines;
mod loaded;
mod pairs;
pub mod rundir;
mod validate;

use std::path::PathBuf;

use crate::codec::Format;
use crate::error::RecordsError;

pub(crate) use frames::{PARQUET_SLICE_ROWS, read_csv_frame, thread_parts};
use frames::{read_csv, read_parquet};
pub use inputs::resolve_inputs;
use lines::read_jsonl;
pub(crate) use lines::read_jsonl_into;
pub use loaded::{FileSummary, LoadOptions, LoadedRecords, RowOrigin};
pub(crate) use loaded::{Sink, count_per_file, no_valid_records};
use pairs::check_pairs;
pub(crate) use pairs::{
    describe_origin, drop_mask, pair_row_issue, partner_issue, sort_by_origin, torn_note,
};
pub use rundir::RUN_DIR_RECORD_FILES;
pub(crate) use validate::{CheckedFields, validate_fields};
pub use validate::{PickSummary, validate_record};

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
