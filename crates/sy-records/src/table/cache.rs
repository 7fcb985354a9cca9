//! The probe-table cache (`probe-table.cache` in a run directory, [`sy_rundir::Artifact::ProbeCache`]):
//! a loaded [`ProbeTable`] written as its columns, so that the next tool maps the file instead of
//! decoding, validating and pairing the records again.
//!
//! Layout: the magic bytes, each column's values (little-endian, 64-byte aligned), then a JSON
//! header (what the table was made from, its text tables, where each column lies and its
//! CRC-32), the header's CRC-32 and length, and the magic bytes again.
//!
//! A cache is used only when its header names the same record files with the same SHA-256, the
//! same load options, this cache layout and this sy version ([`CacheKey`]). It is never trusted
//! beyond that: the header's and every column's CRC-32, every column's length and alignment and
//! every index a column holds are checked when the file is opened ([`check`]), so a damaged or
//! foreign file is refused with a reason and the records are read again, never misread.

use std::fs::File;
use std::path::Path;
use std::sync::{Arc, Mutex};

use bytemuck::Pod;
use serde::{Deserialize, Serialize};

use super::cache_error::CacheError;
use super::column::Column;
use super::{ConditionIndex, Interner, NO_TEXT, ProbeTable, codes, present};
use crate::error::RowIssue;
use crate::load::{FileSummary, LoadOptions};

const MAGIC: &[u8; 8] = b"SYPROBE\0";
/// Where the first column starts, and every column's alignment.
const ALIGN: usize = 64;
const KIND: &str = "sy probe-table cache";

/// The size of every write into a new cache file, and the reason writes stay that small.
///
/// The cache is the largest thing `sy-fit` writes (1.38 GB at 10 M records), and how its pages
/// come into the page cache decided most of sy-fit's load time on the 2-core VM of the
/// benchmarks. Writes of a megabyte and page faults with readahead on a mapped file make the
/// kernel (6.18, ext4) allocate large folios, and there fresh large blocks first touched cost
/// 4–7 s of system time per 1.4 GB, against 0.6–1.1 s for the same bytes in single pages
/// (`dd bs=1M` vs `bs=4k`; a mapped file written with and without `MADV_RANDOM`). So the mapped
/// regions are advised random access (no readahead: one page a fault) and populated at once,
/// and the rest is written a page at a time. The price, measured: a tool mapping the finished
/// cache takes more page faults to read it (sy-margin at 10 M: 63,750 instead of 57,190, about
/// 0.05 s). Measured in `crates/sy-select/README.md`, "Benchmark" (stop 42).
const PAGE: usize = 4096;

/// What a table was loaded from: each record file's canonical path (so `runs/a/records.parquet`
/// and its absolute spelling name the same file) and SHA-256, and the load options.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct CacheKey {
    pub files: Vec<(String, String)>,
    pub skip_invalid: bool,
}

impl CacheKey {
    pub(crate) fn new(files: &[std::path::PathBuf], digests: &[String], o: &LoadOptions) -> Self {
        CacheKey {
            files: canonical(files).zip(digests.iter().cloned()).collect(),
            skip_invalid: o.skip_invalid,
        }
    }

    /// Whether this key names `files` (canonical paths, in order) with the options `o`, the
    /// files' contents aside (their digests are compared once known).
    fn names(&self, files: &[std::path::PathBuf], o: &LoadOptions) -> bool {
        self.skip_invalid == o.skip_invalid
            && self.files.len() == files.len()
            && canonical(files).zip(&self.files).all(|(p, (q, _))| p == *q)
    }
}

/// Each file's canonical path, as a key names it.
fn canonical(files: &[std::path::PathBuf]) -> impl Iterator<Item = String> + '_ {
    files
        .iter()
        .map(|p| std::fs::canonicalize(p).unwrap_or_else(|_| p.clone()))
        .map(|p| p.display().to_string())
}

#[derive(Debug, Serialize, Deserialize)]
struct Header {
    kind: String,
    schema_version: u32,
    sy_version: String,
    key: CacheKey,
    rows: usize,
    pairs: usize,
    text_bytes: usize,
    runs: Vec<String>,
    /// (run index, condition id, has load-phase rows) by condition index.
    conditions: Vec<(u32, String, bool)>,
    models: Vec<String>,
    decode_lengths: Vec<String>,
    files: Vec<FileSummary>,
    skipped: Vec<RowIssue>,
    /// (name, byte offset, byte length, CRC-32) of each column.
    columns: Vec<(String, usize, usize, u32)>,
}

/// Every column of a table as bytes, by name, in file order, with where it lies in the file
/// the table was built in ([`filed_table`]), if it does.
pub(super) fn columns(t: &ProbeTable) -> Vec<(&'static str, &[u8], Option<usize>)> {
    let mut columns = vec![
        (
            "probe_text",
            t.probe_text.bytes(),
            t.probe_text.file_start(),
        ),
        ("probe_end", t.probe_end.bytes(), t.probe_end.file_start()),
    ];
    macro_rules! push {
        ($columns:ident, $t:ident; $($c:ident),*) => {
            $($columns.push((stringify!($c), $t.$c.bytes(), $t.$c.file_start()));)*
        };
    }
    row_columns!(push!(columns, t));
    columns.push(("pairs", t.pairs.bytes(), t.pairs.file_start()));
    columns
}

fn padding(at: usize) -> usize {
    (ALIGN - at % ALIGN) % ALIGN
}

/// A table being built in the file its cache will be ([`filed_table`]): the staged file, open,
/// with a region for every row column and for `probe_end`. [`stage`] then writes only the other
/// columns and the header after `end`.
pub(super) struct Filing {
    staged: sy_rundir::Staged,
    file: File,
    /// Where the regions end.
    end: usize,
}

/// The slot of a table's [`Filing`], taken by [`stage`]; a clone of the table has none (its
/// filed columns are copied into vectors).
#[derive(Default)]
pub(super) struct FilingSlot(Mutex<Option<Filing>>);

impl Clone for FilingSlot {
    fn clone(&self) -> Self {
        FilingSlot::default()
    }
}

impl std::fmt::Debug for FilingSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let filed = self.0.lock().map(|g| g.is_some()).unwrap_or(false);
        write!(f, "FilingSlot({})", if filed { "filed" } else { "none" })
    }
}

/// An empty table whose row columns and `probe_end` are regions of `rows` values each in a file
/// staged beside `path` (the cache to be): values pushed into them are written once, into the
/// page cache, and [`stage`] only adds the rest. A column that outgrows its region (more rows
/// than `rows`) moves into memory and is written by [`stage`] like the others.
pub(super) fn filed_table(path: &Path, rows: usize) -> Result<ProbeTable, CacheError> {
    if rows == 0 {
        return Err(CacheError::NoRows);
    }
    let (staged, file) = sy_rundir::stage_open(path)?;
    // Sparse: an upper bound (8 bytes a value); `stage` cuts the file to what it holds.
    let bound = (ROW_COLUMNS + 1) * (rows.checked_mul(8).ok_or(CacheError::TooManyRows)? + ALIGN);
    file.set_len((ALIGN + bound) as u64)?;
    let mut t = ProbeTable::default();
    let mut at = ALIGN;
    t.probe_end = region(&file, &mut at, rows)?;
    macro_rules! place {
        ($t:ident, $file:ident, $at:ident, $rows:ident; $($c:ident),*) => {
            $($t.$c = region(&$file, &mut $at, $rows)?;)*
        };
    }
    row_columns!(place!(t, file, at, rows));
    *t.filing.0.get_mut().map_err(|_| CacheError::Poisoned)? = Some(Filing {
        staged,
        file,
        end: at,
    });
    Ok(t)
}

/// Number of columns in [`row_columns!`].
const ROW_COLUMNS: usize = {
    macro_rules! count {
        (; $($c:ident),*) => { [$(stringify!($c)),*].len() };
    }
    row_columns!(count!())
};

/// A column of `rows` values of `T` at byte `at` of `file` (advanced past it, aligned).
fn region<T: Pod>(file: &File, at: &mut usize, rows: usize) -> Result<Column<T>, CacheError> {
    let bytes = rows * size_of::<T>();
    // The region's blocks are allocated before it is mapped, while a full disk is still an
    // error: a store into a mapped hole the file system cannot back is a SIGBUS, which kills
    // the process. Without them the table is built in memory instead (the caller's fallback).
    reserve(file, *at, bytes).map_err(|source| CacheError::Reserve { bytes, source })?;
    let map = map_mut(file, *at, bytes)?;
    let column = Column::filed(map, *at).ok_or(CacheError::Misaligned)?;
    *at += bytes + padding(bytes);
    Ok(column)
}

/// Allocates the blocks of bytes `offset..offset + len` of `file` (`posix_fallocate(3)`, which
/// writes zeros where the file system has no `fallocate`), so that stores through a mapping of
/// them cannot fault for want of space.
#[allow(unsafe_code)]
fn reserve(file: &File, offset: usize, len: usize) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let (Ok(offset), Ok(len)) = (libc::off_t::try_from(offset), libc::off_t::try_from(len)) else {
        return Err(std::io::Error::other("too large"));
    };
    // SAFETY: `posix_fallocate` only changes the size and allocation of the open file behind the
    // descriptor, which `file` owns and keeps open for the call; it touches no memory of ours.
    let code = unsafe { libc::posix_fallocate(file.as_raw_fd(), offset, len) };
    if code == 0 {
        Ok(())
    } else {
        Err(std::io::Error::from_raw_os_error(code))
    }
}

/// Maps `len` bytes of `file` from `offset`, writable and shared with the file.
#[allow(unsafe_code)]
fn map_mut(file: &File, offset: usize, len: usize) -> std::io::Result<memmap2::MmapMut> {
    // SAFETY: the file is the staged temporary this process created and sizes
    // (`sy_rundir::stage_open`); nobody else writes it until it is renamed into place, and each
    // region is mapped once, by the column that owns it.
    let map = unsafe {
        memmap2::MmapOptions::new()
            .offset(offset as u64)
            .len(len)
            .map_mut(file)?
    };
    // Written once, front to back: no readahead of the file's holes, whose large folios were
    // most of sy-fit's load time on a VM (see [`PAGE`]); then every page faulted in at once, in
    // the kernel (a quarter less system time than a fault per page as the rows arrive). The
    // region is what the rows need (the Parquet footers' count), so no page is made for
    // nothing; a kernel without `MADV_POPULATE_WRITE` (before 5.14) faults them as they come.
    // Both are hints: a mapping that refuses them is written all the same.
    #[cfg(unix)]
    let _ = map.advise(memmap2::Advice::Random);
    #[cfg(target_os = "linux")]
    let _ = map.advise(memmap2::Advice::PopulateWrite);
    Ok(map)
}

/// Writes `table`, loaded from what `key` names, beside `path` (renamed into place by the
/// caller's [`sy_rundir::Staged::commit`]): into the file the table was built in, if it was
/// ([`filed_table`]), after its regions; otherwise into a new one.
pub(crate) fn stage(
    table: &ProbeTable,
    key: &CacheKey,
    path: &Path,
) -> Result<sy_rundir::Staged, CacheError> {
    let filing = table
        .filing
        .0
        .lock()
        .map_err(|_| CacheError::Poisoned)?
        .take();
    let (staged, file, end) = match filing {
        Some(f) => (f.staged, f.file, f.end),
        None => {
            let (staged, file) = sy_rundir::stage_open(path)?;
            (staged, file, ALIGN)
        }
    };
    let columns = columns(table);
    let mut at = end;
    let mut placed = Vec::with_capacity(columns.len());
    let mut to_write = Vec::new();
    for (name, bytes, in_file) in &columns {
        let start = in_file.unwrap_or_else(|| {
            to_write.push(*bytes);
            let start = at;
            at += bytes.len() + padding(bytes.len());
            start
        });
        placed.push((name.to_string(), start, bytes.len(), crc32fast::hash(bytes)));
    }
    let header = Header {
        kind: KIND.to_string(),
        schema_version: sy_rundir::PROBE_CACHE_SCHEMA_VERSION,
        sy_version: env!("CARGO_PKG_VERSION").to_string(),
        key: key.clone(),
        rows: table.len(),
        pairs: table.pairs.len(),
        text_bytes: table.probe_text.len(),
        runs: table.conditions.runs.values.clone(),
        conditions: table.conditions.entries(),
        models: table.models.values.clone(),
        decode_lengths: table.decode_lengths.values.clone(),
        files: table.files.clone(),
        skipped: table.skipped.clone(),
        columns: placed,
    };
    let header = serde_json::to_vec(&header).map_err(CacheError::Encode)?;
    // Every byte is checksummed and verified on reading: no sync needed.
    write_frame(&file, end, &to_write, &header)?;
    Ok(staged)
}

/// The magic bytes at the start, `columns` one after another from byte `end` (each padded),
/// then the header, its CRC-32 and length and the magic bytes; the file ends there.
fn write_frame(file: &File, end: usize, columns: &[&[u8]], header: &[u8]) -> std::io::Result<()> {
    use std::io::{Seek, SeekFrom, Write};
    // A page a write: larger writes make the page cache allocate large folios, which cost more
    // than the whole write on a VM (see [`PAGE`]).
    let mut out = std::io::BufWriter::with_capacity(PAGE, file);
    out.write_all(MAGIC)?;
    out.write_all(&[0; ALIGN - MAGIC.len()])?;
    out.seek(SeekFrom::Start(end as u64))?;
    for bytes in columns {
        for page in bytes.chunks(PAGE) {
            out.write_all(page)?;
        }
        out.write_all(&[0; ALIGN][..padding(bytes.len())])?;
    }
    out.write_all(header)?;
    out.write_all(&u64::from(crc32fast::hash(header)).to_le_bytes())?;
    out.write_all(&(header.len() as u64).to_le_bytes())?;
    out.write_all(MAGIC)?;
    let len = out.stream_position()?;
    out.flush()?;
    drop(out);
    file.set_len(len)
}

/// Maps `file` read-only.
#[allow(unsafe_code)]
fn map(file: &File) -> std::io::Result<memmap2::Mmap> {
    // SAFETY: a mapping is sound while nobody changes the file's bytes in place. sy replaces the
    // cache only by renaming a new file over it (`sy_rundir::Staged::commit`), which leaves this
    // mapping on the old inode. Another process truncating the file in place would make a read
    // fault (SIGBUS), the known limit of every mapped reader (ripgrep, Arrow IPC). The bytes are
    // otherwise untrusted: `open` checks every length, alignment and index before use.
    unsafe { memmap2::Mmap::map(file) }
}

/// The table cached at `path`, if it was made from `files` with the options `o` and passes
/// every check, with the key it was made with (the caller compares the files' digests, which
/// it may still be computing); otherwise why not.
pub(crate) fn open(
    path: &Path,
    files: &[std::path::PathBuf],
    o: &LoadOptions,
) -> Result<(CacheKey, ProbeTable), CacheError> {
    let file = File::open(path)?;
    let map = Arc::new(map(&file)?);
    let header = read_header(&map)?;
    if !header.key.names(files, o) {
        return Err(CacheError::OtherRecords);
    }
    let key = header.key.clone();
    let table = table_of(&map, header)?;
    check(&table)?;
    Ok((key, table))
}

fn read_header(map: &[u8]) -> Result<Header, CacheError> {
    let n = map.len();
    let tail = n.checked_sub(24).ok_or(CacheError::Short)?;
    if map.get(..8) != Some(MAGIC) || map.get(n - 8..) != Some(MAGIC) {
        return Err(CacheError::Magic);
    }
    let word = |at: usize| {
        let mut w = [0; 8];
        w.copy_from_slice(&map[at..at + 8]);
        u64::from_le_bytes(w)
    };
    let len = usize::try_from(word(tail + 8)).map_err(CacheError::HeaderLength)?;
    let start = tail.checked_sub(len).ok_or(CacheError::HeaderPastStart)?;
    let bytes = &map[start..tail];
    if u64::from(crc32fast::hash(bytes)) != word(tail) {
        return Err(CacheError::HeaderChecksum);
    }
    let header: Header = serde_json::from_slice(bytes).map_err(CacheError::Header)?;
    if header.kind != KIND || header.schema_version != sy_rundir::PROBE_CACHE_SCHEMA_VERSION {
        return Err(CacheError::Layout {
            kind: header.kind,
            version: header.schema_version,
            expected_kind: KIND,
            expected: sy_rundir::PROBE_CACHE_SCHEMA_VERSION,
        });
    }
    if header.sy_version != env!("CARGO_PKG_VERSION") {
        return Err(CacheError::OtherBuild(header.sy_version));
    }
    Ok(header)
}

/// Finds the header's columns in the mapped file.
struct Columns<'a> {
    map: &'a Arc<memmap2::Mmap>,
    header: &'a Header,
}

impl Columns<'_> {
    fn get<T: Pod>(&self, name: &str, len: usize) -> Result<Column<T>, CacheError> {
        let (_, start, bytes, crc) = self
            .header
            .columns
            .iter()
            .find(|(n, ..)| n == name)
            .ok_or_else(|| CacheError::ColumnMissing(name.to_string()))?;
        if Some(*bytes) != len.checked_mul(size_of::<T>()) {
            return Err(CacheError::ColumnSize {
                name: name.to_string(),
                bytes: *bytes,
                len,
            });
        }
        let column = Column::mapped(self.map, *start, len)
            .ok_or_else(|| CacheError::ColumnPlace(name.to_string()))?;
        if crc32fast::hash(column.bytes()) != *crc {
            return Err(CacheError::ColumnChecksum(name.to_string()));
        }
        Ok(column)
    }
}

fn table_of(map: &Arc<memmap2::Mmap>, h: Header) -> Result<ProbeTable, CacheError> {
    let c = Columns { map, header: &h };
    let rows = h.rows;
    let mut table = ProbeTable {
        probe_text: c.get("probe_text", h.text_bytes)?,
        probe_end: c.get("probe_end", rows)?,
        pairs: c.get("pairs", h.pairs)?,
        ..ProbeTable::default()
    };
    macro_rules! read {
        ($table:ident, $c:ident, $rows:ident; $($col:ident),*) => {
            $($table.$col = $c.get(stringify!($col), $rows)?;)*
        };
    }
    row_columns!(read!(table, c, rows));
    table.conditions = ConditionIndex::from_entries(h.runs, h.conditions)?;
    table.models = Interner::from_values(h.models);
    table.decode_lengths = Interner::from_values(h.decode_lengths);
    table.files = h.files;
    table.skipped = h.skipped;
    Ok(table)
}

/// Every index and code the columns hold is in range (see the module docs).
fn check(t: &ProbeTable) -> Result<(), CacheError> {
    let text = std::str::from_utf8(&t.probe_text).map_err(CacheError::ProbeText)?;
    let bad = |column: &'static str, row: usize| Err(CacheError::OutOfRange { column, row });
    // Each column as a slice once, not through `Column::deref` per row.
    let (ends, condition, model) = (&*t.probe_end, &*t.condition, &*t.model);
    let (decode_length, bits, origins) = (&*t.decode_length, &*t.present, &*t.origins);
    let (phase, role, status, pick) = (&*t.phase, &*t.role, &*t.status, &*t.pick);
    let (conditions, models) = (t.conditions.count(), t.models.values.len());
    let (decode_lengths, files) = (t.decode_lengths.values.len(), t.files.len());
    let mut start = 0;
    for i in 0..t.len() {
        let end = usize::try_from(ends[i]).unwrap_or(usize::MAX);
        if end < start || end > text.len() || !text.is_char_boundary(end) {
            return bad("probe_end", i);
        }
        start = end;
        if condition[i] as usize >= conditions {
            return bad("condition", i);
        }
        if model[i] as usize >= models {
            return bad("model", i);
        }
        let d = decode_length[i];
        if d != NO_TEXT && d as usize >= decode_lengths {
            return bad("decode_length", i);
        }
        if phase[i] > 1 || role[i] > 1 || status[i] > 1 || pick[i] > 3 {
            return bad("phase, role, status or pick", i);
        }
        if bits[i] & !present::ALL != 0 {
            return bad("present", i);
        }
        if origins[i].file as usize >= files {
            return bad("origins", i);
        }
    }
    if start != text.len() {
        return Err(CacheError::TextTooLong);
    }
    check_pairs(t)
}

/// Each pair is a load-phase efficient row and a load-phase capable row.
fn check_pairs(t: &ProbeTable) -> Result<(), CacheError> {
    let load = codes::phase(crate::record::Phase::Load);
    let row_is = |i: u32, role: u8| {
        let i = i as usize;
        i < t.len() && t.phase[i] == load && t.role[i] == role
    };
    let efficient = codes::role(crate::record::Model::Efficient);
    let capable = codes::role(crate::record::Model::Capable);
    match t
        .pairs
        .iter()
        .position(|&[e, c]| !row_is(e, efficient) || !row_is(c, capable))
    {
        Some(p) => Err(CacheError::Pair(p)),
        None => Ok(()),
    }
}
