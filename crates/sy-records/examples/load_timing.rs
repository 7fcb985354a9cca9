//! Times the stages of loading a record file: the Parquet decode alone, `load_records`
//! (decode + conversion + validation + pairing check) and `pair_probes`.
//!
//! ```text
//! cargo run --release -p sy-records --example load_timing -- /tmp/sybench/records.parquet
//! ```

use std::path::PathBuf;
use std::time::Instant;

use polars::prelude::*;
use sy_records::{LoadOptions, load_records, pair_probes};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = PathBuf::from(std::env::args().nth(1).ok_or("usage: load_timing FILE")?);
    let t = Instant::now();
    let df = ParquetReader::new(std::fs::File::open(&path)?).finish()?;
    println!(
        "parquet decode: {:?} ({} rows × {} columns)",
        t.elapsed(),
        df.height(),
        df.width()
    );
    drop(df);
    let t = Instant::now();
    let loaded = load_records(std::slice::from_ref(&path), &LoadOptions::default())?;
    println!(
        "load_records:   {:?} ({} records)",
        t.elapsed(),
        loaded.records.len()
    );
    let t = Instant::now();
    let pairs = pair_probes(&loaded.records)?;
    println!("pair_probes:    {:?} ({} pairs)", t.elapsed(), pairs.len());
    println!(
        "size_of Record: {} bytes",
        std::mem::size_of::<sy_records::Record>()
    );
    Ok(())
}
