//! One cell of a columnar record file: an input column in the representation the file gave it
//! ([`ColData`]), materialised for row access ([`Col`]), and read as a count, a number, a
//! boolean or text.
//!
//! Reading is tolerant of representation (CSV cells are text, JSON numbers may be integers or
//! floats) but strict about meaning: a value that is not what the field needs (text in a numeric
//! column, a negative or fractional count) is an error message for the row's issue.

use std::borrow::Cow;
use std::path::Path;

use polars::prelude::*;

use crate::error::{ReadError, RecordsError};

/// Largest integer a 64-bit float holds exactly.
const MAX_EXACT_F64_INT: f64 = 9_007_199_254_740_992.0;

/// One input column, in the representation the file gave it (owned, one chunk).
pub(crate) enum ColData {
    Absent,
    Null,
    Str(StringChunked),
    F64(Float64Chunked),
    U64(UInt64Chunked),
    I64(Int64Chunked),
    Bool(BooleanChunked),
}

impl ColData {
    pub(crate) fn from_df(
        df: &DataFrame,
        name: &str,
        path: &Path,
    ) -> Result<ColData, RecordsError> {
        let Ok(column) = df.column(name) else {
            return Ok(ColData::Absent);
        };
        let bad = |source: PolarsError| RecordsError::Read {
            path: path.to_path_buf(),
            source: ReadError::Column {
                name: name.to_string(),
                source,
            },
        };
        let dtype = column.dtype().clone();
        let col = match dtype {
            DataType::Null => ColData::Null,
            DataType::String => ColData::Str(column.str().map_err(bad)?.clone()),
            DataType::Boolean => ColData::Bool(column.bool().map_err(bad)?.clone()),
            DataType::Float32 | DataType::Float64 => {
                let c = column.cast(&DataType::Float64).map_err(bad)?;
                ColData::F64(c.f64().map_err(bad)?.clone())
            }
            DataType::UInt8 | DataType::UInt16 | DataType::UInt32 | DataType::UInt64 => {
                let c = column.cast(&DataType::UInt64).map_err(bad)?;
                ColData::U64(c.u64().map_err(bad)?.clone())
            }
            DataType::Int8 | DataType::Int16 | DataType::Int32 | DataType::Int64 => {
                let c = column.cast(&DataType::Int64).map_err(bad)?;
                ColData::I64(c.i64().map_err(bad)?.clone())
            }
            other => {
                return Err(RecordsError::ColumnType {
                    path: path.to_path_buf(),
                    column: name.to_string(),
                    found: other.to_string(),
                    expected: "text, number or boolean".to_string(),
                });
            }
        };
        Ok(col)
    }

    /// The column's values as a plain vector, read by row index.
    ///
    /// Materialising each column once (a sequential pass per column) and then indexing plain
    /// vectors is several times faster than `ChunkedArray::get` per cell, which locates the
    /// chunk and checks validity on every call; text is borrowed, not copied.
    pub(crate) fn view(&self) -> Col<'_> {
        match self {
            ColData::Absent => Col::Absent,
            ColData::Null => Col::Null,
            ColData::Str(c) => Col::Str(c.iter().collect()),
            ColData::F64(c) => Col::F64(c.iter().collect()),
            ColData::U64(c) => Col::U64(c.iter().collect()),
            ColData::I64(c) => Col::I64(c.iter().collect()),
            ColData::Bool(c) => Col::Bool(c.iter().collect()),
        }
    }
}

/// One input column, materialised for row access (see [`ColData::view`]).
pub(crate) enum Col<'a> {
    Absent,
    Null,
    Str(Vec<Option<&'a str>>),
    F64(Vec<Option<f64>>),
    U64(Vec<Option<u64>>),
    I64(Vec<Option<i64>>),
    Bool(Vec<Option<bool>>),
}

/// Cell `i` of a materialised column (`None` for null or past the end).
#[inline]
fn cell<T: Copy>(values: &[Option<T>], i: usize) -> Option<T> {
    values.get(i).copied().flatten()
}

impl<'a> Col<'a> {
    pub(crate) fn is_absent(&self) -> bool {
        matches!(self, Col::Absent)
    }

    /// The cell as text, borrowed when the column is text.
    #[inline]
    pub(crate) fn text(&self, i: usize) -> Result<Option<Cow<'a, str>>, String> {
        Ok(match self {
            Col::Absent | Col::Null => None,
            Col::Str(c) => cell(c, i).map(Cow::Borrowed),
            Col::F64(c) => cell(c, i).map(|v| Cow::Owned(v.to_string())),
            Col::U64(c) => cell(c, i).map(|v| Cow::Owned(v.to_string())),
            Col::I64(c) => cell(c, i).map(|v| Cow::Owned(v.to_string())),
            Col::Bool(c) => {
                return match cell(c, i) {
                    None => Ok(None),
                    Some(b) => Err(format!("expected text, found the boolean {b}")),
                };
            }
        })
    }

    #[inline]
    pub(crate) fn str(&self, i: usize) -> Result<Option<String>, String> {
        Ok(self.text(i)?.map(Cow::into_owned))
    }

    #[inline]
    pub(crate) fn f64(&self, i: usize) -> Result<Option<f64>, String> {
        Ok(match self {
            Col::Absent | Col::Null => None,
            Col::F64(c) => cell(c, i),
            Col::U64(c) => cell(c, i).map(|v| v as f64),
            Col::I64(c) => cell(c, i).map(|v| v as f64),
            Col::Str(c) => match cell(c, i) {
                None => None,
                Some(s) => Some(parse_f64(s)?),
            },
            Col::Bool(c) => {
                return match cell(c, i) {
                    None => Ok(None),
                    Some(b) => Err(format!("expected a number, found the boolean {b}")),
                };
            }
        })
    }

    #[inline]
    pub(crate) fn u64(&self, i: usize) -> Result<Option<u64>, String> {
        Ok(match self {
            Col::Absent | Col::Null => None,
            Col::U64(c) => cell(c, i),
            Col::I64(c) => match cell(c, i) {
                None => None,
                Some(v) if v < 0 => return Err(format!("expected a count ≥ 0, found {v}")),
                Some(v) => Some(v as u64),
            },
            Col::F64(c) => match cell(c, i) {
                None => None,
                Some(v) => Some(float_to_u64(v)?),
            },
            Col::Str(c) => match cell(c, i) {
                None => None,
                Some(s) => Some(parse_u64(s)?),
            },
            Col::Bool(c) => {
                return match cell(c, i) {
                    None => Ok(None),
                    Some(b) => Err(format!("expected a count, found the boolean {b}")),
                };
            }
        })
    }

    #[inline]
    pub(crate) fn u32(&self, i: usize) -> Result<Option<u32>, String> {
        match self.u64(i)? {
            None => Ok(None),
            Some(v) => u32::try_from(v)
                .map(Some)
                .map_err(|_| format!("expected a count ≤ {}, found {v}", u32::MAX)),
        }
    }

    #[inline]
    pub(crate) fn bool(&self, i: usize) -> Result<Option<bool>, String> {
        Ok(match self {
            Col::Absent | Col::Null => None,
            Col::Bool(c) => cell(c, i),
            Col::Str(c) => match cell(c, i) {
                None => None,
                Some(s) => match s.trim().to_ascii_lowercase().as_str() {
                    "" => None,
                    "true" | "1" => Some(true),
                    "false" | "0" => Some(false),
                    _ => return Err(format!("expected true or false, found {s:?}")),
                },
            },
            Col::U64(c) => match cell(c, i) {
                None => None,
                Some(0) => Some(false),
                Some(1) => Some(true),
                Some(v) => return Err(format!("expected true or false, found {v}")),
            },
            Col::I64(c) => match cell(c, i) {
                None => None,
                Some(0) => Some(false),
                Some(1) => Some(true),
                Some(v) => return Err(format!("expected true or false, found {v}")),
            },
            Col::F64(c) => match cell(c, i) {
                None => None,
                Some(v) => return Err(format!("expected true or false, found {v}")),
            },
        })
    }
}

fn parse_f64(s: &str) -> Result<f64, String> {
    let t = s.trim();
    if t.is_empty() {
        return Err("expected a number, found an empty value".to_string());
    }
    match t.to_ascii_lowercase().as_str() {
        "nan" => return Ok(f64::NAN),
        "inf" | "+inf" | "infinity" => return Ok(f64::INFINITY),
        "-inf" | "-infinity" => return Ok(f64::NEG_INFINITY),
        _ => {}
    }
    t.parse::<f64>()
        .map_err(|_| format!("expected a number, found {s:?}"))
}

fn parse_u64(s: &str) -> Result<u64, String> {
    let t = s.trim();
    if let Ok(v) = t.parse::<u64>() {
        return Ok(v);
    }
    // "12.0" (a float writer) is accepted when it is an exact integer.
    match t.parse::<f64>() {
        Ok(v) => float_to_u64(v),
        Err(_) => Err(format!("expected a whole count ≥ 0, found {s:?}")),
    }
}

fn float_to_u64(v: f64) -> Result<u64, String> {
    if !v.is_finite() {
        return Err(format!("expected a whole count ≥ 0, found {v}"));
    }
    if v < 0.0 {
        return Err(format!("expected a count ≥ 0, found {v}"));
    }
    if v.fract() != 0.0 {
        return Err(format!("expected a whole count, found {v}"));
    }
    if v > MAX_EXACT_F64_INT {
        return Err(format!(
            "the integer {v} is stored as a float and may have lost digits; store it as an integer"
        ));
    }
    Ok(v as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_refuse_fractions_negatives_and_text() {
        assert_eq!(parse_u64("12"), Ok(12));
        assert_eq!(parse_u64("12.0"), Ok(12));
        assert!(parse_u64("12.5").unwrap_err().contains("whole"));
        assert!(parse_u64("-3").unwrap_err().contains("≥ 0"));
        assert!(parse_u64("abc").unwrap_err().contains("\"abc\""));
        assert!(float_to_u64(1e17).unwrap_err().contains("float"));
        assert!(parse_f64("x").is_err());
        assert!(parse_f64("NaN").unwrap().is_nan());
    }
}
