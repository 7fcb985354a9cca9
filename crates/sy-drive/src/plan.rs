//! The plan tables every driving tool shares — the two candidate models ([`Models`]) and how
//! prompt token ids are drawn ([`PromptSpec`]) — and the error of a plan file that cannot be
//! used ([`PlanError`]). Each tool's plan embeds these tables under `[models]` and `[prompt]`.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// A plan that failed to load or validate. Every message names the file and the field.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    /// The file cannot be read (missing, not a regular file, too large); the source names it.
    #[error("plan: {source}")]
    Read {
        #[source]
        source: sy_rundir::RunError,
    },
    /// The file is not UTF-8 text.
    #[error(
        "plan {path}: not UTF-8 text (invalid byte at offset {}): a plan is a UTF-8 TOML file",
        source.valid_up_to()
    )]
    NotUtf8 {
        path: PathBuf,
        #[source]
        source: std::str::Utf8Error,
    },
    /// The text is not TOML of the plan's shape (the parser's message names line and field).
    #[error("plan {path}: {}", source.to_string().trim_end())]
    Parse {
        path: PathBuf,
        #[source]
        source: toml::de::Error,
    },
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
