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
//! This module holds the plan's tables; reading and checking a plan file ([`Plan::from_path`],
//! [`Plan::validate`]) is [`crate::validate`], which applies the cost bounds of
//! [`crate::limits`]. Checks that need the target (KV capacity, reachability) live in
//! [`crate::preflight`].

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use sy_drive::{Models, PlanError, PromptSpec, TargetSpec};

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
    /// `sy-collect --adaptive`: rounds and stopping rule (see `crate::adaptive`; the section's
    /// type is recorded in `adaptive.json`, so it is the run directory's).
    #[serde(default)]
    pub adaptive: Option<sy_rundir::artifact::adaptive::AdaptiveSpec>,
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
        toml::from_str(text).map_err(|source| PlanError::Parse {
            path: path.to_path_buf(),
            source,
        })
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

/// The label of a cached fraction in condition ids (three decimals: `0.500`). Two fractions
/// with the same label would give two conditions one id; [`Plan::validate`] refuses them.
pub fn fraction_label(f: f64) -> String {
    format!("{f:.3}")
}
