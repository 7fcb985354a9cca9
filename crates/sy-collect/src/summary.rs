//! What a run measured, per phase and model: TTFT p50/p90/p99 of the successful probes, probe
//! and failure counts by class, background requests and failures, time spent and rate.
//!
//! Probe figures come from every record of the run (all sessions). Time and background figures
//! are accumulated per phase in the manifest ([`PhaseTime`]) by every session, so a resumed
//! run reports the whole run, not only its last session.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;
use sy_records::{Record, Status};
use sy_rundir::artifact::manifest::{KVsCached, PhaseTime, SummaryRow};

/// The background traffic counted in `stats` so far (subtract two of these for a delta).
pub fn phase_background(stats: &sy_drive::Stats) -> PhaseTime {
    PhaseTime {
        background_requests: stats
            .background_requests
            .load(std::sync::atomic::Ordering::Relaxed),
        background_errors: stats
            .background_errors
            .lock()
            .map(|m| m.clone())
            .unwrap_or_default(),
        ..PhaseTime::default()
    }
}

/// One probe's K against its engine's cached tokens: defined with the data-quality check, which
/// judges the same comparison.
pub use sy_records::check::{KCached, k_vs_cached};

fn tally_k_vs_cached(recs: &[&Record]) -> KVsCached {
    let mut t = KVsCached::default();
    for r in recs.iter().filter(|r| r.status == Status::Ok) {
        let (Some(k), Some(cached)) = (r.observed.k, r.cached_tokens) else {
            continue;
        };
        let n = r.observed.n.or(r.prompt_tokens).unwrap_or(r.planned_n);
        t.checked += 1;
        match k_vs_cached(n, k, cached) {
            KCached::Equal => t.equal += 1,
            KCached::FullHitRecomputed => t.full_hit_recomputed += 1,
            KCached::Mismatch => t.mismatch += 1,
        }
    }
    t
}

/// The JSON name of an error class (its `Debug` name if it has none).
pub(crate) fn class_name<T: Serialize + std::fmt::Debug>(c: &T) -> String {
    serde_json::to_value(c)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| format!("{c:?}"))
}

/// The table: one row per (phase, model) present in `records`, phases in run order.
pub fn summarize(records: &[Record], phases: &BTreeMap<String, PhaseTime>) -> Vec<SummaryRow> {
    let mut groups: BTreeMap<(u8, String, String), Vec<&Record>> = BTreeMap::new();
    for r in records {
        let order = match r.phase {
            sy_records::Phase::Qgrid => 0,
            sy_records::Phase::Load => 1,
        };
        groups
            .entry((order, r.phase.as_str().to_string(), r.model.clone()))
            .or_default()
            .push(r);
    }
    let phase_probes = |phase: &str| -> u64 {
        groups
            .iter()
            .filter(|((_, p, _), _)| p == phase)
            .map(|(_, v)| v.len() as u64)
            .sum()
    };
    let mut rows = Vec::new();
    for ((_, phase, model), recs) in &groups {
        let mut ttft: Vec<f64> = recs
            .iter()
            .filter(|r| r.status == Status::Ok)
            .filter_map(|r| r.ttft_ms)
            .filter(|t| t.is_finite())
            .collect();
        ttft.sort_by(f64::total_cmp);
        let q = |p: f64| sy_selector::quantile_sorted(&ttft, p);
        let mut failures = BTreeMap::new();
        for r in recs.iter().filter(|r| r.status == Status::Error) {
            let name = r
                .error_class
                .as_ref()
                .map_or_else(|| "unclassified".to_string(), class_name);
            *failures.entry(name).or_default() += 1;
        }
        let t = phases.get(phase).cloned().unwrap_or_default();
        let probes_all = phase_probes(phase);
        rows.push(SummaryRow {
            phase: phase.clone(),
            model: model.clone(),
            probes: recs.len() as u64,
            ok: recs.iter().filter(|r| r.status == Status::Ok).count() as u64,
            ttft_p50_ms: q(0.5),
            ttft_p90_ms: q(0.9),
            ttft_p99_ms: q(0.99),
            failures,
            phase_background_requests: t.background_requests,
            phase_background_failures: t.background_errors.values().sum(),
            phase_seconds: t.seconds,
            phase_probes_per_s: (t.seconds > 0.0).then(|| probes_all as f64 / t.seconds),
            k_vs_cached: tally_k_vs_cached(recs),
        });
    }
    rows
}

fn ms(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.1}"))
}

/// The table as text (what `sy-collect` prints at the end of a run).
pub fn render(rows: &[SummaryRow]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<6} {:<10} {:>7} {:>9} {:>9} {:>9} {:>9} {:<22} {:>13} {:>8} {:>9}",
        "phase",
        "model",
        "probes",
        "ok",
        "ttft p50",
        "p90",
        "p99 ms",
        "failures",
        "bg req/fail",
        "phase s",
        "probes/s"
    );
    for r in rows {
        let failures = if r.failures.is_empty() {
            "0".to_string()
        } else {
            r.failures
                .iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let _ = writeln!(
            s,
            "{:<6} {:<10} {:>7} {:>9} {:>9} {:>9} {:>9} {:<22} {:>13} {:>8.1} {:>9}",
            r.phase,
            r.model,
            r.probes,
            r.ok,
            ms(r.ttft_p50_ms),
            ms(r.ttft_p90_ms),
            ms(r.ttft_p99_ms),
            failures,
            format!(
                "{}/{}",
                r.phase_background_requests, r.phase_background_failures
            ),
            r.phase_seconds,
            r.phase_probes_per_s
                .map_or_else(|| "-".into(), |v| format!("{v:.1}"))
        );
    }
    for r in rows {
        let t = r.k_vs_cached;
        if t.full_hit_recomputed + t.mismatch > 0 {
            let _ = writeln!(
                s,
                "{} {}: K vs the engine's cached tokens over {} probes: {} equal, {} full-prompt hits \
                 with the last block recomputed, {} other differences",
                r.phase, r.model, t.checked, t.equal, t.full_hit_recomputed, t.mismatch
            );
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use sy_records::synth;

    #[test]
    fn k_against_cached_tokens() {
        // A partial hit: the engine reuses exactly the router's blocks.
        assert_eq!(k_vs_cached(512, 256, 256), KCached::Equal);
        // A block-aligned full repeat: vLLM recomputes the block holding the last token.
        assert_eq!(k_vs_cached(512, 512, 480), KCached::FullHitRecomputed);
        // Not aligned: the last partial block was never a hit, so K < N and they agree.
        assert_eq!(k_vs_cached(500, 480, 480), KCached::Equal);
        // The engine holds less than the router believes with K < N: a real disagreement.
        assert_eq!(k_vs_cached(512, 256, 224), KCached::Mismatch);
        assert_eq!(k_vs_cached(512, 256, 288), KCached::Mismatch);
    }

    #[test]
    fn the_summary_tallies_k_against_cached_tokens() {
        let mut recs = synth::generate(&synth::SynthSpec {
            conditions: 2,
            repeats: 1,
            ..synth::SynthSpec::default()
        });
        recs.retain(|r| r.status == Status::Ok);
        for r in &mut recs {
            r.observed.n = Some(64);
            r.observed.k = Some(32);
            r.cached_tokens = Some(32);
        }
        recs[0].observed.k = Some(64);
        recs[0].cached_tokens = Some(32);
        let rows = summarize(&recs, &BTreeMap::new());
        let total = rows.iter().fold(KVsCached::default(), |mut a, r| {
            a.checked += r.k_vs_cached.checked;
            a.equal += r.k_vs_cached.equal;
            a.full_hit_recomputed += r.k_vs_cached.full_hit_recomputed;
            a.mismatch += r.k_vs_cached.mismatch;
            a
        });
        assert_eq!(total.checked, recs.len() as u64);
        assert_eq!(total.full_hit_recomputed, 1);
        assert_eq!(total.equal, recs.len() as u64 - 1);
        assert_eq!(total.mismatch, 0);
        assert!(
            render(&rows).contains("1 full-prompt hits"),
            "{}",
            render(&rows)
        );
    }

    #[test]
    fn rows_per_phase_and_model_with_percentiles_and_failures() {
        let mut recs = synth::generate(&synth::SynthSpec {
            conditions: 4,
            repeats: 2,
            ..synth::SynthSpec::default()
        });
        let ok_eff: Vec<f64> = {
            let mut v: Vec<f64> = recs
                .iter()
                .filter(|r| r.status == Status::Ok && r.model == recs[0].model)
                .filter(|r| r.phase == recs[0].phase)
                .filter_map(|r| r.ttft_ms)
                .collect();
            v.sort_by(f64::total_cmp);
            v
        };
        recs[0].status = Status::Error;
        recs[0].error_class = Some(sy_records::ErrorClass::Timeout);
        let mut phases = BTreeMap::new();
        phases.insert(
            recs[0].phase.as_str().to_string(),
            PhaseTime {
                seconds: 2.0,
                units: 10,
                background_requests: 7,
                background_errors: BTreeMap::from([("http5xx".into(), 3)]),
            },
        );
        let rows = summarize(&recs, &phases);
        let row = rows
            .iter()
            .find(|r| r.model == recs[0].model && r.phase == recs[0].phase.as_str())
            .unwrap();
        assert_eq!(row.failures.get("timeout"), Some(&1));
        assert_eq!(row.ok + 1, row.probes);
        assert!(row.ttft_p50_ms.unwrap() >= ok_eff[0]);
        assert!(row.ttft_p99_ms.unwrap() <= *ok_eff.last().unwrap());
        assert!(row.ttft_p50_ms <= row.ttft_p90_ms && row.ttft_p90_ms <= row.ttft_p99_ms);
        assert_eq!(
            (row.phase_background_requests, row.phase_background_failures),
            (7, 3)
        );
        let all: u64 = rows
            .iter()
            .filter(|r| r.phase == row.phase)
            .map(|r| r.probes)
            .sum();
        assert_eq!(row.phase_probes_per_s, Some(all as f64 / 2.0));
        let text = render(&rows);
        assert!(text.contains("timeout 1"), "{text}");
        assert!(text.contains("7/3"), "{text}");
    }
}
