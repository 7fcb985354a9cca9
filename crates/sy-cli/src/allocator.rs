//! The allocator's settings for `sy-select`.
//!
//! Its phases allocate and free vectors of hundreds of megabytes (a table, the pairs, the
//! search's view, the bootstraps' draws), one after another. With glibc's defaults a block that
//! large is mapped on its own and unmapped when freed, and so is anything freed at the top of a
//! heap; the next phase then faults every page of its blocks in again, zeroed by the kernel. On
//! the 2-core VM of the benchmarks a fresh page is not cheap, and its price varies from run to
//! run: one phase of `sy-select` measured 0.2 to 4.1 s of system time for the same 166,000 faults
//! (the VM's balloon device reports freed pages to its host, which takes them back). So the tool
//! keeps what it frees and reuses it:
//! - every block comes from the heap (`M_MMAP_MAX` = 0), which is never trimmed
//!   (`M_TRIM_THRESHOLD` = −1), so a freed block's pages are reused by the next allocation;
//! - one heap for every thread (`M_ARENA_MAX` = 1): a thread's extra heap holds at most 64 MiB,
//!   so the large blocks would still be mapped there, and a block freed by one thread is reused
//!   by another;
//! - the heap grows [`TOP_PAD_BYTES`] at a time.
//!
//! Measured in `crates/sy-select/README.md`, "Benchmark" (stop 47): sy-select at 10 M took
//! 533,000 page faults instead of 907,000–927,000 and 0.8–3.4 s of system time instead of
//! 1.4–4.8 s (the host's share varies), the three tools' median 0.8–0.9 s lower, peak unchanged.
//! `sy-fit` measured slower with the same settings (10 M: 5.2–6.1 s against 3.8–4.9 s, more
//! system time though fewer faults; why was not measured) and `sy-margin` the same, so both keep
//! glibc's defaults.

/// Extra memory the heap takes each time it grows.
pub const TOP_PAD_BYTES: i32 = 64 << 20;

/// Sets glibc's allocator to keep and reuse freed memory (see the module docs). Call it first
/// thing in `main`, before any thread starts. Returns whether every setting was taken (always
/// `false` off glibc, where the allocator's defaults are left alone).
pub fn keep_freed_memory() -> bool {
    imp::keep_freed_memory()
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
mod imp {
    use super::TOP_PAD_BYTES;

    pub(super) fn keep_freed_memory() -> bool {
        let settings = [
            (libc::M_MMAP_MAX, 0),
            // mallopt(3): −1 turns trimming off.
            (libc::M_TRIM_THRESHOLD, -1),
            (libc::M_ARENA_MAX, 1),
            (libc::M_TOP_PAD, TOP_PAD_BYTES),
        ];
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
    pub(super) fn keep_freed_memory() -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    #[test]
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn glibc_takes_every_setting() {
        assert!(super::keep_freed_memory());
    }
}
