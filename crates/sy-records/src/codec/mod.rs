//! How records are stored: the file formats and the flat column layout.
//!
//! - [`Format`]: Parquet, CSV or JSONL, by a file's extension.
//! - [`layout`]: the record's columns, listed once, in file order.
//! - [`cells`] and [`values`]: one cell read as the field it holds, and written back.
//! - [`rows`]: frames ↔ records; [`probe_columns`]: the probe table's columns of a frame.
//! - [`jsonl`]: append and crash recovery; [`write`]: Parquet / CSV / JSONL files.

pub(crate) mod cells;
pub mod jsonl;
pub(crate) mod layout;
pub(crate) mod probe_columns;
pub(crate) mod rows;
pub(crate) mod values;
pub(crate) mod write;

use std::path::Path;

use serde::{Deserialize, Serialize};

/// Record file format (by extension).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    Parquet,
    Csv,
    Jsonl,
}

impl Format {
    /// The format of a path by its extension (`.parquet`/`.pq`, `.csv`, `.jsonl`/`.ndjson`).
    pub fn from_path(path: &Path) -> Option<Format> {
        let ext = path.extension()?.to_str()?.to_ascii_lowercase();
        match ext.as_str() {
            "parquet" | "pq" => Some(Format::Parquet),
            "csv" => Some(Format::Csv),
            "jsonl" | "ndjson" => Some(Format::Jsonl),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_by_extension() {
        assert_eq!(
            Format::from_path(Path::new("a/r.PQ")),
            Some(Format::Parquet)
        );
        assert_eq!(
            Format::from_path(Path::new("r.ndjson")),
            Some(Format::Jsonl)
        );
        assert_eq!(Format::from_path(Path::new("r.csv")), Some(Format::Csv));
        assert_eq!(Format::from_path(Path::new("r.txt")), None);
        assert_eq!(Format::from_path(Path::new("records")), None);
    }
}
