//! Feature unification for the workspace (no code).
//!
//! Cargo resolves features per build: `cargo build -p sy-fit` and `cargo build -p sy-collect`
//! turn on different features of shared dependencies (tokio, serde_json, bytes, ...), and every
//! change of those features rebuilds everything above them — polars included, which costs minutes
//! on two cores. Depending on this crate pins those features to the whole-workspace union, so any
//! selection of packages reuses the same compiled dependencies. The runtime crate `sy-selector`
//! and `sy-wire` do not depend on it: they stay light for production.
