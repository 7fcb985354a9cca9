//! `blocks/<block>.json`, what an evaluation records: one [`TurnRecord`] per turn, one
//! [`SessionRecord`] per session, one [`BackgroundSample`] per competing request, grouped per
//! block ([`BlockResult`], written atomically by `sy-eval` when the block ends, which is what
//! `--resume` skips).

use serde::{Deserialize, Serialize};
use sy_selector::{Decision, Model, Observation, Variant};

/// Defined with the run directory's layout.
pub use crate::layout::BLOCK_SCHEMA_VERSION;

/// One routed and executed turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnRecord {
    pub round: u32,
    pub variant: Variant,
    /// Index of the session in the block (the same index is the same session shape in every
    /// block of the run: the pairing key).
    pub session: u32,
    pub session_id: String,
    pub turn: u32,
    /// Stage's proposal.
    pub proposal: Model,
    /// The final choice (the model that executed).
    pub choice: Model,
    /// The stable short reason (`override`, `trigger_false`, `observe_failed`, …).
    pub reason: String,
    /// Whether the rule fell back to Stage's choice (failed guard, unusable prediction,
    /// observation failure).
    pub fallback: bool,
    /// The whole decision (predictions, margins, ages), when the rule ran.
    pub decision: Option<Decision>,
    /// What the rule saw of each candidate, when observed.
    pub efficient: Option<Observation>,
    pub capable: Option<Observation>,
    /// The route failure's message, if any.
    pub route_failure: Option<String>,
    /// Observation (both candidates, concurrently) plus decision, wall milliseconds.
    pub routing_overhead_ms: f64,
    /// The observation's own query time (part of the overhead).
    pub observe_ms: Option<f64>,
    /// Prompt tokens sent.
    pub prompt_tokens: u64,
    /// Output tokens asked.
    pub max_tokens: u64,
    /// The worker the reservation booked.
    pub reserved_worker: Option<u64>,
    /// The worker that served (the frontend's answer).
    pub served_worker: Option<u64>,
    pub ttft_ms: Option<f64>,
    /// Full-response latency (send to the end of the stream).
    pub e2e_ms: Option<f64>,
    pub server_ttft_ms: Option<f64>,
    pub output_tokens: Option<u64>,
    /// The worker's reported cache hit.
    pub cached_tokens: Option<u64>,
    /// Prompt tokens the worker had to compute: prompt − cached.
    pub uncached_input_tokens: Option<u64>,
    /// Wall-clock start of the turn (after its think time), epoch milliseconds.
    pub started_at_unix_ms: f64,
    /// The failure (reservation or stream), if the turn failed.
    pub error: Option<String>,
}

/// One session of one block.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionRecord {
    pub round: u32,
    pub variant: Variant,
    pub session: u32,
    pub session_id: String,
    pub turns: u32,
    /// From the first turn's start to the last turn's end, think times included.
    pub completion_ms: f64,
    /// Every turn executed without error.
    pub ok: bool,
    /// Think time planned and slept longer than planned (the client lagging its schedule).
    pub think_planned_ms: f64,
    pub think_overshoot_ms: f64,
}

/// One competing (background) request that ended during a block.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BackgroundSample {
    pub model: Model,
    pub ttft_ms: Option<f64>,
    pub e2e_ms: Option<f64>,
    pub ok: bool,
}

/// Everything one block (one variant in one round) produced.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BlockResult {
    pub schema_version: u32,
    pub run_id: String,
    pub round: u32,
    /// Position of the block in the run (0-based).
    pub position: u32,
    pub variant: Variant,
    pub started_at: String,
    pub ended_at: String,
    /// How the block's starting conditions were matched (see docs/eval.md).
    pub start_state: String,
    pub turns: Vec<TurnRecord>,
    pub sessions: Vec<SessionRecord>,
    pub background: Vec<BackgroundSample>,
    /// Reservations still booked after the block (must be empty).
    pub outstanding_reservations: Vec<String>,
    /// `/loads` showed no booked request or prefill token after the block.
    pub loads_zero_at_end: Option<bool>,
}

impl BlockResult {
    /// The file name of a block: `r{round}-{variant}.json`.
    pub fn file_name(round: u32, variant: Variant) -> String {
        format!("r{round}-{variant}.json")
    }
}
