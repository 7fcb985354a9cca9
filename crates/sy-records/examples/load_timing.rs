//! Times the stages of loading a record file: the Parquet decode alone (every column, the probe
//! table's columns only, and those in the row-group slices the loader reads), `load_records`
//! (every field, as `Record`s, with `--records`) and `ProbeTable::load` (the calibration columns,
//! validated and paired; with `--table`, that alone, e.g. under `perf record`).
//!
//! ```text
//! cargo run --release -p sy-records --example load_timing -- /tmp/sybench/records.parquet
//! ```

use std::path::PathBuf;
use std::time::Instant;

use polars::prelude::*;
use sy_records::{LoadOptions, PROBE_TABLE_COLUMNS, ProbeTable, load_records};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = PathBuf::from(std::env::args().nth(1).ok_or("usage: load_timing FILE")?);
    if std::env::args().nth(2).as_deref() == Some("--table") {
        let t = Instant::now();
        let table = ProbeTable::load(std::slice::from_ref(&path), &LoadOptions::default())?;
        println!("ProbeTable::load: {:?} ({} rows)", t.elapsed(), table.len());
        return Ok(());
    }
    let t = Instant::now();
    let df = ParquetReader::new(std::fs::File::open(&path)?).finish()?;
    println!(
        "parquet decode, all columns:   {:?} ({} rows × {} columns)",
        t.elapsed(),
        df.height(),
        df.width()
    );
    drop(df);
    let t = Instant::now();
    let columns: Vec<String> = PROBE_TABLE_COLUMNS.iter().map(|c| c.to_string()).collect();
    let df = ParquetReader::new(std::fs::File::open(&path)?)
        .with_columns(Some(columns.clone()))
        .finish()?;
    println!(
        "parquet decode, table columns: {:?} ({} columns)",
        t.elapsed(),
        df.width()
    );
    drop(df);
    let t = Instant::now();
    let total = ParquetReader::new(std::fs::File::open(&path)?).num_rows()?;
    let mut offset = 0;
    while offset < total {
        let len = 131_072.min(total - offset);
        let df = ParquetReader::new(std::fs::File::open(&path)?)
            .with_columns(Some(columns.clone()))
            .with_slice(Some((offset, len)))
            .finish()?;
        offset += df.height().max(1);
    }
    println!(
        "parquet decode, table columns, in row-group slices: {:?}",
        t.elapsed()
    );
    let t = Instant::now();
    let table = ProbeTable::load(std::slice::from_ref(&path), &LoadOptions::default())?;
    println!(
        "ProbeTable::load:              {:?} ({} rows, {} pairs)",
        t.elapsed(),
        table.len(),
        table.pair_count()
    );
    drop(table);
    if std::env::args().nth(2).as_deref() == Some("--records") {
        let t = Instant::now();
        let loaded = load_records(std::slice::from_ref(&path), &LoadOptions::default())?;
        println!(
            "load_records:                  {:?} ({} records of {} bytes)",
            t.elapsed(),
            loaded.records.len(),
            std::mem::size_of::<sy_records::Record>()
        );
    }
    Ok(())
}
