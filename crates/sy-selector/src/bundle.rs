//! The frozen bundle: one JSON document holding every parameter of the rule, its provenance and a
//! SHA-256 content hash.
//!
//! **Canonical serialisation** (what the hash covers): the bundle as JSON without its
//! `content_hash` member, object keys sorted by byte order at every level, no insignificant
//! whitespace, numbers written as serde_json writes them (shortest representation that
//! round-trips), missing Q cells and disabled thresholds as `null`. [`Bundle::load`] parses the
//! document into typed values, re-serialises them canonically and compares the hash, so a changed
//! coefficient is refused while re-indenting or re-ordering keys is not.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::model::Variant;
use crate::rule::RuleParams;

/// The bundle layout version this crate writes. Version 2 allows a Q table with one cached-fraction
/// axis per prompt length ([`crate::QTable::with_f_rows`]); version 1 (one shared axis) is a
/// subset of it and is still read ([`BUNDLE_READABLE_VERSIONS`]).
pub const BUNDLE_SCHEMA_VERSION: u32 = 2;

/// Every bundle layout version this crate reads.
pub const BUNDLE_READABLE_VERSIONS: [u32; 2] = [1, 2];

/// Where a bundle came from.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Provenance {
    /// Tool name → version (e.g. `"sy-fit" → "0.1.0"`).
    pub tool_versions: BTreeMap<String, String>,
    /// Every input file with its SHA-256.
    pub input_files: Vec<InputFile>,
    /// The seed of the grouped fit/uncertainty/selection split.
    pub split_seed: u64,
    /// Creation time, RFC 3339 UTC (e.g. `2026-11-30T15:00:00Z`).
    pub created_at: String,
    /// How sure the calibration is of this choice, as `sy-select` measured it: bootstrap
    /// intervals of the change versus Stage and of the margins, and the stability of the choice
    /// over split seeds. Absent in bundles frozen before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uncertainty: Option<serde_json::Value>,
}

/// One input file of a bundle.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InputFile {
    pub path: String,
    /// Lowercase hex SHA-256 of the file's bytes.
    pub sha256: String,
}

/// The frozen rule: variant, every parameter, provenance and content hash.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bundle {
    pub schema_version: u32,
    /// The variant this bundle runs.
    pub variant: Variant,
    pub params: RuleParams,
    pub provenance: Provenance,
    /// Lowercase hex SHA-256 of the canonical serialisation (see the module docs).
    pub content_hash: String,
}

/// A parameter that cannot be used (non-finite, non-positive standard deviation, …).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("parameter `{path}` {problem}")]
pub struct ParamsError {
    /// JSON path of the parameter, e.g. `params.efficient.standardiser.std[1]`.
    pub path: String,
    pub problem: String,
}

/// Why a bundle was refused.
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    #[error("cannot read bundle {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("bundle is not valid JSON: {0}")]
    Json(#[source] serde_json::Error),
    #[error("bundle is not a JSON object")]
    NotAnObject,
    #[error("bundle has no `schema_version` field (expected {expected})")]
    MissingSchemaVersion { expected: u32 },
    #[error(
        "bundle schema_version is {found}, this build reads schema_version 1 to {expected} (a newer bundle needs a newer sy-selector)"
    )]
    WrongSchemaVersion { found: String, expected: u32 },
    /// A missing field, an unknown field or a value of the wrong type; serde's message names it.
    #[error("bundle does not match schema version {BUNDLE_SCHEMA_VERSION}: {0}")]
    Structure(#[source] serde_json::Error),
    #[error(
        "bundle content hash mismatch: content_hash says {stored} but the content hashes to {computed} (the bundle was edited after it was frozen)"
    )]
    HashMismatch { stored: String, computed: String },
    #[error("bundle has an unusable parameter: {0}")]
    Params(#[from] ParamsError),
}

fn check_finite(path: &str, v: f64) -> Result<(), ParamsError> {
    if v.is_finite() {
        Ok(())
    } else {
        Err(ParamsError {
            path: path.to_string(),
            problem: format!("= {v} is not finite"),
        })
    }
}

/// The largest magnitude a millisecond parameter (load-correction intercept or coefficient, a
/// margin) may have: one hour. A larger value is a corrupted or hostile file, not a fit.
pub const MAX_PLAUSIBLE_MS: f64 = 3_600_000.0;

/// The largest magnitude a standardiser statistic may have: the features are `log1p` of token
/// and request counts, far below this.
pub const MAX_PLAUSIBLE_FEATURE: f64 = 1_000.0;

/// Finite and `|v| ≤ max`.
fn check_at_most(path: &str, v: f64, max: f64) -> Result<(), ParamsError> {
    check_finite(path, v)?;
    if v.abs() > max {
        return Err(ParamsError {
            path: path.to_string(),
            problem: format!("= {v} is implausible (|value| must be ≤ {max})"),
        });
    }
    Ok(())
}

fn check_non_negative(path: &str, v: f64) -> Result<(), ParamsError> {
    check_finite(path, v)?;
    if v < 0.0 {
        return Err(ParamsError {
            path: path.to_string(),
            problem: format!("= {v} must be ≥ 0"),
        });
    }
    Ok(())
}

impl crate::estimator::ModelEstimators {
    /// Checks every statistic and coefficient (the Q table validates itself on construction).
    pub fn validate(&self, prefix: &str) -> Result<(), ParamsError> {
        for d in 0..3 {
            check_finite(
                &format!("{prefix}.standardiser.mean[{d}]"),
                self.standardiser.mean[d],
            )?;
            let s = self.standardiser.std[d];
            if !(s.is_finite() && s > 0.0) {
                return Err(ParamsError {
                    path: format!("{prefix}.standardiser.std[{d}]"),
                    problem: format!("= {s} must be finite and > 0"),
                });
            }
        }
        for d in 0..3 {
            check_at_most(
                &format!("{prefix}.standardiser.mean[{d}]"),
                self.standardiser.mean[d],
                MAX_PLAUSIBLE_FEATURE,
            )?;
            check_at_most(
                &format!("{prefix}.standardiser.std[{d}]"),
                self.standardiser.std[d],
                MAX_PLAUSIBLE_FEATURE,
            )?;
        }
        for (estimator, c) in self.corrections() {
            let name = estimator.as_str();
            check_at_most(
                &format!("{prefix}.{name}.intercept"),
                c.intercept,
                MAX_PLAUSIBLE_MS,
            )?;
            for d in 0..3 {
                check_at_most(
                    &format!("{prefix}.{name}.coef[{d}]"),
                    c.coef[d],
                    MAX_PLAUSIBLE_MS,
                )?;
            }
        }
        Ok(())
    }
}

impl RuleParams {
    /// Checks every parameter: statistics and coefficients finite, standard deviations > 0,
    /// thresholds finite when enabled, margins and limits finite and ≥ 0.
    pub fn validate(&self) -> Result<(), ParamsError> {
        self.efficient.validate("params.efficient")?;
        self.capable.validate("params.capable")?;
        if let Some(r) = self.thresholds.r {
            check_finite("params.thresholds.r", r)?;
        }
        if let Some(p) = self.thresholds.p {
            check_finite("params.thresholds.p", p)?;
        }
        check_non_negative("params.margins.blind", self.margins.blind)?;
        check_non_negative("params.margins.cache", self.margins.cache)?;
        check_at_most("params.margins.blind", self.margins.blind, MAX_PLAUSIBLE_MS)?;
        check_at_most("params.margins.cache", self.margins.cache, MAX_PLAUSIBLE_MS)?;
        check_non_negative("params.limits.max_age_ms", self.limits.max_age_ms)?;
        check_non_negative(
            "params.limits.destination_limit",
            self.limits.destination_limit,
        )?;
        Ok(())
    }
}

fn is_sha256_hex(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

impl Provenance {
    /// Checks that every input file hash is 64 lowercase hex digits.
    pub fn validate(&self) -> Result<(), ParamsError> {
        for (i, file) in self.input_files.iter().enumerate() {
            if !is_sha256_hex(&file.sha256) {
                return Err(ParamsError {
                    path: format!("provenance.input_files[{i}].sha256"),
                    problem: format!("= {:?} is not 64 lowercase hex digits", file.sha256),
                });
            }
        }
        Ok(())
    }
}

/// Writes `value` canonically: keys sorted, no whitespace.
fn write_canonical(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => {
            let _ = write!(out, "{n}");
        }
        Value::String(s) => out.push_str(&Value::String(s.clone()).to_string()),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                if let Some(v) = map.get(key) {
                    write_canonical(out, v);
                }
            }
            out.push('}');
        }
    }
}

impl Bundle {
    /// Validates the parameters and freezes them into a bundle with its content hash.
    pub fn freeze(
        variant: Variant,
        params: RuleParams,
        provenance: Provenance,
    ) -> Result<Bundle, BundleError> {
        params.validate()?;
        provenance.validate()?;
        let mut bundle = Bundle {
            schema_version: BUNDLE_SCHEMA_VERSION,
            variant,
            params,
            provenance,
            content_hash: String::new(),
        };
        bundle.content_hash = bundle.compute_hash()?;
        Ok(bundle)
    }

    /// The canonical serialisation the content hash covers (see the module docs).
    pub fn canonical_json(&self) -> Result<String, BundleError> {
        let mut value = serde_json::to_value(self).map_err(BundleError::Json)?;
        if let Value::Object(map) = &mut value {
            map.remove("content_hash");
        }
        let mut out = String::new();
        write_canonical(&mut out, &value);
        Ok(out)
    }

    /// Lowercase hex SHA-256 of [`Bundle::canonical_json`].
    pub fn compute_hash(&self) -> Result<String, BundleError> {
        let canonical = self.canonical_json()?;
        Ok(hex::encode(Sha256::digest(canonical.as_bytes())))
    }

    /// Parses and checks a bundle: schema version first, then structure (every field present,
    /// no unknown field), then the content hash, then the parameters.
    pub fn load(json: &str) -> Result<Bundle, BundleError> {
        let value: Value = serde_json::from_str(json).map_err(BundleError::Json)?;
        let Value::Object(map) = &value else {
            return Err(BundleError::NotAnObject);
        };
        match map.get("schema_version") {
            None => {
                return Err(BundleError::MissingSchemaVersion {
                    expected: BUNDLE_SCHEMA_VERSION,
                });
            }
            Some(v)
                if BUNDLE_READABLE_VERSIONS
                    .iter()
                    .any(|&r| v.as_u64() == Some(u64::from(r))) => {}
            Some(v) => {
                return Err(BundleError::WrongSchemaVersion {
                    found: v.to_string(),
                    expected: BUNDLE_SCHEMA_VERSION,
                });
            }
        }
        let bundle: Bundle = serde_json::from_str(json).map_err(BundleError::Structure)?;
        let computed = bundle.compute_hash()?;
        if computed != bundle.content_hash {
            return Err(BundleError::HashMismatch {
                stored: bundle.content_hash.clone(),
                computed,
            });
        }
        bundle.params.validate()?;
        bundle.provenance.validate()?;
        Ok(bundle)
    }

    /// Reads and [`load`](Bundle::load)s a bundle file (the crate's only file access; never
    /// used on the decision path).
    pub fn from_path(path: impl AsRef<Path>) -> Result<Bundle, BundleError> {
        let path = path.as_ref();
        // A FIFO, device or directory is no bundle (and a FIFO would block the read forever).
        if let Ok(m) = std::fs::metadata(path)
            && !m.is_file()
        {
            return Err(BundleError::Io {
                path: path.display().to_string(),
                source: std::io::Error::other("not a regular file"),
            });
        }
        let json = std::fs::read_to_string(path).map_err(|source| BundleError::Io {
            path: path.display().to_string(),
            source,
        })?;
        Bundle::load(&json)
    }

    /// The bundle as pretty JSON (what `sy-select` writes as `bundle.json`).
    pub fn to_json_pretty(&self) -> Result<String, BundleError> {
        serde_json::to_string_pretty(self).map_err(BundleError::Json)
    }

    /// Decides one turn with the bundle's variant.
    #[inline]
    pub fn decide(&self, input: &crate::rule::DecisionInput) -> crate::rule::Decision {
        crate::rule::decide(&self.params, self.variant, input)
    }
}
