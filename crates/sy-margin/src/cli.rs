//! `sy-margin`: the 90th-percentile error margins of the predicted TTFT advantage.

use std::path::PathBuf;
use std::process::ExitCode;
use sy_rundir::Artifact;

use crate::{DEFAULT_LEVEL, MarginOptions, inputs};
use clap::Parser;
use sy_calibration::margins::MarginEstimate;
use sy_cli::{CacheArgs, CommonArgs, ToolError};

/// Computes delta_blind and delta_cache on the uncertainty split and writes margins.json.
#[derive(Debug, Parser)]
#[command(
    name = "sy-margin",
    version,
    about,
    long_about = None,
    after_help = "Examples:\n  sy-margin --run-dir runs/demo\n  sy-margin --run-dir runs/t1 --records data/demo/records.parquet --json"
)]
struct Cli {
    #[command(flatten)]
    common: CommonArgs,
    #[command(flatten)]
    cache: CacheArgs,
    /// Record files or run directories (default: the run directory).
    #[arg(long, value_name = "PATH", num_args = 1..)]
    records: Vec<PathBuf>,
    /// fit.json (default: RUN_DIR/fit.json).
    #[arg(long, value_name = "FILE")]
    fit: Option<PathBuf>,
    /// splits.json (default: RUN_DIR/splits.json).
    #[arg(long, value_name = "FILE")]
    splits: Option<PathBuf>,
    /// Output file (default: RUN_DIR/margins.json).
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Percentile level of the margin.
    #[arg(long, default_value_t = DEFAULT_LEVEL)]
    level: f64,
    /// Skip (count and report) invalid record rows instead of failing.
    #[arg(long)]
    skip_invalid: bool,
}

/// The tool's entry point: parses the command line, runs, maps the result to the exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Some(done) = cli.common.start::<Cli>() {
        return done;
    }
    sy_cli::run_main(|| run(&cli))
}

fn run(cli: &Cli) -> Result<(), ToolError> {
    cli.common.check_run_dir()?;
    let run_dir = cli.common.run_dir.as_deref();
    let opts = MarginOptions {
        records: inputs::record_paths(&cli.records, run_dir)?,
        fit: inputs::input_path(cli.fit.as_deref(), run_dir, Artifact::Fit, "--fit")?,
        splits: inputs::input_path(cli.splits.as_deref(), run_dir, Artifact::Splits, "--splits")?,
        out: inputs::input_path(cli.out.as_deref(), run_dir, Artifact::Margins, "--out")?,
        level: cli.level,
        records_cache: cli.cache.path(run_dir),
        skip_invalid: cli.skip_invalid,
    };
    sy_cli::check_output_path(&opts.out, "--out")?;
    let mut dirs = vec![sy_cli::dir_of(&opts.out)];
    dirs.extend(opts.records_cache.as_deref().map(sy_cli::dir_of));
    let _locks = sy_cli::lock_output_dirs("sy-margin", sy_rundir::RunKind::Calibration, &dirs)?;
    sy_rundir::check_output_target(&opts.out)?;
    let mut phases = Some(sy_cli::Phases::new(cli.common.show_progress()));
    let m = crate::write_margins(&opts, &mut |phase| match phase {
        Some(name) => {
            if let Some(p) = phases.as_mut() {
                p.start(name);
            }
        }
        None => {
            if let Some(p) = phases.take() {
                p.finish();
            }
        }
    })?;
    if cli.common.json {
        let by_estimator = |value: fn(&MarginEstimate) -> serde_json::Value| {
            (m.estimators().into_iter())
                .map(|(e, em)| (e.as_str().to_string(), value(&em.estimate)))
                .collect::<serde_json::Map<_, _>>()
        };
        let summary = serde_json::json!({
            "out": opts.out.display().to_string(),
            "delta_blind_ms": m.delta_blind_ms,
            "delta_cache_ms": m.delta_cache_ms,
            "conditions": by_estimator(|e| e.conditions.into()),
            "conformal_ms": by_estimator(|e| e.conformal_ms.into()),
            "per_probe_delta_ms": by_estimator(|e| e.per_probe_delta_ms.into()),
            "repeats": m.blind.estimate.repeats,
            "pairs_in_split": m.pairs_in_split,
            "pairs_unmeasured": m.pairs_unmeasured,
            "warnings": m.warnings,
        });
        println!("{summary}");
    } else if !cli.common.quiet {
        for (estimator, em) in m.estimators() {
            let (name, e) = (estimator.as_str(), &em.estimate);
            println!(
                "delta_{name} = {:.3} ms  (G = {} conditions, conformal {} (rank {}), per-probe p90 {}, pairs {} used / {} excluded)",
                e.delta_ms.unwrap_or(f64::NAN),
                e.conditions,
                e.conformal_ms
                    .map_or("inf".to_string(), |v| format!("{v:.3} ms")),
                e.conformal_rank,
                e.per_probe_delta_ms
                    .map_or("-".to_string(), |v| format!("{v:.3} ms")),
                e.pairs_used,
                e.pairs_excluded
            );
        }
        if let Some(r) = &m.blind.estimate.repeats {
            println!(
                "repeats per condition: min {}, median {}, mean {:.2}, max {}",
                r.min, r.median, r.mean, r.max
            );
        }
        println!("wrote {}", opts.out.display());
    }
    Ok(())
}

/// The command line's clap definition, parsed without running anything (the docs tests check
/// that every documented command parses against it).
pub fn command() -> clap::Command {
    <Cli as clap::CommandFactory>::command()
}
