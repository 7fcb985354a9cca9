//! Progress: phase, units done/total, in-flight requests, errors and ETA (indicatif through
//! `sy_cli`); hidden with `--no-progress`, `-q` or when stderr is not a terminal.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use indicatif::ProgressBar;

use crate::accounting::Stats;

#[derive(Debug)]
pub struct Progress {
    bar: ProgressBar,
    errors: Arc<AtomicU64>,
    ticker: Option<tokio::task::JoinHandle<()>>,
}

impl Progress {
    pub fn new(total: u64, done: u64, show: bool, stats: Arc<Stats>) -> Self {
        let bar = sy_cli::progress_bar(total, show);
        bar.set_position(done);
        let errors = Arc::new(AtomicU64::new(0));
        let ticker = show.then(|| {
            let bar = bar.clone();
            let errors = errors.clone();
            tokio::spawn(async move {
                loop {
                    bar.set_message(format!(
                        "in-flight {} · errors {} · background errors {}",
                        stats.in_flight.load(Ordering::Relaxed).max(0),
                        errors.load(Ordering::Relaxed),
                        stats.background_error_total()
                    ));
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            })
        });
        Self {
            bar,
            errors,
            ticker,
        }
    }

    pub fn phase(&self, phase: &str, condition: &str) {
        self.bar.set_prefix(format!("{phase} {condition}"));
    }

    pub fn error(&self) {
        self.errors.fetch_add(1, Ordering::Relaxed);
    }

    pub fn unit_done(&self) {
        self.bar.inc(1);
    }

    pub fn finish(&self) {
        if let Some(t) = &self.ticker {
            t.abort();
        }
        self.bar.finish_and_clear();
    }
}
