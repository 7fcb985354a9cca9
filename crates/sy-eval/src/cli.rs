//! The command line: `sy-eval --plan FILE --bundle FILE --run-dir DIR [--target sim|dynamo]
//! [--resume]`.

use std::path::PathBuf;

use clap::{CommandFactory, Parser};
use sy_cli::{CommonArgs, ToolError};
use sy_drive::TargetKind;

use crate::plan::LoadedPlan;
use crate::run::{RunOptions, run};

/// A command line that cannot run.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// Bad input.
    #[error("{flag} {url}: expected an http:// URL")]
    NotHttp { flag: &'static str, url: String },
    #[error("cannot start the async runtime: {0}")]
    AsyncRuntime(#[source] std::io::Error),
}

impl From<CliError> for ToolError {
    fn from(e: CliError) -> Self {
        match e {
            CliError::NotHttp { .. } => ToolError::BadInput(e.to_string()),
            CliError::AsyncRuntime(_) => ToolError::Runtime(e.to_string()),
        }
    }
}

/// The frozen rule, live, on multi-turn agent sessions: routes every turn of generated (or
/// traced) sessions with each variant exactly as a host would (observe both candidates, decide,
/// reserve, send, free), under the plan's background contention, and compares session
/// completion time and per-turn TTFT with grouped bootstrap intervals.
#[derive(Debug, Parser)]
#[command(
    name = "sy-eval",
    version,
    after_help = "Examples:\n  sy-eval --plan data/eval/helps.toml --bundle data/eval/bundle.json --run-dir runs/eval-helps --target sim\n  sy-eval --plan data/eval/dynamo-smoke.toml --bundle runs/node-a/bundle.json --run-dir runs/eval-a --target dynamo --resume"
)]
pub struct Args {
    /// The evaluation plan (TOML; see docs/eval.md and data/eval/).
    #[arg(long, value_name = "FILE", required_unless_present = "completions")]
    pub plan: Option<PathBuf>,
    /// The frozen bundle whose parameters every variant uses (default: RUN_DIR/bundle.json).
    #[arg(long, value_name = "FILE")]
    pub bundle: Option<PathBuf>,
    /// Where requests go: the embedded simulator (a fresh one per block; in a build with the
    /// `sim` feature), or a running Dynamo deployment.
    #[arg(long, value_enum, default_value = "sim")]
    pub target: TargetKind,
    /// Frontend URL for --target dynamo (default: the plan's `[target] frontend_url`, else
    /// http://127.0.0.1:18000, the local stack's port).
    #[arg(long, value_name = "URL")]
    pub frontend_url: Option<String>,
    /// Selection-service URL for --target dynamo (default: the plan's `[target] selection_url`,
    /// else http://127.0.0.1:18092, the local stack's port).
    #[arg(long, value_name = "URL")]
    pub selection_url: Option<String>,
    /// Simulator configuration (TOML) for --target sim (overrides the plan's `target.sim_config`).
    #[arg(long, value_name = "FILE")]
    pub sim_config: Option<PathBuf>,
    /// Continue an interrupted evaluation in --run-dir, skipping finished blocks.
    #[arg(long)]
    pub resume: bool,
    /// A/A check: run the plan's first variant in both arms (twice the plan's rounds, half of
    /// them each arm) and compare arm B with arm A; any verdict but `no significant
    /// difference` is a false one (scripts/aa-study.sh counts them over many runs).
    #[arg(long)]
    pub aa: bool,
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
    let Some(run_dir) = args.common.run_dir.clone() else {
        return Err(ToolError::BadInput(
            "--run-dir DIR is required (where the blocks, comparison.json and report.md go)".into(),
        ));
    };
    for (flag, url) in [
        ("--frontend-url", &args.frontend_url),
        ("--selection-url", &args.selection_url),
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
    let plan = LoadedPlan::from_path(&plan_path).map_err(crate::EvalError::from)?;
    let opts = RunOptions {
        bundle: args
            .bundle
            .clone()
            .unwrap_or_else(|| sy_rundir::Artifact::Bundle.path(&run_dir)),
        run_dir,
        target: args.target,
        frontend_url: args.frontend_url.clone(),
        selection_url: args.selection_url.clone(),
        sim_config: args.sim_config.clone(),
        resume: args.resume,
        show_progress: args.common.show_progress(),
        seed: args.common.seed,
        aa: args.aa,
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(CliError::AsyncRuntime)?;
    let outcome = rt.block_on(run(plan, opts))?;
    let c = &outcome.comparison;
    if args.common.json {
        let out = serde_json::json!({
            "run_id": outcome.manifest.run_id,
            "blocks_run": outcome.blocks_run,
            "report": outcome.report,
            "comparison": c,
        });
        println!(
            "{}",
            serde_json::to_string_pretty(&out).map_err(|e| ToolError::Runtime(e.to_string()))?
        );
    } else if !args.common.quiet {
        println!("{}", crate::report::tables(c));
        println!("report: {}", outcome.report.display());
    }
    Ok(())
}

/// The command line's clap definition, parsed without running anything (the docs tests check
/// that every documented command parses against it).
pub fn command() -> clap::Command {
    <Args as clap::CommandFactory>::command()
}
