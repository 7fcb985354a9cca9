//! The flat column layout of records in Parquet and CSV: one list of columns ([`record_layout`])
//! that every use expands, and the subsets the loaders need.
//!
//! A [`Record`] is nested (`background` is a struct, the observation is embedded); in columnar
//! files it is flattened: the background's fields take a `background_` prefix
//! (`background_prefill_requests`, ...), every other column has the record's field name. JSONL
//! keeps the nested shape (see [`crate::load`]).

use std::path::Path;

use polars::prelude::*;

use crate::codec::cells::{Col, ColData};
use crate::codec::values::WriteCell;
use crate::error::RecordsError;
use crate::record::Record;

/// Calls `$then!` with the record's columns, in file order, grouped as the [`Record`] nests
/// them: each column's name, the field it holds and how a row reads it —
/// - `req(fallback)`: the value must be there (`missing value` otherwise; the fallback only
///   fills a row that is refused);
/// - `or(default)`: an absent value takes the default;
/// - `opt`: the field is an `Option`, absent is `None`;
/// - `version`: the schema version (absent: this tool's; newer than this tool's: refused).
///
/// The column list ([`ALL_COLUMNS`], the input columns [`Cols`]), reading a row
/// (`super::rows::row_to_record`) and writing a frame ([`super::rows::records_to_frame`]) all
/// expand this one list.
macro_rules! record_layout {
    ($then:ident) => {
        $then! {
            record {
                schema_version: version,
                run_id: req(String::new()),
                condition_id: req(String::new()),
                phase: req(Phase::Load),
                repeat: req(0),
                probe_id: req(String::new()),
                role: req(Model::Efficient),
                model: req(String::new()),
                planned_n: or(0),
                planned_f: or(0.0),
            }
            background {
                background_prefill_requests => prefill_requests: or(0),
                background_prefill_prompt_tokens => prefill_prompt_tokens: or(0),
                background_decode_requests => decode_requests: or(0),
                background_decode_output_tokens => decode_output_tokens: or(0),
                background_decode_length => decode_length: opt,
                background_busy_capable => busy_capable: or(false),
                background_target => target: or(String::new()),
            }
            observed {
                n: opt,
                k: opt,
                r: opt,
                prefill_tokens_booked: opt,
                prefill_capacity_tokens: opt,
                p: opt,
                host_overlap_tokens: opt,
                disk_overlap_tokens: opt,
                effective_prefill_tokens: opt,
                decode_blocks: opt,
                kv_capacity_blocks: opt,
                pool_pending_requests: opt,
                pool_pending_tokens: opt,
                schedulable: opt,
                worker_id: opt,
                dp_rank: opt,
                endpoint: opt,
                routing_group: opt,
                observed_at_unix_ms: opt,
                query_duration_ms: opt,
            }
            record {
                sent_at_unix_ms: or(0.0),
                reserved_worker_id: opt,
                reserved_dp_rank: opt,
                advisory_worker_id: opt,
                advisory_dp_rank: opt,
                advisory_k: opt,
                advisory_r: opt,
                advisory_p: opt,
                pick_differs: opt,
                served_worker_id: opt,
                served_dp_rank: opt,
                ttft_ms: opt,
                server_ttft_ms: opt,
                client_server_gap_ms: opt,
                e2e_ms: opt,
                prompt_tokens: opt,
                output_tokens: opt,
                cached_tokens: opt,
                status: req(Status::Error),
                error_class: opt,
                error_message: opt,
                attempts: or(1),
            }
        }
    };
}
pub(crate) use record_layout;

/// Defines [`ALL_COLUMNS`], the input columns ([`ColsData`], [`Cols`]) and
/// [`column_is_text`] from the [`record_layout`].
macro_rules! define_columns {
    (
        record { $($a:ident : $ap:ident $(($ad:expr))?),* $(,)? }
        background { $($bc:ident => $bf:ident : $bp:ident $(($bd:expr))?),* $(,)? }
        observed { $($o:ident : $op:ident),* $(,)? }
        record { $($z:ident : $zp:ident $(($zd:expr))?),* $(,)? }
    ) => {
        /// Every column of the flat layout, in file order.
        pub const ALL_COLUMNS: &[&str] = &[
            $(stringify!($a),)* $(stringify!($bc),)* $(stringify!($o),)* $(stringify!($z),)*
        ];

        /// The columns of one input frame, owned.
        pub(crate) struct ColsData {
            $($a: ColData,)* $($bc: ColData,)* $($o: ColData,)* $($z: ColData,)*
        }

        /// The columns of one input frame, materialised for row access.
        pub(crate) struct Cols<'a> {
            $(pub $a: Col<'a>,)* $(pub $bc: Col<'a>,)* $(pub $o: Col<'a>,)* $(pub $z: Col<'a>,)*
        }

        impl ColsData {
            pub(crate) fn from_df(df: &DataFrame, path: &Path) -> Result<ColsData, RecordsError> {
                Ok(ColsData {
                    $($a: ColData::from_df(df, stringify!($a), path)?,)*
                    $($bc: ColData::from_df(df, stringify!($bc), path)?,)*
                    $($o: ColData::from_df(df, stringify!($o), path)?,)*
                    $($z: ColData::from_df(df, stringify!($z), path)?,)*
                })
            }

            pub(crate) fn view(&self) -> Cols<'_> {
                Cols {
                    $($a: self.$a.view(),)* $($bc: self.$bc.view(),)*
                    $($o: self.$o.view(),)* $($z: self.$z.view(),)*
                }
            }
        }

        impl Cols<'_> {
            /// The column `name` of the layout (`None` for a name outside it).
            pub(crate) fn get(&self, name: &str) -> Option<&Col<'_>> {
                match name {
                    $(stringify!($a) => Some(&self.$a),)*
                    $(stringify!($bc) => Some(&self.$bc),)*
                    $(stringify!($o) => Some(&self.$o),)*
                    $(stringify!($z) => Some(&self.$z),)*
                    _ => None,
                }
            }
        }

        /// Whether the column `name` holds text (`Some(false)`: numbers or booleans; `None`: not a
        /// column of the layout), by the type of the field it holds.
        pub(crate) fn column_is_text(name: &str) -> Option<bool> {
            match name {
                $(stringify!($a) => Some(is_text(|r: &Record| &r.$a)),)*
                $(stringify!($bc) => Some(is_text(|r: &Record| &r.background.$bf)),)*
                $(stringify!($o) => Some(is_text(|r: &Record| &r.observed.$o)),)*
                $(stringify!($z) => Some(is_text(|r: &Record| &r.$z)),)*
                _ => None,
            }
        }
    };
}

record_layout!(define_columns);

/// Whether the field `_field` selects is written as text.
fn is_text<T: WriteCell>(_field: fn(&Record) -> &T) -> bool {
    T::TEXT
}

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

/// The columns the calibration tools read (see [`crate::ProbeTable`]), in file order: a Parquet
/// file is read with only these projected.
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
    "status",
    "attempts",
];

/// Refuses a Parquet file (a typed format) whose numeric or boolean column is stored as text:
/// numbers stored as strings are a writer's mistake that a text format (CSV) cannot avoid but a
/// typed one can, and reading them would hide it.
pub(crate) fn check_parquet_types(path: &Path, schema: &ArrowSchema) -> Result<(), RecordsError> {
    for (name, field) in schema.iter() {
        let name = name.as_str();
        if column_is_text(name) != Some(false) {
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

/// Column names in a frame that are not part of the record layout (reported, then ignored).
pub(crate) fn unknown_columns<'a>(names: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    names
        .into_iter()
        .filter(|n| !ALL_COLUMNS.contains(n))
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_columns_are_the_text_fields() {
        let text: Vec<&str> = ALL_COLUMNS
            .iter()
            .copied()
            .filter(|c| column_is_text(c) == Some(true))
            .collect();
        assert_eq!(
            text,
            [
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
            ]
        );
        assert_eq!(column_is_text("ttft_ms"), Some(false));
        assert_eq!(column_is_text("no_such_column"), None);
    }

    #[test]
    fn subsets_are_layout_columns_in_file_order() {
        for subset in [REQUIRED_COLUMNS, PROBE_TABLE_COLUMNS] {
            let positions: Vec<usize> = subset
                .iter()
                .map(|c| ALL_COLUMNS.iter().position(|a| a == c).unwrap())
                .collect();
            assert!(positions.is_sorted(), "{subset:?}");
        }
        assert_eq!(
            unknown_columns(["run_id", "extra", "ttft_ms"]),
            vec!["extra".to_string()]
        );
    }
}
