//! The selection-service client and the reservation ledger.
//!
//! Every request of a calibration run follows the accounting path: `select_and_reserve` books a
//! worker, the frontend request is pinned to it, `prefill_complete` is sent at the first token,
//! and the reservation is deleted at the end, on error, on timeout and on cancel. The
//! [`ReservationLedger`] holds every booking until its `DELETE` succeeds (or answers 404:
//! already gone), so a run can release stragglers and prove that none leaked.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use sy_wire::{
    ErrorBody, ModelLoads, OverlapScoresResponse, PromptQuery, SelectRequest, SelectResponse,
    WorkerRecord,
};

use crate::config::ClientConfig;
use crate::error::{CallError, ErrorClass};

/// Bookings made and not yet deleted.
#[derive(Debug, Clone, Default)]
pub struct ReservationLedger {
    inner: Arc<Mutex<HashSet<String>>>,
}

impl ReservationLedger {
    fn insert(&self, id: &str) {
        if let Ok(mut set) = self.inner.lock() {
            set.insert(id.to_string());
        }
    }

    fn remove(&self, id: &str) {
        if let Ok(mut set) = self.inner.lock() {
            set.remove(id);
        }
    }

    /// Ids booked and not yet deleted.
    pub fn outstanding(&self) -> Vec<String> {
        self.inner
            .lock()
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }
}

/// Talks to the selection service.
#[derive(Debug, Clone)]
pub struct SelectionClient {
    http: reqwest::Client,
    base: String,
    bearer: Option<String>,
    timeout: Duration,
    ledger: ReservationLedger,
}

impl SelectionClient {
    pub fn new(config: &ClientConfig, http: reqwest::Client) -> Self {
        Self {
            http,
            base: config.selection_url.clone(),
            bearer: config.bearer_token.clone(),
            timeout: config.selection_timeout,
            ledger: ReservationLedger::default(),
        }
    }

    pub fn base_url(&self) -> &str {
        &self.base
    }

    pub fn ledger(&self) -> &ReservationLedger {
        &self.ledger
    }

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let mut b = self
            .http
            .request(method, format!("{}{path}", self.base))
            .timeout(self.timeout);
        if let Some(t) = &self.bearer {
            b = b.bearer_auth(t);
        }
        b
    }

    async fn send<T: DeserializeOwned>(
        &self,
        what: &str,
        builder: reqwest::RequestBuilder,
    ) -> Result<T, CallError> {
        let resp = builder
            .send()
            .await
            .map_err(|e| CallError::from_reqwest(what, &e))?;
        let status = resp.status().as_u16();
        let bytes = resp
            .bytes()
            .await
            .map_err(|e| CallError::from_reqwest(what, &e))?;
        if !(200..300).contains(&status) {
            let text = String::from_utf8_lossy(&bytes);
            let msg = serde_json::from_slice::<ErrorBody>(&bytes)
                .ok()
                .and_then(|b| b.message_text().map(str::to_owned))
                .unwrap_or_else(|| text.chars().take(300).collect());
            return Err(CallError::status(
                status,
                format!("{what}: HTTP {status}: {msg}"),
            ));
        }
        serde_json::from_slice(&bytes).map_err(|e| {
            CallError::new(
                ErrorClass::Protocol,
                format!("{what}: unexpected answer: {e}"),
            )
        })
    }

    async fn post<B: Serialize, T: DeserializeOwned>(
        &self,
        what: &str,
        path: &str,
        body: &B,
    ) -> Result<T, CallError> {
        self.send(what, self.request(reqwest::Method::POST, path).json(body))
            .await
    }

    fn select_body(model: &str, tokens: &[u32]) -> SelectRequest {
        SelectRequest {
            model_name: Some(model.to_string()),
            token_ids: Some(tokens.to_vec()),
            ..SelectRequest::default()
        }
    }

    /// Query-only `POST /select` (books nothing). With `advisory`, the answer has `worker_load`.
    pub async fn select(
        &self,
        model: &str,
        tokens: &[u32],
        advisory: bool,
    ) -> Result<SelectResponse, CallError> {
        self.select_among(model, tokens, advisory, None).await
    }

    /// `POST /select` restricted to `allowed` workers (`allowed_worker_ids`) when given.
    pub async fn select_among(
        &self,
        model: &str,
        tokens: &[u32],
        advisory: bool,
        allowed: Option<&[u64]>,
    ) -> Result<SelectResponse, CallError> {
        let mut body = Self::select_body(model, tokens);
        body.advisory = advisory.then_some(true);
        body.allowed_worker_ids = allowed.map(<[u64]>::to_vec);
        self.post("select", "/select", &body).await
    }

    /// `POST /select_and_reserve`: books the picked worker under `selection_id` (among
    /// `allowed` workers when given).
    pub async fn select_and_reserve(
        &self,
        model: &str,
        tokens: &[u32],
        selection_id: &str,
        expected_output_tokens: Option<u32>,
        allowed: Option<&[u64]>,
    ) -> Result<SelectResponse, CallError> {
        let mut body = Self::select_body(model, tokens);
        body.selection_id = Some(selection_id.to_string());
        body.allowed_worker_ids = allowed.map(<[u64]>::to_vec);
        body.expected_output_tokens = expected_output_tokens;
        self.book(selection_id, &body).await
    }

    /// Sends a reservation: the id is remembered before sending (if the answer is lost, the
    /// delete still happens) and forgotten when the frontend refused outright (4xx other than
    /// "id in use": nothing was booked).
    async fn book(
        &self,
        selection_id: &str,
        body: &SelectRequest,
    ) -> Result<SelectResponse, CallError> {
        self.ledger.insert(selection_id);
        let answer = self
            .post("select_and_reserve", "/select_and_reserve", body)
            .await;
        if let Err(e) = &answer
            && e.status.is_some_and(|s| s != 409 && s < 500)
        {
            self.ledger.remove(selection_id);
        }
        answer
    }

    /// `POST /select_and_reserve` pinned to one worker and data-parallel rank (`pinned_worker`):
    /// books exactly that rank under `selection_id`.
    pub async fn reserve_on_rank(
        &self,
        model: &str,
        tokens: &[u32],
        selection_id: &str,
        expected_output_tokens: Option<u32>,
        worker: u64,
        dp_rank: u32,
    ) -> Result<SelectResponse, CallError> {
        let mut body = Self::select_body(model, tokens);
        body.selection_id = Some(selection_id.to_string());
        body.allowed_worker_ids = Some(vec![worker]);
        body.pinned_worker = Some(sy_wire::PinnedWorker {
            worker_id: worker,
            dp_rank,
        });
        body.expected_output_tokens = expected_output_tokens;
        self.book(selection_id, &body).await
    }

    /// Query-only `POST /select` pinned to one worker and rank: its overlap (`overlap.dp` per
    /// rank) without booking.
    pub async fn select_on_rank(
        &self,
        model: &str,
        tokens: &[u32],
        worker: u64,
        dp_rank: u32,
    ) -> Result<SelectResponse, CallError> {
        let mut body = Self::select_body(model, tokens);
        body.allowed_worker_ids = Some(vec![worker]);
        body.pinned_worker = Some(sy_wire::PinnedWorker {
            worker_id: worker,
            dp_rank,
        });
        self.post("select", "/select", &body).await
    }

    /// `POST /reservations/{id}/prefill_complete`.
    pub async fn prefill_complete(&self, selection_id: &str) -> Result<(), CallError> {
        let path = format!("/reservations/{selection_id}/prefill_complete");
        self.send::<serde_json::Value>(
            "prefill_complete",
            self.request(reqwest::Method::POST, &path),
        )
        .await
        .map(|_| ())
    }

    /// `DELETE /reservations/{id}`; a 404 (already gone) counts as success.
    pub async fn delete_reservation(&self, selection_id: &str) -> Result<(), CallError> {
        let path = format!("/reservations/{selection_id}");
        match self
            .send::<serde_json::Value>(
                "delete reservation",
                self.request(reqwest::Method::DELETE, &path),
            )
            .await
        {
            Ok(_) => {
                self.ledger.remove(selection_id);
                Ok(())
            }
            Err(e) if e.status == Some(404) => {
                self.ledger.remove(selection_id);
                Ok(())
            }
            Err(e) if e.kind == ErrorClass::Protocol => {
                // The delete succeeded; only its body was odd.
                self.ledger.remove(selection_id);
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Deletes a reservation, retrying transient failures a few times. Never gives up silently:
    /// the id stays in the ledger when every attempt failed.
    pub async fn release(&self, selection_id: &str) -> Result<(), CallError> {
        let mut delay = Duration::from_millis(20);
        let mut last = None;
        for _ in 0..4 {
            match self.delete_reservation(selection_id).await {
                Ok(()) => return Ok(()),
                Err(e) if e.is_transient() => {
                    last = Some(e);
                    tokio::time::sleep(delay).await;
                    delay *= 3;
                }
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| CallError::new(ErrorClass::Connect, "release failed")))
    }

    /// Deletes every outstanding reservation; returns the ids that could not be deleted.
    pub async fn release_all(&self) -> Vec<String> {
        let mut failed = Vec::new();
        for id in self.ledger.outstanding() {
            if self.release(&id).await.is_err() {
                failed.push(id);
            }
        }
        failed
    }

    /// `GET /loads` (all models, or one).
    pub async fn loads(&self, model: Option<&str>) -> Result<Vec<ModelLoads>, CallError> {
        let path = match model {
            Some(m) => format!("/loads?model_name={}", percent_encode(m)),
            None => "/loads".to_string(),
        };
        self.send("loads", self.request(reqwest::Method::GET, &path))
            .await
    }

    /// `POST /overlap_scores`: the prompt's cached prefix on every worker/rank of `model`, in
    /// blocks.
    pub async fn overlap_scores(
        &self,
        model: &str,
        tokens: &[u32],
    ) -> Result<OverlapScoresResponse, CallError> {
        let body = PromptQuery {
            model_name: Some(model.to_string()),
            token_ids: Some(tokens.to_vec()),
            ..PromptQuery::default()
        };
        self.post("overlap_scores", "/overlap_scores", &body).await
    }

    /// Polls `/loads` until nothing is booked (deletes are synchronous, but a server may apply
    /// them a moment later): `Some(true)` once every booked count is zero, `Some(false)` after
    /// `tries` reads 50 ms apart, `None` when `/loads` cannot be read.
    pub async fn wait_loads_zero(&self, tries: u32) -> Option<bool> {
        for _ in 0..tries {
            let loads = self.loads(None).await.ok()?;
            if total_booked(&loads) == (0, 0) {
                return Some(true);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Some(false)
    }

    /// `GET /workers`.
    pub async fn workers(&self) -> Result<Vec<WorkerRecord>, CallError> {
        self.send("workers", self.request(reqwest::Method::GET, "/workers"))
            .await
    }
}

/// Percent-encodes a query value (everything but unreserved characters).
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Booked requests and prefill tokens summed over every worker of every model: zero when no
/// reservation is left.
pub fn total_booked(loads: &[ModelLoads]) -> (u64, u64) {
    loads
        .iter()
        .flat_map(|m| m.loads.iter())
        .fold((0, 0), |(r, p), l| {
            (r + l.active_requests, p + l.potential_prefill_tokens)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_model_names() {
        assert_eq!(percent_encode("Qwen/Qwen3-8B"), "Qwen%2FQwen3-8B");
        assert_eq!(percent_encode("a b&c"), "a%20b%26c");
    }
}
