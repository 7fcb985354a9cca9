//! Token-exact prompts with a unique nonce per (invocation, condition, repeat, attempt).
//!
//! Prompts are lists of token ids drawn from the plan's vocabulary by a ChaCha generator seeded
//! from the plan seed, the *invocation id* and a *nonce key* (condition id, repeat, attempt,
//! purpose). Because the first block is already random, two different keys share no cached
//! block: no unplanned cache hit can happen across conditions, repeats or retries.
//!
//! The invocation id is drawn at random when the process starts (a fresh one on every
//! `--resume` too) and recorded in the manifest. Without it, prompts would depend on the plan
//! and seed alone, so running the same plan twice against a warm deployment — or a resumed run
//! re-doing a unit that the killed run had already primed — would find its "uncached" prompts
//! still in the prefix cache. The primed prefix of a unit is exactly the first `round(f·N)`
//! tokens of its probe prompt.

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sha2::{Digest, Sha256};

use crate::plan::PromptSpec;

/// Builds prompts from a seed and a vocabulary range.
#[derive(Debug, Clone)]
pub struct PromptFactory {
    seed: u64,
    /// Unique to this process invocation (see the module docs).
    invocation_id: String,
    vocab_min: u32,
    vocab_max: u32,
}

impl PromptFactory {
    pub fn new(seed: u64, invocation_id: &str, spec: &PromptSpec) -> Self {
        Self {
            seed,
            invocation_id: invocation_id.to_string(),
            vocab_min: spec.vocab_min,
            vocab_max: spec.vocab_max,
        }
    }

    /// The invocation id mixed into every nonce.
    pub fn invocation_id(&self) -> &str {
        &self.invocation_id
    }

    /// `len` token ids determined by the seed, the invocation id and `key` alone.
    pub fn tokens(&self, key: &str, len: u64) -> Vec<u32> {
        let mut h = Sha256::new();
        h.update(self.seed.to_le_bytes());
        // Length-prefixed so that (invocation, key) pairs cannot collide by concatenation.
        h.update((self.invocation_id.len() as u64).to_le_bytes());
        h.update(self.invocation_id.as_bytes());
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

/// A fresh random invocation id (16 hex digits from the operating system's generator).
pub fn new_invocation_id() -> String {
    format!("{:016x}", rand::random::<u64>())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn factory() -> PromptFactory {
        factory_for("inv-a")
    }

    fn factory_for(invocation: &str) -> PromptFactory {
        PromptFactory::new(
            7,
            invocation,
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
            "inv-a",
            &PromptSpec {
                vocab_min: 1000,
                vocab_max: 2000,
            },
        );
        assert_ne!(a, other_seed.probe("c", 0, 1, 16));
    }

    #[test]
    fn another_invocation_shares_no_first_block() {
        let a = factory_for("inv-a");
        let b = factory_for("inv-b");
        for (cond, rep, att) in [("c", 0, 1), ("c", 1, 1), ("d", 3, 2)] {
            // Same plan, seed and key, another invocation: nothing in common from the first
            // block on, so a warm deployment holds none of it.
            assert_ne!(
                a.probe(cond, rep, att, 16),
                b.probe(cond, rep, att, 16),
                "{cond}/{rep}/{att}"
            );
            assert_ne!(
                a.background("u", "prefill0", 0, 16),
                b.background("u", "prefill0", 0, 16)
            );
            // Within one invocation the prompt stays a pure function of the key.
            assert_eq!(a.probe(cond, rep, att, 16), a.probe(cond, rep, att, 16));
        }
        // No collision by concatenation of invocation id and key.
        assert_ne!(
            factory_for("ab").tokens("c", 16),
            factory_for("a").tokens("bc", 16)
        );
    }

    #[test]
    fn invocation_ids_are_fresh() {
        let ids: std::collections::HashSet<String> = (0..64).map(|_| new_invocation_id()).collect();
        assert_eq!(ids.len(), 64);
        assert!(
            ids.iter()
                .all(|i| i.len() == 16 && i.chars().all(|c| c.is_ascii_hexdigit()))
        );
    }

    proptest! {
        #[test]
        fn tokens_stay_in_vocab(lo in 0u32..50_000, width in 2u32..1000, len in 0u64..300) {
            let f = PromptFactory::new(1, "i", &PromptSpec { vocab_min: lo, vocab_max: lo + width });
            let t = f.tokens("k", len);
            prop_assert_eq!(t.len() as u64, len);
            prop_assert!(t.iter().all(|&x| x >= lo && x < lo + width));
        }
    }
}
