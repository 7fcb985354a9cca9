//! sy-eval: the frozen rule, live, on multi-turn agent sessions.
//!
//! Calibration checks the rule's predictions on single probes; the proposal's question is
//! whether it shortens whole agent sessions ("complete trajectories matter: paying cold prefill
//! now may help later turns"). `sy-eval` drives a deployment — the embedded simulator or a
//! Dynamo deployment — with multi-turn sessions whose prompt grows turn by turn, and routes every
//! turn live with each variant exactly as a host would:
//!
//! - **the host's code path**: every turn goes through [`sy_selector::LiveRule::route`] over an
//!   [`observer::DynamoObserver`] (the [`sy_selector::Observer`] trait implemented with the
//!   project's Dynamo client), then reserve → pinned stream → free on the reservation path
//!   ([`sy_drive::reservation`], shared with sy-collect); only the chosen model executes;
//! - **matched arms** ([`run`]): per round every variant runs once in a seeded random (or ABBA)
//!   order on fresh sessions of the same shapes; each block starts on a fresh simulator, or on a
//!   quiescent Dynamo deployment with prompts no other block used;
//! - **background traffic** ([`block`]) on the same reservation path, in sy-collect's contention
//!   shapes ([`sy_drive::background`]), whose own latency is recorded (the effect on competing traffic);
//! - **statistics** ([`stats`], [`compare`]): session completion time and per-turn TTFT with
//!   grouped bootstrap intervals over sessions, and the paired difference to the baseline;
//! - **records** ([`sy_rundir::artifact::eval_block`], written by [`block`]): per turn the proposal, choice, reason, observations,
//!   predictions, worker, TTFT, full-response latency, uncached input and routing overhead; per
//!   session the completion time.
//!
//! See `docs/eval.md` for the method, the figures and what this cannot say about task success.

pub mod block;
pub mod cli;
pub mod compare;
pub mod error;
pub mod limits;
pub mod observer;
pub mod plan;
pub mod quiescence;
pub mod report;
pub mod run;
pub mod sessions;

pub use error::EvalError;
pub use plan::{EvalPlan, LoadedPlan, PlanError};
pub use run::{RunOptions, RunOutcome, run};
