//! The two TTFT estimators and their pieces: standardiser, load correction, Q baseline.
//!
//! ```text
//! zN = (log1p(N) - mean_N) / std_N      (same for R and P; statistics from the fitting split)
//! T_blind = Q(N, 0)   + b0 + bN zN + bR zR + bP zP
//! T_cache = Q(N, K/N) + c0 + cN zN + cR zR + cP zP
//! ```
//!
//! The offline fitter uses [`raw_features`], [`Standardiser::fit`], [`q_baseline`] and
//! [`regression_target`] so that it never re-implements a formula of this module.

use serde::{Deserialize, Serialize};

use crate::model::Estimator;
use crate::observation::{Field, InvalidInput, Observation, Problem};
use crate::qtable::{OutOfRange, QTable};

/// Why an estimator gives no usable prediction.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, thiserror::Error)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum PredictError {
    /// An input the estimator needs is invalid.
    #[error(transparent)]
    Invalid(#[from] InvalidInput),
    /// The Q lookup is outside the measured grid or in a cell with a missing corner.
    #[error("Q lookup out of range: {reason}")]
    OutOfRange {
        #[serde(rename = "out_of_range")]
        reason: OutOfRange,
    },
    /// The prediction is zero, negative or non-finite.
    #[error("prediction {value} ms is not a positive finite time")]
    NonPositive { value: f64 },
}

impl From<OutOfRange> for PredictError {
    fn from(reason: OutOfRange) -> Self {
        PredictError::OutOfRange { reason }
    }
}

/// `log1p(x) = ln(1 + x)` for the features, x ≥ 0.
///
/// Computed as `(1 + x).ln()` rather than `x.ln_1p()`: the features enter a linear model, so what
/// matters is the *absolute* error, and rounding `1 + x` adds at most one ulp of 1 (2.2e-16) to
/// the result; the relative accuracy of `ln_1p` for tiny x buys nothing here and costs about a
/// third more time per call. This is the one place the offline fit and the runtime take the
/// logarithm, so both always agree bit for bit.
#[inline]
pub fn log1p(x: f64) -> f64 {
    (1.0 + x).ln()
}

/// `[log1p(N), log1p(R), log1p(P)]` of a valid observation (N > 0, R ≥ 0, P valid).
#[inline]
pub fn raw_features(obs: &Observation) -> Result<[f64; 3], InvalidInput> {
    let n = obs.valid_n()?;
    let r = obs.valid_r()?;
    let p = obs.valid_p()?;
    Ok([log1p(n), log1p(r), log1p(p)])
}

/// One candidate's estimator inputs, validated once: N, the cached fraction the estimator uses
/// (`K/N` for cache-aware, 0 for cache-blind) and the raw features `log1p` of N, R and P.
///
/// [`decide`](crate::decide) builds these while it checks guard G's inputs, so a decision
/// validates every value exactly once; [`predict`] builds them from an [`Observation`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EstimatorInputs {
    pub n: f64,
    pub f: f64,
    pub raw: [f64; 3],
}

impl EstimatorInputs {
    /// Validates what `estimator` reads, in the order N, K (cache-aware only), R, P, and returns
    /// the first invalid field.
    #[inline(always)]
    pub fn from_observation(
        obs: &Observation,
        estimator: Estimator,
    ) -> Result<EstimatorInputs, InvalidInput> {
        EstimatorInputs::from_prepared(obs, estimator, RawFeatures::UNKNOWN)
    }

    /// [`EstimatorInputs::from_observation`], taking the raw features from `raw` when they are
    /// known (N, R and P are then valid: only N and K are read again). Same result, same first
    /// invalid field.
    #[inline(always)]
    pub fn from_prepared(
        obs: &Observation,
        estimator: Estimator,
        raw: RawFeatures,
    ) -> Result<EstimatorInputs, InvalidInput> {
        let n = obs.valid_n()?;
        let f = match estimator {
            Estimator::Blind => 0.0,
            Estimator::Cache => obs.valid_k()? / n,
        };
        let raw = match raw.get() {
            Some(raw) => raw,
            None => {
                let r = obs.valid_r()?;
                let p = obs.valid_p()?;
                [log1p(n), log1p(r), log1p(p)]
            }
        };
        Ok(EstimatorInputs { n, f, raw })
    }
}

/// One observation's [`raw_features`], computed once for a replay that predicts from the same
/// observation many times (every variant, split seed and bootstrap of `sy-select`), or unknown.
///
/// Made only by [`RawFeatures::of`] (or [`RawFeatures::UNKNOWN`]), so it holds exactly what
/// [`raw_features`] gives; it must be passed with the observation it was made of. Valid
/// features are finite, so unknown is a NaN in the first place (24 bytes, no tag).
#[derive(Debug, Clone, Copy)]
pub struct RawFeatures([f64; 3]);

/// Bit for bit, so that two unknowns are equal (NaN ≠ NaN as floats).
impl PartialEq for RawFeatures {
    fn eq(&self, other: &RawFeatures) -> bool {
        self.0.map(f64::to_bits) == other.0.map(f64::to_bits)
    }
}

impl RawFeatures {
    /// Not computed (or N, R or P invalid): the estimators compute and validate them.
    pub const UNKNOWN: RawFeatures = RawFeatures([f64::NAN; 3]);

    /// The raw features of `obs`, or [`RawFeatures::UNKNOWN`] when N, R or P is invalid.
    #[inline]
    pub fn of(obs: &Observation) -> RawFeatures {
        raw_features(obs).map_or(RawFeatures::UNKNOWN, RawFeatures)
    }

    /// The features, when known.
    #[inline(always)]
    pub fn get(&self) -> Option<[f64; 3]> {
        (!self.0[0].is_nan()).then_some(self.0)
    }
}

/// Standardises the log features: `z = (log1p(x) - mean) / std` for x in (N, R, P).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Standardiser {
    /// Means of `log1p(N)`, `log1p(R)`, `log1p(P)` over the fitting split.
    pub mean: [f64; 3],
    /// Population standard deviations (ddof = 0) of the same; a constant feature gets 1.
    pub std: [f64; 3],
}

/// Why a standardiser cannot be fitted.
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
pub enum StandardiserError {
    #[error("cannot fit a standardiser on zero rows")]
    Empty,
    #[error("feature row {row} has a non-finite value")]
    NonFinite { row: usize },
}

/// Count, means and summed squared deviations of raw log features over some rows (Welford's
/// one-pass update): what a [`Standardiser`] is fitted from. Moments of disjoint groups of rows
/// merge ([`FeatureMoments::merge`], Chan et al.'s pairwise update), so a fit under any split
/// can be made from per-condition moments without revisiting the rows.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct FeatureMoments {
    pub count: f64,
    pub mean: [f64; 3],
    /// Σ (x − mean)² per feature.
    pub m2: [f64; 3],
}

impl FeatureMoments {
    /// Adds one row of finite raw features.
    #[inline]
    pub fn push(&mut self, x: [f64; 3]) {
        self.count += 1.0;
        for ((mean, m2), x) in self.mean.iter_mut().zip(&mut self.m2).zip(x) {
            let delta = x - *mean;
            *mean += delta / self.count;
            *m2 += delta * (x - *mean);
        }
    }

    /// Adds the moments of a disjoint group of rows.
    pub fn merge(&mut self, other: &FeatureMoments) {
        if other.count == 0.0 {
            return;
        }
        let count = self.count + other.count;
        for d in 0..3 {
            let delta = other.mean[d] - self.mean[d];
            self.mean[d] += delta * other.count / count;
            self.m2[d] += other.m2[d] + delta * delta * self.count * other.count / count;
        }
        self.count = count;
    }

    /// The standardiser: the means and population standard deviations; a feature with zero
    /// spread gets std = 1 (its z is then 0 for the fitted mean).
    pub fn standardiser(&self) -> Result<Standardiser, StandardiserError> {
        if self.count == 0.0 {
            return Err(StandardiserError::Empty);
        }
        let mut std = [1.0_f64; 3];
        for (std, m2) in std.iter_mut().zip(self.m2) {
            let s = (m2 / self.count).sqrt();
            if s > 0.0 && s.is_finite() {
                *std = s;
            }
        }
        Ok(Standardiser {
            mean: self.mean,
            std,
        })
    }
}

impl Standardiser {
    /// Fits means and population standard deviations of raw log features (see [`raw_features`]
    /// and [`FeatureMoments`]).
    pub fn fit<I>(rows: I) -> Result<Standardiser, StandardiserError>
    where
        I: IntoIterator<Item = [f64; 3]>,
    {
        let mut moments = FeatureMoments::default();
        for (row, x) in rows.into_iter().enumerate() {
            if x.iter().any(|v| !v.is_finite()) {
                return Err(StandardiserError::NonFinite { row });
            }
            moments.push(x);
        }
        moments.standardiser()
    }

    /// Standardises raw log features.
    #[inline]
    pub fn standardise(&self, raw: [f64; 3]) -> [f64; 3] {
        [
            (raw[0] - self.mean[0]) / self.std[0],
            (raw[1] - self.mean[1]) / self.std[1],
            (raw[2] - self.mean[2]) / self.std[2],
        ]
    }

    /// `[zN, zR, zP]` of an observation.
    #[inline]
    pub fn features(&self, obs: &Observation) -> Result<[f64; 3], InvalidInput> {
        Ok(self.standardise(raw_features(obs)?))
    }
}

/// The fitted load correction `intercept + coef[0] zN + coef[1] zR + coef[2] zP`
/// (b0, bN, bR, bP for the blind estimator; c0, cN, cR, cP for the cache-aware one).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoadCorrection {
    pub intercept: f64,
    pub coef: [f64; 3],
}

impl LoadCorrection {
    /// The correction in milliseconds for standardised features `z`.
    #[inline]
    pub fn apply(&self, z: [f64; 3]) -> f64 {
        self.intercept + self.coef[0] * z[0] + self.coef[1] * z[1] + self.coef[2] * z[2]
    }
}

/// Everything one model's estimators need: its Q table, standardiser and both load corrections.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelEstimators {
    pub q: QTable,
    pub standardiser: Standardiser,
    /// b0, bN, bR, bP.
    pub blind: LoadCorrection,
    /// c0, cN, cR, cP.
    pub cache: LoadCorrection,
}

impl ModelEstimators {
    /// The load correction of one estimator.
    #[inline]
    pub fn correction(&self, estimator: Estimator) -> &LoadCorrection {
        match estimator {
            Estimator::Blind => &self.blind,
            Estimator::Cache => &self.cache,
        }
    }

    /// Both load corrections, in the order of [`Estimator::ALL`].
    pub fn corrections(&self) -> [(Estimator, &LoadCorrection); 2] {
        Estimator::ALL.map(|e| (e, self.correction(e)))
    }

    /// Predicted TTFT in milliseconds; see [`predict`].
    #[inline]
    pub fn predict(&self, estimator: Estimator, obs: &Observation) -> Result<f64, PredictError> {
        predict(self, estimator, obs)
    }
}

/// The Q baseline of an estimator: `Q(N, 0)` (blind: K forced to 0, so K is not read) or
/// `Q(N, K/N)` (cache). Inputs are validated first, then the grid is consulted.
#[inline]
pub fn q_baseline(
    q: &QTable,
    estimator: Estimator,
    obs: &Observation,
) -> Result<f64, PredictError> {
    let n = obs.valid_n()?;
    let f = match estimator {
        Estimator::Blind => 0.0,
        Estimator::Cache => obs.valid_f()?,
    };
    Ok(q.lookup(n, f)?)
}

/// Predicted TTFT (ms): Q baseline + load correction. Invalid inputs, out-of-range Q lookups and
/// zero, negative or non-finite predictions are errors (the rule then keeps Stage's choice).
#[inline]
pub fn predict(
    model: &ModelEstimators,
    estimator: Estimator,
    obs: &Observation,
) -> Result<f64, PredictError> {
    predict_prepared(model, estimator, obs, RawFeatures::UNKNOWN)
}

/// [`predict`] with the observation's raw features already computed ([`RawFeatures::of`]).
#[inline]
pub fn predict_prepared(
    model: &ModelEstimators,
    estimator: Estimator,
    obs: &Observation,
    raw: RawFeatures,
) -> Result<f64, PredictError> {
    // Validate every input before looking up Q, so an invalid input is named as such.
    let inputs = EstimatorInputs::from_prepared(obs, estimator, raw)?;
    predict_from_inputs(model, estimator, &inputs)
}

/// [`predict`] on inputs already validated by [`EstimatorInputs::from_observation`] for the same
/// `estimator`.
#[inline(always)]
pub fn predict_from_inputs(
    model: &ModelEstimators,
    estimator: Estimator,
    inputs: &EstimatorInputs,
) -> Result<f64, PredictError> {
    let base = model.q.lookup(inputs.n, inputs.f)?;
    predict_from_baseline(model, estimator, base, inputs.raw)
}

/// The rest of [`predict_from_inputs`] once the Q baseline `base` is looked up: the baseline
/// plus the load correction of the standardised raw features `raw` (the estimator's own model's
/// Q table must have given `base`).
#[inline(always)]
pub fn predict_from_baseline(
    model: &ModelEstimators,
    estimator: Estimator,
    base: f64,
    raw: [f64; 3],
) -> Result<f64, PredictError> {
    let z = model.standardiser.standardise(raw);
    let t = base + model.correction(estimator).apply(z);
    if t > 0.0 && t.is_finite() {
        Ok(t)
    } else {
        Err(PredictError::NonPositive { value: t })
    }
}

/// The ridge regression target: measured TTFT minus the estimator's Q baseline (ms).
#[inline]
pub fn regression_target(
    q: &QTable,
    estimator: Estimator,
    obs: &Observation,
    ttft_ms: f64,
) -> Result<f64, PredictError> {
    // The TTFT is checked before the baseline is looked up: an invalid one is named first.
    finite_ttft(ttft_ms)?;
    target_from_baseline(ttft_ms, q_baseline(q, estimator, obs)?)
}

/// [`regression_target`] with the Q baseline `base` already looked up ([`q_baseline`]).
#[inline]
pub fn target_from_baseline(ttft_ms: f64, base: f64) -> Result<f64, PredictError> {
    Ok(finite_ttft(ttft_ms)? - base)
}

/// A measured TTFT a regression target can be made of: finite.
#[inline(always)]
fn finite_ttft(ttft_ms: f64) -> Result<f64, PredictError> {
    if ttft_ms.is_finite() {
        Ok(ttft_ms)
    } else {
        Err(InvalidInput {
            field: Field::TtftMs,
            problem: Problem::NonFinite,
        }
        .into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obs() -> Observation {
        Observation {
            n: Some(100_000.0),
            k: Some(90_000.0),
            r: Some(4.0),
            prefill_tokens_booked: Some(16_000.0),
            prefill_capacity_tokens: Some(8_000.0),
            ..Observation::default()
        }
    }

    fn model() -> ModelEstimators {
        ModelEstimators {
            q: QTable::new(
                vec![50_000.0, 150_000.0],
                vec![0.0, 1.0],
                vec![1000.0, 100.0, 3000.0, 300.0],
            )
            .unwrap(),
            standardiser: Standardiser {
                mean: [0.0, 0.0, 0.0],
                std: [1.0, 1.0, 1.0],
            },
            blind: LoadCorrection {
                intercept: 10.0,
                coef: [0.0, 100.0, 50.0],
            },
            cache: LoadCorrection {
                intercept: -5.0,
                coef: [1.0, 0.0, 0.0],
            },
        }
    }

    #[test]
    fn raw_features_of_proposal_example() {
        let f = raw_features(&obs()).unwrap();
        let expected = [100_001.0_f64.ln(), 5.0_f64.ln(), 3.0_f64.ln()];
        for d in 0..3 {
            assert!((f[d] - expected[d]).abs() < 1e-14, "{f:?} vs {expected:?}");
        }
    }

    #[test]
    fn standardiser_hand_computed() {
        let s = Standardiser {
            mean: [1.0, 2.0, 3.0],
            std: [2.0, 4.0, 0.5],
        };
        assert_eq!(s.standardise([3.0, 2.0, 2.0]), [1.0, 0.0, -2.0]);
        // z of P = 2: (ln 3 - 3) / 0.5
        let z = s.features(&obs()).unwrap();
        assert!((z[2] - (3.0_f64.ln() - 3.0) / 0.5).abs() < 1e-15);
    }

    #[test]
    fn standardiser_fit_population_std() {
        let s = Standardiser::fit([[1.0, 5.0, 0.0], [3.0, 5.0, 2.0]]).unwrap();
        assert_eq!(s.mean, [2.0, 5.0, 1.0]);
        assert_eq!(s.std, [1.0, 1.0, 1.0]); // constant R gets std 1
        let s = Standardiser::fit([[0.0, 0.0, 0.0], [4.0, 0.0, 0.0], [8.0, 0.0, 0.0]]).unwrap();
        assert_eq!(s.mean[0], 4.0);
        assert!((s.std[0] - (32.0_f64 / 3.0).sqrt()).abs() < 1e-12);
        assert_eq!(
            Standardiser::fit(std::iter::empty()),
            Err(StandardiserError::Empty)
        );
        assert_eq!(
            Standardiser::fit([[0.0, 0.0, 0.0], [f64::NAN, 0.0, 0.0]]),
            Err(StandardiserError::NonFinite { row: 1 })
        );
    }

    #[test]
    fn load_correction_hand_computed() {
        let c = LoadCorrection {
            intercept: 1.0,
            coef: [2.0, 3.0, 4.0],
        };
        assert_eq!(c.apply([1.0, -1.0, 0.5]), 1.0 + 2.0 - 3.0 + 2.0);
    }

    #[test]
    fn blind_forces_k_to_zero_cache_uses_fraction() {
        let m = model();
        let o = obs();
        // Q(100k, 0) = 2000; Q(100k, 0.9) = 2000 + 0.9 * (200 - 2000) = 380
        assert_eq!(q_baseline(&m.q, Estimator::Blind, &o), Ok(2000.0));
        assert!((q_baseline(&m.q, Estimator::Cache, &o).unwrap() - 380.0).abs() < 1e-9);
        // Blind ignores K entirely, even an invalid one.
        let mut bad_k = o.clone();
        bad_k.k = Some(f64::NAN);
        assert_eq!(q_baseline(&m.q, Estimator::Blind, &bad_k), Ok(2000.0));
        assert!(matches!(
            q_baseline(&m.q, Estimator::Cache, &bad_k),
            Err(PredictError::Invalid(InvalidInput {
                field: Field::K,
                ..
            }))
        ));
        // T_blind = 2000 + 10 + 100 ln 5 + 50 ln 3
        let t = predict(&m, Estimator::Blind, &o).unwrap();
        assert!((t - (2010.0 + 100.0 * 5.0_f64.ln() + 50.0 * 3.0_f64.ln())).abs() < 1e-9);
        // T_cache = 380 - 5 + ln(100001)
        let t = predict(&m, Estimator::Cache, &o).unwrap();
        assert!((t - (375.0 + 100_001.0_f64.ln())).abs() < 1e-9);
    }

    #[test]
    fn out_of_range_and_non_positive() {
        let mut m = model();
        let mut o = obs();
        o.n = Some(200_000.0);
        o.k = Some(0.0);
        assert_eq!(
            predict(&m, Estimator::Blind, &o),
            Err(PredictError::OutOfRange {
                reason: OutOfRange::N
            })
        );
        m.blind.intercept = -1e6;
        assert!(matches!(
            predict(&m, Estimator::Blind, &obs()),
            Err(PredictError::NonPositive { .. })
        ));
    }

    #[test]
    fn regression_target_is_ttft_minus_q() {
        let m = model();
        assert_eq!(
            regression_target(&m.q, Estimator::Blind, &obs(), 2500.0),
            Ok(500.0)
        );
        assert!(regression_target(&m.q, Estimator::Blind, &obs(), f64::NAN).is_err());
    }
}
