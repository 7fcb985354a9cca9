//! Guard G, the five triggers and [`decide`].
//!
//! ```text
//! choice = Stage's choice
//! if choice == efficient AND G AND the variant's trigger is true:
//!     choice = capable
//! G = capable worker schedulable AND required observations valid AND age <= max age
//!     AND capable booked requests R < destination limit AND local capable in-flight < local limit
//! ```
//!
//! [`decide`] is a pure function of its arguments: no I/O, no clock, no heap allocation, no state.

use serde::{Deserialize, Serialize};

use crate::estimator::{
    EstimatorInputs, ModelEstimators, PredictError, RawFeatures, predict_from_inputs,
};
use crate::model::{Estimator, Model, Variant};
use crate::observation::{Field, InvalidInput, Needs, Observation, Problem};
use crate::qtable::OutOfRange;

/// Count thresholds; `None` disables a term.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Thresholds {
    /// `R_efficient >= r` (variants `count` and `count_prefill`). In JSON the member is required;
    /// `null` disables the term.
    #[serde(deserialize_with = "required_option")]
    pub r: Option<f64>,
    /// `P_efficient > p` (variant `count_prefill`). Required in JSON; `null` disables the term.
    #[serde(deserialize_with = "required_option")]
    pub p: Option<f64>,
}

/// Deserialises an `Option` whose member must be present (`null` for `None`): a bundle that
/// forgets a threshold is refused instead of silently disabling it.
fn required_option<'de, D>(deserializer: D) -> Result<Option<f64>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    Option::<f64>::deserialize(deserializer)
}

/// Required predicted advantages (ms) of the TTFT variants.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Margins {
    /// `delta_blind`.
    pub blind: f64,
    /// `delta_cache`.
    pub cache: f64,
}

impl Margins {
    /// The margin of one estimator.
    pub fn get(&self, estimator: Estimator) -> f64 {
        match estimator {
            Estimator::Blind => self.blind,
            Estimator::Cache => self.cache,
        }
    }

    /// The margins `margin(estimator)` gives, or its first error (in the order of
    /// [`Estimator::ALL`]).
    pub fn try_from_fn<E>(
        mut margin: impl FnMut(Estimator) -> Result<f64, E>,
    ) -> Result<Margins, E> {
        Ok(Margins {
            blind: margin(Estimator::Blind)?,
            cache: margin(Estimator::Cache)?,
        })
    }
}

/// Guard G's fixed limits (the same for every variant).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GuardLimits {
    /// Maximum observation age `now_ms - observed_at_ms`, inclusive.
    pub max_age_ms: f64,
    /// An override needs the capable worker's booked requests R < this.
    pub destination_limit: f64,
    /// An override needs this process's capable in-flight calls < this.
    pub local_limit: u64,
}

impl GuardLimits {
    /// The calibration's default limits (the tools' flags override them): an observation at
    /// most 1 s old, fewer than 64 booked requests on the capable worker, fewer than 64 capable
    /// calls in flight locally.
    pub const DEFAULT: GuardLimits = GuardLimits {
        max_age_ms: 1000.0,
        destination_limit: 64.0,
        local_limit: 64,
    };
}

/// Every fixed parameter of the rule: both models' estimators, thresholds, margins, limits.
/// Offline tools evaluate every variant with the same `RuleParams`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleParams {
    pub efficient: ModelEstimators,
    pub capable: ModelEstimators,
    pub thresholds: Thresholds,
    pub margins: Margins,
    pub limits: GuardLimits,
}

/// The per-turn input of [`decide`]: Stage's proposal, both candidates' observations (each for
/// the worker Dynamo would pick in that model's pool), the clock and local in-flight accounting.
/// This is the document `sy-select decide --observations` reads (see `docs/observation-json.md`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecisionInput {
    /// Stage's proposed model.
    pub proposal: Model,
    pub efficient: Observation,
    pub capable: Observation,
    /// Client wall-clock now, milliseconds since the Unix epoch (same clock as `observed_at_ms`).
    pub now_ms: f64,
    /// Capable calls this Switchyard process has in flight.
    #[serde(default)]
    pub local_capable_in_flight: u64,
}

/// Which inputs a variant reads, per candidate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequiredInputs {
    pub efficient: Needs,
    pub capable: Needs,
}

impl RequiredInputs {
    /// Nothing at all (`stage`, and any variant whose trigger is disabled).
    pub const NONE: RequiredInputs = RequiredInputs {
        efficient: Needs::NONE,
        capable: Needs::NONE,
    };
}

/// Whether a variant's trigger can fire at all with these thresholds (`stage` never; `count` needs
/// `r`; `count_prefill` needs `r` or `p`; the TTFT variants always can).
pub fn trigger_enabled(variant: Variant, thresholds: &Thresholds) -> bool {
    match variant {
        Variant::Stage => false,
        Variant::Count => thresholds.r.is_some(),
        Variant::CountPrefill => thresholds.r.is_some() || thresholds.p.is_some(),
        Variant::Blind | Variant::Cache => true,
    }
}

/// The thresholds `variant`'s decisions read: `count` its `r`, `count_prefill` both, the others
/// none. Two parameter sets that differ only in their thresholds decide a variant alike when
/// they agree on these (a replay made with one is the other's).
pub fn thresholds_read(variant: Variant, thresholds: &Thresholds) -> Thresholds {
    match variant {
        Variant::Count => Thresholds {
            r: thresholds.r,
            p: None,
        },
        Variant::CountPrefill => *thresholds,
        Variant::Stage | Variant::Blind | Variant::Cache => Thresholds::default(),
    }
}

/// The inputs a variant needs, explicitly:
///
/// | variant | efficient | capable |
/// |---|---|---|
/// | `stage` (or trigger disabled) | — | — |
/// | `count` | observed_at, R | observed_at, schedulable, R |
/// | `count_prefill` | observed_at, R if `r` enabled, P if `p` enabled | observed_at, schedulable, R |
/// | `blind` | observed_at, N, R, P | observed_at, schedulable, N, R, P |
/// | `cache` | observed_at, N, K, R, P | observed_at, schedulable, N, K, R, P |
///
/// The capable candidate's schedulable flag and R are read by guard G; its age and the efficient
/// one's are checked for every observation the decision reads.
pub fn required_inputs(variant: Variant, thresholds: &Thresholds) -> RequiredInputs {
    if !trigger_enabled(variant, thresholds) {
        return RequiredInputs::NONE;
    }
    let guard = Needs {
        observed_at: true,
        schedulable: true,
        r: true,
        ..Needs::NONE
    };
    let seen = Needs {
        observed_at: true,
        ..Needs::NONE
    };
    match variant {
        Variant::Stage => RequiredInputs::NONE,
        Variant::Count => RequiredInputs {
            efficient: Needs { r: true, ..seen },
            capable: guard,
        },
        Variant::CountPrefill => RequiredInputs {
            efficient: Needs {
                r: thresholds.r.is_some(),
                p: thresholds.p.is_some(),
                ..seen
            },
            capable: guard,
        },
        Variant::Blind | Variant::Cache => {
            let k = variant == Variant::Cache;
            let estimator = Needs {
                n: true,
                k,
                r: true,
                p: true,
                ..Needs::NONE
            };
            RequiredInputs {
                efficient: Needs {
                    observed_at: true,
                    ..estimator
                },
                capable: Needs {
                    observed_at: true,
                    schedulable: true,
                    ..estimator
                },
            }
        }
    }
}

/// Why the decision came out as it did.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Reason {
    /// Stage proposed capable: never changed.
    CapableProposal,
    /// Variant `stage`: follow Stage.
    StageBaseline,
    /// The variant's trigger is disabled by its thresholds (`r`/`p` both `None`).
    TriggerDisabled,
    /// Guard G held and the trigger was false: efficient kept.
    TriggerFalse,
    /// Guard G held and the trigger was true: changed to capable.
    Override,
    /// Guard: the capable worker is not schedulable.
    NotSchedulable,
    /// Guard: a required input is missing or invalid.
    InvalidInput {
        model: Model,
        field: Field,
        problem: Problem,
    },
    /// Guard: an observation is older than the maximum age.
    TooOld { model: Model },
    /// Guard: capable booked requests R ≥ destination limit.
    DestinationLimit,
    /// Guard: local capable in-flight calls ≥ local limit.
    LocalLimit,
    /// A Q lookup was outside the measured grid (or in a cell with a missing corner).
    OutOfRange {
        model: Model,
        out_of_range: OutOfRange,
    },
    /// A prediction was zero, negative or non-finite.
    NonPositivePrediction { model: Model },
}

impl Reason {
    /// Every reason's [`Reason::code`], in declaration order (for reports and for tests that
    /// must reach every reason).
    pub const CODES: [&'static str; 12] = [
        "capable_proposal",
        "stage_baseline",
        "trigger_disabled",
        "trigger_false",
        "override",
        "not_schedulable",
        "invalid_input",
        "too_old",
        "destination_limit",
        "local_limit",
        "out_of_range",
        "non_positive_prediction",
    ];

    /// A stable short name (the serde `kind`), for counting in reports.
    pub fn code(&self) -> &'static str {
        match self {
            Reason::CapableProposal => "capable_proposal",
            Reason::StageBaseline => "stage_baseline",
            Reason::TriggerDisabled => "trigger_disabled",
            Reason::TriggerFalse => "trigger_false",
            Reason::Override => "override",
            Reason::NotSchedulable => "not_schedulable",
            Reason::InvalidInput { .. } => "invalid_input",
            Reason::TooOld { .. } => "too_old",
            Reason::DestinationLimit => "destination_limit",
            Reason::LocalLimit => "local_limit",
            Reason::OutOfRange { .. } => "out_of_range",
            Reason::NonPositivePrediction { .. } => "non_positive_prediction",
        }
    }

    /// The model a decision with this reason chooses when Stage proposed `proposal`: capable on
    /// [`Reason::Override`], Stage's proposal otherwise.
    #[inline]
    pub fn choice(&self, proposal: Model) -> Model {
        match self {
            Reason::Override => Model::Capable,
            _ => proposal,
        }
    }

    /// Whether the rule could not act and fell back to Stage's choice (a guard check failed or a
    /// prediction was unusable).
    pub fn is_fallback(&self) -> bool {
        !matches!(
            self,
            Reason::CapableProposal
                | Reason::StageBaseline
                | Reason::TriggerDisabled
                | Reason::TriggerFalse
                | Reason::Override
        )
    }
}

/// One decision, with everything needed to explain it in a per-request log.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    pub variant: Variant,
    /// Stage's proposal.
    pub proposal: Model,
    /// The final choice.
    pub choice: Model,
    /// `choice != proposal` (only ever efficient → capable).
    pub changed: bool,
    pub reason: Reason,
    /// Age of the efficient observation (ms), when read.
    pub efficient_age_ms: Option<f64>,
    /// Age of the capable observation (ms), when read.
    pub capable_age_ms: Option<f64>,
    /// The capable candidate's booked requests (guard's destination check), when read.
    pub capable_r: Option<f64>,
    /// Trigger input `R_efficient`, when read.
    pub efficient_r: Option<f64>,
    /// Trigger input `P_efficient`, when read.
    pub efficient_p: Option<f64>,
    /// Threshold `r` in force (count variants).
    pub threshold_r: Option<f64>,
    /// Threshold `p` in force (`count_prefill`).
    pub threshold_p: Option<f64>,
    /// Predicted efficient TTFT (ms), when computed.
    pub predicted_efficient_ms: Option<f64>,
    /// Predicted capable TTFT (ms), when computed.
    pub predicted_capable_ms: Option<f64>,
    /// `predicted_efficient_ms - predicted_capable_ms`, when both were computed.
    pub advantage_ms: Option<f64>,
    /// The margin `delta` in force (TTFT variants).
    pub margin_ms: Option<f64>,
}

impl Decision {
    fn keep(variant: Variant, proposal: Model, reason: Reason) -> Decision {
        Decision {
            variant,
            proposal,
            choice: proposal,
            changed: false,
            reason,
            efficient_age_ms: None,
            capable_age_ms: None,
            capable_r: None,
            efficient_r: None,
            efficient_p: None,
            threshold_r: None,
            threshold_p: None,
            predicted_efficient_ms: None,
            predicted_capable_ms: None,
            advantage_ms: None,
            margin_ms: None,
        }
    }
}

fn invalid(model: Model, e: InvalidInput) -> Reason {
    Reason::InvalidInput {
        model,
        field: e.field,
        problem: e.problem,
    }
}

fn prediction_failure(model: Model, e: PredictError) -> Reason {
    match e {
        PredictError::Invalid(e) => invalid(model, e),
        PredictError::OutOfRange { reason } => Reason::OutOfRange {
            model,
            out_of_range: reason,
        },
        PredictError::NonPositive { .. } => Reason::NonPositivePrediction { model },
    }
}

/// The value of a prediction, including a non-positive one (logged, never acted on).
fn predicted_value(p: &Result<f64, PredictError>) -> Option<f64> {
    match p {
        Ok(v) => Some(*v),
        Err(PredictError::NonPositive { value }) => Some(*value),
        Err(_) => None,
    }
}

impl RuleParams {
    /// See [`decide`].
    #[inline]
    pub fn decide(&self, variant: Variant, input: &DecisionInput) -> Decision {
        decide(self, variant, input)
    }
}

/// Applies one variant to one turn. A capable proposal is never changed; any failed guard check,
/// invalid required input, out-of-range or non-positive prediction keeps Stage's choice and is
/// named in [`Decision::reason`]. Pure: no I/O, no allocation, no state.
///
/// It composes the rule's parts, in order: the variant's [`TriggerReads`], guard G
/// ([`read_guard_inputs`] then [`check_guard_limits`], together [`guard`]) and the variant's
/// trigger ([`count_trigger`] or [`ttft_trigger`] on the predicted advantage).
pub fn decide(params: &RuleParams, variant: Variant, input: &DecisionInput) -> Decision {
    decide_prepared(params, variant, input, &CandidateFeatures::UNKNOWN)
}

/// Both candidates' [`RawFeatures`], computed once for a replay that decides the same turn
/// many times; [`CandidateFeatures::UNKNOWN`] in [`decide`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CandidateFeatures {
    pub efficient: RawFeatures,
    pub capable: RawFeatures,
}

impl CandidateFeatures {
    /// Neither computed: [`decide`] computes what it reads.
    pub const UNKNOWN: CandidateFeatures = CandidateFeatures {
        efficient: RawFeatures::UNKNOWN,
        capable: RawFeatures::UNKNOWN,
    };

    /// Both candidates' features of `input`.
    pub fn of(input: &DecisionInput) -> CandidateFeatures {
        CandidateFeatures {
            efficient: RawFeatures::of(&input.efficient),
            capable: RawFeatures::of(&input.capable),
        }
    }
}

/// [`decide`] with both candidates' raw features already computed from the same `input`
/// ([`CandidateFeatures::of`]): the same decision, without taking their logarithms again.
pub fn decide_prepared(
    params: &RuleParams,
    variant: Variant,
    input: &DecisionInput,
    features: &CandidateFeatures,
) -> Decision {
    // One `Decision`, filled in place and returned once: the early exits of `evaluate` only
    // return a `Reason`, so the 184-byte decision is never copied on the way out.
    let mut d = Decision::keep(variant, input.proposal, Reason::TriggerFalse);
    let reason = evaluate(params, variant, (input, features), &mut d);
    d.reason = reason;
    d.choice = reason.choice(input.proposal);
    d.changed = d.choice != input.proposal;
    d
}

/// What a variant's trigger reads besides guard G's own inputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TriggerReads {
    /// The count trigger: the efficient candidate's R when `r` is enabled, its P when `p` is.
    Counts { r: bool, p: bool },
    /// A TTFT trigger: both candidates' inputs of this estimator.
    Estimator { estimator: Estimator },
}

impl TriggerReads {
    /// What `variant` reads with these thresholds; `None` when it has no trigger to evaluate
    /// (`stage`, or a trigger disabled by its thresholds — see [`trigger_enabled`]).
    pub fn of(variant: Variant, thresholds: &Thresholds) -> Option<TriggerReads> {
        if !trigger_enabled(variant, thresholds) {
            return None;
        }
        match variant {
            Variant::Stage => None,
            Variant::Count => Some(TriggerReads::Counts {
                r: thresholds.r.is_some(),
                p: false,
            }),
            Variant::CountPrefill => Some(TriggerReads::Counts {
                r: thresholds.r.is_some(),
                p: thresholds.p.is_some(),
            }),
            Variant::Blind | Variant::Cache => variant
                .estimator()
                .map(|estimator| TriggerReads::Estimator { estimator }),
        }
    }

    fn estimator(self) -> Option<Estimator> {
        match self {
            TriggerReads::Estimator { estimator } => Some(estimator),
            TriggerReads::Counts { .. } => None,
        }
    }
}

/// Everything guard G and the trigger read from one turn, each value validated exactly once.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GuardReadings {
    pub efficient_age_ms: f64,
    pub capable_age_ms: f64,
    /// The capable candidate's booked requests (the destination check).
    pub capable_r: f64,
    /// `R_efficient`, when the count trigger's `r` term reads it.
    pub efficient_r: Option<f64>,
    /// `P_efficient`, when the count trigger's `p` term reads it.
    pub efficient_p: Option<f64>,
    /// The efficient candidate's estimator inputs (TTFT triggers).
    pub efficient_inputs: Option<EstimatorInputs>,
    /// The capable candidate's estimator inputs (TTFT triggers).
    pub capable_inputs: Option<EstimatorInputs>,
}

fn on<T>(model: Model, r: Result<T, InvalidInput>) -> Result<T, Reason> {
    r.map_err(|e| invalid(model, e))
}

fn estimator_inputs(
    model: Model,
    obs: &Observation,
    estimator: Option<Estimator>,
    raw: RawFeatures,
) -> Result<Option<EstimatorInputs>, Reason> {
    estimator
        .map(|est| on(model, EstimatorInputs::from_prepared(obs, est, raw)))
        .transpose()
}

/// Guard G's "required observations valid": validates what guard G and the trigger read, in the
/// order of [`required_inputs`] and [`Needs::check`] (capable, then efficient; schedulable,
/// observed_at, N, K, R, P), and returns the first problem as the decision's reason.
#[inline(always)]
pub fn read_guard_inputs(
    reads: TriggerReads,
    input: &DecisionInput,
) -> Result<GuardReadings, Reason> {
    read_prepared(reads, input, &CandidateFeatures::UNKNOWN)
}

/// [`read_guard_inputs`] with the candidates' raw features, when known.
#[inline(always)]
fn read_prepared(
    reads: TriggerReads,
    input: &DecisionInput,
    features: &CandidateFeatures,
) -> Result<GuardReadings, Reason> {
    let (eff, cap) = (&input.efficient, &input.capable);
    let estimator = reads.estimator();
    let (read_r, read_p) = match reads {
        TriggerReads::Counts { r, p } => (r, p),
        TriggerReads::Estimator { .. } => (false, false),
    };
    if !on(Model::Capable, cap.valid_schedulable())? {
        return Err(Reason::NotSchedulable);
    }
    let capable_age_ms = on(Model::Capable, cap.age_ms(input.now_ms))?;
    let capable_inputs = estimator_inputs(Model::Capable, cap, estimator, features.capable)?;
    let capable_r = on(Model::Capable, cap.valid_r())?;
    let efficient_age_ms = on(Model::Efficient, eff.age_ms(input.now_ms))?;
    let efficient_inputs = estimator_inputs(Model::Efficient, eff, estimator, features.efficient)?;
    let efficient_r = read_r
        .then(|| on(Model::Efficient, eff.valid_r()))
        .transpose()?;
    let efficient_p = read_p
        .then(|| on(Model::Efficient, eff.valid_p()))
        .transpose()?;
    Ok(GuardReadings {
        efficient_age_ms,
        capable_age_ms,
        capable_r,
        efficient_r,
        efficient_p,
        efficient_inputs,
        capable_inputs,
    })
}

/// Guard G's comparisons, in the proposal's order: both observations at most `max_age_ms` old
/// (efficient first), capable booked requests R < destination limit, local capable in-flight
/// calls < local limit.
#[inline(always)]
pub fn check_guard_limits(
    limits: &GuardLimits,
    readings: &GuardReadings,
    local_capable_in_flight: u64,
) -> Result<(), Reason> {
    if readings.efficient_age_ms > limits.max_age_ms {
        return Err(Reason::TooOld {
            model: Model::Efficient,
        });
    }
    if readings.capable_age_ms > limits.max_age_ms {
        return Err(Reason::TooOld {
            model: Model::Capable,
        });
    }
    if readings.capable_r >= limits.destination_limit {
        return Err(Reason::DestinationLimit);
    }
    if local_capable_in_flight >= limits.local_limit {
        return Err(Reason::LocalLimit);
    }
    Ok(())
}

/// Guard G for a trigger that reads `reads`: the required observations are valid
/// ([`read_guard_inputs`]) and within the limits ([`check_guard_limits`]). `Err` carries the
/// reason the decision falls back to Stage's choice.
pub fn guard(
    limits: &GuardLimits,
    reads: TriggerReads,
    input: &DecisionInput,
) -> Result<GuardReadings, Reason> {
    guard_prepared(limits, reads, (input, &CandidateFeatures::UNKNOWN))
}

/// Whether guard G holds for one turn for each set of count-trigger terms (what
/// [`guard`] with [`TriggerReads::Counts`] gives for `r` alone, `p` alone and both).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuardPass {
    /// Guard G holds when only the `R >= r` term is enabled.
    pub r_only: bool,
    /// Guard G holds when only the `P > p` term is enabled.
    pub p_only: bool,
    /// Guard G holds when both terms are enabled.
    pub both: bool,
}

impl GuardPass {
    /// The guard holds whatever terms are enabled.
    pub const ALL: GuardPass = GuardPass {
        r_only: true,
        p_only: true,
        both: true,
    };
}

/// Guard G of one turn for each set of count-trigger terms, reading the turn once: guard G
/// holds for a set of terms when every required observation is valid and within the limits
/// ([`guard`]), so it holds for a set exactly when it holds with no term's own input and each
/// enabled term's input ([`Observation::valid_r`], [`Observation::valid_p`] of the efficient
/// candidate) is valid. Property-tested against [`guard`] for every set of terms.
pub fn count_guards(limits: &GuardLimits, input: &DecisionInput) -> GuardPass {
    let shared = guard(limits, TriggerReads::Counts { r: false, p: false }, input).is_ok();
    let r = shared && input.efficient.valid_r().is_ok();
    let p = shared && input.efficient.valid_p().is_ok();
    GuardPass {
        r_only: r,
        p_only: p,
        both: r && p,
    }
}

/// The `r` term: `R_efficient >= r`.
#[inline(always)]
pub fn r_trigger(efficient_r: f64, r: f64) -> bool {
    efficient_r >= r
}

/// The `p` term: `P_efficient > p`.
#[inline(always)]
pub fn p_trigger(efficient_p: f64, p: f64) -> bool {
    efficient_p > p
}

/// The count trigger (`count`, `count_prefill`): an enabled term whose value was read fires
/// ([`r_trigger`] or [`p_trigger`]); a disabled term or an unread value never does.
#[inline(always)]
pub fn count_trigger(
    thresholds: &Thresholds,
    efficient_r: Option<f64>,
    efficient_p: Option<f64>,
) -> bool {
    let by_r = matches!((efficient_r, thresholds.r), (Some(v), Some(r)) if r_trigger(v, r));
    let by_p = matches!((efficient_p, thresholds.p), (Some(v), Some(p)) if p_trigger(v, p));
    by_r || by_p
}

/// The TTFT trigger (`blind`, `cache`): the predicted advantage `T_eff − T_cap` exceeds the
/// margin (strictly).
#[inline(always)]
pub fn ttft_trigger(advantage_ms: f64, margin_ms: f64) -> bool {
    advantage_ms > margin_ms
}

impl Margins {
    /// The margin of one estimator (`delta_blind` or `delta_cache`).
    pub fn of(&self, estimator: Estimator) -> f64 {
        match estimator {
            Estimator::Blind => self.blind,
            Estimator::Cache => self.cache,
        }
    }
}

/// Both predictions and the advantage `T_eff − T_cap`, recorded into `d`; an unusable
/// prediction is the reason to fall back.
#[inline(always)]
fn predicted_advantage(
    params: &RuleParams,
    estimator: Estimator,
    eff_inputs: &EstimatorInputs,
    cap_inputs: &EstimatorInputs,
    d: &mut Decision,
) -> Result<f64, Reason> {
    let t_eff = predict_from_inputs(&params.efficient, estimator, eff_inputs);
    let t_cap = predict_from_inputs(&params.capable, estimator, cap_inputs);
    d.predicted_efficient_ms = predicted_value(&t_eff);
    d.predicted_capable_ms = predicted_value(&t_cap);
    let advantage = advantage_of(t_eff, t_cap)?;
    d.advantage_ms = Some(advantage);
    Ok(advantage)
}

/// The advantage `T_eff − T_cap` of both predictions; the first unusable one (efficient's,
/// then capable's) is the reason to fall back.
#[inline(always)]
pub(crate) fn advantage_of(
    t_eff: Result<f64, PredictError>,
    t_cap: Result<f64, PredictError>,
) -> Result<f64, Reason> {
    let t_eff = t_eff.map_err(|e| prediction_failure(Model::Efficient, e))?;
    let t_cap = t_cap.map_err(|e| prediction_failure(Model::Capable, e))?;
    Ok(t_eff - t_cap)
}

/// The variant's thresholds or margin in force, recorded into `d`.
#[inline(always)]
fn record_terms(params: &RuleParams, variant: Variant, d: &mut Decision) {
    match variant {
        Variant::Count => d.threshold_r = params.thresholds.r,
        Variant::CountPrefill => {
            d.threshold_r = params.thresholds.r;
            d.threshold_p = params.thresholds.p;
        }
        Variant::Blind => d.margin_ms = Some(params.margins.blind),
        Variant::Cache => d.margin_ms = Some(params.margins.cache),
        Variant::Stage => {}
    }
}

/// [`guard`] with the candidates' raw features, when known: the required observations are
/// valid ([`read_guard_inputs`]) and within the limits ([`check_guard_limits`]).
#[inline(always)]
pub(crate) fn guard_prepared(
    limits: &GuardLimits,
    reads: TriggerReads,
    (input, features): (&DecisionInput, &CandidateFeatures),
) -> Result<GuardReadings, Reason> {
    let readings = read_prepared(reads, input, features)?;
    check_guard_limits(limits, &readings, input.local_capable_in_flight)?;
    Ok(readings)
}

/// Guard G as [`decide`] applies it, recording the ages (once the inputs are valid) and the
/// capable R (once both observations are fresh) into `d`.
#[inline(always)]
fn guard_recorded(
    params: &RuleParams,
    reads: TriggerReads,
    (input, features): (&DecisionInput, &CandidateFeatures),
    d: &mut Decision,
) -> Result<GuardReadings, Reason> {
    let readings = read_prepared(reads, input, features)?;
    d.capable_age_ms = Some(readings.capable_age_ms);
    d.efficient_age_ms = Some(readings.efficient_age_ms);
    let checked = check_guard_limits(&params.limits, &readings, input.local_capable_in_flight);
    if !matches!(checked, Err(Reason::TooOld { .. })) {
        d.capable_r = Some(readings.capable_r);
    }
    checked.map(|()| readings)
}

/// The trigger of the variant behind `reads`, recording its inputs into `d`.
#[inline(always)]
fn trigger(
    params: &RuleParams,
    reads: TriggerReads,
    readings: &GuardReadings,
    d: &mut Decision,
) -> Result<bool, Reason> {
    match (reads, readings.efficient_inputs, readings.capable_inputs) {
        (TriggerReads::Estimator { estimator }, Some(eff), Some(cap)) => {
            let advantage = predicted_advantage(params, estimator, &eff, &cap, d)?;
            Ok(ttft_trigger(advantage, params.margins.of(estimator)))
        }
        _ => {
            d.efficient_r = readings.efficient_r;
            d.efficient_p = readings.efficient_p;
            Ok(count_trigger(
                &params.thresholds,
                readings.efficient_r,
                readings.efficient_p,
            ))
        }
    }
}

/// The body of [`decide`]: records what it reads into `d` and returns the reason. Every reason
/// but [`Reason::Override`] keeps Stage's choice.
#[inline(always)]
fn evaluate(
    params: &RuleParams,
    variant: Variant,
    (input, features): (&DecisionInput, &CandidateFeatures),
    d: &mut Decision,
) -> Reason {
    if input.proposal == Model::Capable {
        return Reason::CapableProposal;
    }
    if variant == Variant::Stage {
        return Reason::StageBaseline;
    }
    record_terms(params, variant, d);
    let Some(reads) = TriggerReads::of(variant, &params.thresholds) else {
        return Reason::TriggerDisabled;
    };
    let fire = guard_recorded(params, reads, (input, features), d)
        .and_then(|readings| trigger(params, reads, &readings, d));
    verdict(fire)
}

/// The reason a decision ends with once guard G and the trigger have been read: the trigger
/// fired ([`Reason::Override`]) or not ([`Reason::TriggerFalse`]), or why there was no verdict.
#[inline(always)]
pub(crate) fn verdict(fire: Result<bool, Reason>) -> Reason {
    match fire {
        Ok(true) => Reason::Override,
        Ok(false) => Reason::TriggerFalse,
        Err(reason) => reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::estimator::{LoadCorrection, Standardiser};
    use crate::qtable::QTable;

    /// A model whose prediction is `ms` everywhere on the grid N ∈ [1, 1e6], f ∈ [0, 1].
    fn flat(ms: f64) -> ModelEstimators {
        ModelEstimators {
            q: QTable::new(vec![1.0, 1e6], vec![0.0, 1.0], vec![ms; 4]).unwrap(),
            standardiser: Standardiser {
                mean: [0.0; 3],
                std: [1.0; 3],
            },
            blind: LoadCorrection {
                intercept: 0.0,
                coef: [0.0; 3],
            },
            cache: LoadCorrection {
                intercept: 0.0,
                coef: [0.0; 3],
            },
        }
    }

    fn params(eff_ms: f64, cap_ms: f64, margin: f64) -> RuleParams {
        RuleParams {
            efficient: flat(eff_ms),
            capable: flat(cap_ms),
            thresholds: Thresholds {
                r: Some(4.0),
                p: Some(1.5),
            },
            margins: Margins {
                blind: margin,
                cache: margin,
            },
            limits: GuardLimits {
                max_age_ms: 500.0,
                destination_limit: 8.0,
                local_limit: 2,
            },
        }
    }

    fn obs(r: f64) -> Observation {
        Observation {
            n: Some(100_000.0),
            k: Some(90_000.0),
            r: Some(r),
            prefill_tokens_booked: Some(16_000.0),
            prefill_capacity_tokens: Some(8_000.0),
            schedulable: Some(true),
            observed_at_ms: Some(10_000.0),
            ..Observation::default()
        }
    }

    fn input() -> DecisionInput {
        DecisionInput {
            proposal: Model::Efficient,
            efficient: obs(4.0),
            capable: obs(1.0),
            now_ms: 10_100.0,
            local_capable_in_flight: 0,
        }
    }

    #[test]
    fn proposal_worked_example_override() {
        // Efficient 1.4 s, capable 0.9 s, margin 0.2 s: advantage 0.5 s > 0.2 s → capable.
        let p = params(1400.0, 900.0, 200.0);
        for variant in [Variant::Blind, Variant::Cache] {
            let d = decide(&p, variant, &input());
            assert_eq!(d.choice, Model::Capable, "{variant}");
            assert!(d.changed);
            assert_eq!(d.reason, Reason::Override);
            assert_eq!(d.predicted_efficient_ms, Some(1400.0));
            assert_eq!(d.predicted_capable_ms, Some(900.0));
            assert_eq!(d.advantage_ms, Some(500.0));
            assert_eq!(d.margin_ms, Some(200.0));
            assert_eq!(d.capable_age_ms, Some(100.0));
        }
    }

    #[test]
    fn proposal_worked_example_keep() {
        // Advantage only 0.05 s → keep efficient.
        let p = params(1400.0, 1350.0, 200.0);
        let d = decide(&p, Variant::Cache, &input());
        assert_eq!(d.choice, Model::Efficient);
        assert!(!d.changed);
        assert_eq!(d.reason, Reason::TriggerFalse);
        assert_eq!(d.advantage_ms, Some(50.0));
        // Strictly greater: an advantage equal to the margin does not override.
        let p = params(1400.0, 1200.0, 200.0);
        assert_eq!(
            decide(&p, Variant::Cache, &input()).reason,
            Reason::TriggerFalse
        );
    }

    /// Thresholds a variant does not read ([`thresholds_read`]) change none of its decisions.
    #[test]
    fn thresholds_not_read_change_no_decision() {
        let options = [None, Some(0.5), Some(2.0), Some(4.0), Some(9.0)];
        let all: Vec<Thresholds> = options
            .iter()
            .flat_map(|&r| options.iter().map(move |&p| Thresholds { r, p }))
            .collect();
        let mut inputs = Vec::new();
        for r in [0.0, 1.0, 4.0, 9.0] {
            for booked in [0.0, 4_000.0, 16_000.0, 80_000.0] {
                let mut i = input();
                i.efficient.r = Some(r);
                i.efficient.prefill_tokens_booked = Some(booked);
                inputs.push(i);
            }
        }
        for variant in Variant::ALL {
            for a in &all {
                for b in all
                    .iter()
                    .filter(|b| thresholds_read(variant, b) == thresholds_read(variant, a))
                {
                    let (mut pa, mut pb) =
                        (params(1400.0, 900.0, 200.0), params(1400.0, 900.0, 200.0));
                    (pa.thresholds, pb.thresholds) = (*a, *b);
                    for i in &inputs {
                        assert_eq!(
                            decide(&pa, variant, i),
                            decide(&pb, variant, i),
                            "{variant} {a:?} {b:?}"
                        );
                    }
                }
            }
        }
    }

    /// A variant whose trigger its thresholds disable ([`trigger_enabled`]) keeps Stage's
    /// proposal on every turn, as Stage does (what a replay that tallies such variants once
    /// relies on).
    #[test]
    fn a_variant_that_cannot_fire_keeps_the_proposal() {
        let options = [None, Some(0.5), Some(4.0)];
        let mut inputs = Vec::new();
        for proposal in [Model::Efficient, Model::Capable] {
            for r in [0.0, 1.0, 4.0, 9.0] {
                for booked in [0.0, 16_000.0, 80_000.0] {
                    let mut i = input();
                    i.proposal = proposal;
                    i.efficient.r = Some(r);
                    i.efficient.prefill_tokens_booked = Some(booked);
                    inputs.push(i);
                }
            }
        }
        let mut disabled = 0;
        for variant in Variant::ALL {
            for r in options {
                for p in options {
                    let mut params = params(1400.0, 900.0, 0.0);
                    params.thresholds = Thresholds { r, p };
                    if trigger_enabled(variant, &params.thresholds) {
                        continue;
                    }
                    disabled += 1;
                    for i in &inputs {
                        let d = decide(&params, variant, i);
                        assert_eq!(d.choice, i.proposal, "{variant} {r:?} {p:?}");
                        assert!(!d.changed);
                    }
                }
            }
        }
        // Stage with every threshold set, count without r, count_prefill without either.
        assert_eq!(disabled, 9 + 3 + 1);
    }

    #[test]
    fn capable_proposal_never_changed() {
        let p = params(1400.0, 900.0, 0.0);
        let mut i = input();
        i.proposal = Model::Capable;
        for v in Variant::ALL {
            let d = decide(&p, v, &i);
            assert_eq!(d.choice, Model::Capable);
            assert!(!d.changed);
            assert_eq!(d.reason, Reason::CapableProposal);
        }
    }

    #[test]
    fn stage_follows_stage_with_no_inputs() {
        let p = params(1400.0, 900.0, 0.0);
        let i = DecisionInput {
            proposal: Model::Efficient,
            efficient: Observation::default(),
            capable: Observation::default(),
            now_ms: f64::NAN,
            local_capable_in_flight: u64::MAX,
        };
        let d = decide(&p, Variant::Stage, &i);
        assert_eq!(
            (d.choice, d.changed, d.reason),
            (Model::Efficient, false, Reason::StageBaseline)
        );
    }

    #[test]
    fn count_triggers() {
        let p = params(1.0, 1.0, 0.0); // r = 4, p = 1.5
        let d = decide(&p, Variant::Count, &input());
        assert_eq!(d.reason, Reason::Override); // R_eff = 4 >= 4
        assert_eq!(d.efficient_r, Some(4.0));
        assert_eq!(d.threshold_r, Some(4.0));
        let mut i = input();
        i.efficient.r = Some(3.0);
        assert_eq!(decide(&p, Variant::Count, &i).reason, Reason::TriggerFalse);
        // count_prefill: R = 3 < 4 but P = 2 > 1.5 → override.
        let d = decide(&p, Variant::CountPrefill, &i);
        assert_eq!(d.reason, Reason::Override);
        assert_eq!(d.efficient_p, Some(2.0));
        // P term disabled → R alone decides.
        let mut q = p.clone();
        q.thresholds.p = None;
        assert_eq!(
            decide(&q, Variant::CountPrefill, &i).reason,
            Reason::TriggerFalse
        );
        // P = 2 is not > 2.
        q.thresholds = Thresholds {
            r: None,
            p: Some(2.0),
        };
        assert_eq!(
            decide(&q, Variant::CountPrefill, &i).reason,
            Reason::TriggerFalse
        );
        // Both disabled → trigger disabled, nothing read.
        q.thresholds = Thresholds { r: None, p: None };
        let d = decide(&q, Variant::CountPrefill, &i);
        assert_eq!(d.reason, Reason::TriggerDisabled);
        assert_eq!(d.choice, Model::Efficient);
        assert_eq!(
            decide(&q, Variant::Count, &i).reason,
            Reason::TriggerDisabled
        );
    }

    #[test]
    fn count_needs_only_r_efficient_and_guard() {
        let p = params(1.0, 1.0, 0.0);
        let mut i = input();
        // Everything the count rule does not read is garbage.
        for o in [&mut i.efficient, &mut i.capable] {
            o.n = Some(f64::NAN);
            o.k = Some(-1.0);
            o.prefill_capacity_tokens = Some(10_000_000.0);
        }
        assert_eq!(decide(&p, Variant::Count, &i).reason, Reason::Override);
        // count_prefill reads P when p is enabled.
        assert_eq!(
            decide(&p, Variant::CountPrefill, &i).reason,
            Reason::InvalidInput {
                model: Model::Efficient,
                field: Field::PrefillCapacityTokens,
                problem: Problem::CapacitySentinel
            }
        );
        // blind does not read K but reads N.
        assert_eq!(
            decide(&p, Variant::Blind, &i).reason,
            Reason::InvalidInput {
                model: Model::Capable,
                field: Field::N,
                problem: Problem::NonFinite
            }
        );
    }

    #[test]
    fn blind_does_not_read_k() {
        let p = params(1400.0, 900.0, 200.0);
        let mut i = input();
        i.efficient.k = None;
        i.capable.k = Some(1e9); // K > N
        assert_eq!(decide(&p, Variant::Blind, &i).reason, Reason::Override);
        assert_eq!(
            decide(&p, Variant::Cache, &i).reason,
            Reason::InvalidInput {
                model: Model::Capable,
                field: Field::K,
                problem: Problem::GreaterThanN
            }
        );
    }

    #[test]
    fn guard_checks_in_order() {
        let p = params(1400.0, 900.0, 200.0);
        let check = |f: &dyn Fn(&mut DecisionInput), want: Reason| {
            let mut i = input();
            f(&mut i);
            for v in [
                Variant::Count,
                Variant::CountPrefill,
                Variant::Blind,
                Variant::Cache,
            ] {
                let d = decide(&p, v, &i);
                assert_eq!(d.reason, want, "{v}");
                assert_eq!(d.choice, Model::Efficient);
                assert!(!d.changed);
                assert!(d.reason.is_fallback());
            }
        };
        check(
            &|i| i.capable.schedulable = Some(false),
            Reason::NotSchedulable,
        );
        check(
            &|i| i.capable.schedulable = None,
            Reason::InvalidInput {
                model: Model::Capable,
                field: Field::Schedulable,
                problem: Problem::Missing,
            },
        );
        check(
            &|i| i.capable.r = Some(f64::INFINITY),
            Reason::InvalidInput {
                model: Model::Capable,
                field: Field::R,
                problem: Problem::NonFinite,
            },
        );
        check(
            &|i| i.now_ms = 10_600.0,
            Reason::TooOld {
                model: Model::Efficient,
            },
        );
        check(
            &|i| i.capable.observed_at_ms = Some(9_000.0),
            Reason::TooOld {
                model: Model::Capable,
            },
        );
        check(
            &|i| i.efficient.observed_at_ms = Some(20_000.0),
            Reason::InvalidInput {
                model: Model::Efficient,
                field: Field::ObservedAtMs,
                problem: Problem::InFuture,
            },
        );
        check(&|i| i.capable.r = Some(8.0), Reason::DestinationLimit);
        check(&|i| i.local_capable_in_flight = 2, Reason::LocalLimit);
        // Age exactly at the maximum is allowed.
        let mut i = input();
        i.now_ms = 10_500.0;
        assert_eq!(decide(&p, Variant::Cache, &i).reason, Reason::Override);
    }

    #[test]
    fn out_of_range_and_non_positive_fall_back() {
        let p = params(1400.0, 900.0, 200.0);
        let mut i = input();
        i.capable.n = Some(2e6);
        i.capable.k = Some(0.0);
        let d = decide(&p, Variant::Cache, &i);
        assert_eq!(
            d.reason,
            Reason::OutOfRange {
                model: Model::Capable,
                out_of_range: OutOfRange::N
            }
        );
        assert_eq!(d.predicted_efficient_ms, Some(1400.0));
        assert_eq!(d.predicted_capable_ms, None);
        assert_eq!(d.advantage_ms, None);
        let mut p = params(1400.0, 900.0, 200.0);
        p.capable.cache.intercept = -900.0;
        let d = decide(&p, Variant::Cache, &input());
        assert_eq!(
            d.reason,
            Reason::NonPositivePrediction {
                model: Model::Capable
            }
        );
        assert_eq!(d.predicted_capable_ms, Some(0.0));
        assert_eq!(d.choice, Model::Efficient);
        // The blind estimator is unaffected.
        assert_eq!(
            decide(&p, Variant::Blind, &input()).reason,
            Reason::Override
        );
    }

    #[test]
    fn required_inputs_table() {
        let t = Thresholds {
            r: Some(1.0),
            p: Some(1.0),
        };
        assert_eq!(required_inputs(Variant::Stage, &t), RequiredInputs::NONE);
        let c = required_inputs(Variant::Count, &t);
        assert_eq!(
            c.efficient,
            Needs {
                observed_at: true,
                r: true,
                ..Needs::NONE
            }
        );
        assert_eq!(
            c.capable,
            Needs {
                observed_at: true,
                schedulable: true,
                r: true,
                ..Needs::NONE
            }
        );
        let cp = required_inputs(
            Variant::CountPrefill,
            &Thresholds {
                r: None,
                p: Some(1.0),
            },
        );
        assert_eq!(
            cp.efficient,
            Needs {
                observed_at: true,
                p: true,
                ..Needs::NONE
            }
        );
        let b = required_inputs(Variant::Blind, &t);
        assert!(b.efficient.n && b.efficient.r && b.efficient.p && !b.efficient.k);
        assert!(b.capable.n && b.capable.r && b.capable.p && !b.capable.k && b.capable.schedulable);
        let k = required_inputs(Variant::Cache, &t);
        assert!(k.efficient.k && k.capable.k);
        assert_eq!(
            required_inputs(Variant::CountPrefill, &Thresholds::default()),
            RequiredInputs::NONE
        );
    }

    #[test]
    fn decision_serialises_for_logs() {
        let p = params(1400.0, 900.0, 200.0);
        let mut i = input();
        i.capable.k = Some(2e5);
        let d = decide(&p, Variant::Cache, &i);
        let json = serde_json::to_value(d).unwrap();
        assert_eq!(json["choice"], "efficient");
        assert_eq!(json["variant"], "cache");
        assert_eq!(json["reason"]["kind"], "invalid_input");
        assert_eq!(json["reason"]["model"], "capable");
        assert_eq!(json["reason"]["field"], "k");
        assert_eq!(json["reason"]["problem"], "greater_than_n");
        let back: Decision = serde_json::from_value(json).unwrap();
        assert_eq!(back, d);
    }
}
