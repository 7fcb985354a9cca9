//! The selection service (`dynamo.select_service`): worker catalogue, router queries and the
//! reservation books.
//!
//! Booked load moves exactly as on Dynamo 1.6.1 (see `crates/sy-wire/tests/fixtures`):
//! - `select_and_reserve` / a replayed `POST /reservations` book the request on the chosen
//!   worker: `active_requests + 1`, its uncached prefill tokens (`effective_prefill_tokens`),
//!   and its full prompt blocks in the worker's set of active blocks (a block shared by two
//!   bookings counts once);
//! - the explicit `POST /reservations` form books the request and its blocks but no prefill
//!   tokens (as observed on 1.6.1) unless `effective_prefill_tokens` is given;
//! - `prefill_complete` releases the booking's prefill tokens;
//! - `DELETE /reservations/{id}` releases everything (a second delete: 404);
//! - `/loads` shows only booked amounts; `/select` (also `advisory`) books nothing.

use std::collections::{BTreeMap, HashMap, VecDeque};

use sy_wire::{
    DEFAULT_ROUTING_GROUP, OverlapSummary, PotentialLoad, WorkerLifecycle, WorkerLoad,
    WorkerRecord, WorkerRegistration,
};

use crate::hashing::SplitMix64;

/// Dynamo's silent capacity for a worker registered without `max_num_batched_tokens`.
pub const MISSING_CAPACITY_SENTINEL: u64 = 10_000_000;

const SELECTION_CACHE_LIMIT: usize = 65_536;

/// Booked load of one worker.
#[derive(Debug, Default, Clone)]
pub(crate) struct Booked {
    pub requests: u64,
    pub prefill_tokens: u64,
    /// Active full blocks (hash → bookings holding it).
    pub blocks: HashMap<u64, u32>,
}

impl Booked {
    fn decode_blocks(&self) -> u64 {
        self.blocks.len() as u64
    }

    fn new_blocks(&self, hashes: &[u64]) -> u64 {
        hashes
            .iter()
            .filter(|h| !self.blocks.contains_key(h))
            .count() as u64
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Booking {
    pub worker: u64,
    pub prefill_tokens: u64,
    pub hashes: Vec<u64>,
}

#[derive(Debug, Clone)]
pub(crate) struct CachedSelection {
    pub model: String,
    pub worker: u64,
    pub prefill_tokens: u64,
    pub hashes: Vec<u64>,
}

/// The selection service's state.
#[derive(Debug)]
pub(crate) struct SelectionState {
    pub catalogue: BTreeMap<u64, WorkerRecord>,
    pub booked: HashMap<u64, Booked>,
    pub reservations: HashMap<String, Booking>,
    pub pending: HashMap<String, CachedSelection>,
    pending_order: VecDeque<String>,
    pub rng: SplitMix64,
}

/// A candidate worker evaluated for one prompt.
#[derive(Debug, Clone)]
pub(crate) struct Candidate {
    pub worker: u64,
    pub overlap_blocks: u64,
    pub cost: f64,
}

impl SelectionState {
    pub fn new(seed: u64) -> Self {
        Self {
            catalogue: BTreeMap::new(),
            booked: HashMap::new(),
            reservations: HashMap::new(),
            pending: HashMap::new(),
            pending_order: VecDeque::new(),
            rng: SplitMix64::new(seed ^ 0x5E1EC7),
        }
    }

    /// Registers (or re-registers) a worker; returns its catalogue record.
    pub fn register(&mut self, r: WorkerRegistration) -> WorkerRecord {
        let mut reasons = Vec::new();
        if r.endpoint.as_deref().is_none_or(str::is_empty) {
            reasons.push("endpoint is required".to_owned());
        }
        if r.block_size.is_none_or(|b| b == 0) {
            reasons.push("block_size must be greater than 0".to_owned());
        }
        let lifecycle = if reasons.is_empty() {
            WorkerLifecycle::Schedulable
        } else {
            WorkerLifecycle::Incomplete
        };
        let rec = WorkerRecord {
            worker_id: r.worker_id,
            model_name: r.model_name.unwrap_or_else(|| "default".to_owned()),
            routing_group: r
                .routing_group
                .unwrap_or_else(|| DEFAULT_ROUTING_GROUP.to_owned()),
            lifecycle,
            endpoint: r.endpoint,
            kv_events_endpoint: r.kv_events_endpoint,
            kv_events_endpoints: r.kv_events_endpoints,
            block_size: r.block_size,
            data_parallel_start_rank: r.data_parallel_start_rank,
            data_parallel_size: r.data_parallel_size,
            max_num_batched_tokens: r.max_num_batched_tokens,
            total_kv_blocks: r.total_kv_blocks,
            taints: Vec::new(),
            topology_domains: BTreeMap::new(),
            not_schedulable_reasons: (!reasons.is_empty()).then_some(reasons),
            extra: sy_wire::Extra::new(),
        };
        self.catalogue.insert(rec.worker_id, rec.clone());
        self.booked.entry(rec.worker_id).or_default();
        rec
    }

    /// Removes a worker; returns its last record (lifecycle `unschedulable`).
    pub fn deregister(&mut self, id: u64) -> Option<WorkerRecord> {
        let mut rec = self.catalogue.remove(&id)?;
        rec.lifecycle = WorkerLifecycle::Unschedulable;
        self.booked.remove(&id);
        Some(rec)
    }

    /// Schedulable workers of `model`, in id order.
    pub fn schedulable(&self, model: &str) -> Vec<&WorkerRecord> {
        self.catalogue
            .values()
            .filter(|w| w.model_name == model && w.lifecycle == WorkerLifecycle::Schedulable)
            .collect()
    }

    /// Load row of `/loads` (booked amounts only).
    pub fn load_row(&self, id: u64) -> PotentialLoad {
        let b = self.booked.get(&id);
        PotentialLoad {
            worker_id: id,
            dp_rank: 0,
            potential_prefill_tokens: b.map_or(0, |b| b.prefill_tokens),
            potential_decode_blocks: b.map_or(0, Booked::decode_blocks),
            active_requests: b.map_or(0, |b| b.requests),
            extra: sy_wire::Extra::new(),
        }
    }

    /// Row of `/potential_loads`: booked + this prompt's uncached tokens and new full blocks.
    pub fn potential_row(
        &self,
        id: u64,
        isl: u64,
        overlap_tokens: u64,
        hashes: &[u64],
    ) -> PotentialLoad {
        let b = self.booked.get(&id);
        PotentialLoad {
            worker_id: id,
            dp_rank: 0,
            potential_prefill_tokens: b.map_or(0, |b| b.prefill_tokens)
                + isl.saturating_sub(overlap_tokens),
            potential_decode_blocks: b.map_or(0, Booked::decode_blocks)
                + b.map_or(hashes.len() as u64, |b| b.new_blocks(hashes)),
            active_requests: b.map_or(0, |b| b.requests),
            extra: sy_wire::Extra::new(),
        }
    }

    /// `potential_decode_blocks` of a select answer: active blocks with this prompt's,
    /// plus its partial last block.
    pub fn select_decode_blocks(&self, id: u64, isl: u64, block_size: u64, hashes: &[u64]) -> u64 {
        let partial = isl.div_ceil(block_size.max(1)) - hashes.len() as u64;
        self.potential_row(id, isl, 0, hashes)
            .potential_decode_blocks
            + partial
    }

    /// `worker_load` of an advisory answer.
    pub fn worker_load(&self, id: u64) -> WorkerLoad {
        let rec = self.catalogue.get(&id);
        WorkerLoad {
            active_prefill_tokens: self.booked.get(&id).map_or(0, |b| b.prefill_tokens),
            prefill_token_capacity: rec
                .and_then(|r| r.max_num_batched_tokens)
                .unwrap_or(MISSING_CAPACITY_SENTINEL),
            total_kv_blocks: rec.and_then(|r| r.total_kv_blocks),
            prefill_busy: None,
            extra: sy_wire::Extra::new(),
        }
    }

    /// Dynamo's default cost: `weight × (booked prefill + uncached) / block_size + decode blocks`.
    pub fn cost(
        &self,
        id: u64,
        isl: u64,
        overlap_tokens: u64,
        hashes: &[u64],
        block_size: u64,
        weight: f64,
    ) -> f64 {
        let row = self.potential_row(id, isl, overlap_tokens, hashes);
        weight * row.potential_prefill_tokens as f64 / block_size.max(1) as f64
            + row.potential_decode_blocks as f64
    }

    /// Picks the lowest cost; ties broken by the seeded generator.
    pub fn pick(&mut self, candidates: &[Candidate]) -> Option<Candidate> {
        let min = candidates
            .iter()
            .map(|c| c.cost)
            .fold(f64::INFINITY, f64::min);
        let best: Vec<&Candidate> = candidates.iter().filter(|c| c.cost <= min + 1e-9).collect();
        match best.len() {
            0 => None,
            1 => Some(best[0].clone()),
            n => {
                let r = self.rng.next_u64();
                Some(best[(r % n as u64) as usize].clone())
            }
        }
    }

    /// Books a reservation (the caller checked the id is free).
    pub fn book(&mut self, id: String, booking: Booking) {
        let b = self.booked.entry(booking.worker).or_default();
        b.requests += 1;
        b.prefill_tokens += booking.prefill_tokens;
        for h in &booking.hashes {
            *b.blocks.entry(*h).or_insert(0) += 1;
        }
        self.reservations.insert(id, booking);
    }

    /// Releases a reservation's prefill tokens. False if unknown.
    pub fn prefill_complete(&mut self, id: &str) -> bool {
        let Some(r) = self.reservations.get_mut(id) else {
            return false;
        };
        let tokens = std::mem::take(&mut r.prefill_tokens);
        if let Some(b) = self.booked.get_mut(&r.worker) {
            b.prefill_tokens = b.prefill_tokens.saturating_sub(tokens);
        }
        true
    }

    /// Frees a reservation. False if unknown.
    pub fn free(&mut self, id: &str) -> bool {
        let Some(r) = self.reservations.remove(id) else {
            return false;
        };
        if let Some(b) = self.booked.get_mut(&r.worker) {
            b.requests = b.requests.saturating_sub(1);
            b.prefill_tokens = b.prefill_tokens.saturating_sub(r.prefill_tokens);
            for h in &r.hashes {
                if let Some(c) = b.blocks.get_mut(h) {
                    *c -= 1;
                    if *c == 0 {
                        b.blocks.remove(h);
                    }
                }
            }
        }
        true
    }

    /// Remembers a `/select` with `selection_id` for a later replay.
    pub fn remember(&mut self, id: String, sel: CachedSelection) {
        if self.pending.insert(id.clone(), sel).is_none() {
            self.pending_order.push_back(id);
        }
        while self.pending_order.len() > SELECTION_CACHE_LIMIT {
            if let Some(old) = self.pending_order.pop_front() {
                self.pending.remove(&old);
            }
        }
    }

    pub fn take_pending(&mut self, id: &str, model: &str) -> Option<CachedSelection> {
        if self.pending.get(id).is_some_and(|p| p.model == model) {
            self.pending_order.retain(|x| x != id);
            self.pending.remove(id)
        } else {
            None
        }
    }

    /// An overlap summary for `tokens` matched tokens (GPU only; tiers are cumulative).
    pub fn overlap(tokens: u64) -> OverlapSummary {
        OverlapSummary {
            longest_matched: tokens,
            gpu: tokens,
            dp: BTreeMap::from([("0".to_owned(), tokens)]),
            cpu: tokens,
            disk: tokens,
            extra: sy_wire::Extra::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn booked_load_moves_like_dynamo() {
        let mut s = SelectionState::new(1);
        s.register(WorkerRegistration {
            worker_id: 7,
            model_name: Some("m".into()),
            endpoint: Some("dyn://m.backend.generate/7".into()),
            block_size: Some(16),
            max_num_batched_tokens: Some(2048),
            ..Default::default()
        });
        let hashes: Vec<u64> = (0..18).collect();
        s.book(
            "a".into(),
            Booking {
                worker: 7,
                prefill_tokens: 300,
                hashes: hashes.clone(),
            },
        );
        let row = s.load_row(7);
        assert_eq!(
            (
                row.potential_prefill_tokens,
                row.potential_decode_blocks,
                row.active_requests
            ),
            (300, 18, 1)
        );
        // A second booking of the same prompt shares its blocks.
        s.book(
            "b".into(),
            Booking {
                worker: 7,
                prefill_tokens: 0,
                hashes: hashes.clone(),
            },
        );
        assert_eq!(s.load_row(7).potential_decode_blocks, 18);
        assert!(s.prefill_complete("a"));
        assert_eq!(s.load_row(7).potential_prefill_tokens, 0);
        assert_eq!(s.load_row(7).active_requests, 2);
        assert!(s.free("a"));
        assert!(!s.free("a"));
        assert!(s.free("b"));
        let row = s.load_row(7);
        assert_eq!(
            (
                row.potential_prefill_tokens,
                row.potential_decode_blocks,
                row.active_requests
            ),
            (0, 0, 0)
        );
        assert_eq!(s.select_decode_blocks(7, 300, 16, &hashes), 19);
    }
}
