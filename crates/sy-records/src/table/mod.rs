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

mod cache;
mod column;
mod native;

use crate::record::Model;
use std::fs::File;
use std::path::{Path, PathBuf};

use polars::prelude::*;
use rustc_hash::FxHashMap;
use sy_selector::Observation;

use crate::error::{RecordsError, RowIssue};
use crate::frame::{PROBE_TABLE_COLUMNS, ProbeColumns, with_probe_columns};
use crate::load::{
    CheckedFields, FileSummary, Format, LoadOptions, LoadedRecords, PARQUET_SLICE_ROWS,
    PickSummary, RowOrigin, count_per_file, describe_origin, drop_mask, no_valid_records,
    pair_row_issue, partner_issue, read_csv_frame, read_jsonl_into, resolve_inputs, sort_by_origin,
    thread_parts, torn_note, validate_fields,
};
use crate::pairing::{PairKeys, check_pairing};
use crate::record::{Phase, Record, Status};
use crate::splits::{Split, SplitTable};
use column::Column;
use native::NativeFrame;

/// `decode_length` of a row without one.
const NO_TEXT: u32 = u32::MAX;

/// Interned text: each distinct value once, rows refer to it by index.
#[derive(Debug, Clone, Default)]
struct Interner {
    values: Vec<String>,
    index: FxHashMap<String, u32>,
}

impl Interner {
    fn intern(&mut self, s: &str) -> u32 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = u32::try_from(self.values.len()).unwrap_or(u32::MAX);
        self.values.push(s.to_string());
        self.index.insert(s.to_string(), i);
        i
    }

    fn get(&self, i: u32) -> &str {
        self.values.get(i as usize).map_or("", String::as_str)
    }

    fn len(&self) -> usize {
        self.values.len()
    }

    /// Forgets every value interned after the first `len`.
    fn truncate(&mut self, len: usize) {
        for v in self.values.drain(len.min(self.values.len())..) {
            self.index.remove(&v);
        }
    }

    /// The interner of distinct `values` (as a cache holds them).
    fn from_values(values: Vec<String>) -> Self {
        let index = values.iter().cloned().zip(0..).collect();
        Interner { values, index }
    }
}

/// The distinct `(run, condition)`s of a table, by condition index (in order of first
/// appearance), and which have load-phase rows.
#[derive(Debug, Clone, Default)]
pub struct ConditionIndex {
    runs: Interner,
    /// (run index, condition id) by condition index.
    conditions: Vec<(u32, String)>,
    /// Per run index, condition id → condition index.
    index: Vec<FxHashMap<String, u32>>,
    is_load: Vec<bool>,
}

impl ConditionIndex {
    /// Number of distinct `(run, condition)`s.
    pub fn count(&self) -> usize {
        self.conditions.len()
    }

    /// `(run_id, condition_id)` of condition index `c` (`("", "")` past the end).
    pub fn key(&self, c: u32) -> (&str, &str) {
        match self.conditions.get(c as usize) {
            Some((run, cond)) => (self.runs.get(*run), cond.as_str()),
            None => ("", ""),
        }
    }

    /// Whether condition `c` has load-phase rows (false past the end).
    pub fn is_load(&self, c: u32) -> bool {
        self.is_load.get(c as usize).copied().unwrap_or(false)
    }

    /// The conditions that have load-phase rows, in order of first appearance.
    pub fn load_conditions(&self) -> impl Iterator<Item = (&str, &str)> + '_ {
        (0..self.conditions.len())
            .filter(|&c| self.is_load[c])
            .map(|c| self.key(c as u32))
    }

    /// The split of every condition (indexed by condition index); `None` for conditions
    /// `splits` does not list (Q-grid conditions among them).
    pub fn splits(&self, splits: &SplitTable) -> Vec<Option<Split>> {
        (0..self.conditions.len())
            .map(|c| {
                let (run, cond) = self.key(c as u32);
                splits.split_of(run, cond)
            })
            .collect()
    }

    /// The index of `(run_id, condition_id)`, added when new; marked as a load-phase
    /// condition when `load`.
    fn intern(&mut self, run_id: &str, condition_id: &str, load: bool) -> u32 {
        let run = self.runs.intern(run_id);
        if self.index.len() <= run as usize {
            self.index.resize_with(run as usize + 1, Default::default);
        }
        let map = &mut self.index[run as usize];
        let c = match map.get(condition_id) {
            Some(&c) => c,
            None => {
                let c = u32::try_from(self.conditions.len()).unwrap_or(u32::MAX);
                self.conditions.push((run, condition_id.to_string()));
                self.is_load.push(false);
                map.insert(condition_id.to_string(), c);
                c
            }
        };
        if load {
            self.mark_load(c);
        }
        c
    }

    /// (run index, condition id, has load-phase rows) by condition index (what a cache holds).
    fn entries(&self) -> Vec<(u32, String, bool)> {
        self.conditions
            .iter()
            .zip(&self.is_load)
            .map(|((run, cond), &load)| (*run, cond.clone(), load))
            .collect()
    }

    /// The index of `runs` and [`ConditionIndex::entries`]; refuses a run index out of range or
    /// a condition listed twice.
    fn from_entries(runs: Vec<String>, entries: Vec<(u32, String, bool)>) -> Result<Self, String> {
        let mut index = ConditionIndex {
            runs: Interner::from_values(runs),
            ..ConditionIndex::default()
        };
        for (run, condition, load) in entries {
            let name = index.runs.values.get(run as usize).cloned();
            let Some(name) = name else {
                return Err(format!(
                    "condition {condition}: run index {run} out of range"
                ));
            };
            let before = index.conditions.len();
            let c = index.intern(&name, &condition, load) as usize;
            if c != before || index.conditions.get(c).map(|e| e.0) != Some(run) {
                return Err(format!("condition {condition} of run {name} listed twice"));
            }
        }
        Ok(index)
    }

    fn mark_load(&mut self, c: u32) {
        if let Some(l) = self.is_load.get_mut(c as usize) {
            *l = true;
        }
    }

    /// What [`ConditionIndex::restore`] goes back to.
    fn mark(&self) -> ConditionMark {
        ConditionMark {
            runs: self.runs.len(),
            is_load: self.is_load.clone(),
        }
    }

    /// The index as it was at `mark`: conditions and runs added since are forgotten, and the
    /// load flags are those of then.
    fn restore(&mut self, mark: ConditionMark) {
        let kept = mark.is_load.len().min(self.conditions.len());
        for (run, condition) in self.conditions.drain(kept..) {
            if let Some(map) = self.index.get_mut(run as usize) {
                map.remove(&condition);
            }
        }
        self.is_load = mark.is_load;
        self.runs.truncate(mark.runs);
        self.index.truncate(mark.runs);
    }
}

/// A [`ConditionIndex`] as it was (see [`ConditionIndex::mark`]).
struct ConditionMark {
    runs: usize,
    is_load: Vec<bool>,
}

/// A [`ProbeTable`]'s rows and interned text as they were before a frame was appended (see
/// [`ProbeTable::mark`]).
struct TableMark {
    rows: usize,
    probe_text: usize,
    conditions: ConditionMark,
    models: usize,
    decode_lengths: usize,
}

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

/// One row of a [`ProbeTable`] (one candidate of one probe).
#[derive(Debug, Clone, Copy)]
pub struct Row<'a> {
    table: &'a ProbeTable,
    i: usize,
}

/// The two candidates of one load-phase probe.
#[derive(Debug, Clone, Copy)]
pub struct ProbePair<'a> {
    pub efficient: Row<'a>,
    pub capable: Row<'a>,
}

impl<'a> Row<'a> {
    /// The row's index in the table.
    pub fn index(&self) -> usize {
        self.i
    }
    pub fn run_id(&self) -> &'a str {
        self.table.run_id_of(self.i)
    }
    pub fn condition_id(&self) -> &'a str {
        self.table.condition_id_of(self.i)
    }
    /// The condition's index in the table (the same for every row of a `(run, condition)`).
    pub fn condition(&self) -> u32 {
        self.table.condition[self.i]
    }
    pub fn probe_id(&self) -> &'a str {
        self.table.probe_id_of(self.i)
    }
    pub fn phase(&self) -> Phase {
        codes::to_phase(self.table.phase[self.i])
    }
    pub fn role(&self) -> Model {
        codes::to_role(self.table.role[self.i])
    }
    pub fn status(&self) -> Status {
        codes::to_status(self.table.status[self.i])
    }
    pub fn repeat(&self) -> u32 {
        self.table.repeat[self.i]
    }
    pub fn model(&self) -> &'a str {
        self.table.models.get(self.table.model[self.i])
    }
    pub fn planned_n(&self) -> u64 {
        self.table.planned_n[self.i]
    }
    pub fn planned_f(&self) -> f64 {
        self.table.planned_f[self.i]
    }
    pub fn n(&self) -> Option<u64> {
        self.table.value(&self.table.n, present::N, self.i)
    }
    pub fn k(&self) -> Option<u64> {
        self.table.value(&self.table.k, present::K, self.i)
    }
    pub fn ttft_ms(&self) -> Option<f64> {
        self.table.value(&self.table.ttft_ms, present::TTFT, self.i)
    }
    /// When the probe was sent, milliseconds since the Unix epoch.
    pub fn sent_at_unix_ms(&self) -> f64 {
        self.table.sent_at_unix_ms[self.i]
    }
    /// Attempts made for the record's unit (1 = no retry; the retried attempts' own records are
    /// in the run directory's `attempts.jsonl`).
    pub fn attempts(&self) -> u32 {
        self.table.attempts[self.i]
    }
    pub fn client_server_gap_ms(&self) -> Option<f64> {
        let t = self.table;
        t.value(&t.client_server_gap_ms, present::CLIENT_SERVER_GAP, self.i)
    }
    /// The background's `decode_length` (`"short"` / `"long"`), if any.
    pub fn decode_length(&self) -> Option<&'a str> {
        match self.table.decode_length[self.i] {
            NO_TEXT => None,
            d => Some(self.table.decode_lengths.get(d)),
        }
    }
    /// The rule's inputs (see [`Record::rule_observation`], the same conversion).
    #[inline]
    pub fn rule_observation(&self) -> Observation {
        let t = self.table;
        let i = self.i;
        let bits = t.present[i];
        let at = |column: &[u64], bit: u16| (bits & bit != 0).then(|| column[i]);
        let schedulable =
            (bits & present::SCHEDULABLE != 0).then_some(bits & present::SCHEDULABLE_TRUE != 0);
        sy_wire::observed::rule_observation(
            [
                at(&t.n, present::N),
                at(&t.k, present::K),
                at(&t.r, present::R),
                at(&t.prefill_tokens_booked, present::PREFILL_TOKENS_BOOKED),
                at(&t.prefill_capacity_tokens, present::PREFILL_CAPACITY_TOKENS),
            ],
            schedulable,
            (bits & present::OBSERVED_AT != 0).then(|| t.observed_at_unix_ms[i]),
        )
    }
}

impl<'a> ProbePair<'a> {
    /// Both candidates answered (status ok, so both have a TTFT).
    pub fn both_ok(&self) -> bool {
        self.efficient.status() == Status::Ok && self.capable.status() == Status::Ok
    }
    pub fn run_id(&self) -> &'a str {
        self.efficient.run_id()
    }
    pub fn condition_id(&self) -> &'a str {
        self.efficient.condition_id()
    }
    /// The condition's index in the table.
    pub fn condition(&self) -> u32 {
        self.efficient.condition()
    }
    pub fn probe_id(&self) -> &'a str {
        self.efficient.probe_id()
    }
    pub fn repeat(&self) -> u32 {
        self.efficient.repeat()
    }
    /// The row of one role.
    pub fn get(&self, role: Model) -> Row<'a> {
        match role {
            Model::Efficient => self.efficient,
            Model::Capable => self.capable,
        }
    }
}

impl PairKeys for ProbeTable {
    fn rows(&self) -> usize {
        self.phase.len()
    }
    fn phase(&self, i: usize) -> Phase {
        codes::to_phase(self.phase[i])
    }
    fn role(&self, i: usize) -> Model {
        codes::to_role(self.role[i])
    }
    fn run_id(&self, i: usize) -> &str {
        self.run_id_of(i)
    }
    fn probe_id(&self, i: usize) -> &str {
        self.probe_id_of(i)
    }
    fn condition_id(&self, i: usize) -> &str {
        self.condition_id_of(i)
    }
    fn repeat(&self, i: usize) -> u32 {
        self.repeat[i]
    }
}

impl ProbeTable {
    /// Loads and validates the records of files or run directories (see the module docs and
    /// [`crate::load_records`], whose rules apply unchanged).
    pub fn load(paths: &[PathBuf], options: &LoadOptions) -> Result<ProbeTable, RecordsError> {
        let files = resolve_inputs(paths)?;
        // The files are hashed on a thread of their own while they are read.
        std::thread::scope(|scope| {
            let hashing = scope.spawn(|| digests(&files));
            let read = ProbeTable::read_files(ProbeTable::default(), &files, options);
            let digests = joined(hashing)?;
            let mut t = read?;
            t.digests = digests;
            Ok(t)
        })
    }

    /// [`ProbeTable::load`] through the probe-table cache at `cache` ([`sy_run::Artifact::ProbeCache`],
    /// see the `cache` module): the cached table when it was made from the same record files
    /// (by SHA-256) with the same options and passes its checks; otherwise the records are read,
    /// and [`ProbeTable::save_cache`] (called once the tool has succeeded: a failed run leaves
    /// the run directory as it was) writes the cache for the next tool. Without a cache
    /// (`None`, e.g. `--no-cache`), [`ProbeTable::load`].
    pub fn load_cached(
        paths: &[PathBuf],
        options: &LoadOptions,
        cache: Option<&Path>,
    ) -> Result<ProbeTable, RecordsError> {
        let Some(cache) = cache else {
            return ProbeTable::load(paths, options);
        };
        let files = resolve_inputs(paths)?;
        // The record files are hashed (the cache key, the provenance) on a thread of their own
        // while the cache is read and checked, or the records read; a hashing error comes first.
        let (digests, source) = std::thread::scope(|scope| {
            let hashing = scope.spawn(|| digests(&files));
            let cached = cache::open(cache, &files, options);
            if let Err(why) = &cached
                && cache.exists()
            {
                tracing::info!(cache = %cache.display(), "probe-table cache not used: {why}");
            }
            let source = match cached {
                Ok((made_from, t)) => Source::Cached(made_from, t),
                Err(_) => Source::Read(ProbeTable::read_cached_files(&files, options, cache)),
            };
            Ok::<_, RecordsError>((joined(hashing)?, source))
        })?;
        let key = cache::CacheKey::new(&files, &digests, options);
        let mut t = match source {
            Source::Cached(made_from, mut t) if made_from == key => {
                tracing::info!(cache = %cache.display(), rows = t.len(), "probe table read from its cache");
                t.digests = digests;
                t.rename_files(&files);
                return Ok(t);
            }
            Source::Cached(..) => {
                tracing::info!(cache = %cache.display(), "probe-table cache not used: {}", cache::OTHER_RECORDS);
                ProbeTable::read_cached_files(&files, options, cache)?
            }
            Source::Read(read) => read?,
        };
        t.digests = digests;
        t.unsaved_cache = Some((cache.to_path_buf(), key));
        Ok(t)
    }

    /// [`ProbeTable::read_files`] into a table built in the cache's place when it can be.
    fn read_cached_files(
        files: &[PathBuf],
        options: &LoadOptions,
        cache: &Path,
    ) -> Result<ProbeTable, RecordsError> {
        ProbeTable::read_files(filed_or_empty(files, cache), files, options)
    }

    /// Names the record files as this run does (a cache may have been made with another
    /// spelling of the same paths): in the file summaries and the skipped rows' issues.
    fn rename_files(&mut self, files: &[PathBuf]) {
        let before: Vec<PathBuf> = self.files.iter().map(|f| f.path.clone()).collect();
        for issue in &mut self.skipped {
            if let Some(i) = before.iter().position(|p| *p == issue.path) {
                issue.path = files.get(i).cloned().unwrap_or_else(|| issue.path.clone());
            }
        }
        for (summary, path) in self.files.iter_mut().zip(files) {
            summary.path = path.clone();
        }
    }

    /// Writes the probe-table cache of a table [`ProbeTable::load_cached`] read from the records
    /// (nothing for a table read from its cache or loaded without one). A cache that cannot be
    /// written is only reported: the next tool reads the records instead. Returns whether it
    /// was written.
    pub fn save_cache(&self) -> bool {
        self.stage_cache().is_some_and(StagedCache::commit)
    }

    /// The first half of [`ProbeTable::save_cache`]: the cache written beside its place, to be
    /// committed once the tool has succeeded (a tool may stage it on a second thread while it
    /// computes). `None` when there is nothing to save or it cannot be written (reported).
    pub fn stage_cache(&self) -> Option<StagedCache> {
        let (path, key) = self.unsaved_cache.as_ref()?;
        let started = std::time::Instant::now();
        match cache::stage(self, key, path) {
            Ok(staged) => {
                let seconds = started.elapsed().as_secs_f64();
                tracing::debug!(cache = %path.display(), seconds, "probe-table cache staged");
                Some(StagedCache(staged))
            }
            Err(e) => {
                tracing::warn!(cache = %path.display(), "cannot write the probe-table cache: {e}");
                None
            }
        }
    }

    /// Reads, validates and pairs the records of `files` (already resolved) into `t`, an empty
    /// table.
    fn read_files(
        mut t: ProbeTable,
        files: &[PathBuf],
        options: &LoadOptions,
    ) -> Result<ProbeTable, RecordsError> {
        for (index, path) in files.iter().enumerate() {
            let file = u32::try_from(index).unwrap_or(u32::MAX);
            let summary = t.read_file(path, file, options)?;
            t.files.push(summary);
        }
        t.pair_up(options)?;
        count_per_file(&mut t.files, &t.origins, &t.skipped);
        if t.is_empty() {
            return Err(no_valid_records(files));
        }
        Ok(t)
    }

    /// The record files read, each with its SHA-256 (hashed once, when loaded), in argument
    /// order: the records' provenance in every file a tool writes.
    pub fn input_files(&self) -> Vec<sy_selector::InputFile> {
        let digests = self.digests.iter().map(String::as_str);
        let digests = digests.chain(std::iter::repeat(""));
        self.files
            .iter()
            .zip(digests)
            .map(|(f, sha256)| sy_selector::InputFile {
                path: f.path.display().to_string(),
                sha256: sha256.to_string(),
            })
            .collect()
    }

    /// The table of records already in memory (all valid; paired like [`ProbeTable::load`]).
    pub fn from_records(records: &[Record]) -> Result<ProbeTable, RecordsError> {
        let mut t = ProbeTable::default();
        for (i, r) in records.iter().enumerate() {
            let row = u32::try_from(i + 1).unwrap_or(u32::MAX);
            t.push_record(r, RowOrigin { file: 0, row });
        }
        t.files.push(FileSummary {
            path: PathBuf::from("(records)"),
            format: Format::Jsonl,
            rows: records.len(),
            loaded: records.len(),
            skipped: 0,
            torn_tail: false,
            unknown_columns: Vec::new(),
        });
        t.pair_up(&LoadOptions::default())?;
        Ok(t)
    }

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

    /// Optional value `i` of `column`, present when the row's `present` bits have `bit`.
    #[inline]
    fn value<T: Copy>(&self, column: &[T], bit: u16, i: usize) -> Option<T> {
        (self.present[i] & bit != 0).then(|| column[i])
    }

    /// Appends one valid row.
    fn push_row(&mut self, row: RowValues<'_>, origin: RowOrigin) {
        // Consecutive rows usually share a condition: skip the lookups then.
        let same = self.condition.last().is_some_and(|&c| {
            let (run, cond) = self.condition_key(c);
            run == row.run_id && cond == row.condition_id
        });
        let load = row.phase == Phase::Load;
        let condition = match (same, self.condition.last()) {
            (true, Some(&c)) => {
                if load {
                    self.conditions.mark_load(c);
                }
                c
            }
            _ => self.conditions.intern(row.run_id, row.condition_id, load),
        };
        self.condition.push(condition);
        self.probe_text.extend_from_slice(row.probe_id.as_bytes());
        let end = self.probe_text.len() as u64;
        self.probe_end.push(end);
        self.phase.push(codes::phase(row.phase));
        self.role.push(codes::role(row.role));
        self.status.push(codes::status(row.status));
        self.repeat.push(row.repeat);
        let model = match self.model.last() {
            Some(&m) if self.models.get(m) == row.model => m,
            _ => self.models.intern(row.model),
        };
        self.model.push(model);
        let decode_length = match (row.decode_length, self.decode_length.last()) {
            (None, _) => NO_TEXT,
            (Some(d), Some(&last)) if last != NO_TEXT && self.decode_lengths.get(last) == d => last,
            (Some(d), _) => self.decode_lengths.intern(d),
        };
        self.decode_length.push(decode_length);
        self.planned_n.push(row.planned_n);
        self.planned_f.push(row.planned_f);
        self.present.push(row.present_bits());
        self.n.push(row.n.unwrap_or(0));
        self.k.push(row.k.unwrap_or(0));
        self.r.push(row.r.unwrap_or(0));
        self.prefill_tokens_booked
            .push(row.prefill_tokens_booked.unwrap_or(0));
        self.prefill_capacity_tokens
            .push(row.prefill_capacity_tokens.unwrap_or(0));
        self.observed_at_unix_ms
            .push(row.observed_at_unix_ms.unwrap_or(0.0));
        self.sent_at_unix_ms.push(row.sent_at_unix_ms);
        self.ttft_ms.push(row.ttft_ms.unwrap_or(0.0));
        self.client_server_gap_ms
            .push(row.client_server_gap_ms.unwrap_or(0.0));
        self.attempts.push(row.attempts);
        self.pick.push(match (row.reserved, row.pick_differs) {
            (false, _) => 0,
            (true, None) => 1,
            (true, Some(false)) => 2,
            (true, Some(true)) => 3,
        });
        self.origins.push(origin);
    }

    fn push_record(&mut self, r: &Record, origin: RowOrigin) {
        self.push_row(RowValues::of_record(r), origin);
    }

    /// Reads one file into the table; returns its summary (counts set later).
    fn read_file(
        &mut self,
        path: &Path,
        file: u32,
        options: &LoadOptions,
    ) -> Result<FileSummary, RecordsError> {
        let mut summary = FileSummary::before_reading(path)?;
        match summary.format {
            Format::Parquet => self.read_parquet(path, file, options, &mut summary)?,
            Format::Csv => {
                let df = read_csv_frame(path)?;
                summary.rows = df.height();
                summary.unknown_columns = crate::frame::unknown_columns(&df);
                self.push_frame(&df, path, 0, file, options)?;
            }
            Format::Jsonl => {
                let mut loaded = LoadedRecords::default();
                read_jsonl_into(path, file, options, &mut loaded, &mut summary)?;
                for (r, o) in loaded.records.iter().zip(&loaded.origins) {
                    self.push_record(r, *o);
                }
                self.skipped.append(&mut loaded.skipped);
            }
        }
        Ok(summary)
    }

    fn read_parquet(
        &mut self,
        path: &Path,
        file: u32,
        options: &LoadOptions,
        summary: &mut FileSummary,
    ) -> Result<(), RecordsError> {
        let bad = |e: PolarsError| RecordsError::Read {
            path: path.to_path_buf(),
            message: format!("not a readable Parquet file: {e}"),
        };
        let open = || {
            File::open(path).map_err(|e| RecordsError::Read {
                path: path.to_path_buf(),
                message: e.to_string(),
            })
        };
        let mut reader = ParquetReader::new(open()?);
        let total = reader.num_rows().map_err(bad)?;
        let schema = reader.schema().map_err(bad)?;
        let names: Vec<String> = schema.iter_names().map(|n| n.to_string()).collect();
        summary.rows = total;
        summary.unknown_columns = names
            .iter()
            .filter(|n| !crate::ALL_COLUMNS.contains(&n.as_str()))
            .cloned()
            .collect();
        let projected: Vec<String> = PROBE_TABLE_COLUMNS
            .iter()
            .filter(|c| names.iter().any(|n| n == *c))
            .map(|c| (*c).to_string())
            .collect();
        crate::frame::check_parquet_types(path, &schema)?;
        self.reserve(total);
        // One thread decodes the next slice while this one converts the last (one slice ahead:
        // at most two slices in memory). A conversion error drops the receiver, which ends it.
        std::thread::scope(|scope| {
            let (tx, rx) = std::sync::mpsc::sync_channel(1);
            scope.spawn(move || {
                let mut offset = 0;
                loop {
                    let len = PARQUET_SLICE_ROWS.min(total - offset);
                    let slice = open().and_then(|f| {
                        let df = ParquetReader::new(f)
                            .with_columns(Some(projected.clone()))
                            .with_slice(Some((offset, len)))
                            .finish()
                            .map_err(bad)?;
                        Ok((offset, df))
                    });
                    let failed = slice.is_err();
                    if tx.send(slice).is_err() || failed {
                        return;
                    }
                    offset += len;
                    if len == 0 || offset >= total {
                        return;
                    }
                }
            });
            for slice in rx {
                let (mut offset, mut df) = slice?;
                // A slice comes in several chunks (one per row group or page read), each read
                // as a frame of its own: the native path reads one chunk per column, and
                // copying the chunks into one (`rechunk`) was measured to cost more than
                // decoding them.
                for part in df.split_chunks() {
                    self.push_frame(&part, path, offset, file, options)?;
                    offset += part.height();
                }
            }
            Ok(())
        })
    }

    fn reserve(&mut self, rows: usize) {
        macro_rules! reserve {
            ($t:expr, $rows:expr; $($c:ident),*) => { $($t.$c.reserve($rows);)* };
        }
        self.probe_end.reserve(rows);
        row_columns!(reserve!(self, rows));
    }

    /// Converts and validates the rows of `df` (rows `offset + 1 ..` of the file) into the
    /// table: a frame in the types sy writes straight from its arrays, in parts on every core
    /// ([`ProbeTable::push_native`]); any other frame, or one with a problem, one column at a
    /// time, then row by row into the table's columns.
    fn push_frame(
        &mut self,
        df: &DataFrame,
        path: &Path,
        offset: usize,
        file: u32,
        options: &LoadOptions,
    ) -> Result<(), RecordsError> {
        if let Some(native) = NativeFrame::of(df)
            && self.push_native(&native, offset, file)
        {
            return Ok(());
        }
        if !self.is_filed() {
            return with_probe_columns(df, path, |c| {
                self.push_columns(&c, path, offset, file, options)
            })?;
        }
        let mut part = ProbeTable::default();
        part.reserve(df.height());
        with_probe_columns(df, path, |c| {
            part.push_columns(&c, path, offset, file, options)
        })??;
        self.skipped.append(&mut part.skipped);
        self.append(&part);
        Ok(())
    }

    /// Whether this table is being built in its cache file ([`cache::filed_table`]). Rows then
    /// go into a part in memory first and are appended whole: a row at a time costs more in a
    /// mapped region than in a vector.
    fn is_filed(&self) -> bool {
        self.probe_end.file_start().is_some()
    }

    /// Appends every row of a native frame (see [`native`]) if all of them are valid; `false`
    /// (the table as it was before) otherwise.
    ///
    /// The frame's rows are converted in contiguous parts, one per core ([`thread_parts`]): the
    /// first into this table on this thread (into a table of its own when this one is built in
    /// its cache file, see [`ProbeTable::is_filed`]), each other one into a table of its own on
    /// a thread of its own, appended in row order afterwards ([`ProbeTable::append`]), so the
    /// table is the one a single pass would build. Rows are appended as they are read and
    /// checked, and taken back at the first one that is not valid: a valid frame, the usual
    /// case, is read once.
    fn push_native(&mut self, frame: &NativeFrame<'_>, offset: usize, file: u32) -> bool {
        let mark = self.mark();
        let parts = thread_parts(frame.height());
        let Some((&(start, len), rest)) = parts.split_first() else {
            return true;
        };
        let (first_valid, others) = std::thread::scope(|scope| {
            let others: Vec<_> = rest
                .iter()
                .map(|&(start, len)| {
                    scope.spawn(move || {
                        let mut part = ProbeTable::default();
                        part.reserve(len);
                        part.push_native_rows(frame, start..start + len, offset, file)
                            .then_some(part)
                    })
                })
                .collect();
            let (valid, first) = if self.is_filed() {
                let mut part = ProbeTable::default();
                part.reserve(len);
                let valid = part.push_native_rows(frame, start..start + len, offset, file);
                (valid, Some(part))
            } else {
                let valid = self.push_native_rows(frame, start..start + len, offset, file);
                (valid, None)
            };
            let others: Option<Vec<ProbeTable>> = others
                .into_iter()
                .map(|h| h.join().ok().flatten())
                .collect();
            (
                valid,
                others.map(|o| first.into_iter().chain(o).collect::<Vec<_>>()),
            )
        });
        match (first_valid, others) {
            (true, Some(others)) => {
                for part in &others {
                    self.append(part);
                }
                true
            }
            _ => {
                self.restore(mark);
                false
            }
        }
    }

    /// Appends rows `rows` of a native frame while each is valid; `false` at the first that
    /// is not (the rows before it stay: the caller takes them back).
    fn push_native_rows(
        &mut self,
        frame: &NativeFrame<'_>,
        rows: std::ops::Range<usize>,
        offset: usize,
        file: u32,
    ) -> bool {
        for i in rows {
            let valid = frame
                .row(i)
                .filter(|v| validate_fields(&v.checked()).is_ok());
            let Some(values) = valid else {
                return false;
            };
            let row = u32::try_from(offset + i + 1).unwrap_or(u32::MAX);
            self.push_row(values, RowOrigin { file, row });
        }
        true
    }

    /// Appends the rows of `other` (rows converted on another thread, see
    /// [`ProbeTable::push_native`]): its text is interned here in its order of first
    /// appearance, so the result is the table of both parts read in one pass.
    fn append(&mut self, other: &ProbeTable) {
        let start = self.len();
        let conditions: Vec<u32> = (0..other.conditions.count())
            .map(|c| {
                let (run, condition) = other.conditions.key(c as u32);
                let load = other.conditions.is_load.get(c).copied().unwrap_or(false);
                self.conditions.intern(run, condition, load)
            })
            .collect();
        let models: Vec<u32> = other
            .models
            .values
            .iter()
            .map(|m| self.models.intern(m))
            .collect();
        let decode_lengths: Vec<u32> = (other.decode_lengths.values.iter())
            .map(|d| self.decode_lengths.intern(d))
            .collect();
        let text = self.probe_text.len() as u64;
        let remap = |ids: &mut [u32], to: &[u32]| {
            for id in ids {
                *id = to.get(*id as usize).copied().unwrap_or(NO_TEXT);
            }
        };
        // Every column on its own task: a column built in its cache file is written into fresh
        // page-cache pages, which the kernel zeroes on first touch, and the decoding threads
        // leave a core free meanwhile (at 10 M records this thread was the load's bottleneck).
        rayon::scope(|s| {
            s.spawn(|_| {
                self.probe_text.extend_from_slice(&other.probe_text);
            });
            s.spawn(|_| {
                self.probe_end.extend_from_slice(&other.probe_end);
                for end in self.probe_end.tail_mut(start) {
                    *end += text;
                }
            });
            macro_rules! extend {
                ($t:expr, $other:expr; $($c:ident),*) => {
                    $(s.spawn(|_| $t.$c.extend_from_slice(&$other.$c));)*
                };
            }
            row_columns!(extend!(self, other));
        });
        // The appended ids are the other table's: into this table's interners.
        rayon::scope(|s| {
            s.spawn(|_| remap(self.condition.tail_mut(start), &conditions));
            s.spawn(|_| remap(self.model.tail_mut(start), &models));
            s.spawn(|_| remap(self.decode_length.tail_mut(start), &decode_lengths));
        });
    }

    /// What [`ProbeTable::restore`] goes back to (rows are only ever appended between the two).
    fn mark(&self) -> TableMark {
        TableMark {
            rows: self.condition.len(),
            probe_text: self.probe_text.len(),
            conditions: self.conditions.mark(),
            models: self.models.len(),
            decode_lengths: self.decode_lengths.len(),
        }
    }

    /// Drops the rows appended since `mark`, and the text they interned.
    fn restore(&mut self, mark: TableMark) {
        macro_rules! truncate {
            ($t:expr, $rows:expr; $($c:ident),*) => { $($t.$c.truncate($rows);)* };
        }
        row_columns!(truncate!(self, mark.rows));
        self.probe_end.truncate(mark.rows);
        self.probe_text.truncate(mark.probe_text);
        self.conditions.restore(mark.conditions);
        self.models.truncate(mark.models);
        self.decode_lengths.truncate(mark.decode_lengths);
    }

    fn push_columns(
        &mut self,
        c: &ProbeColumns<'_>,
        path: &Path,
        offset: usize,
        file: u32,
        options: &LoadOptions,
    ) -> Result<(), RecordsError> {
        let first_issue = first_issue_per_row(c);
        for i in 0..c.height {
            let row_no = offset + i + 1;
            let checked = match first_issue.get(&i) {
                Some((field, message)) => Err((*field, message.clone())),
                None => RowValues::of_columns(c, i)
                    .and_then(|v| validate_fields(&v.checked()).map(|()| v)),
            };
            match checked {
                Ok(values) => {
                    let row = u32::try_from(row_no).unwrap_or(u32::MAX);
                    self.push_row(values, RowOrigin { file, row });
                }
                Err((field, message)) => {
                    let issue = RowIssue {
                        path: path.to_path_buf(),
                        row: row_no,
                        field: field.to_string(),
                        message,
                    };
                    if !options.skip_invalid {
                        return Err(RecordsError::Row(issue));
                    }
                    self.skipped.push(issue);
                }
            }
        }
        Ok(())
    }

    /// Pairs the load-phase probes (see [`crate::pairing::check_pairing`]); with
    /// `skip_invalid`, probes that do not pair are dropped and reported.
    fn pair_up(&mut self, options: &LoadOptions) -> Result<(), RecordsError> {
        let describe = |i: usize| describe_origin(&self.origins, &self.files, i);
        let torn = |i: usize| torn_note(&self.origins, &self.files, i);
        let outcome = check_pairing(self, &describe, &torn);
        let mut bad = outcome.bad;
        if bad.is_empty() {
            self.pairs = to_u32_pairs(&outcome.pairs);
            return Ok(());
        }
        sort_by_origin(&mut bad, &self.origins);
        let issue = |b| pair_row_issue(&self.origins, &self.files, b);
        if !options.skip_invalid {
            return Err(RecordsError::Row(issue(&bad[0])));
        }
        let mut issues: Vec<RowIssue> = bad.iter().map(issue).collect();
        let drop = drop_mask(self, &bad, |i| {
            issues.push(partner_issue(
                &self.origins,
                &self.files,
                i,
                self.probe_id_of(i),
            ));
        });
        self.skipped.extend(issues);
        self.retain(&drop);
        let describe = |i: usize| describe_origin(&self.origins, &self.files, i);
        let outcome = check_pairing(self, &describe, &|_| String::new());
        self.pairs = to_u32_pairs(&outcome.pairs);
        Ok(())
    }

    /// Keeps the rows whose `drop` flag is false.
    fn retain(&mut self, drop: &[bool]) {
        let mut text = Vec::with_capacity(self.probe_text.len());
        let mut ends = Vec::with_capacity(self.probe_end.len());
        for (i, d) in drop.iter().enumerate() {
            if !d {
                text.extend_from_slice(self.probe_id_of(i).as_bytes());
                ends.push(text.len() as u64);
            }
        }
        self.probe_text = Column::from(text);
        self.probe_end = Column::from(ends);
        macro_rules! retain {
            ($t:expr, $drop:expr; $($c:ident),*) => { $($t.$c.retain_unless($drop);)* };
        }
        row_columns!(retain!(self, drop));
    }
}

/// An empty table built in the cache file staged beside `cache` ([`cache::filed_table`]) when
/// every record file is Parquet (whose footer says how many rows to make room for); otherwise,
/// or when that file cannot be made (reported), an empty table in memory.
fn filed_or_empty(files: &[PathBuf], cache: &Path) -> ProbeTable {
    let rows = files
        .iter()
        .map(|path| {
            (Format::from_path(path) == Some(Format::Parquet))
                .then(|| ParquetReader::new(File::open(path).ok()?).num_rows().ok())
                .flatten()
        })
        .sum::<Option<usize>>();
    let Some(rows) = rows.filter(|&r| r > 0) else {
        return ProbeTable::default();
    };
    match cache::filed_table(cache, rows) {
        Ok(t) => {
            tracing::debug!(cache = %cache.display(), rows, "probe table built in its cache file");
            t
        }
        Err(e) => {
            tracing::warn!(cache = %cache.display(), "cannot stage the probe-table cache: {e}");
            ProbeTable::default()
        }
    }
}

/// A probe-table cache written but not yet in place ([`ProbeTable::stage_cache`]); dropped
/// uncommitted, it is removed.
#[derive(Debug)]
pub struct StagedCache(sy_run::Staged);

impl StagedCache {
    /// Renames the cache into place; a failure is reported, not an error. Returns whether it
    /// is in place.
    pub fn commit(self) -> bool {
        match self.0.commit() {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!("cannot write the probe-table cache: {e}");
                false
            }
        }
    }
}

/// Where a table comes from while its record files are hashed: its cache (with the key it was
/// made with, compared once the digests are known) or the records themselves.
enum Source {
    Cached(cache::CacheKey, ProbeTable),
    Read(Result<ProbeTable, RecordsError>),
}

/// What a hashing thread gave ([`digests`]); its panic goes on in this thread (a bug, not the
/// input's fault: hashing reports unreadable files as errors).
fn joined(
    hashing: std::thread::ScopedJoinHandle<'_, Result<Vec<String>, RecordsError>>,
) -> Result<Vec<String>, RecordsError> {
    hashing
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

/// The SHA-256 of each file, in hex.
fn digests(files: &[PathBuf]) -> Result<Vec<String>, RecordsError> {
    files
        .iter()
        .map(|f| {
            sy_run::file_sha256(f).map_err(|e| RecordsError::Read {
                path: f.clone(),
                message: e.to_string(),
            })
        })
        .collect()
}

fn to_u32_pairs(pairs: &[(usize, usize)]) -> Column<[u32; 2]> {
    let pairs: Vec<[u32; 2]> = pairs
        .iter()
        .map(|&(e, c)| {
            [
                u32::try_from(e).unwrap_or(u32::MAX),
                u32::try_from(c).unwrap_or(u32::MAX),
            ]
        })
        .collect();
    Column::from(pairs)
}

/// The first cell problem of each row that has one (earliest field in the record layout).
fn first_issue_per_row(c: &ProbeColumns<'_>) -> FxHashMap<usize, (&'static str, String)> {
    let mut sorted: Vec<&(usize, u16, &'static str, String)> = c.issues.iter().collect();
    sorted.sort_by_key(|(row, order, _, _)| (*row, *order));
    let mut first = FxHashMap::default();
    for (row, _, field, message) in sorted {
        first
            .entry(*row)
            .or_insert_with(|| (*field, message.clone()));
    }
    first
}

/// The values of one row, borrowed from a record or from converted columns.
struct RowValues<'a> {
    schema_version: u32,
    run_id: &'a str,
    condition_id: &'a str,
    phase: Phase,
    repeat: u32,
    probe_id: &'a str,
    role: Model,
    model: &'a str,
    planned_n: u64,
    planned_f: f64,
    decode_length: Option<&'a str>,
    status: Status,
    n: Option<u64>,
    k: Option<u64>,
    r: Option<u64>,
    prefill_tokens_booked: Option<u64>,
    prefill_capacity_tokens: Option<u64>,
    schedulable: Option<bool>,
    observed_at_unix_ms: Option<f64>,
    sent_at_unix_ms: f64,
    reserved: bool,
    reserved_worker_id: Option<u64>,
    reserved_dp_rank: Option<u32>,
    pick_differs: Option<bool>,
    served_worker_id: Option<u64>,
    served_dp_rank: Option<u32>,
    ttft_ms: Option<f64>,
    client_server_gap_ms: Option<f64>,
    attempts: u32,
}

impl<'a> RowValues<'a> {
    fn of_record(r: &'a Record) -> Self {
        RowValues {
            schema_version: r.schema_version,
            run_id: &r.run_id,
            condition_id: &r.condition_id,
            phase: r.phase,
            repeat: r.repeat,
            probe_id: &r.probe_id,
            role: r.role,
            model: &r.model,
            planned_n: r.planned_n,
            planned_f: r.planned_f,
            decode_length: r.background.decode_length.as_deref(),
            status: r.status,
            n: r.observed.n,
            k: r.observed.k,
            r: r.observed.r,
            prefill_tokens_booked: r.observed.prefill_tokens_booked,
            prefill_capacity_tokens: r.observed.prefill_capacity_tokens,
            schedulable: r.observed.schedulable,
            observed_at_unix_ms: r.observed.observed_at_unix_ms,
            sent_at_unix_ms: r.sent_at_unix_ms,
            reserved: r.reserved_worker_id.is_some(),
            reserved_worker_id: r.reserved_worker_id,
            reserved_dp_rank: r.reserved_dp_rank,
            pick_differs: r.pick_differs,
            served_worker_id: r.served_worker_id,
            served_dp_rank: r.served_dp_rank,
            ttft_ms: r.ttft_ms,
            client_server_gap_ms: r.client_server_gap_ms,
            attempts: r.attempts,
        }
    }

    /// Row `i` of columns without a cell problem (required values are present).
    fn of_columns(c: &'a ProbeColumns<'_>, i: usize) -> Result<Self, (&'static str, String)> {
        let missing = |field: &'static str| (field, "missing value".to_string());
        Ok(RowValues {
            schema_version: c.schema_version[i],
            run_id: c.run_id[i].as_deref().ok_or_else(|| missing("run_id"))?,
            condition_id: c.condition_id[i]
                .as_deref()
                .ok_or_else(|| missing("condition_id"))?,
            phase: c.phase[i].ok_or_else(|| missing("phase"))?,
            repeat: c.repeat[i],
            probe_id: c.probe_id[i]
                .as_deref()
                .ok_or_else(|| missing("probe_id"))?,
            role: c.role[i].ok_or_else(|| missing("role"))?,
            model: c.model[i].as_deref().ok_or_else(|| missing("model"))?,
            planned_n: c.planned_n[i],
            planned_f: c.planned_f[i],
            decode_length: c.decode_length[i].as_deref(),
            status: c.status[i].ok_or_else(|| missing("status"))?,
            n: c.n[i],
            k: c.k[i],
            r: c.r[i],
            prefill_tokens_booked: c.prefill_tokens_booked[i],
            prefill_capacity_tokens: c.prefill_capacity_tokens[i],
            schedulable: c.schedulable[i],
            observed_at_unix_ms: c.observed_at_unix_ms[i],
            sent_at_unix_ms: c.sent_at_unix_ms[i],
            reserved: c.reserved_worker_id[i].is_some(),
            reserved_worker_id: c.reserved_worker_id[i],
            reserved_dp_rank: c.reserved_dp_rank[i],
            pick_differs: c.pick_differs[i],
            served_worker_id: c.served_worker_id[i],
            served_dp_rank: c.served_dp_rank[i],
            ttft_ms: c.ttft_ms[i],
            client_server_gap_ms: c.client_server_gap_ms[i],
            attempts: c.attempts[i],
        })
    }

    /// The row's bits of [`ProbeTable`]'s `present` column.
    fn present_bits(&self) -> u16 {
        let bit = |has: bool, bit: u16| if has { bit } else { 0 };
        bit(self.n.is_some(), present::N)
            | bit(self.k.is_some(), present::K)
            | bit(self.r.is_some(), present::R)
            | bit(
                self.prefill_tokens_booked.is_some(),
                present::PREFILL_TOKENS_BOOKED,
            )
            | bit(
                self.prefill_capacity_tokens.is_some(),
                present::PREFILL_CAPACITY_TOKENS,
            )
            | bit(self.observed_at_unix_ms.is_some(), present::OBSERVED_AT)
            | bit(self.ttft_ms.is_some(), present::TTFT)
            | bit(
                self.client_server_gap_ms.is_some(),
                present::CLIENT_SERVER_GAP,
            )
            | bit(self.schedulable.is_some(), present::SCHEDULABLE)
            | bit(self.schedulable == Some(true), present::SCHEDULABLE_TRUE)
    }

    fn checked(&self) -> CheckedFields<'a> {
        CheckedFields {
            status: self.status,
            ttft_ms: self.ttft_ms,
            n: self.n,
            k: self.k,
            schema_version: self.schema_version,
            served_worker_id: self.served_worker_id,
            reserved_worker_id: self.reserved_worker_id,
            served_dp_rank: self.served_dp_rank,
            reserved_dp_rank: self.reserved_dp_rank,
            run_id: self.run_id,
            condition_id: self.condition_id,
            probe_id: self.probe_id,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::synth::{SynthSpec, generate};

    fn records(conditions: usize, seed: u64) -> Vec<Record> {
        generate(&SynthSpec {
            conditions,
            repeats: 2,
            seed,
            ..SynthSpec::default()
        })
    }

    /// Everything a restored table must hold as before: rows, text and conditions.
    fn summary(t: &ProbeTable) -> (usize, usize, Vec<(String, String)>, Vec<String>) {
        let load = t.load_conditions().map(|(r, c)| (r.into(), c.into()));
        let rows = t
            .rows()
            .map(|r| format!("{} {} {}", r.probe_id(), r.model(), r.condition()));
        (t.len(), t.condition_count(), load.collect(), rows.collect())
    }

    #[test]
    fn restoring_a_mark_forgets_rows_conditions_and_text_appended_since() {
        let first = records(3, 1);
        let mut later = records(4, 2);
        for r in &mut later {
            r.run_id = "another run".into();
            r.model = format!("{} v2", r.model);
            r.background.decode_length = Some("very long".into());
        }
        // A load-phase row of a condition the table has only seen outside the load phase.
        let mut q_grid = first
            .iter()
            .find(|r| r.phase != Phase::Load)
            .unwrap()
            .clone();
        q_grid.phase = Phase::Load;
        later.push(q_grid);
        let origin = RowOrigin { file: 0, row: 1 };
        let mut table = ProbeTable::default();
        first.iter().for_each(|r| table.push_record(r, origin));
        let before = summary(&table);
        let mark = table.mark();
        later.iter().for_each(|r| table.push_record(r, origin));
        assert_ne!(summary(&table), before);
        table.restore(mark);
        assert_eq!(summary(&table), before);
        // The interned text is forgotten too: appending the later rows again numbers them as
        // a table that never saw them does.
        later.iter().for_each(|r| table.push_record(r, origin));
        let mut fresh = ProbeTable::default();
        first
            .iter()
            .chain(&later)
            .for_each(|r| fresh.push_record(r, origin));
        assert_eq!(summary(&table), summary(&fresh));
        assert_eq!(table.models.values, fresh.models.values);
        assert_eq!(table.decode_lengths.values, fresh.decode_lengths.values);
    }

    #[test]
    fn appending_a_part_gives_the_table_one_pass_builds() {
        let first = records(3, 1);
        // The second part: rows of a new run, new models and decode lengths (some rows
        // without one), then the first part's rows in reverse order (one of them of a Q-grid
        // condition, now in the load phase): the part numbers its text in another order than
        // the table it is appended to.
        let mut later: Vec<Record> = (records(4, 2).into_iter().enumerate())
            .map(|(i, mut r)| {
                r.run_id = "another run".into();
                r.model = format!("{} v2", r.model);
                r.background.decode_length = (i % 3 != 0).then(|| format!("length {}", i % 5));
                r
            })
            .collect();
        let mut again: Vec<Record> = first.iter().rev().cloned().collect();
        let q_grid = again.iter_mut().find(|r| r.phase != Phase::Load).unwrap();
        q_grid.phase = Phase::Load;
        later.append(&mut again);
        let origin = |row: usize| RowOrigin {
            file: 0,
            row: u32::try_from(row + 1).unwrap(),
        };
        let mut table = ProbeTable::default();
        let mut part = ProbeTable::default();
        first
            .iter()
            .enumerate()
            .for_each(|(i, r)| table.push_record(r, origin(i)));
        let base = first.len();
        later
            .iter()
            .enumerate()
            .for_each(|(i, r)| part.push_record(r, origin(base + i)));
        table.append(&part);
        let mut fresh = ProbeTable::default();
        let all = first.iter().chain(&later).enumerate();
        all.for_each(|(i, r)| fresh.push_record(r, origin(i)));
        assert_eq!(cache::columns(&table), cache::columns(&fresh));
        assert_eq!(table.conditions.entries(), fresh.conditions.entries());
        assert_eq!(table.conditions.runs.values, fresh.conditions.runs.values);
        assert_eq!(table.models.values, fresh.models.values);
        assert_eq!(table.decode_lengths.values, fresh.decode_lengths.values);
    }
}
