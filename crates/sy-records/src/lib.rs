//! Calibration records: the contract between `sy-collect` and the fitting tools.
//!
//! One [`Record`] is one candidate of one paired probe: `sy-collect` sends the same prompt to the
//! efficient and the capable model at the same instant and writes one record per candidate, both
//! with the same `probe_id`. Records are appended to `records.jsonl` as they complete
//! ([`jsonl`]), and converted to Parquet at the end of a run.
//!
//! Field names carry their unit (`_ms`, `_tokens`, `_blocks`) so that a column is never ambiguous
//! in Parquet, CSV or JSONL. `schemas/record.schema.json` describes the same shape.

pub mod jsonl;
mod record;

pub use record::{Background, ErrorClass, Phase, RECORD_SCHEMA_VERSION, Record, Role, Status};
