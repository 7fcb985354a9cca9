#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
//! Loading and validation on real files of every format.

use std::path::{Path, PathBuf};
use sy_selector::Model;

use sy_records::synth::{SynthSpec, generate, template_record};
use sy_records::{
    LoadOptions, Phase, Record, RecordsError, Status, load_records, write_csv, write_jsonl,
    write_parquet, write_records,
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

fn strict() -> LoadOptions {
    LoadOptions::default()
}

fn skipping() -> LoadOptions {
    LoadOptions { skip_invalid: true }
}

fn row_issue(e: RecordsError) -> sy_records::RowIssue {
    match e {
        RecordsError::Row(i) => i,
        other => panic!("expected a row error, got {other}"),
    }
}

#[test]
fn every_format_round_trips_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let mut records = small();
    // Exercise the awkward values: u64 ids above 2^63, missing observations, a failed probe.
    records[0].observed.worker_id = Some(u64::MAX - 7);
    records[1].observed.r = None;
    records[1].observed.endpoint = Some("dyn://a,b \"q\"".into());
    let last = records.len() - 1;
    records[last].status = Status::Error;
    records[last].ttft_ms = None;
    records[last].error_class = Some(sy_records::ErrorClass::StreamDropped);
    records[last].error_message = Some("dropped\nmid-way".into());
    for name in ["r.parquet", "r.csv", "r.jsonl"] {
        let path = dir.path().join(name);
        write_records(&records, &path).unwrap();
        let loaded = load_records(std::slice::from_ref(&path), &strict()).unwrap();
        assert_eq!(loaded.records.len(), records.len(), "{name}");
        for (a, b) in loaded.records.iter().zip(&records) {
            assert_eq!(a, b, "{name}");
        }
        assert_eq!(loaded.origins[3].row, 4);
        assert!(loaded.skipped.is_empty());
    }
}

#[test]
fn run_directories_are_merged_and_conditions_namespaced() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("node-a");
    let b = dir.path().join("node-b");
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    let ra = small();
    let mut rb = small();
    for r in &mut rb {
        r.run_id = "other".into();
    }
    write_parquet(&ra, &a.join("records.parquet")).unwrap();
    write_jsonl(&rb, &b.join("records.jsonl")).unwrap();
    let loaded = load_records(&[a, b], &strict()).unwrap();
    assert_eq!(loaded.records.len(), ra.len() + rb.len());
    assert_eq!(loaded.files.len(), 2);
    // Same condition ids, different runs: two conditions in the split table.
    let t = sy_records::SplitTable::build(&loaded.records, 0, Default::default());
    assert_eq!(t.len(), 12);
}

fn csv_with(path: &Path, records: &[Record], edit: impl Fn(&mut Vec<Vec<String>>)) {
    write_csv(records, path).unwrap();
    let text = std::fs::read_to_string(path).unwrap();
    let mut rows: Vec<Vec<String>> = text
        .lines()
        .map(|l| l.split(',').map(str::to_string).collect())
        .collect();
    edit(&mut rows);
    let out: Vec<String> = rows.iter().map(|r| r.join(",")).collect();
    std::fs::write(path, out.join("\n") + "\n").unwrap();
}

fn col(rows: &[Vec<String>], name: &str) -> usize {
    rows[0].iter().position(|c| c == name).unwrap()
}

#[test]
fn csv_errors_name_file_row_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.csv");
    let records: Vec<Record> = small()
        .into_iter()
        .filter(|r| r.observed.endpoint.is_none())
        .collect();

    // Wrong type: text in a numeric column, data row 3.
    csv_with(&path, &records, |rows| {
        let c = col(rows, "ttft_ms");
        rows[3][c] = "fast".into();
    });
    let e = row_issue(load_records(std::slice::from_ref(&path), &strict()).unwrap_err());
    assert_eq!((e.row, e.field.as_str()), (3, "ttft_ms"));
    assert!(e.message.contains("\"fast\""), "{}", e.message);
    assert!(e.to_string().contains("bad.csv"), "{e}");

    // NaN TTFT on an ok record.
    csv_with(&path, &records, |rows| {
        let c = col(rows, "ttft_ms");
        rows[2][c] = "NaN".into();
    });
    let e = row_issue(load_records(std::slice::from_ref(&path), &strict()).unwrap_err());
    assert_eq!((e.row, e.field.as_str()), (2, "ttft_ms"));
    assert!(e.message.contains("NaN"));

    // Negative TTFT.
    csv_with(&path, &records, |rows| {
        let c = col(rows, "ttft_ms");
        rows[5][c] = "-3.5".into();
    });
    let e = row_issue(load_records(std::slice::from_ref(&path), &strict()).unwrap_err());
    assert_eq!((e.row, e.field.as_str()), (5, "ttft_ms"));
    assert!(e.message.contains("negative"));

    // K > N.
    csv_with(&path, &records, |rows| {
        let (k, n) = (col(rows, "k"), col(rows, "n"));
        rows[4][k] = "999999".into();
        rows[4][n] = "10".into();
    });
    let e = row_issue(load_records(std::slice::from_ref(&path), &strict()).unwrap_err());
    assert_eq!((e.row, e.field.as_str()), (4, "k"));

    // Unknown role.
    csv_with(&path, &records, |rows| {
        let c = col(rows, "role");
        rows[6][c] = "medium".into();
    });
    let e = row_issue(load_records(std::slice::from_ref(&path), &strict()).unwrap_err());
    assert_eq!((e.row, e.field.as_str()), (6, "role"));
    assert!(e.message.contains("medium"));

    // Fractional count.
    csv_with(&path, &records, |rows| {
        let c = col(rows, "r");
        rows[1][c] = "2.5".into();
    });
    let e = row_issue(load_records(std::slice::from_ref(&path), &strict()).unwrap_err());
    assert_eq!((e.row, e.field.as_str()), (1, "r"));

    // Missing column.
    csv_with(&path, &records, |rows| {
        let c = col(rows, "prefill_capacity_tokens");
        for r in rows.iter_mut() {
            r.remove(c);
        }
    });
    match load_records(std::slice::from_ref(&path), &strict()).unwrap_err() {
        RecordsError::MissingColumn { path: p, column } => {
            assert_eq!(column, "prefill_capacity_tokens");
            assert_eq!(p, path);
        }
        other => panic!("{other}"),
    }
}

#[test]
fn unpaired_probe_is_an_error_naming_the_row_or_a_counted_skip() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.parquet");
    let mut records = small();
    // Drop the capable record of the first load-phase probe.
    let i = records
        .iter()
        .position(|r| r.phase == Phase::Load && r.role == Model::Capable)
        .unwrap();
    let lone_probe = records[i].probe_id.clone();
    records.remove(i);
    write_parquet(&records, &path).unwrap();
    let e = row_issue(load_records(std::slice::from_ref(&path), &strict()).unwrap_err());
    assert_eq!(e.field, "probe_id");
    assert_eq!(e.row, i); // the efficient record just before it (1-based row i)
    assert!(e.message.contains("do not pair up"), "{}", e.message);
    assert!(e.message.contains(&lone_probe));

    let loaded = load_records(std::slice::from_ref(&path), &skipping()).unwrap();
    assert_eq!(loaded.records.len(), records.len() - 1);
    assert_eq!(loaded.skipped.len(), 1);
    assert_eq!(loaded.files[0].skipped, 1);
    assert!(sy_records::pair_indices(&loaded.records).is_ok());
}

#[test]
fn skip_invalid_counts_bad_rows_and_drops_their_partners() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.jsonl");
    let records = small();
    write_jsonl(&records, &path).unwrap();
    let mut lines: Vec<String> = std::fs::read_to_string(&path)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    let load_line = records.iter().position(|r| r.phase == Phase::Load).unwrap();
    lines[load_line] = lines[load_line].replace("\"role\":\"efficient\"", "\"role\":\"medium\"");
    lines[load_line + 3] = lines[load_line + 3].replace("\"r\":", "\"r\":\"lots\",\"x\":");
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();

    let e = row_issue(load_records(std::slice::from_ref(&path), &strict()).unwrap_err());
    assert_eq!((e.row, e.field.as_str()), (load_line + 1, "role"));
    assert!(e.message.contains("medium"), "{}", e.message);

    let loaded = load_records(std::slice::from_ref(&path), &skipping()).unwrap();
    // Two invalid rows + their two partners.
    assert_eq!(loaded.skipped.len(), 4, "{:?}", loaded.skipped);
    assert_eq!(loaded.records.len(), records.len() - 4);
    let by_field = loaded.skipped_by_field();
    assert_eq!(by_field.get("role"), Some(&1));
}

#[test]
fn jsonl_wrong_type_names_the_field_and_torn_tail_is_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.jsonl");
    let mut r = template_record();
    r.probe_id = "a".into();
    let mut c = r.clone();
    c.role = Model::Capable;
    write_jsonl(&[r.clone(), c.clone()], &path).unwrap();
    let mut text = std::fs::read_to_string(&path).unwrap();
    text.push_str("{\"schema_version\":1,\"run_id\""); // torn
    std::fs::write(&path, &text).unwrap();
    let loaded = load_records(std::slice::from_ref(&path), &strict()).unwrap();
    assert_eq!(loaded.records.len(), 2);
    assert!(loaded.files[0].torn_tail);

    let bad = text.replacen("\"n\":1000", "\"n\":\"many\"", 1);
    std::fs::write(&path, bad).unwrap();
    let e = row_issue(load_records(std::slice::from_ref(&path), &strict()).unwrap_err());
    assert_eq!((e.row, e.field.as_str()), (1, "n"));
}

#[test]
fn missing_inputs_and_unknown_types_are_clear() {
    let dir = tempfile::tempdir().unwrap();
    let e = load_records(&[dir.path().join("nope.parquet")], &strict()).unwrap_err();
    assert!(e.to_string().contains("nope.parquet"), "{e}");
    let e = load_records(&[dir.path().to_path_buf()], &strict()).unwrap_err();
    assert!(
        e.to_string().contains("run directory has no records"),
        "{e}"
    );
    let p: PathBuf = dir.path().join("r.txt");
    std::fs::write(&p, "x").unwrap();
    let e = load_records(&[p], &strict()).unwrap_err();
    assert!(e.to_string().contains("unknown record file type"), "{e}");
    let p = dir.path().join("junk.parquet");
    std::fs::write(&p, "not parquet").unwrap();
    let e = load_records(&[p], &strict()).unwrap_err();
    assert!(e.to_string().contains("junk.parquet"), "{e}");
}

/// Frames of more than 2 × 16,384 rows are converted on several threads; row order, row numbers
/// and the first error must be exactly those of a sequential read.
#[test]
fn large_frames_convert_in_parallel_in_file_order() {
    let dir = tempfile::tempdir().unwrap();
    let mut records = generate(&SynthSpec {
        conditions: 400,
        repeats: 50,
        q_n_axis: vec![512, 2048],
        q_f_axis: vec![0.0, 0.5],
        q_repeats: 1,
        ..SynthSpec::default()
    });
    assert!(records.len() > 40_000, "{}", records.len());
    for (i, r) in records.iter_mut().enumerate() {
        r.sent_at_unix_ms = i as f64; // a per-row marker
    }
    for name in ["big.parquet", "big.csv"] {
        let path = dir.path().join(name);
        write_records(&records, &path).unwrap();
        let loaded = load_records(std::slice::from_ref(&path), &strict()).unwrap();
        assert_eq!(loaded.records.len(), records.len(), "{name}");
        assert!(
            loaded.records.iter().zip(&records).all(|(a, b)| a == b),
            "{name}"
        );
        assert!(
            loaded
                .origins
                .iter()
                .enumerate()
                .all(|(i, o)| o.row as usize == i + 1),
            "{name}"
        );
    }

    // Two bad rows late in the file, in the second half of a frame: strict loading names the
    // first; skipping loading drops exactly those rows (and their probes' partners).
    let (first_bad, second_bad) = (records.len() - 1_001, records.len() - 11);
    records[first_bad].observed.k = Some(records[first_bad].observed.n.unwrap() + 1);
    records[second_bad].ttft_ms = Some(f64::NAN);
    records[second_bad].status = Status::Ok;
    let path = dir.path().join("bad.parquet");
    write_parquet(&records, &path).unwrap();
    let e = row_issue(load_records(std::slice::from_ref(&path), &strict()).unwrap_err());
    assert_eq!((e.row, e.field.as_str()), (first_bad + 1, "k"));
    let loaded = load_records(std::slice::from_ref(&path), &skipping()).unwrap();
    let skipped_rows: Vec<usize> = loaded
        .skipped
        .iter()
        .filter(|s| s.field != "probe_id")
        .map(|s| s.row)
        .collect();
    assert_eq!(skipped_rows, vec![first_bad + 1, second_bad + 1]);
    assert_eq!(loaded.records.len(), records.len() - 4);
}

/// A typed format with numbers stored as text is refused, naming the file and the column, by
/// both loaders; a text format (CSV) reads numbers from text as it must.
#[test]
fn numbers_stored_as_strings_in_parquet_are_refused() {
    use polars::prelude::*;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("strings.parquet");
    let mut df = sy_records::records_to_frame(&small()).unwrap();
    let as_text = df
        .column("prompt_tokens")
        .unwrap()
        .cast(&DataType::String)
        .unwrap();
    df.with_column(as_text).unwrap();
    let mut file = std::fs::File::create(&path).unwrap();
    ParquetWriter::new(&mut file).finish(&mut df).unwrap();
    let e = load_records(std::slice::from_ref(&path), &strict()).unwrap_err();
    let text = e.to_string();
    assert!(e.is_bad_input(), "{text}");
    assert!(
        text.contains("strings.parquet") && text.contains("prompt_tokens") && text.contains("text"),
        "{text}"
    );
    let e = sy_records::ProbeTable::load(std::slice::from_ref(&path), &strict()).unwrap_err();
    assert!(e.to_string().contains("prompt_tokens"), "{e}");
}
