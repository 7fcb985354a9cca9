#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! The probe table against the record loader: the same rows, the same pairs, the same errors
//! and skips, on real files of every format.

use std::path::{Path, PathBuf};

use sy_records::synth::{SynthSpec, generate};
use sy_records::{
    LoadOptions, Model, Phase, ProbeTable, Record, RecordsError, load_records, pair_indices,
    write_csv, write_records,
};

fn small() -> Vec<Record> {
    generate(&SynthSpec {
        conditions: 6,
        repeats: 2,
        q_n_axis: vec![512, 2048],
        q_f_axis: vec![0.0, 0.5],
        q_repeats: 1,
        ..SynthSpec::default()
    })
}

/// Every field the table holds equals the record's.
fn assert_rows_equal(table: &ProbeTable, records: &[Record], what: &str) {
    assert_eq!(table.len(), records.len(), "{what}");
    for (row, r) in table.rows().zip(records) {
        assert_eq!(row.run_id(), r.run_id, "{what}");
        assert_eq!(row.condition_id(), r.condition_id, "{what}");
        assert_eq!(row.probe_id(), r.probe_id, "{what}");
        assert_eq!(row.phase(), r.phase, "{what}");
        assert_eq!(row.role(), r.role, "{what}");
        assert_eq!(row.status(), r.status, "{what}");
        assert_eq!(row.repeat(), r.repeat, "{what}");
        assert_eq!(row.model(), r.model, "{what}");
        assert_eq!(row.planned_n(), r.planned_n, "{what}");
        assert_eq!(row.planned_f().to_bits(), r.planned_f.to_bits(), "{what}");
        assert_eq!(
            row.decode_length(),
            r.background.decode_length.as_deref(),
            "{what}"
        );
        assert_eq!(row.n(), r.observed.n, "{what}");
        assert_eq!(row.k(), r.observed.k, "{what}");
        assert_eq!(row.ttft_ms(), r.ttft_ms, "{what}");
        assert_eq!(row.sent_at_unix_ms(), r.sent_at_unix_ms, "{what}");
        assert_eq!(row.client_server_gap_ms(), r.client_server_gap_ms, "{what}");
        assert_eq!(row.rule_observation(), r.rule_observation(), "{what}");
    }
}

/// Both loaders give the same outcome on `path`: equal rows, skips and pairs, or equal errors.
fn assert_loaders_agree(path: &Path, options: &LoadOptions) -> Result<ProbeTable, RecordsError> {
    let paths = [path.to_path_buf()];
    let records = load_records(&paths, options);
    let table = ProbeTable::load(&paths, options);
    assert_table_agrees(path, &records, &table);
    // Through a cache: a Parquet file's table is built in the staged cache file.
    let cache = path.with_file_name("probe-table.cache");
    let filed = ProbeTable::load_cached(&paths, options, Some(&cache));
    assert_table_agrees(path, &records, &filed);
    drop(filed);
    let dir = path.parent().unwrap();
    let left: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n.to_string_lossy().starts_with(".probe-table.cache"))
        .collect();
    assert!(left.is_empty() && !cache.exists(), "unsaved: {left:?}");
    table
}

/// The table loader's outcome is the record loader's: the same rows, skips, files and pairs, or
/// the same error.
fn assert_table_agrees(
    path: &Path,
    records: &Result<sy_records::LoadedRecords, RecordsError>,
    table: &Result<ProbeTable, RecordsError>,
) {
    match (records, table) {
        (Ok(l), Ok(t)) => {
            assert_rows_equal(t, &l.records, &path.display().to_string());
            assert_eq!(t.skipped(), l.skipped.as_slice());
            assert_eq!(t.files(), l.files.as_slice());
            let pairs: Vec<(usize, usize)> = t
                .pairs()
                .map(|p| (p.efficient.index(), p.capable.index()))
                .collect();
            assert_eq!(pairs, pair_indices(&l.records).unwrap());
            assert_eq!(t.pick_summary(), sy_records::PickSummary::of(&l.records));
        }
        (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string()),
        _ => panic!(
            "the loaders disagree on {}: records {:?}, table {:?}",
            path.display(),
            records
                .as_ref()
                .map(|l| l.records.len())
                .map_err(ToString::to_string),
            table
                .as_ref()
                .map(ProbeTable::len)
                .map_err(ToString::to_string),
        ),
    }
}

#[test]
fn every_format_loads_the_same_rows_and_pairs() {
    let dir = tempfile::tempdir().unwrap();
    let mut records = small();
    records[1].observed.r = None;
    records[2].client_server_gap_ms = Some(0.25);
    let last = records.len() - 1;
    records[last].status = sy_records::Status::Error;
    records[last].ttft_ms = None;
    for name in ["r.parquet", "r.csv", "r.jsonl"] {
        let path = dir.path().join(name);
        write_records(&records, &path).unwrap();
        let t = assert_loaders_agree(&path, &LoadOptions::default()).unwrap();
        assert_rows_equal(&t, &records, name);
        let load = records.iter().filter(|r| r.phase == Phase::Load).count();
        assert_eq!(t.pair_count(), load / 2);
    }
}

#[test]
fn merged_files_key_conditions_by_run() {
    let dir = tempfile::tempdir().unwrap();
    let mut paths: Vec<PathBuf> = Vec::new();
    for run in ["node-a", "node-b"] {
        let mut rs = small();
        for r in &mut rs {
            r.run_id = run.to_string();
        }
        let path = dir.path().join(format!("{run}.parquet"));
        write_records(&rs, &path).unwrap();
        paths.push(path);
    }
    let t = ProbeTable::load(&paths, &LoadOptions::default()).unwrap();
    let one = ProbeTable::load(&paths[..1], &LoadOptions::default()).unwrap();
    assert_eq!(t.len(), 2 * one.len());
    assert_eq!(t.pair_count(), 2 * one.pair_count());
    assert_eq!(t.condition_count(), 2 * one.condition_count());
    let (run, _) = t.condition_key(t.row(t.len() - 1).condition());
    assert_eq!(run, "node-b");
}

fn csv_edit(path: &Path, records: &[Record], column: &str, row: usize, value: &str) {
    write_csv(records, path).unwrap();
    let text = std::fs::read_to_string(path).unwrap();
    let mut rows: Vec<Vec<String>> = text
        .lines()
        .map(|l| l.split(',').map(str::to_string).collect())
        .collect();
    let c = rows[0].iter().position(|h| h == column).unwrap();
    rows[row][c] = value.to_string();
    let out: Vec<String> = rows.iter().map(|r| r.join(",")).collect();
    std::fs::write(path, out.join("\n") + "\n").unwrap();
}

#[test]
fn bad_cells_give_the_same_error_and_skips_in_both_loaders() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.csv");
    let records: Vec<Record> = small()
        .into_iter()
        .filter(|r| r.observed.endpoint.is_none())
        .collect();
    let first_load = records.iter().position(|r| r.phase == Phase::Load).unwrap() + 1;
    let cases: Vec<(&str, usize, &str)> = vec![
        ("ttft_ms", 3, "fast"),
        ("ttft_ms", 2, "NaN"),
        ("ttft_ms", 5, "-3.5"),
        ("k", 4, "999999999"),
        ("role", 6, "medium"),
        ("role", first_load, "medium"),
        ("phase", 2, "warmup"),
        ("status", 7, "maybe"),
        ("r", 1, "2.5"),
        ("n", first_load + 1, "-1"),
        ("repeat", first_load, "-2"),
        ("run_id", 3, ""),
        ("probe_id", first_load + 2, ""),
        ("schema_version", 2, "99"),
        ("schema_version", 3, "0"),
        ("schedulable", 4, "perhaps"),
        ("planned_f", 2, "half"),
        ("condition_id", first_load + 1, "elsewhere"),
    ];
    for (column, row, value) in cases {
        csv_edit(&path, &records, column, row, value);
        let strict = assert_loaders_agree(&path, &LoadOptions::default());
        assert!(strict.is_err(), "{column} = {value:?} was accepted");
        let skipping = assert_loaders_agree(&path, &LoadOptions { skip_invalid: true });
        let t = skipping.unwrap();
        assert!(!t.skipped().is_empty(), "{column}");
    }
}

#[test]
fn the_table_of_records_in_memory_matches_the_loaded_one() {
    let dir = tempfile::tempdir().unwrap();
    let records = small();
    let path = dir.path().join("r.parquet");
    write_records(&records, &path).unwrap();
    let loaded = ProbeTable::load(&[path], &LoadOptions::default()).unwrap();
    let memory = ProbeTable::from_records(&records).unwrap();
    assert_rows_equal(&memory, &records, "from_records");
    assert_eq!(loaded.pair_count(), memory.pair_count());
}

/// Writes `df` as Parquet (the table reads sy's own Parquet files on its native path).
fn write_frame(mut df: polars::prelude::DataFrame, path: &Path) {
    let file = std::fs::File::create(path).unwrap();
    polars::prelude::ParquetWriter::new(file)
        .finish(&mut df)
        .unwrap();
}

/// `df` with cell `row` of the text column `column` replaced by `value` (`None`: null).
fn with_text(
    df: &polars::prelude::DataFrame,
    column: &str,
    row: usize,
    value: Option<&str>,
) -> polars::prelude::DataFrame {
    use polars::prelude::*;
    let mut cells: Vec<Option<String>> = df
        .column(column)
        .unwrap()
        .str()
        .unwrap()
        .iter()
        .map(|c| c.map(str::to_string))
        .collect();
    cells[row] = value.map(str::to_string);
    let mut out = df.clone();
    out.with_column(Column::new(column.into(), cells)).unwrap();
    out
}

/// A record edit, named, and whether the rules accept the edited record.
type Edit = (&'static str, fn(&mut Record), bool);

#[test]
fn parquet_cells_give_the_same_rows_errors_and_skips_in_both_loaders() {
    use polars::prelude::*;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.parquet");
    let records = small();
    let first_load = records.iter().position(|r| r.phase == Phase::Load).unwrap();
    let edits: Vec<Edit> = vec![
        ("ttft NaN", |r| r.ttft_ms = Some(f64::NAN), false),
        ("ttft negative", |r| r.ttft_ms = Some(-3.5), false),
        ("ttft missing", |r| r.ttft_ms = None, false),
        ("ttft infinite", |r| r.ttft_ms = Some(f64::INFINITY), false),
        (
            "K > N",
            |r| r.observed.k = r.observed.n.map(|n| n + 1),
            false,
        ),
        ("schema 0", |r| r.schema_version = 0, false),
        ("schema 99", |r| r.schema_version = 99, false),
        ("empty run", |r| r.run_id.clear(), false),
        ("empty condition", |r| r.condition_id.clear(), false),
        ("empty probe", |r| r.probe_id.clear(), false),
        (
            "other worker",
            |r| {
                r.reserved_worker_id = Some(1);
                r.served_worker_id = Some(2);
            },
            false,
        ),
        (
            "other rank",
            |r| {
                r.reserved_dp_rank = Some(0);
                r.served_dp_rank = Some(3);
            },
            false,
        ),
        (
            "error without ttft",
            |r| {
                r.status = sy_records::Status::Error;
                r.ttft_ms = None;
            },
            true,
        ),
        (
            "no observation",
            |r| {
                r.observed.k = None;
                r.observed.r = None;
                r.observed.schedulable = None;
            },
            true,
        ),
    ];
    for (what, edit, valid) in &edits {
        for row in [1, first_load, first_load + 3] {
            let mut rs = records.clone();
            edit(&mut rs[row]);
            write_records(&rs, &path).unwrap();
            let strict = assert_loaders_agree(&path, &LoadOptions::default());
            assert_eq!(strict.is_ok(), *valid, "{what} in row {row}");
            let skipping = assert_loaders_agree(&path, &LoadOptions { skip_invalid: true });
            assert_eq!(skipping.unwrap().skipped().is_empty(), *valid, "{what}");
        }
    }
    // Probes that do not pair: another condition or repeat, a role twice.
    for edit in [
        |r: &mut Record| r.condition_id = "elsewhere".into(),
        |r: &mut Record| r.repeat += 7,
        |r: &mut Record| {
            r.role = match r.role {
                Model::Efficient => Model::Capable,
                Model::Capable => Model::Efficient,
            }
        },
    ] {
        let mut rs = records.clone();
        edit(&mut rs[first_load + 1]);
        write_records(&rs, &path).unwrap();
        assert!(assert_loaders_agree(&path, &LoadOptions::default()).is_err());
        assert_loaders_agree(&path, &LoadOptions { skip_invalid: true }).unwrap();
    }
    // Cells a Record cannot hold: unknown text, nulls in required columns, other column types.
    let frame = sy_records::records_to_frame(&records).unwrap();
    let mut frames = vec![
        ("phase", with_text(&frame, "phase", 2, Some("warmup"))),
        (
            "role",
            with_text(&frame, "role", first_load, Some(" capable")),
        ),
        ("status", with_text(&frame, "status", 3, Some("maybe"))),
        ("null run", with_text(&frame, "run_id", 4, None)),
        (
            "null model",
            with_text(&frame, "model", first_load + 1, None),
        ),
    ];
    let mut as_float = frame.clone();
    let n = as_float
        .column("n")
        .unwrap()
        .cast(&DataType::Float64)
        .unwrap();
    as_float.with_column(n).unwrap();
    frames.push(("n as float", as_float));
    let mut signed = frame.clone();
    let repeat = signed
        .column("repeat")
        .unwrap()
        .cast(&DataType::Int64)
        .unwrap();
    signed.with_column(repeat).unwrap();
    frames.push(("repeat as i64", signed));
    for (what, df) in frames {
        write_frame(df, &path);
        let strict = assert_loaders_agree(&path, &LoadOptions::default());
        assert_eq!(strict.is_ok(), what.contains(" as "), "{what}");
        assert_loaders_agree(&path, &LoadOptions { skip_invalid: true }).unwrap();
    }
}

/// A file of several Parquet slices (the loader decodes the next slice on a second thread while
/// it converts the last): the same rows and pairs as the record loader, and a bad row in a later
/// slice named by its row, or skipped alone, with the slices around it read in full.
#[test]
fn a_file_of_several_slices_loads_and_fails_at_the_right_row() {
    let dir = tempfile::tempdir().unwrap();
    let mut records = generate(&SynthSpec {
        conditions: 1_350,
        repeats: 100,
        q_n_axis: vec![512],
        q_f_axis: vec![0.0],
        q_repeats: 1,
        ..SynthSpec::default()
    });
    assert!(
        records.len() > 2 * sy_records::PARQUET_ROW_GROUP_ROWS,
        "three or more slices"
    );
    let good = dir.path().join("good.parquet");
    write_records(&records, &good).unwrap();
    let t = assert_loaders_agree(&good, &LoadOptions::default()).unwrap();
    assert_eq!(t.len(), records.len());

    // Row numbers are 1-based; this one lies in the second of the file's three 131,072-row slices.
    let bad_row = 2 * sy_records::PARQUET_ROW_GROUP_ROWS - 7;
    records[bad_row - 1].ttft_ms = Some(-1.0);
    let bad = dir.path().join("bad.parquet");
    write_records(&records, &bad).unwrap();
    let err = assert_loaders_agree(&bad, &LoadOptions::default()).unwrap_err();
    match &err {
        RecordsError::Row(issue) => {
            assert_eq!(
                (issue.row, issue.field.as_str()),
                (bad_row, "ttft_ms"),
                "{err}"
            );
        }
        other => panic!("expected a row error, got {other}"),
    }
    let skipping = assert_loaders_agree(&bad, &LoadOptions { skip_invalid: true }).unwrap();
    // The bad row and its partner are dropped; every other row is read.
    assert_eq!(skipping.len(), records.len() - 2);
    // The bad row's slice was first appended natively up to it, then taken back and read again
    // row by row: the conditions (and which are load-phase ones) are those of the kept rows.
    let dropped = records[bad_row - 1].probe_id.clone();
    let kept: Vec<Record> = records
        .into_iter()
        .filter(|r| r.probe_id != dropped)
        .collect();
    let memory = ProbeTable::from_records(&kept).unwrap();
    assert_eq!(skipping.condition_count(), memory.condition_count());
    assert!(skipping.load_conditions().eq(memory.load_conditions()));
    assert_eq!(skipping.pair_count(), memory.pair_count());
}
