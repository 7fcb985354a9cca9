//! The frozen bundle: round trip, refusal of tampered / wrong-version / incomplete / unknown
//! content with a message naming the problem, and the JSON Schema under `schemas/`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use serde_json::Value;
use sy_selector::{BUNDLE_SCHEMA_VERSION, Bundle, BundleError, Variant};

fn workspace_file(rel: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(rel)
}

fn bundle_value() -> Value {
    serde_json::to_value(common::bundle(Variant::Cache)).unwrap()
}

fn load_value(v: &Value) -> Result<Bundle, BundleError> {
    Bundle::load(&serde_json::to_string_pretty(v).unwrap())
}

#[test]
fn freeze_then_load_round_trips() {
    for variant in Variant::ALL {
        let b = common::bundle(variant);
        assert_eq!(b.schema_version, BUNDLE_SCHEMA_VERSION);
        assert_eq!(b.content_hash.len(), 64);
        let back = Bundle::load(&b.to_json_pretty().unwrap()).unwrap();
        assert_eq!(back, b);
        assert_eq!(back.compute_hash().unwrap(), b.content_hash);
    }
    // Different variants hash differently.
    assert_ne!(
        common::bundle(Variant::Cache).content_hash,
        common::bundle(Variant::Blind).content_hash
    );
}

#[test]
fn hash_is_canonical_not_textual() {
    // Compact vs pretty text, and keys in another order, load alike.
    let b = common::bundle(Variant::Count);
    let compact = serde_json::to_string(&b).unwrap();
    assert_eq!(Bundle::load(&compact).unwrap(), b);
    let canonical = b.canonical_json().unwrap();
    assert!(!canonical.contains("content_hash"));
    assert!(!canonical.contains(' ') || canonical.contains("\"created_at\""));
    // The canonical text starts with the alphabetically first key.
    assert!(
        canonical.starts_with("{\"params\":{\"capable\":"),
        "{}",
        &canonical[..40]
    );
}

#[test]
fn tampered_coefficient_is_refused() {
    let mut v = bundle_value();
    v["params"]["efficient"]["cache"]["coef"][1] = Value::from(141.0);
    let err = load_value(&v).unwrap_err();
    assert!(matches!(err, BundleError::HashMismatch { .. }), "{err}");
    let msg = err.to_string();
    assert!(msg.contains("content hash mismatch"), "{msg}");
    // A changed Q cell, a changed threshold and a changed margin are refused too.
    for path in [
        &["params", "capable", "q", "values"][..],
        &["params", "thresholds", "r"][..],
        &["params", "margins", "cache"][..],
    ] {
        let mut v = bundle_value();
        let mut target = &mut v;
        for key in path {
            target = &mut target[*key];
        }
        *target = match target.take() {
            Value::Array(mut rows) => {
                rows[0][0] = Value::from(26.0);
                Value::Array(rows)
            }
            Value::Number(n) => Value::from(n.as_f64().unwrap() + 0.5),
            other => panic!("unexpected {other}"),
        };
        let err = load_value(&v).unwrap_err();
        assert!(
            matches!(err, BundleError::HashMismatch { .. }),
            "{path:?}: {err}"
        );
    }
}

#[test]
fn wrong_schema_version_is_refused() {
    let mut v = bundle_value();
    v["schema_version"] = Value::from(3);
    let err = load_value(&v).unwrap_err();
    assert!(
        matches!(err, BundleError::WrongSchemaVersion { .. }),
        "{err}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains("schema_version is 3") && msg.contains("schema_version 1 to 2"),
        "{msg}"
    );
    v["schema_version"] = Value::from("1");
    assert!(
        load_value(&v)
            .unwrap_err()
            .to_string()
            .contains("schema_version is \"1\"")
    );
    v.as_object_mut().unwrap().remove("schema_version");
    let err = load_value(&v).unwrap_err();
    assert!(
        err.to_string().contains("no `schema_version` field"),
        "{err}"
    );
}

#[test]
fn missing_field_is_refused_by_name() {
    for (path, field) in [
        (&["params"][..], "margins"),
        (&["params", "efficient"][..], "standardiser"),
        (&["params", "thresholds"][..], "r"),
        (&["provenance"][..], "split_seed"),
        (&[][..], "content_hash"),
    ] {
        let mut v = bundle_value();
        let mut target = &mut v;
        for key in path {
            target = &mut target[*key];
        }
        target.as_object_mut().unwrap().remove(field);
        let err = load_value(&v).unwrap_err();
        assert!(matches!(err, BundleError::Structure(_)), "{field}: {err}");
        let msg = err.to_string();
        assert!(msg.contains(&format!("missing field `{field}`")), "{msg}");
    }
}

#[test]
fn unknown_field_is_refused_by_name() {
    for path in [
        &[][..],
        &["params"][..],
        &["params", "capable", "q"][..],
        &["provenance"][..],
    ] {
        let mut v = bundle_value();
        let mut target = &mut v;
        for key in path {
            target = &mut target[*key];
        }
        target
            .as_object_mut()
            .unwrap()
            .insert("delta_extra".to_string(), Value::from(1.0));
        let err = load_value(&v).unwrap_err();
        assert!(matches!(err, BundleError::Structure(_)), "{path:?}: {err}");
        assert!(
            err.to_string().contains("unknown field `delta_extra`"),
            "{err}"
        );
    }
}

#[test]
fn unusable_parameters_are_refused_at_freeze() {
    let mut p = common::params();
    p.capable.standardiser.std[2] = 0.0;
    let err = Bundle::freeze(Variant::Cache, p, common::provenance()).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("params.capable.standardiser.std[2]"), "{msg}");
    let mut p = common::params();
    p.margins.blind = f64::NAN;
    let msg = Bundle::freeze(Variant::Cache, p, common::provenance())
        .unwrap_err()
        .to_string();
    assert!(msg.contains("params.margins.blind"), "{msg}");
    let mut prov = common::provenance();
    prov.input_files[1].sha256 = "XYZ".to_string();
    let msg = Bundle::freeze(Variant::Cache, common::params(), prov)
        .unwrap_err()
        .to_string();
    assert!(msg.contains("provenance.input_files[1].sha256"), "{msg}");
}

#[test]
fn invalid_q_table_in_bundle_is_refused() {
    let mut v = bundle_value();
    v["params"]["efficient"]["q"]["n_axis"][1] = Value::from(500.0);
    let msg = load_value(&v).unwrap_err().to_string();
    assert!(
        msg.contains("n_axis is not strictly increasing at index 1"),
        "{msg}"
    );
}

#[test]
fn not_json_and_not_object() {
    assert!(matches!(Bundle::load("{"), Err(BundleError::Json(_))));
    assert!(matches!(Bundle::load("[1]"), Err(BundleError::NotAnObject)));
    let err = Bundle::from_path("/nonexistent/bundle.json").unwrap_err();
    assert!(
        err.to_string().contains("/nonexistent/bundle.json"),
        "{err}"
    );
}

fn schema() -> Value {
    let text = std::fs::read_to_string(workspace_file("schemas/bundle.schema.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

#[test]
fn own_output_validates_against_the_json_schema() {
    let schema = schema();
    jsonschema::meta::validate(&schema).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    for variant in Variant::ALL {
        let v = serde_json::to_value(common::bundle(variant)).unwrap();
        let errors: Vec<String> = validator.iter_errors(&v).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{variant}: {errors:?}");
    }
    // Disabled thresholds (null) validate too.
    let mut p = common::params();
    p.thresholds.r = None;
    p.thresholds.p = None;
    let b = Bundle::freeze(Variant::CountPrefill, p, common::provenance()).unwrap();
    assert!(validator.is_valid(&serde_json::to_value(&b).unwrap()));
}

#[test]
fn json_schema_is_not_vacuous() {
    let validator = jsonschema::validator_for(&schema()).unwrap();
    let mut v = bundle_value();
    v["params"].as_object_mut().unwrap().remove("limits");
    assert!(!validator.is_valid(&v));
    let mut v = bundle_value();
    v["params"]["efficient"]["standardiser"]["std"][0] = Value::from(0.0);
    assert!(!validator.is_valid(&v));
    let mut v = bundle_value();
    v["variant"] = Value::from("oracle");
    assert!(!validator.is_valid(&v));
    let mut v = bundle_value();
    v["params"]["limits"]["extra"] = Value::from(1);
    assert!(!validator.is_valid(&v));
}

#[test]
fn documented_examples_are_current() {
    // data/examples/bundle.json is what `cargo run -p sy-selector --example example_bundle`
    // writes; it must load, and equal the fixture it was made from.
    let text = std::fs::read_to_string(workspace_file("data/examples/bundle.json")).unwrap();
    let loaded = Bundle::load(&text).unwrap();
    assert_eq!(loaded, common::bundle(Variant::Cache));
    let text = std::fs::read_to_string(workspace_file("data/examples/observations.json")).unwrap();
    let input: sy_selector::DecisionInput = serde_json::from_str(&text).unwrap();
    assert_eq!(input, common::example_input());
    let d = loaded.decide(&input);
    assert_eq!(d.variant, Variant::Cache);
    assert!(d.predicted_efficient_ms.is_some() && d.predicted_capable_ms.is_some());
}

/// A version-1 bundle (one shared f axis in its Q tables) is still read: version 2 only adds the
/// per-row form. The fixture is a version-1 bundle frozen by an earlier sy-select (sy-eval's
/// committed bundle of that time).
#[test]
fn version_1_bundles_are_still_read() {
    let text = std::fs::read_to_string(workspace_file(
        "crates/sy-selector/tests/fixtures/bundle-v1.json",
    ))
    .unwrap();
    let b = Bundle::load(&text).unwrap();
    assert_eq!(b.schema_version, 1);
    assert!(b.params.efficient.q.shared_f_axis().is_some());
    let mut v = bundle_value();
    v["schema_version"] = Value::from(2);
    assert!(load_value(&v).is_ok());
}
