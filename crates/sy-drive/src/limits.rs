//! The bounds every driving tool applies to a plan before anything is allocated or sent: tokens
//! per request and in flight, durations, background requests per level, and what this machine
//! allows (the open-file limit, against which background streams are counted).

/// Prompt tokens of one request (Dynamo's largest context windows are far below this; the
/// target's KV capacity is checked at preflight).
pub const MAX_PROMPT_TOKENS: u64 = 1 << 24;
/// Output tokens asked of one request.
pub const MAX_OUTPUT_TOKENS: u64 = 1 << 20;
/// Background requests of one contention level (or of the busy capable destination).
pub const MAX_CONTENTION: u32 = 4_096;
/// Prompt and output tokens of every request of one unit in flight at once (the prompts are
/// built in memory: 2^27 token ids are 512 MiB).
pub const MAX_UNIT_TOKENS: u64 = 1 << 27;
/// Any duration of the plan (timeouts, settle, warm-up, back-off): one day.
pub const MAX_DURATION_MS: u64 = 24 * 3_600_000;
/// File descriptors a run needs besides its connections (stdio, record files, runtime).
pub const FD_RESERVE: u64 = 64;

/// What the machine allows this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Machine {
    /// The soft open-file limit (`RLIMIT_NOFILE`, `ulimit -n`); `None` when unknown.
    pub open_files: Option<u64>,
}

impl Machine {
    /// The limits of this process (read from `/proc/self/limits`; unknown elsewhere).
    pub fn current() -> Machine {
        let open_files = std::fs::read_to_string("/proc/self/limits")
            .ok()
            .and_then(|t| parse_open_files(&t));
        Machine { open_files }
    }
}

/// The soft "Max open files" limit of a `/proc/<pid>/limits` text.
fn parse_open_files(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("Max open files"))?;
    let soft = line
        .get("Max open files".len()..)?
        .split_whitespace()
        .next()?;
    if soft == "unlimited" {
        return Some(u64::MAX);
    }
    soft.parse().ok()
}

/// Open files a unit with `slots` background streams needs: one connection per stream, the
/// two probes and their selection-service calls; with the embedded simulator both ends of
/// every connection are in this process, so count each twice.
pub fn files_needed(slots: u64) -> u64 {
    slots
        .saturating_add(4)
        .saturating_mul(2)
        .saturating_add(FD_RESERVE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_soft_open_file_limit() {
        let text = "Limit                     Soft Limit           Hard Limit           Units\n\
                    Max cpu time              unlimited            unlimited            seconds\n\
                    Max open files            1024                 524288               files\n";
        assert_eq!(parse_open_files(text), Some(1024));
        let text = "Max open files            unlimited            unlimited            files\n";
        assert_eq!(parse_open_files(text), Some(u64::MAX));
        assert_eq!(parse_open_files("nothing here"), None);
    }

    #[test]
    fn files_needed_counts_both_ends_and_saturates() {
        assert_eq!(files_needed(0), 8 + FD_RESERVE);
        assert_eq!(files_needed(100), 208 + FD_RESERVE);
        assert_eq!(files_needed(u64::MAX), u64::MAX);
    }
}
