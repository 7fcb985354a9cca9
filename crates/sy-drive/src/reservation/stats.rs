//! The counters of the requests a [`super::Driver`] sent.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, AtomicU64};

use super::driver::Accounted;

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
