//! The plan tables every driving tool shares — where the deployment is and how patiently to
//! talk to it ([`TargetSpec`]), the two candidate models ([`Models`]) and how prompt token ids
//! are drawn ([`PromptSpec`]) — and the error of a plan file that cannot be used
//! ([`PlanError`]). Each tool's plan embeds these tables under `[target]`, `[models]` and
//! `[prompt]`.

use std::path::{Path, PathBuf};
use std::time::Duration;

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
    /// A field of a shared table that this tool does not read: refused rather than ignored.
    #[error("plan {path}: `{}` is not used by {tool}: {}", field.name(), field.instead())]
    NotUsed {
        path: PathBuf,
        field: TargetField,
        tool: Tool,
    },
}

/// The tools that read a plan's shared tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tool {
    Collect,
    Eval,
}

impl std::fmt::Display for Tool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Tool::Collect => "sy-collect",
            Tool::Eval => "sy-eval",
        })
    }
}

/// The `[target]` fields only one of the tools reads (every other field both read).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetField {
    /// sy-eval's: sy-collect takes the simulator configuration from `--sim-config`.
    SimConfig,
    /// sy-collect's: sy-eval never retries a turn.
    Retries,
    /// sy-collect's, with `retries`.
    RetryBackoffMs,
    /// sy-collect's: sy-eval warms up with one unrecorded session.
    WarmupRequests,
}

impl TargetField {
    pub const ALL: [TargetField; 4] = [
        TargetField::SimConfig,
        TargetField::Retries,
        TargetField::RetryBackoffMs,
        TargetField::WarmupRequests,
    ];

    /// The field's name in the plan.
    pub fn name(self) -> &'static str {
        match self {
            TargetField::SimConfig => "target.sim_config",
            TargetField::Retries => "target.retries",
            TargetField::RetryBackoffMs => "target.retry_backoff_ms",
            TargetField::WarmupRequests => "target.warmup_requests",
        }
    }

    /// Whether `tool` reads the field.
    pub fn read_by(self, tool: Tool) -> bool {
        match self {
            TargetField::SimConfig => tool == Tool::Eval,
            TargetField::Retries | TargetField::RetryBackoffMs | TargetField::WarmupRequests => {
                tool == Tool::Collect
            }
        }
    }

    /// What the tool that does not read the field does instead.
    fn instead(self) -> &'static str {
        match self {
            TargetField::SimConfig => {
                "give the simulator configuration with --sim-config (or remove the field)"
            }
            TargetField::Retries | TargetField::RetryBackoffMs => {
                "a failed turn ends its session and is recorded as failed, never retried (a retry \
                 would add its time to the session); remove the field"
            }
            TargetField::WarmupRequests => {
                "it warms up with one unrecorded session before the first block it runs; remove \
                 the field"
            }
        }
    }
}

/// Where the deployment is and how patiently to talk to it: the `[target]` table of both
/// tools' plans. The URLs are overridden by `--frontend-url` / `--selection-url`; a field only
/// one tool reads ([`TargetField`]) is refused by the other ([`TargetSpec::refuse_unused`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TargetSpec {
    /// OpenAI-compatible frontend (`--frontend-url` overrides).
    pub frontend_url: Option<String>,
    /// Selection service (`--selection-url` overrides).
    pub selection_url: Option<String>,
    /// sy-eval: simulator configuration (TOML) for `--target sim`, relative to the plan file
    /// (`--sim-config` overrides).
    pub sim_config: Option<PathBuf>,
    /// Name of an environment variable holding a bearer token (the token is never logged).
    pub bearer_token_env: Option<String>,
    pub connect_timeout_ms: u64,
    /// Time allowed until the first token of a request.
    pub first_token_timeout_ms: u64,
    /// Time allowed for a whole request.
    pub request_timeout_ms: u64,
    /// Time allowed for one selection-service call.
    pub selection_timeout_ms: u64,
    /// sy-collect: retries of a unit after a transient failure (0 = none; default
    /// [`TargetSpec::DEFAULT_RETRIES`]).
    pub retries: Option<u32>,
    /// sy-collect: first backoff, doubling on each retry (default
    /// [`TargetSpec::DEFAULT_RETRY_BACKOFF_MS`]).
    pub retry_backoff_ms: Option<u64>,
    /// sy-collect: unrecorded warm-up requests per (worker, rank) before the first unit
    /// (`None`: the target's default).
    pub warmup_requests: Option<u32>,
}

impl Default for TargetSpec {
    fn default() -> Self {
        Self {
            frontend_url: None,
            selection_url: None,
            sim_config: None,
            bearer_token_env: None,
            connect_timeout_ms: 2_000,
            first_token_timeout_ms: 60_000,
            request_timeout_ms: 300_000,
            selection_timeout_ms: 5_000,
            retries: None,
            retry_backoff_ms: None,
            warmup_requests: None,
        }
    }
}

/// The plan names a bearer-token variable that is not set (bad input).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("plan field `target.bearer_token_env`: environment variable {var} is not set")]
pub struct BearerUnset {
    pub var: String,
}

/// A target URL a plan cannot use.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
enum UrlError {
    #[error("`{0}`: expected an http:// URL")]
    NotHttp(String),
    #[error("`{0}`: no host")]
    NoHost(String),
}

fn check_url(url: &str) -> Result<(), UrlError> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| UrlError::NotHttp(url.to_string()))?;
    let host = rest.split(['/', ':']).next().unwrap_or("");
    if host.is_empty() {
        return Err(UrlError::NoHost(url.to_string()));
    }
    Ok(())
}

impl TargetSpec {
    /// Retries of a unit when the plan does not say.
    pub const DEFAULT_RETRIES: u32 = 2;
    /// First retry backoff (ms) when the plan does not say.
    pub const DEFAULT_RETRY_BACKOFF_MS: u64 = 200;
    /// The most retries a plan may ask for.
    pub const MAX_RETRIES: u32 = 10;
    /// The most warm-up requests per rank a plan may ask for.
    pub const MAX_WARMUP_REQUESTS: u32 = 64;

    /// Retries of a unit after a transient failure.
    pub fn retries(&self) -> u32 {
        self.retries.unwrap_or(Self::DEFAULT_RETRIES)
    }

    /// The first retry backoff.
    pub fn retry_backoff(&self) -> Duration {
        Duration::from_millis(self.retry_backoff_ms())
    }

    /// The first retry backoff in milliseconds.
    pub fn retry_backoff_ms(&self) -> u64 {
        self.retry_backoff_ms
            .unwrap_or(Self::DEFAULT_RETRY_BACKOFF_MS)
    }

    /// The fields set in this table that `tool` does not read, refused with the first one.
    pub fn refuse_unused(&self, path: &Path, tool: Tool) -> Result<(), PlanError> {
        for field in TargetField::ALL {
            if !field.read_by(tool) && self.is_set(field) {
                return Err(PlanError::NotUsed {
                    path: path.to_path_buf(),
                    field,
                    tool,
                });
            }
        }
        Ok(())
    }

    /// Whether the plan sets `field`.
    pub fn is_set(&self, field: TargetField) -> bool {
        match field {
            TargetField::SimConfig => self.sim_config.is_some(),
            TargetField::Retries => self.retries.is_some(),
            TargetField::RetryBackoffMs => self.retry_backoff_ms.is_some(),
            TargetField::WarmupRequests => self.warmup_requests.is_some(),
        }
    }

    /// Checks the fields' values (URLs, a non-empty variable name, non-zero timeouts, the first
    /// token within the request, the retry and warm-up bounds); the problem names the field.
    /// The durations' upper bounds are [`crate::limits`]'.
    pub fn check(&self) -> Result<(), (String, String)> {
        let bad = |field: &str, message: String| Err((field.to_string(), message));
        for (field, url) in [
            ("target.frontend_url", &self.frontend_url),
            ("target.selection_url", &self.selection_url),
        ] {
            if let Some(url) = url
                && let Err(e) = check_url(url)
            {
                return bad(field, e.to_string());
            }
        }
        if let Some(var) = &self.bearer_token_env
            && var.trim().is_empty()
        {
            return bad(
                "target.bearer_token_env",
                "must name an environment variable".into(),
            );
        }
        for (field, v) in self.timeouts_ms() {
            if v == 0 {
                return bad(field, "must be > 0".into());
            }
        }
        if self.first_token_timeout_ms > self.request_timeout_ms {
            return bad(
                "target.first_token_timeout_ms",
                "must not exceed target.request_timeout_ms".into(),
            );
        }
        if self
            .warmup_requests
            .is_some_and(|n| n > Self::MAX_WARMUP_REQUESTS)
        {
            return bad(
                "target.warmup_requests",
                format!(
                    "at most {} warm-up requests per rank",
                    Self::MAX_WARMUP_REQUESTS
                ),
            );
        }
        if self.retries() > Self::MAX_RETRIES {
            return bad(
                "target.retries",
                format!("at most {} retries", Self::MAX_RETRIES),
            );
        }
        Ok(())
    }

    /// The four timeouts, by field name.
    pub fn timeouts_ms(&self) -> [(&'static str, u64); 4] {
        [
            ("target.connect_timeout_ms", self.connect_timeout_ms),
            ("target.first_token_timeout_ms", self.first_token_timeout_ms),
            ("target.request_timeout_ms", self.request_timeout_ms),
            ("target.selection_timeout_ms", self.selection_timeout_ms),
        ]
    }

    /// The bearer token, read from the variable the plan names (`None` when it names none).
    pub fn bearer_token(&self) -> Result<Option<String>, BearerUnset> {
        match &self.bearer_token_env {
            Some(var) => std::env::var(var)
                .map(Some)
                .map_err(|_| BearerUnset { var: var.clone() }),
            None => Ok(None),
        }
    }

    /// The HTTP client settings for these URLs: this table's timeouts and `bearer`.
    pub fn client_config(
        &self,
        frontend_url: &str,
        selection_url: &str,
        bearer: Option<String>,
    ) -> sy_dynamo::ClientConfig {
        let mut config = sy_dynamo::ClientConfig::new(frontend_url, selection_url);
        config.connect_timeout = Duration::from_millis(self.connect_timeout_ms);
        config.first_token_timeout = Duration::from_millis(self.first_token_timeout_ms);
        config.request_timeout = Duration::from_millis(self.request_timeout_ms);
        config.selection_timeout = Duration::from_millis(self.selection_timeout_ms);
        config.bearer_token = bearer;
        config
    }
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
    fn a_field_one_tool_does_not_read_is_refused_by_it() {
        let path = Path::new("p.toml");
        let t: TargetSpec = toml::from_str("retries = 2\n").unwrap();
        assert_eq!(t.retries(), 2);
        t.refuse_unused(path, Tool::Collect).unwrap();
        let e = t.refuse_unused(path, Tool::Eval).unwrap_err().to_string();
        assert!(
            e.starts_with("plan p.toml: `target.retries` is not used by sy-eval: "),
            "{e}"
        );
        let t: TargetSpec = toml::from_str("sim_config = \"s.toml\"\n").unwrap();
        t.refuse_unused(path, Tool::Eval).unwrap();
        let e = t
            .refuse_unused(path, Tool::Collect)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("`target.sim_config` is not used by sy-collect: "),
            "{e}"
        );
        assert!(e.contains("--sim-config"), "{e}");
        // The defaults set nothing either tool refuses.
        for tool in [Tool::Collect, Tool::Eval] {
            TargetSpec::default().refuse_unused(path, tool).unwrap();
        }
    }

    #[test]
    fn target_defaults_and_checks() {
        let t = TargetSpec::default();
        assert_eq!((t.retries(), t.retry_backoff_ms()), (2, 200));
        t.check().unwrap();
        let c = t.client_config("http://h:1/", "http://h:2", None);
        assert_eq!(c.connect_timeout, Duration::from_secs(2));
        assert_eq!(c.first_token_timeout, Duration::from_secs(60));
        for (text, field) in [
            ("frontend_url = \"https://h\"", "target.frontend_url"),
            ("selection_url = \"http://:9\"", "target.selection_url"),
            ("bearer_token_env = \" \"", "target.bearer_token_env"),
            ("connect_timeout_ms = 0", "target.connect_timeout_ms"),
            (
                "first_token_timeout_ms = 9\nrequest_timeout_ms = 8",
                "target.first_token_timeout_ms",
            ),
            ("retries = 11", "target.retries"),
            ("warmup_requests = 65", "target.warmup_requests"),
        ] {
            let t: TargetSpec = toml::from_str(text).unwrap();
            assert_eq!(t.check().unwrap_err().0, field, "{text}");
        }
    }

    #[test]
    fn tables_reject_unknown_fields() {
        let err = toml::from_str::<Models>("efficient = \"a\"\nfast = \"b\"\n").unwrap_err();
        assert!(err.to_string().contains("unknown field `fast`"), "{err}");
        let p: PromptSpec = toml::from_str("vocab_max = 5000\n").unwrap();
        assert_eq!((p.vocab_min, p.vocab_max), (1_000, 5_000));
    }
}
