//! # sy-calibration: the calibration steps the tools share
//!
//! `sy-fit`, `sy-margin` and `sy-select` are tools: each reads a run directory, computes and
//! writes its artifact. The steps more than one of them computes live here, once, so that no
//! tool depends on another:
//!
//! * [`fitting`] — Q tables, standardisers, ridge load corrections and their grouped
//!   cross-validation, from the records or from per-condition sums (`sy-fit` writes
//!   `fit.json`; `sy-select`'s stability seeds refit for each split seed);
//! * [`margins`] — the 90th-percentile margins of the predicted advantage on the uncertainty
//!   split (`sy-margin` writes `margins.json`; the seeds recompute them);
//! * [`inputs`] — the checked reading of what the earlier tools wrote into a run directory;
//! * [`prequential`] — an adaptive collection's stopping statistic: each round's conditions
//!   judged by the rule fitted on the earlier rounds, read by an anytime-valid confidence
//!   sequence (`sy-collect --adaptive` stops on it, `sy-select` recomputes and reports it).
//!
//! Every formula is `sy-selector`'s; the run directory's names, versions and checked reads are
//! `sy-rundir`'s.

pub mod fitting;
pub mod inputs;
pub mod margins;
pub mod prequential;
