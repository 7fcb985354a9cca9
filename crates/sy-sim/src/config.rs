//! Simulator configuration (TOML).
//!
//! Every duration is *simulated* milliseconds; the wall clock sees `sim × time_scale`
//! (`time_scale = 1` real time, `0.01` a hundred times faster, `0` no sleeping at all).

use std::collections::BTreeSet;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::SimError;

/// The whole simulator: models (each a pool of workers), time scale, seed, faults.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SimConfig {
    /// Seed for worker ids, output token ids, router tie-breaks and fault draws.
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// Wall seconds per simulated second (0 = never sleep).
    #[serde(default = "default_time_scale")]
    pub time_scale: f64,
    /// The models (Dynamo namespaces), each with its own workers.
    pub models: Vec<ModelConfig>,
    /// Fault injection (also changeable at runtime through [`crate::SimHandle`]).
    #[serde(default)]
    pub faults: FaultConfig,
    /// Worker lifecycle timings.
    #[serde(default)]
    pub lifecycle: LifecycleConfig,
    /// The router cost of `/select` and of unpinned frontend requests.
    #[serde(default)]
    pub router: RouterConfig,
}

fn default_seed() -> u64 {
    42
}
fn default_time_scale() -> f64 {
    1.0
}

/// One model: its workers and their engine parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    /// Model name (the `model` of requests, `model_name` of the selection service).
    pub name: String,
    /// Number of workers.
    #[serde(default = "default_workers")]
    pub workers: usize,
    /// Per-worker speed multipliers (step time is divided by it); missing entries = 1.
    #[serde(default)]
    pub worker_speeds: Vec<f64>,
    /// Tokens per KV block.
    #[serde(default = "default_block_size")]
    pub block_size: u32,
    /// KV cache capacity per worker, in blocks.
    #[serde(default = "default_kv_blocks")]
    pub kv_blocks: u64,
    /// Token budget of one scheduler step (decodes + prefill chunks).
    #[serde(default = "default_mbt")]
    pub max_num_batched_tokens: u64,
    /// Maximum running sequences per worker.
    #[serde(default = "default_max_num_seqs")]
    pub max_num_seqs: usize,
    /// Whether workers are registered in the selection service with their
    /// `max_num_batched_tokens` (false reproduces Dynamo's silent 10,000,000 capacity).
    #[serde(default = "default_true")]
    pub advertise_capacity: bool,
    /// Output length when a request gives no `max_tokens`.
    #[serde(default = "default_max_tokens")]
    pub default_max_tokens: u32,
    /// Simulated ms the frontend spends on this model's requests outside its own TTFT timer
    /// beyond what the simulator's handling costs (a real frontend parses the request before its
    /// timer starts and writes the event after it stops): the first token's event is held this
    /// much longer once the frontend has it, so the client's TTFT grows and `nvext.timing` does
    /// not. `sy-sim fit-config --sim-records` fits it. Default 0.
    #[serde(default)]
    pub frontend_untimed_ms: f64,
    /// Simulated ms between the frontend receiving a request and the worker's engine seeing it,
    /// inside the frontend's TTFT timer (Dynamo's request plane to the worker and the first
    /// token's way back): a request reaches its worker this much after it arrived. Default 0;
    /// about 2 ms against the local mocker stack (`docs/benchmarks.md`).
    #[serde(default)]
    pub request_plane_ms: f64,
    /// Which timing model the worker's engine runs: `step` (default: [`StepTimeConfig`], fitted
    /// by `sy-sim fit-config`) or `mocker` (Dynamo 1.6.1's mocker polynomial, `step` ignored).
    #[serde(default)]
    pub timing: TimingKind,
    /// Step-time parameters (`timing = "step"`).
    #[serde(default)]
    pub step: StepTimeConfig,
}

/// The timing model of a model's workers. Either way the scheduler and KV manager are the
/// mocker's own (`aisimulate-core` 0.13.0's vLLM engine, which `dynamo-mocker` 1.6.1 runs) and the
/// worker's speed is the engine's `speedup_ratio`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimingKind {
    /// [`StepTimeConfig`]'s prefill and decode costs, as the engine's timing model.
    #[default]
    Step,
    /// Dynamo's mocker polynomial (`aisimulate-core` 0.13.0, `engine/common/perf_model.rs`):
    /// what `python -m dynamo.mocker --speedup-ratio S` runs, with `worker_speeds` as `S`.
    Mocker,
}

fn default_workers() -> usize {
    2
}
fn default_block_size() -> u32 {
    16
}
fn default_kv_blocks() -> u64 {
    2048
}
fn default_mbt() -> u64 {
    2048
}
fn default_max_num_seqs() -> usize {
    256
}
fn default_true() -> bool {
    true
}
fn default_max_tokens() -> u32 {
    16
}

/// Step time, simulated milliseconds, as the timing model of the mocker engine (which asks for
/// a pass's prefill batch and its decode batch separately and adds them):
///
/// ```text
/// prefill = base_ms + Σ_chunks [ prefill_ms_per_token       × chunk
///                              + cached_ms_per_token        × context before the chunk
///                              + attention_ms_per_token_ctx × chunk × (context before + chunk/2) / 1000 ]
/// decode  = base_ms (unless the pass also prefilled) + Σ_decoding [ decode_ms_per_seq + decode_ms_per_ctx × context / 1000 ]
/// ```
/// each divided by the worker's speed (the engine's `speedup_ratio`). The engine gives a batch's
/// mean chunk and mean context, so a batch of several chunks is costed at its means. A pass with
/// no prefill (no decode) has no prefill (decode) time; a pass with both pays `base_ms` once, as
/// one forward pass of a real engine does (vLLM runs a step's prefill chunks and decodes in one
/// forward pass).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StepTimeConfig {
    /// Fixed cost of a step with any work.
    #[serde(default = "d_base")]
    pub base_ms: f64,
    /// Per fresh (uncached) prefill token.
    #[serde(default = "d_prefill")]
    pub prefill_ms_per_token: f64,
    /// Per token of context already in the KV cache before a prefill chunk (the reused prefix,
    /// earlier chunks): reusing the prefix is cheaper than computing it, not free.
    #[serde(default = "d_cached")]
    pub cached_ms_per_token: f64,
    /// Attention of prefill tokens over their context (cached or not), per token per 1k context.
    #[serde(default = "d_attn")]
    pub attention_ms_per_token_ctx: f64,
    /// Per decoding sequence in the batch.
    #[serde(default = "d_decode")]
    pub decode_ms_per_seq: f64,
    /// Per 1k tokens of context read by the decoding sequences.
    #[serde(default = "d_decode_ctx")]
    pub decode_ms_per_ctx: f64,
}

fn d_base() -> f64 {
    2.0
}
fn d_prefill() -> f64 {
    0.05
}
fn d_cached() -> f64 {
    0.005
}
fn d_attn() -> f64 {
    0.01
}
fn d_decode() -> f64 {
    0.1
}
fn d_decode_ctx() -> f64 {
    0.05
}

impl Default for StepTimeConfig {
    fn default() -> Self {
        Self {
            base_ms: d_base(),
            prefill_ms_per_token: d_prefill(),
            cached_ms_per_token: d_cached(),
            attention_ms_per_token_ctx: d_attn(),
            decode_ms_per_seq: d_decode(),
            decode_ms_per_ctx: d_decode_ctx(),
        }
    }
}

impl StepTimeConfig {
    /// Simulated ms (at speed 1) of a prefill batch of `batch` chunks whose mean context after
    /// the chunk is `mean_isl` tokens, of which `mean_prefix` were there before it.
    pub fn prefill_ms(&self, batch: usize, mean_isl: usize, mean_prefix: usize) -> f64 {
        if batch == 0 {
            return 0.0;
        }
        let chunk = mean_isl.saturating_sub(mean_prefix) as f64;
        let before = mean_prefix as f64;
        self.base_ms
            + batch as f64
                * (self.prefill_ms_per_token * chunk
                    + self.cached_ms_per_token * before
                    + self.attention_ms_per_token_ctx * chunk * (before + chunk / 2.0) / 1000.0)
    }

    /// Simulated ms (at speed 1) of a decode batch of `batch` sequences of mean context
    /// `mean_context` tokens; `with_base`: whether it pays the step's fixed cost (false when the
    /// same pass also prefilled and paid it there).
    pub fn decode_ms(&self, batch: usize, mean_context: usize, with_base: bool) -> f64 {
        if batch == 0 {
            return 0.0;
        }
        (if with_base { self.base_ms } else { 0.0 })
            + batch as f64
                * (self.decode_ms_per_seq + self.decode_ms_per_ctx * mean_context as f64 / 1000.0)
    }

    /// All parameters zero: an infinitely fast engine (benchmarks).
    pub fn zero() -> Self {
        Self {
            base_ms: 0.0,
            prefill_ms_per_token: 0.0,
            cached_ms_per_token: 0.0,
            attention_ms_per_token_ctx: 0.0,
            decode_ms_per_seq: 0.0,
            decode_ms_per_ctx: 0.0,
        }
    }
}

/// How a dropped stream ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DropMode {
    /// `data: {"error": {... "code": 503}}` then `data: [DONE]` (Dynamo without migration).
    #[default]
    ErrorEvent,
    /// The connection is closed without `[DONE]`.
    Close,
}

/// Fault injection. Fractions are per request, drawn from the seeded generator.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultConfig {
    /// Fraction of frontend requests answered with `error_status` before any work.
    #[serde(default)]
    pub error_rate: f64,
    /// Status of those answers (5xx).
    #[serde(default = "d_error_status")]
    pub error_status: u16,
    /// Fraction of requests whose first token is delayed by `stall_ms`.
    #[serde(default)]
    pub stall_rate: f64,
    /// Stall before the first token (simulated ms).
    #[serde(default)]
    pub stall_ms: f64,
    /// Fraction of streams dropped after `drop_after_tokens` tokens.
    #[serde(default)]
    pub drop_rate: f64,
    /// Tokens delivered before a drop.
    #[serde(default = "d_drop_after")]
    pub drop_after_tokens: u32,
    /// How a dropped stream ends.
    #[serde(default)]
    pub drop_mode: DropMode,
    /// Delay of every selection-service answer (simulated ms).
    #[serde(default)]
    pub selection_delay_ms: f64,
    /// Fraction of selection-service answers that are delayed (1 = all).
    #[serde(default = "d_one")]
    pub selection_delay_rate: f64,
}

fn d_error_status() -> u16 {
    503
}
fn d_drop_after() -> u32 {
    2
}
fn d_one() -> f64 {
    1.0
}

impl Default for FaultConfig {
    fn default() -> Self {
        Self {
            error_rate: 0.0,
            error_status: d_error_status(),
            stall_rate: 0.0,
            stall_ms: 0.0,
            drop_rate: 0.0,
            drop_after_tokens: d_drop_after(),
            drop_mode: DropMode::ErrorEvent,
            selection_delay_ms: 0.0,
            selection_delay_rate: 1.0,
        }
    }
}

/// Worker lifecycle timings (simulated ms), as seen on Dynamo 1.6.1.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LifecycleConfig {
    /// A killed worker stays listed in the frontend's `/health` this long (Dynamo: ~9 s).
    #[serde(default = "d_stale")]
    pub stale_listing_ms: f64,
    /// A restarted worker comes back (with a new id) after this long (Dynamo: ~2 s).
    #[serde(default = "d_restart")]
    pub restart_delay_ms: f64,
    /// Register a restarted worker's new id in the selection service automatically (the real
    /// Dynamo does not: a client must `POST /workers`).
    #[serde(default)]
    pub auto_register_restarted: bool,
    /// A restarted worker serves at once but the frontend discovers it only this long after
    /// (0 = at once). Meanwhile it is missing from `/health` and requests pinned to it get HTTP
    /// 400 `Invalid request`, as on Dynamo 1.6.1 while the frontend has not yet discovered an
    /// instance the selection service already knows.
    #[serde(default)]
    pub discovery_delay_ms: f64,
}

fn d_stale() -> f64 {
    9000.0
}
fn d_restart() -> f64 {
    2000.0
}

impl Default for LifecycleConfig {
    fn default() -> Self {
        Self {
            stale_listing_ms: d_stale(),
            restart_delay_ms: d_restart(),
            auto_register_restarted: false,
            discovery_delay_ms: 0.0,
        }
    }
}

/// Router cost (Dynamo's default): `overlap_score_weight × prefill_blocks + decode_blocks`,
/// lowest wins, ties broken by the seeded generator.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouterConfig {
    #[serde(default = "d_one")]
    pub overlap_score_weight: f64,
}

impl Default for RouterConfig {
    fn default() -> Self {
        Self {
            overlap_score_weight: 1.0,
        }
    }
}

impl ModelConfig {
    /// A model with default engine parameters.
    pub fn new(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            workers: default_workers(),
            worker_speeds: Vec::new(),
            block_size: default_block_size(),
            kv_blocks: default_kv_blocks(),
            max_num_batched_tokens: default_mbt(),
            max_num_seqs: default_max_num_seqs(),
            advertise_capacity: true,
            default_max_tokens: default_max_tokens(),
            timing: TimingKind::Step,
            step: StepTimeConfig::default(),
            frontend_untimed_ms: 0.0,
            request_plane_ms: 0.0,
        }
    }

    /// Speed multiplier of worker `i`.
    pub fn speed(&self, i: usize) -> f64 {
        self.worker_speeds.get(i).copied().unwrap_or(1.0)
    }
}

impl Default for SimConfig {
    /// Two models, `efficient` (fast) and `capable` (about three times slower per token),
    /// two workers each.
    fn default() -> Self {
        let efficient = ModelConfig::new("efficient");
        let mut capable = ModelConfig::new("capable");
        capable.step = StepTimeConfig {
            base_ms: 4.0,
            prefill_ms_per_token: 0.15,
            cached_ms_per_token: 0.015,
            attention_ms_per_token_ctx: 0.03,
            decode_ms_per_seq: 0.3,
            decode_ms_per_ctx: 0.15,
        };
        Self {
            seed: default_seed(),
            time_scale: default_time_scale(),
            models: vec![efficient, capable],
            faults: FaultConfig::default(),
            lifecycle: LifecycleConfig::default(),
            router: RouterConfig::default(),
        }
    }
}

fn check_fraction(name: &str, v: f64) -> Result<(), String> {
    if v.is_finite() && (0.0..=1.0).contains(&v) {
        Ok(())
    } else {
        Err(format!(
            "faults.{name} must be a fraction in [0, 1], got {v}"
        ))
    }
}

fn check_nonneg(name: &str, v: f64) -> Result<(), String> {
    if v.is_finite() && v >= 0.0 {
        Ok(())
    } else {
        Err(format!("{name} must be a finite number >= 0, got {v}"))
    }
}

impl FaultConfig {
    /// Checks fractions, status and durations.
    pub fn validate(&self) -> Result<(), String> {
        check_fraction("error_rate", self.error_rate)?;
        check_fraction("stall_rate", self.stall_rate)?;
        check_fraction("drop_rate", self.drop_rate)?;
        check_fraction("selection_delay_rate", self.selection_delay_rate)?;
        check_nonneg("faults.stall_ms", self.stall_ms)?;
        check_nonneg("faults.selection_delay_ms", self.selection_delay_ms)?;
        if !(500..=599).contains(&self.error_status) {
            return Err(format!(
                "faults.error_status must be a 5xx status, got {}",
                self.error_status
            ));
        }
        Ok(())
    }
}

impl SimConfig {
    /// Reads and validates a TOML file.
    pub fn from_toml_path(path: impl AsRef<Path>) -> Result<Self, SimError> {
        let path = path.as_ref();
        let bytes = sy_rundir::read_input(path, 1 << 20).map_err(|e| SimError::Config {
            source_name: path.display().to_string(),
            message: e.to_string(),
        })?;
        let text = String::from_utf8(bytes).map_err(|e| SimError::Config {
            source_name: path.display().to_string(),
            message: format!(
                "not UTF-8 text (invalid byte at offset {})",
                e.utf8_error().valid_up_to()
            ),
        })?;
        Self::from_toml_str(&text, &path.display().to_string())
    }

    /// Parses and validates TOML text; `source_name` names it in errors.
    pub fn from_toml_str(text: &str, source_name: &str) -> Result<Self, SimError> {
        let cfg: SimConfig = toml::from_str(text).map_err(|e| SimError::Config {
            source_name: source_name.to_owned(),
            message: e.to_string(),
        })?;
        cfg.validate().map_err(|message| SimError::Config {
            source_name: source_name.to_owned(),
            message,
        })?;
        Ok(cfg)
    }

    /// Checks every field; the message names the field and what was expected.
    pub fn validate(&self) -> Result<(), String> {
        check_nonneg("time_scale", self.time_scale)?;
        self.check_bounds()?;
        if self.models.is_empty() {
            return Err("models: at least one [[models]] entry is required".into());
        }
        let mut names = BTreeSet::new();
        for (i, m) in self.models.iter().enumerate() {
            let at = format!("models[{i}] ({})", m.name);
            if m.name.trim().is_empty() {
                return Err(format!("models[{i}].name must not be empty"));
            }
            if !names.insert(m.name.as_str()) {
                return Err(format!("{at}: duplicate model name"));
            }
            if m.workers == 0 {
                return Err(format!("{at}.workers must be >= 1"));
            }
            if m.block_size == 0 {
                return Err(format!("{at}.block_size must be >= 1"));
            }
            if m.kv_blocks == 0 {
                return Err(format!("{at}.kv_blocks must be >= 1"));
            }
            if m.max_num_batched_tokens == 0 {
                return Err(format!("{at}.max_num_batched_tokens must be >= 1"));
            }
            if m.max_num_seqs == 0 {
                return Err(format!("{at}.max_num_seqs must be >= 1"));
            }
            for (j, s) in m.worker_speeds.iter().enumerate() {
                if !(s.is_finite() && *s > 0.0) {
                    return Err(format!("{at}.worker_speeds[{j}] must be > 0, got {s}"));
                }
            }
            let s = &m.step;
            for (n, v) in [
                ("base_ms", s.base_ms),
                ("prefill_ms_per_token", s.prefill_ms_per_token),
                ("cached_ms_per_token", s.cached_ms_per_token),
                ("attention_ms_per_token_ctx", s.attention_ms_per_token_ctx),
                ("decode_ms_per_seq", s.decode_ms_per_seq),
                ("decode_ms_per_ctx", s.decode_ms_per_ctx),
            ] {
                check_nonneg(&format!("{at}.step.{n}"), v)?;
            }
            check_nonneg(&format!("{at}.frontend_untimed_ms"), m.frontend_untimed_ms)?;
            check_nonneg(&format!("{at}.request_plane_ms"), m.request_plane_ms)?;
        }
        self.faults.validate()?;
        check_nonneg(
            "lifecycle.stale_listing_ms",
            self.lifecycle.stale_listing_ms,
        )?;
        check_nonneg(
            "lifecycle.restart_delay_ms",
            self.lifecycle.restart_delay_ms,
        )?;
        check_nonneg(
            "lifecycle.discovery_delay_ms",
            self.lifecycle.discovery_delay_ms,
        )?;
        check_nonneg(
            "router.overlap_score_weight",
            self.router.overlap_score_weight,
        )?;
        Ok(())
    }

    /// The size bounds of a configuration ([`limits`]): every worker is a task with its own
    /// state and connections, so a count far beyond any real deployment is refused, with the
    /// field and the limit, before anything is allocated or started.
    fn check_bounds(&self) -> Result<(), String> {
        use limits::*;
        let at_most = |field: String, value: f64, max: f64| {
            if value > max {
                Err(format!(
                    "{field} is {value}, more than the {max} a simulator configuration allows"
                ))
            } else {
                Ok(())
            }
        };
        at_most("time_scale".into(), self.time_scale, MAX_TIME_SCALE)?;
        at_most("models".into(), self.models.len() as f64, MAX_MODELS as f64)?;
        let mut total = 0usize;
        for (i, m) in self.models.iter().enumerate() {
            let at = format!("models[{i}]");
            total = total.saturating_add(m.workers);
            for (field, value, max) in [
                ("workers", m.workers as f64, MAX_WORKERS as f64),
                (
                    "worker_speeds",
                    m.worker_speeds.len() as f64,
                    MAX_WORKERS as f64,
                ),
                ("block_size", f64::from(m.block_size), MAX_BLOCK_SIZE as f64),
                ("kv_blocks", m.kv_blocks as f64, MAX_KV_BLOCKS as f64),
                (
                    "max_num_batched_tokens",
                    m.max_num_batched_tokens as f64,
                    MAX_BATCHED_TOKENS as f64,
                ),
                ("max_num_seqs", m.max_num_seqs as f64, MAX_SEQS as f64),
                (
                    "default_max_tokens",
                    f64::from(m.default_max_tokens),
                    MAX_BATCHED_TOKENS as f64,
                ),
                ("frontend_untimed_ms", m.frontend_untimed_ms, MAX_MS),
                ("request_plane_ms", m.request_plane_ms, MAX_MS),
            ] {
                at_most(format!("{at}.{field}"), value, max)?;
            }
        }
        at_most(
            "models[*].workers (sum)".into(),
            total as f64,
            MAX_TOTAL_WORKERS as f64,
        )?;
        for (field, ms) in [
            ("faults.stall_ms", self.faults.stall_ms),
            ("faults.selection_delay_ms", self.faults.selection_delay_ms),
            (
                "lifecycle.stale_listing_ms",
                self.lifecycle.stale_listing_ms,
            ),
            (
                "lifecycle.restart_delay_ms",
                self.lifecycle.restart_delay_ms,
            ),
            (
                "lifecycle.discovery_delay_ms",
                self.lifecycle.discovery_delay_ms,
            ),
        ] {
            at_most(field.into(), ms, MAX_MS)?;
        }
        Ok(())
    }

    /// Wall-clock duration of `sim_ms` simulated milliseconds.
    pub fn wall(&self, sim_ms: f64) -> std::time::Duration {
        wall(self.time_scale, sim_ms)
    }
}

/// Wall-clock duration of `sim_ms` simulated milliseconds at `time_scale`.
pub fn wall(time_scale: f64, sim_ms: f64) -> std::time::Duration {
    let ms = sim_ms * time_scale;
    if ms.is_finite() && ms > 0.0 {
        std::time::Duration::from_secs_f64(ms / 1000.0)
    } else {
        std::time::Duration::ZERO
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_validates_and_round_trips_through_toml() {
        let cfg = SimConfig::default();
        cfg.validate().unwrap();
        let text = toml::to_string(&cfg).unwrap();
        let back = SimConfig::from_toml_str(&text, "x").unwrap();
        assert_eq!(back, cfg);
    }

    #[test]
    fn bad_fields_are_named() {
        let err =
            SimConfig::from_toml_str("[[models]]\nname = \"a\"\nblock_size = 0\n", "sim.toml")
                .unwrap_err()
                .to_string();
        assert!(
            err.contains("sim.toml") && err.contains("block_size"),
            "{err}"
        );
        let err = SimConfig::from_toml_str(
            "[[models]]\nname = \"a\"\n[faults]\nerror_rate = 2.0\n",
            "sim.toml",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("error_rate"), "{err}");
        let err = SimConfig::from_toml_str("[[models]]\nname = \"a\"\nbogus = 1\n", "sim.toml")
            .unwrap_err()
            .to_string();
        assert!(err.contains("bogus"), "{err}");
    }
}

/// The size bounds of a simulator configuration ([`SimConfig::validate`]).
pub mod limits {
    /// Wall seconds per simulated second.
    pub const MAX_TIME_SCALE: f64 = 1_000.0;
    /// Models of one simulator.
    pub const MAX_MODELS: usize = 64;
    /// Workers of one model.
    pub const MAX_WORKERS: usize = 1_024;
    /// Workers of every model together.
    pub const MAX_TOTAL_WORKERS: usize = 4_096;
    /// Tokens per KV block.
    pub const MAX_BLOCK_SIZE: u32 = 1 << 16;
    /// KV blocks per worker.
    pub const MAX_KV_BLOCKS: u64 = 1 << 32;
    /// Tokens of one scheduler step (and a default output length).
    pub const MAX_BATCHED_TOKENS: u64 = 1 << 24;
    /// Running sequences per worker.
    pub const MAX_SEQS: usize = 1 << 16;
    /// Any delay of the configuration, simulated milliseconds (one day).
    pub const MAX_MS: f64 = 86_400_000.0;
}
