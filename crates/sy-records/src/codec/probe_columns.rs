//! The probe table's columns of one frame, typed and converted a column at a time (see
//! [`crate::ProbeTable`]); every cell problem is kept with its row and field so that a row's
//! first problem is the one a row-by-row read ([`super::rows`]) reports.

use std::borrow::Cow;
use std::path::Path;

use polars::prelude::*;

use crate::codec::cells::Col;
use crate::codec::layout::{Cols, ColsData, PROBE_TABLE_COLUMNS};
use crate::codec::rows::check_required_columns;
use crate::codec::values::ReadCell;
use crate::error::RecordsError;
use crate::record::{Model, Phase, RECORD_SCHEMA_VERSION, Status};

/// The calibration columns of one frame, typed, converted a column at a time, with every cell
/// problem kept as `(row in frame, position of the field in the record layout, field, message)`
/// so that the first problem of a row is the one a row-by-row read reports.
#[derive(Default)]
pub(crate) struct ProbeColumns<'a> {
    pub height: usize,
    pub schema_version: Vec<u32>,
    pub run_id: Vec<Option<Cow<'a, str>>>,
    pub condition_id: Vec<Option<Cow<'a, str>>>,
    pub phase: Vec<Option<Phase>>,
    pub repeat: Vec<u32>,
    pub probe_id: Vec<Option<Cow<'a, str>>>,
    pub role: Vec<Option<Model>>,
    pub model: Vec<Option<Cow<'a, str>>>,
    pub planned_n: Vec<u64>,
    pub planned_f: Vec<f64>,
    pub decode_length: Vec<Option<Cow<'a, str>>>,
    pub status: Vec<Option<Status>>,
    pub n: Vec<Option<u64>>,
    pub k: Vec<Option<u64>>,
    pub r: Vec<Option<u64>>,
    pub prefill_tokens_booked: Vec<Option<u64>>,
    pub prefill_capacity_tokens: Vec<Option<u64>>,
    pub schedulable: Vec<Option<bool>>,
    pub observed_at_unix_ms: Vec<Option<f64>>,
    pub sent_at_unix_ms: Vec<f64>,
    pub reserved_worker_id: Vec<Option<u64>>,
    pub reserved_dp_rank: Vec<Option<u32>>,
    pub pick_differs: Vec<Option<bool>>,
    pub served_worker_id: Vec<Option<u64>>,
    pub served_dp_rank: Vec<Option<u32>>,
    pub ttft_ms: Vec<Option<f64>>,
    pub client_server_gap_ms: Vec<Option<f64>>,
    /// Attempts made for the record's unit (1 when the column is absent).
    pub attempts: Vec<u32>,
    /// Cell problems, unordered.
    pub issues: Vec<(usize, u16, &'static str, String)>,
}

/// Position of a field in a row's reading order (file order, see [`super::rows`]) (ties between problems of one row
/// go to the earlier field, as a row-by-row read notes the first).
fn field_order(field: &str) -> u16 {
    PROBE_TABLE_COLUMNS
        .iter()
        .position(|f| *f == field)
        .map_or(u16::MAX, |p| p as u16)
}

/// Converts one column: every cell through `get`, problems kept with their row.
fn column<T>(
    height: usize,
    field: &'static str,
    issues: &mut Vec<(usize, u16, &'static str, String)>,
    get: impl Fn(usize) -> Result<Option<T>, String>,
) -> Vec<Option<T>> {
    let order = field_order(field);
    (0..height)
        .map(|i| match get(i) {
            Ok(v) => v,
            Err(m) => {
                issues.push((i, order, field, m));
                None
            }
        })
        .collect()
}

/// A column that must have a value in every row (`missing value` otherwise).
fn required<T>(
    values: Vec<Option<T>>,
    field: &'static str,
    issues: &mut Vec<(usize, u16, &'static str, String)>,
    already: &[bool],
) -> Vec<Option<T>> {
    let order = field_order(field);
    for (i, v) in values.iter().enumerate() {
        if v.is_none() && !already.get(i).copied().unwrap_or(false) {
            issues.push((i, order, field, "missing value".to_string()));
        }
    }
    values
}

/// Rows that already have a problem in `field` (so that a missing value is not noted twice).
fn flagged(height: usize, issues: &[(usize, u16, &'static str, String)], field: &str) -> Vec<bool> {
    let mut f = vec![false; height];
    for (i, _, name, _) in issues {
        if *name == field {
            f[*i] = true;
        }
    }
    f
}

/// A required text column parsed into an enum ([`ReadCell`]).
fn parsed_column<T: ReadCell>(
    c: &Col<'_>,
    height: usize,
    field: &'static str,
    issues: &mut Vec<(usize, u16, &'static str, String)>,
) -> Vec<Option<T>> {
    let values = column(height, field, issues, |i| T::read(c, i));
    let already = flagged(height, issues, field);
    required(values, field, issues, &already)
}

/// A required text column: `missing value` where a row has none (and no other problem).
fn required_text<'a>(
    c: &Col<'a>,
    height: usize,
    field: &'static str,
    issues: &mut Vec<(usize, u16, &'static str, String)>,
) -> Vec<Option<Cow<'a, str>>> {
    let values = column(height, field, issues, |i| c.text(i));
    let already = flagged(height, issues, field);
    required(values, field, issues, &already)
}

/// The identity, plan and status columns of [`ProbeColumns`].
fn identity_columns<'a>(cols: &Cols<'a>, pc: &mut ProbeColumns<'a>) {
    let h = pc.height;
    let is = &mut pc.issues;
    let schema_version = column(h, "schema_version", is, |i| {
        let v = cols.schema_version.u32(i)?.unwrap_or(RECORD_SCHEMA_VERSION);
        if v > RECORD_SCHEMA_VERSION {
            return Err(format!(
                "record schema version {v} is newer than this tool's {RECORD_SCHEMA_VERSION}"
            ));
        }
        Ok(Some(v))
    });
    pc.schema_version = schema_version
        .into_iter()
        .map(|v| v.unwrap_or(RECORD_SCHEMA_VERSION))
        .collect();
    pc.run_id = required_text(&cols.run_id, h, "run_id", is);
    pc.condition_id = required_text(&cols.condition_id, h, "condition_id", is);
    pc.phase = parsed_column::<Phase>(&cols.phase, h, "phase", is);
    let repeat = column(h, "repeat", is, |i| cols.repeat.u32(i));
    let already = flagged(h, is, "repeat");
    pc.repeat = required(repeat, "repeat", is, &already)
        .into_iter()
        .map(Option::unwrap_or_default)
        .collect();
    pc.probe_id = required_text(&cols.probe_id, h, "probe_id", is);
    pc.role = parsed_column::<Model>(&cols.role, h, "role", is);
    pc.model = required_text(&cols.model, h, "model", is);
    pc.planned_n = column(h, "planned_n", is, |i| cols.planned_n.u64(i))
        .into_iter()
        .map(Option::unwrap_or_default)
        .collect();
    pc.planned_f = column(h, "planned_f", is, |i| cols.planned_f.f64(i))
        .into_iter()
        .map(|v| v.unwrap_or(0.0))
        .collect();
    pc.decode_length = column(h, "background_decode_length", is, |i| {
        cols.background_decode_length.text(i)
    });
    pc.status = parsed_column::<Status>(&cols.status, h, "status", is);
}

/// The observation and measurement columns of [`ProbeColumns`] (all optional).
fn observation_columns<'a>(cols: &Cols<'a>, pc: &mut ProbeColumns<'a>) {
    let h = pc.height;
    let is = &mut pc.issues;
    let u64s =
        |c: &Col<'a>, field: &'static str, is: &mut Vec<_>| column(h, field, is, |i| c.u64(i));
    pc.n = u64s(&cols.n, "n", is);
    pc.k = u64s(&cols.k, "k", is);
    pc.r = u64s(&cols.r, "r", is);
    pc.prefill_tokens_booked = u64s(&cols.prefill_tokens_booked, "prefill_tokens_booked", is);
    pc.prefill_capacity_tokens = u64s(&cols.prefill_capacity_tokens, "prefill_capacity_tokens", is);
    pc.schedulable = column(h, "schedulable", is, |i| cols.schedulable.bool(i));
    pc.observed_at_unix_ms = column(h, "observed_at_unix_ms", is, |i| {
        cols.observed_at_unix_ms.f64(i)
    });
    pc.sent_at_unix_ms = column(h, "sent_at_unix_ms", is, |i| cols.sent_at_unix_ms.f64(i))
        .into_iter()
        .map(|v| v.unwrap_or(0.0))
        .collect();
    pc.reserved_worker_id = u64s(&cols.reserved_worker_id, "reserved_worker_id", is);
    pc.reserved_dp_rank = column(h, "reserved_dp_rank", is, |i| cols.reserved_dp_rank.u32(i));
    pc.pick_differs = column(h, "pick_differs", is, |i| cols.pick_differs.bool(i));
    pc.served_worker_id = u64s(&cols.served_worker_id, "served_worker_id", is);
    pc.served_dp_rank = column(h, "served_dp_rank", is, |i| cols.served_dp_rank.u32(i));
    pc.ttft_ms = column(h, "ttft_ms", is, |i| cols.ttft_ms.f64(i));
    pc.client_server_gap_ms = column(h, "client_server_gap_ms", is, |i| {
        cols.client_server_gap_ms.f64(i)
    });
    pc.attempts = column(h, "attempts", is, |i| cols.attempts.u32(i))
        .into_iter()
        .map(|v| v.unwrap_or(1))
        .collect();
}

/// Reads the calibration columns of `df` (see [`ProbeColumns`]).
fn probe_columns<'a>(
    cols: &Cols<'a>,
    height: usize,
    path: &Path,
) -> Result<ProbeColumns<'a>, RecordsError> {
    check_required_columns(cols, path)?;
    let mut pc = ProbeColumns {
        height,
        ..ProbeColumns::default()
    };
    identity_columns(cols, &mut pc);
    observation_columns(cols, &mut pc);
    Ok(pc)
}

/// Runs `f` on the calibration columns of `df` (see [`ProbeColumns`]).
pub(crate) fn with_probe_columns<R>(
    df: &DataFrame,
    path: &Path,
    f: impl FnOnce(ProbeColumns<'_>) -> R,
) -> Result<R, RecordsError> {
    let data = ColsData::from_df(df, path)?;
    let cols = data.view();
    Ok(f(probe_columns(&cols, df.height(), path)?))
}
