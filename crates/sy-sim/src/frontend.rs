//! The frontend (`python -m dynamo.frontend`): OpenAI-compatible completions and chat with
//! Dynamo's `nvext`, `/v1/models`, `/health`, `/metrics`. Shapes and status codes follow the
//! captures in `crates/sy-wire/tests/fixtures/dynamo-1.6.1/`.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use sy_wire::{
    ChatChoice, ChatChunkChoice, ChatCompletionChunk, ChatCompletionRequest,
    ChatCompletionResponse, ChatDelta, CompletionChoice, CompletionRequest, CompletionResponse,
    EXTRA_FIELD_TIMING, EXTRA_FIELD_WORKER_ID, ErrorBody, Extra, HealthInstance, HealthResponse,
    ModelCard, ModelList, NvExt, NvExtResponse, Prompt, PromptTokensDetails, TimingInfo, Usage,
    WorkerIdInfo,
};
use tokio::sync::mpsc;

use crate::config::DropMode;
use crate::engine::{EngineMsg, EngineRequest, FirstToken, SeqEvent};
use crate::hashing::{detokenize, prompt_hash, sequence_hashes, tokenize};
use crate::state::{SimState, Worker, read};

pub(crate) fn router(state: Arc<SimState>) -> Router {
    Router::new()
        .route("/v1/completions", post(completions))
        .route("/v1/chat/completions", post(chat))
        .route("/v1/models", get(models))
        .route("/health", get(health))
        .route("/live", get(health))
        .route("/metrics", get(metrics))
        .with_state(state)
}

fn json_response(status: StatusCode, body: Vec<u8>) -> Response {
    let mut r = Response::new(Body::from(body));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

fn to_json<T: serde::Serialize>(v: &T) -> Vec<u8> {
    serde_json::to_vec(v).unwrap_or_else(|_| b"{}".to_vec())
}

fn error(status: u16, error_type: &str, message: &str) -> Response {
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    json_response(code, to_json(&ErrorBody::http(status, error_type, message)))
}

fn status_type(status: u16) -> &'static str {
    match status {
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Server Error",
    }
}

/// Which OpenAI endpoint a request came through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Completion,
    Chat,
}

/// A parsed request, endpoint-independent.
#[derive(Debug)]
struct Prepared {
    kind: Kind,
    model_idx: usize,
    model: String,
    tokens: Vec<u32>,
    max_tokens: Option<u32>,
    stream: bool,
    include_usage: bool,
    nvext: NvExt,
}

async fn completions(State(st): State<Arc<SimState>>, body: Bytes) -> Response {
    let arrived = Instant::now();
    let req: CompletionRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => return error(400, "Bad Request", &format!("Invalid request body: {e}")),
    };
    let Some(model_idx) = st.frontend_model_index(&req.model) else {
        return error(404, "Not Found", "Model not found");
    };
    let tokens = match req.prompt {
        Prompt::Tokens(t) => t,
        Prompt::Text(s) => tokenize(&s),
        Prompt::TokensBatch(mut b) if b.len() == 1 => b.pop().unwrap_or_default(),
        Prompt::TextBatch(b) if b.len() == 1 => tokenize(&b[0]),
        _ => return error(400, "Bad Request", "Batched prompts are not supported"),
    };
    let nvext = req.nvext.unwrap_or_default();
    let p = Prepared {
        kind: Kind::Completion,
        model_idx,
        model: req.model,
        tokens,
        max_tokens: req.max_tokens,
        stream: req.stream.unwrap_or(false),
        include_usage: req
            .stream_options
            .and_then(|o| o.include_usage)
            .unwrap_or(false),
        nvext,
    };
    serve(st, p, arrived).await
}

async fn chat(State(st): State<Arc<SimState>>, body: Bytes) -> Response {
    let arrived = Instant::now();
    let req: ChatCompletionRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => return error(400, "Bad Request", &format!("Invalid request body: {e}")),
    };
    let Some(model_idx) = st.frontend_model_index(&req.model) else {
        return error(404, "Not Found", "Model not found");
    };
    if req.messages.is_empty() {
        return error(
            400,
            "Bad Request",
            "Validation: The 'messages' field cannot be empty. At least one message is required.",
        );
    }
    let nvext = req.nvext.unwrap_or_default();
    let tokens = match &nvext.token_data {
        Some(t) => t.clone(),
        None => {
            // The toy chat template: a role marker, then the words of the content.
            let mut t = Vec::new();
            for m in &req.messages {
                t.push(match m.role.as_str() {
                    "system" => 1,
                    "user" => 2,
                    "assistant" => 3,
                    _ => 4,
                });
                t.extend(tokenize(&m.content_text()));
            }
            t.push(3);
            t
        }
    };
    let p = Prepared {
        kind: Kind::Chat,
        model_idx,
        model: req.model,
        tokens,
        max_tokens: req.max_completion_tokens.or(req.max_tokens),
        stream: req.stream.unwrap_or(false),
        include_usage: req
            .stream_options
            .and_then(|o| o.include_usage)
            .unwrap_or(false),
        nvext,
    };
    serve(st, p, arrived).await
}

/// Everything the answer needs besides the tokens.
#[derive(Debug, Clone)]
struct Job {
    kind: Kind,
    id: String,
    model: String,
    created: u64,
    worker_id: u64,
    want_worker: bool,
    want_timing: bool,
    include_usage: bool,
    prompt_tokens: u64,
    isl_blocks: u64,
    block_size: u64,
    arrived: Instant,
    received_ms: u64,
}

impl Job {
    fn nvext(
        &self,
        timing: Option<TimingInfo>,
        token_ids: Option<Vec<u32>>,
    ) -> Option<NvExtResponse> {
        let worker_id = self.want_worker.then(|| WorkerIdInfo {
            prefill_worker_id: Some(self.worker_id),
            prefill_dp_rank: Some(0),
            decode_worker_id: Some(self.worker_id),
            decode_dp_rank: Some(0),
            extra: Extra::new(),
        });
        if worker_id.is_none() && timing.is_none() && token_ids.is_none() {
            return None;
        }
        Some(NvExtResponse {
            worker_id,
            timing,
            token_ids,
            extra: Extra::new(),
        })
    }

    fn timing(&self, first: Option<FirstToken>, finished: Instant) -> Option<TimingInfo> {
        if !self.want_timing {
            return None;
        }
        let ms = |a: Instant, b: Instant| b.saturating_duration_since(a).as_secs_f64() * 1000.0;
        let cached_blocks = first.map_or(0, |f| f.cached_tokens / self.block_size.max(1));
        Some(TimingInfo {
            request_received_ms: Some(self.received_ms),
            prefill_wait_time_ms: first.map(|f| ms(self.arrived, f.prefill_started)),
            prefill_time_ms: first.map(|f| ms(f.prefill_started, f.at)),
            ttft_ms: first.map(|f| ms(self.arrived, f.at)),
            total_time_ms: Some(ms(self.arrived, finished)),
            kv_hit_rate: (self.isl_blocks > 0)
                .then(|| cached_blocks as f64 / self.isl_blocks as f64),
            router_queue_depth: Some(0),
            extra: Extra::new(),
        })
    }

    fn usage(&self, completion: u64, cached: u64) -> Usage {
        Usage {
            prompt_tokens: self.prompt_tokens,
            completion_tokens: completion,
            total_tokens: self.prompt_tokens + completion,
            prompt_tokens_details: Some(PromptTokensDetails {
                cached_tokens: Some(cached),
                audio_tokens: None,
                extra: Extra::new(),
            }),
            completion_tokens_details: None,
            extra: Extra::new(),
        }
    }

    /// One streamed chunk carrying `text` (or the final chunk with `finish_reason`).
    fn chunk(
        &self,
        text: Option<String>,
        first: bool,
        finish: Option<&str>,
        timing: Option<TimingInfo>,
    ) -> Vec<u8> {
        let nvext = self.nvext(timing, None);
        match self.kind {
            Kind::Completion => to_json(&CompletionResponse {
                id: self.id.clone(),
                object: "text_completion".to_owned(),
                created: self.created,
                model: self.model.clone(),
                choices: vec![CompletionChoice {
                    index: 0,
                    text: text.unwrap_or_default(),
                    finish_reason: finish.map(str::to_owned),
                    logprobs: None,
                    extra: Extra::new(),
                }],
                nvext,
                ..CompletionResponse::default()
            }),
            Kind::Chat => to_json(&ChatCompletionChunk {
                id: self.id.clone(),
                object: "chat.completion.chunk".to_owned(),
                created: self.created,
                model: self.model.clone(),
                choices: vec![ChatChunkChoice {
                    index: 0,
                    delta: ChatDelta {
                        role: (first && text.is_some()).then(|| "assistant".to_owned()),
                        content: text,
                        extra: Extra::new(),
                    },
                    finish_reason: finish.map(str::to_owned),
                    logprobs: None,
                    extra: Extra::new(),
                }],
                nvext,
                ..ChatCompletionChunk::default()
            }),
        }
    }

    fn usage_chunk(&self, usage: Usage) -> Vec<u8> {
        match self.kind {
            Kind::Completion => to_json(&CompletionResponse {
                id: self.id.clone(),
                object: "text_completion".to_owned(),
                created: self.created,
                model: self.model.clone(),
                usage: Some(usage),
                ..CompletionResponse::default()
            }),
            Kind::Chat => to_json(&ChatCompletionChunk {
                id: self.id.clone(),
                object: "chat.completion.chunk".to_owned(),
                created: self.created,
                model: self.model.clone(),
                usage: Some(usage),
                ..ChatCompletionChunk::default()
            }),
        }
    }

    /// The whole (non-streamed) answer.
    fn full(
        &self,
        text: String,
        usage: Option<Usage>,
        nvext: Option<NvExtResponse>,
        finish: Option<&str>,
    ) -> Vec<u8> {
        match self.kind {
            Kind::Completion => to_json(&CompletionResponse {
                id: self.id.clone(),
                object: "text_completion".to_owned(),
                created: self.created,
                model: self.model.clone(),
                choices: vec![CompletionChoice {
                    index: 0,
                    text,
                    finish_reason: finish.map(str::to_owned),
                    logprobs: None,
                    extra: Extra::new(),
                }],
                usage,
                nvext,
                ..CompletionResponse::default()
            }),
            Kind::Chat => to_json(&ChatCompletionResponse {
                id: self.id.clone(),
                object: "chat.completion".to_owned(),
                created: self.created,
                model: self.model.clone(),
                choices: vec![ChatChoice {
                    index: 0,
                    message: ChatDelta {
                        role: Some("assistant".to_owned()),
                        content: (finish.is_some()).then_some(text),
                        extra: Extra::new(),
                    },
                    finish_reason: finish.map(str::to_owned),
                    logprobs: None,
                    extra: Extra::new(),
                }],
                usage,
                nvext,
                ..ChatCompletionResponse::default()
            }),
        }
    }
}

fn request_id(kind: Kind, seed: u64, n: u64) -> String {
    let a = crate::hashing::mix64(seed ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let b = crate::hashing::mix64(a ^ 0xC0FFEE);
    let prefix = if kind == Kind::Chat {
        "chatcmpl"
    } else {
        "cmpl"
    };
    format!(
        "{prefix}-{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xffff,
        b >> 48,
        b & 0xffff_ffff_ffff
    )
}

/// Keeps the frontend's per-worker load gauges honest, whatever way a request ends.
#[derive(Debug)]
struct LoadGuard {
    worker: Arc<Worker>,
    prefill: u64,
    blocks: u64,
}

impl LoadGuard {
    fn new(worker: Arc<Worker>, prefill: u64, blocks: u64) -> Self {
        worker
            .fe_prefill_tokens
            .fetch_add(prefill, Ordering::Relaxed);
        worker.fe_decode_blocks.fetch_add(blocks, Ordering::Relaxed);
        Self {
            worker,
            prefill,
            blocks,
        }
    }

    fn prefill_done(&mut self) {
        let p = std::mem::take(&mut self.prefill);
        self.worker
            .fe_prefill_tokens
            .fetch_sub(p, Ordering::Relaxed);
    }
}

impl Drop for LoadGuard {
    fn drop(&mut self) {
        self.prefill_done();
        self.worker
            .fe_decode_blocks
            .fetch_sub(self.blocks, Ordering::Relaxed);
    }
}

/// The frontend's router for unpinned requests: overlap and its own view of load.
fn route(
    st: &SimState,
    model_idx: usize,
    hashes: &[u64],
    isl: u64,
    bs: u64,
) -> Option<Arc<Worker>> {
    let workers = read(&st.models[model_idx].workers);
    let listed: Vec<&Arc<Worker>> = workers.iter().filter(|w| st.frontend_knows(w)).collect();
    if listed.len() == 1 {
        return Some(Arc::clone(listed[0]));
    }
    let weight = st.router.overlap_score_weight;
    let costs: Vec<(u64, f64)> = listed
        .iter()
        .map(|w| {
            let overlap = w.cache().match_prefix(hashes) as u64 * bs;
            let prefill = w.fe_prefill_tokens.load(Ordering::Relaxed) + isl.saturating_sub(overlap);
            let decode = w.fe_decode_blocks.load(Ordering::Relaxed) + isl.div_ceil(bs);
            (w.id, weight * prefill as f64 / bs as f64 + decode as f64)
        })
        .collect();
    let id = st.pick_min(&costs)?;
    listed.into_iter().find(|w| w.id == id).cloned()
}

/// Per-request fault draws.
#[derive(Debug, Default, Clone, Copy)]
struct Faults {
    error_status: Option<u16>,
    stall: Option<std::time::Duration>,
    drop_after: Option<(u32, DropMode)>,
}

fn draw_faults(st: &SimState) -> Faults {
    let f = read(&st.faults);
    if f.error_rate <= 0.0 && f.stall_rate <= 0.0 && f.drop_rate <= 0.0 {
        return Faults::default();
    }
    let mut rng = crate::state::lock(&st.fault_rng);
    let (e, s, d) = (
        rng.chance(f.error_rate),
        rng.chance(f.stall_rate),
        rng.chance(f.drop_rate),
    );
    Faults {
        error_status: e.then_some(f.error_status),
        stall: s.then(|| st.wall(f.stall_ms)),
        drop_after: d.then_some((f.drop_after_tokens, f.drop_mode)),
    }
}

const FAILED_TO_GENERATE: &str = "Failed to generate completions";

async fn serve(st: Arc<SimState>, p: Prepared, arrived: Instant) -> Response {
    let n = st.request_counter.fetch_add(1, Ordering::Relaxed);
    let faults = draw_faults(&st);
    if let Some(status) = faults.error_status {
        return error(
            status,
            status_type(status),
            "Service temporarily unavailable",
        );
    }
    let mcfg = &st.models[p.model_idx].cfg;
    let bs = u64::from(mcfg.block_size);
    let isl = p.tokens.len() as u64;
    let hashes = sequence_hashes(&p.tokens, mcfg.block_size);
    let worker = match p.nvext.backend_instance_id {
        Some(id) => match st.worker(id) {
            Some(w) if w.model == p.model_idx && st.frontend_knows(&w) => w,
            _ => return error(400, "Bad Request", "Invalid request"),
        },
        None => match route(&st, p.model_idx, &hashes, isl, bs) {
            Some(w) => w,
            None => return error(503, "Service Unavailable", "No instances available"),
        },
    };
    let job = Job {
        kind: p.kind,
        id: request_id(p.kind, st.seed, n),
        model: p.model.clone(),
        created: st.created_unix,
        worker_id: worker.id,
        want_worker: p.nvext.wants(EXTRA_FIELD_WORKER_ID),
        want_timing: p.nvext.wants(EXTRA_FIELD_TIMING),
        include_usage: p.include_usage,
        prompt_tokens: isl,
        isl_blocks: isl.div_ceil(bs.max(1)),
        block_size: bs,
        arrived,
        received_ms: SimState::now_epoch_ms(),
    };
    if p.nvext.is_query_instance_id() {
        let mut j = job.clone();
        j.want_worker = true;
        j.want_timing = false;
        let nvext = j.nvext(None, Some(p.tokens.clone()));
        let body = j.full(String::new(), None, nvext, None);
        if p.stream {
            return sse_response(futures::stream::iter(
                [sse_data(&body), Bytes::from_static(b"data: [DONE]\n\n")]
                    .map(Ok::<_, std::io::Error>),
            ));
        }
        return json_response(StatusCode::OK, body);
    }
    if !worker.alive() {
        return error(500, "Internal Server Error", FAILED_TO_GENERATE);
    }
    if isl.div_ceil(bs.max(1)) > mcfg.kv_blocks {
        if p.stream {
            let ev = to_json(&ErrorBody::stream(
                500,
                "internal_server_error",
                "Internal server error",
            ));
            return sse_response(futures::stream::iter(
                [sse_data(&ev), Bytes::from_static(b"data: [DONE]\n\n")]
                    .map(Ok::<_, std::io::Error>),
            ));
        }
        let mut body = ErrorBody::http(500, "Internal Server Error", "Internal server error");
        body.extra
            .insert("details".into(), serde_json::json!({"backend_status": 500}));
        return json_response(StatusCode::INTERNAL_SERVER_ERROR, to_json(&body));
    }
    let overlap = worker.cache().match_prefix(&hashes) as u64 * bs;
    let guard = LoadGuard::new(
        Arc::clone(&worker),
        isl.saturating_sub(overlap),
        isl.div_ceil(bs.max(1)),
    );
    let (tx, rx) = mpsc::unbounded_channel();
    // Dynamo's request plane: the worker sees the request this much after the frontend did.
    let reaches_worker = arrived + st.wall(mcfg.request_plane_ms);
    let msg = EngineMsg::Add(EngineRequest {
        prompt_hash: prompt_hash(&p.tokens),
        tokens: p.tokens,
        max_tokens: p.max_tokens.unwrap_or(mcfg.default_max_tokens),
        tx,
        arrived: reaches_worker,
    });
    if reaches_worker > Instant::now() {
        crate::precise_timer::sleep_until(reaches_worker).await;
    }
    if worker.tx.send(msg).is_err() {
        return error(500, "Internal Server Error", FAILED_TO_GENERATE);
    }
    let run = Run {
        job,
        rx,
        guard,
        faults,
        stall_until: faults.stall.map(|d| arrived + d),
        untimed: st.wall(mcfg.frontend_untimed_ms),
        generated: 0,
        first: None,
    };
    if p.stream {
        stream_answer(run)
    } else {
        full_answer(run).await
    }
}

/// A request in flight.
#[derive(Debug)]
struct Run {
    job: Job,
    rx: mpsc::UnboundedReceiver<SeqEvent>,
    guard: LoadGuard,
    faults: Faults,
    stall_until: Option<Instant>,
    /// `frontend_untimed_ms`, in wall time.
    untimed: std::time::Duration,
    generated: u32,
    first: Option<FirstToken>,
}

impl Run {
    /// Holds the first token back until the injected stall ends, then for the frontend's untimed
    /// work (`frontend_untimed_ms`), which adds to the simulator's own handling of the token.
    async fn hold_first(&mut self) {
        if let Some(until) = self.stall_until.take() {
            // Precise to ~0.1 ms: the injected delay is the overhead benchmark's reference.
            crate::precise_timer::sleep_until(until).await;
        }
        if !self.untimed.is_zero() {
            crate::precise_timer::sleep_until(Instant::now() + self.untimed).await;
        }
    }

    fn dropped_now(&self) -> Option<DropMode> {
        match self.faults.drop_after {
            Some((k, mode)) if self.generated >= k => Some(mode),
            _ => None,
        }
    }
}

async fn full_answer(mut run: Run) -> Response {
    let mut text = String::new();
    loop {
        if run.dropped_now().is_some() {
            return error(500, "Internal Server Error", FAILED_TO_GENERATE);
        }
        match run.rx.recv().await {
            Some(SeqEvent::Token { id, first }) => {
                if let Some(f) = first {
                    run.hold_first().await;
                    run.first = Some(f);
                    run.guard.prefill_done();
                }
                run.generated += 1;
                text.push_str(&detokenize(id));
            }
            Some(SeqEvent::Finished { at, generated }) => {
                let j = &run.job;
                let cached = run.first.map_or(0, |f| f.cached_tokens);
                let timing = j.timing(run.first, at.max(Instant::now()));
                let body = j.full(
                    text,
                    Some(j.usage(u64::from(generated), cached)),
                    j.nvext(timing, None),
                    Some("length"),
                );
                return json_response(StatusCode::OK, body);
            }
            Some(SeqEvent::Error) | None => {
                return error(500, "Internal Server Error", FAILED_TO_GENERATE);
            }
        }
    }
}

fn sse_data(json: &[u8]) -> Bytes {
    let mut v = Vec::with_capacity(json.len() + 8);
    v.extend_from_slice(b"data: ");
    v.extend_from_slice(json);
    v.extend_from_slice(b"\n\n");
    Bytes::from(v)
}

fn sse_response<S>(s: S) -> Response
where
    S: futures::Stream<Item = Result<Bytes, std::io::Error>> + Send + 'static,
{
    let mut r = Response::new(Body::from_stream(s));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

struct StreamState {
    run: Run,
    out: VecDeque<Result<Bytes, std::io::Error>>,
    done: bool,
}

fn stream_error_frames(out: &mut VecDeque<Result<Bytes, std::io::Error>>) {
    let ev = to_json(&ErrorBody::stream(
        503,
        "service_unavailable",
        "Service temporarily unavailable",
    ));
    out.push_back(Ok(sse_data(&ev)));
    out.push_back(Ok(Bytes::from_static(b"data: [DONE]\n\n")));
}

fn stream_answer(run: Run) -> Response {
    let init = StreamState {
        run,
        out: VecDeque::new(),
        done: false,
    };
    let s = futures::stream::unfold(init, |mut s| async move {
        loop {
            if let Some(item) = s.out.pop_front() {
                return Some((item, s));
            }
            if s.done {
                return None;
            }
            if let Some(mode) = s.run.dropped_now() {
                s.done = true;
                match mode {
                    DropMode::ErrorEvent => stream_error_frames(&mut s.out),
                    DropMode::Close => {
                        // Let the tokens already sent reach the client, then cut the connection.
                        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                        s.out.push_back(Err(std::io::Error::other(
                            "stream dropped (injected fault)",
                        )));
                    }
                }
                continue;
            }
            match s.run.rx.recv().await {
                Some(SeqEvent::Token { id, first }) => {
                    let is_first = first.is_some();
                    if let Some(f) = first {
                        s.run.hold_first().await;
                        s.run.first = Some(f);
                        s.run.guard.prefill_done();
                    }
                    s.run.generated += 1;
                    let chunk = s.run.job.chunk(Some(detokenize(id)), is_first, None, None);
                    s.out.push_back(Ok(sse_data(&chunk)));
                }
                Some(SeqEvent::Finished { at, generated }) => {
                    let j = &s.run.job;
                    let timing = j.timing(s.run.first, at.max(Instant::now()));
                    let fin = j.chunk(None, false, Some("length"), timing);
                    s.out.push_back(Ok(sse_data(&fin)));
                    if j.include_usage {
                        let cached = s.run.first.map_or(0, |f| f.cached_tokens);
                        let u = j.usage_chunk(j.usage(u64::from(generated), cached));
                        s.out.push_back(Ok(sse_data(&u)));
                    }
                    s.out.push_back(Ok(Bytes::from_static(b"data: [DONE]\n\n")));
                    s.done = true;
                }
                Some(SeqEvent::Error) | None => {
                    stream_error_frames(&mut s.out);
                    s.done = true;
                }
            }
        }
    });
    sse_response(s)
}

async fn models(State(st): State<Arc<SimState>>) -> Response {
    let mut names: Vec<&str> = st.models.iter().map(|m| m.cfg.name.as_str()).collect();
    names.sort_unstable();
    let list = ModelList {
        object: "list".to_owned(),
        data: names
            .into_iter()
            .map(|n| {
                let mut extra = Extra::new();
                extra.insert("context_window".into(), serde_json::json!(0));
                ModelCard {
                    id: n.to_owned(),
                    object: "model".to_owned(),
                    created: st.created_unix,
                    owned_by: "nvidia".to_owned(),
                    extra,
                }
            })
            .collect(),
        extra: Extra::new(),
    };
    json_response(StatusCode::OK, to_json(&list))
}

async fn health(State(st): State<Arc<SimState>>) -> Response {
    let mut endpoints = Vec::new();
    let mut instances = Vec::new();
    for m in &st.models {
        endpoints.push(format!("dyn://{}.backend.generate", m.cfg.name));
        for w in read(&m.workers).iter() {
            if !st.frontend_knows(w) {
                continue;
            }
            let mut extra = Extra::new();
            extra.insert("device_type".into(), "cuda".into());
            extra.insert("request_plane_codec".into(), "msgpack".into());
            instances.push(HealthInstance {
                namespace: m.cfg.name.clone(),
                component: "backend".to_owned(),
                endpoint: "generate".to_owned(),
                instance_id: w.id,
                transport: Some(serde_json::json!({
                    "tcp": format!("127.0.0.1:0/{:x}/{}/backend/generate", w.id, m.cfg.name)
                })),
                extra,
            });
        }
    }
    let h = HealthResponse {
        status: "healthy".to_owned(),
        endpoints: Some(endpoints),
        instances,
        extra: Extra::new(),
    };
    json_response(StatusCode::OK, to_json(&h))
}

async fn metrics(State(st): State<Arc<SimState>>) -> impl IntoResponse {
    use std::fmt::Write;
    use sy_wire::metric_names as mn;
    let mut s = String::new();
    let mut workers: Vec<(u64, u64, u64)> = Vec::new();
    for m in &st.models {
        for w in read(&m.workers).iter() {
            if st.frontend_knows(w) {
                workers.push((
                    w.id,
                    w.fe_prefill_tokens.load(Ordering::Relaxed),
                    w.fe_decode_blocks.load(Ordering::Relaxed),
                ));
            }
        }
    }
    let gauge = |s: &mut String, name: &str, help: &str| {
        let _ = writeln!(s, "# HELP {name} {help}\n# TYPE {name} gauge");
    };
    gauge(
        &mut s,
        mn::WORKER_ACTIVE_PREFILL_TOKENS,
        "Active prefill tokens queued per worker",
    );
    for (id, p, _) in &workers {
        let _ = writeln!(
            s,
            "{}{{dp_rank=\"0\",worker_id=\"{id}\",worker_type=\"decode\"}} {p}",
            mn::WORKER_ACTIVE_PREFILL_TOKENS
        );
    }
    gauge(
        &mut s,
        mn::WORKER_ACTIVE_DECODE_BLOCKS,
        "Active decode blocks (KV cache blocks) per worker",
    );
    for (id, _, d) in &workers {
        let _ = writeln!(
            s,
            "{}{{dp_rank=\"0\",worker_id=\"{id}\",worker_type=\"decode\"}} {d}",
            mn::WORKER_ACTIVE_DECODE_BLOCKS
        );
    }
    for (name, help, f) in [
        (
            mn::MODEL_TOTAL_KV_BLOCKS,
            "Total KV cache blocks available for a worker serving the model",
            0,
        ),
        (
            mn::MODEL_KV_CACHE_BLOCK_SIZE,
            "KV cache block size for a worker serving the model",
            1,
        ),
        (
            mn::MODEL_MAX_NUM_BATCHED_TOKENS,
            "Maximum number of batched tokens for a worker serving the model",
            2,
        ),
    ] {
        gauge(&mut s, name, help);
        for m in &st.models {
            let v = match f {
                0 => m.cfg.kv_blocks,
                1 => u64::from(m.cfg.block_size),
                _ => m.cfg.max_num_batched_tokens,
            };
            let _ = writeln!(s, "{name}{{model=\"{}\"}} {v}", m.cfg.name);
        }
    }
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        s,
    )
}

#[cfg(test)]
mod tests;
