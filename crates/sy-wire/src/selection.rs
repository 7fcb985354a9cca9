//! The selection service (`python -m dynamo.select_service`): worker catalogue, queries and
//! reservations.
//!
//! Routes and bodies:
//! - `POST /workers` [`WorkerRegistration`] → 201 [`WorkerRecord`]; `GET /workers` → `[WorkerRecord]`;
//!   `DELETE /workers/{id}`.
//! - `GET /ready` → [`ReadyResponse`].
//! - `POST /select` [`SelectRequest`] → [`SelectResponse`] (query only, books nothing; with
//!   `advisory: true` the answer carries [`WorkerLoad`]).
//! - `POST /select_and_reserve` [`SelectRequest`] (with `selection_id`) → [`SelectResponse`], books.
//! - `POST /reservations` [`ReservationRequest`] → [`ReservationResponse`] (replay a cached
//!   `selection_id`, or the explicit form with `worker_id`).
//! - `POST /reservations/{id}/prefill_complete`, `POST /reservations/{id}/output_block`,
//!   `DELETE /reservations/{id}` → [`StatusResponse`] `{"status": "ok"}`.
//! - `GET /loads?model_name=` → `[ModelLoads]` (booked amounts only).
//! - `POST /potential_loads` [`PromptQuery`] → `[PotentialLoad]` (booked + this prompt's uncached).
//! - `POST /overlap_scores` [`PromptQuery`] → [`OverlapScoresResponse`] (blocks).
//!
//! Errors: `{"error": "..."}` ([`crate::ErrorBody::text`]); unknown model 503, unknown
//! reservation 404, reused `selection_id` 409.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::{DpRank, Extra, TokenId, WorkerId};

/// The routing group every worker of our deployments uses.
pub const DEFAULT_ROUTING_GROUP: &str = "default";

/// A worker's lifecycle in the selection service's catalogue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkerLifecycle {
    /// Registered, metadata missing.
    Incomplete,
    /// Eligible for selection.
    Schedulable,
    /// No new work; existing work finishes.
    Draining,
    /// Not eligible.
    Unschedulable,
}

/// `POST /workers` body.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkerRegistration {
    pub worker_id: WorkerId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub routing_group: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_events_endpoint: Option<String>,
    /// Per dp rank (JSON object keys are strings: `{"0": "tcp://..."}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_events_endpoints: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_size: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_parallel_start_rank: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_parallel_size: Option<u32>,
    /// The prefill batch-token capacity (P's denominator). Missing → Dynamo silently uses
    /// 10,000,000: treat as invalid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_num_batched_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_kv_blocks: Option<u64>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// One row of `GET /workers` (and the answer to `POST /workers`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerRecord {
    pub worker_id: WorkerId,
    #[serde(default)]
    pub model_name: String,
    #[serde(default)]
    pub routing_group: String,
    pub lifecycle: WorkerLifecycle,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_events_endpoint: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_events_endpoints: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_size: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_parallel_start_rank: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_parallel_size: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_num_batched_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_kv_blocks: Option<u64>,
    #[serde(default)]
    pub taints: Vec<String>,
    #[serde(default)]
    pub topology_domains: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_schedulable_reasons: Option<Vec<String>>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `GET /ready`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReadyResponse {
    pub ready: bool,
    #[serde(default)]
    pub schedulable_workers: u64,
    #[serde(default)]
    pub workers: Vec<WorkerRecord>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `POST /select` and `POST /select_and_reserve` body. The prompt is either `token_ids` or
/// pre-hashed (`block_hashes`, `sequence_hashes`, `isl_tokens`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SelectRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub routing_group: Option<String>,
    /// Booking id (required by `select_and_reserve`; on `select` it caches the inputs for a
    /// later `POST /reservations` replay).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selection_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_ids: Option<Vec<TokenId>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_hashes: Option<Vec<u64>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequence_hashes: Option<Vec<i64>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isl_tokens: Option<u64>,
    /// Query from current state without queue admission; adds `worker_load` to the answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub advisory: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_output_tokens: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_worker_ids: Option<Vec<WorkerId>>,
    /// Pins the pick to one worker **and** data-parallel rank (`pinned_worker`, a
    /// `WorkerWithDpRank`, in Dynamo 1.6.1's selection-service `WorkerRequest`): the only way to
    /// book, and so to prime, one given rank of a data-parallel worker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pinned_worker: Option<PinnedWorker>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `pinned_worker` of a select request: one worker and one of its data-parallel ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PinnedWorker {
    pub worker_id: WorkerId,
    pub dp_rank: DpRank,
}

/// `overlap` in a select answer: matched **tokens** per tier. Tiers are cumulative: never add them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OverlapSummary {
    #[serde(default)]
    pub longest_matched: u64,
    #[serde(default)]
    pub gpu: u64,
    /// Per dp rank (string keys), device tokens.
    #[serde(default)]
    pub dp: BTreeMap<String, u64>,
    #[serde(default)]
    pub cpu: u64,
    #[serde(default)]
    pub disk: u64,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `worker_load` in an advisory select answer: P = active_prefill_tokens / prefill_token_capacity.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkerLoad {
    pub active_prefill_tokens: u64,
    pub prefill_token_capacity: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_kv_blocks: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefill_busy: Option<bool>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// Answer of `POST /select` and `POST /select_and_reserve`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SelectResponse {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selection_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequence_hashes: Option<Vec<i64>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isl_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub track_prefill_tokens: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub routing_group: Option<String>,
    pub worker_id: WorkerId,
    #[serde(default)]
    pub dp_rank: DpRank,
    #[serde(default)]
    pub endpoint: String,
    #[serde(default)]
    pub block_size: u32,
    #[serde(default)]
    pub overlap: OverlapSummary,
    /// Prompt tokens minus the reusable prefix: what this request adds to booked prefill.
    #[serde(default)]
    pub effective_prefill_tokens: u64,
    /// KV blocks on the chosen worker once this request decodes (including its own).
    #[serde(default)]
    pub potential_decode_blocks: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode_busy: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_load: Option<WorkerLoad>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `POST /reservations` body: replay the selection cached under `selection_id`, or book
/// explicitly on `worker_id` (then the prompt or `effective_prefill_tokens` says how much).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReservationRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub routing_group: Option<String>,
    pub selection_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_id: Option<WorkerId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dp_rank: Option<DpRank>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_ids: Option<Vec<TokenId>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_hashes: Option<Vec<u64>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequence_hashes: Option<Vec<i64>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isl_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_output_tokens: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effective_prefill_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub track_prefill_tokens: Option<bool>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// Answer of `POST /reservations`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReservationResponse {
    pub selection_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub routing_group: Option<String>,
    pub worker_id: WorkerId,
    #[serde(default)]
    pub dp_rank: DpRank,
    #[serde(default)]
    pub endpoint: String,
    #[serde(flatten)]
    pub extra: Extra,
}

/// Body of `POST /potential_loads` and `POST /overlap_scores`: a prompt.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PromptQuery {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub routing_group: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_ids: Option<Vec<TokenId>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub block_hashes: Option<Vec<u64>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequence_hashes: Option<Vec<i64>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isl_tokens: Option<u64>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// One worker/rank row of `/loads` (booked amounts) or `/potential_loads` (booked + prompt).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PotentialLoad {
    pub worker_id: WorkerId,
    #[serde(default)]
    pub dp_rank: DpRank,
    #[serde(default)]
    pub potential_prefill_tokens: u64,
    #[serde(default)]
    pub potential_decode_blocks: u64,
    /// Booked requests on this worker/rank (R).
    #[serde(default)]
    pub active_requests: u64,
    #[serde(flatten)]
    pub extra: Extra,
}

/// One model/routing-group entry of `GET /loads`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ModelLoads {
    #[serde(default)]
    pub model_name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub routing_group: Option<String>,
    #[serde(default)]
    pub loads: Vec<PotentialLoad>,
    /// Requests waiting in the router queue (pool).
    #[serde(default)]
    pub pending_count: u64,
    /// Prompt tokens waiting in the router queue (pool).
    #[serde(default)]
    pub pending_isl_tokens: u64,
    #[serde(flatten)]
    pub extra: Extra,
}

/// One worker/rank of `POST /overlap_scores`, in **blocks**.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkerOverlapScore {
    pub worker_id: WorkerId,
    #[serde(default)]
    pub dp_rank: DpRank,
    #[serde(default)]
    pub device_blocks: u64,
    #[serde(default)]
    pub host_pinned_blocks: u64,
    #[serde(default)]
    pub disk_blocks: u64,
    #[serde(flatten)]
    pub extra: Extra,
}

/// Answer of `POST /overlap_scores`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OverlapScoresResponse {
    #[serde(default)]
    pub block_size: u32,
    #[serde(default)]
    pub num_blocks: u64,
    #[serde(default)]
    pub workers: Vec<WorkerOverlapScore>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `{"status": "ok"}`: answer of `prefill_complete`, `output_block` and `DELETE /reservations/{id}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StatusResponse {
    pub status: String,
    #[serde(flatten)]
    pub extra: Extra,
}

impl StatusResponse {
    /// `{"status": "ok"}`.
    pub fn ok() -> Self {
        Self {
            status: "ok".to_owned(),
            extra: Extra::new(),
        }
    }
}
