//! Streaming `/v1/completions` with TTFT measured on the monotonic clock.
//!
//! **The measurement, defined once.** Client TTFT is the time from handing the request to the
//! connection (after the body is serialised) to the arrival of the network chunk that carries
//! the first SSE event with non-empty text. The arrival instant is taken before the chunk is
//! parsed, so parsing cost is not part of TTFT. The request travels on the timed transport
//! ([`crate::transport`]): `TCP_NODELAY` and a `TCP_QUICKACK` re-armed after every read, so the
//! first event never waits for a delayed ACK. The server's own TTFT (`nvext.timing.ttft_ms`) is
//! kept beside it; [`StreamOutcome::client_server_gap_ms`] is their difference, the judge of the
//! client's overhead (it must stay within about a millisecond at no load).
//!
//! Every outcome is returned — failures carry a [`ErrorClass`] instead of being dropped.

use std::borrow::Cow;
use std::time::{Duration, Instant};

use sy_wire::unix_ms_now;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use serde::Deserialize;
use sy_wire::{
    CompletionRequest, ErrorBody, ErrorField, NvExt, NvExtResponse, Prompt, StreamOptions, Usage,
};

use crate::cancel::Cancel;
use crate::config::ClientConfig;
use crate::error::{CallError, ErrorClass};
use crate::sse::{SseEvent, SseParser};
use crate::transport::{TimedHttp, timed_http};

/// One streamed request.
#[derive(Debug, Clone)]
pub struct ProbeRequest {
    pub model: String,
    /// Token-exact prompt.
    pub tokens: Vec<u32>,
    pub max_tokens: u32,
    /// Pin to this worker (`nvext.backend_instance_id`), normally the reserved one.
    pub worker_id: Option<u64>,
    /// The pinned worker's data-parallel rank (`nvext.dp_rank`), the reserved one. Dynamo
    /// refuses a pin to a worker with several ranks without it.
    pub dp_rank: Option<u32>,
    /// Generate exactly `max_tokens` tokens: `ignore_eos` (no stop at end of sequence) and
    /// `min_tokens = max_tokens` (the stop tokens are masked until then, so not even the first
    /// token can be end of sequence, whose text is empty). What every probe, priming and
    /// background request sends: a real model may otherwise answer end of sequence first, and
    /// the request then ends without a first token to time. Dynamo 1.6.1 takes both fields at
    /// the top level of the request (`lib/llm/src/protocols/openai/common_ext.rs`, `CommonExt`)
    /// and its vLLM worker applies them to vLLM's `SamplingParams` (`dynamo/vllm/handlers.py`,
    /// the `stop_conditions` loop); vLLM 0.31 masks the end-of-sequence id under `min_tokens`
    /// whether or not `ignore_eos` is set (`vllm/sampling_params.py`,
    /// `update_from_generation_config`; `vllm/v1/sample/logits_processor/builtin.py`,
    /// `MinTokensLogitsProcessor`). `false`: the model may stop early (tests only).
    pub ignore_eos: bool,
}

/// What a streamed request gave, success or not.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StreamOutcome {
    /// Wall-clock send time, epoch milliseconds.
    pub sent_at_unix_ms: f64,
    /// Client TTFT: first event with non-empty text.
    pub ttft_ms: Option<f64>,
    /// Client end-to-end latency (to `[DONE]` or the end of the stream).
    pub e2e_ms: Option<f64>,
    /// The worker that served (`nvext.worker_id`).
    pub served_worker_id: Option<u64>,
    /// The data-parallel rank that served (`nvext.worker_id.decode_dp_rank`, else the prefill
    /// rank), when the frontend reports it.
    pub served_dp_rank: Option<u32>,
    /// Server-reported TTFT (`nvext.timing.ttft_ms`).
    pub server_ttft_ms: Option<f64>,
    pub prompt_tokens: Option<u64>,
    /// `usage.completion_tokens`, else the number of non-empty text events.
    pub output_tokens: Option<u64>,
    /// `usage.prompt_tokens_details.cached_tokens`.
    pub cached_tokens: Option<u64>,
    pub error: Option<CallError>,
}

impl StreamOutcome {
    pub fn is_ok(&self) -> bool {
        self.error.is_none()
    }

    /// The stream completed and the engine generated tokens (`usage.completion_tokens`), but none
    /// of them had text: a real model can answer a token that decodes to nothing (an unfinished
    /// UTF-8 sequence, a special token), and with `max_tokens` 1 that is the whole answer. Not a
    /// timed first token (so a failure for a probe), but the prefill happened: enough for a
    /// priming or a background request.
    pub fn generated_without_text(&self) -> bool {
        self.error
            .as_ref()
            .is_some_and(|e| e.kind == ErrorClass::NoContent)
            && self.output_tokens.unwrap_or(0) > 0
    }

    /// Client TTFT minus the server's own TTFT, when both are known: what the client and the
    /// network add to the server's view.
    pub fn client_server_gap_ms(&self) -> Option<f64> {
        Some(self.ttft_ms? - self.server_ttft_ms?)
    }
}

/// Only the fields TTFT detection needs, borrowed where possible; usage and nvext use `sy-wire`.
#[derive(Deserialize)]
struct LeanChunk<'a> {
    #[serde(default, borrow)]
    choices: Vec<LeanChoice<'a>>,
    #[serde(default)]
    usage: Option<Usage>,
    #[serde(default)]
    nvext: Option<NvExtResponse>,
    #[serde(default)]
    error: Option<ErrorField>,
}

#[derive(Deserialize)]
struct LeanChoice<'a> {
    #[serde(default, borrow)]
    text: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    delta: Option<LeanDelta<'a>>,
}

#[derive(Deserialize)]
struct LeanDelta<'a> {
    #[serde(default, borrow)]
    content: Option<Cow<'a, str>>,
}

/// Streams completions from the frontend.
#[derive(Debug, Clone)]
pub struct CompletionClient {
    /// Untimed calls (`/health`).
    http: reqwest::Client,
    /// Timed calls: the streamed completions (see [`crate::transport`]).
    timed: TimedHttp,
    url: String,
    /// `url`, parsed once; `None` if it does not parse, in which case the error surfaces on send.
    parsed_url: Option<hyper::Uri>,
    /// The frontend's base URL (for `/health`).
    base: String,
    bearer: Option<String>,
    first_token_timeout: Duration,
    request_timeout: Duration,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

impl CompletionClient {
    pub fn new(config: &ClientConfig, http: reqwest::Client) -> Self {
        let url = format!("{}/v1/completions", config.frontend_url);
        Self {
            http,
            timed: timed_http(config.connect_timeout, Duration::from_secs(30)),
            parsed_url: url.parse().ok(),
            url,
            base: config.frontend_url.clone(),
            bearer: config.bearer_token.clone(),
            first_token_timeout: config.first_token_timeout,
            request_timeout: config.request_timeout,
        }
    }

    /// The instance ids the frontend lists in `GET /health` (every endpoint of every
    /// namespace; an id appears once). A pinned request to an id missing here is refused by
    /// Dynamo 1.6.1 with HTTP 400 `Invalid request`.
    pub async fn listed_instances(&self) -> Result<Vec<u64>, CallError> {
        let mut req = self
            .http
            .get(format!("{}/health", self.base))
            .timeout(Duration::from_secs(5));
        if let Some(token) = &self.bearer {
            req = req.bearer_auth(token);
        }
        let resp = req
            .send()
            .await
            .map_err(|e| CallError::from_reqwest("frontend /health", &e))?;
        let status = resp.status().as_u16();
        // Dynamo answers 503 with the same body while not every endpoint is ready.
        let text = resp
            .text()
            .await
            .map_err(|e| CallError::from_reqwest("frontend /health", &e))?;
        let health: sy_wire::HealthResponse = serde_json::from_str(&text).map_err(|e| {
            let mut err = CallError::new(
                ErrorClass::Protocol,
                format!("frontend /health (HTTP {status}): not a health answer: {e}"),
            );
            err.status = Some(status);
            err
        })?;
        let mut ids: Vec<u64> = health.instances.iter().map(|i| i.instance_id).collect();
        ids.sort_unstable();
        ids.dedup();
        Ok(ids)
    }

    /// The JSON body of a request (exposed for tests and the dry run).
    pub fn body(req: &ProbeRequest) -> Result<Vec<u8>, serde_json::Error> {
        let body = CompletionRequest {
            model: req.model.clone(),
            prompt: Prompt::Tokens(req.tokens.clone()),
            max_tokens: Some(req.max_tokens),
            min_tokens: req.ignore_eos.then_some(req.max_tokens),
            temperature: Some(0.0),
            seed: None,
            stream: Some(true),
            stream_options: Some(StreamOptions {
                include_usage: Some(true),
                extra: Default::default(),
            }),
            ignore_eos: req.ignore_eos.then_some(true),
            nvext: Some(NvExt {
                backend_instance_id: req.worker_id,
                dp_rank: req.worker_id.and(req.dp_rank),
                extra_fields: Some(vec![
                    sy_wire::EXTRA_FIELD_WORKER_ID.to_string(),
                    sy_wire::EXTRA_FIELD_TIMING.to_string(),
                ]),
                ..NvExt::default()
            }),
            extra: Default::default(),
        };
        serde_json::to_vec(&body)
    }

    /// Sends `req` and streams the answer. `on_first_token` runs once, right after the first
    /// non-empty token is seen (the caller sends `prefill_complete` from it; keep it cheap).
    pub async fn stream(
        &self,
        req: &ProbeRequest,
        cancel: &Cancel,
        on_first_token: impl FnOnce(),
    ) -> StreamOutcome {
        let mut out = StreamOutcome {
            sent_at_unix_ms: unix_ms_now(),
            ..StreamOutcome::default()
        };
        let request = Self::body(req)
            .map_err(|e| {
                CallError::new(
                    ErrorClass::Protocol,
                    format!("cannot serialise the request: {e}"),
                )
            })
            .and_then(|body| self.http_request(body));
        let request = match request {
            Ok(r) => r,
            Err(e) => {
                out.error = Some(e);
                return out;
            }
        };
        out.sent_at_unix_ms = unix_ms_now();
        let start = Instant::now();
        let first_deadline = tokio::time::Instant::from_std(start + self.first_token_timeout);
        let end_deadline = tokio::time::Instant::from_std(start + self.request_timeout);
        let Some(body) = self
            .answer(request, cancel, start, first_deadline, &mut out)
            .await
        else {
            return out;
        };
        let deadlines = (first_deadline, end_deadline);
        let content_events = self
            .read_events(body, cancel, start, deadlines, &mut out, on_first_token)
            .await;
        out.e2e_ms = Some(ms(start.elapsed()));
        if out.output_tokens.is_none() && content_events > 0 {
            out.output_tokens = Some(content_events);
        }
        if out.error.is_none() && out.ttft_ms.is_none() {
            out.error = Some(CallError::new(
                ErrorClass::NoContent,
                "the stream finished without a non-empty token",
            ));
        }
        out
    }

    /// Sends the request and waits for the answer's head: a successful answer's body, or
    /// `None` with the error in `out` (cancelled, no answer before the first-token deadline,
    /// an HTTP error status — with its `e2e_ms` —, a transport failure).
    async fn answer(
        &self,
        request: hyper::Request<Full<Bytes>>,
        cancel: &Cancel,
        start: Instant,
        first_deadline: tokio::time::Instant,
        out: &mut StreamOutcome,
    ) -> Option<hyper::body::Incoming> {
        match self
            .answer_head(request, cancel, start, first_deadline)
            .await
        {
            Ok(body) => Some(body),
            Err((e, e2e_ms)) => {
                out.e2e_ms = e2e_ms;
                out.error = Some(e);
                None
            }
        }
    }

    async fn answer_head(
        &self,
        request: hyper::Request<Full<Bytes>>,
        cancel: &Cancel,
        start: Instant,
        first_deadline: tokio::time::Instant,
    ) -> Result<hyper::body::Incoming, (CallError, Option<f64>)> {
        let resp = tokio::select! {
            biased;
            _ = cancel.cancelled() => {
                return Err((CallError::new(ErrorClass::Cancelled, "cancelled before the answer"), None));
            }
            _ = tokio::time::sleep_until(first_deadline) => {
                return Err((CallError::new(ErrorClass::Timeout, format!(
                    "no answer within {} ms", self.first_token_timeout.as_millis())), None));
            }
            r = self.timed.request(request) => r,
        };
        match resp {
            Ok(r) if r.status().is_success() => Ok(r.into_body()),
            Ok(r) => {
                let status = r.status().as_u16();
                let text = error_text(r.into_body()).await;
                let e2e_ms = Some(ms(start.elapsed()));
                let e = CallError::status(
                    status,
                    format!("frontend HTTP {status}: {}", truncate(&text, 300)),
                );
                Err((e, e2e_ms))
            }
            Err(e) => Err((CallError::from_transport("frontend request", &e), None)),
        }
    }

    /// Reads the SSE stream until `[DONE]`, an error, a deadline or cancellation, handling
    /// every event into `out`. Returns the number of content events.
    async fn read_events(
        &self,
        mut body: hyper::body::Incoming,
        cancel: &Cancel,
        start: Instant,
        (first_deadline, end_deadline): (tokio::time::Instant, tokio::time::Instant),
        out: &mut StreamOutcome,
        on_first_token: impl FnOnce(),
    ) -> u64 {
        let mut st = EventState {
            content_events: 0,
            done: false,
            on_first: Some(on_first_token),
        };
        let mut parser = SseParser::new();
        loop {
            let deadline = if out.ttft_ms.is_none() {
                first_deadline
            } else {
                end_deadline
            };
            let chunk = tokio::select! {
                biased;
                _ = cancel.cancelled() => {
                    out.error = Some(CallError::new(ErrorClass::Cancelled, "cancelled mid-stream"));
                    break;
                }
                _ = tokio::time::sleep_until(deadline) => {
                    out.error = Some(CallError::new(ErrorClass::Timeout, self.deadline_message(out)));
                    break;
                }
                c = next_data(&mut body) => c,
            };
            let arrived = Instant::now();
            let handle = |ev: SseEvent, out: &mut StreamOutcome, st: &mut EventState<_>| {
                self.handle_event(
                    &ev.data,
                    ev.event.as_deref(),
                    out,
                    &mut st.content_events,
                    &mut st.done,
                    start,
                    arrived,
                    &mut st.on_first,
                );
            };
            match chunk {
                Ok(Some(bytes)) => parser.push(&bytes),
                Ok(None) => {
                    if let Some(ev) = parser.finish() {
                        handle(ev, out, &mut st);
                    }
                    if !st.done && out.error.is_none() {
                        out.error = Some(CallError::new(
                            ErrorClass::StreamDropped,
                            "stream ended without [DONE]",
                        ));
                    }
                    break;
                }
                Err(e) => {
                    out.error = Some(CallError::new(
                        ErrorClass::StreamDropped,
                        format!("frontend stream: {e}"),
                    ));
                    break;
                }
            }
            while let Some(ev) = parser.next_event() {
                handle(ev, out, &mut st);
                if st.done || out.error.is_some() {
                    break;
                }
            }
            if st.done || out.error.is_some() {
                break;
            }
        }
        st.content_events
    }

    /// What a missed deadline means: no first token yet, or a stream that did not finish.
    fn deadline_message(&self, out: &StreamOutcome) -> String {
        if out.ttft_ms.is_none() {
            format!(
                "no first token within {} ms",
                self.first_token_timeout.as_millis()
            )
        } else {
            format!(
                "stream not finished within {} ms",
                self.request_timeout.as_millis()
            )
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn handle_event<F: FnOnce()>(
        &self,
        data: &str,
        event: Option<&str>,
        out: &mut StreamOutcome,
        content_events: &mut u64,
        done: &mut bool,
        start: Instant,
        arrived: Instant,
        on_first: &mut Option<F>,
    ) {
        let data = data.trim();
        if data == sy_wire::SSE_DONE {
            *done = true;
            return;
        }
        if data.is_empty() {
            return;
        }
        let chunk: LeanChunk<'_> = match serde_json::from_str(data) {
            Ok(c) => c,
            Err(e) => {
                out.error = Some(CallError::new(
                    ErrorClass::Protocol,
                    format!("unparsable stream event: {e}: {}", truncate(data, 200)),
                ));
                return;
            }
        };
        if let Some(err) = chunk.error.or_else(|| {
            (event == Some("error")).then(|| ErrorField::Text(truncate(data, 300).to_string()))
        }) {
            let body = ErrorBody {
                error: Some(err),
                ..ErrorBody::default()
            };
            let code = body.status_code();
            let msg = body.message_text().unwrap_or("error event").to_string();
            out.error = Some(CallError {
                kind: ErrorClass::StreamError,
                status: code,
                message: format!(
                    "error event in the stream{}: {}",
                    code.map(|c| format!(" (code {c})")).unwrap_or_default(),
                    truncate(&msg, 300)
                ),
                retryable: None,
            });
            return;
        }
        let has_text = chunk.choices.iter().any(|c| {
            c.text.as_deref().is_some_and(|t| !t.is_empty())
                || c.delta
                    .as_ref()
                    .and_then(|d| d.content.as_deref())
                    .is_some_and(|t| !t.is_empty())
        });
        if has_text {
            *content_events += 1;
            if out.ttft_ms.is_none() {
                out.ttft_ms = Some(ms(arrived.duration_since(start)));
                if let Some(f) = on_first.take() {
                    f();
                }
            }
        }
        if let Some(nv) = chunk.nvext {
            if let Some(info) = nv.worker_id.as_ref() {
                if let Some(w) = info.worker() {
                    out.served_worker_id = Some(w);
                }
                if let Some(r) = info.decode_dp_rank.or(info.prefill_dp_rank) {
                    out.served_dp_rank = Some(r);
                }
            }
            if let Some(t) = nv.timing.as_ref().and_then(|t| t.ttft_ms) {
                out.server_ttft_ms = Some(t);
            }
        }
        if let Some(u) = chunk.usage {
            out.prompt_tokens = Some(u.prompt_tokens);
            out.output_tokens = Some(u.completion_tokens);
            out.cached_tokens = u.cached_tokens();
        }
    }
}

impl CompletionClient {
    /// The HTTP request of a streamed completion.
    fn http_request(&self, body: Vec<u8>) -> Result<hyper::Request<Full<Bytes>>, CallError> {
        let uri = self.parsed_url.clone().ok_or_else(|| {
            CallError::new(
                ErrorClass::Connect,
                format!("frontend URL {} is not a valid URL", self.url),
            )
        })?;
        let mut builder = hyper::Request::post(uri)
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .header(hyper::header::ACCEPT, "text/event-stream");
        if let Some(token) = &self.bearer {
            builder = builder.header(hyper::header::AUTHORIZATION, format!("Bearer {token}"));
        }
        builder.body(Full::new(Bytes::from(body))).map_err(|e| {
            CallError::new(
                ErrorClass::Protocol,
                format!("cannot build the request: {e}"),
            )
        })
    }
}

/// The next data chunk of a streamed body (`Ok(None)` at its end; trailers are skipped).
/// What the event handler keeps across events of one stream.
struct EventState<F> {
    content_events: u64,
    done: bool,
    on_first: Option<F>,
}

async fn next_data(body: &mut hyper::body::Incoming) -> Result<Option<Bytes>, hyper::Error> {
    loop {
        match body.frame().await {
            None => return Ok(None),
            Some(Err(e)) => return Err(e),
            Some(Ok(frame)) => {
                if let Ok(data) = frame.into_data() {
                    return Ok(Some(data));
                }
            }
        }
    }
}

/// The message of an error answer (its JSON `error` text when there is one), read for at most
/// five seconds.
async fn error_text(body: hyper::body::Incoming) -> String {
    let bytes = tokio::time::timeout(Duration::from_secs(5), body.collect())
        .await
        .ok()
        .and_then(Result::ok)
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    let text = String::from_utf8_lossy(&bytes).into_owned();
    serde_json::from_str::<ErrorBody>(&text)
        .ok()
        .and_then(|b| b.message_text().map(str::to_owned))
        .unwrap_or(text)
}

fn truncate(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_completed_answer_without_text_is_told_apart() {
        let no_text = StreamOutcome {
            output_tokens: Some(1),
            error: Some(CallError::new(ErrorClass::NoContent, "no text")),
            ..StreamOutcome::default()
        };
        assert!(no_text.generated_without_text());
        let nothing = StreamOutcome {
            output_tokens: None,
            ..no_text.clone()
        };
        assert!(
            !nothing.generated_without_text(),
            "no token generated at all"
        );
        let dropped = StreamOutcome {
            error: Some(CallError::new(ErrorClass::StreamDropped, "dropped")),
            ..no_text.clone()
        };
        assert!(!dropped.generated_without_text());
    }

    #[test]
    fn body_pins_worker_and_asks_for_usage() {
        let body = CompletionClient::body(&ProbeRequest {
            model: "m".into(),
            tokens: vec![1, 2, 3],
            max_tokens: 2,
            worker_id: Some(u64::MAX - 1),
            dp_rank: Some(1),
            ignore_eos: true,
        })
        .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["prompt"], serde_json::json!([1, 2, 3]));
        assert_eq!(v["stream"], true);
        assert_eq!(v["stream_options"]["include_usage"], true);
        assert_eq!(v["ignore_eos"], true);
        assert_eq!(
            v["min_tokens"], 2,
            "exactly max_tokens: no end of sequence first"
        );
        assert_eq!(v["nvext"]["dp_rank"], 1, "the pin names the reserved rank");
        // Exact u64, not rounded through f64.
        let text = String::from_utf8(body).unwrap();
        assert!(
            text.contains(&format!("\"backend_instance_id\":{}", u64::MAX - 1)),
            "{text}"
        );
    }

    #[test]
    fn truncate_respects_char_boundaries() {
        assert_eq!(truncate("héllo", 2), "h");
        assert_eq!(truncate("abc", 10), "abc");
    }
}
