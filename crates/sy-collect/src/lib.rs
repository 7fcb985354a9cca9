//! sy-collect: the calibration load generator.
//!
//! It drives a Dynamo deployment (or the embedded simulator) through controlled workload
//! conditions, observes both candidate models exactly as the runtime rule would, measures both
//! candidates' time to first token under the same conditions, and writes per-probe records for
//! `sy-fit`, `sy-margin` and `sy-select`.
//!
//! Why it is built this way:
//! - **Same accounting path as production.** The selection service only sees load that was
//!   booked through it, so every request — probe, prime and background — goes
//!   `select_and_reserve` → pinned frontend request → `prefill_complete` → `DELETE`
//!   ([`sy_drive::reservation`]). A run ends by checking that `/loads` is back to zero.
//! - **Paired probes.** Both candidates are observed, then sent the same token-exact prompt
//!   ([`probe`]): at the same instant under load, so their records differ only by model; one
//!   after the other in the no-load grid, where a sibling in flight would be load.
//! - **No unplanned cache hits.** Prompts are drawn from a seeded generator keyed by a random
//!   per-invocation id, condition, repeat and attempt ([`sy_drive::prompt`]), so neither a second run of
//!   the same plan on a warm deployment nor a resumed run reuses a cached prompt; the primed
//!   prefix is exactly `round(f·N)` of them. Target start, the reservation path, background
//!   load and prompts are [`sy_drive`]'s, shared with `sy-eval`.
//! - **Never lose a record.** Units are appended and synced as they finish ([`results`]);
//!   `--resume` skips complete (condition, repeat) units and ignores a torn last line.
//!
//! Modules map to concerns: [`plan`] (the plan's tables), [`validate`] (reading and checking a
//! plan file), [`limits`] (what a plan may cost), [`schedule`] (conditions and units),
//! [`background`] (the slots of a condition), [`probe`], [`results`], [`manifest`],
//! [`progress`], [`target`] (sim or Dynamo, URLs from flags then plan), [`preflight`] (discovery, registration, checks), [`run`] (the orchestration), [`cli`].

pub mod adaptive;
pub mod background;
pub mod check;
pub mod cli;
pub mod deployment;
pub mod error;
pub mod estimate;
pub mod limits;
pub mod manifest;
pub mod plan;
pub mod preflight;
pub mod probe;
pub mod progress;
pub mod results;
pub mod run;
pub mod schedule;
pub mod summary;
pub mod target;
pub mod validate;
pub mod warmup;

pub use error::CollectError;
pub use estimate::{DryRun, dry_run};
pub use plan::{LoadedPlan, Plan, PlanError};
pub use run::{RunOptions, RunSummary, run};
pub use schedule::{Condition, Schedule, Unit};
