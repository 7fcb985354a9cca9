//! Progress: phase, units done/total, rate, in-flight requests, failures and ETA (indicatif
//! through `sy_cli`); hidden with `--no-progress`, `-q` or when stderr is not a terminal.
//!
//! The ETA is this session's own: the remaining units' estimated cost (the plan estimate of
//! [`crate::estimate`], so a qgrid unit and a long load unit are not counted alike) scaled by
//! how this session's real time compared with the estimate of the units it finished. Units
//! finished by an earlier session (`--resume`) count neither in the rate nor in the scale, so
//! the ETA right after a resume is the estimate of what is left, not "2 s".

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

use sy_drive::Stats;

#[derive(Debug, Default)]
struct Pace {
    /// Estimated seconds of the units still to run in this session.
    remaining_est: f64,
    /// Estimated seconds of the units this session finished.
    done_est: f64,
    /// Units this session finished.
    done_units: u64,
}

#[derive(Debug)]
pub struct Progress {
    bar: ProgressBar,
    errors: Arc<AtomicU64>,
    pace: Arc<Mutex<Pace>>,
    ticker: Option<tokio::task::JoinHandle<()>>,
}

/// The ETA in seconds: remaining estimate × (real / estimated) so far; the plain estimate
/// before the first unit of the session finishes.
pub fn eta_seconds(remaining_est: f64, done_est: f64, elapsed: f64) -> f64 {
    if done_est > 0.0 && elapsed > 0.0 {
        remaining_est * elapsed / done_est
    } else {
        remaining_est
    }
}

fn fmt_secs(s: f64) -> String {
    let s = s.max(0.0).round() as u64;
    if s >= 3600 {
        format!("{}h{:02}m", s / 3600, (s % 3600) / 60)
    } else if s >= 60 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{s}s")
    }
}

impl Progress {
    /// `remaining_est`: the estimated seconds of the units this session will run.
    pub fn new(total: u64, done: u64, show: bool, stats: Arc<Stats>, remaining_est: f64) -> Self {
        let bar = sy_cli::progress_bar(total, show);
        if show
            && let Ok(style) = ProgressStyle::with_template(
                "{spinner} {prefix} [{elapsed_precise}] {wide_bar} {pos}/{len} {msg}",
            )
        {
            bar.set_style(style);
        }
        bar.set_position(done);
        let errors = Arc::new(AtomicU64::new(0));
        let pace = Arc::new(Mutex::new(Pace {
            remaining_est,
            ..Pace::default()
        }));
        let started = Instant::now();
        let ticker = show.then(|| {
            let bar = bar.clone();
            let errors = errors.clone();
            let pace = pace.clone();
            tokio::spawn(async move {
                loop {
                    let elapsed = started.elapsed().as_secs_f64();
                    let (rate, eta) = pace.lock().map_or((0.0, 0.0), |p| {
                        (
                            p.done_units as f64 / elapsed.max(1e-9),
                            eta_seconds(p.remaining_est, p.done_est, elapsed),
                        )
                    });
                    bar.set_message(format!(
                        "{rate:.2} units/s · in-flight {} · failures {} · background failures {} · eta {}",
                        stats.in_flight.load(Ordering::Relaxed).max(0),
                        errors.load(Ordering::Relaxed),
                        stats.background_error_total(),
                        fmt_secs(eta)
                    ));
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            })
        });
        Self {
            bar,
            errors,
            pace,
            ticker,
        }
    }

    pub fn phase(&self, phase: &str, condition: &str) {
        self.bar.set_prefix(format!("{phase} {condition}"));
    }

    pub fn error(&self) {
        self.errors.fetch_add(1, Ordering::Relaxed);
    }

    /// A unit of estimated cost `est_seconds` finished.
    pub fn unit_done(&self, est_seconds: f64) {
        if let Ok(mut p) = self.pace.lock() {
            p.done_units += 1;
            p.done_est += est_seconds;
            p.remaining_est = (p.remaining_est - est_seconds).max(0.0);
        }
        self.bar.inc(1);
    }

    pub fn finish(&self) {
        if let Some(t) = &self.ticker {
            t.abort();
        }
        self.bar.finish_and_clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eta_scales_the_remaining_estimate_by_this_sessions_pace() {
        // Before any unit: the estimate itself (right after --resume too).
        assert_eq!(eta_seconds(55.0, 0.0, 0.3), 55.0);
        // Running twice as slow as estimated: twice the remaining estimate.
        assert!((eta_seconds(40.0, 10.0, 20.0) - 80.0).abs() < 1e-9);
        assert_eq!(fmt_secs(75.4), "1m15s");
        assert_eq!(fmt_secs(3725.0), "1h02m");
    }
}
