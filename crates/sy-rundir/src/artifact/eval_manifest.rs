//! `eval-manifest.json`: what an evaluation run is (plan, bundle, seed, target, block order) and
//! how far it got, for `sy-eval --resume` to check and a reader to trust. Its presence makes a
//! directory an evaluation's ([`crate::RunKind`]).

use serde::{Deserialize, Serialize};
use sy_selector::Variant;

/// Defined with the run directory's layout.
pub use crate::layout::EVAL_MANIFEST_SCHEMA_VERSION;

/// What a run is, for `--resume` to check and a reader to trust.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalManifest {
    pub schema_version: u32,
    pub tool: String,
    pub tool_version: String,
    pub run_id: String,
    pub plan_path: String,
    pub plan_sha256: String,
    pub bundle_path: String,
    pub bundle_content_hash: String,
    /// The bundle's own variant (the evaluation runs the plan's variants with its parameters).
    pub bundle_variant: Variant,
    pub seed: u64,
    pub target: String,
    pub frontend_url: Option<String>,
    pub selection_url: Option<String>,
    /// The block order: (round, variant) in the order they run.
    pub blocks: Vec<(u32, Variant)>,
    pub sessions_per_block: usize,
    pub invocation_ids: Vec<String>,
    pub started_at: String,
    pub ended_at: Option<String>,
    pub complete: bool,
}
