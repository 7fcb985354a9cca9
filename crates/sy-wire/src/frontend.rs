//! The frontend's OpenAI-compatible surface (`python -m dynamo.frontend`), with Dynamo's `nvext`.
//!
//! Requests: [`CompletionRequest`] (`POST /v1/completions`), [`ChatCompletionRequest`]
//! (`POST /v1/chat/completions`). Answers: [`CompletionResponse`] (also each SSE chunk of a
//! streamed completion), [`ChatCompletionResponse`], [`ChatCompletionChunk`], [`ErrorBody`]
//! (HTTP error bodies and the `data: {"error": ...}` event inside a started stream),
//! [`ModelList`] (`GET /v1/models`), [`HealthResponse`] (`GET /health`).

use serde::{Deserialize, Serialize};

use crate::{DpRank, Extra, TokenId, WorkerId};

/// The annotation that asks the frontend's router for its pick without running inference.
/// The trailing colon matters.
pub const QUERY_INSTANCE_ID_ANNOTATION: &str = "query_instance_id:";

/// `nvext.extra_fields` value asking for the serving worker on every chunk.
pub const EXTRA_FIELD_WORKER_ID: &str = "worker_id";

/// `nvext.extra_fields` value asking for server timings on the final chunk.
pub const EXTRA_FIELD_TIMING: &str = "timing";

/// The SSE end-of-stream marker (`data: [DONE]`).
pub const SSE_DONE: &str = "[DONE]";

/// `prompt` of a completions request: text or token ids (single or batched).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Prompt {
    /// Token-exact prompt: `"prompt": [1, 2, 3]`.
    Tokens(Vec<TokenId>),
    /// Text prompt, tokenized by the server.
    Text(String),
    /// Batched token prompts.
    TokensBatch(Vec<Vec<TokenId>>),
    /// Batched text prompts.
    TextBatch(Vec<String>),
}

/// `stream_options`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StreamOptions {
    /// Adds a final chunk with `usage` (and `prompt_tokens_details.cached_tokens`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include_usage: Option<bool>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// Dynamo's request extension `nvext`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NvExt {
    /// Pins the request to one worker (instance id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend_instance_id: Option<WorkerId>,
    /// The data-parallel rank of the pinned worker. Dynamo 1.6.1 refuses a pin to a worker with
    /// data-parallel size > 1 without it (HTTP 500, "Pinned worker … requires an explicit
    /// dp_rank").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dp_rank: Option<DpRank>,
    /// Token-exact prompt for chat requests (bypasses the chat template).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_data: Option<Vec<TokenId>>,
    /// Extra response fields: `"worker_id"`, `"timing"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra_fields: Option<Vec<String>>,
    /// Annotations, e.g. `"query_instance_id:"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<Vec<String>>,
    /// Keep generating until `max_tokens` even after an end-of-sequence token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore_eos: Option<bool>,
    #[serde(flatten)]
    pub extra: Extra,
}

impl NvExt {
    /// Whether `extra_fields` contains `field`.
    pub fn wants(&self, field: &str) -> bool {
        self.extra_fields
            .as_ref()
            .is_some_and(|f| f.iter().any(|x| x == field))
    }

    /// Whether the `query_instance_id:` annotation is present (query only, no inference).
    pub fn is_query_instance_id(&self) -> bool {
        self.annotations.as_ref().is_some_and(|a| {
            a.iter()
                .any(|x| x.starts_with(QUERY_INSTANCE_ID_ANNOTATION.trim_end_matches(':')))
        })
    }
}

/// `POST /v1/completions` body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompletionRequest {
    pub model: String,
    pub prompt: Prompt,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_tokens: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_options: Option<StreamOptions>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore_eos: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvext: Option<NvExt>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// One chat message. `content` is usually a string; multi-part content is kept as JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatMessage {
    pub role: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<serde_json::Value>,
    #[serde(flatten)]
    pub extra: Extra,
}

impl ChatMessage {
    /// A message with plain text content.
    pub fn text(role: &str, content: &str) -> Self {
        Self {
            role: role.to_owned(),
            content: Some(serde_json::Value::String(content.to_owned())),
            extra: Extra::new(),
        }
    }

    /// The text of the content: the string itself, or the `text` of each part joined.
    pub fn content_text(&self) -> String {
        match &self.content {
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(serde_json::Value::Array(parts)) => parts
                .iter()
                .filter_map(|p| p.get("text").and_then(|t| t.as_str()))
                .collect::<Vec<_>>()
                .join(""),
            _ => String::new(),
        }
    }
}

/// `POST /v1/chat/completions` body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatCompletionRequest {
    pub model: String,
    #[serde(default)]
    pub messages: Vec<ChatMessage>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_completion_tokens: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_tokens: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_options: Option<StreamOptions>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore_eos: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvext: Option<NvExt>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `usage.prompt_tokens_details`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PromptTokensDetails {
    /// The worker's real prefix-cache hit, in tokens (whole blocks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audio_tokens: Option<u64>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `usage`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens_details: Option<PromptTokensDetails>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_tokens_details: Option<serde_json::Value>,
    #[serde(flatten)]
    pub extra: Extra,
}

impl Usage {
    /// `prompt_tokens_details.cached_tokens`, if reported.
    pub fn cached_tokens(&self) -> Option<u64> {
        self.prompt_tokens_details
            .as_ref()
            .and_then(|d| d.cached_tokens)
    }
}

/// `nvext.worker_id` in answers: which worker served (aggregated: prefill = decode).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkerIdInfo {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefill_worker_id: Option<WorkerId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefill_dp_rank: Option<DpRank>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode_worker_id: Option<WorkerId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode_dp_rank: Option<DpRank>,
    #[serde(flatten)]
    pub extra: Extra,
}

impl WorkerIdInfo {
    /// The serving worker: the decode worker, else the prefill worker.
    pub fn worker(&self) -> Option<WorkerId> {
        self.decode_worker_id.or(self.prefill_worker_id)
    }
}

/// `nvext.timing` on the final chunk (server-side timings, milliseconds).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TimingInfo {
    /// Wall clock at arrival, epoch milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_received_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefill_wait_time_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefill_time_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_ms: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_time_ms: Option<f64>,
    /// Cached blocks / prompt blocks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_hit_rate: Option<f64>,
    /// Requests waiting in the router queue at arrival.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub router_queue_depth: Option<u64>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// Dynamo's response extension `nvext`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NvExtResponse {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_id: Option<WorkerIdInfo>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timing: Option<TimingInfo>,
    /// Templated prompt token ids (answers to `query_instance_id:`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_ids: Option<Vec<TokenId>>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// One choice of a text completion (or of one streamed chunk).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CompletionChoice {
    #[serde(default)]
    pub index: u32,
    #[serde(default)]
    pub text: String,
    #[serde(default)]
    pub finish_reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<serde_json::Value>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// The answer of every OpenAI-compatible route, generic over its choice: a text completion
/// ([`CompletionResponse`]), a chat completion ([`ChatCompletionResponse`]) or a streamed chat
/// chunk ([`ChatCompletionChunk`]). The members are the same; only the choice differs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Response<C> {
    #[serde(default)]
    pub id: String,
    #[serde(default)]
    pub object: String,
    #[serde(default)]
    pub created: u64,
    #[serde(default)]
    pub model: String,
    #[serde(default)]
    pub choices: Vec<C>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_fingerprint: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvext: Option<NvExtResponse>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// A text completion (`object: "text_completion"`): the whole answer, or one SSE chunk.
pub type CompletionResponse = Response<CompletionChoice>;

/// Assistant message in a chat answer, or the `delta` of a chat chunk.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatDelta {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// One choice of a non-streamed chat completion.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatChoice {
    #[serde(default)]
    pub index: u32,
    #[serde(default)]
    pub message: ChatDelta,
    #[serde(default)]
    pub finish_reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<serde_json::Value>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// A non-streamed chat completion (`object: "chat.completion"`).
pub type ChatCompletionResponse = Response<ChatChoice>;

/// One choice of a chat chunk.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatChunkChoice {
    #[serde(default)]
    pub index: u32,
    #[serde(default)]
    pub delta: ChatDelta,
    #[serde(default)]
    pub finish_reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<serde_json::Value>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// One SSE chunk of a streamed chat completion (`object: "chat.completion.chunk"`).
pub type ChatCompletionChunk = Response<ChatChunkChoice>;

/// The detail object of an error (`{"message", "type", "code"}`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ErrorDetail {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub error_type: Option<String>,
    /// Usually the HTTP status as a number; OpenAI-style servers may send a string.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<serde_json::Value>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `error` inside an [`ErrorBody`]: either a plain string or a detail object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ErrorField {
    Text(String),
    Detail(ErrorDetail),
}

/// An error body, in either shape Dynamo uses:
/// `{"message": ..., "type": ..., "code": 404}` (HTTP errors of the frontend),
/// `{"error": {"message": ..., "code": 503}}` (an error event inside a started stream) or
/// `{"error": "..."}` (the selection service).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorField>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub error_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<serde_json::Value>,
    #[serde(flatten)]
    pub extra: Extra,
}

fn code_as_u16(code: Option<&serde_json::Value>) -> Option<u16> {
    match code? {
        serde_json::Value::Number(n) => n.as_u64().and_then(|c| u16::try_from(c).ok()),
        serde_json::Value::String(s) => s.parse().ok(),
        _ => None,
    }
}

impl ErrorBody {
    /// The frontend's HTTP error shape: `{"message", "type", "code"}`.
    pub fn http(status: u16, error_type: &str, message: impl Into<String>) -> Self {
        Self {
            message: Some(message.into()),
            error_type: Some(error_type.to_owned()),
            code: Some(serde_json::Value::from(status)),
            ..Self::default()
        }
    }

    /// The in-stream error event shape: `{"error": {"message", "type", "code"}}`.
    pub fn stream(status: u16, error_type: &str, message: impl Into<String>) -> Self {
        Self {
            error: Some(ErrorField::Detail(ErrorDetail {
                message: Some(message.into()),
                error_type: Some(error_type.to_owned()),
                code: Some(serde_json::Value::from(status)),
                extra: Extra::new(),
            })),
            ..Self::default()
        }
    }

    /// The selection service's shape: `{"error": "..."}`.
    pub fn text(message: impl Into<String>) -> Self {
        Self {
            error: Some(ErrorField::Text(message.into())),
            ..Self::default()
        }
    }

    /// The human-readable message, wherever it sits.
    pub fn message_text(&self) -> Option<&str> {
        match &self.error {
            Some(ErrorField::Text(s)) => Some(s),
            Some(ErrorField::Detail(d)) => d.message.as_deref().or(self.message.as_deref()),
            None => self.message.as_deref(),
        }
    }

    /// The numeric code (HTTP status) if one is given, wherever it sits.
    pub fn status_code(&self) -> Option<u16> {
        match &self.error {
            Some(ErrorField::Detail(d)) => {
                code_as_u16(d.code.as_ref()).or_else(|| code_as_u16(self.code.as_ref()))
            }
            _ => code_as_u16(self.code.as_ref()),
        }
    }
}

/// One model in `GET /v1/models`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ModelCard {
    pub id: String,
    #[serde(default)]
    pub object: String,
    #[serde(default)]
    pub created: u64,
    #[serde(default)]
    pub owned_by: String,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `GET /v1/models`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ModelList {
    #[serde(default)]
    pub object: String,
    #[serde(default)]
    pub data: Vec<ModelCard>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// One worker instance in `GET /health` (`namespace` is the model in our topology).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HealthInstance {
    #[serde(default)]
    pub namespace: String,
    #[serde(default)]
    pub component: String,
    #[serde(default)]
    pub endpoint: String,
    pub instance_id: WorkerId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transport: Option<serde_json::Value>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `GET /health`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HealthResponse {
    #[serde(default)]
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoints: Option<Vec<String>>,
    #[serde(default)]
    pub instances: Vec<HealthInstance>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// Names of the frontend's Prometheus gauges we read from `GET /metrics`.
pub mod metric_names {
    /// Per worker (labels `worker_id`, `dp_rank`): booked prefill tokens.
    pub const WORKER_ACTIVE_PREFILL_TOKENS: &str = "dynamo_frontend_worker_active_prefill_tokens";
    /// Per worker (labels `worker_id`, `dp_rank`): active decode blocks.
    pub const WORKER_ACTIVE_DECODE_BLOCKS: &str = "dynamo_frontend_worker_active_decode_blocks";
    /// Per worker and rank (labels `router_worker_id`, decimal, and `dp_rank`): 1 for every
    /// (worker, rank) the frontend's KV router has registered. Present from the moment a worker
    /// is routable, before any traffic (the `worker_active_*` gauges appear only with traffic).
    pub const ROUTER_WORKER_REGISTERED: &str = "dynamo_component_router_worker_registered";
    /// Per model (label `model`): KV blocks per worker.
    pub const MODEL_TOTAL_KV_BLOCKS: &str = "dynamo_frontend_model_total_kv_blocks";
    /// Per model: block size in tokens.
    pub const MODEL_KV_CACHE_BLOCK_SIZE: &str = "dynamo_frontend_model_kv_cache_block_size";
    /// Per model: the engine's `max_num_batched_tokens`.
    pub const MODEL_MAX_NUM_BATCHED_TOKENS: &str = "dynamo_frontend_model_max_num_batched_tokens";
}
