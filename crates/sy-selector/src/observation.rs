//! The observation of one candidate and the single definition of what makes it valid.
//!
//! Every numeric input is an `Option<f64>` so that a missing value (`None`), NaN, infinities and
//! negative values can all be represented — and rejected — instead of being coerced on the way in.

use serde::{Deserialize, Serialize};

/// Dynamo's default prefill capacity for a worker registered without `max_num_batched_tokens`.
///
/// A capacity equal to this value is an invalid observation (it would make P ≈ 0 for a worker whose
/// real capacity is unknown).
pub const PREFILL_CAPACITY_SENTINEL: f64 = 10_000_000.0;

/// What the rule sees of one candidate model: the worker (and rank) Dynamo would pick for it.
///
/// `n`, `k`, `r`, `prefill_tokens_booked`, `prefill_capacity_tokens`, `schedulable` and
/// `observed_at_ms` are the rule's inputs. What else was recorded about the candidate (same names
/// as `sy_records::Record`) is in [`Recorded`], boxed and optional, so that the observation the
/// rule decides on stays small (the calibration tools hold two per probe, a million probes at a
/// time). In JSON an observation is one flat object: a missing member deserialises as `None`;
/// unknown members are refused.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(from = "ObservationJson", into = "ObservationJson")]
pub struct Observation {
    /// Prompt tokens N after this model's chat template and tokenizer.
    pub n: Option<f64>,
    /// Router-estimated reusable GPU-prefix tokens K for this worker/rank.
    pub k: Option<f64>,
    /// Booked requests R on this worker/rank (executing ones included).
    pub r: Option<f64>,
    /// Tracked, cache-adjusted prefill tokens booked on the worker (P's numerator).
    pub prefill_tokens_booked: Option<f64>,
    /// The worker's advertised prefill batch-token capacity (P's denominator).
    pub prefill_capacity_tokens: Option<f64>,
    /// Whether the worker's lifecycle is `schedulable` (guard G reads the capable one).
    pub schedulable: Option<bool>,
    /// Client wall-clock time the observation was taken, milliseconds since the Unix epoch.
    /// Age = `now_ms - observed_at_ms` (Dynamo's answers carry no timestamp).
    pub observed_at_ms: Option<f64>,
    /// The recorded extras; `None` when nothing beyond the rule's inputs was recorded.
    pub recorded: Option<Box<Recorded>>,
}

/// What was recorded about a candidate beyond the rule's inputs: never read by the rule.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Recorded {
    /// Cumulative host-tier overlap tokens (diagnostic).
    pub host_overlap_tokens: Option<u64>,
    /// Cumulative disk-tier overlap tokens (diagnostic).
    pub disk_overlap_tokens: Option<u64>,
    /// Dynamo's weighted prefill-work estimate for this request.
    pub effective_prefill_tokens: Option<u64>,
    /// Tracked decode blocks on the worker.
    pub decode_blocks: Option<u64>,
    /// Advertised KV-block capacity of the worker.
    pub kv_capacity_blocks: Option<u64>,
    /// Pool admission-queue requests.
    pub pool_pending_requests: Option<u64>,
    /// Pool admission-queue tokens.
    pub pool_pending_tokens: Option<u64>,
    /// The worker Dynamo would pick (u64 ids exceed 2^53: never a float).
    pub worker_id: Option<u64>,
    /// The data-parallel rank on that worker.
    pub dp_rank: Option<u32>,
    /// The worker's endpoint.
    pub endpoint: Option<String>,
    /// The routing group.
    pub routing_group: Option<String>,
    /// The served model name.
    pub model: Option<String>,
    /// Time spent collecting this observation (routing overhead).
    pub query_duration_ms: Option<f64>,
}

impl Recorded {
    /// Whether nothing was recorded.
    fn is_empty(&self) -> bool {
        *self == Recorded::default()
    }
}

/// The JSON form of an [`Observation`]: one flat object, every member optional (the meaning of
/// each is documented on [`Observation`] and [`Recorded`]).
#[derive(Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
struct ObservationJson {
    n: Option<f64>,
    k: Option<f64>,
    r: Option<f64>,
    prefill_tokens_booked: Option<f64>,
    prefill_capacity_tokens: Option<f64>,
    schedulable: Option<bool>,
    #[serde(alias = "observed_at_unix_ms")]
    observed_at_ms: Option<f64>,
    host_overlap_tokens: Option<u64>,
    disk_overlap_tokens: Option<u64>,
    effective_prefill_tokens: Option<u64>,
    decode_blocks: Option<u64>,
    kv_capacity_blocks: Option<u64>,
    pool_pending_requests: Option<u64>,
    pool_pending_tokens: Option<u64>,
    worker_id: Option<u64>,
    dp_rank: Option<u32>,
    endpoint: Option<String>,
    routing_group: Option<String>,
    model: Option<String>,
    query_duration_ms: Option<f64>,
}

macro_rules! observation_json {
    (rule: $($rule:ident),*; recorded: $($extra:ident),*) => {
        impl From<ObservationJson> for Observation {
            fn from(j: ObservationJson) -> Observation {
                let recorded = Recorded { $($extra: j.$extra),* };
                Observation {
                    $($rule: j.$rule,)*
                    recorded: (!recorded.is_empty()).then(|| Box::new(recorded)),
                }
            }
        }

        impl From<Observation> for ObservationJson {
            fn from(o: Observation) -> ObservationJson {
                let recorded = o.recorded.map(|r| *r).unwrap_or_default();
                ObservationJson {
                    $($rule: o.$rule,)*
                    $($extra: recorded.$extra,)*
                }
            }
        }
    };
}

observation_json!(
    rule: n, k, r, prefill_tokens_booked, prefill_capacity_tokens, schedulable, observed_at_ms;
    recorded: host_overlap_tokens, disk_overlap_tokens, effective_prefill_tokens, decode_blocks,
        kv_capacity_blocks, pool_pending_requests, pool_pending_tokens, worker_id, dp_rank,
        endpoint, routing_group, model, query_duration_ms
);

/// Which input of a decision is invalid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Field {
    N,
    K,
    R,
    PrefillTokensBooked,
    PrefillCapacityTokens,
    /// The ratio P = booked / capacity (non-finite although both parts are valid).
    P,
    Schedulable,
    ObservedAtMs,
    /// The decision's clock.
    NowMs,
    /// A measured TTFT (regression target helpers only).
    TtftMs,
}

impl Field {
    /// The name used in files (the JSON member name).
    pub fn as_str(self) -> &'static str {
        match self {
            Field::N => "n",
            Field::K => "k",
            Field::R => "r",
            Field::PrefillTokensBooked => "prefill_tokens_booked",
            Field::PrefillCapacityTokens => "prefill_capacity_tokens",
            Field::P => "p",
            Field::Schedulable => "schedulable",
            Field::ObservedAtMs => "observed_at_ms",
            Field::NowMs => "now_ms",
            Field::TtftMs => "ttft_ms",
        }
    }
}

/// Why an input is invalid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Problem {
    /// Not observed.
    Missing,
    /// NaN or ±infinity.
    NonFinite,
    /// Below zero.
    Negative,
    /// Zero where a positive value is required (N, prefill capacity).
    Zero,
    /// K > N.
    GreaterThanN,
    /// Prefill capacity equal to Dynamo's 10,000,000 default sentinel.
    CapacitySentinel,
    /// An observation taken after `now_ms` (negative age).
    InFuture,
}

impl Problem {
    /// A short human description.
    pub fn as_str(self) -> &'static str {
        match self {
            Problem::Missing => "missing",
            Problem::NonFinite => "non_finite",
            Problem::Negative => "negative",
            Problem::Zero => "zero",
            Problem::GreaterThanN => "greater_than_n",
            Problem::CapacitySentinel => "capacity_sentinel",
            Problem::InFuture => "in_future",
        }
    }
}

/// One invalid input: which field and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, thiserror::Error)]
#[error("invalid observation field `{}`: {}", field.as_str(), problem.as_str())]
pub struct InvalidInput {
    pub field: Field,
    pub problem: Problem,
}

impl InvalidInput {
    fn new(field: Field, problem: Problem) -> Self {
        InvalidInput { field, problem }
    }
}

/// A present, finite, non-negative value.
#[inline(always)]
fn non_negative(value: Option<f64>, field: Field) -> Result<f64, InvalidInput> {
    match value {
        None => Err(InvalidInput::new(field, Problem::Missing)),
        Some(v) if !v.is_finite() => Err(InvalidInput::new(field, Problem::NonFinite)),
        Some(v) if v < 0.0 => Err(InvalidInput::new(field, Problem::Negative)),
        Some(v) => Ok(v),
    }
}

impl Observation {
    /// N: present, finite and > 0.
    #[inline(always)]
    pub fn valid_n(&self) -> Result<f64, InvalidInput> {
        let n = non_negative(self.n, Field::N)?;
        if n == 0.0 {
            return Err(InvalidInput::new(Field::N, Problem::Zero));
        }
        Ok(n)
    }

    /// K: present, finite, ≥ 0 and ≤ N (N must be valid too).
    #[inline(always)]
    pub fn valid_k(&self) -> Result<f64, InvalidInput> {
        let k = non_negative(self.k, Field::K)?;
        let n = self.valid_n()?;
        if k > n {
            return Err(InvalidInput::new(Field::K, Problem::GreaterThanN));
        }
        Ok(k)
    }

    /// The cached fraction f = K / N, in [0, 1].
    #[inline(always)]
    pub fn valid_f(&self) -> Result<f64, InvalidInput> {
        let k = self.valid_k()?;
        let n = self.valid_n()?;
        Ok(k / n)
    }

    /// R: present, finite and ≥ 0.
    #[inline(always)]
    pub fn valid_r(&self) -> Result<f64, InvalidInput> {
        non_negative(self.r, Field::R)
    }

    /// P = booked / capacity. The capacity must be present, finite, > 0 and not Dynamo's
    /// 10,000,000 sentinel; the booked tokens present, finite and ≥ 0.
    #[inline(always)]
    pub fn valid_p(&self) -> Result<f64, InvalidInput> {
        let booked = non_negative(self.prefill_tokens_booked, Field::PrefillTokensBooked)?;
        let capacity = non_negative(self.prefill_capacity_tokens, Field::PrefillCapacityTokens)?;
        if capacity == 0.0 {
            return Err(InvalidInput::new(
                Field::PrefillCapacityTokens,
                Problem::Zero,
            ));
        }
        if capacity == PREFILL_CAPACITY_SENTINEL {
            return Err(InvalidInput::new(
                Field::PrefillCapacityTokens,
                Problem::CapacitySentinel,
            ));
        }
        let p = booked / capacity;
        if !p.is_finite() {
            return Err(InvalidInput::new(Field::P, Problem::NonFinite));
        }
        Ok(p)
    }

    /// Whether the worker is schedulable (`Missing` when the lifecycle was not observed).
    #[inline(always)]
    pub fn valid_schedulable(&self) -> Result<bool, InvalidInput> {
        self.schedulable
            .ok_or(InvalidInput::new(Field::Schedulable, Problem::Missing))
    }

    /// Observation age `now_ms - observed_at_ms` (client clock), finite and ≥ 0.
    #[inline(always)]
    pub fn age_ms(&self, now_ms: f64) -> Result<f64, InvalidInput> {
        if !now_ms.is_finite() {
            return Err(InvalidInput::new(Field::NowMs, Problem::NonFinite));
        }
        let at = match self.observed_at_ms {
            None => return Err(InvalidInput::new(Field::ObservedAtMs, Problem::Missing)),
            Some(v) if !v.is_finite() => {
                return Err(InvalidInput::new(Field::ObservedAtMs, Problem::NonFinite));
            }
            Some(v) => v,
        };
        let age = now_ms - at;
        if !age.is_finite() {
            return Err(InvalidInput::new(Field::ObservedAtMs, Problem::NonFinite));
        }
        if age < 0.0 {
            return Err(InvalidInput::new(Field::ObservedAtMs, Problem::InFuture));
        }
        Ok(age)
    }
}

/// Which inputs of one candidate's observation a decision reads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Needs {
    /// `observed_at_ms` (for the age check).
    pub observed_at: bool,
    /// `schedulable` (capable only: guard G).
    pub schedulable: bool,
    pub n: bool,
    pub k: bool,
    pub r: bool,
    /// `prefill_tokens_booked` and `prefill_capacity_tokens`.
    pub p: bool,
}

impl Needs {
    /// Nothing is read.
    pub const NONE: Needs = Needs {
        observed_at: false,
        schedulable: false,
        n: false,
        k: false,
        r: false,
        p: false,
    };

    /// Whether anything of this observation is read.
    pub fn any(self) -> bool {
        self.observed_at || self.schedulable || self.n || self.k || self.r || self.p
    }

    /// Checks the needed inputs in a fixed order (schedulable presence, observed_at, N, K, R, P)
    /// and returns the first invalid one. `now_ms` is checked when `observed_at` is needed.
    pub fn check(self, obs: &Observation, now_ms: f64) -> Result<(), InvalidInput> {
        if self.schedulable {
            obs.valid_schedulable()?;
        }
        if self.observed_at {
            obs.age_ms(now_ms)?;
        }
        if self.n {
            obs.valid_n()?;
        }
        if self.k {
            obs.valid_k()?;
        }
        if self.r {
            obs.valid_r()?;
        }
        if self.p {
            obs.valid_p()?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn example() -> Observation {
        Observation {
            n: Some(100_000.0),
            k: Some(90_000.0),
            r: Some(4.0),
            prefill_tokens_booked: Some(16_000.0),
            prefill_capacity_tokens: Some(8_000.0),
            schedulable: Some(true),
            observed_at_ms: Some(1_000.0),
            ..Observation::default()
        }
    }

    #[test]
    fn json_is_one_flat_object_and_extras_are_boxed() {
        // The rule's inputs inline, everything else behind one pointer.
        assert!(std::mem::size_of::<Observation>() <= 128);
        let flat = serde_json::json!({
            "n": 1000.0, "k": 10.0, "observed_at_unix_ms": 5.0,
            "worker_id": u64::MAX, "endpoint": "e", "query_duration_ms": 1.5
        });
        let o: Observation = serde_json::from_value(flat).unwrap();
        assert_eq!(o.observed_at_ms, Some(5.0));
        let recorded = o.recorded.as_deref().unwrap();
        assert_eq!(recorded.worker_id, Some(u64::MAX));
        assert_eq!(recorded.endpoint.as_deref(), Some("e"));
        let back = serde_json::to_value(&o).unwrap();
        assert_eq!(back["worker_id"], serde_json::json!(u64::MAX));
        assert_eq!(back["observed_at_ms"], serde_json::json!(5.0));
        assert_eq!(serde_json::from_value::<Observation>(back).unwrap(), o);
        // Nothing beyond the rule's inputs: no box.
        let lean: Observation = serde_json::from_value(serde_json::json!({"r": 2.0})).unwrap();
        assert_eq!(lean.recorded, None);
        let unknown = serde_json::json!({"n": 1.0, "bogus": 1});
        let e = serde_json::from_value::<Observation>(unknown).unwrap_err();
        assert!(e.to_string().contains("bogus"), "{e}");
    }

    #[test]
    fn proposal_example_observation() {
        let o = example();
        assert_eq!(o.valid_n(), Ok(100_000.0));
        assert_eq!(o.valid_k(), Ok(90_000.0));
        assert_eq!(o.valid_f(), Ok(0.9));
        assert_eq!(o.valid_n().unwrap() - o.valid_k().unwrap(), 10_000.0);
        assert_eq!(o.valid_r(), Ok(4.0));
        assert_eq!(o.valid_p(), Ok(2.0));
        assert_eq!(o.age_ms(1_250.0), Ok(250.0));
    }

    #[test]
    fn invalid_values_are_named() {
        let bad = |f: &dyn Fn(&mut Observation)| {
            let mut o = example();
            f(&mut o);
            o
        };
        let e = |field, problem| Err(InvalidInput { field, problem });
        assert_eq!(
            bad(&|o| o.n = None).valid_n(),
            e(Field::N, Problem::Missing)
        );
        assert_eq!(
            bad(&|o| o.n = Some(0.0)).valid_n(),
            e(Field::N, Problem::Zero)
        );
        assert_eq!(
            bad(&|o| o.n = Some(f64::NAN)).valid_n(),
            e(Field::N, Problem::NonFinite)
        );
        assert_eq!(
            bad(&|o| o.n = Some(-1.0)).valid_n(),
            e(Field::N, Problem::Negative)
        );
        assert_eq!(
            bad(&|o| o.k = Some(100_001.0)).valid_k(),
            e(Field::K, Problem::GreaterThanN)
        );
        assert_eq!(
            bad(&|o| o.k = Some(f64::INFINITY)).valid_k(),
            e(Field::K, Problem::NonFinite)
        );
        assert_eq!(
            bad(&|o| o.n = None).valid_k(),
            e(Field::N, Problem::Missing)
        );
        assert_eq!(
            bad(&|o| o.r = Some(-0.5)).valid_r(),
            e(Field::R, Problem::Negative)
        );
        assert_eq!(
            bad(&|o| o.prefill_capacity_tokens = None).valid_p(),
            e(Field::PrefillCapacityTokens, Problem::Missing)
        );
        assert_eq!(
            bad(&|o| o.prefill_capacity_tokens = Some(0.0)).valid_p(),
            e(Field::PrefillCapacityTokens, Problem::Zero)
        );
        assert_eq!(
            bad(&|o| o.prefill_capacity_tokens = Some(10_000_000.0)).valid_p(),
            e(Field::PrefillCapacityTokens, Problem::CapacitySentinel)
        );
        assert_eq!(
            bad(&|o| o.prefill_tokens_booked = Some(f64::NEG_INFINITY)).valid_p(),
            e(Field::PrefillTokensBooked, Problem::NonFinite)
        );
        assert_eq!(
            bad(&|o| {
                o.prefill_tokens_booked = Some(1e308);
                o.prefill_capacity_tokens = Some(1e-10);
            })
            .valid_p(),
            e(Field::P, Problem::NonFinite)
        );
        assert_eq!(
            bad(&|o| o.schedulable = None).valid_schedulable(),
            Err(InvalidInput {
                field: Field::Schedulable,
                problem: Problem::Missing
            })
        );
        assert_eq!(
            example().age_ms(999.0),
            e(Field::ObservedAtMs, Problem::InFuture)
        );
        assert_eq!(
            example().age_ms(f64::NAN),
            e(Field::NowMs, Problem::NonFinite)
        );
        assert_eq!(
            bad(&|o| o.observed_at_ms = None).age_ms(5.0),
            e(Field::ObservedAtMs, Problem::Missing)
        );
    }

    #[test]
    fn k_equal_n_and_zero_k_are_valid() {
        let mut o = example();
        o.k = Some(100_000.0);
        assert_eq!(o.valid_f(), Ok(1.0));
        o.k = Some(0.0);
        assert_eq!(o.valid_f(), Ok(0.0));
    }

    #[test]
    fn json_missing_members_are_none_unknown_refused() {
        let o: Observation = serde_json::from_str(r#"{"n": 5, "observed_at_unix_ms": 3}"#).unwrap();
        assert_eq!(o.n, Some(5.0));
        assert_eq!(o.observed_at_ms, Some(3.0));
        assert_eq!(o.k, None);
        let err = serde_json::from_str::<Observation>(r#"{"n": 5, "q": 1}"#).unwrap_err();
        assert!(err.to_string().contains("unknown field `q`"), "{err}");
    }
}
