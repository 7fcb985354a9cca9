//! The probe table's fast path: a frame whose columns have the types sy writes.
//!
//! A Parquet file written by sy holds each calibration column in one native type (text, `u32`,
//! `u64`, `f64`, boolean). Such a frame's rows are read straight from its Arrow arrays, with no
//! per-column conversion, and validated by the same rule as every other row
//! ([`crate::load::validate_fields`]). The fast path only ever accepts: a column of another type,
//! a missing or unparsable cell or a row the rule refuses sends the whole frame back to the
//! row-precise path ([`crate::codec::probe_columns::with_probe_columns`]), which converts what the file holds and
//! names the first problem. The fast path therefore changes how fast a valid file is read, never
//! what a file reads as (`parquet_cells_give_the_same_rows_errors_and_skips_in_both_loaders` in
//! `tests/table.rs` checks this on corrupted frames).

use polars::datatypes::{PolarsDataType, StaticArray};
use polars::prelude::*;

use super::RowValues;
use crate::codec::layout::REQUIRED_COLUMNS;
use crate::codec::values::{parse_phase, parse_role, parse_status};
use crate::record::RECORD_SCHEMA_VERSION;

/// One column of a frame in its native type: absent or all-null columns read as nulls.
struct Native<'a, T: PolarsDataType>(Option<&'a T::Array>);

impl<'a, T: PolarsPhysicalType> Native<'a, T> {
    /// The column `name` of `df` if it is absent, all null, or of type `T` in one chunk;
    /// `None` (not a native frame) otherwise.
    fn of(df: &'a DataFrame, name: &str) -> Option<Self> {
        let Ok(column) = df.column(name) else {
            return Some(Native(None));
        };
        if column.dtype() == &DataType::Null {
            return Some(Native(None));
        }
        if column.dtype() != &T::get_static_dtype() {
            return None;
        }
        let ca: &ChunkedArray<T> = column.as_materialized_series().as_ref().as_ref();
        match ca.chunks().len() {
            0 => Some(Native(None)),
            1 => ca.downcast_get(0).map(|a| Native(Some(a))),
            _ => None,
        }
    }

    #[inline]
    fn get(&self, i: usize) -> Option<T::Physical<'a>> {
        self.0.and_then(|a| a.get(i))
    }
}

/// The calibration columns of a frame, typed as sy writes them (see the module docs).
pub(super) struct NativeFrame<'a> {
    height: usize,
    schema_version: Native<'a, UInt32Type>,
    run_id: Native<'a, StringType>,
    condition_id: Native<'a, StringType>,
    phase: Native<'a, StringType>,
    repeat: Native<'a, UInt32Type>,
    probe_id: Native<'a, StringType>,
    role: Native<'a, StringType>,
    model: Native<'a, StringType>,
    planned_n: Native<'a, UInt64Type>,
    planned_f: Native<'a, Float64Type>,
    decode_length: Native<'a, StringType>,
    status: Native<'a, StringType>,
    n: Native<'a, UInt64Type>,
    k: Native<'a, UInt64Type>,
    r: Native<'a, UInt64Type>,
    prefill_tokens_booked: Native<'a, UInt64Type>,
    prefill_capacity_tokens: Native<'a, UInt64Type>,
    schedulable: Native<'a, BooleanType>,
    observed_at_unix_ms: Native<'a, Float64Type>,
    sent_at_unix_ms: Native<'a, Float64Type>,
    reserved_worker_id: Native<'a, UInt64Type>,
    reserved_dp_rank: Native<'a, UInt32Type>,
    pick_differs: Native<'a, BooleanType>,
    served_worker_id: Native<'a, UInt64Type>,
    served_dp_rank: Native<'a, UInt32Type>,
    ttft_ms: Native<'a, Float64Type>,
    client_server_gap_ms: Native<'a, Float64Type>,
    attempts: Native<'a, UInt32Type>,
}

impl<'a> NativeFrame<'a> {
    /// The frame's columns if every one is native; `None` sends the frame to the general path.
    pub(super) fn of(df: &'a DataFrame) -> Option<Self> {
        if !REQUIRED_COLUMNS.iter().all(|c| df.column(c).is_ok()) {
            return None;
        }
        Some(NativeFrame {
            height: df.height(),
            schema_version: Native::of(df, "schema_version")?,
            run_id: Native::of(df, "run_id")?,
            condition_id: Native::of(df, "condition_id")?,
            phase: Native::of(df, "phase")?,
            repeat: Native::of(df, "repeat")?,
            probe_id: Native::of(df, "probe_id")?,
            role: Native::of(df, "role")?,
            model: Native::of(df, "model")?,
            planned_n: Native::of(df, "planned_n")?,
            planned_f: Native::of(df, "planned_f")?,
            decode_length: Native::of(df, "background_decode_length")?,
            status: Native::of(df, "status")?,
            n: Native::of(df, "n")?,
            k: Native::of(df, "k")?,
            r: Native::of(df, "r")?,
            prefill_tokens_booked: Native::of(df, "prefill_tokens_booked")?,
            prefill_capacity_tokens: Native::of(df, "prefill_capacity_tokens")?,
            schedulable: Native::of(df, "schedulable")?,
            observed_at_unix_ms: Native::of(df, "observed_at_unix_ms")?,
            sent_at_unix_ms: Native::of(df, "sent_at_unix_ms")?,
            reserved_worker_id: Native::of(df, "reserved_worker_id")?,
            reserved_dp_rank: Native::of(df, "reserved_dp_rank")?,
            pick_differs: Native::of(df, "pick_differs")?,
            served_worker_id: Native::of(df, "served_worker_id")?,
            served_dp_rank: Native::of(df, "served_dp_rank")?,
            ttft_ms: Native::of(df, "ttft_ms")?,
            client_server_gap_ms: Native::of(df, "client_server_gap_ms")?,
            attempts: Native::of(df, "attempts")?,
        })
    }

    pub(super) fn height(&self) -> usize {
        self.height
    }

    /// Row `i` if every cell reads as the general path reads it without a problem; `None`
    /// otherwise (a missing required value, an unknown phase / role / status, a schema version
    /// newer than this tool's). The row rule itself is checked by the caller.
    #[inline]
    pub(super) fn row(&self, i: usize) -> Option<RowValues<'a>> {
        let schema_version = match self.schema_version.get(i) {
            None => RECORD_SCHEMA_VERSION,
            Some(v) if v <= RECORD_SCHEMA_VERSION => v,
            Some(_) => return None,
        };
        let reserved_worker_id = self.reserved_worker_id.get(i);
        Some(RowValues {
            schema_version,
            run_id: self.run_id.get(i)?,
            condition_id: self.condition_id.get(i)?,
            phase: parse_phase(self.phase.get(i)?).ok()?,
            repeat: self.repeat.get(i)?,
            probe_id: self.probe_id.get(i)?,
            role: parse_role(self.role.get(i)?).ok()?,
            model: self.model.get(i)?,
            planned_n: self.planned_n.get(i).unwrap_or_default(),
            planned_f: self.planned_f.get(i).unwrap_or(0.0),
            decode_length: self.decode_length.get(i),
            status: parse_status(self.status.get(i)?).ok()?,
            n: self.n.get(i),
            k: self.k.get(i),
            r: self.r.get(i),
            prefill_tokens_booked: self.prefill_tokens_booked.get(i),
            prefill_capacity_tokens: self.prefill_capacity_tokens.get(i),
            schedulable: self.schedulable.get(i),
            observed_at_unix_ms: self.observed_at_unix_ms.get(i),
            sent_at_unix_ms: self.sent_at_unix_ms.get(i).unwrap_or(0.0),
            reserved: reserved_worker_id.is_some(),
            reserved_worker_id,
            reserved_dp_rank: self.reserved_dp_rank.get(i),
            pick_differs: self.pick_differs.get(i),
            served_worker_id: self.served_worker_id.get(i),
            served_dp_rank: self.served_dp_rank.get(i),
            ttft_ms: self.ttft_ms.get(i),
            client_server_gap_ms: self.client_server_gap_ms.get(i),
            attempts: self.attempts.get(i).unwrap_or(1),
        })
    }
}
