//! Grouped splits: every workload condition goes to exactly one of fit / uncertainty / selection.
//!
//! The proposal asks for separate measurements for fitting, estimating uncertainty and selecting,
//! with all repeats of a condition in the same split. The unit is therefore the condition — keyed
//! by `(run_id, condition_id)` so that runs merged from several nodes never collide — and both
//! candidates and every repeat of it follow it.
//!
//! The assignment is a seeded hash, not a shuffle: `u = SHA-256("sy-split-v1", seed, run_id,
//! condition_id)` mapped to `[0, 1)`, then `fit` if `u < f_fit`, `uncertainty` if `u < f_fit +
//! f_uncertainty`, else `selection`. A condition's split therefore depends only on the seed, the
//! fractions and its own id: adding runs or conditions never moves an existing one, and any tool
//! can recompute it. The table is still written to the run directory (`splits.json`) so that the
//! later tools read exactly what `sy-fit` used, and so that a person can see it.
//!
//! Only load-phase conditions are split: Q-grid records feed only the Q tables.
//!
//! [`assign`] holds the rule (a condition's split from the seed, the fractions and its id);
//! [`table`] the table of a run's conditions, as `splits.json` stores it.

mod assign;
mod table;

pub use assign::{assign_split, split_point};
/// Defined with the run directory's layout (`sy_rundir::layout`).
pub use sy_rundir::SPLITS_SCHEMA_VERSION;
pub use sy_rundir::split::{FractionsError, Split, SplitCounts, SplitFractions};
pub use table::{ConditionSplits, LoadConditions, SplitTable};
