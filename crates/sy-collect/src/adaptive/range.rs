//! The dry run's range of an adaptive plan: its best case (the fewest load units a verdict can
//! take) and its budget, in load units, seconds and GPU-seconds.

use serde::Serialize;
use sy_records::Phase;

use super::design;
use super::spec::AdaptiveSpecExt as _;
use crate::estimate::DryRun;
use crate::plan::Plan;

/// An adaptive plan's range (best case, budget), from the dry run's estimate of the plan: a
/// pilot's on the target when it ran, else built-in speeds. Seconds and GPU-seconds include the
/// Q grid (round 0 runs it whole); a load unit costs the grid's average (the rounds draw
/// conditions at random).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct AdaptiveRange {
    /// The fewest load units a verdict can take: round 0, then rounds until `min_conditions`
    /// conditions are judged (at most `budget_load_units`).
    pub best_case_load_units: u64,
    /// Load units at most: `budget_units` (the fixed plan's load units when 0), or fewer when the
    /// GPU-time budget pays for fewer at the estimated cost.
    pub budget_load_units: u64,
    pub best_case_seconds: f64,
    pub budget_seconds: f64,
    /// GPU-seconds of each (`None` without a pilot: the target's GPUs are unknown).
    pub best_case_gpu_seconds: Option<f64>,
    pub budget_gpu_seconds: Option<f64>,
    /// The plan's GPU-time budget (`[adaptive] budget_gpu_seconds`; `None`: none).
    pub gpu_budget: Option<f64>,
}

/// `--dry-run --json`: the dry run's fields, and `adaptive` for a plan with an `[adaptive]`
/// section.
#[derive(Debug, Clone, Serialize)]
pub struct DryRunReport<'a> {
    #[serde(flatten)]
    pub dry_run: &'a DryRun,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub adaptive: Option<AdaptiveRange>,
}

/// The range of `plan`'s `[adaptive]` section (`None` without one), from the dry run `d` of the
/// same plan.
pub fn dry_run_range(plan: &Plan, d: &DryRun) -> Option<AdaptiveRange> {
    let spec = plan.adaptive.as_ref()?;
    let phase = |p: Phase| d.phases.get(p.as_str());
    let load = phase(Phase::Load);
    let load_units = load.map_or(0, |e| e.units as u64);
    let per_unit = match load {
        Some(e) if e.units > 0 => e.seconds / e.units as f64,
        _ => 0.0,
    };
    let qgrid = phase(Phase::Qgrid).map_or(0.0, |e| e.seconds);
    let gpus = d.pilot.as_ref().map(|p| p.gpu_workers as f64);
    let gpu_budget = (spec.budget_gpu_seconds > 0.0).then_some(spec.budget_gpu_seconds);
    let (mut best, mut most) = design::unit_range(spec, load_units, spec.budget(plan));
    // What the GPU-time budget pays for after the Q grid, at the estimated cost per load unit.
    if let (Some(budget), Some(g)) = (gpu_budget, gpus)
        && per_unit * g > 0.0
    {
        let paid = ((budget - qgrid * g).max(0.0) / (per_unit * g)).floor() as u64;
        most = most.min(paid);
        best = best.min(most);
    }
    let seconds = |units: u64| qgrid + per_unit * units as f64;
    Some(AdaptiveRange {
        best_case_load_units: best,
        budget_load_units: most,
        best_case_seconds: seconds(best),
        budget_seconds: seconds(most),
        best_case_gpu_seconds: gpus.map(|g| seconds(best) * g),
        budget_gpu_seconds: gpus.map(|g| seconds(most) * g),
        gpu_budget,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::estimate::{Pilot, dry_run};
    use std::path::Path;

    const PLAN: &str = "seed = 1\n[qgrid]\nn = [128]\nf = [0.0]\nrepeats = 2\n\
        [load]\nn = [256, 512]\nf = [0.0, 0.5]\nrepeats = 4\nprefill_contention = [0, 2]\n\
        [adaptive]\nfirst_round_conditions = 4\nround_conditions = 2\nrepeats = 1\nmin_conditions = 2\n";

    fn plan(extra: &str) -> Plan {
        Plan::from_toml_str(&format!("{PLAN}{extra}"), Path::new("p.toml")).unwrap()
    }

    #[test]
    fn the_range_is_in_units_seconds_and_with_a_pilot_gpu_seconds() {
        let p = plan("");
        let d = dry_run(&p, None);
        let r = dry_run_range(&p, &d).unwrap();
        // 8 load conditions × 4 repeats = 32 units of budget; 4 + 2 conditions × 1 repeat first.
        assert_eq!((r.best_case_load_units, r.budget_load_units), (6, 32));
        let per_unit = d.phases["load"].seconds / 32.0;
        let q = d.phases["qgrid"].seconds;
        assert!((r.best_case_seconds - (q + 6.0 * per_unit)).abs() < 1e-9);
        assert!((r.budget_seconds - d.estimated_seconds).abs() < 1e-9);
        assert_eq!(
            r.best_case_gpu_seconds, None,
            "GPUs unknown without a pilot"
        );
        assert_eq!(r.gpu_budget, None);
        let mut fixed = plan("");
        fixed.adaptive = None;
        assert!(dry_run_range(&fixed, &d).is_none());

        let pilot = Pilot {
            seconds_per_token: 1e-4,
            group_seconds: [("qgrid".to_string(), 0.5)].into_iter().collect(),
            gpu_workers: 4,
            ..Pilot::default()
        };
        let d = dry_run(&p, Some(pilot.clone()));
        let r = dry_run_range(&p, &d).unwrap();
        assert_eq!(r.budget_gpu_seconds, Some(r.budget_seconds * 4.0));
        assert_eq!(r.best_case_gpu_seconds, Some(r.best_case_seconds * 4.0));

        // A GPU-time budget that pays for the Q grid and 10 load units ends the range there.
        let per_unit = d.phases["load"].seconds / 32.0;
        let budget = (d.phases["qgrid"].seconds + 10.5 * per_unit) * 4.0;
        let p = plan(&format!("budget_gpu_seconds = {budget}\n"));
        let d = dry_run(&p, Some(pilot));
        let r = dry_run_range(&p, &d).unwrap();
        assert_eq!(r.gpu_budget, Some(budget));
        assert_eq!((r.best_case_load_units, r.budget_load_units), (6, 10));
        assert!(r.budget_gpu_seconds.unwrap() <= budget);
    }
}
