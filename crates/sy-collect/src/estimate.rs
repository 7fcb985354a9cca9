//! How long a plan takes, and how much GPU time it occupies (`--dry-run`).
//!
//! Without a target (`--dry-run` alone) the estimate uses built-in speeds ([`unit_cost_seconds`]:
//! the Dynamo mocker at speedup 1), which can be several times off on another deployment. With
//! a target (`--dry-run --target …`) a short **pilot** runs a few of the plan's own units on it
//! and the estimate is built from what they took:
//!
//! - qgrid: the units with the smallest and the largest prompt (uncached) give a per-token slope
//!   `s` and a fixed cost per unit (with its two settle times: each Q-grid probe waits one); a
//!   primed unit gives the extra cost of priming (one more request);
//! - load: one unit per background shape (prefill contention, decode contention and length,
//!   busy capable) — the one with the largest prompt — gives that shape's fixed cost (its
//!   warm-up, the background requests' effect), and other prompt sizes move by the slope `s`.
//!
//! A unit's estimate is `c_group + s·N + [primed > 0]·prime + [load unit primed]·settle` (a
//! load unit waits `settle_ms` only after a priming; a Q-grid unit's two waits are in `c_qgrid`).
//! The pilot's records are thrown away; it uses its own prompts (no cache hit for the run).
//! GPU time is the phase's duration times the GPU workers (data-parallel ranks) serving the two
//! models: the calibration holds the whole deployment.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;
use sy_drive::{Driver, PromptFactory};

use crate::plan::Plan;
use crate::probe::UnitRunner;
use crate::schedule::{Condition, Schedule, Unit};

/// Microseconds per uncached prompt token assumed without a pilot (the Dynamo mocker at
/// speedup 1 measured about 33 µs/token; real GPUs are usually faster).
pub const EST_US_PER_TOKEN: f64 = 33.0;
/// Fixed cost assumed per request without a pilot (observation, reservation, round trips).
pub const EST_MS_PER_REQUEST: f64 = 10.0;

/// The estimate of one phase.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PhaseEstimate {
    pub units: usize,
    pub seconds: f64,
    /// `seconds` × GPU workers (data-parallel ranks) of the two models; `None` when unknown
    /// (no target asked).
    pub gpu_seconds: Option<f64>,
}

/// What the pilot measured.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Pilot {
    pub units_run: usize,
    pub seconds: f64,
    /// Seconds per uncached prompt token per unit (the slope `s`).
    pub seconds_per_token: f64,
    /// The extra fixed cost of a primed unit besides its tokens and settle times.
    pub prime_seconds: f64,
    /// Fixed cost per unit, per group (`qgrid`, or the load background shape).
    pub group_seconds: BTreeMap<String, f64>,
    /// The multiplier of `gpu_seconds`: data-parallel ranks serving the two models, times
    /// their GPUs per rank when `gpus_per_rank_known`.
    pub gpu_workers: u64,
    /// Whether every worker's GPUs per rank (its tensor-parallel size) came from the
    /// `--describe` file; without it `gpu_seconds` is rank time, not GPU time.
    pub gpus_per_rank_known: bool,
}

/// The GPUs a run holds: the data-parallel ranks of every worker serving the two models, times
/// each worker's GPUs per rank when the `--describe` file gives them for every worker (else the
/// count is ranks, and `per_rank_known` says so). What a run's GPU time multiplies its wall time
/// by (the adaptive GPU-time budget).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct GpuCount {
    pub gpus: u64,
    pub per_rank_known: bool,
}

impl GpuCount {
    /// From the selection service's worker list (`per_rank`: GPUs per rank by worker id, from
    /// the description; `all_described`: every described worker gives its GPUs per rank).
    pub fn of_workers(
        workers: &[sy_wire::selection::WorkerRecord],
        plan: &Plan,
        per_rank: &BTreeMap<u64, u32>,
        all_described: bool,
    ) -> GpuCount {
        let models = [&plan.models.efficient, &plan.models.capable];
        let served: Vec<_> = (workers.iter())
            .filter(|w| models.contains(&&w.model_name))
            .collect();
        let known = all_described
            && !served.is_empty()
            && served.iter().all(|w| per_rank.contains_key(&w.worker_id));
        let gpus = (served.iter())
            .map(|w| {
                let ranks = u64::from(w.data_parallel_size.unwrap_or(1).max(1));
                let each = if known {
                    per_rank.get(&w.worker_id).copied().unwrap_or(1)
                } else {
                    1
                };
                ranks * u64::from(each)
            })
            .sum();
        GpuCount {
            gpus,
            per_rank_known: known,
        }
    }

    /// Asks the target (the selection service's workers and the description's instance ids);
    /// `None` when the selection service does not list its workers.
    pub async fn of_target(
        http: &reqwest::Client,
        driver: &Driver,
        plan: &Plan,
        describe: Option<&crate::deployment::LoadedDescription>,
    ) -> Option<GpuCount> {
        let workers = driver.selection.workers().await.ok()?;
        let (per_rank, all_described) = match describe {
            Some(d) => {
                let (ids, _) = crate::deployment::resolve(http, d).await;
                let per_rank = (ids.into_iter())
                    .map(|(id, (i, _))| {
                        let each = d.description.workers.get(i).and_then(|w| w.gpus_per_rank);
                        (id, each.unwrap_or(1))
                    })
                    .collect();
                let all = (d.description.workers.iter()).all(|w| w.gpus_per_rank.is_some());
                (per_rank, all)
            }
            None => (BTreeMap::new(), false),
        };
        Some(GpuCount::of_workers(
            &workers,
            plan,
            &per_rank,
            all_described,
        ))
    }
}

/// The plan's size and an estimate of its duration (`--dry-run`).
#[derive(Debug, Clone, Serialize)]
pub struct DryRun {
    pub conditions: usize,
    pub units: usize,
    pub qgrid_units: usize,
    pub load_units: usize,
    /// Probe requests (two per unit) plus priming requests.
    pub foreground_requests: u64,
    /// Background slots summed over units (each a closed loop of requests while its unit runs).
    pub background_slots: u64,
    pub estimated_seconds: f64,
    pub phases: BTreeMap<String, PhaseEstimate>,
    /// `pilot` (measured on the target) or `built-in speeds`.
    pub basis: String,
    pub pilot: Option<Pilot>,
    pub assumptions: String,
    /// Whether `gpu_seconds` is GPU time (GPUs per rank known from `--describe`) or rank time.
    pub gpus_per_rank_known: bool,
}

/// A unit's cost in seconds from built-in speeds (no pilot); also what the progress bar's ETA
/// weighs units by.
pub fn unit_cost_seconds(plan: &Plan, c: &Condition) -> f64 {
    let primed = c.primed_tokens();
    let slots = crate::background::slots_for(c, "e", "c").len();
    let mut ms = EST_MS_PER_REQUEST + (c.planned_n - primed) as f64 * EST_US_PER_TOKEN / 1e3;
    ms += crate::probe::quiet_waits(c) as f64 * plan.probe.settle_ms as f64;
    if primed > 0 {
        ms += EST_MS_PER_REQUEST + primed as f64 * EST_US_PER_TOKEN / 1e3;
    }
    if slots > 0 {
        ms += plan.load.as_ref().map_or(0, |l| l.warmup_ms) as f64;
        ms += c.background.prefill_prompt_tokens as f64 * EST_US_PER_TOKEN / 1e3;
    }
    ms / 1e3
}

/// The load background shape a unit belongs to (its pilot group).
pub fn group_of(c: &Condition) -> String {
    match c.phase {
        sy_records::Phase::Qgrid => "qgrid".into(),
        sy_records::Phase::Load => {
            let b = &c.background;
            format!(
                "load pc{}x{} dc{}x{} busy{}",
                b.prefill_requests,
                b.prefill_prompt_tokens,
                b.decode_requests,
                b.decode_output_tokens,
                b.busy_capable
            )
        }
    }
}

/// The estimate of one unit from a pilot.
pub fn unit_seconds(plan: &Plan, c: &Condition, pilot: &Pilot) -> f64 {
    let primed = c.primed_tokens();
    let s = pilot.seconds_per_token;
    let base = pilot
        .group_seconds
        .get(&group_of(c))
        .or_else(|| pilot.group_seconds.get("qgrid"))
        .copied()
        .unwrap_or(0.0);
    let mut t = base + s * c.planned_n as f64;
    if primed > 0 {
        t += pilot.prime_seconds;
    }
    if c.phase == sy_records::Phase::Load {
        t += crate::probe::quiet_waits(c) as f64 * plan.probe.settle_ms as f64 / 1e3;
    }
    t.max(0.0)
}

/// The plan's size and its estimate: from `pilot` when given, else from built-in speeds.
pub fn dry_run(plan: &Plan, pilot: Option<Pilot>) -> DryRun {
    let s = Schedule::from_plan(plan);
    let mut bg_slots = 0u64;
    let mut phases: BTreeMap<String, PhaseEstimate> = BTreeMap::new();
    for u in &s.units {
        let c = &s.conditions[u.condition];
        bg_slots += crate::background::slots_for(c, "e", "c").len() as u64;
        let secs = match &pilot {
            Some(p) => unit_seconds(plan, c, p),
            None => unit_cost_seconds(plan, c),
        };
        let e = phases.entry(c.phase.as_str().to_string()).or_default();
        e.units += 1;
        e.seconds += secs;
    }
    if let Some(p) = &pilot {
        for e in phases.values_mut() {
            e.gpu_seconds = Some(e.seconds * p.gpu_workers as f64);
        }
    }
    let count = |ph: &str| phases.get(ph).map_or(0, |e| e.units);
    let assumptions = match &pilot {
        Some(p) => format!(
            "measured by a pilot of {} units ({:.1} s) on the target: {:.1} µs per uncached \
             prompt token per unit, {:.0} ms extra per primed unit, fixed cost per background \
             shape; {}; no retries",
            p.units_run,
            p.seconds,
            p.seconds_per_token * 1e6,
            p.prime_seconds * 1e3,
            if p.gpus_per_rank_known {
                format!(
                    "GPU time = duration × {} GPUs (each worker's data-parallel ranks × its GPUs \
                     per rank, from --describe)",
                    p.gpu_workers
                )
            } else {
                format!(
                    "rank time = duration × {} data-parallel ranks of the two models: it ignores \
                     tensor parallelism, so multiply by the GPUs per rank (or give each worker's \
                     gpus_per_rank in a --describe file) for GPU time",
                    p.gpu_workers
                )
            }
        ),
        None => format!(
            "built-in speeds, not this deployment's: {EST_MS_PER_REQUEST} ms per request plus \
             {EST_US_PER_TOKEN} µs per uncached prompt token (the Dynamo mocker at speedup 1), \
             plus the plan's settle and warm-up times; no retries. Add --target (and URLs) to \
             measure a pilot on the deployment"
        ),
    };
    DryRun {
        conditions: s.conditions.len(),
        units: s.units.len(),
        qgrid_units: count("qgrid"),
        load_units: count("load"),
        foreground_requests: s.foreground_requests(),
        background_slots: bg_slots,
        estimated_seconds: phases.values().map(|e| e.seconds).sum(),
        phases,
        basis: if pilot.is_some() {
            "pilot".into()
        } else {
            "built-in speeds".into()
        },
        gpus_per_rank_known: pilot.as_ref().is_some_and(|p| p.gpus_per_rank_known),
        pilot,
        assumptions,
    }
}

/// The units the pilot runs: qgrid's smallest and largest uncached prompt and its largest
/// primed one; per load shape the unit with the largest prompt (uncached when there is one).
pub fn pilot_units(schedule: &Schedule) -> Vec<Unit> {
    let mut picks: BTreeMap<String, Unit> = BTreeMap::new();
    let cond = |u: &Unit| &schedule.conditions[u.condition];
    for u in schedule.units.iter().filter(|u| u.repeat == 0) {
        let c = cond(u);
        let key = match c.phase {
            sy_records::Phase::Qgrid if c.primed_tokens() > 0 => "qgrid primed".to_string(),
            sy_records::Phase::Qgrid => "qgrid".to_string(),
            sy_records::Phase::Load => group_of(c),
        };
        let better = |old: &Unit| {
            let o = cond(old);
            (c.planned_n, std::cmp::Reverse(c.primed_tokens()))
                > (o.planned_n, std::cmp::Reverse(o.primed_tokens()))
        };
        match picks.get(&key) {
            Some(old) if !better(old) => {}
            _ => {
                picks.insert(key.clone(), *u);
            }
        }
        if key == "qgrid" {
            // And the smallest uncached one.
            let k = "qgrid small".to_string();
            let smaller = picks
                .get(&k)
                .is_none_or(|o| c.planned_n < cond(o).planned_n);
            if smaller {
                picks.insert(k, *u);
            }
        }
    }
    picks.into_values().collect()
}

/// Runs the pilot units on the target and derives the cost model.
pub async fn pilot(plan: &Plan, driver: Arc<Driver>, gpu_workers: u64) -> Pilot {
    let schedule = Schedule::from_plan(plan);
    let units = pilot_units(&schedule);
    let runner = UnitRunner {
        driver: driver.clone(),
        prompts: Arc::new(PromptFactory::new(
            plan.seed,
            &sy_drive::new_invocation_id(),
            &plan.prompt,
        )),
        plan: Arc::new(plan.clone()),
        run_id: "pilot".into(),
    };
    let t0 = Instant::now();
    let mut measured: Vec<(&Condition, f64)> = Vec::new();
    for u in &units {
        let c = &schedule.conditions[u.condition];
        let t = Instant::now();
        let _ = runner.run(c, u.repeat, 1).await;
        measured.push((c, t.elapsed().as_secs_f64()));
    }
    fit_pilot(
        plan,
        &measured,
        units.len(),
        t0.elapsed().as_secs_f64(),
        gpu_workers,
    )
}

/// The cost model from measured unit times.
pub fn fit_pilot(
    plan: &Plan,
    measured: &[(&Condition, f64)],
    units_run: usize,
    seconds: f64,
    gpu_workers: u64,
) -> Pilot {
    let settle = plan.probe.settle_ms as f64 / 1e3;
    let uncached_q: Vec<(u64, f64)> = measured
        .iter()
        .filter(|(c, _)| c.phase == sy_records::Phase::Qgrid && c.primed_tokens() == 0)
        .map(|(c, t)| (c.planned_n, *t))
        .collect();
    let lo = uncached_q.iter().min_by_key(|(n, _)| *n).copied();
    let hi = uncached_q.iter().max_by_key(|(n, _)| *n).copied();
    let slope = match (lo, hi) {
        (Some((n1, t1)), Some((n2, t2))) if n2 > n1 => ((t2 - t1) / (n2 - n1) as f64).max(0.0),
        _ => EST_US_PER_TOKEN / 1e6,
    };
    let mut group_seconds = BTreeMap::new();
    if let Some((n, t)) = lo {
        group_seconds.insert("qgrid".to_string(), (t - slope * n as f64).max(0.0));
    }
    let q_base = group_seconds.get("qgrid").copied().unwrap_or(0.0);
    let mut prime = 0.0;
    for (c, t) in measured {
        match c.phase {
            sy_records::Phase::Qgrid if c.primed_tokens() > 0 => {
                prime = (t - q_base - slope * c.planned_n as f64).max(0.0);
            }
            sy_records::Phase::Load => {
                let base =
                    t - slope * c.planned_n as f64 - crate::probe::quiet_waits(c) as f64 * settle;
                group_seconds.insert(group_of(c), base.max(0.0));
            }
            _ => {}
        }
    }
    // A load group's primed pick paid the priming cost too: take it back out.
    for (c, _) in measured {
        if c.phase == sy_records::Phase::Load
            && c.primed_tokens() > 0
            && let Some(b) = group_seconds.get_mut(&group_of(c))
        {
            *b = (*b - prime).max(0.0);
        }
    }
    Pilot {
        units_run,
        seconds,
        seconds_per_token: slope,
        prime_seconds: prime,
        group_seconds,
        gpu_workers,
        gpus_per_rank_known: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpus_are_the_two_models_ranks_times_their_gpus_per_rank_when_every_worker_gives_them() {
        let w = |id: u64, model: &str, dp: Option<u32>| {
            serde_json::from_value::<sy_wire::selection::WorkerRecord>(serde_json::json!({
                "worker_id": id, "model_name": model, "lifecycle": "schedulable",
                "data_parallel_size": dp,
            }))
            .unwrap()
        };
        let p = plan();
        let (e, c) = (p.models.efficient.clone(), p.models.capable.clone());
        let workers = [w(1, &e, Some(2)), w(2, &c, None), w(3, "other", Some(8))];
        let none = BTreeMap::new();
        // Ranks only: 2 + 1, the third model's worker not counted.
        assert_eq!(
            GpuCount::of_workers(&workers, &p, &none, false),
            GpuCount {
                gpus: 3,
                per_rank_known: false
            }
        );
        let per_rank: BTreeMap<u64, u32> = [(1, 4), (2, 8)].into_iter().collect();
        assert_eq!(
            GpuCount::of_workers(&workers, &p, &per_rank, true),
            GpuCount {
                gpus: 2 * 4 + 8,
                per_rank_known: true
            }
        );
        // A worker the description does not name: ranks only.
        let partial: BTreeMap<u64, u32> = [(1, 4)].into_iter().collect();
        assert_eq!(GpuCount::of_workers(&workers, &p, &partial, true).gpus, 3);
    }

    fn plan() -> Plan {
        Plan::from_toml_str(
            "seed = 1\n[probe]\nsettle_ms = 20\n[qgrid]\nn = [100, 1100]\nf = [0.0, 0.5]\nrepeats = 2\n\
             [load]\nn = [1100]\nf = [0.0]\nrepeats = 2\nprefill_contention = [0, 2]\n",
            std::path::Path::new("t.toml"),
        )
        .unwrap()
    }

    #[test]
    fn pilot_picks_few_units_and_recovers_a_linear_cost_model() {
        let p = plan();
        let s = Schedule::from_plan(&p);
        let picks = pilot_units(&s);
        // qgrid small, qgrid large, qgrid primed, two load shapes.
        assert_eq!(picks.len(), 5, "{picks:?}");
        assert!(picks.len() * 2 < s.units.len(), "{} units", s.units.len());
        // A synthetic deployment: 50 ms per unit + 0.1 ms per token, priming +30 ms, a settle
        // (20 ms) before each Q-grid probe and after a load unit's priming, load shapes + 200 ms
        // per background request.
        let truth = |c: &Condition| {
            let mut t = 0.05 + 1e-4 * c.planned_n as f64;
            if c.primed_tokens() > 0 {
                t += 0.03;
            }
            t += match c.phase {
                sy_records::Phase::Qgrid => 2.0 * 0.02,
                sy_records::Phase::Load if c.primed_tokens() > 0 => 0.02,
                sy_records::Phase::Load => 0.0,
            };
            t + 0.2 * f64::from(c.background.prefill_requests)
        };
        let measured: Vec<(&Condition, f64)> = picks
            .iter()
            .map(|u| {
                let c = &s.conditions[u.condition];
                (c, truth(c))
            })
            .collect();
        let pilot = fit_pilot(&p, &measured, picks.len(), 1.0, 4);
        assert!((pilot.seconds_per_token - 1e-4).abs() < 1e-9);
        assert!((pilot.prime_seconds - 0.03).abs() < 1e-9);
        let d = dry_run(&p, Some(pilot));
        let actual: f64 = s
            .units
            .iter()
            .map(|u| truth(&s.conditions[u.condition]))
            .sum();
        assert!(
            (d.estimated_seconds - actual).abs() < 1e-6,
            "{} vs {actual}",
            d.estimated_seconds
        );
        assert_eq!(d.basis, "pilot");
        let q = &d.phases["qgrid"];
        assert_eq!(q.gpu_seconds, Some(q.seconds * 4.0));
    }

    #[test]
    fn offline_estimate_says_it_is_not_this_deployment() {
        let d = dry_run(&plan(), None);
        assert!(d.estimated_seconds > 0.0);
        assert!(d.assumptions.contains("built-in speeds"));
        assert!(d.phases["qgrid"].gpu_seconds.is_none());
    }
}
