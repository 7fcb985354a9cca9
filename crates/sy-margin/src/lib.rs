//! # sy-margin: how much predicted TTFT advantage to demand before overriding
//!
//! The tool: reads the records, `fit.json` and `splits.json` of a run, computes both
//! estimators' margins on the uncertainty split and writes `margins.json`. What a margin is, how
//! it is computed and the run itself live in `sy_calibration::margins` (shared with
//! `sy-select`'s stability seeds and tests); this crate is the command line.

pub mod cli;

pub use sy_calibration::inputs;
pub use sy_calibration::margins::*;
