//! JSON Lines as a polars frame, with the column types polars' own JSON reader infers (a column
//! per key in order of first appearance, integers `Int64`, numbers with a fraction or exponent
//! `Float64`, strings `String`, an object a `Struct` of the union of its keys, a key that is
//! null or absent on every line `Null`, a column mixing integers and fractions `Float64`), so
//! the frame and the Parquet file written from it are the ones that reader gives, without its
//! JSON parser in the build. Arrays and other mixes of types are refused (no writer here emits
//! them).

use polars::prelude::*;
use serde::de::{self, Deserialize, Deserializer, MapAccess, Visitor};

/// One parsed JSON value, keys in file order (`serde_json::Value` sorts them).
#[derive(Debug, Clone, PartialEq)]
enum Json {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Object(Vec<(String, Json)>),
}

impl<'de> Deserialize<'de> for Json {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Json, D::Error> {
        d.deserialize_any(JsonVisitor)
    }
}

struct JsonVisitor;

impl<'de> Visitor<'de> for JsonVisitor {
    type Value = Json;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("null, a boolean, a number, a string or an object")
    }
    fn visit_unit<E: de::Error>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }
    fn visit_none<E: de::Error>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Json, E> {
        Ok(Json::Bool(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Json, E> {
        Ok(Json::Int(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Json, E> {
        i64::try_from(v)
            .map(Json::Int)
            .map_err(|_| E::custom(format!("integer {v} is beyond Int64")))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Json, E> {
        Ok(Json::Float(v))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Json, E> {
        Ok(Json::Str(v.to_string()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Json, E> {
        Ok(Json::Str(v))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Json, A::Error> {
        let mut fields = Vec::new();
        while let Some((k, v)) = map.next_entry::<String, Json>()? {
            fields.push((k, v));
        }
        Ok(Json::Object(fields))
    }
}

/// A column's inferred type.
#[derive(Debug, Clone, PartialEq)]
enum Kind {
    Null,
    Bool,
    Int,
    Float,
    Str,
    Struct(Vec<(String, Kind)>),
}

impl Kind {
    fn of(v: &Json) -> Kind {
        match v {
            Json::Null => Kind::Null,
            Json::Bool(_) => Kind::Bool,
            Json::Int(_) => Kind::Int,
            Json::Float(_) => Kind::Float,
            Json::Str(_) => Kind::Str,
            Json::Object(fields) => Kind::Struct(
                fields
                    .iter()
                    .map(|(k, v)| (k.clone(), Kind::of(v)))
                    .collect(),
            ),
        }
    }

    /// The type of a column holding both (null is no evidence; integers with fractions are
    /// `Float`; objects take the union of their keys, first appearance first).
    fn merge(self, other: Kind, name: &str) -> PolarsResult<Kind> {
        Ok(match (self, other) {
            (Kind::Null, k) | (k, Kind::Null) => k,
            (Kind::Int, Kind::Float) | (Kind::Float, Kind::Int) => Kind::Float,
            (Kind::Struct(mut a), Kind::Struct(b)) => {
                for (key, kind) in b {
                    match a.iter_mut().find(|(k, _)| *k == key) {
                        Some((_, mine)) => {
                            let merged = std::mem::replace(mine, Kind::Null).merge(kind, &key)?;
                            *mine = merged;
                        }
                        None => a.push((key, kind)),
                    }
                }
                Kind::Struct(a)
            }
            (a, b) if a == b => a,
            (a, b) => polars_bail!(ComputeError: "JSON key `{name}` holds both {a:?} and {b:?}"),
        })
    }
}

/// The frame of JSON Lines `text` (one object per non-blank line). Errors on an empty input,
/// a line that is not an object, an array value or a key whose values mix types.
pub(crate) fn jsonl_frame(text: &[u8]) -> PolarsResult<DataFrame> {
    let mut rows = Vec::new();
    for (i, line) in text.split(|b| *b == b'\n').enumerate() {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let row: Json = serde_json::from_slice(line)
            .map_err(|e| polars_err!(ComputeError: "JSON line {}: {e}", i + 1))?;
        if !matches!(row, Json::Object(_)) {
            polars_bail!(ComputeError: "JSON line {} is not an object", i + 1);
        }
        rows.push(row);
    }
    if rows.is_empty() {
        polars_bail!(NoData: "no JSON lines to read");
    }
    let mut kind = Kind::Null;
    for row in &rows {
        kind = kind.merge(Kind::of(row), "")?;
    }
    let Kind::Struct(fields) = kind else {
        polars_bail!(ComputeError: "JSON lines are not objects");
    };
    let values: Vec<Option<&Json>> = rows.iter().map(Some).collect();
    let columns = fields
        .iter()
        .map(|(name, kind)| column(name, kind, &field_values(&values, name)))
        .collect::<PolarsResult<Vec<_>>>()?;
    DataFrame::new(rows.len(), columns)
}

/// Each row's value of `key` (`None` when the row is null or lacks the key).
fn field_values<'a>(rows: &[Option<&'a Json>], key: &str) -> Vec<Option<&'a Json>> {
    rows.iter()
        .map(|r| match r {
            Some(Json::Object(fields)) => fields.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        })
        .collect()
}

/// A column's cells: absent and null are missing, every other value goes through `pick`, which
/// refuses (`None`) a value of another type.
fn typed<'j, T>(
    values: &[Option<&'j Json>],
    mismatch: impl Fn(&Json) -> PolarsError,
    pick: impl Fn(&'j Json) -> Option<T>,
) -> PolarsResult<Vec<Option<T>>> {
    (values.iter())
        .map(|v| match v {
            None | Some(Json::Null) => Ok(None),
            Some(v) => pick(v).map(Some).ok_or_else(|| mismatch(v)),
        })
        .collect()
}

fn column(key: &str, kind: &Kind, values: &[Option<&Json>]) -> PolarsResult<Column> {
    let name = PlSmallStr::from_str(key);
    let n = values.len();
    let mismatch =
        |v: &Json| polars_err!(ComputeError: "JSON key `{key}`: {v:?} in a {kind:?} column");
    Ok(match kind {
        Kind::Null => Column::full_null(name, n, &DataType::Null),
        Kind::Bool => Column::new(
            name,
            typed(values, mismatch, |v| match v {
                Json::Bool(b) => Some(*b),
                _ => None,
            })?,
        ),
        Kind::Int => Column::new(
            name,
            typed(values, mismatch, |v| match v {
                Json::Int(i) => Some(*i),
                _ => None,
            })?,
        ),
        Kind::Float => Column::new(
            name,
            typed(values, mismatch, |v| match v {
                Json::Float(x) => Some(*x),
                #[allow(clippy::cast_precision_loss)]
                Json::Int(i) => Some(*i as f64),
                _ => None,
            })?,
        ),
        Kind::Str => Column::new(
            name,
            typed(values, mismatch, |v| match v {
                Json::Str(s) => Some(s.as_str()),
                _ => None,
            })?,
        ),
        Kind::Struct(fields) => {
            if let Some(v) = values.iter().find(|v| !matches!(v, Some(Json::Object(_)))) {
                polars_bail!(ComputeError: "JSON key `{name}`: {v:?} in an object column");
            }
            let columns = fields
                .iter()
                .map(|(key, kind)| column(key, kind, &field_values(values, key)))
                .collect::<PolarsResult<Vec<_>>>()?;
            StructChunked::from_columns(name, n, &columns)?
                .into_series()
                .into_column()
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_follow_first_appearance_and_json_types() {
        let text = b"{\"a\":1,\"b\":null,\"c\":{\"kind\":\"x\"},\"d\":1.5,\"e\":true}\n\
            \n{\"a\":2,\"b\":null,\"c\":{\"kind\":\"y\",\"m\":\"q\"},\"d\":2,\"e\":false}\n";
        let df = jsonl_frame(text).unwrap();
        let schema = df.schema();
        let names: Vec<&str> = schema.iter_names().map(|n| n.as_str()).collect();
        assert_eq!(names, ["a", "b", "c", "d", "e"]);
        assert_eq!(schema.get("a"), Some(&DataType::Int64));
        assert_eq!(schema.get("b"), Some(&DataType::Null));
        assert_eq!(
            schema.get("c"),
            Some(&DataType::Struct(vec![
                Field::new("kind".into(), DataType::String),
                Field::new("m".into(), DataType::String),
            ]))
        );
        assert_eq!(schema.get("d"), Some(&DataType::Float64));
        assert_eq!(schema.get("e"), Some(&DataType::Boolean));
        let d: Vec<Option<f64>> = df.column("d").unwrap().f64().unwrap().iter().collect();
        assert_eq!(d, [Some(1.5), Some(2.0)]);
        let c = df
            .column("c")
            .unwrap()
            .struct_()
            .unwrap()
            .fields_as_series();
        let m: Vec<Option<&str>> = c[1].str().unwrap().iter().collect();
        assert_eq!(m, [None, Some("q")]);
    }

    #[test]
    fn refuses_mixed_types_arrays_and_empty_input() {
        assert!(jsonl_frame(b"{\"a\":1}\n{\"a\":\"x\"}\n").is_err());
        assert!(jsonl_frame(b"{\"a\":[1]}\n").is_err());
        assert!(jsonl_frame(b"[1]\n").is_err());
        assert!(jsonl_frame(b"\n").is_err());
        assert!(jsonl_frame(b"{\"a\":18446744073709551615}\n").is_err());
    }
}
