//! The allocator's settings for `sy-select` and `sy-fit`.
//!
//! Their phases allocate and free vectors of hundreds of megabytes (a table, the pairs, the
//! search's view, the bootstraps' draws), one after another. With glibc's defaults a block that
//! large is mapped on its own and unmapped when freed, and so is anything freed at the top of a
//! heap; the next phase then faults every page of its blocks in again, zeroed by the kernel. On
//! the 2-core VM of the benchmarks a fresh page is not cheap, and its price varies from run to
//! run: one phase of `sy-select` measured 0.2 to 4.1 s of system time for the same 166,000 faults
//! (the VM's balloon device reports freed pages to its host, which takes them back). So the tools
//! keep what they free and reuse it:
//! - every block comes from the heap (`M_MMAP_MAX` = 0), which is never trimmed
//!   (`M_TRIM_THRESHOLD` = −1), so a freed block's pages are reused by the next allocation;
//! - in `sy-select`, one heap for every thread ([`Arenas::One`]): a thread's extra heap holds at
//!   most 64 MiB, so its large blocks would still be mapped there, and a block freed by one
//!   thread is reused by another. `sy-fit` keeps a heap per thread ([`Arenas::PerThread`]):
//!   with one, its fitting phase took twice as long;
//! - the heap grows [`TOP_PAD_BYTES`] at a time.
//!
//! Measured in `crates/sy-select/README.md`, "Benchmark" (stop 47): sy-select at 10 M took
//! 533,000 page faults instead of 907,000–927,000 and 0.8–3.4 s of system time instead of
//! 1.4–4.8 s (the host's share varies), peak unchanged. sy-fit with one heap was slower (10 M:
//! 5.2–6.1 s against 3.8–4.9 s; its fitting phase 3.0 s against 1.3–2.1 s) and with a heap per
//! thread took 255,000–277,000 faults instead of 369,000–461,000. `sy-margin` measured the
//! same either way (0.76–0.85 s against 0.81–0.88 s), so it keeps glibc's defaults.

/// Extra memory the heap takes each time it grows.
pub const TOP_PAD_BYTES: i32 = 64 << 20;

/// How the threads share glibc's heaps (its arenas).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arenas {
    /// Every thread allocates from the main heap (`M_ARENA_MAX` = 1).
    One,
    /// glibc's default: threads get heaps of their own.
    PerThread,
}

/// Sets glibc's allocator to keep and reuse freed memory (see the module docs), with `arenas`.
/// Call it first thing in `main`, before any thread starts. Returns whether every setting was
/// taken (always `false` off glibc, where the allocator's defaults are left alone).
pub fn keep_freed_memory(arenas: Arenas) -> bool {
    imp::keep_freed_memory(arenas)
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
mod imp {
    use super::{Arenas, TOP_PAD_BYTES};

    pub(super) fn keep_freed_memory(arenas: Arenas) -> bool {
        let mut settings = vec![
            (libc::M_MMAP_MAX, 0),
            // mallopt(3): −1 turns trimming off.
            (libc::M_TRIM_THRESHOLD, -1),
            (libc::M_TOP_PAD, TOP_PAD_BYTES),
        ];
        if arenas == Arenas::One {
            settings.push((libc::M_ARENA_MAX, 1));
        }
        // Every setting is made, whether or not an earlier one was taken.
        let mut all = true;
        for (param, value) in settings {
            // SAFETY: `mallopt` only changes a tuning parameter of glibc's allocator under its
            // own lock; it reads and writes no memory of ours, and each value is one mallopt(3)
            // documents for its parameter.
            all &= unsafe { libc::mallopt(param, value) == 1 };
        }
        all
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
mod imp {
    pub(super) fn keep_freed_memory(_arenas: super::Arenas) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    #[test]
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn glibc_takes_every_setting() {
        assert!(super::keep_freed_memory(super::Arenas::PerThread));
        assert!(super::keep_freed_memory(super::Arenas::One));
    }
}
