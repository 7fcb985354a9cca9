//! sy-drive: driving a deployment — the library `sy-collect` and `sy-eval` send their requests
//! through.
//!
//! It holds what both tools do to a deployment, once:
//!
//! - [`target`]: start the target — the embedded simulator (the only crate that links it, and
//!   only with the `sim` feature) or a Dynamo deployment's URLs — and ask it for its versions;
//! - [`reservation`]: the reservation path every request follows (`select_and_reserve` →
//!   pinned frontend request → `prefill_complete` → `DELETE`), through one [`Driver`], with
//!   the retry rules for a frontend catching up with discovery and the counters a run reports;
//! - [`background`]: closed-loop background load (prefill and decode contention, a busy capable
//!   destination) on that same path;
//! - [`prompt`]: token-exact prompts, unique per invocation and key, so nothing is an
//!   unplanned cache hit;
//! - [`plan`]: the plan tables both tools share (`[target]`, `[models]`, `[prompt]`) and
//!   [`PlanError`];
//! - [`limits`]: the bounds both tools put on a plan (tokens, durations, the open-file limit);
//!
//! What a tool measures and records (probes, sessions, schedules, manifests) stays in the tool.
//! With the `sim` feature, the simulator is reachable as `sim` for tests that inject faults
//! through `Target::sim`. Without it (the default) a build compiles neither sy-sim nor Dynamo's
//! mocker engine, and `--target sim` is refused with [`TargetError::SimNotBuilt`].

pub mod background;
pub mod limits;
pub mod plan;
pub mod prompt;
pub mod reservation;
pub mod target;

#[cfg(feature = "sim")]
pub use sy_sim as sim;

pub use plan::{BearerUnset, Models, PlanError, PromptSpec, TargetField, TargetSpec, Tool};
pub use prompt::{PromptFactory, new_invocation_id};
pub use reservation::{Accounted, Driver, Reservation, Stats};
pub use target::{Endpoints, Target, TargetError, TargetKind};
