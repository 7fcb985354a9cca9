//! Why a probe-table cache is not used or cannot be written: the reason is logged and the
//! records are read again (the cache only saves time).

/// Why a cache file is refused, or cannot be staged or written.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// The file could not be opened, mapped, sized or written.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// The staged file could not be created beside the cache.
    #[error("{0}")]
    Stage(#[from] sy_rundir::RunError),
    /// Another thread failed while holding the table's cache file.
    #[error("poisoned lock: another task failed inside")]
    Poisoned,
    #[error("no rows to reserve")]
    NoRows,
    #[error("too many rows")]
    TooManyRows,
    #[error("cannot reserve {bytes} bytes of the staged cache file: {source}")]
    Reserve {
        bytes: usize,
        source: std::io::Error,
    },
    #[error("a region is misaligned")]
    Misaligned,
    /// The header could not be encoded.
    #[error("{0}")]
    Encode(serde_json::Error),
    /// Made from other record files or load options.
    #[error("made from other record files or load options")]
    OtherRecords,
    #[error("shorter than its frame")]
    Short,
    #[error("not a probe-table cache (magic bytes)")]
    Magic,
    #[error("{0}")]
    HeaderLength(std::num::TryFromIntError),
    #[error("header length past the start")]
    HeaderPastStart,
    #[error("header checksum mismatch")]
    HeaderChecksum,
    #[error("header: {0}")]
    Header(serde_json::Error),
    #[error("layout {kind} version {version}, expected {expected_kind} version {expected}")]
    Layout {
        kind: String,
        version: u32,
        expected_kind: &'static str,
        expected: u32,
    },
    #[error("written by sy {0}")]
    OtherBuild(String),
    #[error("column {0} missing")]
    ColumnMissing(String),
    #[error("column {name}: {bytes} bytes, expected {len} values")]
    ColumnSize {
        name: String,
        bytes: usize,
        len: usize,
    },
    #[error("column {0}: out of the file or misaligned")]
    ColumnPlace(String),
    #[error("column {0}: checksum mismatch")]
    ColumnChecksum(String),
    #[error("probe_text: {0}")]
    ProbeText(std::str::Utf8Error),
    #[error("column {column}, row {row}: out of range")]
    OutOfRange { column: &'static str, row: usize },
    #[error("probe_text: longer than its rows")]
    TextTooLong,
    #[error("pairs, pair {0}: not an efficient and a capable load row")]
    Pair(usize),
    #[error("condition {condition}: run index {run} out of range")]
    RunIndex { condition: String, run: u32 },
    #[error("condition {condition} of run {run} listed twice")]
    ConditionTwice { condition: String, run: String },
}
