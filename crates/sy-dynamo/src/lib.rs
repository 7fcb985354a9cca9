//! Dynamo clients: streaming completions with TTFT timing, the selection-service client and the
//! observation adapter.
//!
//! Why this crate exists: `sy-collect` must observe and drive a Dynamo deployment *exactly* as the
//! runtime router would, and measure time to first token without adding its own noise. Keeping
//! the HTTP here (and the JSON shapes in `sy-wire`) means the collector, its tests and the
//! simulator all exercise one client.
//!
//! - [`completions`]: [`CompletionClient`] streams `/v1/completions` (token-exact prompts,
//!   `nvext.backend_instance_id` pinning) and measures TTFT on the monotonic clock from the
//!   moment the request is handed to the connection until the first SSE event with non-empty
//!   text arrives. Failures are classified ([`ErrorClass`]) instead of being dropped.
//! - [`selection`]: [`SelectionClient`] for the selection service: advisory `/select`,
//!   `/select_and_reserve`, `prefill_complete`, `DELETE /reservations/{id}`, `/loads`,
//!   `/workers`. The [`ReservationLedger`] remembers every booking until it is deleted, so a run
//!   can prove it leaked none.
//! - [`observe`]: the observation adapter. One [`observe::CandidateObservation`] combines an
//!   advisory select, the pool's `/loads` and the `/workers` catalogue into what the rule sees
//!   (N, K, R, P and the recorded extras) and converts to [`sy_selector::Observation`].
//! - [`transport`]: the connection timed requests travel on (`TCP_NODELAY`, `TCP_QUICKACK`
//!   re-armed after every read), so the first token never waits for a delayed ACK.
//! - [`Cancel`]: a cheap cancellation signal (Ctrl-C) that every request honours.

pub mod cancel;
pub mod completions;
pub mod config;
pub mod error;
pub mod observe;
pub mod selection;
pub mod sse;
pub mod transport;

pub use cancel::Cancel;
pub use completions::{CompletionClient, ProbeRequest, StreamOutcome};
pub use config::ClientConfig;
pub use error::{CallError, ErrorClass};
pub use observe::{CandidateObservation, observe_candidate};
pub use selection::{ReservationLedger, SelectionClient};
