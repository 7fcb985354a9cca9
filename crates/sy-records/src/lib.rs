//! Calibration records: the contract between `sy-collect` and the fitting tools.
//!
//! One [`Record`] is one candidate of one paired probe: `sy-collect` sends the same prompt to the
//! efficient and the capable model (at the same instant under load, one after the other in the
//! no-load grid) and writes one record per candidate, both with the same `probe_id`. Records are
//! appended to `records.jsonl` as they complete ([`jsonl`]), and converted to Parquet at the end
//! of a run ([`write_parquet`]).
//!
//! Field names carry their unit (`_ms`, `_tokens`, `_blocks`) so that a column is never ambiguous
//! in Parquet, CSV or JSONL. `schemas/record.schema.json` describes the same shape.
//!
//! The fitting tools (`sy-fit`, `sy-margin`, `sy-select`) share the rest of this crate:
//!
//! - [`load_records`]: Parquet / CSV / JSONL files or run directories (the newest complete source
//!   of a run directory, [`rundir`]), merged, validated; every
//!   problem names the file, the row and the field ([`RowIssue`]), or is skipped and counted with
//!   [`LoadOptions::skip_invalid`].
//! - [`ProbeTable`]: the columns the calibration tools read, loaded with the same validation,
//!   with its load-phase probes paired ([`ProbePair`]).
//! - [`Record::observation`]: the runtime selector's [`sy_selector::Observation`] of a record.
//! - [`SplitTable`]: the grouped fit / uncertainty / selection split of conditions
//!   (`splits.json`), by a seeded hash of `(run_id, condition_id)`.
//! - [`check`]: the data-quality verdict of a run (`sy-collect check`, refused by `sy-fit`).
//! - [`synth`]: records generated from a known truth, for tests and the benchmarks.
//!
//! Conditions are always keyed by `(run_id, condition_id)`, so records of several runs (one run
//! directory per GPU node) can be merged without their condition ids colliding.
//!
//! The source is a folder per concern: `codec/` (the flat column layout, listed once in
//! `codec/layout.rs`, and the file formats), `load/` (inputs, readers, validation, pairing
//! across rows), `table/` (the probe table and its cache), `splits/` (the split rule and
//! `splits.json`), `synth/` (synthetic records) and `check/` (the data-quality checks).

pub mod check;
mod codec;
mod error;
mod load;
mod observation;
mod pairing;
mod record;
mod splits;
pub mod synth;
mod table;

pub use codec::jsonl;
pub use load::rundir;

pub use codec::Format;
pub use codec::layout::{ALL_COLUMNS, PROBE_TABLE_COLUMNS, REQUIRED_COLUMNS};
pub use codec::rows::records_to_frame;
pub use codec::write::{
    PARQUET_ROW_GROUP_ROWS, parquet_bytes, write_csv, write_jsonl, write_parquet, write_records,
};
pub use error::{FormatError, ReadError, RecordsError, RowIssue, SplitsError, WriteError};
pub use load::{
    FileSummary, LoadOptions, LoadedRecords, PickSummary, RUN_DIR_RECORD_FILES, RowOrigin,
    load_records, resolve_inputs, validate_record,
};
pub use pairing::pair_indices;
pub use record::{
    Background, ErrorClass, Model, ObservedFields, Phase, RECORD_SCHEMA_VERSION, Record, Status,
};
pub use splits::{
    ConditionSplits, FractionsError, LoadConditions, SPLITS_SCHEMA_VERSION, Split, SplitCounts,
    SplitFractions, SplitTable, assign_split, split_point,
};
pub use table::{ConditionIndex, ProbePair, ProbeTable, Row, StagedCache};

/// The key of a condition across merged runs: `"{run_id}/{condition_id}"` (for display and maps
/// that need one string; [`SplitTable`] keys by the pair).
pub fn condition_key(run_id: &str, condition_id: &str) -> String {
    format!("{run_id}/{condition_id}")
}
