//! # Adaptive collection (`sy-collect --adaptive`, the plan's `[adaptive]` section)
//!
//! A fixed plan measures every condition of its grid the same number of times, whether the
//! answer is already clear or not. An adaptive collection measures the `[load]` grid in
//! **rounds** and stops as soon as the answer to the calibration's question — does the rule beat
//! Stage? — is known:
//!
//! 1. **Round 0** runs the whole `[qgrid]` phase and the first `first_round_conditions` load
//!    conditions; these only fit the rule.
//! 2. **Every later round** draws the next `round_conditions` conditions of a seeded random order
//!    of the grid ([`design::draw_order`]: any prefix is a simple random sample of it), each with
//!    `repeats` repeats, plus `refine_units` extra repeats for the conditions whose measured
//!    advantage is least certain near the margin ([`design::uncertain_first`]).
//! 3. **After every round** the records so far are refitted and re-decided with the calibration's
//!    library code ([`decide`]), each round's conditions judged by the rule of the rounds before
//!    it, and the stopping rule — an anytime-valid confidence sequence
//!    ([`sy_stats::sequential`]) — gives a verdict: **gain** or **loss** (the change versus
//!    Stage excludes zero), **no useful gain** (it lies within ±ε), or **open**. The collection
//!    stops at the first verdict, or when the budget (`budget_units`, default the fixed plan's
//!    load units) or the grid is spent: then the question is open.
//!
//! Each round is one session of an ordinary run ([`crate::run::run_selected`] over the units
//! drawn so far), ending with the run's files written and its manifest complete for those units:
//! Ctrl-C between rounds (or in one) leaves a valid run, and `--adaptive --resume` continues
//! from `adaptive.json` ([`state`]), redoing an interrupted round's missing units. `sy-fit`,
//! `sy-margin` and `sy-select` then run on the run directory exactly as for a fixed plan.

pub mod decide;
pub mod design;
pub mod error;
pub mod range;
pub mod spec;
pub mod state;

pub use error::AdaptiveError;
pub use range::{AdaptiveRange, DryRunReport, dry_run_range};
pub use spec::{AdaptiveSpec, AdaptiveSpecExt};
pub use state::{ADAPTIVE_FILE, AdaptiveFile, AdaptiveFileError, StopReason};

use sy_stats::sequential::Verdict;

use crate::plan::LoadedPlan;
use crate::results;
use crate::run::{RunOptions, RunSummary, run_selected};
use crate::schedule::Schedule;
use crate::{CollectError, estimate};

/// Whether Ctrl-C was pressed since [`Interrupt::listen`] (the listener lives as long as this).
struct Interrupt {
    flag: std::sync::Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Interrupt {
    fn listen() -> Interrupt {
        let flag = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let set = flag.clone();
        let task = tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                set.store(true, std::sync::atomic::Ordering::SeqCst);
            }
        });
        Interrupt { flag, task }
    }

    fn happened(&self) -> bool {
        self.flag.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Drop for Interrupt {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What an adaptive collection did.
#[derive(Debug, Clone)]
pub struct AdaptiveOutcome {
    pub file: AdaptiveFile,
    /// The last round's run (`None` when `--resume` found the collection already stopped).
    pub last: Option<RunSummary>,
    pub interrupted: bool,
}

/// The stop a verdict calls for.
fn stop_of(v: Verdict) -> Option<StopReason> {
    match v {
        Verdict::Gain => Some(StopReason::Gain),
        Verdict::Loss => Some(StopReason::Loss),
        Verdict::NoUsefulGain => Some(StopReason::NoUsefulGain),
        Verdict::Open => None,
    }
}

/// The state to continue from: a new one, or the run directory's (checked to be this plan's).
fn starting_state(
    plan: &LoadedPlan,
    opts: &RunOptions,
    spec: &AdaptiveSpec,
) -> Result<AdaptiveFile, CollectError> {
    let seed = opts.seed.unwrap_or(plan.plan.seed);
    let budget = spec.budget(&plan.plan);
    if !opts.resume {
        return Ok(state::start(&plan.sha256, seed, spec, budget));
    }
    match AdaptiveFile::read(&opts.run_dir).map_err(AdaptiveError::from)? {
        None => Ok(state::start(&plan.sha256, seed, spec, budget)),
        Some(f) if f.plan_sha256 != plan.sha256 || opts.seed.is_some_and(|s| s != f.seed) => {
            Err(AdaptiveError::OtherPlan {
                path: opts.run_dir.join(ADAPTIVE_FILE),
                found: format!("{} seed {}", short(&f.plan_sha256), f.seed),
                expected: format!("{} seed {seed}", short(&plan.sha256)),
            }
            .into())
        }
        Some(f) => Ok(f),
    }
}

fn short(sha: &str) -> &str {
    &sha[..sha.len().min(12)]
}

/// Plans the next round into `state` (the refinement from the records so far); `false` when
/// nothing is left to draw within the budget (the state then says so).
fn plan_next_round(
    state: &mut AdaptiveFile,
    plan: &LoadedPlan,
    order: &[String],
    records: &[sy_records::Record],
) -> bool {
    let spec = state.spec.clone();
    let units_left = state.budget_units.saturating_sub(state.planned_units());
    // The GPU-time budget, when there is one, in the load units its rest pays for.
    let budget_left =
        match design::gpu_affordable_units(spec.budget_gpu_seconds, state.spent.as_ref()) {
            Some(paid) => units_left.min(paid),
            None => units_left,
        };
    let load_repeats = plan.plan.load.as_ref().map_or(0, |l| l.repeats);
    let refine = match state.looks.last().and_then(|l| l.margin_cache_ms) {
        Some(margin) if spec.refine_units > 0 => design::uncertain_first(
            &decide::advantages(records, &state.rounds, spec.repeats),
            margin,
            load_repeats,
            spec.refine_units as usize,
        ),
        _ => Vec::new(),
    };
    let round = u32::try_from(state.rounds.len()).unwrap_or(u32::MAX);
    match design::next_round(round, order, state.drawn(), &spec, budget_left, refine) {
        Some(r) => {
            state.rounds.push(r);
            true
        }
        None => {
            state.stopped = Some(StopReason::Budget);
            false
        }
    }
}

/// Runs (or resumes) an adaptive collection of `plan` (which must have an `[adaptive]`
/// section). Must be called inside a tokio runtime.
pub async fn run_adaptive(
    plan: LoadedPlan,
    opts: RunOptions,
) -> Result<AdaptiveOutcome, CollectError> {
    let Some(spec) = plan.plan.adaptive.clone() else {
        return Err(AdaptiveError::NoSection {
            path: plan.path.clone(),
        }
        .into());
    };
    std::fs::create_dir_all(&opts.run_dir).map_err(|source| AdaptiveError::RunDir {
        path: opts.run_dir.clone(),
        source,
    })?;
    sy_rundir::check_output_target(&opts.run_dir.join(ADAPTIVE_FILE))?;
    let mut state = starting_state(&plan, &opts, &spec)?;
    let mut seeded = plan.plan.clone();
    seeded.seed = state.seed;
    let schedule = Schedule::from_plan(&seeded);
    let order = design::draw_order(&schedule, state.seed);
    let mut last = None;
    let mut sessions = 0u32;
    // Ctrl-C between rounds (while a look refits, or before the next session has its own
    // handler) ends the collection after the current step, with its files written.
    let between = Interrupt::listen();
    while state.stopped.is_none() {
        if between.happened() {
            state.write(&opts.run_dir).map_err(AdaptiveError::from)?;
            return Ok(AdaptiveOutcome {
                file: state,
                last,
                interrupted: true,
            });
        }
        if state.looks.len() == state.rounds.len() {
            let records = results::read_all(&opts.run_dir)?;
            let more = plan_next_round(&mut state, &plan, &order, &records);
            state.write(&opts.run_dir).map_err(AdaptiveError::from)?;
            if !more {
                break;
            }
        }
        let units = design::planned_units(&schedule, &state.rounds, spec.repeats);
        let round_opts = RunOptions {
            // The first session of a new run starts it; every later one continues it.
            resume: opts.resume || sessions > 0,
            // The target is checked once per invocation.
            preflight: if sessions == 0 {
                opts.preflight.clone()
            } else {
                None
            },
            ..opts.clone()
        };
        let summary = run_selected(plan.clone(), round_opts, Some(&units)).await?;
        sessions += 1;
        let interrupted = summary.interrupted;
        let gpus = summary
            .gpus
            .or(state.spent.as_ref().map(estimate::GpuCount::from))
            .unwrap_or_else(|| {
                tracing::warn!(
                    "adaptive: the selection service lists no workers: GPU time counted as wall \
                     time × 1"
                );
                estimate::GpuCount {
                    gpus: 1,
                    per_rank_known: false,
                }
            });
        state.spent = Some(state::spent(&summary.manifest, gpus));
        last = Some(summary);
        if interrupted {
            state.write(&opts.run_dir).map_err(AdaptiveError::from)?;
            return Ok(AdaptiveOutcome {
                file: state,
                last,
                interrupted: true,
            });
        }
        let records = results::read_all(&opts.run_dir)?;
        let look = decide::look(&records, &state.rounds, &spec, state.seed)?;
        tracing::info!(
            "adaptive: round {} done: {} conditions judged, verdict {}",
            look.round,
            look.judged_conditions,
            look.verdict.as_str()
        );
        state.stopped = stop_of(look.verdict);
        state.looks.push(look);
        state.write(&opts.run_dir).map_err(AdaptiveError::from)?;
    }
    Ok(AdaptiveOutcome {
        file: state,
        last,
        interrupted: false,
    })
}
