//! The reservation path every request of a run follows, probes and background alike:
//! `select_and_reserve` → frontend request pinned with `nvext.backend_instance_id` →
//! `prefill_complete` at the first token → `DELETE` of the reservation at the end, on error, on
//! timeout and on cancel.
//!
//! The selection service only sees load that was booked through it, so a background request
//! sent without a reservation would be invisible to the observations the probes record. The
//! [`Driver`] is the one place that sends requests, so no request can skip the path.
//!
//! - [`driver`]: [`Driver`] (reserve, reserve on one rank, send pinned, release, the whole
//!   path in one call) and what a request gave ([`Reservation`], [`Accounted`]);
//! - [`health`]: workers that just failed are stepped around; [`worker_fault`];
//! - [`transient`]: which HTTP 400/404 of a pinned request is the frontend catching up with
//!   discovery (retried) rather than a bad request;
//! - [`stats`]: the counters a progress bar and a manifest show.

pub mod driver;
pub mod health;
pub mod stats;
pub mod transient;

pub use driver::{Accounted, Driver, Reservation};
pub use health::worker_fault;
pub use stats::{BackgroundOutcome, Stats};
pub use transient::{DISCOVERY_GRACE, discovery_race, model_rediscovery};
