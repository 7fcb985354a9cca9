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
/// process's CPU time over it, user and system, and the page faults it took, where the platform
/// reports them) is logged at debug level (`-v`) when the next one starts, so a slow run says
/// where its time went, how many cores it kept busy and how much of it was spent on fresh memory.
#[derive(Debug)]
pub struct Phases {
    bar: ProgressBar,
    current: Option<(String, std::time::Instant, Option<Usage>)>,
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
        self.current = Some((name.to_string(), std::time::Instant::now(), Usage::now()));
    }

    fn end_current(&mut self) {
        if let Some((name, t0, usage0)) = self.current.take() {
            let wall = t0.elapsed().as_secs_f64();
            match Usage::now().zip(usage0) {
                Some((u, u0)) => tracing::debug!(
                    "{name}: {wall:.3} s ({:.3} s CPU: {:.3} user, {:.3} system; {} page faults)",
                    u.user + u.system - u0.user - u0.system,
                    u.user - u0.user,
                    u.system - u0.system,
                    u.page_faults.saturating_sub(u0.page_faults)
                ),
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

/// This process's resource use so far (every thread), where the platform says.
#[derive(Debug, Clone, Copy)]
struct Usage {
    /// User CPU seconds.
    user: f64,
    /// System CPU seconds.
    system: f64,
    /// Page faults served without I/O (first touches of fresh memory, mapped pages in the page
    /// cache).
    page_faults: u64,
}

impl Usage {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[allow(unsafe_code)]
    fn now() -> Option<Usage> {
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
        Some(Usage {
            user: seconds(usage.ru_utime),
            system: seconds(usage.ru_stime),
            page_faults: u64::try_from(usage.ru_minflt).unwrap_or(0),
        })
    }

    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    fn now() -> Option<Usage> {
        None
    }
}
