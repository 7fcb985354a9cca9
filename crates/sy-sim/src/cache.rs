//! What the router knows of one worker's prefix cache: the sequence hashes of the blocks the
//! worker's engine announced as stored and not yet removed.
//!
//! On Dynamo 1.6.1 a worker's engine publishes KV events (blocks stored, blocks removed) and the
//! router's indexer keeps them per worker; a request's overlap with a worker is its longest run of
//! leading block hashes that worker holds. Here the engine is the mocker's own (see
//! [`crate::engine`]) and its events reach this set synchronously at the pass boundary that
//! produced them (no event-plane lag). Device-tier events only: no host tiers are configured.

use std::collections::HashSet;

use aisimulate_core::engine::{KvEvent, KvEventData, KvEventTier};

/// The blocks one worker holds, as its KV events said.
#[derive(Debug, Default)]
pub struct CachedBlocks {
    blocks: HashSet<u64>,
}

impl CachedBlocks {
    /// Number of leading `hashes` the worker holds.
    pub fn match_prefix(&self, hashes: &[u64]) -> usize {
        hashes
            .iter()
            .take_while(|h| self.blocks.contains(h))
            .count()
    }

    /// Blocks held.
    pub fn len(&self) -> usize {
        self.blocks.len()
    }

    /// Whether no block is held.
    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    /// Applies one of the engine's KV events.
    pub fn apply(&mut self, event: &KvEvent) {
        if event.tier != KvEventTier::Device {
            return;
        }
        match &event.data {
            KvEventData::Stored(stored) => {
                self.blocks
                    .extend(stored.blocks.iter().map(|b| b.block_hash));
            }
            KvEventData::Removed { block_hashes } => {
                for h in block_hashes {
                    self.blocks.remove(h);
                }
            }
        }
    }
}
