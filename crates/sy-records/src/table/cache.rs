//! The probe-table cache (`probe-table.cache` in a run directory, [`sy_run::Artifact::ProbeCache`]):
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
use std::sync::Arc;

use bytemuck::Pod;
use serde::{Deserialize, Serialize};

use super::column::Column;
use super::{ConditionIndex, Interner, NO_TEXT, ProbeTable, codes, present};
use crate::error::RowIssue;
use crate::load::{FileSummary, LoadOptions};

const MAGIC: &[u8; 8] = b"SYPROBE\0";
/// Where the first column starts, and every column's alignment.
const ALIGN: usize = 64;
const KIND: &str = "sy probe-table cache";

/// What a table was loaded from: each record file's path and SHA-256, and the load options.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct CacheKey {
    pub files: Vec<(String, String)>,
    pub skip_invalid: bool,
}

impl CacheKey {
    pub(crate) fn new(files: &[std::path::PathBuf], digests: &[String], o: &LoadOptions) -> Self {
        CacheKey {
            files: files
                .iter()
                .map(|p| p.display().to_string())
                .zip(digests.iter().cloned())
                .collect(),
            skip_invalid: o.skip_invalid,
        }
    }
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

/// Every column of a table as bytes, by name, in file order.
pub(super) fn columns(t: &ProbeTable) -> Vec<(&'static str, &[u8])> {
    let mut columns = vec![
        ("probe_text", t.probe_text.bytes()),
        ("probe_end", t.probe_end.bytes()),
    ];
    macro_rules! push {
        ($columns:ident, $t:ident; $($c:ident),*) => {
            $($columns.push((stringify!($c), $t.$c.bytes()));)*
        };
    }
    row_columns!(push!(columns, t));
    columns.push(("pairs", t.pairs.bytes()));
    columns
}

fn padding(at: usize) -> usize {
    (ALIGN - at % ALIGN) % ALIGN
}

/// Writes `table`, loaded from what `key` names, beside `path` (renamed into place by the
/// caller's [`sy_run::Staged::commit`]).
pub(crate) fn stage(
    table: &ProbeTable,
    key: &CacheKey,
    path: &Path,
) -> Result<sy_run::Staged, String> {
    let columns = columns(table);
    let mut at = ALIGN;
    let mut placed = Vec::with_capacity(columns.len());
    for (name, bytes) in &columns {
        placed.push((name.to_string(), at, bytes.len(), crc32fast::hash(bytes)));
        at += bytes.len() + padding(bytes.len());
    }
    let header = Header {
        kind: KIND.to_string(),
        schema_version: sy_run::PROBE_CACHE_SCHEMA_VERSION,
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
    let header = serde_json::to_vec(&header).map_err(|e| e.to_string())?;
    // Every byte is checksummed and verified on reading: no sync needed.
    sy_run::stage_file(path, sy_run::Durability::Verified, |out| {
        out.write_all(MAGIC)?;
        out.write_all(&[0; ALIGN - MAGIC.len()])?;
        for (_, bytes) in &columns {
            out.write_all(bytes)?;
            out.write_all(&[0; ALIGN][..padding(bytes.len())])?;
        }
        out.write_all(&header)?;
        out.write_all(&u64::from(crc32fast::hash(&header)).to_le_bytes())?;
        out.write_all(&(header.len() as u64).to_le_bytes())?;
        out.write_all(MAGIC)
    })
    .map_err(|e| e.to_string())
}

/// Maps `file` read-only.
#[allow(unsafe_code)]
fn map(file: &File) -> std::io::Result<memmap2::Mmap> {
    // SAFETY: a mapping is sound while nobody changes the file's bytes in place. sy replaces the
    // cache only by renaming a new file over it (`sy_run::Staged::commit`), which leaves this
    // mapping on the old inode. Another process truncating the file in place would make a read
    // fault (SIGBUS), the known limit of every mapped reader (ripgrep, Arrow IPC). The bytes are
    // otherwise untrusted: `open` checks every length, alignment and index before use.
    unsafe { memmap2::Mmap::map(file) }
}

/// The table cached at `path`, if it was made from what `key` names and passes every check;
/// otherwise why not.
pub(crate) fn open(path: &Path, key: &CacheKey) -> Result<ProbeTable, String> {
    let file = File::open(path).map_err(|e| e.to_string())?;
    let map = Arc::new(map(&file).map_err(|e| e.to_string())?);
    let header = read_header(&map)?;
    if header.key != *key {
        return Err("made from other record files or load options".to_string());
    }
    let table = table_of(&map, header)?;
    check(&table)?;
    Ok(table)
}

fn read_header(map: &[u8]) -> Result<Header, String> {
    let n = map.len();
    let tail = n.checked_sub(24).ok_or("shorter than its frame")?;
    if map.get(..8) != Some(MAGIC) || map.get(n - 8..) != Some(MAGIC) {
        return Err("not a probe-table cache (magic bytes)".to_string());
    }
    let word = |at: usize| {
        let mut w = [0; 8];
        w.copy_from_slice(&map[at..at + 8]);
        u64::from_le_bytes(w)
    };
    let len = usize::try_from(word(tail + 8)).map_err(|e| e.to_string())?;
    let start = tail
        .checked_sub(len)
        .ok_or("header length past the start")?;
    let bytes = &map[start..tail];
    if u64::from(crc32fast::hash(bytes)) != word(tail) {
        return Err("header checksum mismatch".to_string());
    }
    let header: Header = serde_json::from_slice(bytes).map_err(|e| format!("header: {e}"))?;
    if header.kind != KIND || header.schema_version != sy_run::PROBE_CACHE_SCHEMA_VERSION {
        return Err(format!(
            "layout {} version {}, expected {KIND} version {}",
            header.kind,
            header.schema_version,
            sy_run::PROBE_CACHE_SCHEMA_VERSION
        ));
    }
    if header.sy_version != env!("CARGO_PKG_VERSION") {
        return Err(format!("written by sy {}", header.sy_version));
    }
    Ok(header)
}

/// Finds the header's columns in the mapped file.
struct Columns<'a> {
    map: &'a Arc<memmap2::Mmap>,
    header: &'a Header,
}

impl Columns<'_> {
    fn get<T: Pod>(&self, name: &str, len: usize) -> Result<Column<T>, String> {
        let (_, start, bytes, crc) = self
            .header
            .columns
            .iter()
            .find(|(n, ..)| n == name)
            .ok_or_else(|| format!("column {name} missing"))?;
        if Some(*bytes) != len.checked_mul(size_of::<T>()) {
            return Err(format!(
                "column {name}: {bytes} bytes, expected {len} values"
            ));
        }
        let column = Column::mapped(self.map, *start, len)
            .ok_or_else(|| format!("column {name}: out of the file or misaligned"))?;
        if crc32fast::hash(column.bytes()) != *crc {
            return Err(format!("column {name}: checksum mismatch"));
        }
        Ok(column)
    }
}

fn table_of(map: &Arc<memmap2::Mmap>, h: Header) -> Result<ProbeTable, String> {
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
fn check(t: &ProbeTable) -> Result<(), String> {
    let text = std::str::from_utf8(&t.probe_text).map_err(|e| format!("probe_text: {e}"))?;
    let bad = |column: &str, i: usize| Err(format!("column {column}, row {i}: out of range"));
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
        return Err("probe_text: longer than its rows".to_string());
    }
    check_pairs(t)
}

/// Each pair is a load-phase efficient row and a load-phase capable row.
fn check_pairs(t: &ProbeTable) -> Result<(), String> {
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
        Some(p) => Err(format!(
            "pairs, pair {p}: not an efficient and a capable load row"
        )),
        None => Ok(()),
    }
}
