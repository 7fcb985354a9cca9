//! The command line: `sy-collect --plan FILE --run-dir DIR [--target sim|dynamo] [--resume]
//! [--dry-run] [--no-progress]`.

use std::path::PathBuf;

use clap::{CommandFactory, Parser};
use sy_cli::{CommonArgs, ToolError};

use crate::plan::Plan;
use crate::run::{RunOptions, dry_run, run};
use crate::target::{TargetKind, UrlOverrides};

/// Calibration load generator: drives Dynamo (or the embedded simulator) with controlled
/// workload conditions and records paired probes of both candidate models.
#[derive(Debug, Parser)]
#[command(
    name = "sy-collect",
    version,
    after_help = "Examples:\n  sy-collect --plan data/plans/demo.toml --dry-run\n  sy-collect --plan data/plans/demo.toml --run-dir runs/demo --target sim\n  sy-collect --plan data/plans/example.toml --run-dir runs/node-a --target dynamo --resume"
)]
pub struct Args {
    /// The plan (TOML; see schemas/plan.schema.json and data/plans/).
    #[arg(long, value_name = "FILE", required_unless_present = "completions")]
    pub plan: Option<PathBuf>,
    /// Where requests go: the embedded simulator, or a running Dynamo deployment.
    #[arg(long, value_enum, default_value = "dynamo")]
    pub target: TargetKind,
    /// Frontend URL (overrides the plan; default http://127.0.0.1:18000).
    #[arg(long, value_name = "URL")]
    pub frontend_url: Option<String>,
    /// Selection-service URL (overrides the plan; default http://127.0.0.1:18092).
    #[arg(long, value_name = "URL")]
    pub selection_url: Option<String>,
    /// Simulator configuration (TOML) for --target sim (default: two models, two workers each).
    #[arg(long, value_name = "FILE")]
    pub sim_config: Option<PathBuf>,
    /// Continue an interrupted run in --run-dir, skipping complete (condition, repeat) units.
    #[arg(long)]
    pub resume: bool,
    /// Print the request count and estimated duration of the plan, send nothing.
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    pub common: CommonArgs,
}

/// Runs the tool; returns the error to report.
pub fn main_with(args: Args) -> Result<(), ToolError> {
    if let Some(shell) = args.common.completions {
        sy_cli::print_completions(shell, &mut Args::command());
        return Ok(());
    }
    sy_cli::init_tracing(&args.common);
    let Some(plan_path) = args.plan.clone() else {
        return Err(ToolError::BadInput("--plan FILE is required".into()));
    };
    let mut plan = Plan::from_path(&plan_path).map_err(crate::CollectError::from)?;
    if let Some(seed) = args.common.seed {
        plan.plan.seed = seed;
    }
    if args.dry_run {
        let d = dry_run(&plan.plan);
        if args.common.json {
            let text = serde_json::to_string(&d).map_err(|e| ToolError::Runtime(e.to_string()))?;
            println!("{text}");
        } else {
            println!("plan {}", plan_path.display());
            println!(
                "  {} conditions, {} units ({} qgrid, {} load)",
                d.conditions, d.units, d.qgrid_units, d.load_units
            );
            println!(
                "  {} foreground requests (probes and primes), {} background slots",
                d.foreground_requests, d.background_slots
            );
            println!("  estimated duration: {:.0} s", d.estimated_seconds);
            println!("  assuming {}", d.assumptions);
        }
        return Ok(());
    }
    args.common.check_run_dir()?;
    let Some(run_dir) = args.common.run_dir.clone() else {
        return Err(ToolError::BadInput(
            "--run-dir DIR is required (where records.jsonl and manifest.json go)".into(),
        ));
    };
    for (flag, url) in [
        ("--frontend-url", &args.frontend_url),
        ("--selection-url", &args.selection_url),
    ] {
        if let Some(u) = url
            && !u.starts_with("http://")
        {
            return Err(ToolError::BadInput(format!(
                "{flag} {u}: expected an http:// URL"
            )));
        }
    }
    let opts = RunOptions {
        run_dir,
        target: args.target,
        urls: UrlOverrides {
            frontend_url: args.frontend_url.clone(),
            selection_url: args.selection_url.clone(),
            sim_config: args.sim_config.clone(),
        },
        resume: args.resume,
        show_progress: args.common.show_progress(),
        seed: args.common.seed,
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| ToolError::Runtime(format!("cannot start the async runtime: {e}")))?;
    let summary = rt.block_on(run(plan, opts))?;
    let m = &summary.manifest;
    if args.common.json {
        let text = serde_json::to_string(m).map_err(|e| ToolError::Runtime(e.to_string()))?;
        println!("{text}");
    } else if !args.common.quiet {
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
        return Err(ToolError::Runtime(format!(
            "interrupted after {}/{} units; the records so far are intact: rerun with --resume",
            m.units_done, m.units_total
        )));
    }
    if !m.outstanding_reservations.is_empty() || m.loads_zero_at_end == Some(false) {
        return Err(ToolError::Runtime(format!(
            "the run finished but the selection service still shows booked load ({} reservations \
             could not be deleted)",
            m.outstanding_reservations.len()
        )));
    }
    Ok(())
}
