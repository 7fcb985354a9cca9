//! `sy-sim serve --config sim.toml --port P`: the simulator as a process; `sy-sim fit-config`:
//! its TTFT parameters fitted from a real run's records.

use std::path::PathBuf;

use anyhow::Context;
use clap::{CommandFactory, Parser, Subcommand};
use sy_cli::ExitStatus;
use sy_sim::{SimConfig, SimError};

#[derive(Debug, Parser)]
#[command(
    name = "sy-sim",
    version,
    about = "Dynamo-compatible simulator (frontend + selection service) on 127.0.0.1",
    after_help = "Examples:\n  sy-sim serve --config data/sim/default.toml --port 18000\n  sy-sim default-config > sim.toml\n  sy-sim fit-config --records RUN/records.parquet --base data/sim/default.toml --out fitted.toml\n  sy-sim fit-config --records RUN/records.parquet --sim-records SIM_RUN/records.parquet --base fitted.toml --out fitted2.toml"
)]
#[command(arg_required_else_help = true)]
struct Cli {
    /// Print a shell completion script for SHELL and exit.
    #[arg(long, value_name = "SHELL")]
    completions: Option<clap_complete::Shell>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve until interrupted. Prints one JSON line with both URLs on stdout.
    Serve(ServeArgs),
    /// Print the default configuration as TOML.
    DefaultConfig,
    /// Fit the simulator's TTFT parameters (per model: base_ms, prefill_ms_per_token,
    /// cached_ms_per_token, attention_ms_per_token_ctx) to a real run's Q-grid records, by least
    /// squares on the cell medians; everything else is the base configuration's. Prints measured
    /// vs fitted TTFT per cell.
    FitConfig(FitConfigArgs),
}

#[derive(Debug, clap::Args)]
struct FitConfigArgs {
    /// The run's records (records.parquet, records.jsonl or .csv).
    #[arg(long)]
    records: PathBuf,
    /// The configuration to start from: models, workers, capacities, decode parameters.
    #[arg(long)]
    base: PathBuf,
    /// Where to write the fitted configuration (TOML).
    #[arg(long)]
    out: PathBuf,
    /// A simulator run of the same plan with the base configuration (`sy-collect --target sim
    /// --sim-config`, e.g. with an earlier fit): per model, `frontend_untimed_ms` is fitted so that
    /// the simulator's client − server TTFT gap matches the real run's.
    #[arg(long)]
    sim_records: Option<PathBuf>,
}

fn fit_config(a: &FitConfigArgs) -> Result<(), sy_sim::fit_config::FitConfigError> {
    let fitted = sy_sim::fit_config::run(&a.records, a.sim_records.as_deref(), &a.base, &a.out)?;
    for f in &fitted.models {
        let s = &f.step;
        println!(
            "{}: base_ms {:.4}  prefill_ms_per_token {:.6}  cached_ms_per_token {:.6}  attention_ms_per_token_ctx {:.6}  (fitted to {} medians)",
            f.model,
            s.base_ms,
            s.prefill_ms_per_token,
            s.cached_ms_per_token,
            s.attention_ms_per_token_ctx,
            f.target
        );
        let c = &f.capacities;
        if c.max_num_batched_tokens.is_some() || c.kv_blocks.is_some() {
            let show = |v: Option<u64>| v.map_or("the base's".to_owned(), |v| v.to_string());
            println!(
                "  published by the deployment: max_num_batched_tokens {}  kv_blocks {}",
                show(c.max_num_batched_tokens),
                show(c.kv_blocks)
            );
        }
        println!(
            "  {:>6} {:>7} {:>7} {:>11} {:>10} {:>6}",
            "N", "cached", "records", "measured ms", "fitted ms", "ratio"
        );
        for (c, p) in &f.cells {
            println!(
                "  {:>6} {:>7} {:>7} {:>11.2} {:>10.2} {:>6.3}",
                c.n,
                c.cached,
                c.count,
                c.ttft_ms,
                p,
                p / c.ttft_ms
            );
        }
    }
    for (model, u) in &fitted.untimed {
        println!(
            "{model}: frontend_untimed_ms {:.3}  (client - server TTFT gap: real {:.3} ms, simulator {:.3} ms)",
            u.untimed_ms, u.real_gap_ms, u.sim_gap_ms
        );
    }
    println!("wrote {}", a.out.display());
    Ok(())
}

#[derive(Debug, clap::Args)]
struct ServeArgs {
    /// TOML configuration (default: two models, two workers each).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Frontend port (0 = any free port).
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// Selection-service port (0 = any free port).
    #[arg(long, default_value_t = 0)]
    selection_port: u16,
    /// Override `time_scale` (wall seconds per simulated second).
    #[arg(long)]
    time_scale: Option<f64>,
    /// Override `seed`.
    #[arg(long)]
    seed: Option<u64>,
    /// Override `faults.error_rate`.
    #[arg(long)]
    error_rate: Option<f64>,
    /// Override `faults.stall_rate`.
    #[arg(long)]
    stall_rate: Option<f64>,
    /// Override `faults.stall_ms`.
    #[arg(long)]
    stall_ms: Option<f64>,
    /// Override `faults.drop_rate`.
    #[arg(long)]
    drop_rate: Option<f64>,
    /// Override `faults.selection_delay_ms`.
    #[arg(long)]
    selection_delay_ms: Option<f64>,
}

async fn serve(a: ServeArgs) -> anyhow::Result<()> {
    let mut cfg = match &a.config {
        Some(p) => SimConfig::from_toml_path(p)?,
        None => SimConfig::default(),
    };
    if let Some(v) = a.time_scale {
        cfg.time_scale = v;
    }
    if let Some(v) = a.seed {
        cfg.seed = v;
    }
    if let Some(v) = a.error_rate {
        cfg.faults.error_rate = v;
    }
    if let Some(v) = a.stall_rate {
        cfg.faults.stall_rate = v;
    }
    if let Some(v) = a.stall_ms {
        cfg.faults.stall_ms = v;
    }
    if let Some(v) = a.drop_rate {
        cfg.faults.drop_rate = v;
    }
    if let Some(v) = a.selection_delay_ms {
        cfg.faults.selection_delay_ms = v;
    }
    let h = sy_sim::spawn_on(cfg, a.port, a.selection_port)
        .await
        .context("starting the simulator")?;
    let mut workers = serde_json::Map::new();
    for m in &h.config().models {
        workers.insert(m.name.clone(), serde_json::json!(h.worker_ids(&m.name)));
    }
    println!(
        "{}",
        serde_json::json!({
            "frontend_url": h.frontend_url(),
            "selection_url": h.selection_url(),
            "workers": workers,
        })
    );
    tokio::signal::ctrl_c()
        .await
        .context("waiting for Ctrl-C")?;
    h.shutdown().await;
    Ok(())
}

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    if let Some(shell) = cli.completions {
        sy_cli::print_completions(shell, &mut Cli::command());
        return std::process::ExitCode::SUCCESS;
    }
    let Some(command) = cli.command else {
        eprintln!("sy-sim: a subcommand is required (serve, default-config); see --help");
        return std::process::ExitCode::from(ExitStatus::BadInput as u8);
    };
    if let Command::FitConfig(a) = &command {
        return match fit_config(a) {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("sy-sim fit-config: {e}");
                std::process::ExitCode::from(if e.is_bad_input() { 2 } else { 1 })
            }
        };
    }
    let result = match command {
        Command::DefaultConfig => toml::to_string(&SimConfig::default())
            .map(|s| print!("{s}"))
            .map_err(anyhow::Error::from),
        Command::Serve(a) => tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .map_err(anyhow::Error::from)
            .and_then(|rt| rt.block_on(serve(a))),
        Command::FitConfig(_) => Ok(()),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sy-sim: {e:#}");
            std::process::ExitCode::from(exit_status(&e) as u8)
        }
    }
}

/// The README's exit codes: a bad configuration or setting is bad input (2); anything else
/// (a port in use, an I/O failure) is a runtime failure (1).
fn exit_status(e: &anyhow::Error) -> ExitStatus {
    let bad_input = e.chain().any(|c| {
        c.downcast_ref::<SimError>()
            .is_some_and(SimError::is_bad_input)
    });
    if bad_input {
        ExitStatus::BadInput
    } else {
        ExitStatus::Runtime
    }
}
