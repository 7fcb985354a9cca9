//! A turn settled once for the TTFT variants, then decided under any fitted corrections and
//! margins.
//!
//! On a TTFT variant (`blind`, `cache`) [`decide`](crate::decide) reads, in order: Stage's
//! proposal, guard G (the observations against the [`GuardLimits`]), both candidates' Q
//! baselines, then the fitted load corrections and the margin. Everything before the corrections
//! depends on the turn, the limits and the Q tables only — and a calibration's Q tables come from
//! its Q-grid records, not from a split, so every split seed of `sy-select`'s stability check
//! shares them with the run. [`TtftGround::settle`] does that part once per turn and estimator;
//! [`TtftTurn::decide`] finishes it with any parameters of the same ground
//! ([`TtftGround::id_of`]), giving the reason [`decide`](crate::decide) gives (property-tested
//! in `tests/properties.rs`) without reading the observations again.
//! [`TtftTurn::advantage_ms`] gives the predicted advantage the margins read (`predict` of both
//! candidates), under any corrections.
//!
//! The formulas stay where they are: guard G ([`crate::guard`]), the Q lookup
//! ([`QTable::lookup`]), the prediction from a baseline ([`predict_from_baseline`]), the error
//! order of the two predictions and the TTFT trigger (`rule.rs`); this module only keeps their
//! intermediate results.

use crate::estimator::{
    EstimatorInputs, ModelEstimators, PredictError, RawFeatures, predict_from_baseline,
};
use crate::model::{Estimator, Model};
use crate::qtable::{OutOfRange, QTable};
use crate::rule::{
    CandidateFeatures, DecisionInput, GuardLimits, Reason, RuleParams, TriggerReads, advantage_of,
    guard_prepared, ttft_trigger, verdict,
};

/// The limits and Q tables TTFT turns are settled under: a [`TtftTurn`] decides as
/// [`decide`](crate::decide) does only with parameters that have these ([`TtftGround::fits`]).
#[derive(Debug, Clone, PartialEq)]
pub struct TtftGround {
    limits: GuardLimits,
    efficient_q: QTable,
    capable_q: QTable,
    id: u64,
}

/// A ground's identity ([`TtftGround::id`]) from its parts.
fn ground_id(limits: &GuardLimits, efficient_q: &QTable, capable_q: &QTable) -> u64 {
    use std::hash::Hasher;
    // Fixed keys: the same ground has the same identity in every process of one build.
    let mut h = std::hash::DefaultHasher::new();
    h.write_u64(limits.max_age_ms.to_bits());
    h.write_u64(limits.destination_limit.to_bits());
    h.write_u64(limits.local_limit);
    efficient_q.hash_bits(&mut h);
    capable_q.hash_bits(&mut h);
    h.finish()
}

/// Why a candidate has no Q baseline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Missing {
    /// An input the estimator reads is invalid.
    Invalid,
    /// The lookup is outside the grid (or in a cell with a missing corner).
    OutOfRange(OutOfRange),
}

/// One turn as a TTFT variant's decision stands before the fitted corrections are read
/// (see the module docs). 24 bytes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TtftTurn {
    /// The Q baselines (efficient, capable); NaN where `missing` says why there is none.
    base: [f64; 2],
    missing: [Option<Missing>; 2],
    /// The reason [`decide`](crate::decide) ends with before reading a correction (Stage proposed
    /// capable, or guard G failed), if it does.
    settled: Option<Reason>,
}

impl TtftGround {
    pub fn new(limits: GuardLimits, efficient_q: QTable, capable_q: QTable) -> TtftGround {
        let id = ground_id(&limits, &efficient_q, &capable_q);
        TtftGround {
            limits,
            efficient_q,
            capable_q,
            id,
        }
    }

    /// The ground of `params`: its limits and both models' Q tables.
    pub fn of(params: &RuleParams) -> TtftGround {
        let (e, c) = (params.efficient.q.clone(), params.capable.q.clone());
        TtftGround::new(params.limits, e, c)
    }

    /// The ground's identity: a 64-bit digest of its limits and Q tables, bit for bit. A turn
    /// kept with the identity of its ground (8 bytes) is finished only under parameters of the
    /// same identity ([`TtftGround::id_of`]).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The identity of the ground of `limits` and both models' Q tables (what
    /// [`TtftGround::id`] of that ground is).
    pub fn id_of(limits: &GuardLimits, (e, c): (&ModelEstimators, &ModelEstimators)) -> u64 {
        ground_id(limits, &e.q, &c.q)
    }

    /// The Q tables (efficient, capable) the turns' baselines are looked up in.
    pub fn q_tables(&self) -> (&QTable, &QTable) {
        (&self.efficient_q, &self.capable_q)
    }

    /// Whether `params` has this ground's limits and Q tables.
    pub fn fits(&self, params: &RuleParams) -> bool {
        self.limits == params.limits
            && self.efficient_q == params.efficient.q
            && self.capable_q == params.capable.q
    }

    /// The turn `input` settled for `estimator`'s variant, with both candidates' raw features
    /// (`features`, as [`CandidateFeatures::of`] gives them); `None` when a candidate's inputs are
    /// valid but its features were not given (the turn cannot be finished without them).
    pub fn settle(
        &self,
        estimator: Estimator,
        input: &DecisionInput,
        features: &CandidateFeatures,
    ) -> Option<TtftTurn> {
        let reads = TriggerReads::Estimator { estimator };
        let (settled, held) = match guard_prepared(&self.limits, reads, (input, features)) {
            Ok(r) => (None, r.efficient_inputs.zip(r.capable_inputs)),
            Err(reason) => (Some(reason), None),
        };
        let settled = match input.proposal {
            Model::Capable => Some(Reason::CapableProposal),
            Model::Efficient => settled,
        };
        // The estimator inputs guard G validated, else validated here (the margins read the
        // baselines whatever guard G says).
        let (eff, cap) = match held {
            Some((e, c)) => (Ok(e), Ok(c)),
            None => (
                EstimatorInputs::from_prepared(&input.efficient, estimator, features.efficient),
                EstimatorInputs::from_prepared(&input.capable, estimator, features.capable),
            ),
        };
        let (b_eff, m_eff) = baseline(&self.efficient_q, eff, features.efficient)?;
        let (b_cap, m_cap) = baseline(&self.capable_q, cap, features.capable)?;
        let turn = TtftTurn {
            base: [b_eff, b_cap],
            missing: [m_eff, m_cap],
            settled,
        };
        // Guard G validated both candidates' inputs, so an open turn has no invalid one.
        let open_but_invalid = settled.is_none() && turn.missing.contains(&Some(Missing::Invalid));
        (!open_but_invalid).then_some(turn)
    }
}

/// One candidate's Q baseline from its validated inputs, or why there is none; `None` when the
/// inputs are valid but the raw features were not given.
#[inline(always)]
fn baseline(
    q: &QTable,
    inputs: Result<EstimatorInputs, crate::observation::InvalidInput>,
    raw: RawFeatures,
) -> Option<(f64, Option<Missing>)> {
    match inputs {
        Err(_) => Some((f64::NAN, Some(Missing::Invalid))),
        Ok(_) if raw.get().is_none() => None,
        Ok(i) => Some(match q.lookup(i.n, i.f) {
            Ok(base) => (base, None),
            Err(o) => (f64::NAN, Some(Missing::OutOfRange(o))),
        }),
    }
}

impl TtftTurn {
    /// Both predictions under `models` (efficient, capable), from the baselines and `features`.
    #[inline(always)]
    fn predictions(
        &self,
        (efficient, capable): (&ModelEstimators, &ModelEstimators),
        estimator: Estimator,
        features: &CandidateFeatures,
    ) -> [Result<f64, PredictError>; 2] {
        let one = |i: usize, model, raw: RawFeatures| match (self.missing[i], raw.get()) {
            (Some(Missing::OutOfRange(reason)), _) => Err(PredictError::OutOfRange { reason }),
            (None, Some(raw)) => predict_from_baseline(model, estimator, self.base[i], raw),
            // Not reached for a settled turn's valid inputs (see `TtftGround::settle`); an
            // invalid input gives no prediction either way.
            _ => Err(PredictError::NonPositive { value: f64::NAN }),
        };
        [
            one(0, efficient, features.efficient),
            one(1, capable, features.capable),
        ]
    }

    /// Candidate `model`'s Q baseline ([`crate::q_baseline`] of its observation in the ground's
    /// table), `None` when it has none (an invalid input, or out of range).
    pub fn baseline(&self, model: Model) -> Option<f64> {
        let i = match model {
            Model::Efficient => 0,
            Model::Capable => 1,
        };
        self.missing[i].is_none().then_some(self.base[i])
    }

    /// The reason [`decide`](crate::decide) gives `estimator`'s variant on this turn under
    /// `params` (whose ground must be the one the turn was settled under, [`TtftGround::fits`]),
    /// with the turn's `features`: [`Reason::Override`] when it turns the proposal to capable.
    #[inline]
    pub fn decide(
        &self,
        params: &RuleParams,
        estimator: Estimator,
        features: &CandidateFeatures,
    ) -> Reason {
        if let Some(reason) = self.settled {
            return reason;
        }
        let models = (&params.efficient, &params.capable);
        let [t_eff, t_cap] = self.predictions(models, estimator, features);
        let margin = params.margins.of(estimator);
        verdict(advantage_of(t_eff, t_cap).map(|a| ttft_trigger(a, margin)))
    }

    /// The predicted advantage `T_eff − T_cap` under the models (whose Q tables must be the
    /// ground's), `None` when either prediction is unusable: what the
    /// margins read, whatever guard G says.
    #[inline]
    pub fn advantage_ms(
        &self,
        models: (&ModelEstimators, &ModelEstimators),
        estimator: Estimator,
        features: &CandidateFeatures,
    ) -> Option<f64> {
        if self.missing.contains(&Some(Missing::Invalid)) {
            return None;
        }
        let [t_eff, t_cap] = self.predictions(models, estimator, features);
        Some(t_eff.ok()? - t_cap.ok()?)
    }
}
