//! # sy-select: from fitted estimators and margins to one frozen rule
//!
//! The last calibration step of the proposal ("Fit and select candidates"):
//!
//! 1. **Search r and p** ([`search`]) on the *fit* split: over the observed values of
//!    `R_eff` and `P_eff` plus "disabled", minimise the mean selected TTFT of the paired probes,
//!    where the selected TTFT is the measured TTFT of the candidate the rule picks (Stage's
//!    proposal taken as efficient, guard G applied by `sy_selector::decide`); ties go to fewer
//!    overrides, fewer terms, the larger r, the larger p. One search for `count`, one for
//!    `count_prefill`.
//! 2. **Evaluate the five variants** ([`evaluate`]) on the *selection* split, every decision through
//!    `sy_selector::decide`, and choose one threshold rule (`count` vs `count_prefill`) and one
//!    estimator (`blind` vs `cache`) by mean selected TTFT.
//! 3. **Freeze** ([`select`]) the parameters into `bundle.json` (sy-selector's format, with
//!    provenance: input hashes, split seed, tool versions) and one bundle per variant in
//!    `bundles/`, and write `selection.json` and the report (`report.md`, `plots/`).
//!
//! [`replay`] runs any bundle over any records (`sy-select replay`) and decides one turn from an
//! observation document (`sy-select decide`).
//!
//! Errors are typed, one enum per concern ([`error`]); the binary turns them into
//! `sy_cli::ToolError` (and its exit code) at the edge.
//!
//! No formula is re-implemented here: predictions, guard, triggers and decisions all come from
//! `sy-selector`, so what this tool measures is what production does.

pub mod adaptive;
pub mod choice;
pub mod cli;
pub mod design;
pub mod error;
pub mod evaluate;
pub mod failures;
pub mod gap;
mod jsonl_frame;
pub mod replay;
pub mod report;
pub mod search;
pub mod search_view;
pub mod select;
pub mod stability;
pub mod uncertainty;
