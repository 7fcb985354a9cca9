//! Reading a plan file and checking it before any request: unknown fields and wrong types
//! (serde, naming the line), then every field ([`Plan::validate`]: empty grids, `f` outside
//! `[0, 1]`, zero repeats, bad URLs, inconsistent numbers), then what the plan may cost on this
//! machine ([`crate::limits`]). Checks that need the target (KV capacity, reachability) live in
//! [`crate::preflight`].

use std::path::Path;

use sha2::{Digest, Sha256};
use sy_drive::Tool;
use sy_drive::limits::Machine;

use crate::adaptive::AdaptiveSpecExt as _;
use crate::limits::check_cost;
use crate::plan::{LoadPhase, LoadedPlan, Plan, PlanError};

impl Plan {
    /// Reads, parses and validates a plan file.
    pub fn from_path(path: &Path) -> Result<LoadedPlan, PlanError> {
        // A regular file of bounded size: a FIFO would block the read forever.
        let bytes =
            sy_rundir::read_input(path, 1 << 20).map_err(|source| PlanError::Read { source })?;
        let text = std::str::from_utf8(&bytes)
            .map_err(|source| PlanError::NotUtf8 {
                path: path.to_path_buf(),
                source,
            })?
            .to_owned();
        let plan = Plan::from_toml_str(&text, path)?;
        plan.validate(path)?;
        Ok(LoadedPlan {
            plan,
            path: path.to_path_buf(),
            sha256: hex::encode(Sha256::digest(&bytes)),
            text,
        })
    }

    /// Checks everything that does not need the target, bounding the run's cost by the limits
    /// of this machine (see [`crate::limits`]).
    pub fn validate(&self, path: &Path) -> Result<(), PlanError> {
        self.validate_on(path, &Machine::current())
    }

    /// [`Plan::validate`] against the given machine limits.
    pub fn validate_on(&self, path: &Path, machine: &Machine) -> Result<(), PlanError> {
        self.validate_fields(path)?;
        check_cost(self, machine).map_err(|(field, message)| PlanError::Invalid {
            path: path.to_path_buf(),
            field,
            message,
        })
    }

    fn validate_fields(&self, path: &Path) -> Result<(), PlanError> {
        let bad = |field: &str, message: String| PlanError::Invalid {
            path: path.to_path_buf(),
            field: field.to_string(),
            message,
        };
        if let Some(name) = &self.name {
            sy_rundir::check_plan_name(name).map_err(|m| bad("name", m))?;
        }
        if self.qgrid.is_none() && self.load.is_none() {
            return Err(bad(
                "qgrid/load",
                "the plan has no phase: add a [qgrid] or a [load] table".into(),
            ));
        }
        self.target
            .check()
            .map_err(|(field, message)| bad(&field, message))?;
        self.target.refuse_unused(path, Tool::Collect)?;
        if self.models.efficient.trim().is_empty() {
            return Err(bad("models.efficient", "must not be empty".into()));
        }
        if self.models.capable.trim().is_empty() {
            return Err(bad("models.capable", "must not be empty".into()));
        }
        if self.models.efficient == self.models.capable {
            return Err(bad(
                "models.capable",
                "the two candidates must be different models".into(),
            ));
        }
        if self.prompt.vocab_min >= self.prompt.vocab_max {
            return Err(bad(
                "prompt.vocab_max",
                format!(
                    "must be greater than prompt.vocab_min ({} >= {})",
                    self.prompt.vocab_min, self.prompt.vocab_max
                ),
            ));
        }
        if self.prompt.vocab_max - self.prompt.vocab_min < 2 {
            return Err(bad(
                "prompt.vocab_max",
                "the vocabulary needs at least 2 token ids".into(),
            ));
        }
        if self.probe.max_tokens == 0 {
            return Err(bad(
                "probe.max_tokens",
                "must be >= 1 (TTFT needs a token)".into(),
            ));
        }
        if let Some(q) = &self.qgrid {
            check_axes("qgrid", &q.n, &q.f, q.repeats).map_err(|(f, m)| bad(&f, m))?;
        }
        if let Some(l) = &self.load {
            l.validate(path)?;
        }
        if let Some(a) = &self.adaptive {
            a.validate(self, path)?;
        }
        Ok(())
    }
}

impl LoadPhase {
    /// The load phase's own checks (lists, token counts, output lengths).
    fn validate(&self, path: &Path) -> Result<(), PlanError> {
        let bad = |field: &str, message: String| PlanError::Invalid {
            path: path.to_path_buf(),
            field: field.to_string(),
            message,
        };
        let l = self;
        check_axes("load", &l.n, &l.f, l.repeats).map_err(|(f, m)| bad(&f, m))?;
        if l.prefill_contention.is_empty() {
            return Err(bad(
                "load.prefill_contention",
                "empty list: use [0] for no prefill contention".into(),
            ));
        }
        if l.decode_contention.is_empty() {
            return Err(bad(
                "load.decode_contention",
                "empty list: use [0] for no decode contention".into(),
            ));
        }
        if l.busy_capable.is_empty() {
            return Err(bad(
                "load.busy_capable",
                "empty list: use [false] for an idle capable destination".into(),
            ));
        }
        check_unique("load.prefill_contention", &l.prefill_contention)
            .map_err(|(f, m)| bad(&f, m))?;
        check_unique("load.decode_contention", &l.decode_contention)
            .map_err(|(f, m)| bad(&f, m))?;
        check_unique("load.busy_capable", &l.busy_capable).map_err(|(f, m)| bad(&f, m))?;
        for (field, v) in [
            ("load.prefill_prompt_tokens", l.prefill_prompt_tokens),
            ("load.short_output_tokens", l.short_output_tokens),
            ("load.long_output_tokens", l.long_output_tokens),
            ("load.decode_prompt_tokens", l.decode_prompt_tokens),
            (
                "load.busy_capable_output_tokens",
                l.busy_capable_output_tokens,
            ),
        ] {
            if v == 0 {
                return Err(bad(field, "must be > 0".into()));
            }
        }
        if l.short_output_tokens >= l.long_output_tokens {
            return Err(bad(
                "load.long_output_tokens",
                format!(
                    "must be greater than load.short_output_tokens ({} >= {})",
                    l.short_output_tokens, l.long_output_tokens
                ),
            ));
        }
        if l.busy_capable.contains(&true) && l.busy_capable_requests == 0 {
            return Err(bad(
                "load.busy_capable_requests",
                "must be > 0 when busy_capable includes true".into(),
            ));
        }
        Ok(())
    }
}

fn check_axes(phase: &str, n: &[u64], f: &[f64], repeats: u32) -> Result<(), (String, String)> {
    if n.is_empty() {
        return Err((
            format!("{phase}.n"),
            "empty grid: list at least one prompt length".into(),
        ));
    }
    if f.is_empty() {
        return Err((
            format!("{phase}.f"),
            "empty grid: list at least one cached fraction (0.0 for none)".into(),
        ));
    }
    for (i, &v) in n.iter().enumerate() {
        if v == 0 {
            return Err((
                format!("{phase}.n[{i}]"),
                "prompt length must be > 0".into(),
            ));
        }
    }
    for (i, &v) in f.iter().enumerate() {
        if !v.is_finite() || !(0.0..=1.0).contains(&v) {
            return Err((
                format!("{phase}.f[{i}]"),
                format!("cached fraction {v} is outside [0, 1]"),
            ));
        }
    }
    check_unique(&format!("{phase}.n"), n)?;
    let mut sorted = f.to_vec();
    sorted.sort_by(f64::total_cmp);
    if sorted.windows(2).any(|w| w[0] == w[1]) {
        return Err((format!("{phase}.f"), "duplicate values".into()));
    }
    if repeats == 0 {
        return Err((format!("{phase}.repeats"), "must be >= 1".into()));
    }
    Ok(())
}

fn check_unique<T: PartialEq + std::fmt::Debug>(
    field: &str,
    values: &[T],
) -> Result<(), (String, String)> {
    for (i, v) in values.iter().enumerate() {
        if values[..i].contains(v) {
            return Err((field.to_string(), format!("duplicate value {v:?}")));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Plan, PlanError> {
        let p = Path::new("t.toml");
        let plan = Plan::from_toml_str(text, p)?;
        plan.validate(p)?;
        Ok(plan)
    }

    const MIN: &str = "seed = 1\n[qgrid]\nn = [64]\nf = [0.0, 0.5]\nrepeats = 2\n";

    #[test]
    fn minimal_plan_gets_defaults() {
        let plan = parse(MIN).unwrap();
        assert_eq!(plan.models.efficient, "efficient");
        assert_eq!(plan.target.retries(), 2);
        assert_eq!(plan.probe.max_tokens, 4);
        assert!(plan.load.is_none());
    }

    #[test]
    fn unknown_field_is_named() {
        let err = parse(&format!("{MIN}bogus = 3\n")).unwrap_err().to_string();
        assert!(err.contains("bogus"), "{err}");
        let err = parse("seed = 1\n[qgrid]\nn=[1]\nf=[0.0]\nrepeats=1\nrepeat=2\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown field `repeat`"), "{err}");
    }

    #[test]
    fn sy_evals_sim_config_is_refused_with_the_flag_to_use() {
        let err = parse(&format!("{MIN}[target]\nsim_config = \"sim.toml\"\n"))
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("plan t.toml: `target.sim_config` is not used by sy-collect: "),
            "{err}"
        );
        assert!(err.contains("--sim-config"), "{err}");
    }

    #[test]
    fn wrong_type_is_named() {
        let err = parse("seed = \"x\"\n[qgrid]\nn=[1]\nf=[0.0]\nrepeats=1\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("seed") || err.contains("integer"), "{err}");
    }

    #[test]
    fn empty_grid_and_bad_fraction() {
        let err = parse("seed=1\n[qgrid]\nn=[]\nf=[0.0]\nrepeats=1\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("qgrid.n") && err.contains("empty grid"),
            "{err}"
        );
        let err = parse("seed=1\n[qgrid]\nn=[8]\nf=[0.0, 1.5]\nrepeats=1\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("qgrid.f[1]") && err.contains("[0, 1]"),
            "{err}"
        );
        // f = 1, a full repeat, is a cell of its own.
        assert!(parse("seed=1\n[qgrid]\nn=[8]\nf=[0.0, 1.0]\nrepeats=1\n").is_ok());
        let err = parse("seed=1\n[qgrid]\nn=[8]\nf=[-0.1]\nrepeats=1\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("qgrid.f[0]"), "{err}");
    }

    #[test]
    fn no_phase_and_same_models() {
        assert!(
            parse("seed=1\n")
                .unwrap_err()
                .to_string()
                .contains("no phase")
        );
        let err = parse(&format!("{MIN}[models]\nefficient=\"a\"\ncapable=\"a\"\n"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("models.capable"), "{err}");
    }

    #[test]
    fn load_checks() {
        let base = "seed=1\n[load]\nn=[64]\nf=[0.0]\nrepeats=1\n";
        assert!(parse(base).is_ok());
        let err = parse(&format!("{base}short_output_tokens=300\n"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("long_output_tokens"), "{err}");
        let err = parse(&format!("{base}decode_contention=[]\n"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("decode_contention"), "{err}");
        let err = parse(&format!("{base}background_target=\"nobody\"\n"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("background_target") || err.contains("nobody"),
            "{err}"
        );
    }

    #[test]
    fn bad_url() {
        let err = parse(&format!("{MIN}[target]\nfrontend_url=\"ftp://x\"\n"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("target.frontend_url"), "{err}");
    }

    fn parse_on(text: &str, open_files: u64) -> Result<Plan, PlanError> {
        let p = Path::new("t.toml");
        let plan = Plan::from_toml_str(text, p)?;
        plan.validate_on(
            p,
            &Machine {
                open_files: Some(open_files),
            },
        )?;
        Ok(plan)
    }

    #[test]
    fn near_duplicate_fractions_would_share_an_id() {
        let err = parse("seed=1\n[load]\nn=[64]\nf=[0.0, 0.0004]\nrepeats=1\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("t.toml") && err.contains("load.f[1]") && err.contains("f0.000"),
            "{err}"
        );
        assert!(parse("seed=1\n[load]\nn=[64]\nf=[0.0, 0.001]\nrepeats=1\n").is_ok());
    }

    #[test]
    fn cost_bounds_name_the_field() {
        for (text, field) in [
            (
                "seed=1\n[qgrid]\nn=[64]\nf=[0.0]\nrepeats=1000000000\n",
                "qgrid.repeats",
            ),
            (
                "seed=1\n[qgrid]\nn=[64]\nf=[0.0]\nrepeats=1\n[probe]\nmax_tokens=4000000000\n",
                "probe.max_tokens",
            ),
            (
                "seed=1\n[load]\nn=[64]\nf=[0.0]\nrepeats=1\nprefill_contention=[100000]\n",
                "load.prefill_contention[0]",
            ),
            (
                "seed=1\n[qgrid]\nn=[99999999999]\nf=[0.0]\nrepeats=1\n",
                "qgrid.n[0]",
            ),
            (
                "seed=1\n[qgrid]\nn=[64]\nf=[0.0]\nrepeats=1\n[probe]\nsettle_ms=99999999999\n",
                "probe.settle_ms",
            ),
        ] {
            let err = parse(text).unwrap_err().to_string();
            assert!(
                err.contains(field) && err.contains("t.toml"),
                "{field}: {err}"
            );
        }
    }

    #[test]
    fn background_streams_are_bounded_by_the_open_file_limit() {
        let text = "seed=1\n[load]\nn=[64]\nf=[0.0]\nrepeats=1\nprefill_contention=[0, 400]\n";
        let err = parse_on(text, 512).unwrap_err().to_string();
        assert!(
            err.contains("load.prefill_contention") && err.contains("RLIMIT_NOFILE"),
            "{err}"
        );
        assert!(parse_on(text, 4096).is_ok());
    }

    #[test]
    fn tokens_in_flight_are_bounded() {
        let err = parse(
            "seed=1\n[load]\nn=[64]\nf=[0.0]\nrepeats=1\nprefill_contention=[4000]\nprefill_prompt_tokens=1000000\n",
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("load.prefill_prompt_tokens"), "{err}");
    }

    #[test]
    fn largest_prompt_covers_background() {
        let plan = parse(
            "seed=1\n[load]\nn=[64]\nf=[0.0]\nrepeats=1\nprefill_contention=[0,2]\nprefill_prompt_tokens=5000\n",
        )
        .unwrap();
        assert_eq!(plan.largest_prompt(), (5000, "load.prefill_prompt_tokens"));
    }
}
