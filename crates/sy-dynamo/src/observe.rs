//! The observation adapter: what the rule sees of each candidate, taken the way the runtime
//! takes it.
//!
//! For each candidate model: a query-only advisory `POST /select` of the prompt (the worker and
//! rank Dynamo would pick, its GPU/host/disk overlap, effective prefill tokens and `worker_load`),
//! that worker's row of `GET /loads` (R = `active_requests`, booked decode blocks, the pool's
//! pending counts) and its `GET /workers` entry (lifecycle, capacities). The three reads run
//! concurrently; they are not an atomic snapshot, and `query_duration_ms` records what they cost.
//!
//! Values the server did not give stay `None`. A prefill capacity of 0 or Dynamo's 10,000,000
//! default is kept as reported (the guard in `sy-selector` rejects it) but yields no `p`.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use sy_wire::{ModelLoads, PotentialLoad, SelectResponse, WorkerLifecycle, WorkerRecord};

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
    pub observed_at_unix_ms: f64,
    pub query_duration_ms: f64,
    /// The first read that failed, if any (the observation is then partial).
    pub error: Option<CallError>,
}

/// Flat observation fields (the same names as `sy_records::Record`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ObservedFields {
    pub n: Option<u64>,
    pub k: Option<u64>,
    pub r: Option<u64>,
    pub prefill_tokens_booked: Option<u64>,
    pub prefill_capacity_tokens: Option<u64>,
    pub p: Option<f64>,
    pub host_overlap_tokens: Option<u64>,
    pub disk_overlap_tokens: Option<u64>,
    pub effective_prefill_tokens: Option<u64>,
    pub decode_blocks: Option<u64>,
    pub kv_capacity_blocks: Option<u64>,
    pub pool_pending_requests: Option<u64>,
    pub pool_pending_tokens: Option<u64>,
    pub schedulable: Option<bool>,
    pub worker_id: Option<u64>,
    pub dp_rank: Option<u32>,
    pub endpoint: Option<String>,
    pub routing_group: Option<String>,
    pub block_size: Option<u32>,
    pub observed_at_unix_ms: Option<f64>,
    pub query_duration_ms: Option<f64>,
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
        // P has one definition (the runtime crate's): invalid capacity → no P.
        let p = sy_selector::Observation {
            prefill_tokens_booked: booked.map(|b| b as f64),
            prefill_capacity_tokens: capacity.map(|c| c as f64),
            ..sy_selector::Observation::default()
        }
        .valid_p()
        .ok();
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
            block_size: (sel.block_size > 0).then_some(sel.block_size),
            observed_at_unix_ms: Some(self.observed_at_unix_ms),
            query_duration_ms: Some(self.query_duration_ms),
        }
    }

    /// What `sy-selector` decides on.
    pub fn to_observation(&self) -> sy_selector::Observation {
        let f = self.fields();
        sy_selector::Observation {
            n: f.n.map(|v| v as f64),
            k: f.k.map(|v| v as f64),
            r: f.r.map(|v| v as f64),
            prefill_tokens_booked: f.prefill_tokens_booked.map(|v| v as f64),
            prefill_capacity_tokens: f.prefill_capacity_tokens.map(|v| v as f64),
            schedulable: f.schedulable,
            observed_at_ms: f.observed_at_unix_ms,
            host_overlap_tokens: f.host_overlap_tokens,
            disk_overlap_tokens: f.disk_overlap_tokens,
            effective_prefill_tokens: f.effective_prefill_tokens,
            decode_blocks: f.decode_blocks,
            kv_capacity_blocks: f.kv_capacity_blocks,
            pool_pending_requests: f.pool_pending_requests,
            pool_pending_tokens: f.pool_pending_tokens,
            worker_id: f.worker_id,
            dp_rank: f.dp_rank,
            endpoint: f.endpoint,
            routing_group: f.routing_group,
            model: Some(self.model.clone()),
            query_duration_ms: f.query_duration_ms,
        }
    }
}

fn unix_ms_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64() * 1000.0)
        .unwrap_or(0.0)
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
/// one advisory select per candidate, all concurrently).
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
    let (selects, loads, workers) = tokio::join!(selects, sel.loads(None), sel.workers());
    let query_duration_ms = start.elapsed().as_secs_f64() * 1000.0;
    let observed_at_unix_ms = unix_ms_now();
    candidates
        .iter()
        .zip(selects)
        .map(|(Candidate { model, tokens, .. }, select)| {
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
        assert_eq!(o.model.as_deref(), Some("efficient"));
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
