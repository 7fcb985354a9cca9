//! The accounting path every request of a run follows, probes and background alike:
//! `select_and_reserve` → frontend request pinned with `nvext.backend_instance_id` →
//! `prefill_complete` at the first token → `DELETE` of the reservation at the end, on error, on
//! timeout and on cancel.
//!
//! The selection service only sees load that was booked through it, so a background request
//! sent without a reservation would be invisible to the observations the probes record. The
//! [`Driver`] is the one place that sends requests, so no request can skip the path.

use std::collections::BTreeMap;
use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sy_dynamo::{
    CallError, Cancel, CompletionClient, ProbeRequest, SelectionClient, StreamOutcome,
};
use sy_wire::SelectResponse;

/// Counters shown by the progress bar and written to the manifest.
#[derive(Debug, Default)]
pub struct Stats {
    /// Requests currently between reservation and release.
    pub in_flight: AtomicI64,
    /// Requests sent through the accounting path (probes, primes, background).
    pub requests: AtomicU64,
    /// Background requests that failed, per failure kind.
    pub background_errors: Mutex<BTreeMap<String, u64>>,
    /// Background requests completed.
    pub background_requests: AtomicU64,
    /// Reservations whose delete failed even after retries (left in the ledger).
    pub release_failures: AtomicU64,
    /// Every ended background request, kept only after [`Stats::keep_background_outcomes`]
    /// (`sy-eval` measures how routing affects competing traffic; `sy-collect` keeps none).
    pub background_outcomes: Mutex<Option<Vec<BackgroundOutcome>>>,
}

/// One ended background request.
#[derive(Debug, Clone, PartialEq)]
pub struct BackgroundOutcome {
    pub model: String,
    pub ttft_ms: Option<f64>,
    pub e2e_ms: Option<f64>,
    /// Reserved and streamed without error.
    pub ok: bool,
}

impl Stats {
    pub fn count_background_error(&self, kind: &str) {
        if let Ok(mut m) = self.background_errors.lock() {
            *m.entry(kind.to_string()).or_default() += 1;
        }
    }

    /// From now on, keep every ended background request's outcome.
    pub fn keep_background_outcomes(&self) {
        if let Ok(mut o) = self.background_outcomes.lock() {
            o.get_or_insert_with(Vec::new);
        }
    }

    /// The outcomes kept so far (emptied).
    pub fn take_background_outcomes(&self) -> Vec<BackgroundOutcome> {
        self.background_outcomes
            .lock()
            .ok()
            .and_then(|mut o| o.as_mut().map(std::mem::take))
            .unwrap_or_default()
    }

    /// Keeps one background request's outcome, when outcomes are kept.
    pub fn record_background(&self, model: &str, a: &Accounted) {
        if let Ok(mut o) = self.background_outcomes.lock()
            && let Some(v) = o.as_mut()
        {
            let stream = a.stream.as_ref();
            v.push(BackgroundOutcome {
                model: model.to_string(),
                ttft_ms: stream.and_then(|s| s.ttft_ms),
                e2e_ms: stream.and_then(|s| s.e2e_ms),
                ok: a.failure().is_none(),
            });
        }
    }

    pub fn background_error_total(&self) -> u64 {
        self.background_errors
            .lock()
            .map(|m| m.values().sum())
            .unwrap_or(0)
    }
}

/// A booked worker.
#[derive(Debug, Clone)]
pub struct Booking {
    pub selection_id: String,
    pub answer: SelectResponse,
}

/// What one request through the accounting path gave.
#[derive(Debug, Clone)]
pub struct Accounted {
    pub booking: Result<Booking, CallError>,
    /// `None` when the reservation failed (nothing was sent).
    pub stream: Option<StreamOutcome>,
}

impl Accounted {
    /// The failure, if any: the reservation's or the stream's.
    pub fn failure(&self) -> Option<(bool, &CallError)> {
        match (&self.booking, &self.stream) {
            (Err(e), _) => Some((true, e)),
            (Ok(_), Some(s)) => s.error.as_ref().map(|e| (false, e)),
            (Ok(_), None) => None,
        }
    }
}

/// Sends every request of a run.
#[derive(Debug)]
pub struct Driver {
    pub completions: CompletionClient,
    pub selection: SelectionClient,
    /// Ctrl-C: cancels every in-flight request.
    pub cancel: Cancel,
    pub stats: Arc<Stats>,
    /// Unique per process invocation: selection ids never repeat across `--resume` sessions.
    session: String,
    next_id: AtomicU64,
    /// Workers that just failed a request (dead, restarting): stepped around for a while.
    suspects: Mutex<HashMap<u64, Instant>>,
    /// Instances seen in the frontend's `/health`, with when this run first saw them (`None`:
    /// already listed when the run started). Tells a discovery race from a bad request.
    frontend_seen: Mutex<HashMap<u64, Option<Instant>>>,
}

/// Why an HTTP 404 for a model the run checked at preflight is transient: the frontend is
/// re-registering its models (after a restart). `None` for anything else.
pub fn model_rediscovery(error: &CallError, model: &str) -> Option<String> {
    (error.status == Some(404)
        && error
            .message
            .to_ascii_lowercase()
            .contains("model not found"))
    .then(|| {
        format!(
            "the frontend does not know model `{model}` right now although it served it at \
                 the start of the run (re-registering its models after a restart)"
        )
    })
}

/// A frontend instance first seen this recently counts as just (re)discovered: an HTTP 400 for
/// a request pinned to it is the discovery race, not a bad request.
pub const DISCOVERY_GRACE: Duration = Duration::from_secs(10);

/// Why an HTTP 400 for a request pinned to `worker` is a transient discovery race (the
/// frontend has not (re)discovered the instance the selection service booked), or `None` when
/// it is a real bad request.
///
/// Dynamo 1.6.1 answers a request pinned to an instance its frontend does not know with HTTP
/// 400 `Invalid request` and no detail — while a restarted frontend re-reads discovery, or
/// before it has discovered a restarted worker the selection service already books. So: the
/// message names an unknown instance; or the frontend's `/health` is unavailable (restarting),
/// does not list the instance, or lists it but this run saw it for the first time less than
/// [`DISCOVERY_GRACE`] ago (`first_seen_ago`; `None` = listed since the run started).
pub fn discovery_race(
    worker: u64,
    says_unknown_instance: bool,
    listed: Result<&[u64], &str>,
    first_seen_ago: Option<Duration>,
) -> Option<String> {
    if says_unknown_instance {
        return Some(format!("the frontend does not know instance {worker}"));
    }
    match listed {
        Err(e) => Some(format!(
            "the frontend's /health is unavailable ({e}): it is probably restarting"
        )),
        Ok(ids) if !ids.contains(&worker) => Some(format!(
            "the frontend's /health does not list instance {worker} (not yet discovered, or gone)"
        )),
        Ok(_) => match first_seen_ago {
            Some(ago) if ago < DISCOVERY_GRACE => Some(format!(
                "instance {worker} was discovered by the frontend only {} ms ago",
                ago.as_millis()
            )),
            _ => None,
        },
    }
}

/// How long a failed worker is stepped around before it is trusted again.
const SUSPECT_FOR: Duration = Duration::from_secs(15);

impl Driver {
    pub fn new(
        completions: CompletionClient,
        selection: SelectionClient,
        cancel: Cancel,
        session: String,
    ) -> Self {
        Self {
            completions,
            selection,
            cancel,
            stats: Arc::new(Stats::default()),
            session,
            next_id: AtomicU64::new(0),
            suspects: Mutex::new(HashMap::new()),
            frontend_seen: Mutex::new(HashMap::new()),
        }
    }

    /// Records the instances the frontend lists now as known since the start of the run (call
    /// once before the first request). Best effort: without an answer every instance counts as
    /// new when first seen later.
    pub async fn learn_frontend_instances(&self) {
        match self.completions.listed_instances().await {
            Ok(ids) => {
                if let Ok(mut seen) = self.frontend_seen.lock() {
                    for id in ids {
                        seen.entry(id).or_insert(None);
                    }
                }
            }
            Err(e) => tracing::debug!("frontend /health at start: {e}"),
        }
    }

    /// Marks an HTTP 400 for a request pinned to `worker` as transient when it is the
    /// frontend's discovery race (see [`discovery_race`]); the message says why. The unit is
    /// then retried with the bounded backoff, and the retry re-reserves.
    ///
    /// Likewise an HTTP 404 `Model not found` for a model the preflight found served: a
    /// restarted Dynamo 1.6.1 frontend answers so for a moment while it re-registers its models
    /// (seen on the local stack, with `/health` already listing the instances).
    pub async fn classify_pinned_4xx(&self, worker: u64, model: &str, error: &mut CallError) {
        if error.kind != sy_dynamo::ErrorClass::Http4xx {
            return;
        }
        if let Some(reason) = model_rediscovery(error, model) {
            error.retryable = Some(true);
            error.message = format!("{} — transient: {reason}", error.message);
            tracing::info!("pinned request got HTTP 404: {reason}; will retry");
            return;
        }
        if error.status != Some(400) {
            return;
        }
        let unknown = error.says_unknown_instance();
        let listed = if unknown {
            Ok(Vec::new())
        } else {
            self.completions
                .listed_instances()
                .await
                .map_err(|e| e.message)
        };
        let now = Instant::now();
        let first_seen_ago = match (&listed, self.frontend_seen.lock()) {
            (Ok(ids), Ok(mut seen)) => {
                for &id in ids {
                    seen.entry(id).or_insert(Some(now));
                }
                seen.get(&worker).copied().flatten().map(|t| now - t)
            }
            _ => None,
        };
        let listed_ref = match &listed {
            Ok(ids) => Ok(ids.as_slice()),
            Err(m) => Err(m.as_str()),
        };
        if let Some(reason) = discovery_race(worker, unknown, listed_ref, first_seen_ago) {
            error.retryable = Some(true);
            error.message = format!("{} — transient: {reason}", error.message);
            tracing::info!("pinned request got HTTP 400: {reason}; will retry");
        }
    }

    /// Marks a worker that failed a request (5xx, error event, dropped stream, refused
    /// connection): until it has been quiet for a while, picks avoid it if another worker of
    /// the model is schedulable. This is how a vanished worker is stepped around and its
    /// replacement (a new id in `/workers`) re-discovered.
    pub fn suspect(&self, worker: u64) {
        if let Ok(mut s) = self.suspects.lock() {
            s.insert(worker, Instant::now());
        }
    }

    fn current_suspects(&self) -> Vec<u64> {
        match self.suspects.lock() {
            Ok(mut s) => {
                s.retain(|_, at| at.elapsed() < SUSPECT_FOR);
                s.keys().copied().collect()
            }
            Err(_) => Vec::new(),
        }
    }

    /// The workers a pick may use for `model`: `None` (free choice) unless a suspect exists
    /// and another schedulable worker of the model does.
    pub async fn allowed_workers(&self, model: &str) -> Option<Vec<u64>> {
        let suspects = self.current_suspects();
        if suspects.is_empty() {
            return None;
        }
        let workers = self.selection.workers().await.ok()?;
        let allowed: Vec<u64> = workers
            .iter()
            .filter(|w| {
                w.model_name == model
                    && w.lifecycle == sy_wire::WorkerLifecycle::Schedulable
                    && !suspects.contains(&w.worker_id)
            })
            .map(|w| w.worker_id)
            .collect();
        let any_suspect_here = workers
            .iter()
            .any(|w| w.model_name == model && suspects.contains(&w.worker_id));
        (any_suspect_here && !allowed.is_empty()).then_some(allowed)
    }

    /// A selection id unique to this process and request.
    pub fn new_selection_id(&self, tag: &str) -> String {
        let n = self.next_id.fetch_add(1, Ordering::Relaxed);
        format!("sy-{}-{n}-{tag}", self.session)
    }

    /// Books a worker for `tokens` on `model`.
    pub async fn reserve(
        &self,
        model: &str,
        tokens: &[u32],
        expected_output_tokens: u32,
        tag: &str,
    ) -> Result<Booking, CallError> {
        let id = self.new_selection_id(tag);
        let allowed = self.allowed_workers(model).await;
        // Not raced against Ctrl-C: a dropped reserve call could book after its delete. It takes
        // about a millisecond; the caller checks for cancellation right after.
        let answer = self
            .selection
            .select_and_reserve(
                model,
                tokens,
                &id,
                Some(expected_output_tokens),
                allowed.as_deref(),
            )
            .await;
        self.booked(id, answer).await
    }

    /// Books exactly (`worker`, `rank`) for `tokens` on `model` (`pinned_worker`): the
    /// preflight's per-rank checks and the warm-up.
    pub async fn reserve_on_rank(
        &self,
        model: &str,
        tokens: &[u32],
        expected_output_tokens: u32,
        (worker, rank): (u64, u32),
        tag: &str,
    ) -> Result<Booking, CallError> {
        let id = self.new_selection_id(tag);
        let answer = self
            .selection
            .reserve_on_rank(
                model,
                tokens,
                &id,
                Some(expected_output_tokens),
                worker,
                rank,
            )
            .await;
        self.booked(id, answer).await
    }

    /// A reservation's answer as a booking counted in flight (until [`Driver::release`]); a
    /// failed or lost answer may still have booked, so it is deleted to be sure (404 is fine;
    /// 409, a reused id, belongs to someone else).
    async fn booked(
        &self,
        selection_id: String,
        answer: Result<SelectResponse, CallError>,
    ) -> Result<Booking, CallError> {
        match answer {
            Ok(answer) => {
                self.stats.in_flight.fetch_add(1, Ordering::Relaxed);
                Ok(Booking {
                    selection_id,
                    answer,
                })
            }
            Err(e) => {
                if e.status != Some(409) {
                    let _ = self.selection.release(&selection_id).await;
                }
                Err(e)
            }
        }
    }

    /// Sends the request pinned to the booked worker; `prefill_complete` goes out at the first
    /// token (and `on_first` runs). The booking is *not* released here.
    #[allow(clippy::too_many_arguments)]
    pub async fn send(
        &self,
        booking: &Booking,
        model: &str,
        tokens: Vec<u32>,
        max_tokens: u32,
        ignore_eos: bool,
        cancel: &Cancel,
        on_first: impl FnOnce() + Send + 'static,
    ) -> StreamOutcome {
        let req = ProbeRequest {
            model: model.to_string(),
            tokens,
            max_tokens,
            worker_id: Some(booking.answer.worker_id),
            dp_rank: Some(booking.answer.dp_rank),
            ignore_eos,
        };
        let prefill_task: Arc<Mutex<Option<tokio::task::JoinHandle<()>>>> = Arc::default();
        let slot = prefill_task.clone();
        let sel = self.selection.clone();
        let id = booking.selection_id.clone();
        self.stats.requests.fetch_add(1, Ordering::Relaxed);
        let outcome = self
            .completions
            .stream(&req, cancel, move || {
                let handle = tokio::spawn(async move {
                    if let Err(e) = sel.prefill_complete(&id).await {
                        tracing::debug!("prefill_complete {id}: {e}");
                    }
                });
                if let Ok(mut s) = slot.lock() {
                    *s = Some(handle);
                }
                on_first();
            })
            .await;
        let handle = prefill_task.lock().ok().and_then(|mut s| s.take());
        if let Some(h) = handle {
            let _ = tokio::time::timeout(Duration::from_secs(5), h).await;
        }
        let mut outcome = outcome;
        if let Some(e) = outcome.error.as_mut() {
            self.classify_pinned_4xx(booking.answer.worker_id, model, e)
                .await;
        }
        outcome
    }

    /// Deletes the reservation (retrying transient failures); a failure leaves it in the ledger
    /// for the end-of-run sweep.
    pub async fn release(&self, booking: &Booking) {
        self.stats.in_flight.fetch_sub(1, Ordering::Relaxed);
        if let Err(e) = self.selection.release(&booking.selection_id).await {
            self.stats.release_failures.fetch_add(1, Ordering::Relaxed);
            tracing::warn!("could not delete reservation {}: {e}", booking.selection_id);
        }
    }

    /// One whole request through the accounting path.
    #[allow(clippy::too_many_arguments)]
    pub async fn accounted(
        &self,
        model: &str,
        tokens: Vec<u32>,
        max_tokens: u32,
        ignore_eos: bool,
        cancel: &Cancel,
        tag: &str,
        on_first: impl FnOnce() + Send + 'static,
    ) -> Accounted {
        let booking = self.reserve(model, &tokens, max_tokens, tag).await;
        let stream = match &booking {
            Ok(b) => {
                let mut s = self
                    .send(b, model, tokens, max_tokens, ignore_eos, cancel, on_first)
                    .await;
                // Only untimed requests come through here (primings, background): a completed
                // answer whose tokens had no text still did its prefill.
                if s.generated_without_text() {
                    s.error = None;
                }
                self.release(b).await;
                if s.error.as_ref().is_some_and(|e| worker_fault(e.kind)) {
                    self.suspect(b.answer.worker_id);
                }
                Some(s)
            }
            Err(_) => None,
        };
        Accounted { booking, stream }
    }
}

/// Failures that point at the worker rather than at the request.
pub fn worker_fault(kind: sy_dynamo::ErrorClass) -> bool {
    use sy_dynamo::ErrorClass as K;
    matches!(
        kind,
        K::Http5xx | K::StreamError | K::StreamDropped | K::Connect
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const W: u64 = 9_981_230_746_187_775_269;

    #[test]
    fn a_400_is_a_discovery_race_only_when_the_frontend_does_not_know_the_instance() {
        // Listed since the run started: a real bad request, not retried.
        assert_eq!(discovery_race(W, false, Ok(&[1, W]), None), None);
        // Listed, first seen long ago: a real bad request.
        assert_eq!(
            discovery_race(W, false, Ok(&[W]), Some(Duration::from_secs(60))),
            None
        );
        // Not listed (a restarted frontend, or a worker not yet discovered): transient.
        let r = discovery_race(W, false, Ok(&[1, 2]), None).unwrap();
        assert!(
            r.contains("does not list instance 9981230746187775269"),
            "{r}"
        );
        // Just (re)discovered: transient.
        let r = discovery_race(W, false, Ok(&[W]), Some(Duration::from_millis(300))).unwrap();
        assert!(r.contains("only 300 ms ago"), "{r}");
        // The frontend itself is not answering: transient.
        assert!(discovery_race(W, false, Err("connection refused"), None).is_some());
        // The message names an unknown instance: transient whatever /health says.
        assert!(discovery_race(W, true, Ok(&[W]), None).is_some());
    }

    #[test]
    fn a_404_model_not_found_is_a_model_rediscovery() {
        let e = CallError::status(404, "frontend HTTP 404: Model not found");
        assert!(
            model_rediscovery(&e, "efficient")
                .unwrap()
                .contains("`efficient`")
        );
        assert!(
            model_rediscovery(&CallError::status(404, "frontend HTTP 404: nope"), "m").is_none()
        );
        assert!(
            model_rediscovery(&CallError::status(400, "Model not found"), "m").is_none(),
            "only a 404"
        );
    }
}
