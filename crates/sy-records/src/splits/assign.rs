//! The split rule: a condition's split from the seed, the fractions and its own id.

use sha2::{Digest, Sha256};
use sy_rundir::split::{Split, SplitFractions};

/// The hash point of a condition in `[0, 1)`.
pub fn split_point(seed: u64, run_id: &str, condition_id: &str) -> f64 {
    let mut h = Sha256::new();
    h.update(b"sy-split-v1\0");
    h.update(seed.to_le_bytes());
    h.update((run_id.len() as u64).to_le_bytes());
    h.update(run_id.as_bytes());
    h.update(condition_id.as_bytes());
    let d = h.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&d[..8]);
    let x = u64::from_be_bytes(first);
    (x >> 11) as f64 / (1u64 << 53) as f64
}

/// The split of one condition under a seed and fractions.
pub fn assign_split(
    seed: u64,
    fractions: &SplitFractions,
    run_id: &str,
    condition_id: &str,
) -> Split {
    fractions.split_at(split_point(seed, run_id, condition_id))
}
