//! indicatif progress bars that disappear when progress is off.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A bar of `len` steps with a message, ETA and rate; hidden when `show` is false.
pub fn progress_bar(len: u64, show: bool) -> ProgressBar {
    let bar = ProgressBar::new(len);
    if !show {
        bar.set_draw_target(ProgressDrawTarget::hidden());
        return bar;
    }
    if let Ok(style) = ProgressStyle::with_template(
        "{spinner} {prefix} [{elapsed_precise}] {wide_bar} {pos}/{len} {msg} (eta {eta})",
    ) {
        bar.set_style(style);
    }
    bar
}

/// A spinner for work of unknown length; hidden when `show` is false.
pub fn spinner(show: bool) -> ProgressBar {
    let bar = ProgressBar::new_spinner();
    if !show {
        bar.set_draw_target(ProgressDrawTarget::hidden());
    } else {
        bar.enable_steady_tick(std::time::Duration::from_millis(120));
    }
    bar
}

/// The named phases of a tool's run, shown on a spinner; each phase's wall time is logged at
/// debug level (`-v`) when the next one starts, so a slow run says where its time went.
#[derive(Debug)]
pub struct Phases {
    bar: ProgressBar,
    current: Option<(String, std::time::Instant)>,
}

impl Phases {
    /// A spinner (hidden when `show` is false) with no phase started.
    pub fn new(show: bool) -> Phases {
        Phases {
            bar: spinner(show),
            current: None,
        }
    }

    /// Ends the current phase (logging its time) and starts `name`.
    pub fn start(&mut self, name: &str) {
        self.end_current();
        self.bar.set_message(name.to_string());
        self.current = Some((name.to_string(), std::time::Instant::now()));
    }

    fn end_current(&mut self) {
        if let Some((name, t0)) = self.current.take() {
            tracing::debug!("{name}: {:.3} s", t0.elapsed().as_secs_f64());
        }
    }

    /// Ends the last phase and clears the spinner.
    pub fn finish(mut self) {
        self.end_current();
        self.bar.finish_and_clear();
    }
}
