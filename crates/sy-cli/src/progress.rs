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
