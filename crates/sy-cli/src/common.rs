//! The flags every tool shares, logging set-up and shell completions.

use std::path::{Path, PathBuf};

use clap::{Args, Command};
use clap_complete::Shell;

/// Flags shared by every sy tool. Flatten into a tool's clap struct with `#[command(flatten)]`.
#[derive(Debug, Clone, Args)]
pub struct CommonArgs {
    /// Run directory: where this tool reads its inputs and writes its outputs.
    #[arg(long, global = true, value_name = "DIR")]
    pub run_dir: Option<PathBuf>,
    /// Seed for every random choice (splits, nonces, simulator).
    #[arg(long, global = true, value_name = "N")]
    pub seed: Option<u64>,
    /// Do not show progress bars (they are also hidden when stderr is not a terminal).
    #[arg(long, global = true)]
    pub no_progress: bool,
    /// Print a machine-readable JSON summary on stdout instead of text.
    #[arg(long, global = true)]
    pub json: bool,
    /// More log output (-v info, -vv debug, -vvv trace).
    #[arg(short, long, global = true, action = clap::ArgAction::Count, conflicts_with = "quiet")]
    pub verbose: u8,
    /// Less output: errors only.
    #[arg(short, long, global = true)]
    pub quiet: bool,
    /// Print a shell completion script for SHELL and exit.
    #[arg(long, value_name = "SHELL", hide_short_help = true)]
    pub completions: Option<Shell>,
}

impl CommonArgs {
    /// Refuses a `--run-dir` that exists but is not a directory (bad input, exit 2), before
    /// anything is read or written under it.
    pub fn check_run_dir(&self) -> Result<(), crate::RunDirError> {
        if let Some(dir) = &self.run_dir
            && dir.exists()
            && !dir.is_dir()
        {
            return Err(crate::RunDirError::NotADirectory(dir.clone()));
        }
        Ok(())
    }

    /// Whether progress bars should be drawn: not asked off, not quiet, stderr is a terminal.
    pub fn show_progress(&self) -> bool {
        use std::io::IsTerminal;
        !self.no_progress && !self.quiet && !self.json && std::io::stderr().is_terminal()
    }
}

/// The probe-table cache flag of the calibration tools (`sy-fit`, `sy-margin`, `sy-select`).
/// Flatten into a tool's clap struct with `#[command(flatten)]`.
#[derive(Debug, Clone, Args)]
pub struct CacheArgs {
    /// Neither use nor write the run directory's probe-table cache (probe-table.cache), which
    /// sy-fit and sy-margin write once they succeed and the next tool reads instead of the
    /// records when it was made from the same record files. Without --run-dir there is none.
    #[arg(long)]
    pub no_cache: bool,
}

impl CacheArgs {
    /// The probe-table cache of `run_dir` (`sy_rundir::Artifact::ProbeCache`), unless `--no-cache`.
    pub fn path(&self, run_dir: Option<&Path>) -> Option<PathBuf> {
        match run_dir {
            Some(dir) if !self.no_cache => Some(sy_rundir::Artifact::ProbeCache.path(dir)),
            _ => None,
        }
    }
}

/// Takes the lock of every directory a calibration tool (`tool`) is about to write (the run
/// directory and the directories of its outputs, each once), refusing one another tool is
/// writing (its PID and command named) or one holding an evaluation ([`sy_rundir::check_run_kind`]).
/// Held until the returned locks are dropped; the kernel releases them on any exit.
pub fn lock_output_dirs(
    tool: &str,
    kind: sy_rundir::RunKind,
    dirs: &[&Path],
) -> Result<Vec<sy_rundir::RunLock>, sy_rundir::RunError> {
    let mut locks: Vec<sy_rundir::RunLock> = Vec::new();
    let mut seen: Vec<PathBuf> = Vec::new();
    for dir in dirs {
        let dir = if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        };
        sy_rundir::check_run_kind(dir, kind)?;
        let key = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
        if seen.contains(&key) {
            continue;
        }
        let lock = sy_rundir::RunLock::acquire(dir, tool)?;
        if let Some(holder) = lock.stale_holder() {
            tracing::warn!(
                "{}: an earlier run ({holder}) ended without releasing this directory (it \
                 crashed or was killed); its outputs were written whole or not at all",
                dir.display()
            );
        }
        seen.push(std::fs::canonicalize(dir).unwrap_or(key));
        locks.push(lock);
    }
    Ok(locks)
}

/// The directory a file output goes into (`.` for a bare file name).
pub fn dir_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Initialises `tracing` on stderr. `RUST_LOG` overrides the level picked by `-v`/`-q`.
pub fn init_tracing(common: &CommonArgs) {
    use tracing_subscriber::EnvFilter;
    let level = if common.quiet {
        "error"
    } else {
        match common.verbose {
            0 => "warn",
            1 => "info",
            2 => "debug",
            _ => "trace",
        }
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(level));
    // Colour only on a terminal (never escape codes in a piped or redirected log) and never
    // when NO_COLOR is set.
    use std::io::IsTerminal as _;
    let ansi = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .with_target(false)
        .try_init();
}

impl CommonArgs {
    /// What a tool does first: `--completions SHELL` writes the completion script of `C` and
    /// ends the run (`Some(success)`); otherwise logging is set up and the tool runs (`None`).
    pub fn start<C: clap::CommandFactory>(&self) -> Option<std::process::ExitCode> {
        if let Some(shell) = self.completions {
            print_completions(shell, &mut C::command());
            return Some(std::process::ExitCode::SUCCESS);
        }
        init_tracing(self);
        None
    }
}

/// Writes the completion script of `cmd` for `shell` on stdout.
pub fn print_completions(shell: Shell, cmd: &mut Command) {
    let name = cmd.get_name().to_string();
    // Generated into memory first: clap_complete panics when its writer fails, and a closed
    // pipe (`| head`) is not an error of the tool.
    let mut script = Vec::new();
    clap_complete::generate(shell, cmd, name, &mut script);
    use std::io::Write as _;
    let _ = std::io::stdout().write_all(&script);
}
