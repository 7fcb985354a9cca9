//! Where sy-collect's requests go: a [`sy_drive::Target`] whose URLs come from the flags first,
//! then the plan's `[target]` (then `sy-drive`'s defaults). The checks that must pass before
//! the first request is sent are in [`crate::preflight`].

use sy_drive::{Endpoints, Target, TargetKind};

use crate::error::CollectError;
use crate::plan::Plan;

/// Starts the target of `plan`; `flags` are the command line's URLs and simulator configuration.
pub async fn start(
    kind: TargetKind,
    plan: &Plan,
    flags: &Endpoints,
) -> Result<Target, CollectError> {
    let endpoints = Endpoints {
        frontend_url: flags
            .frontend_url
            .clone()
            .or_else(|| plan.target.frontend_url.clone()),
        selection_url: flags
            .selection_url
            .clone()
            .or_else(|| plan.target.selection_url.clone()),
        sim_config: flags.sim_config.clone(),
    };
    Ok(Target::start(kind, &endpoints).await?)
}
