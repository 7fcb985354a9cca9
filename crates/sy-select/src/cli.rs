//! `sy-select`: r/p search, choice of rule and estimator, frozen bundle, report; `replay` and
//! `decide` subcommands.

use std::path::PathBuf;
use std::process::ExitCode;
use sy_rundir::Artifact;

use crate::select::{DEFAULT_LIMITS, SelectOptions};
use clap::{Parser, Subcommand, ValueEnum};
use sy_calibration::inputs;
use sy_cli::{CacheArgs, CommonArgs, ToolError};
use sy_records::Split;
use sy_selector::{GuardLimits, Variant};

/// Searches r/p, evaluates the five variants, chooses one threshold rule and one estimator,
/// freezes bundle.json and writes selection.json and report.md.
#[derive(Debug, Parser)]
#[command(
    name = "sy-select",
    version,
    about,
    long_about = None,
    args_conflicts_with_subcommands = true,
    after_help = "Examples:\n  sy-select --run-dir runs/demo\n  sy-select replay --bundle runs/demo/bundle.json --records data/demo/records.parquet\n  sy-select decide --bundle runs/demo/bundle.json --observations data/examples/observations.json"
)]
struct Cli {
    #[command(flatten)]
    common: CommonArgs,
    #[command(subcommand)]
    cmd: Option<Cmd>,
    #[command(flatten)]
    select: SelectArgs,
}

#[derive(Debug, clap::Args)]
struct SelectArgs {
    #[command(flatten)]
    cache: CacheArgs,
    /// Record files or run directories (default: the run directory).
    #[arg(long, value_name = "PATH", num_args = 1..)]
    records: Vec<PathBuf>,
    /// fit.json (default: RUN_DIR/fit.json).
    #[arg(long, value_name = "FILE")]
    fit: Option<PathBuf>,
    /// margins.json (default: RUN_DIR/margins.json).
    #[arg(long, value_name = "FILE")]
    margins: Option<PathBuf>,
    /// splits.json (default: RUN_DIR/splits.json).
    #[arg(long, value_name = "FILE")]
    splits: Option<PathBuf>,
    /// selection.json (default: RUN_DIR/selection.json); bundle.json, bundles/, report.md and
    /// plots/ are written beside it.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Guard G: maximum observation age (ms).
    #[arg(long, default_value_t = DEFAULT_LIMITS.max_age_ms)]
    max_age_ms: f64,
    /// Guard G: an override needs the capable worker's booked requests < this.
    #[arg(long, default_value_t = DEFAULT_LIMITS.destination_limit)]
    destination_limit: f64,
    /// Guard G: an override needs local capable in-flight calls < this.
    #[arg(long, default_value_t = DEFAULT_LIMITS.local_limit)]
    local_limit: u64,
    /// Compare the TTFT variants with zero margins (development check).
    #[arg(long)]
    zero_margins: bool,
    /// Do not draw the report (report.md, plots/).
    #[arg(long)]
    no_report: bool,
    /// Bootstrap resamples for every interval (whole conditions are resampled).
    #[arg(long, default_value_t = sy_stats::DEFAULT_RESAMPLES, value_parser = clap::value_parser!(u32).range(100..))]
    bootstrap_resamples: u32,
    /// Repeat the whole calibration (split, fit, margins, search, choice) over split seeds
    /// 0..N and report how often each rule and estimator is chosen (0 = skip).
    #[arg(long, value_name = "N", default_value_t = 10)]
    stability_seeds: u64,
    /// Skip (count and report) invalid record rows instead of failing.
    #[arg(long)]
    skip_invalid: bool,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum SplitArg {
    Fit,
    Uncertainty,
    Selection,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Run a bundle over records: per variant how often it could act, changed the choice, fell
    /// back and why; mean and p90 selected TTFT; regret vs the per-probe oracle; by background
    /// generation length.
    Replay {
        /// The bundle (its parameters are used for every variant).
        #[arg(long, value_name = "FILE")]
        bundle: PathBuf,
        /// Record files or run directories (default: the run directory).
        #[arg(long, value_name = "PATH", num_args = 1..)]
        records: Vec<PathBuf>,
        /// Only the pairs of this split (needs splits.json: --splits or RUN_DIR/splits.json).
        #[arg(long, value_enum)]
        split: Option<SplitArg>,
        /// splits.json for --split (default: RUN_DIR/splits.json).
        #[arg(long, value_name = "FILE")]
        splits: Option<PathBuf>,
        /// Also write the replay as JSON to this file.
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
        /// Write every decision of every variant on every pair (inputs, predictions, advantage,
        /// reason, chosen and oracle TTFT): JSON Lines, or Parquet when FILE ends in .parquet.
        #[arg(long, value_name = "FILE")]
        decisions: Option<PathBuf>,
        /// Skip (count and report) invalid record rows instead of failing.
        #[arg(long)]
        skip_invalid: bool,
    },
    /// Decide one turn: print the decision JSON for an observation document.
    Decide {
        /// The bundle.
        #[arg(long, value_name = "FILE")]
        bundle: PathBuf,
        /// The observation document (sy_selector::DecisionInput; see docs/observation-json.md).
        #[arg(long, value_name = "FILE")]
        observations: PathBuf,
        /// Decide with this variant instead of the bundle's.
        #[arg(long)]
        variant: Option<Variant>,
    },
}

/// The tool's entry point: parses the command line, runs, maps the result to the exit code.
pub fn main() -> ExitCode {
    sy_cli::keep_freed_memory(sy_cli::Arenas::One);
    let cli = Cli::parse();
    if let Some(done) = cli.common.start::<Cli>() {
        return done;
    }
    sy_cli::run_main(|| {
        cli.common.check_run_dir()?;
        match &cli.cmd {
            None => select(&cli.common, &cli.select),
            Some(cmd) => subcommand(&cli.common, cmd),
        }
    })
}

fn select(common: &CommonArgs, a: &SelectArgs) -> Result<(), ToolError> {
    let run_dir = common.run_dir.as_deref();
    let out = inputs::input_path(a.out.as_deref(), run_dir, Artifact::Selection, "--out")?;
    let out_dir = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let limits = GuardLimits {
        max_age_ms: a.max_age_ms,
        destination_limit: a.destination_limit,
        local_limit: a.local_limit,
    };
    let opts = SelectOptions {
        records: inputs::record_paths(&a.records, run_dir)?,
        fit: inputs::input_path(a.fit.as_deref(), run_dir, Artifact::Fit, "--fit")?,
        margins: inputs::input_path(
            a.margins.as_deref(),
            run_dir,
            Artifact::Margins,
            "--margins",
        )?,
        splits: inputs::input_path(a.splits.as_deref(), run_dir, Artifact::Splits, "--splits")?,
        out: out.clone(),
        out_dir: out_dir.clone(),
        limits,
        zero_margins: a.zero_margins,
        skip_invalid: a.skip_invalid,
        records_cache: a.cache.path(run_dir),
        show_progress: common.show_progress(),
        created_at: None,
        bootstrap: sy_stats::BootstrapConfig {
            resamples: a.bootstrap_resamples,
            ..sy_stats::BootstrapConfig::default()
        },
        stability_seeds: (0..a.stability_seeds).collect(),
    };
    let mut dirs = vec![out_dir.as_path()];
    dirs.extend(opts.records_cache.as_deref().map(sy_cli::dir_of));
    let _locks = sy_cli::lock_output_dirs("sy-select", sy_rundir::RunKind::Calibration, &dirs)?;
    // Every output, the directories included, is checked before the first is written: a
    // linked bundles/ or plots/ would otherwise be found only after selection.json is.
    for dir in [sy_rundir::Artifact::Bundles, sy_rundir::Artifact::Plots] {
        sy_rundir::check_output_dir(&dir.path(&out_dir))?;
    }
    for file in [
        sy_rundir::Artifact::Bundle.path(&out_dir),
        sy_rundir::Artifact::Report.path(&out_dir),
        out.clone(),
    ] {
        sy_rundir::check_output_target(&file)?;
    }
    let result = crate::select::run(&opts)?;
    let report = if a.no_report {
        None
    } else {
        let mut phases = sy_cli::Phases::new(common.show_progress());
        phases.start("drawing the report");
        let path = crate::report::write_report(&result, &out_dir)?;
        phases.finish();
        Some(path)
    };
    let s = &result.selection;
    for w in &s.warnings {
        tracing::warn!("{w}");
    }
    if common.json {
        return print_json(&serde_json::json!({
            "selection": out.display().to_string(),
            "bundle": out_dir.join(Artifact::Bundle.file_name()).display().to_string(),
            "bundle_variant": s.bundle_variant,
            "content_hash": result.bundle.content_hash,
            "threshold_rule": s.threshold_rule.variant,
            "thresholds": s.thresholds,
            "estimator": s.estimator.variant,
            "margins": s.margins,
            "headline": s.headline,
            "stability": s.stability.as_ref().map(|st| serde_json::json!({
                "seeds": st.seeds,
                "bundle_variant_counts": st.bundle_variant_counts,
                "threshold_rule_counts": st.threshold_rule_counts,
                "estimator_counts": st.estimator_counts,
                "stable": st.stable,
            })),
            "report": report.map(|p| p.display().to_string()),
            "variants": s.replay.variants.iter().map(|v| serde_json::json!({
                "variant": v.variant,
                "mean_selected_ttft_ms": v.all.mean_selected_ttft_ms,
                "override_rate": v.all.override_rate,
                "regret_ms": v.all.regret_ms,
            })).collect::<Vec<_>>(),
            "warnings": s.warnings,
            "adaptive": result.adaptive.as_ref().map(adaptive_json),
        }));
    }
    if !common.quiet {
        for line in crate::report::answer_lines(&result) {
            println!("{line}");
        }
        println!();
        print_replay(&s.replay);
        println!(
            "wrote {} and {}",
            out.display(),
            Artifact::Bundle.path(&out_dir).display()
        );
        if let Some(p) = report {
            println!("report: {}", p.display());
        }
    }
    Ok(())
}

/// An adaptive run's decision in the `--json` output: the verdict and its anytime-valid
/// prequential sequence, or why there is none.
fn adaptive_json(
    a: &Result<crate::adaptive::AdaptiveAnswer, crate::adaptive::AdaptiveAnswerError>,
) -> serde_json::Value {
    match a {
        Ok(a) => serde_json::json!({
            "decision": a.verdict.as_str(),
            "stopped": a.stopped,
            "variant": a.judged_variant,
            "interval": "anytime-valid prequential confidence sequence",
            "level": a.level(),
            "estimate": a.sequence.map(|s| s.mean),
            "lo": a.sequence.map(|s| s.lo),
            "hi": a.sequence.map(|s| s.hi),
            "judged_conditions": a.judged_conditions,
            "rounds": a.rounds,
            "adaptive_file": a.path.display().to_string(),
        }),
        Err(e) => serde_json::json!({ "error": e.to_string() }),
    }
}

/// The `--json` output of every tool: one compact JSON document on one line of stdout.
fn print_json<T: serde::Serialize>(value: &T) -> Result<(), ToolError> {
    let text = serde_json::to_string(value)
        .map_err(|e| ToolError::Runtime(format!("cannot print the JSON output: {e}")))?;
    println!("{text}");
    Ok(())
}

fn print_replay(r: &crate::evaluate::Replay) {
    let name_w = r
        .variants
        .iter()
        .flat_map(|v| {
            std::iter::once(v.variant.as_str().len()).chain(
                v.by_decode_length
                    .keys()
                    .map(move |k| v.variant.as_str().len() + k.len() + 3),
            )
        })
        .max()
        .unwrap_or(8)
        .max(8);
    println!(
        "{:<name_w$} {:>7} {:>10} {:>8} {:>10} {:>10} {:>10} {:>10}",
        "variant", "probes", "could_act", "changed", "fell_back", "mean_ms", "p90_ms", "regret_ms"
    );
    for v in &r.variants {
        let rows = std::iter::once((v.variant.to_string(), &v.all)).chain(
            v.by_decode_length
                .iter()
                .map(|(k, s)| (format!("  {}/{k}", v.variant), s)),
        );
        for (name, s) in rows {
            println!(
                "{:<name_w$} {:>7} {:>10} {:>8} {:>10} {:>10.1} {:>10.1} {:>10.1}",
                name,
                s.probes,
                s.could_act,
                s.changed,
                s.fell_back,
                s.mean_selected_ttft_ms,
                s.p90_selected_ttft_ms,
                s.regret_ms
            );
        }
    }
}

fn subcommand(common: &CommonArgs, cmd: &Cmd) -> Result<(), ToolError> {
    let run_dir = common.run_dir.as_deref();
    match cmd {
        Cmd::Replay {
            bundle,
            records,
            split,
            splits,
            out,
            decisions,
            skip_invalid,
        } => {
            let split = match split {
                None => None,
                Some(s) => {
                    let path = inputs::input_path(
                        splits.as_deref(),
                        run_dir,
                        Artifact::Splits,
                        "--splits",
                    )?;
                    let s = match s {
                        SplitArg::Fit => Split::Fit,
                        SplitArg::Uncertainty => Split::Uncertainty,
                        SplitArg::Selection => Split::Selection,
                    };
                    Some((path, s))
                }
            };
            let opts = crate::replay::ReplayOptions {
                bundle: bundle.clone(),
                records: inputs::record_paths(records, run_dir)?,
                split,
                skip_invalid: *skip_invalid,
                decisions: decisions.clone(),
            };
            let bar = sy_cli::spinner(common.show_progress());
            bar.set_message("replaying");
            let result = crate::replay::replay(&opts)?;
            bar.finish_and_clear();
            if result.in_sample {
                tracing::warn!("{}", crate::replay::IN_SAMPLE_WARNING);
            }
            if let Some(path) = out {
                sy_cli::atomic_write_json(path, &result.replay)?;
            }
            let b = &result.bundle;
            if common.json {
                print_json(&serde_json::json!({
                    "bundle": bundle.display().to_string(),
                    "content_hash": b.content_hash,
                    "bundle_variant": b.variant,
                    "in_sample": result.in_sample,
                    "decisions": decisions.as_ref().map(|p| p.display().to_string()),
                    "decisions_written": result.decisions_written,
                    "replay": result.replay,
                }))?;
            } else if !common.quiet {
                println!(
                    "bundle {} (variant {}, hash {})",
                    bundle.display(),
                    b.variant,
                    b.content_hash
                );
                print_replay(&result.replay);
                if let Some(p) = decisions {
                    println!(
                        "wrote {} decisions to {}",
                        result.decisions_written,
                        p.display()
                    );
                }
            }
            Ok(())
        }
        Cmd::Decide {
            bundle,
            observations,
            variant,
        } => {
            let b = crate::replay::load_bundle(bundle)?;
            let input = crate::replay::read_observations(observations)?;
            let d = crate::replay::decide_one(&b, *variant, &input);
            if common.json {
                return print_json(&d);
            }
            let text = serde_json::to_string_pretty(&d)
                .map_err(|e| ToolError::Runtime(format!("cannot serialise the decision: {e}")))?;
            println!("{text}");
            Ok(())
        }
    }
}

/// The command line's clap definition, parsed without running anything (the docs tests check
/// that every documented command parses against it).
pub fn command() -> clap::Command {
    <Cli as clap::CommandFactory>::command()
}
