//! Telling a sick worker or a frontend catching up with discovery from a bad request: failed
//! workers are stepped around for a while, and a 400/404 that is the frontend's discovery race
//! is marked transient (so the unit is retried and re-reserves).

use std::time::{Duration, Instant};

use sy_dynamo::CallError;

use super::driver::Driver;
use super::transient::{discovery_race, model_rediscovery};

/// How long a failed worker is stepped around before it is trusted again.
const SUSPECT_FOR: Duration = Duration::from_secs(15);

impl Driver {
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
}

/// Failures that point at the worker rather than at the request.
pub fn worker_fault(kind: sy_dynamo::ErrorClass) -> bool {
    use sy_dynamo::ErrorClass as K;
    matches!(
        kind,
        K::Http5xx | K::StreamError | K::StreamDropped | K::Connect
    )
}
