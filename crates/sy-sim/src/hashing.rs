//! Deterministic hashing and random numbers (no global state, no OS entropy).
//!
//! Block hashes are Dynamo's own *sequence hashes* (`dynamo-tokens` 1.6.1): the hash of block i
//! covers every token of blocks 0..=i, so two prompts share a cached block only if they share the
//! whole prefix up to it.

/// SplitMix64 step: a fast, well-mixed 64-bit generator.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix64(self.0)
    }

    /// Uniform in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.next_f64() < p
    }
}

/// The SplitMix64 finaliser.
pub fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Hash of a token slice, continuing from `prev`.
pub fn hash_tokens(prev: u64, tokens: &[u32]) -> u64 {
    let mut h = prev ^ 0x243F_6A88_85A3_08D3;
    for &t in tokens {
        h = mix64(h ^ u64::from(t)).wrapping_add(0x9E37_79B9_7F4A_7C15);
    }
    mix64(h ^ tokens.len() as u64)
}

/// The seed of Dynamo 1.6.1's token block hashes (`dynamo_tokens::CHAIN_XXH3_SEED`, which the
/// router's request-side hashing and the mocker's KV events also use).
const BLOCK_HASH_SEED: u64 = dynamo_tokens::CHAIN_XXH3_SEED;

/// Dynamo's sequence hashes of every *full* block of `tokens` (a partial last block has none):
/// block 0's is its token hash, block i's chains block i−1's with block i's token hash
/// (`dynamo_tokens::compute_block_hash_for_tokens` and `compute_next_sequence_hash`, 1.6.1). They
/// are the `block_hash`es of the mocker engine's KV events and the `sequence_hashes` a Dynamo
/// 1.6.1 selection service answers.
pub fn sequence_hashes(tokens: &[u32], block_size: u32) -> Vec<u64> {
    let bs = block_size.max(1) as usize;
    let mut out = Vec::with_capacity(tokens.len() / bs);
    let mut prev: Option<u64> = None;
    for block in tokens.chunks_exact(bs) {
        let local = dynamo_tokens::compute_block_hash_for_tokens(block, BLOCK_HASH_SEED);
        let seq = prev.map_or(local, |p| {
            dynamo_tokens::compute_next_sequence_hash(p, local)
        });
        out.push(seq);
        prev = Some(seq);
    }
    out
}

/// Hash of a prompt (for deterministic output tokens).
pub fn prompt_hash(tokens: &[u32]) -> u64 {
    hash_tokens(0x7072_6F6D_7074, tokens)
}

/// The output token at `position` for a prompt: in [1000, 2000) like Dynamo 1.6.1's mocker.
pub fn output_token(seed: u64, prompt_hash: u64, position: u32) -> u32 {
    let h = mix64(seed ^ mix64(prompt_hash ^ (u64::from(position) << 32 | 0x0A0B)));
    1000 + (h % 1000) as u32
}

/// The toy tokenizer: one token per whitespace-separated word, id in [2000, 32000).
pub fn tokenize(text: &str) -> Vec<u32> {
    text.split_whitespace()
        .map(|w| {
            2000 + (hash_tokens(0x7465_7874, &w.bytes().map(u32::from).collect::<Vec<_>>())
                % 30_000) as u32
        })
        .collect()
}

/// The toy detokenizer: a word per token id (never empty).
pub fn detokenize(token: u32) -> String {
    const SYL: [&str; 16] = [
        "ka", "lo", "mi", "ne", "ru", "sa", "to", "vi", "ze", "po", "da", "fu", "gi", "ho", "ju",
        "be",
    ];
    let a = SYL[(token % 16) as usize];
    let b = SYL[((token / 16) % 16) as usize];
    format!(" {a}{b}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chained_hashes_depend_on_the_whole_prefix() {
        let a: Vec<u32> = (0..64).collect();
        let mut b = a.clone();
        b[0] = 999;
        let ha = sequence_hashes(&a, 16);
        let hb = sequence_hashes(&b, 16);
        assert_eq!(ha.len(), 4);
        assert!(ha.iter().zip(&hb).all(|(x, y)| x != y));
        let mut c = a.clone();
        c[40] = 7;
        let hc = sequence_hashes(&c, 16);
        assert_eq!(ha[..2], hc[..2]);
        assert_ne!(ha[2], hc[2]);
        assert_eq!(sequence_hashes(&a[..63], 16).len(), 3);
    }

    #[test]
    fn tokens_and_rng_are_deterministic() {
        assert_eq!(tokenize("hello world hello"), tokenize("hello world hello"));
        let t = tokenize("hello world hello");
        assert_eq!(t[0], t[2]);
        assert_ne!(t[0], t[1]);
        let p = prompt_hash(&t);
        let o: Vec<u32> = (0..10).map(|i| output_token(1, p, i)).collect();
        assert!(o.iter().all(|x| (1000..2000).contains(x)));
        assert_eq!(
            o,
            (0..10).map(|i| output_token(1, p, i)).collect::<Vec<_>>()
        );
        assert_ne!(
            o,
            (0..10).map(|i| output_token(2, p, i)).collect::<Vec<_>>()
        );
        let mut r = SplitMix64::new(3);
        let mut s = SplitMix64::new(3);
        assert_eq!(r.next_u64(), s.next_u64());
    }
}
