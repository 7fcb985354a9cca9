//! The data-quality verdict of a run: whether its records can be trusted before anything is
//! fitted. `sy-collect check RUN_DIR` prints it and writes it to `check.json`; `sy-fit` refuses a
//! run that fails it unless told to accept it.
//!
//! Every check is computed from the records (and, for the end-of-run loads, the manifest), has
//! a documented bound ([`CheckOptions`], defaults in [`CheckOptions::default`]) and, when it
//! fails, names the cells and the records (`probe_id`, role) that made it fail:
//!
//! | check | fails when |
//! |---|---|
//! | `ttft_gap` | the median client − server TTFT of a (phase, model) exceeds `max_ttft_gap_ms` |
//! | `cached_tokens_match_k` | fewer than `min_k_match_share` of a model's ok records have the worker's `cached_tokens` equal to the router's K (a full-prompt hit the engine recomputes the last block of, [`k_vs_cached`], agrees) |
//! | `q_monotonic` | in the no-load grid, a model's median TTFT falls by more than the tolerance as N rises (at fixed f < 1: a full repeat computes one block whatever N) or rises as f rises (at fixed N), and every record of the faster cell is below every record of the other by more than the tolerance |
//! | `failures` | the failure share of the run exceeds `max_failure_share`, or of one condition `max_condition_failure_share` (shares by error class are reported) |
//! | `loads_zero_at_end` | the manifest says booked load remained after the run, or reservations were left |
//! | `advisory_disagreement` | the share of records whose advisory pick is another (worker, rank) that saw other K, R or P than the reserved one exceeds `max_pick_differs_share` (a tie between equally idle workers does not count) |
//! | `contention_observed` | a load condition whose background loads a model has R = 0 on every record of that model, or P = 0 where the plan runs prefill contention on it |
//! | `cache_contamination` | more than `max_uncached_hit_share` of probes planned uncached (f = 0) report cached tokens, or a cell's hit rate drifts by more than `max_hit_rate_drift` between the first and second half of its records |
//! | `over_saturation` | inside a condition, a model's TTFT rises with time: Kendall's τ between send time and TTFT ≥ `saturation_tau` and the last third's median ≥ `saturation_ratio` × the first third's and `saturation_min_rise_ms` above it |
//!
//! A check with nothing to judge (no server TTFT, no manifest, no load phase) is `skipped` and
//! does not fail the run.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
/// `check.json`'s document: defined with the run directory's artifacts.
pub use sy_rundir::artifact::check::{
    CHECK_SCHEMA_VERSION, CheckOptions, CheckReport, CheckResult, MAX_RECORDS_NAMED, Offender,
    Outcome,
};

use crate::record::{Model, Phase, Record, Status};

mod cache;
mod cells;
mod facts;
mod failures;
mod load;
mod qgrid;
mod timing;

pub use cache::*;
use cells::*;
pub use facts::*;
use failures::*;
use load::*;
use qgrid::*;
pub use timing::*;

#[cfg(test)]
mod fixture;

/// Judges `records` (one or more runs) with the manifest facts when known.
pub fn judge(records: &[Record], facts: Option<&RunFacts>, opts: &CheckOptions) -> CheckReport {
    let checks = vec![
        ttft_gap(records, opts),
        cached_matches_k(records, opts),
        q_monotonic(records, opts),
        failures(records, opts),
        loads_zero(facts),
        advisory_disagreement(records, opts),
        contention_observed(records, opts),
        cache_contamination(records, opts),
        over_saturation(records, opts),
    ];
    let verdict = if checks.iter().any(|c| c.outcome == Outcome::Fail) {
        Outcome::Fail
    } else {
        Outcome::Pass
    };
    let mut run_ids: Vec<String> = records.iter().map(|r| r.run_id.clone()).collect();
    run_ids.sort();
    run_ids.dedup();
    CheckReport {
        schema_version: CHECK_SCHEMA_VERSION,
        verdict,
        records: records.len(),
        run_ids,
        options: opts.clone(),
        checks,
    }
}

/// Judges record files or run directories (merged; the end-of-run facts are read from each run
/// directory's `manifest.json` — the run fails `loads_zero_at_end` if any of them says so).
pub fn judge_paths(
    paths: &[std::path::PathBuf],
    opts: &CheckOptions,
) -> Result<CheckReport, crate::RecordsError> {
    let loaded = crate::load_records(paths, &crate::LoadOptions::default())?;
    let mut facts: Option<RunFacts> = None;
    for p in paths.iter().filter(|p| p.is_dir()) {
        let m = sy_rundir::Artifact::Manifest.path(p);
        if !m.exists() {
            continue;
        }
        let text = std::fs::read_to_string(&m).map_err(|e| crate::RecordsError::Read {
            path: m.clone(),
            source: e.into(),
        })?;
        let v: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| crate::RecordsError::Format {
                path: m.clone(),
                source: crate::FormatError::NotManifest(e),
            })?;
        let f = RunFacts::from_manifest(&v);
        facts = Some(match facts {
            None => f,
            Some(a) => a.and(&f),
        });
    }
    Ok(judge(&loaded.records, facts.as_ref(), opts))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::fixture::*;

    #[test]
    fn a_clean_run_passes_every_check() {
        let rep = judge(&clean(), Some(&facts()), &CheckOptions::default());
        assert!(rep.passed(), "{}", rep.render_text());
        for c in &rep.checks {
            assert_eq!(
                c.outcome,
                Outcome::Pass,
                "{}: {}",
                c.name,
                rep.render_text()
            );
        }
        let back: CheckReport =
            serde_json::from_str(&serde_json::to_string(&rep).unwrap()).unwrap();
        assert_eq!(back, rep);
    }

    #[test]
    fn no_records_skips_rather_than_passes_silently() {
        let rep = judge(&[], None, &CheckOptions::default());
        assert!(
            rep.checks.iter().all(|c| c.outcome == Outcome::Skipped),
            "{}",
            rep.render_text()
        );
    }
}
