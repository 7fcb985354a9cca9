//! The observation adapter: what the rule sees of each candidate, taken the way the runtime
//! takes it.
//!
//! For each candidate model: a query-only advisory `POST /select` of the prompt (the worker and
//! rank Dynamo would pick, its GPU/host/disk overlap, effective prefill tokens and `worker_load`),
//! `POST /overlap_scores` of the prompt (its cached prefix on every worker and rank), `GET /loads`
//! (R = `active_requests`, booked prefill tokens and decode blocks of every worker and rank, the
//! pool's pending counts) and `GET /workers` (lifecycle, capacities). The reads run concurrently;
//! they are not an atomic snapshot, and `query_duration_ms` records what they cost.
//!
//! The advisory pick is not always the worker a later `select_and_reserve` books (load moves,
//! ties break randomly). So the snapshot covers every worker of the model:
//! [`CandidateObservation::fields`] is the advisory pick's view, and
//! [`CandidateObservation::fields_for`] the same snapshot's view of any other worker and rank —
//! the one a record must describe is the one that was reserved and served.
//!
//! Values the server did not give stay `None`. A prefill capacity of 0 or Dynamo's 10,000,000
//! default is kept as reported (the guard in `sy-selector` rejects it) but yields no `p`.

use std::time::Instant;

use sy_wire::unix_ms_now;

pub use sy_wire::ObservedFields;
use sy_wire::observed::p_of;
use sy_wire::{
    ModelLoads, OverlapScoresResponse, PotentialLoad, SelectResponse, WorkerLifecycle, WorkerRecord,
};

use crate::error::CallError;
use crate::selection::SelectionClient;

/// Dynamo's silent default capacity for a worker registered without `max_num_batched_tokens`
/// (the runtime crate's [`sy_selector::PREFILL_CAPACITY_SENTINEL`], as the wire's integer).
pub const CAPACITY_SENTINEL: u64 = sy_selector::PREFILL_CAPACITY_SENTINEL as u64;

/// One candidate as observed, with the raw answers kept for the record.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CandidateObservation {
    pub model: String,
    /// Prompt tokens sent in the query.
    pub n: u64,
    pub select: Option<SelectResponse>,
    /// The picked worker/rank's row of `/loads` (None when the model has no entry).
    pub load_row: Option<PotentialLoad>,
    /// The model's pool entry of `/loads`.
    pub pool: Option<ModelLoads>,
    /// The picked worker's `/workers` entry.
    pub worker: Option<WorkerRecord>,
    /// Every `/workers` entry of the model (to view a worker other than the pick).
    pub model_workers: Vec<WorkerRecord>,
    /// The prompt's overlap on every worker and rank of the model (`/overlap_scores`, blocks).
    pub overlaps: Option<OverlapScoresResponse>,
    pub observed_at_unix_ms: f64,
    pub query_duration_ms: f64,
    /// The first read that failed, if any (the observation is then partial).
    pub error: Option<CallError>,
}

impl CandidateObservation {
    /// The flat fields a record stores.
    pub fn fields(&self) -> ObservedFields {
        let Some(sel) = &self.select else {
            return ObservedFields {
                n: Some(self.n),
                observed_at_unix_ms: Some(self.observed_at_unix_ms),
                query_duration_ms: Some(self.query_duration_ms),
                ..ObservedFields::default()
            };
        };
        let load = sel.worker_load.as_ref();
        let capacity = load
            .map(|l| l.prefill_token_capacity)
            .or_else(|| self.worker.as_ref().and_then(|w| w.max_num_batched_tokens));
        let booked = load.map(|l| l.active_prefill_tokens);
        let p = p_of(booked, capacity);
        // A model entry without a row for the worker means nothing is booked there.
        let r = match (&self.load_row, &self.pool) {
            (Some(row), _) => Some(row.active_requests),
            (None, Some(_)) => Some(0),
            (None, None) => None,
        };
        let decode_blocks = match (&self.load_row, &self.pool) {
            (Some(row), _) => Some(row.potential_decode_blocks),
            (None, Some(_)) => Some(0),
            (None, None) => None,
        };
        ObservedFields {
            n: Some(self.n),
            k: Some(sel.overlap.gpu),
            r,
            prefill_tokens_booked: booked,
            prefill_capacity_tokens: capacity,
            p,
            host_overlap_tokens: Some(sel.overlap.cpu),
            disk_overlap_tokens: Some(sel.overlap.disk),
            effective_prefill_tokens: Some(sel.effective_prefill_tokens),
            decode_blocks,
            kv_capacity_blocks: load
                .and_then(|l| l.total_kv_blocks)
                .or_else(|| self.worker.as_ref().and_then(|w| w.total_kv_blocks)),
            pool_pending_requests: self.pool.as_ref().map(|p| p.pending_count),
            pool_pending_tokens: self.pool.as_ref().map(|p| p.pending_isl_tokens),
            schedulable: self
                .worker
                .as_ref()
                .map(|w| w.lifecycle == WorkerLifecycle::Schedulable),
            worker_id: Some(sel.worker_id),
            dp_rank: Some(sel.dp_rank),
            endpoint: (!sel.endpoint.is_empty()).then(|| sel.endpoint.clone()),
            routing_group: sel
                .routing_group
                .clone()
                .or_else(|| self.worker.as_ref().map(|w| w.routing_group.clone()))
                .filter(|g| !g.is_empty()),
            observed_at_unix_ms: Some(self.observed_at_unix_ms),
            query_duration_ms: Some(self.query_duration_ms),
        }
    }

    /// The advisory pick's (worker, rank), when the select answered.
    pub fn pick(&self) -> Option<(u64, u32)> {
        self.select.as_ref().map(|s| (s.worker_id, s.dp_rank))
    }

    /// The same snapshot's view of `worker`/`dp_rank` of this model: K from `/overlap_scores`
    /// (blocks × block size), R, booked prefill tokens and decode blocks from its `/loads` row,
    /// capacities and lifecycle from its `/workers` entry. For the advisory pick itself this is
    /// [`Self::fields`]. A worker the snapshot does not know (e.g. registered after it was
    /// taken) gets no K, R or P — never another worker's values. Diagnostics that only the
    /// advisory answer carries (host/disk overlap, effective prefill tokens) stay `None`.
    pub fn fields_for(&self, worker_id: u64, dp_rank: u32) -> ObservedFields {
        if self.pick() == Some((worker_id, dp_rank)) {
            return self.fields();
        }
        let entry = self.model_workers.iter().find(|w| w.worker_id == worker_id);
        let known = entry.is_some();
        let row = self.pool.as_ref().and_then(|p| {
            p.loads
                .iter()
                .find(|l| l.worker_id == worker_id && l.dp_rank == dp_rank)
        });
        // A known worker without a `/loads` row has nothing booked.
        let booked_row = |get: fn(&PotentialLoad) -> u64| match row {
            Some(l) => Some(get(l)),
            None => (known && self.pool.is_some()).then_some(0),
        };
        let block_size = self
            .overlaps
            .as_ref()
            .map(|o| o.block_size)
            .filter(|b| *b > 0)
            .or_else(|| entry.and_then(|w| w.block_size))
            .or_else(|| {
                self.select
                    .as_ref()
                    .map(|s| s.block_size)
                    .filter(|b| *b > 0)
            });
        let k = self.overlaps.as_ref().filter(|_| known).and_then(|o| {
            let blocks = o
                .workers
                .iter()
                .find(|w| w.worker_id == worker_id && w.dp_rank == dp_rank)
                .map_or(0, |w| w.device_blocks);
            Some(blocks * u64::from(block_size?))
        });
        let booked = booked_row(|l| l.potential_prefill_tokens);
        let capacity = entry.and_then(|w| w.max_num_batched_tokens);
        ObservedFields {
            n: Some(self.n),
            k: k.map(|k| k.min(self.n)),
            r: booked_row(|l| l.active_requests),
            prefill_tokens_booked: booked,
            prefill_capacity_tokens: capacity,
            p: p_of(booked, capacity),
            decode_blocks: booked_row(|l| l.potential_decode_blocks),
            kv_capacity_blocks: entry.and_then(|w| w.total_kv_blocks),
            pool_pending_requests: self.pool.as_ref().map(|p| p.pending_count),
            pool_pending_tokens: self.pool.as_ref().map(|p| p.pending_isl_tokens),
            schedulable: entry.map(|w| w.lifecycle == WorkerLifecycle::Schedulable),
            worker_id: Some(worker_id),
            dp_rank: Some(dp_rank),
            endpoint: entry.and_then(|w| w.endpoint.clone()),
            routing_group: entry
                .map(|w| w.routing_group.clone())
                .filter(|g| !g.is_empty()),
            observed_at_unix_ms: Some(self.observed_at_unix_ms),
            query_duration_ms: Some(self.query_duration_ms),
            ..ObservedFields::default()
        }
    }

    /// What `sy-selector` decides on (the advisory pick's view, extras included).
    pub fn to_observation(&self) -> sy_selector::Observation {
        self.fields().observation(Some(&self.model))
    }
}

/// A candidate to observe.
#[derive(Debug, Clone, Copy)]
pub struct Candidate<'a> {
    pub model: &'a str,
    pub tokens: &'a [u32],
    /// Restrict the pick to these workers (used only to step around a worker that just
    /// failed; `None` = the router's free choice, as at runtime).
    pub allowed: Option<&'a [u64]>,
}

/// Observes one candidate: advisory select, `/loads` and `/workers`, concurrently.
pub async fn observe_candidate(
    sel: &SelectionClient,
    model: &str,
    tokens: &[u32],
) -> CandidateObservation {
    let mut both = observe_candidates(
        sel,
        &[Candidate {
            model,
            tokens,
            allowed: None,
        }],
    )
    .await;
    both.pop().unwrap_or_default()
}

/// Observes several candidates at once (one `/loads` and one `/workers` read shared by all,
/// one advisory select and one `/overlap_scores` per candidate, all concurrently).
pub async fn observe_candidates(
    sel: &SelectionClient,
    candidates: &[Candidate<'_>],
) -> Vec<CandidateObservation> {
    let start = Instant::now();
    let selects = futures::future::join_all(
        candidates
            .iter()
            .map(|c| sel.select_among(c.model, c.tokens, true, c.allowed)),
    );
    let overlaps = futures::future::join_all(
        candidates
            .iter()
            .map(|c| sel.overlap_scores(c.model, c.tokens)),
    );
    let (selects, overlaps, loads, workers) =
        tokio::join!(selects, overlaps, sel.loads(None), sel.workers());
    let query_duration_ms = start.elapsed().as_secs_f64() * 1000.0;
    let observed_at_unix_ms = unix_ms_now();
    candidates
        .iter()
        .zip(selects.into_iter().zip(overlaps))
        .map(|(Candidate { model, tokens, .. }, (select, overlap))| {
            let mut obs = CandidateObservation {
                model: model.to_string(),
                n: tokens.len() as u64,
                observed_at_unix_ms,
                query_duration_ms,
                ..CandidateObservation::default()
            };
            match select {
                Ok(s) => obs.select = Some(s),
                Err(e) => obs.error = Some(e),
            }
            match overlap {
                Ok(o) => obs.overlaps = Some(o),
                Err(e) => {
                    obs.error.get_or_insert(e);
                }
            }
            match &loads {
                Ok(all) => {
                    obs.pool = all.iter().find(|m| m.model_name == *model).cloned();
                    if let (Some(pool), Some(s)) = (&obs.pool, &obs.select) {
                        obs.load_row = pool
                            .loads
                            .iter()
                            .find(|l| l.worker_id == s.worker_id && l.dp_rank == s.dp_rank)
                            .cloned();
                    }
                }
                Err(e) => {
                    obs.error.get_or_insert_with(|| e.clone());
                }
            }
            match &workers {
                Ok(ws) => {
                    obs.model_workers = ws
                        .iter()
                        .filter(|w| w.model_name == *model)
                        .cloned()
                        .collect();
                    if let Some(s) = &obs.select {
                        obs.worker = ws.iter().find(|w| w.worker_id == s.worker_id).cloned();
                    }
                }
                Err(e) => {
                    obs.error.get_or_insert_with(|| e.clone());
                }
            }
            obs
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use sy_wire::{OverlapSummary, WorkerLoad};

    fn obs() -> CandidateObservation {
        CandidateObservation {
            model: "efficient".into(),
            n: 1000,
            select: Some(SelectResponse {
                worker_id: 9_007_199_254_740_993,
                dp_rank: 0,
                endpoint: "dyn://efficient.backend.generate".into(),
                block_size: 16,
                overlap: OverlapSummary {
                    longest_matched: 512,
                    gpu: 512,
                    cpu: 600,
                    disk: 640,
                    ..OverlapSummary::default()
                },
                effective_prefill_tokens: 488,
                worker_load: Some(WorkerLoad {
                    active_prefill_tokens: 3000,
                    prefill_token_capacity: 2048,
                    total_kv_blocks: Some(4096),
                    ..WorkerLoad::default()
                }),
                ..SelectResponse::default()
            }),
            load_row: Some(PotentialLoad {
                worker_id: 9_007_199_254_740_993,
                dp_rank: 0,
                potential_prefill_tokens: 3000,
                potential_decode_blocks: 70,
                active_requests: 3,
                ..PotentialLoad::default()
            }),
            pool: Some(ModelLoads {
                model_name: "efficient".into(),
                pending_count: 1,
                pending_isl_tokens: 99,
                ..ModelLoads::default()
            }),
            worker: None,
            model_workers: Vec::new(),
            overlaps: None,
            observed_at_unix_ms: 1.0e12,
            query_duration_ms: 1.5,
            error: None,
        }
    }

    #[test]
    fn fields_map_the_answers() {
        let f = obs().fields();
        assert_eq!(f.k, Some(512));
        assert_eq!(f.r, Some(3));
        assert_eq!(f.p, Some(3000.0 / 2048.0));
        assert_eq!(f.host_overlap_tokens, Some(600));
        assert_eq!(f.disk_overlap_tokens, Some(640));
        assert_eq!(f.decode_blocks, Some(70));
        assert_eq!(f.kv_capacity_blocks, Some(4096));
        assert_eq!(f.pool_pending_requests, Some(1));
        assert_eq!(f.worker_id, Some(9_007_199_254_740_993));
        assert_eq!(f.schedulable, None);
        let o = obs().to_observation();
        assert_eq!(o.n, Some(1000.0));
        assert_eq!(
            o.recorded.as_deref().and_then(|r| r.model.as_deref()),
            Some("efficient")
        );
    }

    #[test]
    fn sentinel_capacity_gives_no_p() {
        let mut o = obs();
        if let Some(l) = o.select.as_mut().and_then(|s| s.worker_load.as_mut()) {
            l.prefill_token_capacity = CAPACITY_SENTINEL;
        }
        let f = o.fields();
        assert_eq!(f.p, None);
        assert_eq!(f.prefill_capacity_tokens, Some(CAPACITY_SENTINEL));
    }

    const OTHER: u64 = 9_007_199_254_740_995;

    /// The advisory pick plus a second worker (two ranks) in the same snapshot.
    fn two_workers() -> CandidateObservation {
        let mut o = obs();
        let entry = |id: u64, mbt: u64| -> WorkerRecord {
            serde_json::from_value(serde_json::json!({
                "worker_id": id, "model_name": "efficient", "lifecycle": "schedulable",
                "max_num_batched_tokens": mbt, "total_kv_blocks": 1024, "block_size": 16
            }))
            .unwrap()
        };
        o.model_workers = vec![entry(9_007_199_254_740_993, 2048), entry(OTHER, 1024)];
        o.overlaps = Some(OverlapScoresResponse {
            block_size: 16,
            workers: vec![sy_wire::WorkerOverlapScore {
                worker_id: OTHER,
                dp_rank: 1,
                device_blocks: 48,
                ..Default::default()
            }],
            ..Default::default()
        });
        if let Some(pool) = o.pool.as_mut() {
            pool.loads = vec![
                o.load_row.clone().unwrap_or_default(),
                PotentialLoad {
                    worker_id: OTHER,
                    dp_rank: 1,
                    potential_prefill_tokens: 512,
                    potential_decode_blocks: 9,
                    active_requests: 2,
                    ..PotentialLoad::default()
                },
            ];
        }
        o
    }

    #[test]
    fn fields_for_the_pick_are_the_advisory_fields() {
        let o = two_workers();
        assert_eq!(o.fields_for(9_007_199_254_740_993, 0), o.fields());
    }

    #[test]
    fn fields_for_another_worker_come_from_its_own_rows() {
        let o = two_workers();
        let f = o.fields_for(OTHER, 1);
        assert_eq!(f.worker_id, Some(OTHER));
        assert_eq!(f.dp_rank, Some(1));
        assert_eq!(f.k, Some(48 * 16), "device blocks × block size");
        assert_eq!(f.r, Some(2));
        assert_eq!(f.prefill_tokens_booked, Some(512));
        assert_eq!(f.prefill_capacity_tokens, Some(1024));
        assert_eq!(f.p, Some(0.5));
        assert_eq!(f.decode_blocks, Some(9));
        assert_eq!(f.schedulable, Some(true));
        // Only the advisory answer has these.
        assert_eq!(f.effective_prefill_tokens, None);
        assert_eq!(f.host_overlap_tokens, None);
        // Rank 0 of the same worker: no overlap row, no load row → nothing cached, nothing booked.
        let g = o.fields_for(OTHER, 0);
        assert_eq!((g.k, g.r, g.p), (Some(0), Some(0), Some(0.0)));
    }

    #[test]
    fn fields_for_an_unknown_worker_have_no_observation() {
        let o = two_workers();
        let f = o.fields_for(42, 0);
        assert_eq!((f.k, f.r, f.p, f.schedulable), (None, None, None, None));
        assert_eq!(f.worker_id, Some(42));
    }

    #[test]
    fn missing_select_leaves_none() {
        let mut o = obs();
        o.select = None;
        let f = o.fields();
        assert_eq!(f.k, None);
        assert_eq!(f.r, None);
        assert_eq!(f.n, Some(1000));
    }
}
