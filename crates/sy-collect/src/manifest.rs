//! The run manifest (`manifest.json`, its document `sy_rundir::artifact::manifest::Manifest`):
//! what of it sy-collect computes from the records and the operator's description.
//!
//! Written atomically when a run starts (so `--resume` can check that the plan is unchanged even
//! after a crash), at most once a second while it runs (units done so far) and again when it
//! ends, with the counts per status and error class and the end-of-run reservation check.

use sy_records::{Record, Status};
use sy_rundir::artifact::manifest::{Counts, DeploymentInfo};

/// The manifest's record of the operator's description of the deployment (`--describe`).
pub fn deployment_info(d: &crate::deployment::LoadedDescription) -> DeploymentInfo {
    DeploymentInfo {
        file: d.path.display().to_string(),
        provenance: d.description.deployment.clone(),
        workers: d.description.workers.clone(),
    }
}

/// The counts per status and error class of `records`, with the retried attempts.
pub fn counts_of(records: &[Record], retried_attempts: u64) -> Counts {
    let mut c = Counts {
        retried_attempts,
        ..Counts::default()
    };
    for r in records {
        c.records += 1;
        match r.status {
            Status::Ok => c.ok += 1,
            Status::Error => c.error += 1,
        }
        if let Some(class) = r.error_class {
            *c.by_error_class
                .entry(crate::summary::class_name(&class))
                .or_default() += 1;
        }
    }
    c
}
