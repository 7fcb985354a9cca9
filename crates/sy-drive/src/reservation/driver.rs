//! The [`Driver`]: reserve → pinned request → release, for every request of a run.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sy_dynamo::{
    CallError, Cancel, CompletionClient, ProbeRequest, SelectionClient, StreamOutcome,
};
use sy_wire::SelectResponse;

use super::health::worker_fault;
use super::stats::Stats;

/// A booked worker: the selection id the reservation is deleted by, and the selection service's
/// answer (worker, rank, overlap).
#[derive(Debug, Clone)]
pub struct Reservation {
    pub selection_id: String,
    pub answer: SelectResponse,
}

/// What one request through the accounting path gave.
#[derive(Debug, Clone)]
pub struct Accounted {
    pub reservation: Result<Reservation, CallError>,
    /// `None` when the reservation failed (nothing was sent).
    pub stream: Option<StreamOutcome>,
}

impl Accounted {
    /// The failure, if any: the reservation's or the stream's.
    pub fn failure(&self) -> Option<(bool, &CallError)> {
        match (&self.reservation, &self.stream) {
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
    pub(super) session: String,
    pub(super) next_id: AtomicU64,
    /// Workers that just failed a request (dead, restarting): stepped around for a while.
    pub(super) suspects: Mutex<HashMap<u64, Instant>>,
    /// Instances seen in the frontend's `/health`, with when this run first saw them (`None`:
    /// already listed when the run started). Tells a discovery race from a bad request.
    pub(super) frontend_seen: Mutex<HashMap<u64, Option<Instant>>>,
}

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
    ) -> Result<Reservation, CallError> {
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
    ) -> Result<Reservation, CallError> {
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

    /// A reservation's answer, counted in flight (until [`Driver::release`]); a
    /// failed or lost answer may still have booked, so it is deleted to be sure (404 is fine;
    /// 409, a reused id, belongs to someone else).
    async fn booked(
        &self,
        selection_id: String,
        answer: Result<SelectResponse, CallError>,
    ) -> Result<Reservation, CallError> {
        match answer {
            Ok(answer) => {
                self.stats.in_flight.fetch_add(1, Ordering::Relaxed);
                Ok(Reservation {
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
    /// token (and `on_first` runs). The reservation is *not* released here.
    #[allow(clippy::too_many_arguments)]
    pub async fn send(
        &self,
        reservation: &Reservation,
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
            worker_id: Some(reservation.answer.worker_id),
            dp_rank: Some(reservation.answer.dp_rank),
            ignore_eos,
        };
        let prefill_task: Arc<Mutex<Option<tokio::task::JoinHandle<()>>>> = Arc::default();
        let slot = prefill_task.clone();
        let sel = self.selection.clone();
        let id = reservation.selection_id.clone();
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
            self.classify_pinned_4xx(reservation.answer.worker_id, model, e)
                .await;
        }
        outcome
    }

    /// Deletes the reservation (retrying transient failures); a failure leaves it in the ledger
    /// for the end-of-run sweep.
    pub async fn release(&self, reservation: &Reservation) {
        self.stats.in_flight.fetch_sub(1, Ordering::Relaxed);
        if let Err(e) = self.selection.release(&reservation.selection_id).await {
            self.stats.release_failures.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                "could not delete reservation {}: {e}",
                reservation.selection_id
            );
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
        let reservation = self.reserve(model, &tokens, max_tokens, tag).await;
        let stream = match &reservation {
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
        Accounted {
            reservation,
            stream,
        }
    }
}
