//! The flat column layout of records in Parquet and CSV, and the conversion between polars
//! DataFrames and [`Record`]s.
//!
//! A [`Record`] is nested (`background` is a struct); in columnar files it is flattened with a
//! `background_` prefix (`background_prefill_requests`, ...). Every other column has the
//! record's field name. JSONL keeps the nested shape (see [`crate::load`]).
//!
//! Reading is tolerant of representation (CSV cells are text, JSON numbers may be integers or
//! floats) but strict about meaning: a value that is not what the field needs (text in a numeric
//! column, a negative or fractional count, an unknown role) is a [`RowIssue`] naming the row and
//! the field.

use crate::record::Model;
use std::borrow::Cow;
use std::path::Path;

use polars::prelude::*;

use crate::error::{RecordsError, RowIssue};
use crate::record::{
    Background, ErrorClass, ObservedFields, Phase, RECORD_SCHEMA_VERSION, Record, Status,
};

/// Columns that every record file must have: the identity of a probe, the rule's inputs and the
/// measurement. Every other column is optional and takes its default (`None`, 0, `false`) when
/// absent.
pub const REQUIRED_COLUMNS: &[&str] = &[
    "run_id",
    "condition_id",
    "phase",
    "repeat",
    "probe_id",
    "role",
    "model",
    "n",
    "k",
    "r",
    "prefill_tokens_booked",
    "prefill_capacity_tokens",
    "ttft_ms",
    "status",
];

/// Largest integer a 64-bit float holds exactly.
const MAX_EXACT_F64_INT: f64 = 9_007_199_254_740_992.0;

/// One input column, in the representation the file gave it (owned, one chunk).
enum ColData {
    Absent,
    Null,
    Str(StringChunked),
    F64(Float64Chunked),
    U64(UInt64Chunked),
    I64(Int64Chunked),
    Bool(BooleanChunked),
}

impl ColData {
    fn from_df(df: &DataFrame, name: &str, path: &Path) -> Result<ColData, RecordsError> {
        let Ok(column) = df.column(name) else {
            return Ok(ColData::Absent);
        };
        let bad = |e: PolarsError| RecordsError::Read {
            path: path.to_path_buf(),
            message: format!("column `{name}`: {e}"),
        };
        let dtype = column.dtype().clone();
        let col = match dtype {
            DataType::Null => ColData::Null,
            DataType::String => ColData::Str(column.str().map_err(bad)?.clone()),
            DataType::Boolean => ColData::Bool(column.bool().map_err(bad)?.clone()),
            DataType::Float32 | DataType::Float64 => {
                let c = column.cast(&DataType::Float64).map_err(bad)?;
                ColData::F64(c.f64().map_err(bad)?.clone())
            }
            DataType::UInt8 | DataType::UInt16 | DataType::UInt32 | DataType::UInt64 => {
                let c = column.cast(&DataType::UInt64).map_err(bad)?;
                ColData::U64(c.u64().map_err(bad)?.clone())
            }
            DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64 => {
                let c = column.cast(&DataType::Int64).map_err(bad)?;
                ColData::I64(c.i64().map_err(bad)?.clone())
            }
            other => {
                return Err(RecordsError::ColumnType {
                    path: path.to_path_buf(),
                    column: name.to_string(),
                    found: other.to_string(),
                    expected: "text, number or boolean".to_string(),
                });
            }
        };
        Ok(col)
    }

    /// The column's values as a plain vector, read by row index.
    ///
    /// Materialising each column once (a sequential pass per column) and then indexing plain
    /// vectors is several times faster than `ChunkedArray::get` per cell, which locates the
    /// chunk and checks validity on every call; text is borrowed, not copied.
    fn view(&self) -> Col<'_> {
        match self {
            ColData::Absent => Col::Absent,
            ColData::Null => Col::Null,
            ColData::Str(c) => Col::Str(c.iter().collect()),
            ColData::F64(c) => Col::F64(c.iter().collect()),
            ColData::U64(c) => Col::U64(c.iter().collect()),
            ColData::I64(c) => Col::I64(c.iter().collect()),
            ColData::Bool(c) => Col::Bool(c.iter().collect()),
        }
    }
}

/// One input column, materialised for row access (see [`ColData::view`]).
enum Col<'a> {
    Absent,
    Null,
    Str(Vec<Option<&'a str>>),
    F64(Vec<Option<f64>>),
    U64(Vec<Option<u64>>),
    I64(Vec<Option<i64>>),
    Bool(Vec<Option<bool>>),
}

/// Cell `i` of a materialised column (`None` for null or past the end).
#[inline]
fn cell<T: Copy>(values: &[Option<T>], i: usize) -> Option<T> {
    values.get(i).copied().flatten()
}

impl<'a> Col<'a> {
    fn is_absent(&self) -> bool {
        matches!(self, Col::Absent)
    }

    /// The cell as text, borrowed when the column is text.
    #[inline]
    fn text(&self, i: usize) -> Result<Option<Cow<'a, str>>, String> {
        Ok(match self {
            Col::Absent | Col::Null => None,
            Col::Str(c) => cell(c, i).map(Cow::Borrowed),
            Col::F64(c) => cell(c, i).map(|v| Cow::Owned(v.to_string())),
            Col::U64(c) => cell(c, i).map(|v| Cow::Owned(v.to_string())),
            Col::I64(c) => cell(c, i).map(|v| Cow::Owned(v.to_string())),
            Col::Bool(c) => {
                return match cell(c, i) {
                    None => Ok(None),
                    Some(b) => Err(format!("expected text, found the boolean {b}")),
                };
            }
        })
    }

    #[inline]
    fn str(&self, i: usize) -> Result<Option<String>, String> {
        Ok(self.text(i)?.map(Cow::into_owned))
    }

    #[inline]
    fn f64(&self, i: usize) -> Result<Option<f64>, String> {
        Ok(match self {
            Col::Absent | Col::Null => None,
            Col::F64(c) => cell(c, i),
            Col::U64(c) => cell(c, i).map(|v| v as f64),
            Col::I64(c) => cell(c, i).map(|v| v as f64),
            Col::Str(c) => match cell(c, i) {
                None => None,
                Some(s) => Some(parse_f64(s)?),
            },
            Col::Bool(c) => {
                return match cell(c, i) {
                    None => Ok(None),
                    Some(b) => Err(format!("expected a number, found the boolean {b}")),
                };
            }
        })
    }

    #[inline]
    fn u64(&self, i: usize) -> Result<Option<u64>, String> {
        Ok(match self {
            Col::Absent | Col::Null => None,
            Col::U64(c) => cell(c, i),
            Col::I64(c) => match cell(c, i) {
                None => None,
                Some(v) if v < 0 => return Err(format!("expected a count ≥ 0, found {v}")),
                Some(v) => Some(v as u64),
            },
            Col::F64(c) => match cell(c, i) {
                None => None,
                Some(v) => Some(float_to_u64(v)?),
            },
            Col::Str(c) => match cell(c, i) {
                None => None,
                Some(s) => Some(parse_u64(s)?),
            },
            Col::Bool(c) => {
                return match cell(c, i) {
                    None => Ok(None),
                    Some(b) => Err(format!("expected a count, found the boolean {b}")),
                };
            }
        })
    }

    #[inline]
    fn u32(&self, i: usize) -> Result<Option<u32>, String> {
        match self.u64(i)? {
            None => Ok(None),
            Some(v) => u32::try_from(v)
                .map(Some)
                .map_err(|_| format!("expected a count ≤ {}, found {v}", u32::MAX)),
        }
    }

    #[inline]
    fn bool(&self, i: usize) -> Result<Option<bool>, String> {
        Ok(match self {
            Col::Absent | Col::Null => None,
            Col::Bool(c) => cell(c, i),
            Col::Str(c) => match cell(c, i) {
                None => None,
                Some(s) => match s.trim().to_ascii_lowercase().as_str() {
                    "" => None,
                    "true" | "1" => Some(true),
                    "false" | "0" => Some(false),
                    _ => return Err(format!("expected true or false, found {s:?}")),
                },
            },
            Col::U64(c) => match cell(c, i) {
                None => None,
                Some(0) => Some(false),
                Some(1) => Some(true),
                Some(v) => return Err(format!("expected true or false, found {v}")),
            },
            Col::I64(c) => match cell(c, i) {
                None => None,
                Some(0) => Some(false),
                Some(1) => Some(true),
                Some(v) => return Err(format!("expected true or false, found {v}")),
            },
            Col::F64(c) => match cell(c, i) {
                None => None,
                Some(v) => return Err(format!("expected true or false, found {v}")),
            },
        })
    }
}

fn parse_f64(s: &str) -> Result<f64, String> {
    let t = s.trim();
    if t.is_empty() {
        return Err("expected a number, found an empty value".to_string());
    }
    match t.to_ascii_lowercase().as_str() {
        "nan" => return Ok(f64::NAN),
        "inf" | "+inf" | "infinity" => return Ok(f64::INFINITY),
        "-inf" | "-infinity" => return Ok(f64::NEG_INFINITY),
        _ => {}
    }
    t.parse::<f64>()
        .map_err(|_| format!("expected a number, found {s:?}"))
}

fn parse_u64(s: &str) -> Result<u64, String> {
    let t = s.trim();
    if let Ok(v) = t.parse::<u64>() {
        return Ok(v);
    }
    // "12.0" (a float writer) is accepted when it is an exact integer.
    match t.parse::<f64>() {
        Ok(v) => float_to_u64(v),
        Err(_) => Err(format!("expected a whole count ≥ 0, found {s:?}")),
    }
}

fn float_to_u64(v: f64) -> Result<u64, String> {
    if !v.is_finite() {
        return Err(format!("expected a whole count ≥ 0, found {v}"));
    }
    if v < 0.0 {
        return Err(format!("expected a count ≥ 0, found {v}"));
    }
    if v.fract() != 0.0 {
        return Err(format!("expected a whole count, found {v}"));
    }
    if v > MAX_EXACT_F64_INT {
        return Err(format!(
            "the integer {v} is stored as a float and may have lost digits; store it as an integer"
        ));
    }
    Ok(v as u64)
}

pub(crate) fn parse_phase(s: &str) -> Result<Phase, String> {
    match s {
        "qgrid" => Ok(Phase::Qgrid),
        "load" => Ok(Phase::Load),
        _ => Err(format!(
            "unknown phase {s:?}, expected \"qgrid\" or \"load\""
        )),
    }
}

pub(crate) fn parse_role(s: &str) -> Result<Model, String> {
    match s {
        "efficient" => Ok(Model::Efficient),
        "capable" => Ok(Model::Capable),
        _ => Err(format!(
            "unknown role {s:?}, expected \"efficient\" or \"capable\""
        )),
    }
}

pub(crate) fn parse_status(s: &str) -> Result<Status, String> {
    match s {
        "ok" => Ok(Status::Ok),
        "error" => Ok(Status::Error),
        _ => Err(format!(
            "unknown status {s:?}, expected \"ok\" or \"error\""
        )),
    }
}

fn parse_error_class(s: &str) -> Result<ErrorClass, String> {
    serde_json::from_value(serde_json::Value::String(s.to_string()))
        .map_err(|_| format!("unknown error class {s:?}"))
}

macro_rules! record_columns {
    ($($field:ident),* $(,)?) => {
        /// Every column of the flat layout, in file order.
        pub const ALL_COLUMNS: &[&str] = &[$(stringify!($field)),*];

        /// The columns of one input frame, owned.
        struct ColsData {
            $($field: ColData,)*
        }

        /// The columns of one input frame, materialised for row access.
        struct Cols<'a> {
            $($field: Col<'a>,)*
        }

        impl ColsData {
            fn from_df(df: &DataFrame, path: &Path) -> Result<ColsData, RecordsError> {
                Ok(ColsData { $($field: ColData::from_df(df, stringify!($field), path)?,)* })
            }

            fn view(&self) -> Cols<'_> {
                Cols { $($field: self.$field.view(),)* }
            }
        }

        impl Cols<'_> {
            fn get(&self, name: &str) -> Option<&Col<'_>> {
                match name {
                    $(stringify!($field) => Some(&self.$field),)*
                    _ => None,
                }
            }
        }
    };
}

record_columns!(
    schema_version,
    run_id,
    condition_id,
    phase,
    repeat,
    probe_id,
    role,
    model,
    planned_n,
    planned_f,
    background_prefill_requests,
    background_prefill_prompt_tokens,
    background_decode_requests,
    background_decode_output_tokens,
    background_decode_length,
    background_busy_capable,
    background_target,
    n,
    k,
    r,
    prefill_tokens_booked,
    prefill_capacity_tokens,
    p,
    host_overlap_tokens,
    disk_overlap_tokens,
    effective_prefill_tokens,
    decode_blocks,
    kv_capacity_blocks,
    pool_pending_requests,
    pool_pending_tokens,
    schedulable,
    worker_id,
    dp_rank,
    endpoint,
    routing_group,
    observed_at_unix_ms,
    query_duration_ms,
    sent_at_unix_ms,
    reserved_worker_id,
    reserved_dp_rank,
    advisory_worker_id,
    advisory_dp_rank,
    advisory_k,
    advisory_r,
    advisory_p,
    pick_differs,
    served_worker_id,
    served_dp_rank,
    ttft_ms,
    server_ttft_ms,
    client_server_gap_ms,
    e2e_ms,
    prompt_tokens,
    output_tokens,
    cached_tokens,
    status,
    error_class,
    error_message,
    attempts,
);

/// The columns of the flat layout that hold text; every other column holds numbers or
/// booleans.
pub const TEXT_COLUMNS: &[&str] = &[
    "run_id",
    "condition_id",
    "phase",
    "probe_id",
    "role",
    "model",
    "background_decode_length",
    "background_target",
    "endpoint",
    "routing_group",
    "status",
    "error_class",
    "error_message",
];

/// Refuses a Parquet file (a typed format) whose numeric or boolean column is stored as text:
/// numbers stored as strings are a writer's mistake that a text format (CSV) cannot avoid but a
/// typed one can, and reading them would hide it.
pub(crate) fn check_parquet_types(path: &Path, schema: &ArrowSchema) -> Result<(), RecordsError> {
    for (name, field) in schema.iter() {
        let name = name.as_str();
        if !ALL_COLUMNS.contains(&name) || TEXT_COLUMNS.contains(&name) {
            continue;
        }
        let dtype = field.dtype();
        if matches!(
            dtype,
            ArrowDataType::Utf8
                | ArrowDataType::LargeUtf8
                | ArrowDataType::Utf8View
                | ArrowDataType::Binary
                | ArrowDataType::LargeBinary
                | ArrowDataType::BinaryView
        ) {
            return Err(RecordsError::ColumnType {
                path: path.to_path_buf(),
                column: name.to_string(),
                found: "text (numbers stored as strings)".to_string(),
                expected: "a numeric or boolean Parquet column".to_string(),
            });
        }
    }
    Ok(())
}

/// Reads one row; remembers the first problem.
struct RowReader {
    issue: Option<(&'static str, String)>,
}

impl RowReader {
    fn note(&mut self, field: &'static str, message: String) {
        if self.issue.is_none() {
            self.issue = Some((field, message));
        }
    }

    fn opt<T>(&mut self, field: &'static str, r: Result<Option<T>, String>) -> Option<T> {
        match r {
            Ok(v) => v,
            Err(m) => {
                self.note(field, m);
                None
            }
        }
    }

    fn req<T: Default>(&mut self, field: &'static str, r: Result<Option<T>, String>) -> T {
        match r {
            Ok(Some(v)) => v,
            Ok(None) => {
                self.note(field, "missing value".to_string());
                T::default()
            }
            Err(m) => {
                self.note(field, m);
                T::default()
            }
        }
    }

    fn or<T>(&mut self, field: &'static str, r: Result<Option<T>, String>, default: T) -> T {
        self.opt(field, r).unwrap_or(default)
    }

    fn parsed<T>(
        &mut self,
        field: &'static str,
        raw: Result<Option<Cow<'_, str>>, String>,
        parse: fn(&str) -> Result<T, String>,
    ) -> Option<T> {
        let s = self.opt(field, raw)?;
        match parse(s.trim()) {
            Ok(v) => Some(v),
            Err(m) => {
                self.note(field, m);
                None
            }
        }
    }
}

/// The identity and plan of a row (the first fields of the record layout).
struct RowIdentity {
    schema_version: u32,
    run_id: String,
    condition_id: String,
    phase: Phase,
    repeat: u32,
    probe_id: String,
    role: Model,
    model: String,
    planned_n: u64,
    planned_f: f64,
}

/// Reads a row's identity and plan: a newer schema version, a missing or unknown phase or role
/// and a missing id are problems.
fn read_identity(r: &mut RowReader, c: &Cols<'_>, i: usize) -> RowIdentity {
    let schema_version = r.or(
        "schema_version",
        c.schema_version.u32(i),
        RECORD_SCHEMA_VERSION,
    );
    if schema_version > RECORD_SCHEMA_VERSION {
        r.note(
            "schema_version",
            format!(
                "record schema version {schema_version} is newer than this tool's {RECORD_SCHEMA_VERSION}"
            ),
        );
    }
    let run_id: String = r.req("run_id", c.run_id.str(i));
    let condition_id: String = r.req("condition_id", c.condition_id.str(i));
    let phase = r.parsed("phase", c.phase.text(i), parse_phase);
    if phase.is_none() && r.issue.is_none() {
        r.note("phase", "missing value".to_string());
    }
    let repeat: u32 = r.req("repeat", c.repeat.u32(i));
    let probe_id: String = r.req("probe_id", c.probe_id.str(i));
    let role = r.parsed("role", c.role.text(i), parse_role);
    if role.is_none() && r.issue.is_none() {
        r.note("role", "missing value".to_string());
    }
    RowIdentity {
        schema_version,
        run_id,
        condition_id,
        phase: phase.unwrap_or(Phase::Load),
        repeat,
        probe_id,
        role: role.unwrap_or(Model::Efficient),
        model: r.req("model", c.model.str(i)),
        planned_n: r.or("planned_n", c.planned_n.u64(i), 0),
        planned_f: r.or("planned_f", c.planned_f.f64(i), 0.0),
    }
}

/// Reads a row's background load (every field optional, with its default).
fn read_background(r: &mut RowReader, c: &Cols<'_>, i: usize) -> Background {
    Background {
        prefill_requests: r.or(
            "background_prefill_requests",
            c.background_prefill_requests.u32(i),
            0,
        ),
        prefill_prompt_tokens: r.or(
            "background_prefill_prompt_tokens",
            c.background_prefill_prompt_tokens.u64(i),
            0,
        ),
        decode_requests: r.or(
            "background_decode_requests",
            c.background_decode_requests.u32(i),
            0,
        ),
        decode_output_tokens: r.or(
            "background_decode_output_tokens",
            c.background_decode_output_tokens.u64(i),
            0,
        ),
        decode_length: r.opt(
            "background_decode_length",
            c.background_decode_length.str(i),
        ),
        busy_capable: r.or(
            "background_busy_capable",
            c.background_busy_capable.bool(i),
            false,
        ),
        target: r.or(
            "background_target",
            c.background_target.str(i),
            String::new(),
        ),
    }
}

/// Reads row `i`: identity and plan, background, status, then the observation and the
/// measurement in the record layout's order; the first problem found is the row's issue.
fn row_to_record(c: &Cols<'_>, i: usize) -> Result<Record, (&'static str, String)> {
    let mut r = RowReader { issue: None };
    let id = read_identity(&mut r, c, i);
    let background = read_background(&mut r, c, i);
    let status = r.parsed("status", c.status.text(i), parse_status);
    if status.is_none() && r.issue.is_none() {
        r.note("status", "missing value".to_string());
    }
    let record = Record {
        schema_version: id.schema_version,
        run_id: id.run_id,
        condition_id: id.condition_id,
        phase: id.phase,
        repeat: id.repeat,
        probe_id: id.probe_id,
        role: id.role,
        model: id.model,
        planned_n: id.planned_n,
        planned_f: id.planned_f,
        background,
        observed: ObservedFields {
            n: r.opt("n", c.n.u64(i)),
            k: r.opt("k", c.k.u64(i)),
            r: r.opt("r", c.r.u64(i)),
            prefill_tokens_booked: r.opt("prefill_tokens_booked", c.prefill_tokens_booked.u64(i)),
            prefill_capacity_tokens: r
                .opt("prefill_capacity_tokens", c.prefill_capacity_tokens.u64(i)),
            p: r.opt("p", c.p.f64(i)),
            host_overlap_tokens: r.opt("host_overlap_tokens", c.host_overlap_tokens.u64(i)),
            disk_overlap_tokens: r.opt("disk_overlap_tokens", c.disk_overlap_tokens.u64(i)),
            effective_prefill_tokens: r.opt(
                "effective_prefill_tokens",
                c.effective_prefill_tokens.u64(i),
            ),
            decode_blocks: r.opt("decode_blocks", c.decode_blocks.u64(i)),
            kv_capacity_blocks: r.opt("kv_capacity_blocks", c.kv_capacity_blocks.u64(i)),
            pool_pending_requests: r.opt("pool_pending_requests", c.pool_pending_requests.u64(i)),
            pool_pending_tokens: r.opt("pool_pending_tokens", c.pool_pending_tokens.u64(i)),
            schedulable: r.opt("schedulable", c.schedulable.bool(i)),
            worker_id: r.opt("worker_id", c.worker_id.u64(i)),
            dp_rank: r.opt("dp_rank", c.dp_rank.u32(i)),
            endpoint: r.opt("endpoint", c.endpoint.str(i)),
            routing_group: r.opt("routing_group", c.routing_group.str(i)),
            observed_at_unix_ms: r.opt("observed_at_unix_ms", c.observed_at_unix_ms.f64(i)),
            query_duration_ms: r.opt("query_duration_ms", c.query_duration_ms.f64(i)),
        },
        sent_at_unix_ms: r.or("sent_at_unix_ms", c.sent_at_unix_ms.f64(i), 0.0),
        reserved_worker_id: r.opt("reserved_worker_id", c.reserved_worker_id.u64(i)),
        reserved_dp_rank: r.opt("reserved_dp_rank", c.reserved_dp_rank.u32(i)),
        advisory_worker_id: r.opt("advisory_worker_id", c.advisory_worker_id.u64(i)),
        advisory_dp_rank: r.opt("advisory_dp_rank", c.advisory_dp_rank.u32(i)),
        advisory_k: r.opt("advisory_k", c.advisory_k.u64(i)),
        advisory_r: r.opt("advisory_r", c.advisory_r.u64(i)),
        advisory_p: r.opt("advisory_p", c.advisory_p.f64(i)),
        pick_differs: r.opt("pick_differs", c.pick_differs.bool(i)),
        served_worker_id: r.opt("served_worker_id", c.served_worker_id.u64(i)),
        served_dp_rank: r.opt("served_dp_rank", c.served_dp_rank.u32(i)),
        ttft_ms: r.opt("ttft_ms", c.ttft_ms.f64(i)),
        server_ttft_ms: r.opt("server_ttft_ms", c.server_ttft_ms.f64(i)),
        client_server_gap_ms: r.opt("client_server_gap_ms", c.client_server_gap_ms.f64(i)),
        e2e_ms: r.opt("e2e_ms", c.e2e_ms.f64(i)),
        prompt_tokens: r.opt("prompt_tokens", c.prompt_tokens.u64(i)),
        output_tokens: r.opt("output_tokens", c.output_tokens.u64(i)),
        cached_tokens: r.opt("cached_tokens", c.cached_tokens.u64(i)),
        status: status.unwrap_or(Status::Error),
        error_class: r.parsed("error_class", c.error_class.text(i), parse_error_class),
        error_message: r.opt("error_message", c.error_message.str(i)),
        attempts: r.or("attempts", c.attempts.u32(i), 1),
    };
    match r.issue {
        Some(issue) => Err(issue),
        None => Ok(record),
    }
}

/// Refuses a frame without one of the columns every record needs.
fn check_required_columns(cols: &Cols<'_>, path: &Path) -> Result<(), RecordsError> {
    for name in REQUIRED_COLUMNS {
        if cols.get(name).is_none_or(Col::is_absent) {
            return Err(RecordsError::MissingColumn {
                path: path.to_path_buf(),
                column: (*name).to_string(),
            });
        }
    }
    Ok(())
}

/// Converts a flat frame into records, handing each row to `each` in row order: the 0-based
/// row index within the frame and the record or the row's issue. `row_offset` is added to
/// 0-based frame indices to give the 1-based row numbers used in issues (a frame may be a slice
/// of a file). Conversion stops early when `each` returns an error.
pub(crate) fn frame_to_records<F>(
    df: &DataFrame,
    path: &Path,
    row_offset: usize,
    mut each: F,
) -> Result<(), RecordsError>
where
    F: FnMut(usize, Result<Record, RowIssue>) -> Result<(), RecordsError>,
{
    let data = ColsData::from_df(df, path)?;
    let cols = data.view();
    check_required_columns(&cols, path)?;
    for i in 0..df.height() {
        let row = row_to_record(&cols, i).map_err(|(field, message)| RowIssue {
            path: path.to_path_buf(),
            row: row_offset + i + 1,
            field: field.to_string(),
            message,
        });
        each(i, row)?;
    }
    Ok(())
}

/// Column names in a frame that are not part of the record layout (reported, then ignored).
pub(crate) fn unknown_columns(df: &DataFrame) -> Vec<String> {
    df.get_column_names()
        .into_iter()
        .filter(|n| !ALL_COLUMNS.contains(&n.as_str()))
        .map(|n| n.to_string())
        .collect()
}

fn col<T, N>(name: &str, values: T) -> Column
where
    Series: NamedFrom<T, N>,
    N: ?Sized,
{
    Series::new(name.into(), values).into_column()
}

/// Builds the flat frame of `records` (one column per entry of [`ALL_COLUMNS`]).
pub fn records_to_frame(records: &[Record]) -> Result<DataFrame, PolarsError> {
    macro_rules! collect {
        ($f:expr) => {
            records.iter().map($f).collect::<Vec<_>>()
        };
    }
    let mut columns = vec![
        col("schema_version", collect!(|r| r.schema_version)),
        col("run_id", collect!(|r| r.run_id.as_str())),
        col("condition_id", collect!(|r| r.condition_id.as_str())),
        col("phase", collect!(|r| r.phase.as_str())),
        col("repeat", collect!(|r| r.repeat)),
        col("probe_id", collect!(|r| r.probe_id.as_str())),
        col("role", collect!(|r| r.role.as_str())),
        col("model", collect!(|r| r.model.as_str())),
        col("planned_n", collect!(|r| r.planned_n)),
        col("planned_f", collect!(|r| r.planned_f)),
        col(
            "background_prefill_requests",
            collect!(|r| r.background.prefill_requests),
        ),
        col(
            "background_prefill_prompt_tokens",
            collect!(|r| r.background.prefill_prompt_tokens),
        ),
        col(
            "background_decode_requests",
            collect!(|r| r.background.decode_requests),
        ),
        col(
            "background_decode_output_tokens",
            collect!(|r| r.background.decode_output_tokens),
        ),
        col(
            "background_decode_length",
            collect!(|r| r.background.decode_length.as_deref()),
        ),
        col(
            "background_busy_capable",
            collect!(|r| r.background.busy_capable),
        ),
        col(
            "background_target",
            collect!(|r| r.background.target.as_str()),
        ),
    ];
    columns.extend(observation_frame_columns(records));
    columns.extend([
        col("sent_at_unix_ms", collect!(|r| r.sent_at_unix_ms)),
        col("reserved_worker_id", collect!(|r| r.reserved_worker_id)),
        col("reserved_dp_rank", collect!(|r| r.reserved_dp_rank)),
        col("advisory_worker_id", collect!(|r| r.advisory_worker_id)),
        col("advisory_dp_rank", collect!(|r| r.advisory_dp_rank)),
        col("advisory_k", collect!(|r| r.advisory_k)),
        col("advisory_r", collect!(|r| r.advisory_r)),
        col("advisory_p", collect!(|r| r.advisory_p)),
        col("pick_differs", collect!(|r| r.pick_differs)),
        col("served_worker_id", collect!(|r| r.served_worker_id)),
        col("served_dp_rank", collect!(|r| r.served_dp_rank)),
        col("ttft_ms", collect!(|r| r.ttft_ms)),
        col("server_ttft_ms", collect!(|r| r.server_ttft_ms)),
        col("client_server_gap_ms", collect!(|r| r.client_server_gap_ms)),
        col("e2e_ms", collect!(|r| r.e2e_ms)),
        col("prompt_tokens", collect!(|r| r.prompt_tokens)),
        col("output_tokens", collect!(|r| r.output_tokens)),
        col("cached_tokens", collect!(|r| r.cached_tokens)),
        col("status", collect!(|r| status_str(r.status))),
        col(
            "error_class",
            collect!(|r| r.error_class.map(error_class_str)),
        ),
        col("error_message", collect!(|r| r.error_message.as_deref())),
        col("attempts", collect!(|r| r.attempts)),
    ]);
    DataFrame::new(records.len(), columns)
}

/// The columns of the records' embedded [`ObservedFields`], in their order.
fn observation_frame_columns(records: &[Record]) -> Vec<Column> {
    macro_rules! copied {
        ($($f:ident),*) => {
            [$(col(stringify!($f), records.iter().map(|r| r.observed.$f).collect::<Vec<_>>())),*]
        };
    }
    macro_rules! text {
        ($($f:ident),*) => {
            [$(col(
                stringify!($f),
                records.iter().map(|r| r.observed.$f.as_deref()).collect::<Vec<_>>(),
            )),*]
        };
    }
    let mut columns = Vec::with_capacity(20);
    columns.extend(copied!(
        n,
        k,
        r,
        prefill_tokens_booked,
        prefill_capacity_tokens,
        p,
        host_overlap_tokens,
        disk_overlap_tokens,
        effective_prefill_tokens,
        decode_blocks,
        kv_capacity_blocks,
        pool_pending_requests,
        pool_pending_tokens,
        schedulable,
        worker_id,
        dp_rank
    ));
    columns.extend(text!(endpoint, routing_group));
    columns.extend(copied!(observed_at_unix_ms, query_duration_ms));
    columns
}

fn status_str(s: Status) -> &'static str {
    match s {
        Status::Ok => "ok",
        Status::Error => "error",
    }
}

fn error_class_str(e: ErrorClass) -> &'static str {
    match e {
        ErrorClass::Connect => "connect",
        ErrorClass::Timeout => "timeout",
        ErrorClass::Http4xx => "http4xx",
        ErrorClass::Http5xx => "http5xx",
        ErrorClass::StreamError => "stream_error",
        ErrorClass::StreamDropped => "stream_dropped",
        ErrorClass::NoContent => "no_content",
        ErrorClass::Reservation => "reservation",
        ErrorClass::Observation => "observation",
        ErrorClass::Cancelled => "cancelled",
        ErrorClass::Protocol => "protocol",
        ErrorClass::Configuration => "configuration",
        ErrorClass::ServedElsewhere => "served_elsewhere",
    }
}

/// The columns the calibration tools read (see [`crate::ProbeTable`]), in the record layout's
/// reading order: a Parquet file is read with only these projected.
pub const PROBE_TABLE_COLUMNS: &[&str] = &[
    "schema_version",
    "run_id",
    "condition_id",
    "phase",
    "repeat",
    "probe_id",
    "role",
    "model",
    "planned_n",
    "planned_f",
    "background_decode_length",
    "status",
    "n",
    "k",
    "r",
    "prefill_tokens_booked",
    "prefill_capacity_tokens",
    "schedulable",
    "observed_at_unix_ms",
    "sent_at_unix_ms",
    "reserved_worker_id",
    "reserved_dp_rank",
    "pick_differs",
    "served_worker_id",
    "served_dp_rank",
    "ttft_ms",
    "client_server_gap_ms",
    "attempts",
];

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

/// Position of a field in [`row_to_record`]'s reading order (ties between problems of one row
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

/// A text column parsed into an enum with `parse`.
fn parsed_column<T>(
    c: &Col<'_>,
    height: usize,
    field: &'static str,
    issues: &mut Vec<(usize, u16, &'static str, String)>,
    parse: fn(&str) -> Result<T, String>,
) -> Vec<Option<T>> {
    let values = column(height, field, issues, |i| match c.text(i)? {
        None => Ok(None),
        Some(s) => parse(s.trim()).map(Some),
    });
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
    pc.phase = parsed_column(&cols.phase, h, "phase", is, parse_phase);
    let repeat = column(h, "repeat", is, |i| cols.repeat.u32(i));
    let already = flagged(h, is, "repeat");
    pc.repeat = required(repeat, "repeat", is, &already)
        .into_iter()
        .map(Option::unwrap_or_default)
        .collect();
    pc.probe_id = required_text(&cols.probe_id, h, "probe_id", is);
    pc.role = parsed_column(&cols.role, h, "role", is, parse_role);
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
    pc.status = parsed_column(&cols.status, h, "status", is, parse_status);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_class_names_match_serde() {
        for e in [
            ErrorClass::Connect,
            ErrorClass::Timeout,
            ErrorClass::Http4xx,
            ErrorClass::Http5xx,
            ErrorClass::StreamError,
            ErrorClass::StreamDropped,
            ErrorClass::NoContent,
            ErrorClass::Reservation,
            ErrorClass::Observation,
            ErrorClass::Cancelled,
            ErrorClass::Protocol,
        ] {
            let json = serde_json::to_value(e).unwrap();
            assert_eq!(json.as_str().unwrap(), error_class_str(e));
            assert_eq!(parse_error_class(error_class_str(e)).unwrap(), e);
        }
    }

    fn convert(df: &DataFrame, path: &Path) -> Vec<Result<Record, RowIssue>> {
        let mut rows = Vec::new();
        frame_to_records(df, path, 0, |_, r| {
            rows.push(r);
            Ok(())
        })
        .unwrap();
        rows
    }

    #[test]
    fn reserved_worker_columns_are_optional() {
        let mut rec = crate::synth::template_record();
        rec.reserved_worker_id = Some(u64::MAX - 7);
        rec.reserved_dp_rank = Some(3);
        let path = Path::new("mem.parquet");
        // With the columns: the values come back exactly (u64 above 2^53 included).
        let df = records_to_frame(std::slice::from_ref(&rec)).unwrap();
        let rows = convert(&df, path);
        assert_eq!(rows, vec![Ok(rec.clone())]);
        // Without them (a file written before the fields existed): `None`, not an error.
        let old = df
            .drop("reserved_worker_id")
            .unwrap()
            .drop("reserved_dp_rank")
            .unwrap();
        let rows = convert(&old, path);
        let back = rows[0].as_ref().unwrap();
        assert_eq!(back.reserved_worker_id, None);
        assert_eq!(back.reserved_dp_rank, None);
        assert_eq!(back.served_worker_id, rec.served_worker_id);
        assert!(unknown_columns(&old).is_empty());
    }

    #[test]
    fn counts_refuse_fractions_negatives_and_text() {
        assert_eq!(parse_u64("12"), Ok(12));
        assert_eq!(parse_u64("12.0"), Ok(12));
        assert!(parse_u64("12.5").unwrap_err().contains("whole"));
        assert!(parse_u64("-3").unwrap_err().contains("≥ 0"));
        assert!(parse_u64("abc").unwrap_err().contains("\"abc\""));
        assert!(float_to_u64(1e17).unwrap_err().contains("float"));
        assert!(parse_f64("x").is_err());
        assert!(parse_f64("NaN").unwrap().is_nan());
    }
}
