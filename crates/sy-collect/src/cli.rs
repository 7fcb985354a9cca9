//! The command line: `sy-collect --plan FILE --run-dir DIR [--target sim|dynamo] [--resume]
//! [--dry-run] [--no-progress]`.

use std::path::PathBuf;

use clap::{CommandFactory, Parser};
use sy_cli::{CommonArgs, ToolError};

use crate::deployment::{DescriptionError, EndpointError};
use crate::estimate::{DryRun, dry_run};
use crate::plan::{LoadedPlan, Plan};
use crate::preflight::PreflightOptions;
use crate::run::{RunOptions, run};
use sy_drive::{Endpoints, TargetKind};

/// A command line that cannot run (bad input, exit 2), or a run whose outcome is a failure
/// (exit 1).
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error("--kv-events: worker {0} is given twice (list all its ranks in one argument)")]
    KvEventsTwice(u64),
    #[error(transparent)]
    Description(#[from] DescriptionError),
    #[error("{flag} {url}: expected an http:// URL")]
    NotHttp { flag: &'static str, url: String },
    #[error("cannot start the async runtime: {0}")]
    AsyncRuntime(#[source] std::io::Error),
    #[error(
        "preflight: {problems} problem(s), the plan {} does not fit the deployment (see above)",
        .plan.display()
    )]
    PlanDoesNotFit { problems: usize, plan: PathBuf },
    #[error("preflight: {0} problem(s), the deployment is not fit to calibrate (see above)")]
    DeploymentUnfit(usize),
    #[error(
        "{}: the run fails the data-quality check ({}); see {}",
        .dir.display(),
        .failed.join(", "),
        .dir.join(sy_rundir::Artifact::Check.file_name()).display()
    )]
    CheckFailed { dir: PathBuf, failed: Vec<String> },
    #[error(
        "interrupted after {done}/{total} units; the records so far are intact: rerun with \
         --resume"
    )]
    Interrupted { done: u64, total: u64 },
    #[error(
        "the run finished but the selection service still shows booked load ({0} reservations \
         could not be deleted)"
    )]
    BookedLoadLeft(usize),
}

impl CliError {
    /// Whether the caller's input is at fault (exit 2) rather than the run (exit 1).
    pub fn is_bad_input(&self) -> bool {
        matches!(
            self,
            CliError::KvEventsTwice(_)
                | CliError::Description(_)
                | CliError::NotHttp { .. }
                | CliError::PlanDoesNotFit { .. }
        )
    }
}

impl From<CliError> for ToolError {
    fn from(e: CliError) -> Self {
        if e.is_bad_input() {
            ToolError::BadInput(e.to_string())
        } else {
            ToolError::Runtime(e.to_string())
        }
    }
}

/// A `--kv-events` argument that cannot be read; the message quotes it.
#[derive(Debug, thiserror::Error)]
pub enum KvEventsArgError {
    #[error("{0}: expected WORKER_ID=tcp://HOST:PORT")]
    NoWorkerId(String),
    #[error("{arg}: worker id {id:?} is not an unsigned integer")]
    BadWorkerId { arg: String, id: String },
    #[error("{arg}: {source}")]
    Endpoints {
        arg: String,
        #[source]
        source: EndpointError,
    },
}

/// Calibration load generator: drives Dynamo (or the embedded simulator) with controlled
/// workload conditions and records paired probes of both candidate models.
#[derive(Debug, Parser)]
#[command(
    name = "sy-collect",
    version,
    subcommand_negates_reqs = true,
    after_help = "Examples:\n  sy-collect --plan data/plans/demo.toml --dry-run\n  sy-collect --plan data/plans/demo.toml --run-dir runs/demo --target sim\n  sy-collect preflight --plan data/plans/example.toml --target dynamo\n  sy-collect --plan data/plans/example.toml --run-dir runs/node-a --target dynamo --resume"
)]
pub struct Args {
    #[command(subcommand)]
    pub command: Option<Command>,
    /// The plan (TOML; see schemas/plan.schema.json and data/plans/).
    #[arg(long, global = true, value_name = "FILE")]
    pub plan: Option<PathBuf>,
    /// Where requests go: the embedded simulator (in a build with the `sim` feature), or a
    /// running Dynamo deployment (default: dynamo).
    #[arg(long, global = true, value_enum)]
    pub target: Option<TargetKind>,
    /// Frontend URL (default: the plan's `[target] frontend_url`, else http://127.0.0.1:18000, the
    /// local stack's port; a GPU deployment's is usually :8000, as in data/plans/example.toml).
    #[arg(long, global = true, value_name = "URL")]
    pub frontend_url: Option<String>,
    /// Selection-service URL (default: the plan's `[target] selection_url`, else
    /// http://127.0.0.1:18092, the local stack's port; data/plans/example.toml uses :8092).
    #[arg(long, global = true, value_name = "URL")]
    pub selection_url: Option<String>,
    /// Simulator configuration (TOML) for --target sim (default: two models, two workers each).
    #[arg(long, global = true, value_name = "FILE")]
    pub sim_config: Option<PathBuf>,
    /// Do not register workers the frontend lists but the selection service does not know.
    #[arg(long, global = true)]
    pub no_register: bool,
    /// KV-event endpoints of a worker the preflight registers, one per data-parallel rank
    /// (WORKER_ID=tcp://HOST:PORT, WORKER_ID=tcp://HOST:FIRST-LAST for a port per rank, or a
    /// comma-separated list; repeatable): the frontend does not report them.
    #[arg(long, global = true, value_name = "ID=ENDPOINTS", value_parser = parse_kv_events)]
    pub kv_events: Vec<(u64, Vec<String>)>,
    /// The deployment description (TOML: each worker's system URL and KV-event ports, GPU,
    /// driver, launch commands; docs/gpu.md): registers workers without hand-copied ids and
    /// goes into the run manifest.
    #[arg(long, global = true, value_name = "FILE")]
    pub describe: Option<PathBuf>,
    /// Continue an interrupted run in --run-dir, skipping complete (condition, repeat) units.
    #[arg(long)]
    pub resume: bool,
    /// Collect the plan's [load] grid in rounds and stop when the change versus Stage is known
    /// (the plan's [adaptive] section: rounds, budget, stopping rule; see docs/adaptive.md).
    #[arg(long)]
    pub adaptive: bool,
    /// Print the request count and estimated duration and GPU time per phase, writing
    /// nothing; for a plan with an [adaptive] section also its range (best case .. budget;
    /// with --json the `adaptive` object). With --target or a URL: the preflight, then a short
    /// pilot of the plan's own units on that target; without: built-in speeds.
    #[arg(long)]
    pub dry_run: bool,
    /// Skip the preflight (discovery, registration, KV-event and TTFT checks) before a run.
    #[arg(long)]
    pub no_preflight: bool,
    /// Skip the unrecorded warm-up of every worker rank before the first unit (on by default
    /// with --target dynamo; see the plan's `[target] warmup_requests`).
    #[arg(long)]
    pub no_warmup: bool,
    #[command(flatten)]
    pub common: CommonArgs,
}

/// Subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Discover the deployment (models, workers, ranks, block size, registered prefill
    /// capacity), register unregistered workers, check KV events and client vs server TTFT,
    /// print a table. Exit 0 fit, 1 deployment problem, 2 the plan does not fit.
    Preflight {
        /// Discovery and registration only: send no priming or probe request.
        #[arg(long)]
        no_probes: bool,
        /// Wait up to DURATION (90s, 10m, 1h) until both models and every worker instance with
        /// its data-parallel ranks are listed and stable, printing what it waits for.
        #[arg(long, value_name = "DURATION", value_parser = crate::deployment::parse_duration)]
        wait: Option<std::time::Duration>,
    },
    /// Judge a collected run before anything is fitted: client − server TTFT gap, cached tokens
    /// against K, Q monotonic, failures, loads at the end, advisory disagreement, contention
    /// seen, cache contamination, over-saturation. Prints the verdict, writes RUN_DIR/check.json.
    /// Exit 0 pass, 1 fail, 2 bad input.
    Check {
        /// The run directory (records and manifest).
        #[arg(value_name = "RUN_DIR")]
        dir: PathBuf,
        /// Override a bound (NAME=VALUE, repeatable; names and defaults in docs/check.md).
        #[arg(long, value_name = "NAME=VALUE", value_parser = crate::check::parse_bound)]
        bound: Vec<(String, f64)>,
    },
}

fn parse_kv_events(s: &str) -> Result<(u64, Vec<String>), KvEventsArgError> {
    let (id, ep) = s
        .split_once('=')
        .ok_or_else(|| KvEventsArgError::NoWorkerId(s.to_string()))?;
    let id = id
        .trim()
        .parse()
        .map_err(|_| KvEventsArgError::BadWorkerId {
            arg: s.to_string(),
            id: id.to_string(),
        })?;
    let eps =
        crate::deployment::parse_endpoints(ep).map_err(|source| KvEventsArgError::Endpoints {
            arg: s.to_string(),
            source,
        })?;
    Ok((id, eps))
}

impl Args {
    fn target_kind(&self) -> TargetKind {
        self.target.unwrap_or(TargetKind::Dynamo)
    }

    /// Whether a target was named (then `--dry-run` measures a pilot on it).
    fn target_named(&self) -> bool {
        self.target.is_some() || self.frontend_url.is_some() || self.selection_url.is_some()
    }

    fn preflight_options(
        &self,
        probes: bool,
        wait: Option<std::time::Duration>,
    ) -> Result<PreflightOptions, ToolError> {
        let mut kv = std::collections::BTreeMap::new();
        for (id, eps) in &self.kv_events {
            if kv.insert(*id, eps.clone()).is_some() {
                return Err(CliError::KvEventsTwice(*id).into());
            }
        }
        let describe = match &self.describe {
            Some(p) => Some(crate::deployment::load(p).map_err(CliError::from)?),
            None => None,
        };
        Ok(PreflightOptions {
            register: !self.no_register,
            kv_events: kv,
            describe,
            wait,
            probes,
        })
    }

    fn url_overrides(&self) -> Result<Endpoints, ToolError> {
        for (flag, url) in [
            ("--frontend-url", &self.frontend_url),
            ("--selection-url", &self.selection_url),
        ] {
            if let Some(u) = url
                && !u.starts_with("http://")
            {
                return Err(CliError::NotHttp {
                    flag,
                    url: u.clone(),
                }
                .into());
            }
        }
        Ok(Endpoints {
            frontend_url: self.frontend_url.clone(),
            selection_url: self.selection_url.clone(),
            sim_config: self.sim_config.clone(),
        })
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, ToolError> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| CliError::AsyncRuntime(e).into())
}

/// `--json`: one compact JSON document on stdout (every tool's convention).
fn print_json<T: serde::Serialize>(v: &T) -> Result<(), ToolError> {
    let text = serde_json::to_string(v).map_err(|e| ToolError::Runtime(e.to_string()))?;
    println!("{text}");
    Ok(())
}

fn print_dry_run(args: &Args, plan: &LoadedPlan, d: &DryRun) -> Result<(), ToolError> {
    let range = crate::adaptive::dry_run_range(&plan.plan, d);
    if args.common.json {
        return print_json(&crate::adaptive::DryRunReport {
            dry_run: d,
            adaptive: range,
        });
    }
    println!("plan {}", plan.path.display());
    println!(
        "  {} conditions, {} units ({} qgrid, {} load)",
        d.conditions, d.units, d.qgrid_units, d.load_units
    );
    println!(
        "  {} foreground requests (probes and primes), {} background slots",
        d.foreground_requests, d.background_slots
    );
    // Without GPUs per rank (--describe) the multiplier is data-parallel ranks only.
    let label = if d.gpus_per_rank_known {
        "GPU time"
    } else {
        "rank time"
    };
    for (phase, e) in &d.phases {
        let gpu = e
            .gpu_seconds
            .map_or_else(|| "unknown".to_string(), |g| format!("{:.2} h", g / 3600.0));
        println!(
            "  {phase:<6} {:>5} units  estimated {:>8.0} s  {label} {gpu}",
            e.units, e.seconds
        );
    }
    println!(
        "  estimated duration: {:.0} s ({})",
        d.estimated_seconds, d.basis
    );
    println!("  assuming {}", d.assumptions);
    if let Some(r) = range {
        let gpu = match (r.best_case_gpu_seconds, r.budget_gpu_seconds) {
            (Some(a), Some(b)) => format!(", {label} {:.2} to {:.2} h", a / 3600.0, b / 3600.0),
            _ => String::new(),
        };
        let budget = r.gpu_budget.map_or(String::new(), |g| {
            format!("; GPU-time budget {g} GPU-seconds")
        });
        println!(
            "  adaptive (--adaptive): {} to {} load units (first verdict possible .. budget), estimated {:.0} to {:.0} s with the Q grid ({}){gpu}{budget}",
            r.best_case_load_units,
            r.budget_load_units,
            r.best_case_seconds,
            r.budget_seconds,
            d.basis
        );
    }
    Ok(())
}

/// `--dry-run`: built-in speeds, or the preflight and a pilot on the named target.
fn main_dry_run(args: &Args, plan: &LoadedPlan) -> Result<(), ToolError> {
    if !args.target_named() {
        return print_dry_run(args, plan, &dry_run(&plan.plan, None));
    }
    let urls = args.url_overrides()?;
    let describe = match &args.describe {
        Some(p) => Some(crate::deployment::load(p).map_err(CliError::from)?),
        None => None,
    };
    let (pre, d) = runtime()?.block_on(crate::run::pilot_dry_run(
        &plan.plan,
        args.target_kind(),
        &urls,
        describe.as_ref(),
    ))?;
    match d {
        Some(d) => print_dry_run(args, plan, &d),
        None => {
            eprint!("{}", pre.render_text());
            let e = pre
                .blocking_error()
                .unwrap_or(crate::preflight::PreflightError::NoPilot);
            Err(crate::CollectError::from(e).into())
        }
    }
}

/// `sy-collect preflight`: prints the table (or JSON) and exits with its status.
fn main_preflight(
    args: &Args,
    plan: &LoadedPlan,
    probes: bool,
    wait: Option<std::time::Duration>,
) -> Result<(), ToolError> {
    let urls = args.url_overrides()?;
    let opts = args.preflight_options(probes, wait)?;
    let report = runtime()?.block_on(crate::run::preflight_only(
        &plan.plan,
        args.target_kind(),
        &urls,
        &opts,
    ))?;
    if args.common.json {
        print_json(&report)?;
    } else {
        print!("{}", report.render_text());
    }
    let n = report
        .problems
        .iter()
        .filter(|p| p.severity != crate::preflight::Severity::Warning)
        .count();
    match report.exit_code() {
        0 => Ok(()),
        2 => Err(CliError::PlanDoesNotFit {
            problems: n,
            plan: plan.path.clone(),
        }
        .into()),
        _ => Err(CliError::DeploymentUnfit(n).into()),
    }
}

/// Runs the tool; returns the error to report.
pub fn main_with(args: Args) -> Result<(), ToolError> {
    if let Some(shell) = args.common.completions {
        sy_cli::print_completions(shell, &mut Args::command());
        return Ok(());
    }
    sy_cli::init_tracing(&args.common);
    if let Some(Command::Check { dir, bound }) = &args.command {
        let opts = crate::check::options_with(bound)?;
        let report = crate::check::check_run_dir(dir, &opts)?;
        if args.common.json {
            print_json(&report)?;
        } else if !args.common.quiet {
            print!("{}", report.render_text());
        }
        return if report.passed() {
            Ok(())
        } else {
            Err(CliError::CheckFailed {
                dir: dir.clone(),
                failed: report.failed().iter().map(|f| f.to_string()).collect(),
            }
            .into())
        };
    }
    let Some(plan_path) = args.plan.clone() else {
        return Err(ToolError::BadInput("--plan FILE is required".into()));
    };
    let mut plan = Plan::from_path(&plan_path).map_err(crate::CollectError::from)?;
    if let Some(seed) = args.common.seed {
        plan.plan.seed = seed;
    }
    if let Some(Command::Preflight { no_probes, wait }) = &args.command {
        return main_preflight(&args, &plan, !no_probes, *wait);
    }
    if args.dry_run {
        return main_dry_run(&args, &plan);
    }
    args.common.check_run_dir()?;
    let Some(run_dir) = args.common.run_dir.clone() else {
        return Err(ToolError::BadInput(
            "--run-dir DIR is required (where records.jsonl and manifest.json go)".into(),
        ));
    };
    let opts = RunOptions {
        run_dir,
        target: args.target_kind(),
        urls: args.url_overrides()?,
        resume: args.resume,
        show_progress: args.common.show_progress(),
        seed: args.common.seed,
        preflight: if args.no_preflight {
            None
        } else {
            Some(args.preflight_options(true, None)?)
        },
        warmup: args.no_warmup.then_some(0),
        describe: match &args.describe {
            Some(p) => Some(crate::deployment::load(p).map_err(CliError::from)?),
            None => None,
        },
    };
    if args.adaptive {
        return main_adaptive(&args, plan, opts);
    }
    let summary = runtime()?.block_on(run(plan, opts))?;
    let m = &summary.manifest;
    if args.common.json {
        print_json(m)?;
    } else if !args.common.quiet {
        eprint!("{}", crate::summary::render(&m.summary));
        eprintln!(
            "{}: {}/{} units, {} records ({} ok, {} error), {} retried attempts, loads zero at end: {}",
            m.run_id,
            m.units_done,
            m.units_total,
            m.counts.records,
            m.counts.ok,
            m.counts.error,
            m.counts.retried_attempts,
            m.loads_zero_at_end
                .map_or("unknown".to_string(), |b| b.to_string())
        );
    }
    if summary.interrupted {
        return Err(CliError::Interrupted {
            done: m.units_done,
            total: m.units_total,
        }
        .into());
    }
    if !m.outstanding_reservations.is_empty() || m.loads_zero_at_end == Some(false) {
        return Err(CliError::BookedLoadLeft(m.outstanding_reservations.len()).into());
    }
    Ok(())
}

/// `--adaptive`: the rounds, then what they found.
fn main_adaptive(args: &Args, plan: LoadedPlan, opts: RunOptions) -> Result<(), ToolError> {
    let out = runtime()?.block_on(crate::adaptive::run_adaptive(plan, opts))?;
    if args.common.json {
        print_json(&out.file)?;
    } else if !args.common.quiet {
        for line in out.file.summary_lines() {
            eprintln!("{line}");
        }
    }
    if out.interrupted {
        return Err(ToolError::Runtime(
            "interrupted; the records so far are intact: rerun with --adaptive --resume".into(),
        ));
    }
    if let Some(m) = out.last.as_ref().map(|s| &s.manifest)
        && (!m.outstanding_reservations.is_empty() || m.loads_zero_at_end == Some(false))
    {
        return Err(ToolError::Runtime(format!(
            "the run finished but the selection service still shows booked load ({} reservations \
             could not be deleted)",
            m.outstanding_reservations.len()
        )));
    }
    Ok(())
}

/// The command line's clap definition, parsed without running anything (the docs tests check
/// that every documented command parses against it).
pub fn command() -> clap::Command {
    <Args as clap::CommandFactory>::command()
}
