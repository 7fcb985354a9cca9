//! The probe table: the records the calibration tools read, as columns.
//!
//! `sy-fit`, `sy-margin` and `sy-select` need about a third of a record's fields. A
//! [`ProbeTable`] holds just those, one vector per field ([`crate::PROBE_TABLE_COLUMNS`]); text
//! that repeats (run, condition, model, background generation length) is interned once and
//! rows carry a `u32` index. A Parquet file is read with only these columns projected, in row
//! slices. A slice in the types sy writes is read straight from its Arrow arrays (module `native`);
//! any other slice, or one with any problem, is converted a column at a time with the same cell
//! parsing and the same semantic checks as [`crate::load_records`] ([`crate::validate_record`]),
//! so a bad row gets the same file / row / field message either way. Probes are paired once, by
//! the same rule ([`crate::pair_indices`]), and kept as row indices ([`ProbeTable::pairs`]).
//!
//! Columns hold plain values ([`column::Column`]): an optional value is its slot (0 when absent)
//! plus a bit of the row's `present` word. So a loaded table can be written as it is to the
//! run directory's probe-table cache and mapped back by the next tool without decoding
//! ([`ProbeTable::load_cached`], module `cache`).
//!
//! Memory: about 137 bytes per record (the columns, the probe id text and the row origin), e.g.
//! ~137 MB for a million records, plus two Parquet slices (the one being converted and the next,
//! which a second thread decodes meanwhile) and the parts of a slice converted on other cores
//! (about 137 bytes per row of each, appended to the table when the slice is done). A table
//! mapped from its cache holds file-backed pages instead, which the kernel may drop and read
//! again under memory pressure; so does a table loaded from Parquet files through
//! [`ProbeTable::load_cached`], which is built in the cache file it will be (module `cache`,
//! `filed_table`): only the probe ids (≈ 7 bytes a record) and the pairs stay in memory. At
//! 10 M records `sy-fit`'s anonymous memory peaked at 0.83 GB against 2.11 GB when the table
//! was in memory, and it fitted within a 1.2 GiB memory limit where the in-memory table was
//! killed.

/// Calls `$apply!(args; column, column, …)` with every [`ProbeTable`] column that holds one
/// value per row (`probe_text`, `probe_end` and `pairs` have other lengths): the one list that
/// reserving, dropping rows and the cache's writer and reader go through, in the cache's file
/// order.
macro_rules! row_columns {
    ($apply:ident!($($args:tt)*)) => {
        $apply!($($args)*;
            condition, phase, role, status, repeat, model, decode_length, planned_n, planned_f,
            present, n, k, r, prefill_tokens_booked, prefill_capacity_tokens,
            observed_at_unix_ms, sent_at_unix_ms, ttft_ms, client_server_gap_ms, attempts, pick,
            origins)
    };
}

mod build;
mod cache;
mod cache_error;
mod column;
mod conditions;
mod interner;
mod loading;
mod native;
mod read;
mod row_values;
mod rows;

pub use conditions::ConditionIndex;
pub use loading::StagedCache;
pub use rows::{ProbePair, Row};

use crate::record::Model;
use std::fs::File;
use std::path::{Path, PathBuf};

use polars::prelude::*;
use rustc_hash::FxHashMap;
use sy_selector::Observation;

use crate::codec::Format;
use crate::codec::layout::{PROBE_TABLE_COLUMNS, check_parquet_types, unknown_columns};
use crate::codec::probe_columns::{ProbeColumns, with_probe_columns};
use crate::error::{RecordsError, RowIssue};
use crate::load::{
    CheckedFields, FileSummary, LoadOptions, LoadedRecords, PARQUET_SLICE_ROWS, PickSummary,
    RowOrigin, count_per_file, describe_origin, drop_mask, no_valid_records, pair_row_issue,
    partner_issue, read_csv_frame, read_jsonl_into, resolve_inputs, sort_by_origin, thread_parts,
    torn_note, validate_fields,
};
use crate::pairing::{PairKeys, check_pairing};
use crate::record::{Phase, Record, Status};
use crate::splits::{Split, SplitTable};
use column::Column;
use conditions::ConditionMark;
use interner::Interner;
use native::NativeFrame;
use row_values::RowValues;

/// `decode_length` of a row without one.
const NO_TEXT: u32 = u32::MAX;

/// The records the calibration tools read, as columns (see the module docs).
#[derive(Debug, Clone, Default)]
pub struct ProbeTable {
    conditions: ConditionIndex,
    models: Interner,
    decode_lengths: Interner,
    /// Every row's probe id, one after another (UTF-8); row `i`'s ends at `probe_end[i]`.
    probe_text: Column<u8>,
    probe_end: Column<u64>,
    condition: Column<u32>,
    /// [`Phase`], [`Model`] and [`Status`] as codes (see [`codes`]).
    phase: Column<u8>,
    role: Column<u8>,
    status: Column<u8>,
    repeat: Column<u32>,
    model: Column<u32>,
    decode_length: Column<u32>,
    planned_n: Column<u64>,
    planned_f: Column<f64>,
    /// Which optional values a row has, and `schedulable` (bits of [`present`]); an absent
    /// value's slot holds 0.
    present: Column<u16>,
    n: Column<u64>,
    k: Column<u64>,
    r: Column<u64>,
    prefill_tokens_booked: Column<u64>,
    prefill_capacity_tokens: Column<u64>,
    observed_at_unix_ms: Column<f64>,
    sent_at_unix_ms: Column<f64>,
    ttft_ms: Column<f64>,
    client_server_gap_ms: Column<f64>,
    /// Attempts made for the record's unit (1 = no retry).
    attempts: Column<u32>,
    /// 0 no reservation; 1 reserved, `pick_differs` unknown; 2 / 3 reserved, differs false / true.
    pick: Column<u8>,
    origins: Column<RowOrigin>,
    files: Vec<FileSummary>,
    skipped: Vec<RowIssue>,
    /// (efficient row, capable row) of each load-phase probe.
    pairs: Column<[u32; 2]>,
    /// The SHA-256 of each file in `files`.
    digests: Vec<String>,
    /// Where and under which key [`ProbeTable::save_cache`] writes this table's cache.
    unsaved_cache: Option<(PathBuf, cache::CacheKey)>,
    /// The staged cache file this table's columns are being built in, if they are.
    filing: cache::FilingSlot,
}

/// The bits of [`ProbeTable`]'s `present` column.
mod present {
    pub const N: u16 = 1;
    pub const K: u16 = 1 << 1;
    pub const R: u16 = 1 << 2;
    pub const PREFILL_TOKENS_BOOKED: u16 = 1 << 3;
    pub const PREFILL_CAPACITY_TOKENS: u16 = 1 << 4;
    pub const OBSERVED_AT: u16 = 1 << 5;
    pub const TTFT: u16 = 1 << 6;
    pub const CLIENT_SERVER_GAP: u16 = 1 << 7;
    pub const SCHEDULABLE: u16 = 1 << 8;
    /// `schedulable` is true (with [`SCHEDULABLE`]).
    pub const SCHEDULABLE_TRUE: u16 = 1 << 9;
    /// Every bit a row may carry.
    pub const ALL: u16 = (1 << 10) - 1;
}

/// The codes of [`ProbeTable`]'s `phase`, `role` and `status` columns.
mod codes {
    use crate::record::{Model, Phase, Status};

    pub fn phase(p: Phase) -> u8 {
        match p {
            Phase::Qgrid => 0,
            Phase::Load => 1,
        }
    }
    pub fn to_phase(c: u8) -> Phase {
        if c == 1 { Phase::Load } else { Phase::Qgrid }
    }
    pub fn role(m: Model) -> u8 {
        match m {
            Model::Efficient => 0,
            Model::Capable => 1,
        }
    }
    pub fn to_role(c: u8) -> Model {
        if c == 1 {
            Model::Capable
        } else {
            Model::Efficient
        }
    }
    pub fn status(s: Status) -> u8 {
        match s {
            Status::Ok => 0,
            Status::Error => 1,
        }
    }
    pub fn to_status(c: u8) -> Status {
        if c == 1 { Status::Error } else { Status::Ok }
    }
}

impl ProbeTable {
    /// Number of rows.
    pub fn len(&self) -> usize {
        self.phase.len()
    }

    pub fn is_empty(&self) -> bool {
        self.phase.is_empty()
    }

    /// Row `i`.
    pub fn row(&self, i: usize) -> Row<'_> {
        Row { table: self, i }
    }

    /// Every row, in file order.
    pub fn rows(&self) -> impl ExactSizeIterator<Item = Row<'_>> + '_ {
        (0..self.len()).map(move |i| Row { table: self, i })
    }

    /// The load-phase probes, in order of first appearance.
    pub fn pairs(&self) -> impl ExactSizeIterator<Item = ProbePair<'_>> + '_ {
        self.pairs.iter().map(move |&rows| self.probe_pair(rows))
    }

    /// The `i`-th load-phase probe of [`ProbeTable::pairs`] (`None` past the last).
    pub fn pair(&self, i: usize) -> Option<ProbePair<'_>> {
        self.pairs.get(i).map(|&rows| self.probe_pair(rows))
    }

    /// The probe of an entry of `pairs`: its (efficient, capable) rows.
    fn probe_pair(&self, [e, c]: [u32; 2]) -> ProbePair<'_> {
        ProbePair {
            efficient: self.row(e as usize),
            capable: self.row(c as usize),
        }
    }

    /// Number of load-phase probes.
    pub fn pair_count(&self) -> usize {
        self.pairs.len()
    }

    /// The files read, in argument order.
    pub fn files(&self) -> &[FileSummary] {
        &self.files
    }

    /// Rows skipped as invalid (empty unless `skip_invalid`).
    pub fn skipped(&self) -> &[RowIssue] {
        &self.skipped
    }

    /// Skipped rows counted per field, for summaries.
    pub fn skipped_by_field(&self) -> std::collections::BTreeMap<String, usize> {
        let mut m = std::collections::BTreeMap::new();
        for s in &self.skipped {
            *m.entry(s.field.clone()).or_insert(0) += 1;
        }
        m
    }

    /// How the observations relate to the advisory pick (see [`PickSummary`]).
    pub fn pick_summary(&self) -> PickSummary {
        let mut s = PickSummary::default();
        for &p in self.pick.iter() {
            let differs = match p {
                2 => Some(false),
                3 => Some(true),
                _ => None,
            };
            s.count(p > 0, differs);
        }
        s
    }

    /// The file and row of row `i`, for messages.
    pub fn origin_of(&self, i: usize) -> Option<(&Path, usize)> {
        let o = self.origins.get(i)?;
        let f = self.files.get(o.file as usize)?;
        Some((f.path.as_path(), o.row as usize))
    }

    /// Number of distinct `(run, condition)`s.
    pub fn condition_count(&self) -> usize {
        self.conditions.count()
    }

    /// `(run_id, condition_id)` of condition index `c`.
    pub fn condition_key(&self, c: u32) -> (&str, &str) {
        self.conditions.key(c)
    }

    /// The conditions that have load-phase rows, in order of first appearance.
    pub fn load_conditions(&self) -> impl Iterator<Item = (&str, &str)> + '_ {
        self.conditions.load_conditions()
    }

    /// The split of every condition (indexed by condition index); `None` for conditions the
    /// table does not list (Q-grid conditions among them).
    pub fn condition_splits(&self, splits: &SplitTable) -> Vec<Option<Split>> {
        self.conditions.splits(splits)
    }

    /// The table's conditions.
    pub fn conditions(&self) -> &ConditionIndex {
        &self.conditions
    }

    /// The table's conditions, the rows dropped: what a caller still needs once it has read
    /// every row (split tables and condition splits are made from it alone).
    pub fn into_conditions(self) -> ConditionIndex {
        self.conditions
    }

    fn run_id_of(&self, i: usize) -> &str {
        self.conditions.key(self.condition[i]).0
    }

    fn condition_id_of(&self, i: usize) -> &str {
        self.conditions.key(self.condition[i]).1
    }

    fn probe_id_of(&self, i: usize) -> &str {
        let end = |i: usize| usize::try_from(self.probe_end[i]).unwrap_or(usize::MAX);
        let start = if i == 0 { 0 } else { end(i - 1) };
        self.probe_text
            .get(start..end(i))
            .and_then(|b| std::str::from_utf8(b).ok())
            .unwrap_or_default()
    }
}
