//! The block prefix cache of one worker.
//!
//! Blocks are keyed by chained block hashes (see [`crate::hashing`]). A block is either
//! *referenced* (held by at least one running sequence), *cached* (unreferenced but kept,
//! evictable, in LRU order) or free. Sequences also hold *private* blocks (a partial prompt
//! tail, the generated tokens, prompt blocks not yet computed). Capacity counts all of them.

use std::collections::{BTreeMap, HashMap};

#[derive(Debug, Clone, Copy)]
struct Entry {
    refs: u32,
    stamp: u64,
}

/// A worker's KV block pool with prefix reuse and LRU eviction of unreferenced blocks.
#[derive(Debug)]
pub struct BlockCache {
    capacity: u64,
    entries: HashMap<u64, Entry>,
    lru: BTreeMap<u64, u64>,
    referenced: u64,
    private: u64,
    clock: u64,
    evictions: u64,
}

impl BlockCache {
    pub fn new(capacity: u64) -> Self {
        Self {
            capacity,
            entries: HashMap::new(),
            lru: BTreeMap::new(),
            referenced: 0,
            private: 0,
            clock: 0,
            evictions: 0,
        }
    }

    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Blocks held by running sequences (shared prefix blocks counted once).
    pub fn used_blocks(&self) -> u64 {
        self.referenced + self.private
    }

    /// Unreferenced cached blocks (evictable).
    pub fn cached_unreferenced(&self) -> u64 {
        self.lru.len() as u64
    }

    /// Blocks evicted so far.
    pub fn evictions(&self) -> u64 {
        self.evictions
    }

    fn free(&self) -> u64 {
        self.capacity
            .saturating_sub(self.referenced + self.private + self.lru.len() as u64)
    }

    /// Number of leading `hashes` present in the cache (referenced or not).
    pub fn match_prefix(&self, hashes: &[u64]) -> usize {
        hashes
            .iter()
            .take_while(|h| self.entries.contains_key(h))
            .count()
    }

    /// Whether `hit` leading hashes plus `private` new blocks fit (evicting if needed).
    pub fn can_admit(&self, hashes: &[u64], hit: usize, private: u64) -> bool {
        // Hit blocks that sit in the LRU stop being evictable once acquired.
        let hit_in_lru = hashes[..hit]
            .iter()
            .filter(|h| self.entries.get(h).is_some_and(|e| e.refs == 0))
            .count() as u64;
        self.free() + self.lru.len() as u64 - hit_in_lru >= private
    }

    /// Takes a reference on the first `hit` hashes and allocates `private` blocks.
    /// Call only after [`Self::can_admit`] said yes.
    pub fn admit(&mut self, hashes: &[u64], hit: usize, private: u64) {
        for h in &hashes[..hit] {
            self.acquire(*h);
        }
        self.alloc_private(private);
    }

    fn acquire(&mut self, h: u64) {
        if let Some(e) = self.entries.get_mut(&h) {
            if e.refs == 0 {
                self.lru.remove(&e.stamp);
                self.referenced += 1;
            }
            e.refs += 1;
        }
    }

    fn alloc_private(&mut self, k: u64) {
        while self.free() < k {
            let Some((_, victim)) = self.lru.pop_first() else {
                break;
            };
            self.entries.remove(&victim);
            self.evictions += 1;
        }
        self.private += k;
    }

    /// Turns one private block into the cached block `h` (its prefill finished).
    pub fn register(&mut self, h: u64) {
        self.private = self.private.saturating_sub(1);
        match self.entries.entry(h) {
            std::collections::hash_map::Entry::Occupied(_) => self.acquire(h),
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(Entry { refs: 1, stamp: 0 });
                self.referenced += 1;
            }
        }
    }

    /// Drops a sequence's references and private blocks; unreferenced blocks join the LRU.
    pub fn release(&mut self, hashes: &[u64], private: u64) {
        self.private = self.private.saturating_sub(private);
        for h in hashes {
            if let Some(e) = self.entries.get_mut(h) {
                e.refs = e.refs.saturating_sub(1);
                if e.refs == 0 {
                    self.clock += 1;
                    e.stamp = self.clock;
                    self.lru.insert(self.clock, *h);
                    self.referenced = self.referenced.saturating_sub(1);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reuse_then_lru_eviction_of_unreferenced_blocks() {
        let mut c = BlockCache::new(8);
        let a = [1u64, 2, 3, 4];
        // Sequence A: 4 prompt blocks computed.
        assert!(c.can_admit(&a, 0, 4));
        c.admit(&a, 0, 4);
        for h in a {
            c.register(h);
        }
        assert_eq!(c.used_blocks(), 4);
        c.release(&a, 0);
        assert_eq!(c.used_blocks(), 0);
        assert_eq!(c.match_prefix(&a), 4);
        // Sequence B shares the first two blocks.
        let b = [1u64, 2, 30, 40];
        assert_eq!(c.match_prefix(&b), 2);
        c.admit(&b, 2, 2);
        assert_eq!(c.used_blocks(), 4);
        // Fill the rest: needs 4 more → evicts the unreferenced LRU blocks 3, 4 first.
        let d = [100u64, 101, 102, 103, 104, 105];
        assert!(c.can_admit(&d, 0, 4));
        assert!(!c.can_admit(&d, 0, 5));
        c.admit(&d, 0, 4);
        assert_eq!(c.match_prefix(&a), 2, "blocks 3 and 4 were evicted");
        assert_eq!(c.evictions(), 2);
    }
}
