//! Reading JSONL record files line by line with serde, so that 64-bit worker ids stay exact and
//! a torn last line (a crash while appending) is recovered like [`crate::jsonl::read`] does.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

use super::loaded::{FileSummary, LoadOptions, LoadedRecords, Sink, read_err};
use crate::error::{RecordsError, RowIssue};
use crate::record::Record;

/// Reads a JSONL record file into `out` (records of file index `file`).
pub(crate) fn read_jsonl_into(
    path: &Path,
    file: u32,
    options: &LoadOptions,
    out: &mut LoadedRecords,
    summary: &mut FileSummary,
) -> Result<(), RecordsError> {
    let mut sink = Sink { out, file, options };
    read_jsonl(path, &mut sink, summary)
}

pub(super) fn read_jsonl(
    path: &Path,
    sink: &mut Sink<'_>,
    summary: &mut FileSummary,
) -> Result<(), RecordsError> {
    let file = File::open(path).map_err(|e| read_err(path, e))?;
    let mut reader = BufReader::new(file);
    let mut line = String::new();
    let mut line_no = 0usize;
    loop {
        line.clear();
        let read = reader.read_line(&mut line).map_err(|e| read_err(path, e))?;
        if read == 0 {
            break;
        }
        line_no += 1;
        let complete = line.ends_with('\n');
        let text = line.trim_end_matches(['\n', '\r']);
        if text.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Record>(text) {
            Ok(rec) => {
                summary.rows += 1;
                sink.push(path, line_no, Ok(rec))?;
            }
            Err(_) if !complete => {
                // A torn last line: the writer crashed mid-append. Ignored and reported.
                summary.torn_tail = true;
                tracing::warn!(
                    "{}:{line_no}: torn last line (no newline, not a whole record: a crash \
                     while appending) ignored",
                    path.display()
                );
                break;
            }
            Err(e) => {
                summary.rows += 1;
                let (field, message) = diagnose_json_line(text, &e);
                let issue = RowIssue {
                    path: path.to_path_buf(),
                    row: line_no,
                    field,
                    message,
                };
                sink.push(path, line_no, Err(issue))?;
            }
        }
    }
    Ok(())
}

/// Finds which member of a JSON line makes it an invalid record.
fn diagnose_json_line(text: &str, err: &serde_json::Error) -> (String, String) {
    use serde_json::Value;
    let value: Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => return ("(line)".to_string(), format!("not valid JSON: {e}")),
    };
    let Value::Object(obj) = value else {
        return ("(line)".to_string(), "expected a JSON object".to_string());
    };
    let Ok(Value::Object(template)) = serde_json::to_value(crate::synth::template_record()) else {
        return ("(record)".to_string(), err.to_string());
    };
    for key in obj.keys() {
        if !template.contains_key(key) {
            return (key.clone(), "unknown field".to_string());
        }
    }
    // Required members (non-optional fields).
    for key in template.keys() {
        if !obj.contains_key(key) {
            let mut t = template.clone();
            t.remove(key);
            if serde_json::from_value::<Record>(Value::Object(t)).is_err() {
                return (key.clone(), "missing value".to_string());
            }
        }
    }
    for (key, val) in &obj {
        let mut t = template.clone();
        t.insert(key.clone(), val.clone());
        if let Err(e) = serde_json::from_value::<Record>(Value::Object(t)) {
            let msg = e.to_string();
            if key == "background"
                && let (Value::Object(bg), Some(Value::Object(bg_t))) = (val, template.get(key))
            {
                for (bk, bv) in bg {
                    let mut t2 = bg_t.clone();
                    t2.insert(bk.clone(), bv.clone());
                    if serde_json::from_value::<crate::record::Background>(Value::Object(t2))
                        .is_err()
                    {
                        return (format!("background.{bk}"), msg);
                    }
                }
            }
            return (key.clone(), msg);
        }
    }
    ("(record)".to_string(), err.to_string())
}
