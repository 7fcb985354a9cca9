//! The evaluation plan (TOML): which variants, how many rounds in which order, the sessions
//! (generated or from a trace), the background contention, the models and the target settings.
//!
//! ```toml
//! name = "helps"
//! seed = 7
//! variants = ["stage", "cache"]
//! rounds = 10              # the difference's interval is a t interval over rounds
//! order = "random"          # or "abba" (two variants)
//! concurrency = 4           # sessions in flight at once
//! [sessions]
//! count = 8
//! turns = [3, 5]            # inclusive ranges, drawn uniformly per session / turn
//! initial_tokens = [600, 1000]
//! append_tokens = [100, 300]
//! output_tokens = [16, 48]
//! efficient_share = 0.8
//! think_ms = [0, 20]
//! [background]              # the contention shapes of sy-collect's load phase
//! target = "efficient"
//! prefill_requests = 3
//! prefill_prompt_tokens = 2048
//! [target]                  # shared with sy-collect (sy_drive::TargetSpec)
//! sim_config = "sim-quarter.toml"
//! ```

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sy_selector::Variant;

pub use sy_drive::PlanError;
use sy_drive::Tool;

/// The order of the variants within each round.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Order {
    /// A seeded random permutation per round.
    #[default]
    Random,
    /// A B, then B A, alternating per round (exactly two variants).
    Abba,
}

/// The whole plan file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvalPlan {
    #[serde(default)]
    pub name: Option<String>,
    pub seed: u64,
    /// The variants compared (the first is the baseline of every difference).
    #[serde(default = "default_variants")]
    pub variants: Vec<Variant>,
    /// Rounds: each runs every variant once, on fresh sessions of the same shapes.
    #[serde(default = "default_rounds")]
    pub rounds: u32,
    #[serde(default)]
    pub order: Order,
    /// Sessions in flight at once within a block.
    #[serde(default = "default_concurrency")]
    pub concurrency: usize,
    #[serde(default)]
    pub models: Models,
    pub sessions: SessionsSpec,
    #[serde(default)]
    pub background: BackgroundSpec,
    #[serde(default)]
    pub target: TargetSpec,
    #[serde(default)]
    pub prompt: PromptSpec,
}

fn default_variants() -> Vec<Variant> {
    vec![Variant::Stage, Variant::Cache]
}
/// Rounds by default: the session-time difference's interval is a Student-t interval over
/// rounds (R − 1 degrees of freedom), valid with 2 but wide; 10 rounds give 9 degrees of freedom
/// (t = 2.26 against 12.7 with 2 rounds).
fn default_rounds() -> u32 {
    10
}
fn default_concurrency() -> usize {
    4
}

/// The served names of the two candidate models, and how prompt token ids are drawn: the same
/// tables as in a calibration plan.
pub use sy_drive::{Models, PromptSpec};

/// Sessions: from a generator (the ranges below) or from a trace file of recorded sessions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionsSpec {
    /// A JSONL trace (schemas/eval-trace.schema.json); relative to the plan file. When given,
    /// the generator fields are ignored.
    #[serde(default)]
    pub trace: Option<PathBuf>,
    /// Sessions per block (generator), or the first `count` sessions of the trace (0 = all).
    #[serde(default)]
    pub count: u32,
    /// Turns per session, inclusive range.
    #[serde(default = "r_turns")]
    pub turns: [u64; 2],
    /// The first turn's prompt (system prompt, task, repository context), tokens.
    #[serde(default = "r_initial")]
    pub initial_tokens: [u64; 2],
    /// Tokens appended before each later turn (tool results, user follow-ups).
    #[serde(default = "r_append")]
    pub append_tokens: [u64; 2],
    /// Output tokens of each turn (appended to the conversation afterwards).
    #[serde(default = "r_output")]
    pub output_tokens: [u64; 2],
    /// Share of turns Stage proposes `efficient` for.
    #[serde(default = "d_share")]
    pub efficient_share: f64,
    /// Pause before each later turn (tool execution), milliseconds.
    #[serde(default)]
    pub think_ms: [u64; 2],
}

fn r_turns() -> [u64; 2] {
    [3, 5]
}
fn r_initial() -> [u64; 2] {
    [600, 1000]
}
fn r_append() -> [u64; 2] {
    [100, 300]
}
fn r_output() -> [u64; 2] {
    [16, 48]
}
fn d_share() -> f64 {
    0.8
}

/// Background traffic on the same accounting path, in the contention shapes of sy-collect's
/// load phase: prefill contention (large uncached prompts, one output token), decode contention
/// (short prompts with `decode_output_tokens` generations), a busy capable destination.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BackgroundSpec {
    /// `efficient`, `capable` or `both`: where prefill and decode slots go.
    pub target: String,
    /// Closed-loop prefill slots per targeted model.
    pub prefill_requests: u32,
    pub prefill_prompt_tokens: u64,
    /// Closed-loop decode slots per targeted model.
    pub decode_requests: u32,
    pub decode_prompt_tokens: u64,
    pub decode_output_tokens: u64,
    /// Closed-loop long generations on the capable model.
    pub busy_capable_requests: u32,
    pub busy_capable_output_tokens: u64,
    /// Wait after every slot streamed its first token, before the sessions start.
    pub warmup_ms: u64,
}

impl Default for BackgroundSpec {
    fn default() -> Self {
        Self {
            target: "efficient".into(),
            prefill_requests: 0,
            prefill_prompt_tokens: 2048,
            decode_requests: 0,
            decode_prompt_tokens: 64,
            decode_output_tokens: 256,
            busy_capable_requests: 0,
            busy_capable_output_tokens: 256,
            warmup_ms: 100,
        }
    }
}

/// The `[target]` table, shared with sy-collect: URLs (a Dynamo target), the simulator
/// configuration (`--target sim`), a bearer token's variable and the timeouts; sy-collect's
/// retry and warm-up fields are refused.
pub use sy_drive::TargetSpec;

/// A plan and where it came from.
#[derive(Debug, Clone)]
pub struct LoadedPlan {
    pub plan: EvalPlan,
    pub path: PathBuf,
    pub sha256: String,
}

impl LoadedPlan {
    /// Reads, parses and validates a plan file.
    pub fn from_path(path: &Path) -> Result<LoadedPlan, PlanError> {
        // A regular file of bounded size (a FIFO would block the read forever), in UTF-8.
        let bytes = sy_rundir::read_input(path, crate::limits::MAX_PLAN_BYTES)
            .map_err(|source| PlanError::Read { source })?;
        let text = std::str::from_utf8(&bytes).map_err(|source| PlanError::NotUtf8 {
            path: path.to_path_buf(),
            source,
        })?;
        let plan = EvalPlan::from_toml_str(text, path)?;
        use sha2::Digest;
        Ok(LoadedPlan {
            plan,
            path: path.to_path_buf(),
            sha256: hex::encode(sha2::Sha256::digest(&bytes)),
        })
    }

    /// A path named in the plan, resolved against the plan file's directory.
    pub fn resolve(&self, p: &Path) -> PathBuf {
        if p.is_absolute() {
            return p.to_path_buf();
        }
        self.path.parent().map_or(p.to_path_buf(), |d| d.join(p))
    }
}

impl EvalPlan {
    /// Parses and validates a plan.
    pub fn from_toml_str(text: &str, path: &Path) -> Result<EvalPlan, PlanError> {
        let plan: EvalPlan = toml::from_str(text).map_err(|source| PlanError::Parse {
            path: path.to_path_buf(),
            source,
        })?;
        plan.validate(path)?;
        Ok(plan)
    }

    /// Checks every field; the error names the first bad one.
    pub fn validate(&self, path: &Path) -> Result<(), PlanError> {
        let bad = |field: &str, message: String| PlanError::Invalid {
            path: path.to_path_buf(),
            field: field.into(),
            message,
        };
        if let Some(name) = &self.name {
            sy_rundir::check_plan_name(name).map_err(|m| bad("name", m))?;
        }
        if self.variants.is_empty() {
            return Err(bad("variants", "at least one variant is needed".into()));
        }
        for (i, v) in self.variants.iter().enumerate() {
            if self.variants[..i].contains(v) {
                return Err(bad("variants", format!("`{v}` is listed twice")));
            }
        }
        if self.order == Order::Abba && self.variants.len() != 2 {
            return Err(bad(
                "order",
                format!(
                    "`abba` needs exactly two variants, got {}",
                    self.variants.len()
                ),
            ));
        }
        if self.rounds == 0 {
            return Err(bad("rounds", "must be at least 1".into()));
        }
        if self.concurrency == 0 {
            return Err(bad("concurrency", "must be at least 1".into()));
        }
        let s = &self.sessions;
        if s.trace.is_none() && s.count == 0 {
            return Err(bad(
                "sessions.count",
                "must be at least 1 when no `sessions.trace` is given".into(),
            ));
        }
        for (field, r, min) in [
            ("sessions.turns", s.turns, 1),
            ("sessions.initial_tokens", s.initial_tokens, 1),
            ("sessions.append_tokens", s.append_tokens, 0),
            ("sessions.output_tokens", s.output_tokens, 1),
            ("sessions.think_ms", s.think_ms, 0),
        ] {
            if r[0] > r[1] || r[0] < min {
                return Err(bad(
                    field,
                    format!(
                        "[{}, {}] must be an inclusive range [low, high] with {min} ≤ low ≤ high",
                        r[0], r[1]
                    ),
                ));
            }
        }
        if !(0.0..=1.0).contains(&s.efficient_share) {
            return Err(bad(
                "sessions.efficient_share",
                format!("{} must be within [0, 1]", s.efficient_share),
            ));
        }
        if !["efficient", "capable", "both"].contains(&self.background.target.as_str()) {
            return Err(bad(
                "background.target",
                format!(
                    "`{}`: expected efficient, capable or both",
                    self.background.target
                ),
            ));
        }
        if self.prompt.vocab_min >= self.prompt.vocab_max {
            return Err(bad(
                "prompt.vocab_min",
                "must be below prompt.vocab_max".into(),
            ));
        }
        if self.models.efficient == self.models.capable {
            return Err(bad(
                "models",
                "the efficient and capable models must differ".into(),
            ));
        }
        self.target
            .check()
            .map_err(|(field, message)| bad(&field, message))?;
        self.target.refuse_unused(path, Tool::Eval)?;
        crate::limits::check_plan(self, &sy_drive::limits::Machine::current())
            .map_err(|(field, message)| bad(&field, message))
    }

    /// The plan's label (its `name`, else the file stem).
    pub fn label(&self, path: &Path) -> String {
        self.name.clone().unwrap_or_else(|| {
            path.file_stem()
                .map_or("eval".into(), |s| s.to_string_lossy().into_owned())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<EvalPlan, PlanError> {
        EvalPlan::from_toml_str(text, Path::new("p.toml"))
    }

    #[test]
    fn defaults_fill_a_minimal_plan() {
        let p = parse("seed = 1\n[sessions]\ncount = 3\n").unwrap();
        assert_eq!(p.variants, vec![Variant::Stage, Variant::Cache]);
        assert_eq!(p.rounds, 10);
        assert_eq!(p.sessions.turns, [3, 5]);
        assert_eq!(p.background.prefill_requests, 0);
    }

    #[test]
    fn bad_fields_are_named() {
        for (text, field) in [
            ("seed=1\nrounds=0\n[sessions]\ncount=1\n", "rounds"),
            ("seed=1\n[sessions]\ncount=0\n", "sessions.count"),
            (
                "seed=1\n[sessions]\ncount=1\nturns=[4,2]\n",
                "sessions.turns",
            ),
            (
                "seed=1\n[sessions]\ncount=1\nefficient_share=1.5\n",
                "sessions.efficient_share",
            ),
            (
                "seed=1\nvariants=[\"stage\",\"count\",\"cache\"]\norder=\"abba\"\n[sessions]\ncount=1\n",
                "order",
            ),
            (
                "seed=1\nvariants=[\"cache\",\"cache\"]\n[sessions]\ncount=1\n",
                "variants",
            ),
            (
                "seed=1\n[sessions]\ncount=1\n[background]\ntarget=\"x\"\n",
                "background.target",
            ),
            (
                "seed=1\n[sessions]\ncount=1\n[target]\nrequest_timeout_ms=0\n",
                "target.request_timeout_ms",
            ),
            (
                "seed=1\n[sessions]\ncount=1\n[target]\nfrontend_url=\"https://h\"\n",
                "target.frontend_url",
            ),
        ] {
            let e = parse(text).unwrap_err().to_string();
            assert!(e.contains(&format!("`{field}`")), "{text}: {e}");
            assert!(e.contains("p.toml"), "{e}");
        }
        for (target, field) in [
            ("retries = 1", "target.retries"),
            ("retry_backoff_ms = 5", "target.retry_backoff_ms"),
            ("warmup_requests = 0", "target.warmup_requests"),
        ] {
            let e = parse(&format!(
                "seed=1\n[sessions]\ncount=1\n[target]\n{target}\n"
            ))
            .unwrap_err()
            .to_string();
            assert!(
                e.starts_with(&format!("plan p.toml: `{field}` is not used by sy-eval: ")),
                "{e}"
            );
        }
        let p = parse("seed=1\n[sessions]\ncount=1\n[target]\nbearer_token_env=\"T\"\nconnect_timeout_ms=500\n")
            .unwrap();
        assert_eq!(p.target.bearer_token_env.as_deref(), Some("T"));
        assert_eq!(p.target.connect_timeout_ms, 500);
        let e = parse("seed=1\n[sessions]\ncount=1\nbogus=2\n").unwrap_err();
        assert!(e.to_string().contains("bogus"), "{e}");
    }
}
