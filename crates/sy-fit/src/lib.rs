//! # sy-fit: Q tables, standardisers and ridge load corrections from calibration records
//!
//! The tool: splits a run's conditions, fits both models' estimators on the fit split and writes
//! `splits.json` and `fit.json`. What is fitted and how lives in `sy_calibration::fitting`
//! (shared with `sy-select`'s stability seeds); this crate is the command line and the run
//! ([`cli`]).

pub mod cli;

pub use sy_calibration::fitting::*;
