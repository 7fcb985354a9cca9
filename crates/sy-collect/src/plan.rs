//! The plan: what a calibration run measures, read from TOML and checked before any request.
//!
//! A plan names the target (URLs, timeouts, retries, an optional bearer token read from an
//! environment variable), the two models, a seed, the prompt vocabulary, and up to two phases:
//!
//! - `[qgrid]`: no competing requests; a grid of prompt lengths `n` and cached fractions `f`,
//!   each cell repeated `repeats` times. Each unit primes its prefix (`round(f·N)` tokens, unique
//!   to the cell and repeat) and then probes the full prompt on both models.
//! - `[load]`: the same N × f axes crossed with prefill contention (background requests with large
//!   uncached prompts), decode contention (background generations; each non-zero level appears
//!   twice, once with short and once with long outputs, so request counts are equal), and a busy
//!   capable destination. Background load is started, warmed up and held steady while the probe
//!   runs.
//!
//! [`Plan::from_path`] rejects unknown fields and wrong types (serde, naming the line), and
//! [`Plan::validate`] rejects empty grids, `f` outside `[0, 1]`, zero repeats, bad URLs,
//! inconsistent numbers, and plans whose cost is unbounded or whose values give two conditions one
//! id ([`crate::limits`]). Checks that need the target (KV capacity, reachability) live in
//! [`crate::preflight`].

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use sy_drive::limits::Machine;
pub use sy_drive::{Models, PlanError, PromptSpec};

use crate::limits::check_cost;

/// The whole plan file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Plan {
    /// A label for the run (defaults to the plan file's stem).
    #[serde(default)]
    pub name: Option<String>,
    /// Seed for every random choice (prompt tokens, nonces, background prompts).
    pub seed: u64,
    #[serde(default)]
    pub target: TargetSpec,
    #[serde(default)]
    pub models: Models,
    #[serde(default)]
    pub prompt: PromptSpec,
    #[serde(default)]
    pub probe: ProbeSpec,
    #[serde(default)]
    pub qgrid: Option<QgridPhase>,
    #[serde(default)]
    pub load: Option<LoadPhase>,
}

/// Where the deployment is and how patiently to talk to it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TargetSpec {
    /// OpenAI-compatible frontend (`--frontend-url` overrides).
    pub frontend_url: Option<String>,
    /// Selection service (`--selection-url` overrides).
    pub selection_url: Option<String>,
    /// Name of an environment variable holding a bearer token (the token is never logged).
    pub bearer_token_env: Option<String>,
    pub connect_timeout_ms: u64,
    /// Time allowed until the first token of a probe.
    pub first_token_timeout_ms: u64,
    /// Time allowed for a whole request.
    pub request_timeout_ms: u64,
    /// Time allowed for one selection-service call.
    pub selection_timeout_ms: u64,
    /// Retries of a unit after a transient failure (0 = none).
    pub retries: u32,
    /// First backoff; doubles on each retry.
    pub retry_backoff_ms: u64,
    /// Unrecorded warm-up requests per (worker, rank) before the first unit (`None`: the
    /// target's default, see `crate::warmup`).
    pub warmup_requests: Option<u32>,
}

impl Default for TargetSpec {
    fn default() -> Self {
        Self {
            frontend_url: None,
            selection_url: None,
            bearer_token_env: None,
            connect_timeout_ms: 2_000,
            first_token_timeout_ms: 60_000,
            request_timeout_ms: 300_000,
            selection_timeout_ms: 5_000,
            retries: 2,
            retry_backoff_ms: 200,
            warmup_requests: None,
        }
    }
}

/// How a probe is sent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProbeSpec {
    /// Output tokens asked of each probe (TTFT needs only one; a few check the stream).
    pub max_tokens: u32,
    /// Quiet time before every Q-grid probe (after its priming, between the two candidates) and
    /// after a load unit's priming: lets KV events reach the router and gives every probe the
    /// same idle deployment (see `UnitRunner::quiet`).
    pub settle_ms: u64,
}

impl Default for ProbeSpec {
    fn default() -> Self {
        Self {
            max_tokens: 4,
            settle_ms: 30,
        }
    }
}

/// The no-load phase: the data of the Q tables.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QgridPhase {
    /// Prompt lengths N (tokens).
    pub n: Vec<u64>,
    /// Cached fractions f in [0, 1]; 1 = a full repeat of a primed prompt (the router reports
    /// K = N, the cell a full-prompt hit at run time looks up).
    pub f: Vec<f64>,
    pub repeats: u32,
}

/// Which model(s) the prefill and decode background load targets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BackgroundTarget {
    Efficient,
    Capable,
    Both,
}

impl BackgroundTarget {
    pub fn as_str(self) -> &'static str {
        match self {
            BackgroundTarget::Efficient => "efficient",
            BackgroundTarget::Capable => "capable",
            BackgroundTarget::Both => "both",
        }
    }
}

/// The load phase: conditions with controlled background load.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoadPhase {
    pub n: Vec<u64>,
    pub f: Vec<f64>,
    pub repeats: u32,
    /// Levels of prefill contention: background requests in flight with large uncached prompts.
    #[serde(default = "zero_level")]
    pub prefill_contention: Vec<u32>,
    /// Prompt tokens of each prefill-contention request.
    #[serde(default = "default_prefill_prompt_tokens")]
    pub prefill_prompt_tokens: u64,
    /// Levels of decode contention: background generations in flight. Each non-zero level runs
    /// twice, with short and with long outputs (equal request counts).
    #[serde(default = "zero_level")]
    pub decode_contention: Vec<u32>,
    #[serde(default = "default_short_output")]
    pub short_output_tokens: u64,
    #[serde(default = "default_long_output")]
    pub long_output_tokens: u64,
    /// Prompt tokens of each decode-contention request.
    #[serde(default = "default_decode_prompt_tokens")]
    pub decode_prompt_tokens: u64,
    /// Whether to also measure with a busy capable destination.
    #[serde(default = "no_busy")]
    pub busy_capable: Vec<bool>,
    /// Background generations kept on the capable model when it is busy.
    #[serde(default = "default_busy_requests")]
    pub busy_capable_requests: u32,
    #[serde(default = "default_long_output")]
    pub busy_capable_output_tokens: u64,
    /// Which model(s) the prefill/decode contention targets.
    #[serde(default = "default_bg_target")]
    pub background_target: BackgroundTarget,
    /// Time the background load runs before the probe (after every slot has started streaming).
    #[serde(default = "default_warmup_ms")]
    pub warmup_ms: u64,
}

fn zero_level() -> Vec<u32> {
    vec![0]
}
fn no_busy() -> Vec<bool> {
    vec![false]
}
fn default_prefill_prompt_tokens() -> u64 {
    2_048
}
fn default_short_output() -> u64 {
    8
}
fn default_long_output() -> u64 {
    256
}
fn default_decode_prompt_tokens() -> u64 {
    64
}
fn default_busy_requests() -> u32 {
    4
}
fn default_bg_target() -> BackgroundTarget {
    BackgroundTarget::Efficient
}
fn default_warmup_ms() -> u64 {
    200
}

/// A loaded plan with its provenance.
#[derive(Debug, Clone)]
pub struct LoadedPlan {
    pub plan: Plan,
    pub path: PathBuf,
    /// SHA-256 of the plan file's bytes (recorded in the manifest; `--resume` checks it).
    pub sha256: String,
    /// The plan file's text: the bytes hashed, copied into the run directory.
    pub text: String,
}

impl Plan {
    /// Parses plan text (no validation beyond types and unknown fields).
    pub fn from_toml_str(text: &str, path: &Path) -> Result<Plan, PlanError> {
        toml::from_str(text).map_err(|e| PlanError::Parse {
            path: path.to_path_buf(),
            message: e.to_string().trim_end().to_string(),
        })
    }

    /// Reads, parses and validates a plan file.
    pub fn from_path(path: &Path) -> Result<LoadedPlan, PlanError> {
        // A regular file of bounded size: a FIFO would block the read forever.
        let bytes = sy_run::read_input(path, 1 << 20).map_err(|e| PlanError::Read {
            path: path.to_path_buf(),
            source: match e {
                sy_run::RunError::Read { source, .. } => source,
                other => std::io::Error::other(other.to_string()),
            },
        })?;
        let text = String::from_utf8(bytes.clone()).map_err(|e| PlanError::Parse {
            path: path.to_path_buf(),
            message: format!("not UTF-8: {e}"),
        })?;
        let plan = Plan::from_toml_str(&text, path)?;
        plan.validate(path)?;
        Ok(LoadedPlan {
            plan,
            path: path.to_path_buf(),
            sha256: hex::encode(Sha256::digest(&bytes)),
            text,
        })
    }

    /// Checks everything that does not need the target, bounding the run's cost by the limits
    /// of this machine (see [`crate::limits`]).
    pub fn validate(&self, path: &Path) -> Result<(), PlanError> {
        self.validate_on(path, &Machine::current())
    }

    /// [`Plan::validate`] against the given machine limits.
    pub fn validate_on(&self, path: &Path, machine: &Machine) -> Result<(), PlanError> {
        self.validate_fields(path)?;
        check_cost(self, machine).map_err(|(field, message)| PlanError::Invalid {
            path: path.to_path_buf(),
            field,
            message,
        })
    }

    fn validate_fields(&self, path: &Path) -> Result<(), PlanError> {
        let bad = |field: &str, message: String| PlanError::Invalid {
            path: path.to_path_buf(),
            field: field.to_string(),
            message,
        };
        if let Some(name) = &self.name {
            sy_run::check_plan_name(name).map_err(|m| bad("name", m))?;
        }
        if self.qgrid.is_none() && self.load.is_none() {
            return Err(bad(
                "qgrid/load",
                "the plan has no phase: add a [qgrid] or a [load] table".into(),
            ));
        }
        for (field, url) in [
            ("target.frontend_url", &self.target.frontend_url),
            ("target.selection_url", &self.target.selection_url),
        ] {
            if let Some(url) = url {
                check_url(url).map_err(|m| bad(field, m))?;
            }
        }
        if let Some(var) = &self.target.bearer_token_env
            && var.trim().is_empty()
        {
            return Err(bad(
                "target.bearer_token_env",
                "must name an environment variable".into(),
            ));
        }
        for (field, v) in [
            ("target.connect_timeout_ms", self.target.connect_timeout_ms),
            (
                "target.first_token_timeout_ms",
                self.target.first_token_timeout_ms,
            ),
            ("target.request_timeout_ms", self.target.request_timeout_ms),
            (
                "target.selection_timeout_ms",
                self.target.selection_timeout_ms,
            ),
        ] {
            if v == 0 {
                return Err(bad(field, "must be > 0".into()));
            }
        }
        if self.target.first_token_timeout_ms > self.target.request_timeout_ms {
            return Err(bad(
                "target.first_token_timeout_ms",
                "must not exceed target.request_timeout_ms".into(),
            ));
        }
        if self.target.warmup_requests.is_some_and(|n| n > 64) {
            return Err(bad(
                "target.warmup_requests",
                "at most 64 warm-up requests per rank".into(),
            ));
        }
        if self.target.retries > 10 {
            return Err(bad("target.retries", "at most 10 retries".into()));
        }
        if self.models.efficient.trim().is_empty() {
            return Err(bad("models.efficient", "must not be empty".into()));
        }
        if self.models.capable.trim().is_empty() {
            return Err(bad("models.capable", "must not be empty".into()));
        }
        if self.models.efficient == self.models.capable {
            return Err(bad(
                "models.capable",
                "the two candidates must be different models".into(),
            ));
        }
        if self.prompt.vocab_min >= self.prompt.vocab_max {
            return Err(bad(
                "prompt.vocab_max",
                format!(
                    "must be greater than prompt.vocab_min ({} >= {})",
                    self.prompt.vocab_min, self.prompt.vocab_max
                ),
            ));
        }
        if self.prompt.vocab_max - self.prompt.vocab_min < 2 {
            return Err(bad(
                "prompt.vocab_max",
                "the vocabulary needs at least 2 token ids".into(),
            ));
        }
        if self.probe.max_tokens == 0 {
            return Err(bad(
                "probe.max_tokens",
                "must be >= 1 (TTFT needs a token)".into(),
            ));
        }
        if let Some(q) = &self.qgrid {
            check_axes("qgrid", &q.n, &q.f, q.repeats).map_err(|(f, m)| bad(&f, m))?;
        }
        if let Some(l) = &self.load {
            l.validate(path)?;
        }
        Ok(())
    }

    /// The largest prompt (tokens) any request of this plan sends: checked against KV capacity.
    pub fn largest_prompt(&self) -> (u64, &'static str) {
        let mut best = (0u64, "");
        if let Some(q) = &self.qgrid {
            for &n in &q.n {
                if n > best.0 {
                    best = (n, "qgrid.n");
                }
            }
        }
        if let Some(l) = &self.load {
            for &n in &l.n {
                if n > best.0 {
                    best = (n, "load.n");
                }
            }
            if l.prefill_contention.iter().any(|&c| c > 0) && l.prefill_prompt_tokens > best.0 {
                best = (l.prefill_prompt_tokens, "load.prefill_prompt_tokens");
            }
            let longest_decode = l.decode_prompt_tokens + l.long_output_tokens;
            if l.decode_contention.iter().any(|&c| c > 0) && longest_decode > best.0 {
                best = (
                    longest_decode,
                    "load.decode_prompt_tokens + load.long_output_tokens",
                );
            }
        }
        best
    }
}

impl LoadPhase {
    /// The load phase's own checks (lists, token counts, output lengths).
    fn validate(&self, path: &Path) -> Result<(), PlanError> {
        let bad = |field: &str, message: String| PlanError::Invalid {
            path: path.to_path_buf(),
            field: field.to_string(),
            message,
        };
        let l = self;
        check_axes("load", &l.n, &l.f, l.repeats).map_err(|(f, m)| bad(&f, m))?;
        if l.prefill_contention.is_empty() {
            return Err(bad(
                "load.prefill_contention",
                "empty list: use [0] for no prefill contention".into(),
            ));
        }
        if l.decode_contention.is_empty() {
            return Err(bad(
                "load.decode_contention",
                "empty list: use [0] for no decode contention".into(),
            ));
        }
        if l.busy_capable.is_empty() {
            return Err(bad(
                "load.busy_capable",
                "empty list: use [false] for an idle capable destination".into(),
            ));
        }
        check_unique("load.prefill_contention", &l.prefill_contention)
            .map_err(|(f, m)| bad(&f, m))?;
        check_unique("load.decode_contention", &l.decode_contention)
            .map_err(|(f, m)| bad(&f, m))?;
        check_unique("load.busy_capable", &l.busy_capable).map_err(|(f, m)| bad(&f, m))?;
        for (field, v) in [
            ("load.prefill_prompt_tokens", l.prefill_prompt_tokens),
            ("load.short_output_tokens", l.short_output_tokens),
            ("load.long_output_tokens", l.long_output_tokens),
            ("load.decode_prompt_tokens", l.decode_prompt_tokens),
            (
                "load.busy_capable_output_tokens",
                l.busy_capable_output_tokens,
            ),
        ] {
            if v == 0 {
                return Err(bad(field, "must be > 0".into()));
            }
        }
        if l.short_output_tokens >= l.long_output_tokens {
            return Err(bad(
                "load.long_output_tokens",
                format!(
                    "must be greater than load.short_output_tokens ({} >= {})",
                    l.short_output_tokens, l.long_output_tokens
                ),
            ));
        }
        if l.busy_capable.contains(&true) && l.busy_capable_requests == 0 {
            return Err(bad(
                "load.busy_capable_requests",
                "must be > 0 when busy_capable includes true".into(),
            ));
        }
        Ok(())
    }
}

fn check_url(url: &str) -> Result<(), String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| format!("`{url}`: expected an http:// URL"))?;
    let host = rest.split(['/', ':']).next().unwrap_or("");
    if host.is_empty() {
        return Err(format!("`{url}`: no host"));
    }
    Ok(())
}

fn check_axes(phase: &str, n: &[u64], f: &[f64], repeats: u32) -> Result<(), (String, String)> {
    if n.is_empty() {
        return Err((
            format!("{phase}.n"),
            "empty grid: list at least one prompt length".into(),
        ));
    }
    if f.is_empty() {
        return Err((
            format!("{phase}.f"),
            "empty grid: list at least one cached fraction (0.0 for none)".into(),
        ));
    }
    for (i, &v) in n.iter().enumerate() {
        if v == 0 {
            return Err((
                format!("{phase}.n[{i}]"),
                "prompt length must be > 0".into(),
            ));
        }
    }
    for (i, &v) in f.iter().enumerate() {
        if !v.is_finite() || !(0.0..=1.0).contains(&v) {
            return Err((
                format!("{phase}.f[{i}]"),
                format!("cached fraction {v} is outside [0, 1]"),
            ));
        }
    }
    check_unique(&format!("{phase}.n"), n)?;
    let mut sorted = f.to_vec();
    sorted.sort_by(f64::total_cmp);
    if sorted.windows(2).any(|w| w[0] == w[1]) {
        return Err((format!("{phase}.f"), "duplicate values".into()));
    }
    if repeats == 0 {
        return Err((format!("{phase}.repeats"), "must be >= 1".into()));
    }
    Ok(())
}

fn check_unique<T: PartialEq + std::fmt::Debug>(
    field: &str,
    values: &[T],
) -> Result<(), (String, String)> {
    for (i, v) in values.iter().enumerate() {
        if values[..i].contains(v) {
            return Err((field.to_string(), format!("duplicate value {v:?}")));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Plan, PlanError> {
        let p = Path::new("t.toml");
        let plan = Plan::from_toml_str(text, p)?;
        plan.validate(p)?;
        Ok(plan)
    }

    const MIN: &str = "seed = 1\n[qgrid]\nn = [64]\nf = [0.0, 0.5]\nrepeats = 2\n";

    #[test]
    fn minimal_plan_gets_defaults() {
        let plan = parse(MIN).unwrap();
        assert_eq!(plan.models.efficient, "efficient");
        assert_eq!(plan.target.retries, 2);
        assert_eq!(plan.probe.max_tokens, 4);
        assert!(plan.load.is_none());
    }

    #[test]
    fn unknown_field_is_named() {
        let err = parse(&format!("{MIN}bogus = 3\n")).unwrap_err().to_string();
        assert!(err.contains("bogus"), "{err}");
        let err = parse("seed = 1\n[qgrid]\nn=[1]\nf=[0.0]\nrepeats=1\nrepeat=2\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown field `repeat`"), "{err}");
    }

    #[test]
    fn wrong_type_is_named() {
        let err = parse("seed = \"x\"\n[qgrid]\nn=[1]\nf=[0.0]\nrepeats=1\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("seed") || err.contains("integer"), "{err}");
    }

    #[test]
    fn empty_grid_and_bad_fraction() {
        let err = parse("seed=1\n[qgrid]\nn=[]\nf=[0.0]\nrepeats=1\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("qgrid.n") && err.contains("empty grid"),
            "{err}"
        );
        let err = parse("seed=1\n[qgrid]\nn=[8]\nf=[0.0, 1.5]\nrepeats=1\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("qgrid.f[1]") && err.contains("[0, 1]"),
            "{err}"
        );
        // f = 1, a full repeat, is a cell of its own.
        assert!(parse("seed=1\n[qgrid]\nn=[8]\nf=[0.0, 1.0]\nrepeats=1\n").is_ok());
        let err = parse("seed=1\n[qgrid]\nn=[8]\nf=[-0.1]\nrepeats=1\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("qgrid.f[0]"), "{err}");
    }

    #[test]
    fn no_phase_and_same_models() {
        assert!(
            parse("seed=1\n")
                .unwrap_err()
                .to_string()
                .contains("no phase")
        );
        let err = parse(&format!("{MIN}[models]\nefficient=\"a\"\ncapable=\"a\"\n"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("models.capable"), "{err}");
    }

    #[test]
    fn load_checks() {
        let base = "seed=1\n[load]\nn=[64]\nf=[0.0]\nrepeats=1\n";
        assert!(parse(base).is_ok());
        let err = parse(&format!("{base}short_output_tokens=300\n"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("long_output_tokens"), "{err}");
        let err = parse(&format!("{base}decode_contention=[]\n"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("decode_contention"), "{err}");
        let err = parse(&format!("{base}background_target=\"nobody\"\n"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("background_target") || err.contains("nobody"),
            "{err}"
        );
    }

    #[test]
    fn bad_url() {
        let err = parse(&format!("{MIN}[target]\nfrontend_url=\"ftp://x\"\n"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("target.frontend_url"), "{err}");
    }

    fn parse_on(text: &str, open_files: u64) -> Result<Plan, PlanError> {
        let p = Path::new("t.toml");
        let plan = Plan::from_toml_str(text, p)?;
        plan.validate_on(
            p,
            &Machine {
                open_files: Some(open_files),
            },
        )?;
        Ok(plan)
    }

    #[test]
    fn near_duplicate_fractions_would_share_an_id() {
        let err = parse("seed=1\n[load]\nn=[64]\nf=[0.0, 0.0004]\nrepeats=1\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("t.toml") && err.contains("load.f[1]") && err.contains("f0.000"),
            "{err}"
        );
        assert!(parse("seed=1\n[load]\nn=[64]\nf=[0.0, 0.001]\nrepeats=1\n").is_ok());
    }

    #[test]
    fn cost_bounds_name_the_field() {
        for (text, field) in [
            (
                "seed=1\n[qgrid]\nn=[64]\nf=[0.0]\nrepeats=1000000000\n",
                "qgrid.repeats",
            ),
            (
                "seed=1\n[qgrid]\nn=[64]\nf=[0.0]\nrepeats=1\n[probe]\nmax_tokens=4000000000\n",
                "probe.max_tokens",
            ),
            (
                "seed=1\n[load]\nn=[64]\nf=[0.0]\nrepeats=1\nprefill_contention=[100000]\n",
                "load.prefill_contention[0]",
            ),
            (
                "seed=1\n[qgrid]\nn=[99999999999]\nf=[0.0]\nrepeats=1\n",
                "qgrid.n[0]",
            ),
            (
                "seed=1\n[qgrid]\nn=[64]\nf=[0.0]\nrepeats=1\n[probe]\nsettle_ms=99999999999\n",
                "probe.settle_ms",
            ),
        ] {
            let err = parse(text).unwrap_err().to_string();
            assert!(
                err.contains(field) && err.contains("t.toml"),
                "{field}: {err}"
            );
        }
    }

    #[test]
    fn background_streams_are_bounded_by_the_open_file_limit() {
        let text = "seed=1\n[load]\nn=[64]\nf=[0.0]\nrepeats=1\nprefill_contention=[0, 400]\n";
        let err = parse_on(text, 512).unwrap_err().to_string();
        assert!(
            err.contains("load.prefill_contention") && err.contains("RLIMIT_NOFILE"),
            "{err}"
        );
        assert!(parse_on(text, 4096).is_ok());
    }

    #[test]
    fn tokens_in_flight_are_bounded() {
        let err = parse(
            "seed=1\n[load]\nn=[64]\nf=[0.0]\nrepeats=1\nprefill_contention=[4000]\nprefill_prompt_tokens=1000000\n",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("load.prefill_prompt_tokens"), "{err}");
    }

    #[test]
    fn largest_prompt_covers_background() {
        let plan = parse(
            "seed=1\n[load]\nn=[64]\nf=[0.0]\nrepeats=1\nprefill_contention=[0,2]\nprefill_prompt_tokens=5000\n",
        )
        .unwrap();
        assert_eq!(plan.largest_prompt(), (5000, "load.prefill_prompt_tokens"));
    }
}
