//! Stopping rules that stay valid when the data are looked at again and again: an anytime-valid
//! confidence sequence for a mean, and the verdict an adaptive collection stops on.
//!
//! A fixed-sample 95 % interval, recomputed after every round and acted on the first time it
//! excludes zero, is wrong far more often than 5 %: every look is another chance for noise to
//! cross the line. A *confidence sequence* holds at every look at once:
//! `P(∃ t: μ ∉ C_t) ≤ α`, so a collection may stop at any round, for any reason, and the interval
//! at the stop still has its level.
//!
//! **The method.** The asymptotic confidence sequence of Waudby-Smith, Arbour, Sinha, Kennedy
//! and Ramdas, "Time-uniform central limit theory and asymptotic confidence sequences", *Annals
//! of Statistics* 52(6), 2024 (arXiv:2103.06476): Robbins' normal-mixture boundary with the
//! sample standard deviation plugged in,
//!
//! ```text
//! C_t = μ̂_t ± σ̂_t · √( 2 (t ρ² + 1) / (t² ρ²) · ln( √(t ρ² + 1) / α ) )
//! ρ²  = ( −2 ln α + ln(−2 ln α + 1) ) / t*
//! ```
//!
//! where t is the number of observations so far, μ̂_t and σ̂_t their mean and standard
//! deviation, and t* the sample size at which the boundary is tightest (the design size: the
//! number of conditions the plan expects to need; any t* > 0 keeps the guarantee, it only moves
//! where the sequence is narrowest). For Gaussian observations of known variance the boundary
//! is exact (Ville's inequality on the mixture martingale); with σ̂ plugged in it holds
//! asymptotically, and observations with a varying conditional variance (e.g. conditions
//! measured with more or fewer repeats decided from earlier rounds) are covered by the
//! martingale version of the same theorem. How well it holds at a calibration's size is
//! measured, not assumed: `benches/sequential_study.rs` (`scripts/adaptive-study.sh`).
//!
//! **The verdict** ([`verdict`]): the change versus Stage is a *gain* when the whole sequence
//! lies below zero, a *loss* when above, *no useful gain* when it lies within ±ε, otherwise the
//! question is *open*. No verdict is given before [`SequentialConfig::min_n`] observations: the
//! plug-in variance of a handful of conditions, most of them where the rule does not act (a
//! change of exactly 0), is not a variance.

use serde::{Deserialize, Serialize};

/// A confidence sequence's settings.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SequentialConfig {
    /// Error rate over every look together, in (0, 1).
    pub alpha: f64,
    /// t*: the number of observations at which the boundary is tightest (> 0).
    pub design_n: f64,
    /// No verdict before this many observations (≥ 2).
    pub min_n: u64,
}

impl Default for SequentialConfig {
    fn default() -> Self {
        SequentialConfig {
            alpha: 0.05,
            design_n: 60.0,
            min_n: 20,
        }
    }
}

/// Input a confidence sequence cannot be computed from; the message names the value.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SequentialError {
    #[error("alpha must be in (0, 1), got {0}")]
    Alpha(f64),
    #[error("the design size t* must be finite and > 0, got {0}")]
    DesignN(f64),
    #[error("at least 2 observations are needed, got {0}")]
    TooFew(usize),
    #[error("observation {index} is not finite ({value})")]
    NotFinite { index: usize, value: f64 },
    #[error("epsilon must be finite and ≥ 0, got {0}")]
    Epsilon(f64),
}

impl SequentialConfig {
    /// Checks the settings.
    pub fn validate(&self) -> Result<(), SequentialError> {
        if !(self.alpha > 0.0 && self.alpha < 1.0) {
            return Err(SequentialError::Alpha(self.alpha));
        }
        if !(self.design_n.is_finite() && self.design_n > 0.0) {
            return Err(SequentialError::DesignN(self.design_n));
        }
        Ok(())
    }

    /// ρ of the normal mixture, tightest at `design_n` observations.
    pub fn rho(&self) -> f64 {
        let l = -2.0 * self.alpha.ln();
        ((l + (l + 1.0).ln()) / self.design_n).sqrt()
    }

    /// The boundary's multiplier of σ̂ after `t` observations (the half-width for σ̂ = 1).
    pub fn radius(&self, t: u64) -> f64 {
        let t = t as f64;
        let rho2 = self.rho().powi(2);
        let v = t * rho2 + 1.0;
        (2.0 * v / (t * t * rho2) * (v.sqrt() / self.alpha).ln()).sqrt()
    }
}

/// The confidence sequence after `n` observations.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SequenceInterval {
    pub n: u64,
    pub mean: f64,
    /// The sample standard deviation (n − 1).
    pub sd: f64,
    pub lo: f64,
    pub hi: f64,
    pub alpha: f64,
}

impl SequenceInterval {
    pub fn contains(&self, x: f64) -> bool {
        self.lo <= x && x <= self.hi
    }
}

/// The confidence sequence of the mean of `values` (in arrival order; only their mean and
/// standard deviation enter).
pub fn confidence_sequence(
    values: &[f64],
    cfg: &SequentialConfig,
) -> Result<SequenceInterval, SequentialError> {
    cfg.validate()?;
    if values.len() < 2 {
        return Err(SequentialError::TooFew(values.len()));
    }
    if let Some((index, &value)) = values.iter().enumerate().find(|(_, v)| !v.is_finite()) {
        return Err(SequentialError::NotFinite { index, value });
    }
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    let ss: f64 = values.iter().map(|v| (v - mean).powi(2)).sum();
    let sd = (ss / (n - 1.0)).sqrt();
    let half = sd * cfg.radius(values.len() as u64);
    Ok(SequenceInterval {
        n: values.len() as u64,
        mean,
        sd,
        lo: mean - half,
        hi: mean + half,
        alpha: cfg.alpha,
    })
}

/// What the sequence says about a change versus Stage (negative = faster than Stage).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The whole sequence lies below zero: the variant is faster than Stage.
    Gain,
    /// The whole sequence lies above zero: the variant is slower than Stage.
    Loss,
    /// The whole sequence lies within ±ε: no useful gain (an answer, not a failure).
    NoUsefulGain,
    /// None of these yet (or too few observations).
    Open,
}

impl Verdict {
    /// Whether the collection may stop on this verdict.
    pub fn is_decided(self) -> bool {
        self != Verdict::Open
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Gain => "gain",
            Verdict::Loss => "loss",
            Verdict::NoUsefulGain => "no_useful_gain",
            Verdict::Open => "open",
        }
    }
}

/// The verdict of `cs` with the no-useful-gain band ±`epsilon` (see the module docs).
pub fn verdict(
    cs: &SequenceInterval,
    epsilon: f64,
    cfg: &SequentialConfig,
) -> Result<Verdict, SequentialError> {
    if !(epsilon.is_finite() && epsilon >= 0.0) {
        return Err(SequentialError::Epsilon(epsilon));
    }
    Ok(if cs.n < cfg.min_n.max(2) {
        Verdict::Open
    } else if cs.hi < 0.0 {
        Verdict::Gain
    } else if cs.lo > 0.0 {
        Verdict::Loss
    } else if cs.lo >= -epsilon && cs.hi <= epsilon {
        Verdict::NoUsefulGain
    } else {
        Verdict::Open
    })
}

/// The verdict of `change` (the judged rule's change versus Stage), guarded against a rule that
/// never acted. A rule fitted on the first rounds may have too little data to clear its margin:
/// it then keeps Stage's choice everywhere, its change is exactly zero in every condition, the
/// plug-in standard deviation is zero and the sequence has width zero — "within ±ε" although it
/// says nothing about the rules later rounds will fit. So when `change.sd` is zero a *no useful
/// gain* verdict also needs `attainable` — the sequence of the per-condition oracle change (the
/// mean over a condition's pairs of `min(0, TTFT_cap − TTFT_eff)`, the most any rule choosing
/// per probe could gain) — to end above −ε; otherwise the verdict is *open*. A rule that acted
/// somewhere is judged by its own sequence ([`verdict`]). Gain and loss are `change`'s alone,
/// and the guard only makes *no useful gain* rarer, so every verdict keeps `change`'s level.
pub fn verdict_bounded(
    change: &SequenceInterval,
    attainable: Option<&SequenceInterval>,
    epsilon: f64,
    cfg: &SequentialConfig,
) -> Result<Verdict, SequentialError> {
    let v = verdict(change, epsilon, cfg)?;
    Ok(match (v, attainable) {
        (Verdict::NoUsefulGain, _) if change.sd > 0.0 => v,
        (Verdict::NoUsefulGain, Some(a)) if a.n >= cfg.min_n.max(2) && a.lo >= -epsilon => v,
        (Verdict::NoUsefulGain, _) => Verdict::Open,
        (v, _) => v,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_boundary_is_robbins_normal_mixture() {
        // At t = t* with α = 0.05: ρ² t* = 5.99 + ln 6.99 ≈ 7.935; the radius in units of
        // σ/√t is √(2·8.935/7.935 · ln(√8.935/0.05)) ≈ 3.04 — wider than the fixed 1.96, the
        // price of looking at every round.
        let cfg = SequentialConfig {
            alpha: 0.05,
            design_n: 100.0,
            min_n: 2,
        };
        let r = cfg.radius(100) * 10.0;
        assert!((r - 3.04).abs() < 0.01, "{r}");
        // Tightest (relative to σ/√t) near t*: the scaled radius at t* is below those at t*/10
        // and 10 t*.
        let scaled = |t: u64| cfg.radius(t) * (t as f64).sqrt();
        assert!(scaled(100) < scaled(10) && scaled(100) < scaled(1000));
    }

    #[test]
    fn verdicts() {
        let cfg = SequentialConfig {
            min_n: 3,
            ..SequentialConfig::default()
        };
        let cs = |lo: f64, hi: f64, n: u64| SequenceInterval {
            n,
            mean: (lo + hi) / 2.0,
            sd: 1.0,
            lo,
            hi,
            alpha: 0.05,
        };
        let v = |c: SequenceInterval| verdict(&c, 2.0, &cfg).unwrap();
        assert_eq!(v(cs(-5.0, -1.0, 10)), Verdict::Gain);
        assert_eq!(v(cs(1.0, 5.0, 10)), Verdict::Loss);
        assert_eq!(v(cs(-1.5, 1.9, 10)), Verdict::NoUsefulGain);
        assert_eq!(v(cs(-3.0, 1.0, 10)), Verdict::Open);
        assert_eq!(v(cs(-5.0, -1.0, 2)), Verdict::Open, "before min_n");
        assert!(verdict(&cs(0.0, 1.0, 10), f64::NAN, &cfg).is_err());
    }

    #[test]
    fn bad_input_is_named() {
        let cfg = SequentialConfig::default();
        assert_eq!(
            confidence_sequence(&[1.0], &cfg),
            Err(SequentialError::TooFew(1))
        );
        let e = confidence_sequence(&[1.0, f64::INFINITY, 2.0], &cfg).unwrap_err();
        assert_eq!(e.to_string(), "observation 1 is not finite (inf)");
        for alpha in [0.0, 1.0, f64::NAN] {
            let c = SequentialConfig { alpha, ..cfg };
            assert!(matches!(
                confidence_sequence(&[1.0, 2.0], &c),
                Err(SequentialError::Alpha(_))
            ));
        }
        let c = SequentialConfig {
            design_n: 0.0,
            ..cfg
        };
        assert!(matches!(
            confidence_sequence(&[1.0, 2.0], &c),
            Err(SequentialError::DesignN(_))
        ));
    }

    proptest! {
        /// Any finite observations give a finite sequence around their mean, and shifting the
        /// data shifts the sequence.
        #[test]
        fn sequence_is_finite_centred_and_monotone(
            values in proptest::collection::vec(-1e6f64..1e6, 2..200),
            design_n in 1.0f64..1e4,
            shift in -1e3f64..1e3,
        ) {
            let cfg = SequentialConfig { alpha: 0.05, design_n, min_n: 2 };
            let cs = confidence_sequence(&values, &cfg).unwrap();
            prop_assert!(cs.lo.is_finite() && cs.hi.is_finite());
            prop_assert!(cs.lo <= cs.mean && cs.mean <= cs.hi);
            let moved: Vec<f64> = values.iter().map(|v| v + shift).collect();
            let m = confidence_sequence(&moved, &cfg).unwrap();
            let tol = 1e-6 * (1.0 + cs.hi.abs() + cs.lo.abs() + shift.abs());
            prop_assert!((m.lo - (cs.lo + shift)).abs() < tol);
            prop_assert!((m.hi - (cs.hi + shift)).abs() < tol);
        }

        /// The radius is positive and finite for every t ≥ 1, α in (0, 1) and t* > 0, shrinks
        /// as observations accumulate, and is never narrower than the fixed-sample normal
        /// interval at the same t (a boundary valid at every look must hold at each one).
        #[test]
        fn radius_is_positive_shrinks_and_exceeds_the_fixed_interval(
            alpha in 0.001f64..0.5,
            design_n in 0.5f64..1e5,
            t in 1u64..100_000,
        ) {
            let cfg = SequentialConfig { alpha, design_n, min_n: 2 };
            let (a, b) = (cfg.radius(t), cfg.radius(t + 1));
            prop_assert!(a.is_finite() && a > 0.0);
            prop_assert!(b < a);
            let z = crate::binomial::normal_quantile(1.0 - alpha / 2.0);
            prop_assert!(a * (t as f64).sqrt() >= z, "{} < {z}", a * (t as f64).sqrt());
        }

        /// The verdict never says gain or loss for a sequence that contains zero, and never
        /// says no useful gain for one that reaches beyond ±ε.
        #[test]
        fn verdict_agrees_with_the_interval(
            lo in -100f64..100.0, width in 0f64..100.0, eps in 0f64..50.0, n in 2u64..500,
        ) {
            let cfg = SequentialConfig { min_n: 2, ..SequentialConfig::default() };
            let cs = SequenceInterval { n, mean: lo + width / 2.0, sd: 1.0, lo, hi: lo + width, alpha: 0.05 };
            match verdict(&cs, eps, &cfg).unwrap() {
                Verdict::Gain => prop_assert!(cs.hi < 0.0),
                Verdict::Loss => prop_assert!(cs.lo > 0.0),
                Verdict::NoUsefulGain => prop_assert!(cs.lo >= -eps && cs.hi <= eps && cs.contains(0.0)),
                Verdict::Open => prop_assert!(cs.contains(0.0) && (cs.lo < -eps || cs.hi > eps)),
            }
        }
    }

    #[test]
    fn a_rule_that_never_acted_needs_the_attainable_gain_within_epsilon() {
        let cfg = SequentialConfig {
            alpha: 0.05,
            design_n: 20.0,
            min_n: 10,
        };
        // A rule that never acted: every change exactly 0, a sequence of width 0.
        let zero = confidence_sequence(&[0.0; 20], &cfg).unwrap();
        assert_eq!(verdict(&zero, 2.0, &cfg).unwrap(), Verdict::NoUsefulGain);
        // Where switching would have gained ~10 ms in a third of the conditions: open.
        let big: Vec<f64> = (0..20)
            .map(|i| if i % 3 == 0 { -10.0 } else { 0.0 })
            .collect();
        let big = confidence_sequence(&big, &cfg).unwrap();
        assert_eq!(
            verdict_bounded(&zero, Some(&big), 2.0, &cfg).unwrap(),
            Verdict::Open
        );
        assert_eq!(
            verdict_bounded(&zero, None, 2.0, &cfg).unwrap(),
            Verdict::Open
        );
        // Where nothing could gain (the capable model slower everywhere): no useful gain.
        let none = confidence_sequence(&[0.0; 20], &cfg).unwrap();
        assert_eq!(
            verdict_bounded(&zero, Some(&none), 2.0, &cfg).unwrap(),
            Verdict::NoUsefulGain
        );
        // A rule that acted somewhere is judged by its own sequence.
        let acted: Vec<f64> = (0..20)
            .map(|i| if i % 5 == 0 { -0.5 } else { 0.0 })
            .collect();
        let acted = confidence_sequence(&acted, &cfg).unwrap();
        assert_eq!(
            verdict_bounded(&acted, Some(&big), 2.0, &cfg).unwrap(),
            Verdict::NoUsefulGain
        );
        // Gain and loss are the change's alone.
        let gain = confidence_sequence(
            &[
                -10.0, -11.0, -9.0, -10.5, -9.5, -10.0, -10.2, -9.8, -10.1, -9.9,
            ],
            &cfg,
        )
        .unwrap();
        assert_eq!(
            verdict_bounded(&gain, Some(&big), 2.0, &cfg).unwrap(),
            Verdict::Gain
        );
    }
}
