//! From a record to the runtime selector's [`Observation`]: the one bridge between what
//! `sy-collect` wrote and what the rule reads (the conversion itself is the embedded
//! [`sy_wire::ObservedFields`]'s).

use sy_selector::Observation;

use crate::record::Record;

impl Record {
    /// The observation of this candidate, extras included (allocates for the text fields).
    pub fn observation(&self) -> Observation {
        self.observed.observation(Some(&self.model))
    }

    /// The rule's inputs only (N, K, R, prefill booked / capacity, schedulable, observation
    /// time); no allocation, for hot loops over many records.
    #[inline]
    pub fn rule_observation(&self) -> Observation {
        self.observed.rule_observation()
    }
}

#[cfg(test)]
mod tests {
    use crate::synth::template_record;

    #[test]
    fn observation_carries_inputs_and_extras() {
        let mut r = template_record();
        r.observed.n = Some(1000);
        r.observed.k = Some(500);
        r.observed.worker_id = Some(u64::MAX);
        let o = r.observation();
        assert_eq!(o.valid_f(), Ok(0.5));
        let recorded = o.recorded.as_deref().unwrap();
        assert_eq!(recorded.worker_id, Some(u64::MAX));
        assert_eq!(recorded.model.as_deref(), Some(r.model.as_str()));
        assert_eq!(r.rule_observation().recorded, None);
    }
}
