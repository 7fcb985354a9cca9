//! The run: start the target, check it, run every pending unit with retries, write records and
//! the manifest, and prove no reservation leaked.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use sy_rundir::Artifact;

use sy_drive::{Driver, Endpoints, PromptFactory, Target, TargetKind, new_invocation_id};
use sy_dynamo::{Cancel, ClientConfig, CompletionClient, SelectionClient};

use crate::error::CollectError;
use crate::manifest::{counts_of, deployment_info};
use crate::plan::{LoadedPlan, Plan};
use crate::preflight::{PreflightOptions, PreflightReport, preflight};
use crate::probe::UnitRunner;
use crate::progress::Progress;
use crate::results::{self, RecordSink};
use crate::schedule::Schedule;
use crate::summary::phase_background;
use sy_rundir::artifact::manifest::{
    BackgroundCounts, Counts, MANIFEST_SCHEMA_VERSION, Manifest, PhaseTime, RecordFiles, Session,
    TargetInfo, WarmupSummary,
};

/// Why a run could not start or finish, besides its plan, run directory, target and preflight.
#[derive(Debug, thiserror::Error)]
pub enum RunFailure {
    #[error("cannot build the HTTP client: {0}")]
    HttpClient(#[source] reqwest::Error),
    /// Bad input: the plan names a variable that is not set.
    #[error(transparent)]
    BearerUnset(#[from] sy_drive::BearerUnset),
    #[error(
        "the deployment refused a request as misconfigured: {0}. Fix the deployment (see \
         docs/dynamo.md), then continue with --resume"
    )]
    Misconfigured(String),
    /// A run-directory file could not be written (the cause names it).
    #[error(
        "{cause}; {} keeps every unit recorded before the failure and {} says the run is not \
         complete: free the space (or fix the cause) and continue with --resume",
        Artifact::Records.file_name(),
        Artifact::Manifest.file_name()
    )]
    Unsaved { cause: WriteFailure },
    /// The plan copy or the manifest could not be written.
    #[error(transparent)]
    Write(sy_rundir::RunError),
}

/// Why a record file, records.parquet or the manifest could not be written; each names its
/// file.
#[derive(Debug, thiserror::Error)]
pub enum WriteFailure {
    /// Appending to records.jsonl or attempts.jsonl failed.
    #[error(transparent)]
    Records(#[from] crate::results::ResultsError),
    /// Writing the Parquet copy of the records failed.
    #[error(transparent)]
    Parquet(#[from] sy_records::RecordsError),
    /// Hashing a record file, or writing the manifest, failed.
    #[error(transparent)]
    File(#[from] sy_rundir::RunError),
    /// records.jsonl's length could not be read.
    #[error("{}: {source}", path.display())]
    Metadata {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    /// A first failure, and then the manifest could not be updated either.
    #[error("{first}; and {} could not be updated: {manifest}", Artifact::Manifest.file_name())]
    AndManifest {
        first: Box<WriteFailure>,
        manifest: sy_rundir::RunError,
    },
}

impl RunFailure {
    /// Whether the caller's input is at fault (exit 2) rather than the run (exit 1).
    pub fn is_bad_input(&self) -> bool {
        matches!(self, RunFailure::BearerUnset(_))
    }
}

/// A run directory that cannot hold this run: bad input, except when it cannot be created.
#[derive(Debug, thiserror::Error)]
pub enum RunDirError {
    #[error("cannot create run directory {}: {source}", .dir.display())]
    Create {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Manifest(sy_rundir::ArtifactError),
    #[error(
        "run directory {} already holds a run (manifest.json / records.jsonl): pass --resume to \
         continue it, or choose another --run-dir",
        .0.display()
    )]
    Occupied(PathBuf),
    #[error(
        "--resume: plan {} (sha256 {plan_sha256}) is not the plan of the run in {} (sha256 \
         {run_sha256}, {run_plan}): a resumed run must use the same plan file",
        .plan.display(),
        .dir.display()
    )]
    OtherPlan {
        plan: PathBuf,
        plan_sha256: String,
        dir: PathBuf,
        run_sha256: String,
        run_plan: String,
    },
    #[error(
        "--resume: {} has records.jsonl but no manifest.json: cannot check that the plan is the \
         same",
        .0.display()
    )]
    NoManifest(PathBuf),
    #[error("--resume: --seed {given} differs from the run's seed {run}")]
    OtherSeed { given: u64, run: u64 },
}

impl RunDirError {
    /// Whether the caller's input is at fault (exit 2) rather than the machine (exit 1).
    pub fn is_bad_input(&self) -> bool {
        !matches!(self, RunDirError::Create { .. })
    }
}

/// How to run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub run_dir: PathBuf,
    pub target: TargetKind,
    pub urls: Endpoints,
    pub resume: bool,
    pub show_progress: bool,
    /// Overrides the plan's seed.
    pub seed: Option<u64>,
    /// The preflight to run before the first unit (`None`: `--no-preflight`).
    pub preflight: Option<PreflightOptions>,
    /// Warm-up requests per (worker, rank) (`None`: the plan's or the target's default;
    /// `Some(0)`: `--no-warmup`). See `crate::warmup`.
    pub warmup: Option<u32>,
    /// The deployment description (`--describe`): provenance for the manifest.
    pub describe: Option<crate::deployment::LoadedDescription>,
}

/// What a finished (or interrupted) run reports.
#[derive(Debug, Clone)]
pub struct RunSummary {
    pub manifest: Manifest,
    pub interrupted: bool,
    /// The GPUs the target's two models hold, as this session saw them (`None`: the selection
    /// service did not list its workers).
    pub gpus: Option<crate::estimate::GpuCount>,
}

/// The HTTP clients of a run, configured from the plan's timeouts.
struct Clients {
    config: ClientConfig,
    http: reqwest::Client,
    selection: SelectionClient,
    completions: CompletionClient,
}

impl Clients {
    fn new(p: &Plan, target: &Target, bearer: Option<String>) -> Result<Self, CollectError> {
        let config = p
            .target
            .client_config(&target.frontend_url, &target.selection_url, bearer);
        let http = config.http_client().map_err(RunFailure::HttpClient)?;
        Ok(Self {
            selection: SelectionClient::new(&config, http.clone()),
            completions: CompletionClient::new(&config, http.clone()),
            config,
            http,
        })
    }

    /// A driver of its own (a fresh invocation id) for requests outside a run.
    fn driver(&self) -> Arc<Driver> {
        Arc::new(Driver::new(
            self.completions.clone(),
            self.selection.clone(),
            Cancel::new(),
            new_invocation_id(),
        ))
    }
}

/// The plan's bearer token, from the environment variable it names.
fn bearer_of(p: &Plan) -> Result<Option<String>, CollectError> {
    Ok(p.target.bearer_token().map_err(RunFailure::from)?)
}

/// `sy-collect --dry-run --target …`: start the target, run the preflight (without
/// registering), then the pilot; stop the target. The preflight's problems are returned in its
/// report; the pilot runs only when nothing blocks.
pub async fn pilot_dry_run(
    p: &Plan,
    kind: TargetKind,
    urls: &Endpoints,
    describe: Option<&crate::deployment::LoadedDescription>,
) -> Result<(PreflightReport, Option<crate::estimate::DryRun>), CollectError> {
    let bearer = bearer_of(p)?;
    let target = crate::target::start(kind, p, urls).await?;
    let result = async {
        let c = Clients::new(p, &target, bearer.clone())?;
        let driver = c.driver();
        let opts = PreflightOptions {
            register: false,
            probes: true,
            ..Default::default()
        };
        let pre = preflight(
            &c.http,
            bearer.as_deref(),
            &c.config.frontend_url,
            &driver,
            p,
            &opts,
        )
        .await?;
        if pre.exit_code() != 0 {
            return Ok((pre, None));
        }
        // Data-parallel ranks per worker, times its GPUs per rank when the description
        // gives them for every worker (what an adaptive run's GPU time counts too); the
        // preflight's ranks if the selection service does not list its workers.
        let count = crate::estimate::GpuCount::of_target(&c.http, &driver, p, describe)
            .await
            .unwrap_or(crate::estimate::GpuCount {
                gpus: (pre.workers.iter())
                    .map(|w| w.dp_ranks.len().max(1) as u64)
                    .sum(),
                per_rank_known: false,
            });
        let (gpus, known) = (count.gpus, count.per_rank_known);
        let mut pilot = crate::estimate::pilot(p, driver.clone(), gpus).await;
        pilot.gpus_per_rank_known = known;
        driver.selection.release_all().await;
        Ok((pre, Some(crate::estimate::dry_run(p, Some(pilot)))))
    }
    .await;
    target.shutdown().await;
    result
}

/// `sy-collect preflight`: start the target, run the preflight, stop the target.
pub async fn preflight_only(
    p: &Plan,
    kind: TargetKind,
    urls: &Endpoints,
    opts: &PreflightOptions,
) -> Result<PreflightReport, CollectError> {
    let bearer = bearer_of(p)?;
    let target = crate::target::start(kind, p, urls).await?;
    let result = async {
        let c = Clients::new(p, &target, bearer.clone())?;
        let driver = c.driver();
        Ok(preflight(
            &c.http,
            bearer.as_deref(),
            &c.config.frontend_url,
            &driver,
            p,
            opts,
        )
        .await?)
    }
    .await;
    target.shutdown().await;
    result
}

fn run_id_for(plan: &LoadedPlan) -> String {
    let name = plan.plan.name.clone().unwrap_or_else(|| {
        plan.path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "run".into())
    });
    let stamp = time::OffsetDateTime::now_utc();
    format!(
        "{name}-{:04}{:02}{:02}T{:02}{:02}{:02}Z-{}",
        stamp.year(),
        u8::from(stamp.month()),
        stamp.day(),
        stamp.hour(),
        stamp.minute(),
        stamp.second(),
        &plan.sha256[..8]
    )
}

fn check_run_dir(
    dir: &Path,
    plan: &LoadedPlan,
    resume: bool,
) -> Result<Option<Manifest>, CollectError> {
    std::fs::create_dir_all(dir).map_err(|source| RunDirError::Create {
        dir: dir.to_path_buf(),
        source,
    })?;
    let manifest_path = dir.join(Artifact::Manifest.file_name());
    let records_path = dir.join(Artifact::Records.file_name());
    let has_records = std::fs::metadata(&records_path).is_ok_and(|m| m.len() > 0);
    let manifest = if manifest_path.exists() {
        Some(Manifest::read(&manifest_path).map_err(RunDirError::Manifest)?)
    } else {
        None
    };
    if !resume {
        if has_records || manifest.is_some() {
            return Err(RunDirError::Occupied(dir.to_path_buf()).into());
        }
        return Ok(None);
    }
    match &manifest {
        Some(m) if m.plan_sha256 != plan.sha256 => Err(RunDirError::OtherPlan {
            plan: plan.path.clone(),
            plan_sha256: plan.sha256[..12].to_string(),
            dir: dir.to_path_buf(),
            run_sha256: m.plan_sha256[..m.plan_sha256.len().min(12)].to_string(),
            run_plan: m.plan_path.clone(),
        }
        .into()),
        None if has_records => Err(RunDirError::NoManifest(dir.to_path_buf()).into()),
        _ => Ok(manifest),
    }
}

/// Keeps the plan the run was collected with in the run directory (`plan.toml`), byte for byte:
/// the bytes that were read and hashed (the manifest's `plan_sha256`), not a second read of a
/// file that may have changed since.
fn copy_plan(plan: &LoadedPlan, dir: &Path) -> Result<(), CollectError> {
    let copy = Artifact::Plan.path(dir);
    let bytes = plan.text.as_bytes();
    if std::fs::read(&copy).is_ok_and(|existing| existing == bytes) {
        return Ok(());
    }
    sy_rundir::atomic_write(&copy, bytes).map_err(|e| RunFailure::Write(e).into())
}

/// The run directory once the target has passed the checks: the plan kept in it (a new run;
/// one that failed before this point left nothing behind), or what an earlier session left
/// prepared for resuming (its records checked to be of run `previous`).
fn prepare_run_dir(
    plan: &LoadedPlan,
    opts: &RunOptions,
    previous: Option<&Manifest>,
) -> Result<results::ResumeState, CollectError> {
    if previous.is_none() {
        copy_plan(plan, &opts.run_dir)?;
    }
    if !opts.resume {
        return Ok(results::ResumeState::default());
    }
    let run_id = previous.map(|m| m.run_id.as_str());
    Ok(results::prepare_resume(&opts.run_dir, run_id)?)
}

fn write_manifest(dir: &Path, m: &Manifest) -> Result<(), CollectError> {
    write_manifest_file(dir, m).map_err(|e| RunFailure::Write(e).into())
}

/// Writes `manifest.json` atomically.
fn write_manifest_file(dir: &Path, m: &Manifest) -> Result<(), sy_rundir::RunError> {
    sy_cli::atomic_write_json(&dir.join(Artifact::Manifest.file_name()), m)
}

/// How often the manifest's progress (units done) is rewritten during a run.
const MANIFEST_PROGRESS_EVERY: Duration = Duration::from_secs(1);

/// Runs (or resumes) a plan. Must be called inside a tokio runtime.
pub async fn run(plan: LoadedPlan, opts: RunOptions) -> Result<RunSummary, CollectError> {
    run_selected(plan, opts, None).await
}

/// [`run`] restricted to the plan's units in `only` (condition id, repeat), when given: the run
/// counts those as its whole (`units_total`), so an adaptive collection's rounds each end with a
/// complete run of the units drawn so far (`crate::adaptive`).
pub async fn run_selected(
    plan: LoadedPlan,
    opts: RunOptions,
    only: Option<&std::collections::BTreeSet<(String, u32)>>,
) -> Result<RunSummary, CollectError> {
    let mut plan = plan;
    if let Some(seed) = opts.seed {
        plan.plan.seed = seed;
    }
    // One writer per run directory, for the whole run (released however the run ends).
    let lock = sy_rundir::RunLock::acquire(&opts.run_dir, "sy-collect")?;
    if let Some(holder) = lock.stale_holder() {
        tracing::warn!(
            "{}: an earlier run ({holder}) ended without releasing the run directory (it \
             crashed or was killed); its last unit may be incomplete, which --resume redoes",
            opts.run_dir.display()
        );
    }
    sy_rundir::check_run_kind(&opts.run_dir, sy_rundir::RunKind::Calibration)?;
    // Every file the run writes, checked before the first request: a link planted in the run
    // directory is refused now, not at the end of a long collection.
    for artifact in [
        Artifact::Plan,
        Artifact::Records,
        Artifact::Attempts,
        Artifact::RecordsParquet,
        Artifact::Manifest,
    ] {
        sy_rundir::check_output_target(&artifact.path(&opts.run_dir))?;
    }
    let previous = check_run_dir(&opts.run_dir, &plan, opts.resume)?;
    if let (Some(prev), Some(_)) = (&previous, opts.seed)
        && prev.seed != plan.plan.seed
    {
        return Err(RunDirError::OtherSeed {
            given: plan.plan.seed,
            run: prev.seed,
        }
        .into());
    }
    let seed = previous.as_ref().map_or(plan.plan.seed, |m| m.seed);
    plan.plan.seed = seed;

    let bearer = bearer_of(&plan.plan)?;
    let target = crate::target::start(opts.target, &plan.plan, &opts.urls).await?;
    let result = run_on_target(&plan, &opts, previous, bearer, &target, only).await;
    target.shutdown().await;
    drop(lock);
    result
}

async fn run_on_target(
    plan: &LoadedPlan,
    opts: &RunOptions,
    previous: Option<Manifest>,
    bearer: Option<String>,
    target: &Target,
    only: Option<&std::collections::BTreeSet<(String, u32)>>,
) -> Result<RunSummary, CollectError> {
    let p = &plan.plan;
    let Clients {
        config,
        http,
        selection,
        completions,
    } = Clients::new(p, target, bearer.clone())?;

    let cancel = Cancel::new();
    // Fresh for every invocation, `--resume` included: prompts and selection ids of this
    // invocation share nothing with any earlier one.
    let invocation_id = new_invocation_id();
    let driver = Arc::new(Driver::new(
        completions,
        selection.clone(),
        cancel.clone(),
        invocation_id.clone(),
    ));

    // Everything the target must satisfy, before the first unit.
    if let Some(pre_opts) = &opts.preflight {
        let frontend = &config.frontend_url;
        check_target(&http, bearer.as_deref(), frontend, &driver, p, pre_opts).await?;
    }
    let versions = target.versions(&http, bearer.as_deref()).await;
    tracing::info!("target versions: {:?}", versions.versions);

    // What the frontend lists now is "known since the start": a later HTTP 400 pinned to one of
    // these is a bad request, one pinned to an instance it lists only later is a discovery race.
    driver.learn_frontend_instances().await;
    let gpus =
        crate::estimate::GpuCount::of_target(&http, &driver, p, opts.describe.as_ref()).await;

    let warmup = warm_up(opts, p, &driver, &invocation_id, &cancel).await;

    let mut schedule = Schedule::from_plan(p);
    if let Some(only) = only {
        let Schedule { conditions, units } = &mut schedule;
        units.retain(|u| only.contains(&(conditions[u.condition].id.clone(), u.repeat)));
    }
    let resume = prepare_run_dir(plan, opts, previous.as_ref())?;
    let started_at = sy_rundir::now_rfc3339();
    let mut manifest = previous
        .unwrap_or_else(|| new_manifest(plan, target, &versions, &schedule, started_at.clone()));
    start_session(
        &mut manifest,
        target,
        &versions,
        Session {
            invocation_id: invocation_id.clone(),
            started_at,
            ended_at: None,
            resumed: opts.resume,
            units_run: 0,
            interrupted: false,
            records_moved: resume.moved as u64,
            torn_tail_ignored: resume.torn_tail,
            target_versions: versions.versions.clone(),
            warmup,
        },
    );
    if let Some(d) = &opts.describe {
        manifest.deployment = Some(deployment_info(d));
    }
    write_manifest(&opts.run_dir, &manifest)?;

    let mut sink = RecordSink::open(&opts.run_dir, resume.valid_len)?;
    let runner = UnitRunner {
        driver: driver.clone(),
        prompts: Arc::new(PromptFactory::new(p.seed, &invocation_id, &p.prompt)),
        plan: Arc::new(p.clone()),
        run_id: manifest.run_id.clone(),
    };

    let ctrl_c = cancel_on_ctrl_c(&cancel);
    let work = UnitLoop {
        p,
        schedule: &schedule,
        run_dir: &opts.run_dir,
        cancel: &cancel,
        driver: &driver,
        runner: &runner,
        sink: &mut sink,
        done_before: resume.done.len() as u64,
        last_progress_write: std::time::Instant::now(),
        work: SessionWork::default(),
    }
    .run(&resume, opts.show_progress, &mut manifest)
    .await;
    ctrl_c.abort();
    let interrupted = cancel.is_cancelled();

    // Sweep: every reservation must be gone, and /loads must show it.
    let outstanding = selection.release_all().await;
    let loads_zero = selection.wait_loads_zero(20).await;
    let records = results::read_all(&opts.run_dir)?;
    let end = SessionEnd {
        work,
        interrupted,
        outstanding,
        loads_zero,
        units_total: schedule.units.len() as u64,
    };
    let config_error = end.work.config_error.clone();
    finish_session(&opts.run_dir, &mut manifest, &records, &driver, end)?;
    if let Some(m) = config_error {
        return Err(RunFailure::Misconfigured(m).into());
    }
    Ok(RunSummary {
        manifest,
        interrupted,
        gpus,
    })
}

/// Unrecorded warm-up of every (worker, rank): compilation and graph capture hit first requests
/// (see `crate::warmup`). `None` when off.
async fn warm_up(
    opts: &RunOptions,
    p: &Plan,
    driver: &Arc<Driver>,
    invocation_id: &str,
    cancel: &Cancel,
) -> Option<WarmupSummary> {
    let per_rank = opts
        .warmup
        .unwrap_or_else(|| crate::warmup::requests_per_rank(p, opts.target == TargetKind::Dynamo));
    if per_rank == 0 || cancel.is_cancelled() {
        return None;
    }
    let w = crate::warmup::warm_up(driver, p, invocation_id, per_rank).await;
    tracing::info!(
        "warm-up: {} requests on {} (worker, rank) pairs, {} failed, {:.1} s",
        w.requests,
        w.ranks,
        w.failed,
        w.seconds
    );
    for f in &w.failures {
        tracing::warn!("warm-up request failed: {f}");
    }
    Some(w)
}

/// The preflight: everything the target must satisfy before the first unit.
async fn check_target(
    http: &reqwest::Client,
    bearer: Option<&str>,
    frontend_url: &str,
    driver: &Arc<Driver>,
    p: &Plan,
    pre_opts: &PreflightOptions,
) -> Result<(), CollectError> {
    let pre = preflight(http, bearer, frontend_url, driver, p, pre_opts).await?;
    log_preflight(&pre);
    match pre.blocking_error() {
        Some(e) => Err(e.into()),
        None => Ok(()),
    }
}

/// Ctrl-C cancels in-flight requests; their reservations are deleted as they unwind.
fn cancel_on_ctrl_c(cancel: &Cancel) -> tokio::task::JoinHandle<()> {
    let cancel = cancel.clone();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            tracing::warn!("interrupted: cancelling in-flight requests");
            cancel.cancel();
        }
    })
}

/// The manifest of a new run (the first session).
fn new_manifest(
    plan: &LoadedPlan,
    target: &Target,
    versions: &sy_drive::target::TargetVersions,
    schedule: &Schedule,
    started_at: String,
) -> Manifest {
    let p = &plan.plan;
    Manifest {
        schema_version: MANIFEST_SCHEMA_VERSION,
        tool: "sy-collect".into(),
        tool_version: env!("CARGO_PKG_VERSION").into(),
        run_id: run_id_for(plan),
        plan_path: plan.path.display().to_string(),
        plan_sha256: plan.sha256.clone(),
        seed: p.seed,
        target: TargetInfo {
            kind: target.kind.as_str().into(),
            frontend_url: target.frontend_url.clone(),
            selection_url: target.selection_url.clone(),
            efficient_model: p.models.efficient.clone(),
            capable_model: p.models.capable.clone(),
            versions: versions.versions.clone(),
            version_sources: versions.sources.clone(),
        },
        started_at,
        ended_at: None,
        sessions: Vec::new(),
        invocation_ids: Vec::new(),
        units_total: schedule.units.len() as u64,
        units_done: 0,
        complete: false,
        counts: Counts::default(),
        background: BackgroundCounts::default(),
        loads_zero_at_end: None,
        outstanding_reservations: Vec::new(),
        phases: BTreeMap::new(),
        summary: Vec::new(),
        records_files: None,
        deployment: None,
    }
}

/// Records a new session in the manifest: this invocation's target URLs and versions (warning
/// when the versions changed since the previous session), and not complete until it ends.
fn start_session(
    manifest: &mut Manifest,
    target: &Target,
    versions: &sy_drive::target::TargetVersions,
    session: Session,
) {
    manifest.target.frontend_url = target.frontend_url.clone();
    manifest.target.selection_url = target.selection_url.clone();
    if !manifest.target.versions.is_empty() && manifest.target.versions != versions.versions {
        tracing::warn!(
            "the target's versions changed since the previous session: {:?} → {:?} (each \
             session's versions are in the manifest)",
            manifest.target.versions,
            versions.versions
        );
    }
    manifest.target.versions = versions.versions.clone();
    manifest.target.version_sources = versions.sources.clone();
    manifest.invocation_ids.push(session.invocation_id.clone());
    manifest.sessions.push(session);
    manifest.ended_at = None;
    // Until this session ends, the record files are changing: not complete, no Parquet copy.
    manifest.complete = false;
    manifest.records_files = None;
}

/// What the unit loop did in this session.
#[derive(Debug, Default)]
struct SessionWork {
    retried: u64,
    units_run: u64,
    phases: BTreeMap<String, PhaseTime>,
    /// A record or manifest write failed: the run stopped.
    write_error: Option<WriteFailure>,
    /// The deployment refused a request as misconfigured: the run stopped.
    config_error: Option<String>,
}

/// Why a unit stopped the loop.
enum Stop {
    Write(WriteFailure),
    Config(String),
}

/// The pending units of one session, run one after the other with retries.
struct UnitLoop<'a> {
    p: &'a Plan,
    schedule: &'a Schedule,
    run_dir: &'a Path,
    cancel: &'a Cancel,
    driver: &'a Driver,
    runner: &'a UnitRunner,
    sink: &'a mut RecordSink,
    done_before: u64,
    last_progress_write: std::time::Instant,
    work: SessionWork,
}

impl UnitLoop<'_> {
    /// Runs every unit `resume` has not done, until done, cancelled or stopped.
    async fn run(
        mut self,
        resume: &results::ResumeState,
        show_progress: bool,
        manifest: &mut Manifest,
    ) -> SessionWork {
        let schedule = self.schedule;
        let pending: Vec<_> = schedule
            .units
            .iter()
            .filter(|u| {
                !resume
                    .done
                    .contains(&(schedule.conditions[u.condition].id.clone(), u.repeat))
            })
            .copied()
            .collect();
        let progress = Progress::new(
            schedule.units.len() as u64,
            (schedule.units.len() - pending.len()) as u64,
            show_progress,
            self.driver.stats.clone(),
            pending.iter().map(|u| self.unit_cost(u)).sum(),
        );
        for unit in pending {
            if self.cancel.is_cancelled() {
                break;
            }
            match self.run_unit(&unit, &progress, manifest).await {
                Ok(()) => {}
                Err(Stop::Write(e)) => {
                    self.work.write_error = Some(e);
                    break;
                }
                Err(Stop::Config(m)) => {
                    self.work.config_error = Some(m);
                    break;
                }
            }
        }
        progress.finish();
        self.work
    }

    fn unit_cost(&self, u: &crate::schedule::Unit) -> f64 {
        crate::estimate::unit_cost_seconds(self.p, &self.schedule.conditions[u.condition])
    }

    /// One unit: attempts until one is final (success, a permanent failure, cancellation or
    /// the retries spent), its records written.
    async fn run_unit(
        &mut self,
        unit: &crate::schedule::Unit,
        progress: &Progress,
        manifest: &mut Manifest,
    ) -> Result<(), Stop> {
        let cond = &self.schedule.conditions[unit.condition];
        progress.phase(cond.phase.as_str(), &cond.id);
        let unit_started = std::time::Instant::now();
        let bg_before = phase_background(&self.driver.stats);
        let mut attempt = 1u32;
        let result = loop {
            let result = self.runner.run(cond, unit.repeat, attempt).await;
            let retry = result.transient
                && !result.cancelled
                && attempt <= self.p.target.retries()
                && !self.cancel.is_cancelled();
            if !retry {
                break result;
            }
            self.work.retried += 1;
            progress.error();
            self.sink
                .retried(&result.records)
                .map_err(|e| Stop::Write(e.into()))?;
            self.back_off(&cond.id, unit.repeat, attempt).await;
            attempt += 1;
        };
        if !result.ok() {
            progress.error();
        }
        self.sink
            .unit(&result.records)
            .map_err(|e| Stop::Write(e.into()))?;
        self.work.units_run += 1;
        let spent = PhaseTime::delta(
            &bg_before,
            &phase_background(&self.driver.stats),
            unit_started.elapsed().as_secs_f64(),
        );
        self.work
            .phases
            .entry(cond.phase.as_str().to_string())
            .or_default()
            .add(&spent);
        progress.unit_done(self.unit_cost(unit));
        self.write_progress(manifest).map_err(Stop::Write)?;
        match configuration_error(&result.records) {
            Some(m) => Err(Stop::Config(m)),
            None => Ok(()),
        }
    }

    /// Waits the exponential backoff before attempt `attempt + 1` (or until cancelled).
    async fn back_off(&self, condition_id: &str, repeat: u32, attempt: u32) {
        let backoff = Duration::from_millis(
            self.p
                .target
                .retry_backoff_ms()
                .saturating_mul(1 << (attempt - 1).min(10)),
        );
        tracing::info!(
            "{condition_id}/r{repeat}: attempt {attempt} failed transiently; retrying in {} ms",
            backoff.as_millis()
        );
        tokio::select! {
            _ = self.cancel.cancelled() => {}
            _ = tokio::time::sleep(backoff) => {}
        }
    }

    /// The manifest follows the run (at most once a second): units done so far.
    fn write_progress(&mut self, manifest: &mut Manifest) -> Result<(), WriteFailure> {
        if self.last_progress_write.elapsed() < MANIFEST_PROGRESS_EVERY {
            return Ok(());
        }
        manifest.units_done = self.done_before + self.work.units_run;
        if let Some(s) = manifest.sessions.last_mut() {
            s.units_run = self.work.units_run;
        }
        write_manifest_file(self.run_dir, manifest)?;
        self.last_progress_write = std::time::Instant::now();
        Ok(())
    }
}

/// How a session ended: its work, and the sweep of reservations after it.
struct SessionEnd {
    work: SessionWork,
    interrupted: bool,
    outstanding: Vec<String>,
    loads_zero: Option<bool>,
    units_total: u64,
}

/// Closes the session in the manifest (counts, phases, summary, sweep) and writes the files.
fn finish_session(
    run_dir: &Path,
    manifest: &mut Manifest,
    records: &[sy_records::Record],
    driver: &Driver,
    end: SessionEnd,
) -> Result<(), CollectError> {
    let done_units = records
        .iter()
        .map(|r| (r.condition_id.clone(), r.repeat))
        .collect::<std::collections::HashSet<_>>()
        .len() as u64;
    let ended = sy_rundir::now_rfc3339();
    let previous_retries = manifest.counts.retried_attempts;
    manifest.counts = counts_of(records, previous_retries + end.work.retried);
    let mut bg = manifest.background.clone();
    bg.requests += driver.stats.background_requests.load(Ordering::Relaxed);
    if let Ok(m) = driver.stats.background_errors.lock() {
        for (k, v) in m.iter() {
            *bg.errors.entry(k.clone()).or_default() += v;
        }
    }
    manifest.background = bg;
    manifest.units_total = end.units_total;
    manifest.units_done = done_units;
    for (phase, t) in &end.work.phases {
        manifest.phases.entry(phase.clone()).or_default().add(t);
    }
    manifest.summary = crate::summary::summarize(records, &manifest.phases);
    manifest.loads_zero_at_end = end.loads_zero;
    manifest.outstanding_reservations = end.outstanding;
    manifest.ended_at = Some(ended.clone());
    if let Some(s) = manifest.sessions.last_mut() {
        s.ended_at = Some(ended);
        s.units_run = end.work.units_run;
        s.interrupted = end.interrupted;
    }
    let all_done = done_units == manifest.units_total && !end.interrupted;
    finish_files(run_dir, manifest, records, all_done, end.work.write_error)
}

fn log_preflight(pre: &PreflightReport) {
    for p in &pre.problems {
        tracing::warn!("preflight: {}", p.message);
    }
    tracing::info!(
        "preflight: {} workers, KV capacity {:?}, {:.0} ms",
        pre.workers.len(),
        pre.kv_capacity_tokens,
        pre.duration_ms
    );
}

/// Writes records.parquet (when nothing failed so far) and the final manifest. The manifest
/// says `complete` only when every unit is recorded and records.parquet holds exactly the
/// records of records.jsonl (their hashes are in `records_files`). The first failure is the
/// error, naming its file; a later failure is added to it.
fn finish_files(
    dir: &Path,
    manifest: &mut Manifest,
    records: &[sy_records::Record],
    all_done: bool,
    write_error: Option<WriteFailure>,
) -> Result<(), CollectError> {
    let mut failure = write_error;
    manifest.records_files = None;
    if failure.is_none() && !records.is_empty() {
        match write_parquet_copy(dir, records) {
            Ok(files) => manifest.records_files = Some(files),
            Err(e) => failure = Some(e),
        }
    }
    manifest.complete = all_done && manifest.records_files.is_some();
    if let Err(e) = write_manifest_file(dir, manifest) {
        failure = Some(match failure {
            Some(first) => WriteFailure::AndManifest {
                first: Box::new(first),
                manifest: e,
            },
            None => WriteFailure::File(e),
        });
    }
    match failure {
        Some(cause) => Err(RunFailure::Unsaved { cause }.into()),
        None => Ok(()),
    }
}

/// Writes records.parquet from the records of records.jsonl and returns both files' hashes.
fn write_parquet_copy(
    dir: &Path,
    records: &[sy_records::Record],
) -> Result<RecordFiles, WriteFailure> {
    let jsonl = dir.join(Artifact::Records.file_name());
    let parquet = dir.join(Artifact::RecordsParquet.file_name());
    sy_records::write_parquet(records, &parquet)?;
    let hash = |p: &Path| sy_cli::file_sha256(p).map_err(WriteFailure::File);
    Ok(RecordFiles {
        records: records.len() as u64,
        jsonl_bytes: std::fs::metadata(&jsonl)
            .map_err(|source| WriteFailure::Metadata {
                path: jsonl.clone(),
                source,
            })?
            .len(),
        jsonl_sha256: hash(&jsonl)?,
        parquet_sha256: hash(&parquet)?,
    })
}

/// The message of a record the deployment refused as misconfigured: the run stops there.
fn configuration_error(records: &[sy_records::Record]) -> Option<String> {
    records
        .iter()
        .find(|r| r.error_class == Some(sy_records::ErrorClass::Configuration))
        .map(|r| r.error_message.clone().unwrap_or_default())
}
