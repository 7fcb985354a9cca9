//! One record shape: the `Record` type, the flat file layout (`ALL_COLUMNS`, what Parquet and
//! CSV hold), the columns the calibration tools read and `schemas/record.schema.json` must name
//! the same fields. A field added to one of them and not the others fails here.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::BTreeSet;
use std::path::Path;

/// The record's JSON fields (JSONL, the schema), nested objects as they are.
fn record_fields() -> BTreeSet<String> {
    let value = serde_json::to_value(sy_records::synth::template_record()).unwrap();
    value.as_object().unwrap().keys().cloned().collect()
}

/// The record's fields in the flat layout of Parquet and CSV: a nested object's fields are
/// `<object>_<field>` (e.g. `background_decode_length`).
fn flat_fields() -> BTreeSet<String> {
    let value = serde_json::to_value(sy_records::synth::template_record()).unwrap();
    let mut out = BTreeSet::new();
    for (k, v) in value.as_object().unwrap() {
        match v.as_object() {
            Some(inner) => out.extend(inner.keys().map(|f| format!("{k}_{f}"))),
            None => {
                out.insert(k.clone());
            }
        }
    }
    out
}

/// The schema's properties, nested objects' properties included (flat names).
fn schema_flat_properties(schema: &serde_json::Value) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (k, v) in schema["properties"].as_object().unwrap() {
        match v.get("properties").and_then(|p| p.as_object()) {
            Some(inner) => out.extend(inner.keys().map(|f| format!("{k}_{f}"))),
            None => {
                out.insert(k.clone());
            }
        }
    }
    out
}

fn schema() -> serde_json::Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../schemas/record.schema.json");
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

#[test]
fn record_file_layout_and_schema_name_the_same_fields() {
    let fields = record_fields();
    let columns: BTreeSet<String> = sy_records::ALL_COLUMNS
        .iter()
        .map(|c| c.to_string())
        .collect();
    assert_eq!(
        flat_fields(),
        columns,
        "Record fields (flattened) vs ALL_COLUMNS"
    );

    let schema = schema();
    let properties: BTreeSet<String> = schema["properties"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    assert_eq!(
        fields, properties,
        "Record fields vs the schema's properties"
    );
    assert_eq!(
        flat_fields(),
        schema_flat_properties(&schema),
        "nested fields vs the schema's nested properties"
    );
    assert_eq!(
        schema["additionalProperties"], false,
        "the schema is closed"
    );
    for required in schema["required"].as_array().unwrap() {
        let name = required.as_str().unwrap();
        assert!(
            fields.contains(name),
            "schema requires unknown field {name}"
        );
    }
}

#[test]
fn calibration_columns_are_record_columns() {
    let fields = flat_fields();
    for c in sy_records::PROBE_TABLE_COLUMNS
        .iter()
        .chain(sy_records::REQUIRED_COLUMNS)
    {
        assert!(fields.contains(*c), "{c} is not a Record field");
    }
}

/// Every field of the runtime selector's observation is a record field of the same name (the
/// observation time is `observed_at_unix_ms` in the record) holding the same value: the record
/// embeds the observation, and `Record::observation` is the one mapping.
#[test]
fn the_observation_is_embedded_in_the_record() {
    let spec = sy_records::synth::SynthSpec::default();
    let r = sy_records::synth::generate(&spec)
        .into_iter()
        .find(|r| {
            r.observed.r.is_some()
                && r.observed.k.is_some()
                && r.observed.query_duration_ms.is_some()
        })
        .unwrap();
    let record = serde_json::to_value(&r).unwrap();
    let observation = serde_json::to_value(r.observation()).unwrap();
    let mut compared = 0;
    for (field, value) in observation.as_object().unwrap() {
        let column = match field.as_str() {
            "observed_at_ms" => "observed_at_unix_ms",
            other => other,
        };
        let in_record = record
            .get(column)
            .unwrap_or_else(|| panic!("observation field {field} has no record column"));
        if value.is_null() {
            continue;
        }
        let same = match (value.as_f64(), in_record.as_f64()) {
            (Some(a), Some(b)) => a == b,
            _ => value == in_record,
        };
        assert!(same, "{field}: observation {value} vs record {in_record}");
        compared += 1;
    }
    assert!(compared >= 10, "only {compared} fields compared");
}

/// The Dynamo adapter's observation type (`sy_wire::ObservedFields`, what
/// `sy_dynamo::observe` produces) is embedded whole in the record: its members are record
/// columns, one contiguous run of the flat layout in the same order, holding the same values.
#[test]
fn the_adapters_observation_type_is_the_records_observation() {
    let text = serde_json::to_string(&sy_records::ObservedFields::default()).unwrap();
    let members: Vec<&str> = text
        .trim_matches(['{', '}'])
        .split(",\"")
        .map(|m| m.trim_start_matches('"').split('"').next().unwrap())
        .collect();
    assert_eq!(members.len(), 20, "{members:?}");
    let start = sy_records::ALL_COLUMNS
        .iter()
        .position(|c| *c == members[0])
        .unwrap();
    assert_eq!(
        &sy_records::ALL_COLUMNS[start..start + members.len()],
        members.as_slice(),
        "the observation's members vs the record's columns"
    );

    let spec = sy_records::synth::SynthSpec::default();
    let r = &sy_records::synth::generate(&spec)[0];
    let record = serde_json::to_value(r).unwrap();
    let observed = serde_json::to_value(&r.observed).unwrap();
    for (member, value) in observed.as_object().unwrap() {
        assert_eq!(&record[member], value, "{member}");
    }
}
