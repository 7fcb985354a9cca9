//! The observation of one candidate as the collector records it: what the Dynamo adapter
//! (`sy_dynamo::observe`) reads from the answers above for the worker and rank a probe was
//! reserved on, and what a record (`sy_records::Record`, flattened) stores — one type for both.
//!
//! Counts stay integers (worker ids exceed 2^53); a value the server did not give stays `None`,
//! never a made-up zero. The rule's own input type is `sy_selector::Observation`, built from this
//! by [`ObservedFields::observation`].

use serde::{Deserialize, Serialize};
use sy_selector::{Observation, Recorded};

/// Now, in milliseconds since the Unix epoch: the clock of a record's and an observation's
/// wall-clock times (`sent_at_unix_ms`, `observed_at_unix_ms`); 0 if the clock is before 1970.
pub fn unix_ms_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64() * 1000.0)
        .unwrap_or(0.0)
}

/// One candidate's observation (the record's observation columns, in file order).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ObservedFields {
    /// Prompt tokens N.
    pub n: Option<u64>,
    /// Router-estimated reusable GPU-prefix tokens K (`overlap.gpu`).
    pub k: Option<u64>,
    /// Booked requests R on the candidate worker (`/loads` `active_requests`).
    pub r: Option<u64>,
    /// Booked, cache-adjusted prefill tokens (P's numerator; `worker_load.active_prefill_tokens`).
    pub prefill_tokens_booked: Option<u64>,
    /// Advertised prefill batch-token capacity (P's denominator; `max_num_batched_tokens`).
    pub prefill_capacity_tokens: Option<u64>,
    /// Prefill pressure P = booked / capacity, when both are valid (`Observation::valid_p`).
    pub p: Option<f64>,
    /// Cumulative host-tier overlap tokens (diagnostic).
    pub host_overlap_tokens: Option<u64>,
    /// Cumulative disk-tier overlap tokens (diagnostic).
    pub disk_overlap_tokens: Option<u64>,
    /// Dynamo's weighted prefill-work estimate for this request.
    pub effective_prefill_tokens: Option<u64>,
    /// Tracked decode blocks on the candidate worker.
    pub decode_blocks: Option<u64>,
    /// Advertised KV-block capacity of the candidate worker.
    pub kv_capacity_blocks: Option<u64>,
    /// Pool admission-queue requests (`pending_count`).
    pub pool_pending_requests: Option<u64>,
    /// Pool admission-queue tokens (`pending_isl_tokens`).
    pub pool_pending_tokens: Option<u64>,
    /// Whether the candidate worker's lifecycle was `schedulable`.
    pub schedulable: Option<bool>,
    /// The worker these fields describe: the one the reservation booked and the probe was
    /// pinned to (u64 above 2^53: never a float). Records written before `pick_differs` existed
    /// describe the advisory pick here instead.
    pub worker_id: Option<u64>,
    /// The data-parallel rank these fields describe (the reserved one).
    pub dp_rank: Option<u32>,
    pub endpoint: Option<String>,
    pub routing_group: Option<String>,
    /// Wall-clock time the observation finished, milliseconds since the Unix epoch.
    pub observed_at_unix_ms: Option<f64>,
    /// Time spent collecting the observation.
    pub query_duration_ms: Option<f64>,
}

#[inline]
fn f(v: Option<u64>) -> Option<f64> {
    v.map(|x| x as f64)
}

impl ObservedFields {
    /// What the rule decides on, extras included (`model`: the served model name, recorded
    /// beside the observation).
    pub fn observation(&self, model: Option<&str>) -> Observation {
        Observation {
            recorded: Some(Box::new(Recorded {
                host_overlap_tokens: self.host_overlap_tokens,
                disk_overlap_tokens: self.disk_overlap_tokens,
                effective_prefill_tokens: self.effective_prefill_tokens,
                decode_blocks: self.decode_blocks,
                kv_capacity_blocks: self.kv_capacity_blocks,
                pool_pending_requests: self.pool_pending_requests,
                pool_pending_tokens: self.pool_pending_tokens,
                worker_id: self.worker_id,
                dp_rank: self.dp_rank,
                endpoint: self.endpoint.clone(),
                routing_group: self.routing_group.clone(),
                model: model.map(str::to_string),
                query_duration_ms: self.query_duration_ms,
            })),
            ..self.rule_observation()
        }
    }

    /// The rule's inputs only; no allocation, for hot loops over many records.
    #[inline]
    pub fn rule_observation(&self) -> Observation {
        rule_observation(
            [
                self.n,
                self.k,
                self.r,
                self.prefill_tokens_booked,
                self.prefill_capacity_tokens,
            ],
            self.schedulable,
            self.observed_at_unix_ms,
        )
    }
}

/// The rule's inputs from recorded counts `[n, k, r, prefill_tokens_booked,
/// prefill_capacity_tokens]`: the one conversion from what is recorded to an [`Observation`]
/// (also used on the probe table's columns, which hold the same fields without the struct).
#[inline]
pub fn rule_observation(
    [n, k, r, booked, capacity]: [Option<u64>; 5],
    schedulable: Option<bool>,
    observed_at_unix_ms: Option<f64>,
) -> Observation {
    Observation {
        n: f(n),
        k: f(k),
        r: f(r),
        prefill_tokens_booked: f(booked),
        prefill_capacity_tokens: f(capacity),
        schedulable,
        observed_at_ms: observed_at_unix_ms,
        recorded: None,
    }
}

/// P from booked prefill tokens and capacity. P has one definition (the runtime crate's
/// `Observation::valid_p`): an invalid capacity gives no P.
pub fn p_of(booked: Option<u64>, capacity: Option<u64>) -> Option<f64> {
    Observation {
        prefill_tokens_booked: f(booked),
        prefill_capacity_tokens: f(capacity),
        ..Observation::default()
    }
    .valid_p()
    .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observation_carries_inputs_and_extras() {
        let o = ObservedFields {
            n: Some(1000),
            k: Some(500),
            r: Some(3),
            prefill_tokens_booked: Some(4096),
            prefill_capacity_tokens: Some(8192),
            worker_id: Some(u64::MAX),
            endpoint: Some("e".into()),
            ..ObservedFields::default()
        };
        let obs = o.observation(Some("m"));
        assert_eq!(obs.valid_f(), Ok(0.5));
        assert_eq!(obs.valid_p(), Ok(0.5));
        assert_eq!(obs.valid_r(), Ok(3.0));
        let recorded = obs.recorded.as_deref().unwrap();
        assert_eq!(recorded.worker_id, Some(u64::MAX));
        assert_eq!(recorded.endpoint.as_deref(), Some("e"));
        assert_eq!(recorded.model.as_deref(), Some("m"));
        let lean = o.rule_observation();
        assert_eq!(lean.recorded, None);
        assert_eq!(lean.n, Some(1000.0));
    }

    #[test]
    fn p_needs_a_valid_capacity() {
        assert_eq!(p_of(Some(50), Some(100)), Some(0.5));
        assert_eq!(p_of(Some(50), Some(0)), None);
        assert_eq!(p_of(Some(50), Some(10_000_000)), None);
        assert_eq!(p_of(None, Some(100)), None);
    }

    #[test]
    fn json_is_flat_and_missing_members_are_none() {
        let o: ObservedFields =
            serde_json::from_str(r#"{"n": 7, "worker_id": 18446744073709551615}"#).unwrap();
        assert_eq!(o.n, Some(7));
        assert_eq!(o.worker_id, Some(u64::MAX));
        assert_eq!(o.k, None);
    }
}
