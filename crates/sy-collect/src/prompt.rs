//! Token-exact prompts with a unique nonce per (condition, repeat, attempt).
//!
//! Prompts are lists of token ids drawn from the plan's vocabulary by a ChaCha generator seeded
//! from the plan seed and a *nonce key* (condition id, repeat, attempt, purpose). Because the
//! first block is already random, two different keys share no cached block: no unplanned cache
//! hit can happen across conditions, repeats or retries. The primed prefix of a unit is exactly
//! the first `round(f·N)` tokens of its probe prompt.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sha2::{Digest, Sha256};

use crate::plan::PromptSpec;

/// Builds prompts from a seed and a vocabulary range.
#[derive(Debug, Clone)]
pub struct PromptFactory {
    seed: u64,
    vocab_min: u32,
    vocab_max: u32,
}

impl PromptFactory {
    pub fn new(seed: u64, spec: &PromptSpec) -> Self {
        Self {
            seed,
            vocab_min: spec.vocab_min,
            vocab_max: spec.vocab_max,
        }
    }

    /// `len` token ids determined by the seed and `key` alone.
    pub fn tokens(&self, key: &str, len: u64) -> Vec<u32> {
        let mut h = Sha256::new();
        h.update(self.seed.to_le_bytes());
        h.update(key.as_bytes());
        let digest: [u8; 32] = h.finalize().into();
        let mut rng = ChaCha8Rng::from_seed(digest);
        (0..len)
            .map(|_| rng.random_range(self.vocab_min..self.vocab_max))
            .collect()
    }

    /// The probe prompt of one unit attempt (its prefix is what gets primed).
    pub fn probe(&self, condition_id: &str, repeat: u32, attempt: u32, n: u64) -> Vec<u32> {
        self.tokens(&format!("probe/{condition_id}/{repeat}/{attempt}"), n)
    }

    /// A background prompt: unique per unit attempt, slot and iteration.
    pub fn background(&self, unit_key: &str, slot: &str, iteration: u64, n: u64) -> Vec<u32> {
        self.tokens(&format!("bg/{unit_key}/{slot}/{iteration}"), n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn factory() -> PromptFactory {
        PromptFactory::new(
            7,
            &PromptSpec {
                vocab_min: 1000,
                vocab_max: 2000,
            },
        )
    }

    #[test]
    fn deterministic_and_exact_length() {
        let f = factory();
        let a = f.probe("q-n64-f0.500", 0, 1, 64);
        assert_eq!(a.len(), 64);
        assert_eq!(a, f.probe("q-n64-f0.500", 0, 1, 64));
        // A prefix of the same key is the prefix of the longer prompt.
        assert_eq!(&f.probe("q-n64-f0.500", 0, 1, 16)[..], &a[..16]);
        assert!(a.iter().all(|&t| (1000..2000).contains(&t)));
    }

    #[test]
    fn different_keys_share_no_first_block() {
        let f = factory();
        let a = f.probe("c", 0, 1, 16);
        for (cond, rep, att) in [("c", 1, 1), ("c", 0, 2), ("d", 0, 1)] {
            assert_ne!(a, f.probe(cond, rep, att, 16));
        }
        let other_seed = PromptFactory::new(
            8,
            &PromptSpec {
                vocab_min: 1000,
                vocab_max: 2000,
            },
        );
        assert_ne!(a, other_seed.probe("c", 0, 1, 16));
    }

    proptest! {
        #[test]
        fn tokens_stay_in_vocab(lo in 0u32..50_000, width in 2u32..1000, len in 0u64..300) {
            let f = PromptFactory::new(1, &PromptSpec { vocab_min: lo, vocab_max: lo + width });
            let t = f.tokens("k", len);
            prop_assert_eq!(t.len() as u64, len);
            prop_assert!(t.iter().all(|&x| x >= lo && x < lo + width));
        }
    }
}
