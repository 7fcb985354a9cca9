//! `check.json`: the data-quality verdict of a run (`sy-collect check` writes it; `sy-fit` reads
//! its bounds back). The checks themselves are `sy_records::check`.

use serde::{Deserialize, Serialize};

/// Defined with the run directory's layout.
pub use crate::layout::CHECK_SCHEMA_VERSION;

/// The bounds of the checks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckOptions {
    /// Largest median client − server TTFT per (phase, model), ms. On loopback the two agree
    /// within a few ms; a delayed-ACK stall costs about 40 ms.
    pub max_ttft_gap_ms: f64,
    /// Smallest share of ok records (per model) whose `cached_tokens` equals K.
    pub min_k_match_share: f64,
    /// Relative tolerance of the Q-grid monotonicity (a median may move against the expected
    /// direction by this fraction of the larger one)…
    pub q_rel_tolerance: f64,
    /// …plus this many ms.
    pub q_abs_tolerance_ms: f64,
    /// Largest failure share over the run.
    pub max_failure_share: f64,
    /// Largest failure share of one condition (its probes of both models).
    pub max_condition_failure_share: f64,
    /// Largest share of records whose advisory pick is another worker that saw other figures.
    /// Background load that starts and ends between observing and reserving moves some picks
    /// (28 % of the efficient load-phase records of the real-Dynamo data-parallel test); a
    /// majority means the query and the booking disagree systematically.
    pub max_pick_differs_share: f64,
    /// Largest share of probes planned uncached that report cached tokens.
    pub max_uncached_hit_share: f64,
    /// Largest share of loaded (condition, model) cells in which the background's load was not
    /// seen although it could have been (a background that finished before the probe observed
    /// it: one record per cell at one repeat, so a busy client machine misses a few). A plan
    /// whose contention cannot reach the probe's (worker, rank) fails at any share.
    pub max_unseen_load_share: f64,
    /// Largest change of a cell's mean hit rate (cached / prompt tokens) between the first and
    /// second half of its records.
    pub max_hit_rate_drift: f64,
    /// Kendall's τ between send time and TTFT from which a condition counts as saturating…
    pub saturation_tau: f64,
    /// …when its last third's median TTFT is also at least this multiple of its first third's.
    pub saturation_ratio: f64,
    /// …and at least this many ms above it (a millisecond of jitter on a 5 ms TTFT is not a
    /// queue).
    pub saturation_min_rise_ms: f64,
    /// Fewest ok records of one model in one condition for the saturation test (at least 6, so
    /// that each third holds two).
    pub saturation_min_records: usize,
}

impl Default for CheckOptions {
    fn default() -> Self {
        Self {
            max_ttft_gap_ms: 20.0,
            min_k_match_share: 0.9,
            q_rel_tolerance: 0.15,
            q_abs_tolerance_ms: 5.0,
            max_failure_share: 0.02,
            max_condition_failure_share: 0.2,
            max_pick_differs_share: 0.5,
            max_uncached_hit_share: 0.01,
            max_unseen_load_share: 0.05,
            max_hit_rate_drift: 0.15,
            saturation_tau: 0.6,
            saturation_ratio: 1.5,
            saturation_min_rise_ms: 5.0,
            saturation_min_records: 6,
        }
    }
}

/// Outcome of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Pass,
    Fail,
    /// Nothing to judge.
    Skipped,
}

/// A cell (or condition) that made a check fail, with the records concerned (or, under a check
/// that tolerates a share of such cells and passed, one it names all the same).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Offender {
    /// What the cell is, e.g. `qgrid/capable` or `condition L12 (efficient)`.
    pub cell: String,
    /// What was measured there against the bound.
    pub detail: String,
    /// `probe_id/role` of the records concerned (at most [`MAX_RECORDS_NAMED`]).
    pub records: Vec<String>,
    /// How many records are concerned in all.
    pub record_count: usize,
}

/// Records named per offender, at most.
pub const MAX_RECORDS_NAMED: usize = 10;

/// One check's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckResult {
    pub name: String,
    pub outcome: Outcome,
    /// The bound, in words.
    pub bound: String,
    /// The measured values, in words.
    pub measured: String,
    pub offenders: Vec<Offender>,
}

/// The verdict of a run (`check.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckReport {
    pub schema_version: u32,
    /// `pass` when no check failed.
    pub verdict: Outcome,
    pub records: usize,
    /// Run ids judged.
    pub run_ids: Vec<String>,
    pub options: CheckOptions,
    pub checks: Vec<CheckResult>,
}

impl CheckReport {
    pub fn passed(&self) -> bool {
        self.verdict == Outcome::Pass
    }

    /// Names of the failed checks.
    pub fn failed(&self) -> Vec<&str> {
        self.checks
            .iter()
            .filter(|c| c.outcome == Outcome::Fail)
            .map(|c| c.name.as_str())
            .collect()
    }

    /// The table printed by `sy-collect check`.
    pub fn render_text(&self) -> String {
        use std::fmt::Write as _;
        let mut s = String::new();
        for c in &self.checks {
            let tag = match c.outcome {
                Outcome::Pass => "pass",
                Outcome::Fail => "FAIL",
                Outcome::Skipped => "skip",
            };
            let _ = writeln!(
                s,
                "{tag:<5} {:<24} {} (bound: {})",
                c.name, c.measured, c.bound
            );
            for o in &c.offenders {
                let _ = writeln!(s, "        {}: {}", o.cell, o.detail);
                if !o.records.is_empty() {
                    let more = o.record_count.saturating_sub(o.records.len());
                    let _ = writeln!(
                        s,
                        "          records: {}{}",
                        o.records.join(", "),
                        if more > 0 {
                            format!(" … and {more} more")
                        } else {
                            String::new()
                        }
                    );
                }
            }
        }
        let _ = writeln!(
            s,
            "verdict: {} ({} records{})",
            if self.passed() { "PASS" } else { "FAIL" },
            self.records,
            if self.passed() {
                String::new()
            } else {
                format!("; failed: {}", self.failed().join(", "))
            }
        );
        s
    }
}
