//! The `sy-fit` command line: load → split → fit → `fit.json` (+ `splits.json`).

use std::path::{Path, PathBuf};
use std::time::Instant;
use sy_rundir::Artifact;

use clap::{Args, Parser, Subcommand};
use serde::Serialize;
use sy_cli::{CacheArgs, CommonArgs, RunDirError, RunError};
use sy_records::{LoadOptions, Phase, ProbeTable, RecordsError, Split, SplitFractions, SplitTable};

use crate::fit::{
    ALPHA_RULE, FitConfig, FitError, FitResult, default_alpha_grid, fit, parse_alpha_grid,
};
use sy_rundir::FIT_SCHEMA_VERSION;
use sy_rundir::artifact::fit::{
    DataCheck, DataCheckRun, FitFile, FitSettings, RecordCounts, SplitInfo, ToolInfo,
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
    /// Fit a collected run even when it fails the data-quality check (`sy-collect check`);
    /// fit.json's `data_check` and a warning then say so.
    #[arg(long)]
    pub accept_failed_check: bool,
    #[command(flatten)]
    pub cache: CacheArgs,
}

fn parse_fractions(s: &str) -> Result<SplitFractions, sy_records::FractionsError> {
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
    /// Whom each load-phase condition's background loads: `targeted` (the efficient model, the
    /// capable one or both, at random, as sy-collect's plans vary it: a busy efficient worker
    /// beside an idle capable one makes capable faster for some turns) or `both` (every
    /// condition loads both models: capable is never faster and no rule ever overrides).
    #[arg(long, value_enum, default_value_t = ContentionArg::Targeted)]
    pub contention: ContentionArg,
}

/// `--contention` ([`sy_records::synth::Contention`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ContentionArg {
    Targeted,
    Both,
}

impl From<ContentionArg> for sy_records::synth::Contention {
    fn from(c: ContentionArg) -> Self {
        match c {
            ContentionArg::Targeted => sy_records::synth::Contention::Targeted,
            ContentionArg::Both => sy_records::synth::Contention::Both,
        }
    }
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

/// Why `sy-fit` failed.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// `--run-dir` names a file.
    #[error(transparent)]
    RunDir(#[from] RunDirError),
    #[error("nothing to do: pass --run-dir DIR (or --records FILE... and --out FILE)")]
    NothingToDo,
    #[error("no records: pass --run-dir DIR or --records FILE")]
    NoRecords,
    /// `--splits` names the output file.
    #[error("--out {} and the split table are the same file", .0.display())]
    SplitsIsOut(PathBuf),
    /// Loading, pairing, splitting or writing records failed.
    #[error(transparent)]
    Records(#[from] RecordsError),
    /// An output path cannot be used, a record file cannot be hashed, or writing failed.
    #[error(transparent)]
    Run(#[from] RunError),
    /// The records cannot be fitted; `files` are the record files, comma-separated.
    #[error("{files}: {source}")]
    Fit {
        files: String,
        #[source]
        source: FitError,
    },
    #[error("cannot print the summary: {0}")]
    Summary(#[source] serde_json::Error),
    /// A collected run fails the data-quality check (and `--accept-failed-check` is not given).
    #[error("{0}")]
    DataCheck(String),
}

impl CliError {
    /// Whether the error is the input's fault (exit code 2) rather than the system's (1).
    pub fn is_bad_input(&self) -> bool {
        match self {
            CliError::Records(e) => e.is_bad_input(),
            CliError::Run(e) => e.is_bad_input(),
            CliError::Summary(_) => false,
            CliError::RunDir(_)
            | CliError::NothingToDo
            | CliError::NoRecords
            | CliError::SplitsIsOut(_)
            | CliError::DataCheck(_)
            | CliError::Fit { .. } => true,
        }
    }
}

sy_cli::tool_error_from!(CliError);

/// Runs the CLI (after parsing).
pub fn run(cli: Cli) -> Result<(), CliError> {
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

fn gen_synthetic(common: &CommonArgs, args: &GenArgs) -> Result<(), CliError> {
    let path = if args.out.is_dir() || args.out.extension().is_none() {
        args.out.join(Artifact::RecordsParquet.file_name())
    } else {
        args.out.clone()
    };
    let spec = sy_records::synth::SynthSpec {
        run_id: args.run_id.clone(),
        seed: common.seed.unwrap_or(1),
        conditions: args.conditions,
        repeats: args.repeats,
        contention: args.contention.into(),
        ..Default::default()
    };
    let started = Instant::now();
    let records = sy_records::synth::generate(&spec);
    sy_records::write_records(&records, &path)?;
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

/// Where the fit reads and writes.
struct FitPaths {
    /// Record files or run directories.
    inputs: Vec<PathBuf>,
    /// fit.json.
    out: PathBuf,
    /// splits.json (reused when it exists).
    splits: PathBuf,
}

/// The paths of the flags (or of the run directory), every output path checked before anything
/// is read or written.
fn fit_paths(common: &CommonArgs, args: &FitArgs) -> Result<FitPaths, CliError> {
    let out = match (&args.out, &common.run_dir) {
        (Some(o), _) => o.clone(),
        (None, Some(d)) => d.join(Artifact::Fit.file_name()),
        (None, None) => return Err(CliError::NothingToDo),
    };
    let inputs: Vec<PathBuf> = if !args.records.is_empty() {
        args.records.clone()
    } else if let Some(d) = &common.run_dir {
        vec![d.clone()]
    } else {
        return Err(CliError::NoRecords);
    };
    let out_dir = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let splits = args
        .splits
        .clone()
        .unwrap_or_else(|| out_dir.join(Artifact::Splits.file_name()));
    sy_cli::check_output_path(&out, "--out")?;
    sy_cli::check_output_path(&splits, "--splits")?;
    if splits == out {
        return Err(CliError::SplitsIsOut(out));
    }
    Ok(FitPaths {
        inputs,
        out,
        splits,
    })
}

/// The data-quality verdict of every input that is a collected run directory (it has a
/// `manifest.json`), judged now with the bounds of its `check.json` when `sy-collect check` wrote
/// one (else the defaults). A failing run stops the fit unless `accept`.
fn data_check(inputs: &[PathBuf], accept: bool) -> Result<Option<DataCheck>, CliError> {
    use sy_records::check::{CheckOptions, CheckReport, judge_paths};
    let mut runs = Vec::new();
    for dir in inputs
        .iter()
        .filter(|p| p.is_dir() && Artifact::Manifest.path(p).exists())
    {
        let opts = std::fs::read_to_string(Artifact::Check.path(dir))
            .ok()
            .and_then(|t| serde_json::from_str::<CheckReport>(&t).ok())
            .map_or_else(CheckOptions::default, |c| c.options);
        let report = judge_paths(std::slice::from_ref(dir), &opts)?;
        tracing::info!(
            "{}: data-quality check {}",
            dir.display(),
            if report.passed() { "passed" } else { "FAILED" }
        );
        runs.push(DataCheckRun {
            path: dir.display().to_string(),
            verdict: if report.passed() { "pass" } else { "fail" }.to_string(),
            failed: report.failed().iter().map(|s| s.to_string()).collect(),
        });
    }
    if runs.is_empty() {
        return Ok(None);
    }
    let failing: Vec<String> = runs
        .iter()
        .filter(|r| r.verdict != "pass")
        .map(|r| format!("{} ({})", r.path, r.failed.join(", ")))
        .collect();
    if !failing.is_empty() && !accept {
        return Err(CliError::DataCheck(format!(
            "the run fails the data-quality check: {}; see `sy-collect check RUN_DIR` for the \
             cells and records concerned, fix the collection, or fit anyway with \
             --accept-failed-check (fit.json then says so)",
            failing.join("; ")
        )));
    }
    Ok(Some(DataCheck {
        runs,
        accepted_failing: !failing.is_empty(),
    }))
}

/// Loads the records and logs what was read, skipped and ignored.
fn load_records(
    inputs: &[PathBuf],
    options: &LoadOptions,
    cache: Option<&Path>,
    started: Instant,
) -> Result<ProbeTable, CliError> {
    let loaded = ProbeTable::load_cached(inputs, options, cache)?;
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
    Ok(loaded)
}

/// Fits both models; a fitting problem is one of the records', so it names the files they came
/// from.
fn fit_records(
    loaded: &ProbeTable,
    splits: &SplitTable,
    config: &FitConfig,
) -> Result<FitResult, CliError> {
    fit(loaded, splits, config).map_err(|source| CliError::Fit {
        files: loaded
            .files()
            .iter()
            .map(|f| f.path.display().to_string())
            .collect::<Vec<_>>()
            .join(", "),
        source,
    })
}

/// Records per phase and split, and how many were skipped as invalid.
fn record_counts(loaded: &ProbeTable, splits: &SplitTable) -> RecordCounts {
    let mut counts = RecordCounts {
        skipped_invalid: loaded.skipped().len(),
        ..RecordCounts::default()
    };
    let condition_splits = loaded.condition_splits(splits);
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
    counts
}

/// The whole `fit.json`: the fit with its inputs (hashed), split, settings and record counts.
fn fit_file(
    loaded: &ProbeTable,
    splits: &SplitTable,
    splits_path: &Path,
    config: &FitConfig,
    result: FitResult,
) -> Result<FitFile, CliError> {
    let counts = record_counts(loaded, splits);
    let mut warnings = result.warnings;
    if counts.skipped_invalid > 0 {
        warnings.push(format!(
            "{} invalid record(s) skipped: {:?}",
            counts.skipped_invalid,
            loaded.skipped_by_field()
        ));
    }
    let input_files = loaded.input_files();
    Ok(FitFile {
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
        input_files,
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
        data_check: None,
    })
}

/// The fit: paths → records → split (reused or new) → fit → `fit.json` and `splits.json` (both
/// or neither) → summary.
/// The split table (built or reused, and whether reused) and the fit file of the records.
fn split_and_fit(
    common: &CommonArgs,
    args: &FitArgs,
    paths: &FitPaths,
    loaded: &ProbeTable,
    phases: &mut sy_cli::Phases,
    started: Instant,
) -> Result<(SplitTable, bool, FitFile), CliError> {
    phases.start("splitting");
    let (splits, reused) =
        SplitTable::load_or_build(&paths.splits, loaded, common.seed, args.split_fractions)?;

    phases.start("fitting");
    let config = FitConfig {
        folds: args.folds,
        alpha_grid: args.alpha_grid.clone().unwrap_or_else(default_alpha_grid),
        seed: splits.seed,
        coefficient_intervals: true,
        parallel_models: true,
    };
    let fit_started = Instant::now();
    let result = fit_records(loaded, &splits, &config)?;
    tracing::info!(
        "split and fitted in {:.2} s (fit alone {:.2} s)",
        started.elapsed().as_secs_f64(),
        fit_started.elapsed().as_secs_f64()
    );
    let file = fit_file(loaded, &splits, &paths.splits, &config, result)?;
    Ok((splits, reused, file))
}

fn run_fit(common: &CommonArgs, args: &FitArgs) -> Result<(), CliError> {
    let started = Instant::now();
    let paths = fit_paths(common, args)?;
    let cache = args.cache.path(common.run_dir.as_deref());
    // One writer per directory written (the outputs' and the cache's), for the whole run.
    let mut dirs = vec![sy_cli::dir_of(&paths.out), sy_cli::dir_of(&paths.splits)];
    dirs.extend(cache.as_deref().map(sy_cli::dir_of));
    let _locks = sy_cli::lock_output_dirs("sy-fit", sy_rundir::RunKind::Calibration, &dirs)?;
    sy_rundir::check_output_target(&paths.out)?;
    sy_rundir::check_output_target(&paths.splits)?;
    let mut phases = sy_cli::Phases::new(common.show_progress());
    phases.start("loading records");
    let options = LoadOptions {
        skip_invalid: args.skip_invalid,
    };
    let data_check = data_check(&paths.inputs, args.accept_failed_check)?;
    let loaded = load_records(&paths.inputs, &options, cache.as_deref(), started)?;

    // A probe-table cache to make (the records were read, not mapped) is written on a second
    // thread while the table is split and fitted, and put in place only with the outputs.
    let (computed, staged_cache) = std::thread::scope(|scope| {
        let staging = scope.spawn(|| loaded.stage_cache());
        let computed = split_and_fit(common, args, &paths, &loaded, &mut phases, started);
        (computed, staging.join().ok().flatten())
    });
    let (splits, reused, mut file) = computed?;
    if let Some(dc) = data_check {
        if dc.accepted_failing {
            file.warnings.push(format!(
                "fitted despite a failing data-quality check (--accept-failed-check): {}",
                dc.runs
                    .iter()
                    .filter(|r| r.verdict != "pass")
                    .map(|r| format!("{} failed {}", r.path, r.failed.join(", ")))
                    .collect::<Vec<_>>()
                    .join("; ")
            ));
        }
        file.data_check = Some(dc);
    }

    phases.start("writing");
    // Both files or neither.
    sy_cli::atomic_write_all(&[
        (
            paths.splits.clone(),
            sy_cli::json_bytes(&paths.splits, &splits)?,
        ),
        (paths.out.clone(), sy_cli::json_bytes(&paths.out, &file)?),
    ])?;
    if let Some(cache) = staged_cache {
        cache.commit();
    }
    phases.finish();

    for w in &file.warnings {
        tracing::warn!("{w}");
    }
    print_summary(
        common,
        &file,
        &paths.out,
        &paths.splits,
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
    loaded: &ProbeTable,
    seconds: f64,
) -> Result<(), CliError> {
    let model_summary = |m: &sy_rundir::artifact::fit::ModelFit| ModelSummary {
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
        let text = serde_json::to_string(&s).map_err(CliError::Summary)?;
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
            m.estimators.q.f_len(),
            q.empty_cells.len(),
            m.standardiser.rows
        );
        for (estimator, c) in m.corrections() {
            let (est, lc) = (estimator.as_str(), m.estimators.correction(estimator));
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
    if let Some(dc) = &file.data_check {
        for r in &dc.runs {
            println!(
                "data-quality check: {} {}{}",
                r.path,
                r.verdict.to_uppercase(),
                if r.failed.is_empty() {
                    String::new()
                } else {
                    format!(
                        " ({}; accepted with --accept-failed-check)",
                        r.failed.join(", ")
                    )
                }
            );
        }
    }
    if !file.warnings.is_empty() {
        println!("{} warning(s) (see fit.json)", file.warnings.len());
    }
    println!("wrote {} in {seconds:.2} s", out.display());
    Ok(())
}

/// The command line's clap definition, parsed without running anything (the docs tests check
/// that every documented command parses against it).
pub fn command() -> clap::Command {
    <Cli as clap::CommandFactory>::command()
}
