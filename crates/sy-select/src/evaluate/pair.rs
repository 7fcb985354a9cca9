//! One paired probe as the replay reads it ([`EvalPair`]): both candidates' observations, packed,
//! their measured TTFTs, and the TTFT decision settled once under the run's limits and Q tables.

use super::*;

/// One paired probe, ready to be decided: both rule observations (packed, no heap), the
/// decision time and both measured TTFTs. [`EvalPair::input`] gives the exact
/// [`DecisionInput`] back; the packed form is half its size (~150 bytes a pair instead of
/// ~280), which is most of `sy-select`'s memory once the probe table is dropped and, at 10 M
/// records, most of the time of pairing (the first write to fresh pages).
#[derive(Debug, Clone, PartialEq)]
pub struct EvalPair {
    pub(super) efficient: PackedObservation,
    pub(super) capable: PackedObservation,
    /// Both candidates' log features, taken once: every variant, bootstrap and split seed
    /// decides the pair again (48 bytes a pair; the logarithms were a tenth of the replays' time).
    pub(super) features: CandidateFeatures,
    pub(super) now_ms: f64,
    pub(super) local_capable_in_flight: u64,
    pub(super) proposal: Model,
    pub ttft_eff_ms: f64,
    pub ttft_cap_ms: f64,
    /// Background generation length of the condition (`short`, `long`), when it has one.
    pub decode_length: Option<DecodeLength>,
    /// The workload condition (a hash of run id and condition id): the unit the bootstrap
    /// resamples.
    pub condition: u64,
    /// Both TTFT variants' turns settled once (see [`SettledTtft`]), when they were.
    pub(super) ttft: Option<SettledTtft>,
}

/// A pair's turns of the TTFT variants (blind, cache) settled under a [`TtftGround`]
/// (`sy_selector::TtftTurn`), with that ground's identity: every replay and margin under
/// parameters of the same ground — the run's and every split seed's, whose Q tables and limits
/// are the run's — finishes them instead of deciding the pair from its observations again.
/// 56 bytes a pair.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct SettledTtft {
    pub(super) ground: u64,
    pub(super) turns: [TtftTurn; 2],
}

impl SettledTtft {
    pub(super) fn settle(
        ground: &TtftGround,
        input: &DecisionInput,
        f: &CandidateFeatures,
    ) -> Option<Self> {
        let turns = Estimator::ALL.map(|e| ground.settle(e, input, f));
        let [Some(blind), Some(cache)] = turns else {
            return None;
        };
        Some(SettledTtft {
            ground: ground.id(),
            turns: [blind, cache],
        })
    }

    pub(super) fn turn(&self, estimator: Estimator) -> &TtftTurn {
        match estimator {
            Estimator::Blind => &self.turns[0],
            Estimator::Cache => &self.turns[1],
        }
    }
}

/// The rule's inputs of an [`Observation`] as values with a presence mask (56 bytes instead of
/// 112); the recorded extras are not kept (no decision reads them).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct PackedObservation {
    /// N, K, R, booked prefill tokens, prefill capacity, observed at.
    pub(super) values: [f64; 6],
    /// Bit i: `values[i]` is present.
    pub(super) present: u8,
    pub(super) schedulable: Option<bool>,
}

impl PackedObservation {
    pub(super) fn pack(o: &Observation) -> PackedObservation {
        let fields = [
            o.n,
            o.k,
            o.r,
            o.prefill_tokens_booked,
            o.prefill_capacity_tokens,
            o.observed_at_ms,
        ];
        let mut values = [0.0; 6];
        let mut present = 0u8;
        for (i, f) in fields.iter().enumerate() {
            if let Some(v) = f {
                values[i] = *v;
                present |= 1 << i;
            }
        }
        PackedObservation {
            values,
            present,
            schedulable: o.schedulable,
        }
    }

    #[inline]
    pub(super) fn get(&self, i: usize) -> Option<f64> {
        (self.present & (1 << i) != 0).then(|| self.values[i])
    }

    #[inline]
    pub(super) fn unpack(&self) -> Observation {
        Observation {
            n: self.get(0),
            k: self.get(1),
            r: self.get(2),
            prefill_tokens_booked: self.get(3),
            prefill_capacity_tokens: self.get(4),
            schedulable: self.schedulable,
            observed_at_ms: self.get(5),
            recorded: None,
        }
    }
}

/// A stable key of (run id, condition id) for grouping pairs by condition.
pub fn condition_key(run_id: &str, condition_id: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (run_id, condition_id).hash(&mut h);
    h.finish()
}

/// The background generation length of an equal-count short-vs-long condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DecodeLength {
    Short,
    Long,
}

impl DecodeLength {
    pub fn as_str(self) -> &'static str {
        match self {
            DecodeLength::Short => "short",
            DecodeLength::Long => "long",
        }
    }
}

pub(super) fn measured(ttft: Option<f64>) -> Option<f64> {
    ttft.filter(|t| t.is_finite() && *t >= 0.0)
}

impl EvalPair {
    /// The pair as a decision input, or `None` when a candidate has no measured TTFT.
    ///
    /// The decision time is when the probe was sent (the runtime decides right before sending);
    /// the capable in-flight count is 0 (calibration has no local accounting).
    pub fn from_pair(pair: &ProbePair) -> Option<EvalPair> {
        EvalPair::from_pair_in(
            pair,
            condition_key(pair.run_id(), pair.condition_id()),
            None,
        )
    }

    /// [`EvalPair::from_pair`] with the pair's [`condition_key`] already computed, settled
    /// under `ground` when given ([`EvalPair::settled`]).
    pub(super) fn from_pair_in(
        pair: &ProbePair,
        condition: u64,
        ground: Option<&TtftGround>,
    ) -> Option<EvalPair> {
        let (e, c) = (&pair.efficient, &pair.capable);
        if !pair.both_ok() {
            return None;
        }
        let ttft_eff_ms = measured(e.ttft_ms())?;
        let ttft_cap_ms = measured(c.ttft_ms())?;
        let decode_length = match e.decode_length() {
            Some("short") => Some(DecodeLength::Short),
            Some("long") => Some(DecodeLength::Long),
            _ => None,
        };
        let input = pair.decision_input();
        let mut e = EvalPair::new(&input, (ttft_eff_ms, ttft_cap_ms), decode_length, condition);
        if let Some(ground) = ground {
            e.ttft = SettledTtft::settle(ground, &input, &e.features);
        }
        Some(e)
    }

    /// A pair from its decision input, the measured TTFTs (efficient, capable), the background
    /// generation length and the condition key.
    pub fn new(
        input: &DecisionInput,
        (ttft_eff_ms, ttft_cap_ms): (f64, f64),
        decode_length: Option<DecodeLength>,
        condition: u64,
    ) -> EvalPair {
        EvalPair {
            efficient: PackedObservation::pack(&input.efficient),
            capable: PackedObservation::pack(&input.capable),
            features: CandidateFeatures::of(input),
            now_ms: input.now_ms,
            local_capable_in_flight: input.local_capable_in_flight,
            proposal: input.proposal,
            ttft_eff_ms,
            ttft_cap_ms,
            decode_length,
            condition,
            ttft: None,
        }
    }

    /// The pair with its TTFT variants' turns settled under `ground` (see [`SettledTtft`]).
    pub fn settled(mut self, ground: &TtftGround) -> EvalPair {
        self.ttft = SettledTtft::settle(ground, &self.input(), &self.features);
        self
    }

    /// The predicted advantage `T_eff − T_cap` of `estimator` under the models, from the pair's
    /// settled turn when it was settled under ground `ground` ([`TtftGround::id_of`] the models
    /// with any limits: the advantage reads only the Q tables); `None` (not settled, or under
    /// another ground) when it must be predicted from the observations.
    #[inline]
    pub fn settled_advantage(
        &self,
        models: (&sy_selector::ModelEstimators, &sy_selector::ModelEstimators),
        estimator: Estimator,
        ground: u64,
    ) -> Option<Option<f64>> {
        let settled = self.ttft.as_ref().filter(|s| s.ground == ground)?;
        Some(
            settled
                .turn(estimator)
                .advantage_ms(models, estimator, &self.features),
        )
    }

    /// The decision input (the recorded extras are not kept).
    #[inline]
    pub fn input(&self) -> DecisionInput {
        DecisionInput {
            proposal: self.proposal,
            efficient: self.efficient.unpack(),
            capable: self.capable.unpack(),
            now_ms: self.now_ms,
            local_capable_in_flight: self.local_capable_in_flight,
        }
    }

    /// Both candidates' raw features (computed once, with the pair).
    pub fn features(&self) -> &CandidateFeatures {
        &self.features
    }

    /// The efficient candidate's observation.
    pub fn efficient(&self) -> Observation {
        self.efficient.unpack()
    }

    /// The capable candidate's observation.
    pub fn capable(&self) -> Observation {
        self.capable.unpack()
    }

    /// The measured TTFT of the candidate `choice`.
    pub fn selected_ttft(&self, choice: Model) -> f64 {
        match choice {
            Model::Efficient => self.ttft_eff_ms,
            Model::Capable => self.ttft_cap_ms,
        }
    }

    /// The per-probe oracle: the faster candidate.
    pub fn oracle_ttft(&self) -> f64 {
        self.ttft_eff_ms.min(self.ttft_cap_ms)
    }
}

/// Whether guard G (and the inputs it needs) holds for the threshold rule with each set of terms
/// enabled: `sy_selector::count_guards`, guard G with the count trigger reading R, P or both,
/// the pair read once. Pairs always
/// carry an efficient proposal (see [`EvalPair::from_pair`]).
#[derive(Debug)]
pub struct GuardProbe {
    pub(super) limits: GuardLimits,
}

impl GuardProbe {
    /// The probe of guard G with `params`' limits.
    pub fn new(params: &RuleParams) -> GuardProbe {
        GuardProbe::with_limits(params.limits)
    }

    /// The probe of guard G with these limits.
    pub fn with_limits(limits: GuardLimits) -> GuardProbe {
        GuardProbe { limits }
    }

    /// Guard G of one pair for each set of enabled terms.
    pub fn guard(&self, input: &DecisionInput) -> GuardPass {
        count_guards(&self.limits, input)
    }

    /// The search's view of one pair.
    pub fn search_probe(&self, pair: &EvalPair) -> SearchProbe {
        let input = pair.input();
        let eff: &Observation = &input.efficient;
        SearchProbe {
            r_eff: eff.valid_r().ok(),
            p_eff: eff.valid_p().ok(),
            ttft_eff_ms: pair.ttft_eff_ms,
            ttft_cap_ms: pair.ttft_cap_ms,
            guard: self.guard(&input),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_packed_observation_unpacks_to_its_rule_inputs() {
        let o = Observation {
            n: Some(1000.0),
            k: None,
            r: Some(3.0),
            prefill_tokens_booked: Some(0.0),
            prefill_capacity_tokens: None,
            schedulable: Some(true),
            observed_at_ms: Some(1.5e12),
            recorded: None,
        };
        let packed = PackedObservation::pack(&o);
        assert_eq!(packed.unpack(), o);
        assert_eq!(packed.get(1), None);
        assert_eq!(packed.get(2), Some(3.0));
    }

    #[test]
    fn only_finite_non_negative_ttfts_are_measured() {
        assert_eq!(measured(Some(12.0)), Some(12.0));
        assert_eq!(measured(Some(0.0)), Some(0.0));
        assert_eq!(measured(Some(-1.0)), None);
        assert_eq!(measured(Some(f64::NAN)), None);
        assert_eq!(measured(Some(f64::INFINITY)), None);
        assert_eq!(measured(None), None);
    }

    #[test]
    fn condition_keys_separate_runs_and_conditions() {
        assert_eq!(condition_key("run", "c1"), condition_key("run", "c1"));
        assert_ne!(condition_key("run", "c1"), condition_key("run", "c2"));
        assert_ne!(condition_key("a", "bc"), condition_key("ab", "c"));
        assert_eq!(DecodeLength::Short.as_str(), "short");
        assert_eq!(DecodeLength::Long.as_str(), "long");
    }
}
