//! Failure classification: what went wrong with a call to the deployment, and how a probe's
//! record says why it failed. One enum for both: the clients (`sy-dynamo`) classify a failed
//! call with it, and `sy-collect` records the same value (`error_class` in the record).

use serde::{Deserialize, Serialize};

/// Why a call or a probe failed. Failures are recorded, never dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorClass {
    /// TCP connect refused or reset before an HTTP answer.
    Connect,
    /// No answer (or no first token) within the plan's timeout.
    Timeout,
    /// HTTP 4xx from the frontend.
    Http4xx,
    /// HTTP 5xx from the frontend (503 from a dead or unknown worker among them).
    Http5xx,
    /// An `error` event inside a started (HTTP 200) stream.
    StreamError,
    /// The stream ended without `[DONE]` (connection dropped mid-way).
    StreamDropped,
    /// The stream finished without a single non-empty token.
    NoContent,
    /// The selection service refused or failed `select_and_reserve`.
    Reservation,
    /// The observation (advisory select, loads, workers) could not be taken.
    Observation,
    /// The run was interrupted (Ctrl-C) while the probe was in flight.
    Cancelled,
    /// An answer that could not be parsed.
    Protocol,
    /// The deployment refused the request as misconfigured (e.g. a pin to a worker with several
    /// data-parallel ranks without the rank): not retried, the run stops.
    Configuration,
    /// The frontend reported a worker or rank other than the reserved one: the measured TTFT
    /// does not belong to the recorded observation.
    ServedElsewhere,
}

impl ErrorClass {
    /// Whether a retry of the call may succeed (a new worker, a restarted server, a passing
    /// stall). The classes the collector assigns itself (reservation, observation, served
    /// elsewhere) are retried or not by the collector's own rules.
    pub fn is_transient(self) -> bool {
        matches!(
            self,
            ErrorClass::Connect
                | ErrorClass::Timeout
                | ErrorClass::Http5xx
                | ErrorClass::StreamError
                | ErrorClass::StreamDropped
        )
    }

    /// From an HTTP status that is not a success.
    pub fn from_status(status: u16) -> Self {
        if (400..500).contains(&status) {
            ErrorClass::Http4xx
        } else {
            ErrorClass::Http5xx
        }
    }
}
