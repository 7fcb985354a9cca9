//! The plan's `[adaptive]` section: how an adaptive collection runs its rounds and when it stops.

use crate::plan::{Plan, PlanError};

/// `[adaptive]`: the section's document type is the run directory's (it is recorded in
/// `adaptive.json`); its checks against the rest of the plan are here ([`AdaptiveSpecExt`]).
pub use sy_rundir::artifact::adaptive::AdaptiveSpec;

/// What the `[adaptive]` section means for its plan: the budget it gives and its checks against
/// the rest of the plan.
pub trait AdaptiveSpecExt {
    /// The budget in load units (0 in the plan = the fixed plan's load units).
    fn budget(&self, plan: &Plan) -> u64;

    /// Checks the section against the rest of the plan (`path` for the messages).
    fn validate(&self, plan: &Plan, path: &std::path::Path) -> Result<(), PlanError>;
}

impl AdaptiveSpecExt for AdaptiveSpec {
    fn budget(&self, plan: &Plan) -> u64 {
        if self.budget_units > 0 {
            return self.budget_units;
        }
        crate::schedule::Schedule::conditions_of(plan)
            .iter()
            .filter(|(c, _)| c.phase == sy_records::Phase::Load)
            .map(|(_, r)| u64::from(*r))
            .sum()
    }

    fn validate(&self, plan: &Plan, path: &std::path::Path) -> Result<(), PlanError> {
        let bad = |field: &str, message: String| PlanError::Invalid {
            path: path.to_path_buf(),
            field: format!("adaptive.{field}"),
            message,
        };
        let Some(load) = &plan.load else {
            return Err(bad(
                "",
                "an adaptive plan needs a [load] phase (its conditions are what the rounds draw)"
                    .into(),
            ));
        };
        if self.first_round_conditions < 4 {
            return Err(bad(
                "first_round_conditions",
                format!(
                    "must be ≥ 4 (3 fit the estimators, 1 measures the margins), got {}",
                    self.first_round_conditions
                ),
            ));
        }
        if self.round_conditions == 0 {
            return Err(bad("round_conditions", "must be > 0".into()));
        }
        if self.repeats == 0 || self.repeats > load.repeats {
            return Err(bad(
                "repeats",
                format!(
                    "must be in 1..={} ([load] repeats), got {}",
                    load.repeats, self.repeats
                ),
            ));
        }
        if !(self.epsilon_ms.is_finite() && self.epsilon_ms >= 0.0) {
            return Err(bad(
                "epsilon_ms",
                format!("must be finite and ≥ 0, got {}", self.epsilon_ms),
            ));
        }
        if !(self.alpha > 0.0 && self.alpha < 0.5) {
            return Err(bad(
                "alpha",
                format!("must be in (0, 0.5), got {}", self.alpha),
            ));
        }
        if self.design_conditions == 0 {
            return Err(bad("design_conditions", "must be > 0".into()));
        }
        if self.min_conditions < 2 {
            return Err(bad(
                "min_conditions",
                format!("must be ≥ 2, got {}", self.min_conditions),
            ));
        }
        if !(self.budget_gpu_seconds.is_finite() && self.budget_gpu_seconds >= 0.0) {
            return Err(bad(
                "budget_gpu_seconds",
                format!("must be finite and ≥ 0, got {}", self.budget_gpu_seconds),
            ));
        }
        let first = u64::from(self.first_round_conditions) * u64::from(self.repeats);
        if self.budget_units > 0 && self.budget_units < first {
            return Err(bad(
                "budget_units",
                format!(
                    "{} cannot pay for the first round ({} conditions × {} repeats = {first})",
                    self.budget_units, self.first_round_conditions, self.repeats
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn plan(adaptive: &str) -> Result<(), PlanError> {
        let text = format!(
            "seed = 1\n[load]\nn = [256]\nf = [0.0]\nrepeats = 4\nprefill_contention = [0, 2]\n[adaptive]\n{adaptive}"
        );
        let p = Plan::from_toml_str(&text, Path::new("p.toml"))?;
        p.adaptive
            .as_ref()
            .map_or(Ok(()), |a| a.validate(&p, Path::new("p.toml")))
    }

    #[test]
    fn defaults_are_valid_and_bad_fields_are_named() {
        assert!(plan("").is_ok());
        for (field, text) in [
            ("adaptive.repeats", "repeats = 5"),
            ("adaptive.repeats", "repeats = 0"),
            ("adaptive.alpha", "alpha = 0.7"),
            ("adaptive.epsilon_ms", "epsilon_ms = -1.0"),
            ("adaptive.min_conditions", "min_conditions = 1"),
            ("adaptive.round_conditions", "round_conditions = 0"),
            ("adaptive.budget_units", "budget_units = 3"),
            ("adaptive.budget_gpu_seconds", "budget_gpu_seconds = -1.0"),
        ] {
            let e = plan(text).unwrap_err().to_string();
            assert!(e.contains(field), "{text}: {e}");
        }
        let e = plan("rounds = 3").unwrap_err().to_string();
        assert!(e.contains("rounds"), "unknown field named: {e}");
    }

    #[test]
    fn the_budget_defaults_to_the_fixed_plans_load_units() {
        let text = "seed = 1\n[load]\nn = [256]\nf = [0.0]\nrepeats = 4\nprefill_contention = [0, 2]\n[adaptive]\n";
        let p = Plan::from_toml_str(text, Path::new("p.toml")).unwrap();
        let a = p.adaptive.clone().unwrap();
        assert_eq!(a.budget(&p), 2 * 4);
        let a = AdaptiveSpec {
            budget_units: 5,
            ..a
        };
        assert_eq!(a.budget(&p), 5);
    }
}
