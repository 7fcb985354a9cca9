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

/// The named phases of a tool's run, shown on a spinner; each phase's wall time (and the
/// process's CPU time over it, user + system, where the platform reports it) is logged at debug
/// level (`-v`) when the next one starts, so a slow run says where its time went and how many
/// cores it kept busy.
#[derive(Debug)]
pub struct Phases {
    bar: ProgressBar,
    current: Option<(String, std::time::Instant, Option<f64>)>,
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
        self.current = Some((name.to_string(), std::time::Instant::now(), cpu_seconds()));
    }

    fn end_current(&mut self) {
        if let Some((name, t0, cpu0)) = self.current.take() {
            let wall = t0.elapsed().as_secs_f64();
            match cpu_seconds().zip(cpu0) {
                Some((cpu, cpu0)) => {
                    tracing::debug!("{name}: {wall:.3} s ({:.3} s CPU)", cpu - cpu0)
                }
                None => tracing::debug!("{name}: {wall:.3} s"),
            }
        }
    }

    /// Ends the last phase and clears the spinner.
    pub fn finish(mut self) {
        self.end_current();
        self.bar.finish_and_clear();
    }
}

/// User + system CPU seconds of this process so far (every thread), where the platform says.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
fn cpu_seconds() -> Option<f64> {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `getrusage` writes one `rusage` through the pointer, which points to memory of
    // that type; `RUSAGE_SELF` is a valid `who`. On success the value is initialised.
    let usage = unsafe {
        if libc::getrusage(libc::RUSAGE_SELF, usage.as_mut_ptr()) != 0 {
            return None;
        }
        usage.assume_init()
    };
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    Some(seconds(usage.ru_utime) + seconds(usage.ru_stime))
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn cpu_seconds() -> Option<f64> {
    None
}
