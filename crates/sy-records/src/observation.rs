//! From a record to the runtime selector's [`Observation`]: the one bridge between what
//! `sy-collect` wrote and what the rule reads.

use sy_selector::{Observation, Recorded};

use crate::record::Record;

#[inline]
fn f(v: Option<u64>) -> Option<f64> {
    v.map(|x| x as f64)
}

impl Record {
    /// The observation of this candidate, extras included (allocates for the text fields).
    pub fn observation(&self) -> Observation {
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
                model: Some(self.model.clone()),
                query_duration_ms: self.query_duration_ms,
            })),
            ..self.rule_observation()
        }
    }

    /// The rule's inputs only (N, K, R, prefill booked / capacity, schedulable, observation
    /// time); no allocation, for hot loops over many records.
    #[inline]
    pub fn rule_observation(&self) -> Observation {
        rule_observation(
            self.n,
            self.k,
            self.r,
            self.prefill_tokens_booked,
            self.prefill_capacity_tokens,
            self.schedulable,
            self.observed_at_unix_ms,
        )
    }
}

/// The rule's inputs from a record's fields: the one conversion from recorded counts to an
/// [`Observation`] (used by [`Record::rule_observation`] and the probe table's rows).
#[inline]
pub(crate) fn rule_observation(
    n: Option<u64>,
    k: Option<u64>,
    r: Option<u64>,
    prefill_tokens_booked: Option<u64>,
    prefill_capacity_tokens: Option<u64>,
    schedulable: Option<bool>,
    observed_at_unix_ms: Option<f64>,
) -> Observation {
    Observation {
        n: f(n),
        k: f(k),
        r: f(r),
        prefill_tokens_booked: f(prefill_tokens_booked),
        prefill_capacity_tokens: f(prefill_capacity_tokens),
        schedulable,
        observed_at_ms: observed_at_unix_ms,
        recorded: None,
    }
}

#[cfg(test)]
mod tests {
    use crate::synth::template_record;

    #[test]
    fn observation_carries_inputs_and_extras() {
        let mut r = template_record();
        r.n = Some(1000);
        r.k = Some(500);
        r.r = Some(3);
        r.prefill_tokens_booked = Some(4096);
        r.prefill_capacity_tokens = Some(8192);
        r.worker_id = Some(u64::MAX);
        r.endpoint = Some("e".into());
        let o = r.observation();
        assert_eq!(o.valid_f(), Ok(0.5));
        assert_eq!(o.valid_p(), Ok(0.5));
        assert_eq!(o.valid_r(), Ok(3.0));
        let recorded = o.recorded.as_deref().unwrap();
        assert_eq!(recorded.worker_id, Some(u64::MAX));
        assert_eq!(recorded.endpoint.as_deref(), Some("e"));
        assert_eq!(recorded.model.as_deref(), Some(r.model.as_str()));
        let lean = r.rule_observation();
        assert_eq!(lean.recorded, None);
        assert_eq!(lean.n, Some(1000.0));
    }
}
