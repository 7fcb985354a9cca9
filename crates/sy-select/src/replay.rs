//! `sy-select replay` and `sy-select decide`: run a frozen bundle over records, or over one
//! observation document.

use std::path::{Path, PathBuf};

use sy_cli::ToolError;
use sy_margin::inputs;
use sy_records::{ProbePair, Split};
use sy_selector::{Bundle, Decision, DecisionInput, Variant};

use crate::evaluate::{Replay, eval_pairs, replay_all};

/// Loads and checks a bundle (schema version, structure, content hash, parameters).
pub fn load_bundle(path: &Path) -> Result<Bundle, ToolError> {
    Bundle::from_path(path).map_err(|e| match e {
        sy_selector::BundleError::Io { .. } => ToolError::BadInput(e.to_string()),
        other => ToolError::BadInput(format!("{}: {other}", path.display())),
    })
}

/// Which pairs to replay.
#[derive(Debug, Clone)]
pub struct ReplayOptions {
    pub bundle: PathBuf,
    pub records: Vec<PathBuf>,
    /// Restrict to one split of this table (`None` = every load-phase pair).
    pub split: Option<(PathBuf, Split)>,
    pub skip_invalid: bool,
}

/// Replays every variant with the bundle's parameters.
pub fn replay(opts: &ReplayOptions) -> Result<(Bundle, Replay), ToolError> {
    let bundle = load_bundle(&opts.bundle)?;
    let loaded = inputs::load_records(&opts.records, opts.skip_invalid)?;
    let table = match &opts.split {
        Some((path, split)) => {
            let t = inputs::read_splits(path)?;
            t.check_covers(&loaded.records, path)
                .map_err(inputs::records_error)?;
            Some((t, *split))
        }
        None => None,
    };
    let pairs = sy_records::pair_probes(&loaded.records).map_err(inputs::records_error)?;
    let keep = |p: &&ProbePair| match &table {
        Some((t, s)) => t.split_of(p.run_id(), p.condition_id()) == Some(*s),
        None => true,
    };
    let (eval, unmeasured) = eval_pairs(pairs.iter().filter(keep));
    if eval.is_empty() {
        return Err(ToolError::BadInput(format!(
            "no measured load-phase pair to replay{}",
            match &opts.split {
                Some((_, s)) => format!(" in the {} split", s.as_str()),
                None => String::new(),
            }
        )));
    }
    Ok((
        bundle.clone(),
        replay_all(&bundle.params, &eval, unmeasured),
    ))
}

/// Parses the observation document of `sy-select decide` (a `sy_selector::DecisionInput`).
pub fn read_observations(path: &Path) -> Result<DecisionInput, ToolError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| ToolError::BadInput(format!("cannot read {}: {e}", path.display())))?;
    serde_json::from_str(&text).map_err(|e| {
        ToolError::BadInput(format!(
            "{}: not a valid observation document: {e} (expected {{proposal, efficient, capable, now_ms, local_capable_in_flight}}; see crates/sy-select/README.md)",
            path.display()
        ))
    })
}

/// One decision with the bundle's parameters and its variant (or `variant`).
pub fn decide_one(bundle: &Bundle, variant: Option<Variant>, input: &DecisionInput) -> Decision {
    sy_selector::decide(&bundle.params, variant.unwrap_or(bundle.variant), input)
}
