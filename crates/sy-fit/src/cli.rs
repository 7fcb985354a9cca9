//! The `sy-fit` command line: load → split → fit → `fit.json` (+ `splits.json`).

use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::{Args, Parser, Subcommand};
use serde::Serialize;
use sy_cli::{CommonArgs, ToolError};
use sy_records::{
    LoadOptions, Phase, RecordsError, SPLITS_FILE, Split, SplitFractions, SplitTable,
};

use crate::fit::{ALPHA_RULE, FitConfig, default_alpha_grid, fit, parse_alpha_grid};
use crate::fitfile::{
    FIT_FILE, FIT_SCHEMA_VERSION, FitFile, FitSettings, RecordCounts, SplitInfo, ToolInfo,
};

/// Fit the no-load Q tables, standardisers and ridge load corrections from calibration records.
///
/// Reads the records of `--run-dir` (its newest complete source; see docs/formats.md) or
/// of `--records` (files or run directories, merged), assigns every load-phase condition to
/// fit / uncertainty / selection (reusing splits.json when it exists), and writes fit.json and
/// splits.json beside each other (the run directory, or the directory of `--out`).
#[derive(Debug, Parser)]
#[command(
    name = "sy-fit",
    version,
    args_conflicts_with_subcommands = true,
    after_help = "Examples:\n  sy-fit --run-dir runs/demo\n  sy-fit --run-dir runs/t1 --records data/demo/records.parquet --seed 7 --folds 5"
)]
pub struct Cli {
    #[command(flatten)]
    pub common: CommonArgs,
    #[command(flatten)]
    pub fit: FitArgs,
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// Flags of the fit.
#[derive(Debug, Clone, Args)]
pub struct FitArgs {
    /// Record files or run directories to read (repeatable; merged, condition ids namespaced by
    /// run id). Default: the run directory.
    #[arg(long, value_name = "PATH", num_args = 1..)]
    pub records: Vec<PathBuf>,
    /// Where to write fit.json (default: RUN_DIR/fit.json). splits.json goes beside it.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// The split table to reuse or create (default: splits.json beside the output).
    #[arg(long, value_name = "FILE")]
    pub splits: Option<PathBuf>,
    /// Fractions of conditions for fit, uncertainty, selection (default 0.6,0.2,0.2).
    #[arg(long, value_name = "F,U,S", value_parser = parse_fractions)]
    pub split_fractions: Option<SplitFractions>,
    /// Grouped cross-validation folds.
    #[arg(long, value_name = "K", default_value_t = crate::fit::DEFAULT_FOLDS)]
    pub folds: usize,
    /// Alpha grid: LO:HI:COUNT (log-spaced) or a comma list (default 1e-4:1e6:41).
    #[arg(long, value_name = "GRID", value_parser = parse_alpha_grid)]
    pub alpha_grid: Option<Vec<f64>>,
    /// Skip (count and report) invalid records instead of failing on the first one.
    #[arg(long)]
    pub skip_invalid: bool,
}

fn parse_fractions(s: &str) -> Result<SplitFractions, String> {
    s.parse()
}

/// Hidden helper commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Write synthetic records generated from a known truth (benchmarks and tests).
    #[command(hide = true)]
    GenSynthetic(GenArgs),
}

/// Flags of `gen-synthetic`.
#[derive(Debug, Clone, Args)]
pub struct GenArgs {
    /// Output file (.parquet, .csv or .jsonl) or directory (writes records.parquet in it).
    #[arg(long, value_name = "PATH")]
    pub out: PathBuf,
    /// Load-phase conditions.
    #[arg(long, default_value_t = 10_000)]
    pub conditions: usize,
    /// Repeats per condition (each repeat = one efficient + one capable record).
    #[arg(long, default_value_t = 50)]
    pub repeats: u32,
    /// Run id of the records.
    #[arg(long, default_value = "synth")]
    pub run_id: String,
}

/// The `--json` summary.
#[derive(Debug, Serialize)]
struct Summary<'a> {
    fit: String,
    splits: String,
    splits_reused: bool,
    records: RecordCounts,
    skipped_by_field: std::collections::BTreeMap<String, usize>,
    folds: usize,
    models: std::collections::BTreeMap<&'static str, ModelSummary>,
    warnings: &'a [String],
    seconds: f64,
}

#[derive(Debug, Serialize)]
struct ModelSummary {
    q_cells: usize,
    q_empty_cells: usize,
    blind_alpha: f64,
    cache_alpha: f64,
    blind_r2_ttft: Option<f64>,
    cache_r2_ttft: Option<f64>,
    blind_residual_std_ms: f64,
    cache_residual_std_ms: f64,
}

fn records_error(e: RecordsError) -> ToolError {
    if e.is_bad_input() {
        ToolError::BadInput(e.to_string())
    } else {
        ToolError::Runtime(e.to_string())
    }
}

/// Runs the CLI (after parsing).
pub fn run(cli: Cli) -> Result<(), ToolError> {
    if let Some(shell) = cli.common.completions {
        let mut cmd = <Cli as clap::CommandFactory>::command();
        sy_cli::print_completions(shell, &mut cmd);
        return Ok(());
    }
    sy_cli::init_tracing(&cli.common);
    cli.common.check_run_dir()?;
    match cli.command {
        Some(Command::GenSynthetic(args)) => gen_synthetic(&cli.common, &args),
        None => run_fit(&cli.common, &cli.fit),
    }
}

fn gen_synthetic(common: &CommonArgs, args: &GenArgs) -> Result<(), ToolError> {
    let path = if args.out.is_dir() || args.out.extension().is_none() {
        args.out.join("records.parquet")
    } else {
        args.out.clone()
    };
    let spec = sy_records::synth::SynthSpec {
        run_id: args.run_id.clone(),
        seed: common.seed.unwrap_or(1),
        conditions: args.conditions,
        repeats: args.repeats,
        ..Default::default()
    };
    let started = Instant::now();
    let records = sy_records::synth::generate(&spec);
    sy_records::write_records(&records, &path).map_err(records_error)?;
    if common.json {
        println!(
            "{}",
            serde_json::json!({"records": records.len(), "path": path.display().to_string(), "seconds": started.elapsed().as_secs_f64()})
        );
    } else if !common.quiet {
        println!("wrote {} records to {}", records.len(), path.display());
    }
    Ok(())
}

fn run_fit(common: &CommonArgs, args: &FitArgs) -> Result<(), ToolError> {
    let started = Instant::now();
    let out = match (&args.out, &common.run_dir) {
        (Some(o), _) => o.clone(),
        (None, Some(d)) => d.join(FIT_FILE),
        (None, None) => {
            return Err(ToolError::BadInput(
                "nothing to do: pass --run-dir DIR (or --records FILE... and --out FILE)".into(),
            ));
        }
    };
    let inputs: Vec<PathBuf> = if !args.records.is_empty() {
        args.records.clone()
    } else if let Some(d) = &common.run_dir {
        vec![d.clone()]
    } else {
        return Err(ToolError::BadInput(
            "no records: pass --run-dir DIR or --records FILE".into(),
        ));
    };
    let out_dir = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let splits_path = args
        .splits
        .clone()
        .unwrap_or_else(|| out_dir.join(SPLITS_FILE));

    // Every output path is checked before anything is read or written.
    sy_cli::check_output_path(&out, "--out")?;
    sy_cli::check_output_path(&splits_path, "--splits")?;
    if splits_path == out {
        return Err(ToolError::BadInput(format!(
            "--out {} and the split table are the same file",
            out.display()
        )));
    }
    let spinner = sy_cli::spinner(common.show_progress());
    spinner.set_message("loading records");
    let loaded = sy_records::ProbeTable::load(
        &inputs,
        &LoadOptions {
            skip_invalid: args.skip_invalid,
        },
    )
    .map_err(records_error)?;
    tracing::info!(
        "loaded {} records in {:.2} s",
        loaded.len(),
        started.elapsed().as_secs_f64()
    );
    tracing::info!("{}", loaded.pick_summary());
    for s in loaded.skipped().iter().take(20) {
        tracing::warn!("skipped: {s}");
    }
    if loaded.skipped().len() > 20 {
        tracing::warn!("… and {} more skipped rows", loaded.skipped().len() - 20);
    }
    for f in loaded.files() {
        if f.torn_tail {
            tracing::warn!("{}: torn last line ignored", f.path.display());
        }
        if !f.unknown_columns.is_empty() {
            tracing::warn!(
                "{}: ignored unknown columns {:?}",
                f.path.display(),
                f.unknown_columns
            );
        }
    }

    spinner.set_message("splitting");
    let (splits, reused) =
        SplitTable::load_or_build(&splits_path, &loaded, common.seed, args.split_fractions)
            .map_err(records_error)?;

    spinner.set_message("fitting");
    let config = FitConfig {
        folds: args.folds,
        alpha_grid: args.alpha_grid.clone().unwrap_or_else(default_alpha_grid),
        seed: splits.seed,
        coefficient_intervals: true,
    };
    let fit_started = Instant::now();
    // A fitting problem is one of the records': name the files they came from.
    let result = fit(&loaded, &splits, &config).map_err(|e| {
        let files: Vec<String> = loaded
            .files()
            .iter()
            .map(|f| f.path.display().to_string())
            .collect();
        ToolError::BadInput(format!("{}: {e}", files.join(", ")))
    })?;
    tracing::info!(
        "split and fitted in {:.2} s (fit alone {:.2} s)",
        started.elapsed().as_secs_f64(),
        fit_started.elapsed().as_secs_f64()
    );

    let mut counts = RecordCounts {
        skipped_invalid: loaded.skipped().len(),
        ..RecordCounts::default()
    };
    let condition_splits = loaded.condition_splits(&splits);
    for r in loaded.rows() {
        match r.phase() {
            Phase::Qgrid => counts.qgrid += 1,
            Phase::Load => match condition_splits[r.condition() as usize] {
                Some(Split::Fit) => counts.load_fit += 1,
                Some(Split::Uncertainty) => counts.load_uncertainty += 1,
                Some(Split::Selection) => counts.load_selection += 1,
                None => {}
            },
        }
    }
    let mut warnings = result.warnings.clone();
    if counts.skipped_invalid > 0 {
        warnings.push(format!(
            "{} invalid record(s) skipped: {:?}",
            counts.skipped_invalid,
            loaded.skipped_by_field()
        ));
    }
    let file = FitFile {
        schema_version: FIT_SCHEMA_VERSION,
        tool: ToolInfo {
            name: "sy-fit".to_string(),
            version: env!("CARGO_PKG_VERSION").to_string(),
        },
        inputs: loaded
            .files()
            .iter()
            .map(|f| f.path.display().to_string())
            .collect(),
        input_files: loaded
            .files()
            .iter()
            .map(|f| {
                Ok(sy_selector::InputFile {
                    path: f.path.display().to_string(),
                    sha256: sy_cli::file_sha256(&f.path)?,
                })
            })
            .collect::<Result<Vec<_>, ToolError>>()?,
        split: SplitInfo {
            file: splits_path.display().to_string(),
            seed: splits.seed,
            fractions: splits.fractions,
            conditions: splits.counts,
        },
        settings: FitSettings {
            folds: result.folds,
            alpha_grid: config.alpha_grid.clone(),
            alpha_rule: ALPHA_RULE.to_string(),
            objective: "sum over fit-split rows of (TTFT − Q − b0 − b·z)² + alpha·|b|² (intercept not penalised)".to_string(),
        },
        records: counts,
        models: result.models,
        warnings,
    };
    spinner.set_message("writing");
    // Both files or neither.
    sy_cli::atomic_write_all(&[
        (
            splits_path.clone(),
            sy_cli::json_bytes(&splits_path, &splits)?,
        ),
        (out.clone(), sy_cli::json_bytes(&out, &file)?),
    ])?;
    spinner.finish_and_clear();

    for w in &file.warnings {
        tracing::warn!("{w}");
    }
    print_summary(
        common,
        &file,
        &out,
        &splits_path,
        reused,
        &loaded,
        started.elapsed().as_secs_f64(),
    )
}

fn print_summary(
    common: &CommonArgs,
    file: &FitFile,
    out: &Path,
    splits_path: &Path,
    reused: bool,
    loaded: &sy_records::ProbeTable,
    seconds: f64,
) -> Result<(), ToolError> {
    let model_summary = |m: &crate::fit::ModelFit| ModelSummary {
        q_cells: m.q_table.cells.len(),
        q_empty_cells: m.q_table.empty_cells.len(),
        blind_alpha: m.blind.alpha,
        cache_alpha: m.cache.alpha,
        blind_r2_ttft: m.blind.r2_ttft,
        cache_r2_ttft: m.cache.r2_ttft,
        blind_residual_std_ms: m.blind.residuals.std_ms,
        cache_residual_std_ms: m.cache.residuals.std_ms,
    };
    if common.json {
        let mut models = std::collections::BTreeMap::new();
        models.insert("efficient", model_summary(&file.models.efficient));
        models.insert("capable", model_summary(&file.models.capable));
        let s = Summary {
            fit: out.display().to_string(),
            splits: splits_path.display().to_string(),
            splits_reused: reused,
            records: file.records,
            skipped_by_field: loaded.skipped_by_field(),
            folds: file.settings.folds,
            models,
            warnings: &file.warnings,
            seconds,
        };
        // One compact line, as every tool's --json output.
        let text = serde_json::to_string(&s)
            .map_err(|e| ToolError::Runtime(format!("cannot print the summary: {e}")))?;
        println!("{text}");
        return Ok(());
    }
    if common.quiet {
        return Ok(());
    }
    let r = &file.records;
    println!(
        "records: {} Q-grid, load {} fit / {} uncertainty / {} selection, {} skipped",
        r.qgrid, r.load_fit, r.load_uncertainty, r.load_selection, r.skipped_invalid
    );
    println!(
        "splits: {} ({}; seed {})",
        splits_path.display(),
        if reused { "reused" } else { "new" },
        file.split.seed
    );
    for (name, m) in [
        ("efficient", &file.models.efficient),
        ("capable", &file.models.capable),
    ] {
        let q = &m.q_table;
        println!(
            "{name}: Q table {}×{} ({} empty), standardiser on {} rows",
            m.estimators.q.n_axis().len(),
            m.estimators.q.f_axis().len(),
            q.empty_cells.len(),
            m.standardiser.rows
        );
        for (est, c, lc) in [
            ("blind", &m.blind, &m.estimators.blind),
            ("cache", &m.cache, &m.estimators.cache),
        ] {
            println!(
                "  {est}: alpha {:.3e}, b0 {:.2} bN {:.2} bR {:.2} bP {:.2}; R² (TTFT) {}; residual std {:.2} ms, p90 |e| {:.2} ms",
                c.alpha,
                lc.intercept,
                lc.coef[0],
                lc.coef[1],
                lc.coef[2],
                c.r2_ttft.map_or("n/a".to_string(), |v| format!("{v:.4}")),
                c.residuals.std_ms,
                c.residuals.p90_abs_ms
            );
        }
    }
    if !file.warnings.is_empty() {
        println!("{} warning(s) (see fit.json)", file.warnings.len());
    }
    println!("wrote {} in {seconds:.2} s", out.display());
    Ok(())
}
