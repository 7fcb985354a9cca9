//! Keeps docs/metrics.md's field table of `records.parquet` true.
//!
//! The table between `<!-- record-fields` and `<!-- /record-fields -->` must list every column of
//! `sy_records::ALL_COLUMNS`, in file order, with the Parquet type `sy_records::records_to_frame`
//! gives it, and an example value equal to that column of the first `ok` load-phase `efficient`
//! record of the committed dataset. Units and meanings are written by hand and must not be empty.
//!
//! `SY_PRINT_RECORD_FIELDS=1` prints the table as it should be (keeping the units and meanings
//! already written, the record schema's description for a new column) instead of failing.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;
use sy_records::{ALL_COLUMNS, LoadOptions, Phase, Record, Status, load_records, records_to_frame};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// One row of the documented table.
#[derive(Debug, Clone, PartialEq)]
struct FieldRow {
    name: String,
    ty: String,
    unit: String,
    meaning: String,
    example: String,
}

/// The rows between the markers, and the line of the first marker.
fn documented_rows(doc: &str) -> (Vec<FieldRow>, usize) {
    let mut rows = Vec::new();
    let mut inside = false;
    let mut start = 0;
    for (i, line) in doc.lines().enumerate() {
        let t = line.trim();
        if t.starts_with("<!-- record-fields") {
            inside = true;
            start = i + 1;
            continue;
        }
        if t.starts_with("<!-- /record-fields") {
            break;
        }
        if !inside || !t.starts_with("| `") {
            continue;
        }
        let cells = split_row(t);
        assert_eq!(
            cells.len(),
            5,
            "docs/metrics.md:{}: a field row has 5 cells (field, type, unit, meaning, example): {t}",
            i + 1
        );
        rows.push(FieldRow {
            name: cells[0].trim_matches('`').to_string(),
            ty: cells[1].trim_matches('`').to_string(),
            unit: cells[2].clone(),
            meaning: cells[3].clone(),
            example: cells[4].clone(),
        });
    }
    assert!(
        inside,
        "docs/metrics.md has no <!-- record-fields --> table"
    );
    (rows, start)
}

/// Splits a Markdown table row on `|` that is not escaped (`\|`).
fn split_row(line: &str) -> Vec<String> {
    let inner = line.trim().trim_start_matches('|').trim_end_matches('|');
    let mut cells = Vec::new();
    let mut cur = String::new();
    let mut chars = inner.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'|') => {
                cur.push_str("\\|");
                chars.next();
            }
            '|' => cells.push(std::mem::take(&mut cur).trim().to_string()),
            _ => cur.push(c),
        }
    }
    cells.push(cur.trim().to_string());
    cells
}

/// The example record: the first ok load-phase efficient record of the committed dataset.
fn example_record() -> Record {
    let loaded = load_records(
        &[repo().join("data/demo/records.parquet")],
        &LoadOptions::default(),
    )
    .unwrap();
    loaded
        .records
        .into_iter()
        .find(|r| {
            r.phase == Phase::Load && r.role.as_str() == "efficient" && r.status == Status::Ok
        })
        .expect("the committed dataset has an ok load-phase efficient record")
}

/// The record's columns as JSON values, `background` flattened with its prefix.
fn flat_values(record: &Record) -> BTreeMap<String, Value> {
    let Value::Object(map) = serde_json::to_value(record).unwrap() else {
        panic!("a record serialises to an object");
    };
    let mut out = BTreeMap::new();
    for (k, v) in map {
        match (k.as_str(), v) {
            ("background", Value::Object(bg)) => {
                for (bk, bv) in bg {
                    out.insert(format!("background_{bk}"), bv);
                }
            }
            (_, v) => {
                out.insert(k, v);
            }
        }
    }
    out
}

fn example_cell(v: Option<&Value>) -> String {
    match v {
        None | Some(Value::Null) => "`null`".to_string(),
        Some(Value::String(s)) => format!("`{}`", s.replace('|', "\\|")),
        Some(other) => format!("`{other}`"),
    }
}

/// The schema's description of each top-level and background member.
fn schema_descriptions() -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(repo().join("schemas/record.schema.json")).unwrap();
    let schema: Value = serde_json::from_str(&text).unwrap();
    let mut out = BTreeMap::new();
    let props = schema["properties"].as_object().unwrap();
    for (k, v) in props {
        if let Some(d) = v["description"].as_str() {
            out.insert(k.clone(), d.to_string());
        }
        if let Some(bg) = v["properties"].as_object() {
            for (bk, bv) in bg {
                if let Some(d) = bv["description"].as_str() {
                    out.insert(format!("background_{bk}"), d.to_string());
                }
            }
        }
    }
    out
}

/// What the table must say, from the code: (name, type, example) per column, in file order.
fn expected_rows(documented: &[FieldRow]) -> Vec<FieldRow> {
    let record = example_record();
    let frame = records_to_frame(std::slice::from_ref(&record)).unwrap();
    let values = flat_values(&record);
    let descriptions = schema_descriptions();
    ALL_COLUMNS
        .iter()
        .map(|&name| {
            let ty = frame.column(name).unwrap().dtype().to_string();
            let known = documented.iter().find(|r| r.name == name);
            FieldRow {
                name: name.to_string(),
                ty,
                unit: known.map_or_else(|| "—".to_string(), |r| r.unit.clone()),
                meaning: known.map_or_else(
                    || descriptions.get(name).cloned().unwrap_or_default(),
                    |r| r.meaning.clone(),
                ),
                example: example_cell(values.get(name)),
            }
        })
        .collect()
}

fn render(rows: &[FieldRow]) -> String {
    rows.iter()
        .map(|r| {
            format!(
                "| `{}` | `{}` | {} | {} | {} |\n",
                r.name, r.ty, r.unit, r.meaning, r.example
            )
        })
        .collect()
}

#[test]
fn record_fields_table_matches_the_code() {
    let doc = std::fs::read_to_string(repo().join("docs/metrics.md")).unwrap();
    let (documented, line) = documented_rows(&doc);
    let expected = expected_rows(&documented);
    if std::env::var_os("SY_PRINT_RECORD_FIELDS").is_some() {
        print!("{}", render(&expected));
        return;
    }
    let names: Vec<&str> = documented.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(
        names, ALL_COLUMNS,
        "docs/metrics.md:{line}: the field table must list sy_records::ALL_COLUMNS in file order; \
         print the table with SY_PRINT_RECORD_FIELDS=1"
    );
    for (doc_row, want) in documented.iter().zip(&expected) {
        assert_eq!(
            (&doc_row.ty, &doc_row.example),
            (&want.ty, &want.example),
            "docs/metrics.md:{line}: `{}`: (type, example) as documented against the code; \
             print the table with SY_PRINT_RECORD_FIELDS=1",
            doc_row.name
        );
        assert!(
            !doc_row.unit.is_empty() && !doc_row.meaning.is_empty(),
            "docs/metrics.md:{line}: `{}` needs a unit (— when it has none) and a meaning",
            doc_row.name
        );
    }
}

#[test]
fn table_parser_reads_marked_rows_and_escaped_pipes() {
    let doc = "x\n<!-- record-fields -->\n| field | type | unit | meaning | example |\n|---|---|---|---|---|\n\
               | `a` | `u64` | ms | one \\| two | `1` |\n<!-- /record-fields -->\n| `b` | `f64` | — | no | `2` |\n";
    let (rows, line) = documented_rows(doc);
    assert_eq!(line, 2);
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].name, "a");
    assert_eq!(rows[0].ty, "u64");
    assert_eq!(rows[0].meaning, "one \\| two");
}
