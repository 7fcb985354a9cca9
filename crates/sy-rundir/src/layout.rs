//! The run directory's layout: every artifact a run holds, with its file name, the tool that
//! writes it, its schema version and the checked read that refuses a file of another kind or
//! version. This table is the one list of the run artifacts and their document types.
//!
//! ```text
//! runs/demo/           what it holds (who writes it; its document type)
//!   plan.toml          the plan as collected (sy-collect; sy_collect::plan::Plan, the tool's
//!                      validated input)
//!   records.jsonl      paired probe records, appended per unit (sy-collect; sy_records::Record)
//!   attempts.jsonl     retried and incomplete attempts, never dropped (sy-collect;
//!                      sy_records::Record)
//!   records.parquet    the records, columnar (sy-collect, at the end of a run; sy_records::Record)
//!   manifest.json      what was collected, against what, and whether it is complete
//!                      (sy-collect; artifact::manifest::Manifest)
//!   adaptive.json      the rounds and looks of an adaptive collection (sy-collect --adaptive;
//!                      artifact::adaptive::AdaptiveFile)
//!   check.json         the data-quality verdict (sy-collect check; artifact::check::CheckReport)
//!   probe-table.cache  the validated, paired records as columns, for the next tool to map
//!                      instead of reading the records again (the first calibration tool;
//!                      sy_records::ProbeTable)
//!   splits.json        the grouped fit / uncertainty / selection split (sy-fit;
//!                      sy_records::SplitTable)
//!   fit.json           Q tables, standardisers, ridge corrections (sy-fit;
//!                      artifact::fit::FitFile)
//!   margins.json       90th-percentile margins per estimator (sy-margin;
//!                      artifact::margins::MarginsFile)
//!   selection.json     threshold search, evaluation, choice, intervals (sy-select;
//!                      artifact::selection::SelectionFile)
//!   bundle.json        the frozen rule (sy-select; read at run time: sy_selector::Bundle)
//!   bundles/           one bundle per variant, same parameters (sy-select; sy_selector::Bundle)
//!   report.md, plots/  the report and its figures (sy-select, or sy-eval in an evaluation)
//!   .sy-rundir.lock    the lock of the tool writing here, with its PID and command
//!                      ([`crate::RunLock`]; every writing tool)
//!
//! evals/demo/          an evaluation's directory (sy-eval)
//!   eval-manifest.json the run: plan, bundle, seed, target, block order
//!                      (artifact::eval_manifest::EvalManifest)
//!   blocks/            one file per finished block (artifact::eval_block::BlockResult)
//!   turns.jsonl        every turn of every block (artifact::eval_block::TurnRecord)
//!   sessions.jsonl     every session of every block (artifact::eval_block::SessionRecord)
//!   comparison.json    the paired comparison (artifact::comparison::Comparison)
//! ```
//!
//! The document types are in [`crate::artifact`], except those whose members are another
//! library's results, which this crate (depending only on `sy-selector`, `sy-stats` and serde)
//! cannot name: the records, the probe table and the split table (`sy-records`: the record's
//! columns, Parquet codec and memory-mapped table; the split table is built from records; the
//! splits, their fractions and counts are [`crate::split`]'s), the bundle (`sy-selector`: the
//! runtime reads it without this crate) and the plan (the tool's input, validated by
//! `sy-collect`). A reader reads each JSON document through [`read_artifact`], which checks the
//! name, kind and version defined here.
//!
//! Every name above is defined here once; the tools take paths from [`Artifact::file_name`].

use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::atomic::json_error_with_field;

/// Version of the `manifest.json` layout.
pub const MANIFEST_SCHEMA_VERSION: u32 = 1;
/// Version of a record's layout (each line of `records.jsonl`, each row of `records.parquet`).
pub const RECORD_SCHEMA_VERSION: u32 = 1;
/// Version of the `probe-table.cache` layout (`sy_records::ProbeTable`'s columns and header).
pub const PROBE_CACHE_SCHEMA_VERSION: u32 = 2;
/// Version of the `splits.json` layout.
pub const SPLITS_SCHEMA_VERSION: u32 = 1;
/// Version of the `fit.json` layout. 2: each Q table row has its own cached-fraction axis (the
/// fractions observed at that prompt length).
pub const FIT_SCHEMA_VERSION: u32 = 2;
/// Version of the `margins.json` layout.
pub const MARGINS_SCHEMA_VERSION: u32 = 1;
/// Version of the `selection.json` layout.
pub const SELECTION_SCHEMA_VERSION: u32 = 1;
/// Version of the `check.json` layout.
pub const CHECK_SCHEMA_VERSION: u32 = 1;
/// Version of the `adaptive.json` layout (`schemas/adaptive.schema.json`).
pub const ADAPTIVE_SCHEMA_VERSION: u32 = 1;
/// Version of the `eval-manifest.json` layout.
pub const EVAL_MANIFEST_SCHEMA_VERSION: u32 = 1;
/// Version of the `comparison.json` layout.
pub const COMPARISON_SCHEMA_VERSION: u32 = 1;
/// Version of an evaluation block's file (`blocks/`).
pub const BLOCK_SCHEMA_VERSION: u32 = 1;

/// One file or directory of a calibration run directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Artifact {
    Plan,
    Records,
    Attempts,
    RecordsParquet,
    Manifest,
    ProbeCache,
    Splits,
    Fit,
    Margins,
    Selection,
    Bundle,
    Bundles,
    Report,
    Plots,
    /// `sy-collect --adaptive`'s rounds and looks.
    Adaptive,
    /// `sy-collect check`'s data-quality verdict.
    Check,
    /// An evaluation's manifest (its presence makes a directory an evaluation's).
    EvalManifest,
    /// An evaluation's paired comparison.
    Comparison,
    /// An evaluation's finished blocks, one file each.
    EvalBlocks,
    /// Every turn of every evaluation block.
    EvalTurns,
    /// Every session of every evaluation block.
    EvalSessions,
}

impl Artifact {
    /// Every artifact, in the order a run produces them.
    pub const ALL: [Artifact; 21] = [
        Artifact::Plan,
        Artifact::Records,
        Artifact::Attempts,
        Artifact::RecordsParquet,
        Artifact::Manifest,
        Artifact::ProbeCache,
        Artifact::Splits,
        Artifact::Fit,
        Artifact::Margins,
        Artifact::Selection,
        Artifact::Bundle,
        Artifact::Bundles,
        Artifact::Report,
        Artifact::Plots,
        Artifact::Adaptive,
        Artifact::Check,
        Artifact::EvalManifest,
        Artifact::Comparison,
        Artifact::EvalBlocks,
        Artifact::EvalTurns,
        Artifact::EvalSessions,
    ];

    /// The JSON documents that carry a `schema_version` and have a checked read.
    pub const DOCUMENTS: [Artifact; 6] = [
        Artifact::Manifest,
        Artifact::Splits,
        Artifact::Fit,
        Artifact::Margins,
        Artifact::Selection,
        Artifact::Bundle,
    ];

    /// The file (or directory) name in the run directory.
    pub const fn file_name(self) -> &'static str {
        match self {
            Artifact::Plan => "plan.toml",
            Artifact::Records => "records.jsonl",
            Artifact::Attempts => "attempts.jsonl",
            Artifact::RecordsParquet => "records.parquet",
            Artifact::Manifest => "manifest.json",
            Artifact::ProbeCache => "probe-table.cache",
            Artifact::Splits => "splits.json",
            Artifact::Fit => "fit.json",
            Artifact::Margins => "margins.json",
            Artifact::Selection => "selection.json",
            Artifact::Bundle => "bundle.json",
            Artifact::Bundles => "bundles",
            Artifact::Report => "report.md",
            Artifact::Plots => "plots",
            Artifact::Adaptive => "adaptive.json",
            Artifact::Check => "check.json",
            Artifact::EvalManifest => "eval-manifest.json",
            Artifact::Comparison => "comparison.json",
            Artifact::EvalBlocks => "blocks",
            Artifact::EvalTurns => "turns.jsonl",
            Artifact::EvalSessions => "sessions.jsonl",
        }
    }

    /// What the artifact is, in words (for messages).
    pub const fn kind(self) -> &'static str {
        match self {
            Artifact::Plan => "plan",
            Artifact::Records | Artifact::RecordsParquet => "records",
            Artifact::Attempts => "attempts",
            Artifact::Manifest => "run manifest",
            Artifact::ProbeCache => "probe-table cache",
            Artifact::Splits => "split table",
            Artifact::Fit => "fit",
            Artifact::Margins => "margins",
            Artifact::Selection => "selection",
            Artifact::Bundle | Artifact::Bundles => "bundle",
            Artifact::Report => "report",
            Artifact::Plots => "plots",
            Artifact::Adaptive => "adaptive design",
            Artifact::Check => "data-quality check",
            Artifact::EvalManifest => "evaluation manifest",
            Artifact::Comparison => "comparison",
            Artifact::EvalBlocks => "evaluation block",
            Artifact::EvalTurns => "turns",
            Artifact::EvalSessions => "sessions",
        }
    }

    /// The tool that writes it.
    pub const fn written_by(self) -> &'static str {
        match self {
            Artifact::Plan
            | Artifact::Records
            | Artifact::Attempts
            | Artifact::RecordsParquet
            | Artifact::Manifest => "sy-collect",
            Artifact::ProbeCache => {
                "sy-fit, sy-margin or sy-select (the first to read the records)"
            }
            Artifact::Splits | Artifact::Fit => "sy-fit",
            Artifact::Margins => "sy-margin",
            Artifact::Selection
            | Artifact::Bundle
            | Artifact::Bundles
            | Artifact::Report
            | Artifact::Plots => "sy-select",
            Artifact::Adaptive => "sy-collect --adaptive",
            Artifact::Check => "sy-collect check",
            Artifact::EvalManifest
            | Artifact::Comparison
            | Artifact::EvalBlocks
            | Artifact::EvalTurns
            | Artifact::EvalSessions => "sy-eval",
        }
    }

    /// The schema version this build reads and writes (`None` for files without one).
    pub const fn schema_version(self) -> Option<u32> {
        match self {
            Artifact::Manifest => Some(MANIFEST_SCHEMA_VERSION),
            Artifact::Records | Artifact::Attempts | Artifact::RecordsParquet => {
                Some(RECORD_SCHEMA_VERSION)
            }
            Artifact::ProbeCache => Some(PROBE_CACHE_SCHEMA_VERSION),
            Artifact::Splits => Some(SPLITS_SCHEMA_VERSION),
            Artifact::Fit => Some(FIT_SCHEMA_VERSION),
            Artifact::Margins => Some(MARGINS_SCHEMA_VERSION),
            Artifact::Selection => Some(SELECTION_SCHEMA_VERSION),
            Artifact::Bundle | Artifact::Bundles => Some(sy_selector::BUNDLE_SCHEMA_VERSION),
            Artifact::Check => Some(CHECK_SCHEMA_VERSION),
            Artifact::Adaptive => Some(ADAPTIVE_SCHEMA_VERSION),
            Artifact::EvalManifest => Some(EVAL_MANIFEST_SCHEMA_VERSION),
            Artifact::Comparison => Some(COMPARISON_SCHEMA_VERSION),
            Artifact::EvalBlocks => Some(BLOCK_SCHEMA_VERSION),
            Artifact::Plan
            | Artifact::Report
            | Artifact::Plots
            | Artifact::EvalTurns
            | Artifact::EvalSessions => None,
        }
    }

    /// A top-level member only this kind of JSON document has: how a document of another kind,
    /// given in its place, is recognised.
    const fn marker(self) -> Option<&'static str> {
        match self {
            Artifact::Manifest => Some("units_total"),
            Artifact::Splits => Some("fractions"),
            Artifact::Fit => Some("models"),
            Artifact::Margins => Some("delta_blind_ms"),
            Artifact::Selection => Some("threshold_rule"),
            Artifact::Bundle => Some("content_hash"),
            _ => None,
        }
    }

    /// Its path in run directory `dir`.
    pub fn path(self, dir: &Path) -> PathBuf {
        dir.join(self.file_name())
    }

    /// The document kind whose marker `value` carries, if any.
    fn recognise(value: &Value) -> Option<Artifact> {
        Artifact::DOCUMENTS
            .into_iter()
            .find(|a| a.marker().is_some_and(|m| value.get(m).is_some()))
    }
}

/// Why an artifact cannot be read; every message names the file.
#[derive(Debug, thiserror::Error)]
pub enum ArtifactError {
    #[error(
        "cannot read {}: {source} (the {} file is written by {}: run it first, or pass the \
         file's path)",
        path.display(), artifact.kind(), artifact.written_by()
    )]
    Read {
        path: PathBuf,
        artifact: Artifact,
        source: ReadCause,
    },
    #[error("{}: not valid JSON: {source}", path.display())]
    NotJson {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error(
        "{}: this is a {} file (written by {}), not the {} file (written by {}) expected here",
        path.display(), found.kind(), found.written_by(), expected.kind(), expected.written_by()
    )]
    WrongKind {
        path: PathBuf,
        expected: Artifact,
        found: Artifact,
    },
    #[error(
        "{}: {} schema_version {}, this build reads only schema_version {expected}",
        path.display(), artifact.kind(), found.as_ref().map_or("missing or not an integer".to_string(), u64::to_string)
    )]
    Version {
        path: PathBuf,
        artifact: Artifact,
        found: Option<u64>,
        expected: u32,
    },
    #[error("{}: not a valid {} file: {message}", path.display(), artifact.kind())]
    Invalid {
        path: PathBuf,
        artifact: Artifact,
        message: String,
    },
}

/// Why an artifact's file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadCause {
    #[error("{0}")]
    Io(std::io::Error),
    /// Not a regular file (what it is instead).
    #[error("{0}")]
    NotRegular(&'static str),
    /// The input check refused it.
    #[error("{0}")]
    File(Box<crate::RunError>),
}

impl ArtifactError {
    /// Every artifact error is bad input (exit code 2): the file given is not what the tool
    /// reads.
    pub fn is_bad_input(&self) -> bool {
        true
    }
}

/// Reads `path` as JSON and checks that it is `artifact` in the version this build reads:
/// a document of another kind is named as such, a missing or other `schema_version` refused.
pub fn read_document(artifact: Artifact, path: &Path) -> Result<(String, Value), ArtifactError> {
    if let Err(e) = crate::guard::check_input_file(path) {
        return Err(ArtifactError::Read {
            path: path.to_path_buf(),
            artifact,
            source: match e {
                crate::RunError::NotRegular { what, .. } => ReadCause::NotRegular(what),
                other => ReadCause::File(Box::new(other)),
            },
        });
    }
    let text = std::fs::read_to_string(path).map_err(|e| ArtifactError::Read {
        path: path.to_path_buf(),
        artifact,
        source: ReadCause::Io(e),
    })?;
    let value: Value = serde_json::from_str(&text).map_err(|source| ArtifactError::NotJson {
        path: path.to_path_buf(),
        source,
    })?;
    check_document(artifact, path, &value)?;
    Ok((text, value))
}

/// The kind and version checks of [`read_document`] on a parsed document.
pub fn check_document(artifact: Artifact, path: &Path, value: &Value) -> Result<(), ArtifactError> {
    let ours = artifact.marker().is_some_and(|m| value.get(m).is_some());
    if let Some(found) = Artifact::recognise(value).filter(|f| !ours && *f != artifact) {
        return Err(ArtifactError::WrongKind {
            path: path.to_path_buf(),
            expected: artifact,
            found,
        });
    }
    let Some(expected) = artifact.schema_version() else {
        return Ok(());
    };
    let found = value.get("schema_version").and_then(Value::as_u64);
    if found != Some(u64::from(expected)) {
        return Err(ArtifactError::Version {
            path: path.to_path_buf(),
            artifact,
            found,
            expected,
        });
    }
    Ok(())
}

/// Reads, checks ([`read_document`]) and deserialises a JSON artifact; a member that does not
/// fit is named (`field `key`: …`).
pub fn read_artifact<T: DeserializeOwned>(
    artifact: Artifact,
    path: &Path,
) -> Result<T, ArtifactError> {
    let (text, value) = read_document(artifact, path)?;
    serde_json::from_value(value).map_err(|e| ArtifactError::Invalid {
        path: path.to_path_buf(),
        artifact,
        message: match serde_json::from_str::<T>(&text) {
            Err(located) => json_error_with_field(&text, &located),
            Ok(_) => e.to_string(),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_documents_have_versions_and_markers() {
        let mut names: Vec<&str> = Artifact::ALL.iter().map(|a| a.file_name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Artifact::ALL.len());
        for a in Artifact::DOCUMENTS {
            assert!(a.schema_version().is_some(), "{a:?}");
            assert!(a.marker().is_some(), "{a:?}");
            assert!(a.file_name().ends_with(".json"), "{a:?}");
        }
    }

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap_or_else(|e| panic!("{e}"));
        p
    }

    #[test]
    fn a_document_of_another_kind_is_named() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let p = write(
            dir.path(),
            "fit.json",
            r#"{"schema_version": 1, "delta_blind_ms": 3.0}"#,
        );
        let e = read_document(Artifact::Fit, &p)
            .err()
            .map(|e| e.to_string());
        let e = e.unwrap_or_default();
        assert!(
            e.contains("this is a margins file (written by sy-margin)"),
            "{e}"
        );
        assert!(e.contains("not the fit file"), "{e}");
    }

    #[test]
    fn versions_are_checked_and_named() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        for (text, found) in [
            (
                r#"{"schema_version": 99, "models": {}}"#,
                "schema_version 99",
            ),
            (r#"{"models": {}}"#, "schema_version missing"),
            ("[]", "schema_version missing"),
        ] {
            let p = write(dir.path(), "fit.json", text);
            let e = read_document(Artifact::Fit, &p)
                .err()
                .map(|e| e.to_string());
            let e = e.unwrap_or_default();
            assert!(e.contains(found) && e.contains("fit.json"), "{text}: {e}");
        }
        let p = write(dir.path(), "fit.json", r#"{"schema_version": 1,"#);
        let e = read_document(Artifact::Fit, &p)
            .err()
            .map(|e| e.to_string());
        assert!(e.unwrap_or_default().contains("not valid JSON"));
    }

    #[test]
    fn a_member_that_does_not_fit_is_named() {
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code)]
        struct Fit {
            schema_version: u32,
            models: Vec<u32>,
        }
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let p = write(
            dir.path(),
            "fit.json",
            "{\"schema_version\": 2,\n \"models\": \"x\"}",
        );
        let e = read_artifact::<Fit>(Artifact::Fit, &p)
            .err()
            .map(|e| e.to_string());
        let e = e.unwrap_or_default();
        assert!(e.contains("not a valid fit file: field `models`"), "{e}");
    }
}
