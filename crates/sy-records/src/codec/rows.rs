//! The conversion between polars frames of the flat layout ([`super::layout`]) and
//! [`Record`]s: a row read into a record (the first problem is the row's [`RowIssue`], naming
//! the row and the field), and records written as a frame.

use std::path::Path;

use polars::prelude::*;

use crate::codec::cells::Col;
use crate::codec::layout::{Cols, ColsData, REQUIRED_COLUMNS, record_layout};
use crate::codec::values::{ReadCell, WriteCell};
use crate::error::{RecordsError, RowIssue};
use crate::record::{
    Background, Model, ObservedFields, Phase, RECORD_SCHEMA_VERSION, Record, Status,
};

/// Reads one row; remembers the first problem.
struct RowReader {
    issue: Option<(&'static str, String)>,
}

impl RowReader {
    fn note(&mut self, field: &'static str, message: String) {
        if self.issue.is_none() {
            self.issue = Some((field, message));
        }
    }

    /// An optional field: a bad value is noted, absent is `None`.
    #[inline]
    fn opt<T>(&mut self, field: &'static str, r: Result<Option<T>, String>) -> Option<T> {
        match r {
            Ok(v) => v,
            Err(m) => {
                self.note(field, m);
                None
            }
        }
    }

    /// A required field: a bad or absent value is noted (`None` then).
    #[inline]
    fn req<T>(&mut self, field: &'static str, r: Result<Option<T>, String>) -> Option<T> {
        let v = self.opt(field, r);
        if v.is_none() {
            self.note(field, "missing value".to_string());
        }
        v
    }

    /// A field with a default: a bad value is noted, absent takes the default.
    #[inline]
    fn or<T>(&mut self, field: &'static str, r: Result<Option<T>, String>, default: T) -> T {
        self.opt(field, r).unwrap_or(default)
    }

    /// The schema version: absent is this tool's, a newer one is noted.
    fn version(&mut self, r: Result<Option<u32>, String>) -> u32 {
        let v = self.or("schema_version", r, RECORD_SCHEMA_VERSION);
        if v > RECORD_SCHEMA_VERSION {
            self.note(
                "schema_version",
                format!(
                    "record schema version {v} is newer than this tool's {RECORD_SCHEMA_VERSION}"
                ),
            );
        }
        v
    }
}

/// Reads the cell of column `$name` for one field, by the layout's rule (see
/// [`record_layout`]).
macro_rules! read_field {
    ($r:ident, $c:ident . $name:ident, $i:ident, opt) => {
        $r.opt(stringify!($name), ReadCell::read(&$c.$name, $i))
    };
    ($r:ident, $c:ident . $name:ident, $i:ident, or($d:expr)) => {
        $r.or(stringify!($name), ReadCell::read(&$c.$name, $i), $d)
    };
    ($r:ident, $c:ident . $name:ident, $i:ident, req($d:expr)) => {
        $r.req(stringify!($name), ReadCell::read(&$c.$name, $i))
            .unwrap_or($d)
    };
    ($r:ident, $c:ident . $name:ident, $i:ident, version) => {
        $r.version(ReadCell::read(&$c.$name, $i))
    };
}

/// Defines `row_to_record` and `records_to_frame` from the [`record_layout`].
macro_rules! define_rows {
    (
        record { $($a:ident : $ap:ident $(($ad:expr))?),* $(,)? }
        background { $($bc:ident => $bf:ident : $bp:ident $(($bd:expr))?),* $(,)? }
        observed { $($o:ident : $op:ident),* $(,)? }
        record { $($z:ident : $zp:ident $(($zd:expr))?),* $(,)? }
    ) => {
        /// Reads row `i`, its fields in file order; the first problem found is the row's issue.
        fn row_to_record(c: &Cols<'_>, i: usize) -> Result<Record, (&'static str, String)> {
            let mut r = RowReader { issue: None };
            let record = Record {
                $($a: read_field!(r, c.$a, i, $ap $(($ad))?),)*
                background: Background {
                    $($bf: read_field!(r, c.$bc, i, $bp $(($bd))?),)*
                },
                observed: ObservedFields {
                    $($o: read_field!(r, c.$o, i, $op),)*
                },
                $($z: read_field!(r, c.$z, i, $zp $(($zd))?),)*
            };
            match r.issue {
                Some(issue) => Err(issue),
                None => Ok(record),
            }
        }

        /// Builds the flat frame of `records` (one column per entry of
        /// [`crate::ALL_COLUMNS`]).
        pub fn records_to_frame(records: &[Record]) -> Result<DataFrame, PolarsError> {
            let columns = vec![
                $(col(stringify!($a), records.iter().map(|r| r.$a.cell()).collect::<Vec<_>>()),)*
                $(col(
                    stringify!($bc),
                    records.iter().map(|r| r.background.$bf.cell()).collect::<Vec<_>>(),
                ),)*
                $(col(
                    stringify!($o),
                    records.iter().map(|r| r.observed.$o.cell()).collect::<Vec<_>>(),
                ),)*
                $(col(stringify!($z), records.iter().map(|r| r.$z.cell()).collect::<Vec<_>>()),)*
            ];
            DataFrame::new(records.len(), columns)
        }
    };
}

record_layout!(define_rows);

fn col<T, N>(name: &str, values: T) -> Column
where
    Series: NamedFrom<T, N>,
    N: ?Sized,
{
    Series::new(name.into(), values).into_column()
}

/// Refuses a frame without one of the columns every record needs.
pub(crate) fn check_required_columns(cols: &Cols<'_>, path: &Path) -> Result<(), RecordsError> {
    for name in REQUIRED_COLUMNS {
        if cols.get(name).is_none_or(Col::is_absent) {
            return Err(RecordsError::MissingColumn {
                path: path.to_path_buf(),
                column: (*name).to_string(),
            });
        }
    }
    Ok(())
}

/// Converts a flat frame into records, handing each row to `each` in row order: the 0-based
/// row index within the frame and the record or the row's issue. `row_offset` is added to
/// 0-based frame indices to give the 1-based row numbers used in issues (a frame may be a slice
/// of a file). Conversion stops early when `each` returns an error.
pub(crate) fn frame_to_records<F>(
    df: &DataFrame,
    path: &Path,
    row_offset: usize,
    mut each: F,
) -> Result<(), RecordsError>
where
    F: FnMut(usize, Result<Record, RowIssue>) -> Result<(), RecordsError>,
{
    let data = ColsData::from_df(df, path)?;
    let cols = data.view();
    check_required_columns(&cols, path)?;
    for i in 0..df.height() {
        let row = row_to_record(&cols, i).map_err(|(field, message)| RowIssue {
            path: path.to_path_buf(),
            row: row_offset + i + 1,
            field: field.to_string(),
            message,
        });
        each(i, row)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::layout::unknown_columns;

    fn convert(df: &DataFrame, path: &Path) -> Vec<Result<Record, RowIssue>> {
        let mut rows = Vec::new();
        frame_to_records(df, path, 0, |_, r| {
            rows.push(r);
            Ok(())
        })
        .unwrap();
        rows
    }

    fn names(df: &DataFrame) -> Vec<String> {
        df.get_column_names()
            .into_iter()
            .map(|n| n.to_string())
            .collect()
    }

    #[test]
    fn a_record_survives_the_frame() {
        let recs = crate::synth::generate(&crate::synth::SynthSpec::default());
        let df = records_to_frame(&recs[..50]).unwrap();
        assert_eq!(names(&df), crate::ALL_COLUMNS);
        let back: Vec<Record> = convert(&df, Path::new("mem.parquet"))
            .into_iter()
            .map(Result::unwrap)
            .collect();
        assert_eq!(back, recs[..50]);
    }

    #[test]
    fn reserved_worker_columns_are_optional() {
        let mut rec = crate::synth::template_record();
        rec.reserved_worker_id = Some(u64::MAX - 7);
        rec.reserved_dp_rank = Some(3);
        let path = Path::new("mem.parquet");
        // With the columns: the values come back exactly (u64 above 2^53 included).
        let df = records_to_frame(std::slice::from_ref(&rec)).unwrap();
        let rows = convert(&df, path);
        assert_eq!(rows, vec![Ok(rec.clone())]);
        // Without them (a file written before the fields existed): `None`, not an error.
        let old = df
            .drop("reserved_worker_id")
            .unwrap()
            .drop("reserved_dp_rank")
            .unwrap();
        let rows = convert(&old, path);
        let back = rows[0].as_ref().unwrap();
        assert_eq!(back.reserved_worker_id, None);
        assert_eq!(back.reserved_dp_rank, None);
        assert_eq!(back.served_worker_id, rec.served_worker_id);
        let old_names = names(&old);
        assert!(unknown_columns(old_names.iter().map(String::as_str)).is_empty());
    }

    #[test]
    fn the_first_problem_in_file_order_is_the_rows_issue() {
        let rec = crate::synth::template_record();
        let df = records_to_frame(std::slice::from_ref(&rec)).unwrap();
        let mut df = df.drop("model").unwrap();
        df.with_column(Series::new("model".into(), [None::<&str>]).into_column())
            .unwrap();
        df.with_column(Series::new("status".into(), ["maybe"]).into_column())
            .unwrap();
        let rows = convert(&df, Path::new("mem.csv"));
        let issue = rows[0].as_ref().unwrap_err();
        assert_eq!((issue.field.as_str(), issue.row), ("model", 1));
        assert_eq!(issue.message, "missing value");
        // Newer schema versions are refused by name.
        let mut newer = records_to_frame(std::slice::from_ref(&rec)).unwrap();
        newer
            .with_column(
                Series::new("schema_version".into(), [RECORD_SCHEMA_VERSION + 1]).into_column(),
            )
            .unwrap();
        let issue = convert(&newer, Path::new("mem.csv"))[0]
            .clone()
            .unwrap_err();
        assert_eq!(issue.field, "schema_version");
        assert!(issue.message.contains("newer"), "{}", issue.message);
    }
}
