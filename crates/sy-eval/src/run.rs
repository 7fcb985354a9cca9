//! The run: load and validate the bundle, build the sessions, order the blocks, run every
//! pending block in a matched starting state, and write the comparison, the records, the
//! report and the manifest.
//!
//! Matched starting conditions: with `--target sim` every block gets a freshly started
//! simulator (same configuration and seed: empty caches, no booked load). With `--target
//! dynamo` the deployment is shared, so every block uses fresh prompts (keyed by invocation,
//! round and variant: no block can hit another block's cache), starts only once `/loads` shows
//! nothing booked, and the variants run in a seeded random (or ABBA) order per round so that
//! whatever warmth the caches keep is spread over the variants, not given to one.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rand::SeedableRng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use sy_drive::{Endpoints, Target, TargetKind};
use sy_dynamo::Cancel;
use sy_rundir::Artifact;
use sy_rundir::artifact::eval_manifest::EvalManifest;
use sy_selector::{Bundle, Variant};

use crate::block::{BlockId, BlockInputs, run_block};
use crate::compare::compare;
use crate::error::EvalError;
use crate::plan::{LoadedPlan, Order};
use crate::quiescence::quiescent;
use crate::sessions::{SessionSpec, TraceError, generate, read_trace};
use sy_rundir::artifact::comparison::Comparison;
use sy_rundir::artifact::eval_block::BlockResult;

/// The manifest file of a run directory.
pub const MANIFEST_FILE: &str = Artifact::EvalManifest.file_name();
/// Where finished blocks go.
pub const BLOCKS_DIR: &str = Artifact::EvalBlocks.file_name();
/// The comparison.
pub const COMPARISON_FILE: &str = Artifact::Comparison.file_name();
/// Every turn of every block, one JSON object per line.
pub const TURNS_FILE: &str = Artifact::EvalTurns.file_name();
/// Every session of every block.
pub const SESSIONS_FILE: &str = Artifact::EvalSessions.file_name();

/// A run directory (or a file in it) that cannot be used for this evaluation: bad input,
/// except a file that cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum RunDirError {
    #[error("cannot read {}: {source}", .path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: not a valid file of this run: {source}", .path.display())]
    NotOfThisRun {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error(
        "{} already holds an evaluation ({MANIFEST_FILE}); rerun with --resume to continue it, \
         or choose another --run-dir",
        .0.display()
    )]
    Occupied(PathBuf),
    #[error("--resume: the {what} differs from the run's ({run} vs {given})")]
    Differs {
        what: &'static str,
        run: String,
        given: String,
    },
    #[error("--resume: --seed {given} differs from the run's seed {run}")]
    OtherSeed { given: u64, run: u64 },
    #[error(
        "{}: field `{field}` is {found}, expected {expected}: this block is not one of the \
         evaluation in this run directory ({MANIFEST_FILE}); remove it to run it again",
        .path.display()
    )]
    ForeignBlock {
        path: PathBuf,
        field: &'static str,
        found: String,
        expected: String,
    },
}

impl RunDirError {
    /// Whether the caller's input is at fault (exit 2) rather than the machine (exit 1).
    pub fn is_bad_input(&self) -> bool {
        !matches!(self, RunDirError::Read { .. })
    }
}

/// How to run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub run_dir: PathBuf,
    pub bundle: PathBuf,
    pub target: TargetKind,
    pub frontend_url: Option<String>,
    pub selection_url: Option<String>,
    pub sim_config: Option<PathBuf>,
    pub resume: bool,
    pub show_progress: bool,
    pub seed: Option<u64>,
    /// An A/A check: the plan's first variant in both arms (twice the plan's rounds, half of
    /// them each arm; [`crate::compare::aa_arm`]).
    pub aa: bool,
}

/// What a finished run reports.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    pub manifest: EvalManifest,
    pub comparison: Comparison,
    pub blocks_run: usize,
    pub report: PathBuf,
}

/// The order of the blocks: per round, every variant once — a seeded random permutation, or
/// A B / B A alternating (`abba`).
pub fn block_order(
    variants: &[Variant],
    rounds: u32,
    order: Order,
    seed: u64,
) -> Vec<(u32, Variant)> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x0bde_0bde);
    let mut out = Vec::new();
    for round in 0..rounds {
        let mut vs = variants.to_vec();
        match order {
            Order::Random => vs.shuffle(&mut rng),
            Order::Abba => {
                if round % 2 == 1 {
                    vs.reverse();
                }
            }
        }
        out.extend(vs.into_iter().map(|v| (round, v)));
    }
    out
}

fn sessions_of(plan: &LoadedPlan) -> Result<Vec<SessionSpec>, EvalError> {
    let spec = &plan.plan.sessions;
    match &spec.trace {
        Some(trace) => {
            let path = plan.resolve(trace);
            let mut s = read_trace(&path)?;
            if spec.count > 0 {
                s.truncate(spec.count as usize);
            }
            crate::limits::check_sessions(&s, plan.plan.concurrency).map_err(
                |(field, message)| TraceError::Bound {
                    path: path.display().to_string(),
                    field,
                    message,
                },
            )?;
            Ok(s)
        }
        None => Ok(generate(spec, spec.count, plan.plan.seed)),
    }
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, EvalError> {
    let text = std::fs::read_to_string(path).map_err(|source| RunDirError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|source| {
        RunDirError::NotOfThisRun {
            path: path.to_path_buf(),
            source,
        }
        .into()
    })
}

/// Checks the run directory: a new run needs it free of an earlier evaluation; `--resume`
/// needs the same plan, bundle and seed.
fn check_run_dir(
    opts: &RunOptions,
    fresh: &EvalManifest,
) -> Result<Option<EvalManifest>, EvalError> {
    let path = opts.run_dir.join(MANIFEST_FILE);
    if !path.exists() {
        return Ok(None);
    }
    if !opts.resume {
        return Err(RunDirError::Occupied(opts.run_dir.clone()).into());
    }
    let prev: EvalManifest = read_json(&path)?;
    for (what, a, b) in [
        ("plan (sha256)", &prev.plan_sha256, &fresh.plan_sha256),
        (
            "bundle (content hash)",
            &prev.bundle_content_hash,
            &fresh.bundle_content_hash,
        ),
        ("target", &prev.target, &fresh.target),
    ] {
        if a != b {
            return Err(RunDirError::Differs {
                what,
                run: a.clone(),
                given: b.clone(),
            }
            .into());
        }
    }
    if prev.seed != fresh.seed {
        return Err(RunDirError::OtherSeed {
            given: fresh.seed,
            run: prev.seed,
        }
        .into());
    }
    Ok(Some(prev))
}

fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<(), EvalError> {
    sy_cli::atomic_write_json(path, value).map_err(EvalError::from)
}

/// Reads block file `path`, refusing (bad input) a block of another evaluation or of another
/// place in this one: a block is reused only when it is this run's (`run_id`) and the block
/// the file name says (round, variant) with this run's session count.
fn read_block(
    path: &Path,
    manifest: &EvalManifest,
    round: u32,
    variant: Variant,
) -> Result<BlockResult, EvalError> {
    sy_rundir::check_output_target(path)?;
    let block: BlockResult = read_json(path)?;
    let foreign = |field: &'static str, found: String, expected: String| -> EvalError {
        RunDirError::ForeignBlock {
            path: path.to_path_buf(),
            field,
            found,
            expected,
        }
        .into()
    };
    if block.run_id != manifest.run_id {
        return Err(foreign(
            "run_id",
            format!("{:?}", sy_rundir::escape_control(&block.run_id)),
            format!("{:?}", manifest.run_id),
        ));
    }
    if block.round != round || block.variant != variant {
        return Err(foreign(
            "round/variant",
            format!("r{}-{}", block.round, block.variant),
            format!("r{round}-{variant}"),
        ));
    }
    if block.sessions.len() > manifest.sessions_per_block {
        return Err(foreign(
            "sessions",
            format!("{} sessions", block.sessions.len()),
            format!("at most {}", manifest.sessions_per_block),
        ));
    }
    Ok(block)
}

fn load_bundle(path: &Path) -> Result<Bundle, EvalError> {
    // Validated at load (version, structure, hash, every parameter): a bad bundle is refused
    // before the first request.
    Bundle::from_path(path).map_err(|e| match e {
        sy_selector::BundleError::Io { .. } => EvalError::BundleRead(e),
        source => EvalError::Bundle {
            path: path.to_path_buf(),
            source,
        },
    })
}

/// Runs (or resumes) an evaluation. Must be called inside a tokio runtime.
pub async fn run(plan: LoadedPlan, opts: RunOptions) -> Result<RunOutcome, EvalError> {
    let mut plan = plan;
    if let Some(seed) = opts.seed {
        plan.plan.seed = seed;
    }
    if opts.aa {
        let first = plan
            .plan
            .variants
            .first()
            .copied()
            .unwrap_or(Variant::Stage);
        plan.plan.variants = vec![first];
        plan.plan.rounds = plan.plan.rounds.saturating_mul(2);
    }
    let bundle = load_bundle(&opts.bundle)?;
    let sessions = sessions_of(&plan)?;
    let bearer = plan.plan.target.bearer_token()?;
    let order = block_order(
        &plan.plan.variants,
        plan.plan.rounds,
        plan.plan.order,
        plan.plan.seed,
    );
    let invocation_id = sy_drive::new_invocation_id();
    let fresh = EvalManifest {
        schema_version: sy_rundir::artifact::eval_manifest::EVAL_MANIFEST_SCHEMA_VERSION,
        tool: "sy-eval".into(),
        tool_version: env!("CARGO_PKG_VERSION").into(),
        run_id: format!("{}-{}", plan.plan.label(&plan.path), &invocation_id[..8]),
        plan_path: plan.path.display().to_string(),
        plan_sha256: plan.sha256.clone(),
        bundle_path: opts.bundle.display().to_string(),
        bundle_content_hash: bundle.content_hash.clone(),
        bundle_variant: bundle.variant,
        seed: plan.plan.seed,
        target: opts.target.as_str().into(),
        frontend_url: None,
        selection_url: None,
        blocks: order.clone(),
        sessions_per_block: sessions.len(),
        invocation_ids: vec![],
        started_at: sy_rundir::now_rfc3339(),
        ended_at: None,
        complete: false,
    };
    // One writer per run directory, for the whole run; never a calibration run's directory.
    sy_rundir::check_run_kind(&opts.run_dir, sy_rundir::RunKind::Evaluation)?;
    let lock = sy_rundir::RunLock::acquire(&opts.run_dir, "sy-eval")?;
    if let Some(holder) = lock.stale_holder() {
        tracing::warn!(
            "{}: an earlier evaluation ({holder}) ended without releasing the run directory \
             (it crashed or was killed); its finished blocks are kept",
            opts.run_dir.display()
        );
    }
    // Every output, checked before the first block: a link planted in the run directory is
    // refused now, not after the evaluation has run.
    for name in [
        MANIFEST_FILE,
        COMPARISON_FILE,
        TURNS_FILE,
        SESSIONS_FILE,
        "report.md",
    ] {
        sy_rundir::check_output_target(&opts.run_dir.join(name))?;
    }
    for dir in [BLOCKS_DIR, "plots"] {
        sy_rundir::check_output_dir(&opts.run_dir.join(dir))?;
    }
    let previous = check_run_dir(&opts, &fresh)?;
    let fresh_run = previous.is_none();
    let mut manifest = previous.unwrap_or(fresh);
    manifest.invocation_ids.push(invocation_id.clone());
    manifest.ended_at = None;
    let blocks_dir = opts.run_dir.join(BLOCKS_DIR);
    sy_rundir::ensure_dir(&blocks_dir)?;
    // Every finished block is this run's, checked before the manifest is touched.
    for &(round, variant) in &order {
        let file = blocks_dir.join(BlockResult::file_name(round, variant));
        if std::fs::symlink_metadata(&file).is_ok() {
            read_block(&file, &manifest, round, variant)?;
        }
    }
    write_json(&opts.run_dir.join(MANIFEST_FILE), &manifest)?;

    let cancel = Cancel::new();
    let ctrl_c = {
        let cancel = cancel.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                tracing::warn!("Ctrl-C: cancelling; in-flight requests release their reservations");
                cancel.cancel();
            }
        })
    };
    let total_turns: u64 =
        sessions.iter().map(|s| s.turns.len() as u64).sum::<u64>() * order.len() as u64;
    let progress = sy_cli::progress_bar(total_turns, opts.show_progress);
    progress.set_prefix("sy-eval");
    let ctx = RunContext {
        plan: &plan,
        opts: &opts,
        bundle: Arc::new(bundle),
        sessions: Arc::new(sessions),
        invocation_id,
        bearer,
        cancel,
        progress: progress.clone(),
    };
    let result = run_blocks(&ctx, &mut manifest, &order).await;
    ctrl_c.abort();
    progress.finish_and_clear();
    let outcome = result.and_then(|blocks_run| finish(&plan, &opts, manifest, &order, blocks_run));
    if outcome.is_err() && fresh_run {
        forget_empty_run(&opts.run_dir);
    }
    drop(lock);
    outcome
}

/// After a new evaluation failed before its first block was finished: removes the manifest
/// and the empty blocks directory it made, so that a plain rerun is not refused as a resume.
fn forget_empty_run(run_dir: &Path) {
    let blocks = run_dir.join(BLOCKS_DIR);
    let empty = std::fs::read_dir(&blocks).is_ok_and(|mut entries| entries.next().is_none());
    if empty {
        let _ = std::fs::remove_dir(&blocks);
        let _ = std::fs::remove_file(run_dir.join(MANIFEST_FILE));
    }
}

struct RunContext<'a> {
    plan: &'a LoadedPlan,
    opts: &'a RunOptions,
    bundle: Arc<Bundle>,
    sessions: Arc<Vec<SessionSpec>>,
    invocation_id: String,
    /// The plan's bearer token (`target.bearer_token_env`), read once at the start.
    bearer: Option<String>,
    cancel: Cancel,
    progress: indicatif::ProgressBar,
}

/// Runs every block without a file yet; returns how many ran.
async fn run_blocks(
    ctx: &RunContext<'_>,
    manifest: &mut EvalManifest,
    order: &[(u32, Variant)],
) -> Result<usize, EvalError> {
    let mut ran = 0;
    let mut warmed = false;
    for (position, &(round, variant)) in order.iter().enumerate() {
        let file = ctx
            .opts
            .run_dir
            .join(BLOCKS_DIR)
            .join(BlockResult::file_name(round, variant));
        let turns: u64 = ctx.sessions.iter().map(|s| s.turns.len() as u64).sum();
        if std::fs::symlink_metadata(&file).is_ok() {
            read_block(&file, manifest, round, variant)?;
            ctx.progress.inc(turns);
            continue;
        }
        if ctx.cancel.is_cancelled() {
            return Err(EvalError::Interrupted);
        }
        if !warmed {
            // The first block of a process would otherwise also pay the process's own start-up
            // (connection pools, page faults, lazy initialisation): one session, unrecorded.
            ctx.progress.set_message("warm-up");
            let one = Arc::new(ctx.sessions.iter().take(1).cloned().collect::<Vec<_>>());
            let hidden = sy_cli::progress_bar(0, false);
            run_one(ctx, manifest, (round, u32::MAX, variant), one, hidden).await?;
            warmed = true;
        }
        ctx.progress.set_message(format!("round {round} {variant}"));
        let result = run_one(
            ctx,
            manifest,
            (round, position as u32, variant),
            ctx.sessions.clone(),
            ctx.progress.clone(),
        )
        .await?;
        if !result.outstanding_reservations.is_empty() {
            return Err(EvalError::Leaked {
                round,
                variant,
                ids: result.outstanding_reservations,
            });
        }
        write_json(&file, &result)?;
        ran += 1;
    }
    Ok(ran)
}

/// One block on a target in its matched starting state.
async fn run_one(
    ctx: &RunContext<'_>,
    manifest: &mut EvalManifest,
    (round, position, variant): (u32, u32, Variant),
    sessions: Arc<Vec<SessionSpec>>,
    progress: indicatif::ProgressBar,
) -> Result<BlockResult, EvalError> {
    let plan = &ctx.plan.plan;
    let endpoints = Endpoints {
        frontend_url: ctx
            .opts
            .frontend_url
            .clone()
            .or_else(|| plan.target.frontend_url.clone()),
        selection_url: ctx
            .opts
            .selection_url
            .clone()
            .or_else(|| plan.target.selection_url.clone()),
        sim_config: ctx
            .opts
            .sim_config
            .clone()
            .or_else(|| plan.target.sim_config.as_ref().map(|p| ctx.plan.resolve(p))),
    };
    let target = Target::start(ctx.opts.target, &endpoints).await?;
    let (frontend_url, selection_url) = (target.frontend_url.clone(), target.selection_url.clone());
    let start_state = match target.kind {
        TargetKind::Sim => {
            "fresh simulator: same configuration and seed, empty caches, nothing booked".to_string()
        }
        TargetKind::Dynamo => {
            let zero = quiescent(
                &frontend_url,
                &selection_url,
                &plan.models,
                ctx.bearer.as_deref(),
            )
            .await?;
            format!(
                "shared deployment: fresh prompts for this block (no cross-block cache hits), caches not reset; nothing booked at start: {zero}"
            )
        }
    };
    manifest.frontend_url = Some(frontend_url.clone());
    manifest.selection_url = Some(selection_url.clone());
    let inputs = BlockInputs {
        plan: Arc::new(plan.clone()),
        bundle: ctx.bundle.clone(),
        sessions,
        run_id: manifest.run_id.clone(),
        invocation_id: ctx.invocation_id.clone(),
        frontend_url,
        selection_url,
        bearer: ctx.bearer.clone(),
        cancel: ctx.cancel.clone(),
        progress,
    };
    let id = BlockId {
        round,
        position,
        variant,
        start_state,
    };
    let result = run_block(&inputs, &id).await;
    target.shutdown().await;
    result
}

/// Reads every block file, compares, writes the outputs and the final manifest.
fn finish(
    plan: &LoadedPlan,
    opts: &RunOptions,
    mut manifest: EvalManifest,
    order: &[(u32, Variant)],
    blocks_run: usize,
) -> Result<RunOutcome, EvalError> {
    let mut blocks = Vec::with_capacity(order.len());
    for &(round, variant) in order {
        let path = opts
            .run_dir
            .join(BLOCKS_DIR)
            .join(BlockResult::file_name(round, variant));
        blocks.push(read_block(&path, &manifest, round, variant)?);
    }
    let comparison = match (opts.aa, plan.plan.variants.first()) {
        (true, Some(&v)) => crate::compare::compare_aa(v, &blocks, plan.plan.order, plan.plan.seed),
        _ => compare(&plan.plan.variants, &blocks, plan.plan.seed),
    };
    write_json(&opts.run_dir.join(COMPARISON_FILE), &comparison)?;
    let mut turns = String::new();
    let mut sessions = String::new();
    for b in &blocks {
        for t in &b.turns {
            turns.push_str(&serde_json::to_string(t).map_err(EvalError::Serialize)?);
            turns.push('\n');
        }
        for s in &b.sessions {
            sessions.push_str(&serde_json::to_string(s).map_err(EvalError::Serialize)?);
            sessions.push('\n');
        }
    }
    for (name, text) in [(TURNS_FILE, &turns), (SESSIONS_FILE, &sessions)] {
        sy_cli::atomic_write(&opts.run_dir.join(name), text.as_bytes())?;
    }
    let preamble = format!(
        "{}Plan `{}` (sha256 {}), bundle `{}` (hash {}, frozen variant `{}`), target `{}`, seed {}. {} rounds × {} variants = {} blocks of {} sessions; block order {:?}.\n\nStarting state of the blocks: {}.",
        if opts.aa {
            "**A/A check**: the same variant in both arms (the first row of each table is arm A, the second arm B; each pair of rounds has one block of each, in random or alternating order); any verdict but `no significant difference` is a false one.\n\n"
        } else {
            ""
        },
        manifest.plan_path,
        &manifest.plan_sha256[..12.min(manifest.plan_sha256.len())],
        manifest.bundle_path,
        &manifest.bundle_content_hash[..12.min(manifest.bundle_content_hash.len())],
        manifest.bundle_variant,
        manifest.target,
        manifest.seed,
        plan.plan.rounds,
        plan.plan.variants.len(),
        order.len(),
        manifest.sessions_per_block,
        order
            .iter()
            .map(|(r, v)| format!("r{r}-{v}"))
            .collect::<Vec<_>>(),
        blocks.first().map_or("", |b| b.start_state.as_str()),
    );
    let report = crate::report::write_report(
        &opts.run_dir,
        "sy-eval: the rule, live, on agent sessions",
        &preamble,
        &comparison,
        &blocks,
    )
    .map_err(EvalError::Report)?;
    manifest.ended_at = Some(sy_rundir::now_rfc3339());
    manifest.complete = true;
    write_json(&opts.run_dir.join(MANIFEST_FILE), &manifest)?;
    Ok(RunOutcome {
        manifest,
        comparison,
        blocks_run,
        report,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_round_runs_every_variant_once() {
        let vs = [Variant::Stage, Variant::Count, Variant::Cache];
        let o = block_order(&vs, 4, Order::Random, 9);
        assert_eq!(o.len(), 12);
        for r in 0..4 {
            let mut got: Vec<Variant> =
                o.iter().filter(|(x, _)| *x == r).map(|(_, v)| *v).collect();
            got.sort();
            assert_eq!(got, vec![Variant::Stage, Variant::Count, Variant::Cache]);
        }
        assert_eq!(o, block_order(&vs, 4, Order::Random, 9));
        let abba = block_order(&[Variant::Stage, Variant::Cache], 2, Order::Abba, 1);
        assert_eq!(
            abba,
            vec![
                (0, Variant::Stage),
                (0, Variant::Cache),
                (1, Variant::Cache),
                (1, Variant::Stage)
            ]
        );
    }
}
