//! sy-select: threshold search, choice of rule and estimator, the frozen bundle, replay and single decisions.

pub mod search;
