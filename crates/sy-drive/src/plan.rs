//! The plan tables every driving tool shares — the two candidate models ([`Models`]) and how
//! prompt token ids are drawn ([`PromptSpec`]) — and the error of a plan file that cannot be
//! used ([`PlanError`]). Each tool's plan embeds these tables under `[models]` and `[prompt]`.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// A plan that failed to load or validate. Every message names the file and the field.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("cannot read plan {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("plan {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("plan {path}: field `{field}`: {message}")]
    Invalid {
        path: PathBuf,
        field: String,
        message: String,
    },
}

/// The served names of the two candidate models.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Models {
    pub efficient: String,
    pub capable: String,
}

impl Default for Models {
    fn default() -> Self {
        Self {
            efficient: "efficient".into(),
            capable: "capable".into(),
        }
    }
}

/// How prompts are built: token ids drawn from `[vocab_min, vocab_max)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PromptSpec {
    /// Smallest token id used (take it from the model card: avoid special tokens).
    pub vocab_min: u32,
    /// One past the largest token id used.
    pub vocab_max: u32,
}

impl Default for PromptSpec {
    fn default() -> Self {
        Self {
            vocab_min: 1_000,
            vocab_max: 2_000,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_names_the_file_and_the_field() {
        let e = PlanError::Invalid {
            path: "p.toml".into(),
            field: "models.capable".into(),
            message: "must not be empty".into(),
        };
        assert_eq!(
            e.to_string(),
            "plan p.toml: field `models.capable`: must not be empty"
        );
    }

    #[test]
    fn tables_reject_unknown_fields() {
        let err = toml::from_str::<Models>("efficient = \"a\"\nfast = \"b\"\n").unwrap_err();
        assert!(err.to_string().contains("unknown field `fast`"), "{err}");
        let p: PromptSpec = toml::from_str("vocab_max = 5000\n").unwrap();
        assert_eq!((p.vocab_min, p.vocab_max), (1_000, 5_000));
    }
}
