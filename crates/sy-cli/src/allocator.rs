//! The allocator's settings for `sy-select`.
//!
//! Its inner loops (the stability seeds, the search's sorted lists, the replays) allocate and
//! free vectors of megabytes many times over. With glibc's defaults each freed block at the top
//! of a thread's heap is handed back to the kernel and the next one faults its pages in again,
//! zeroed: at 1 M records that was 0.5 s of system time in `sy-select`. Keeping a pad of freed
//! memory at the top of each heap reuses those pages instead (measured in
//! `crates/sy-select/README.md`, "Allocator"). `sy-fit` and `sy-margin` measured no change, so
//! they keep the defaults.

/// Extra memory each heap keeps when it grows and when it is trimmed.
pub const TOP_PAD_BYTES: i32 = 64 << 20;

/// Asks glibc's allocator to keep [`TOP_PAD_BYTES`] of freed memory at the top of every heap.
/// Call it first thing in `main`, before any thread starts. Returns whether the setting was
/// taken (always `false` off glibc, where the allocator's defaults are left alone).
pub fn keep_freed_memory() -> bool {
    set_top_pad(TOP_PAD_BYTES)
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
fn set_top_pad(bytes: i32) -> bool {
    // SAFETY: `mallopt` only changes a tuning parameter of glibc's allocator under its own lock;
    // it reads and writes no memory of ours, and any value is valid for M_TOP_PAD.
    unsafe { libc::mallopt(libc::M_TOP_PAD, bytes) == 1 }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn set_top_pad(_bytes: i32) -> bool {
    false
}

#[cfg(test)]
mod tests {
    #[test]
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn glibc_takes_the_setting() {
        assert!(super::keep_freed_memory());
    }
}
