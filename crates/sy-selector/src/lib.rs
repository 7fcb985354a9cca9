//! # sy-selector: the runtime routing rule and its frozen bundle
//!
//! StageRouter proposes an *efficient* or a *capable* model for every agent turn. This crate holds
//! the rule that may turn an efficient proposal into capable when Dynamo's per-worker
//! observations say the capable pool would answer sooner — and it holds the **single definition**
//! of every formula that rule uses:
//!
//! - [`Observation`] and what makes it valid ([`Observation::valid_n`], …: non-finite, negative,
//!   K > N, N = 0, missing/zero/10,000,000-sentinel prefill capacity are all invalid);
//! - the Q table [`QTable`] (bilinear interpolation, [`OutOfRange`] outside the grid or in a cell
//!   with a missing corner — never clamped, never extrapolated);
//! - the standardiser [`Standardiser`] (`z = (log1p(x) − mean) / std`) and the load correction
//!   [`LoadCorrection`];
//! - the estimators `T_blind` / `T_cache` ([`predict`], [`q_baseline`]);
//! - guard G ([`guard`]), the triggers ([`r_trigger`], [`p_trigger`], [`count_trigger`],
//!   [`ttft_trigger`]) and [`decide`], which composes them ([`TtftTurn`]: a TTFT variant's
//!   decision settled once up to the fitted corrections, for offline replays that decide the
//!   same turn under many fits);
//! - the quantile the margins use ([`quantile_sorted`]);
//! - the frozen [`Bundle`] with its SHA-256 content hash;
//! - the live path a host links ([`LiveRule::route`] over an [`Observer`] the host implements):
//!   observe both candidates, decide, keep Stage's choice on any failure.
//!
//! ## Why a separate crate
//!
//! Production (Switchyard's `libsy`) links this crate and calls [`decide`] on every agent turn;
//! the offline tools (`sy-fit`, `sy-margin`, `sy-select`) call the very same functions to fit,
//! to compute margins and to evaluate variants. Offline evaluation and production therefore
//! cannot disagree about a formula. To be linkable everywhere the crate is small: its only
//! dependencies are `serde`, `serde_json`, `sha2`, `hex` and `thiserror`.
//!
//! ## No I/O, no allocation, no state per decision
//!
//! [`decide`] is a pure function of the parameters, the variant and one [`DecisionInput`]: it
//! reads no clock (the caller passes `now_ms`), does no I/O, keeps no history and performs no heap
//! allocation (checked by a test with a counting allocator). The [`Decision`] it returns is a
//! `Copy` value that serialises to JSON for per-request logs. The only file access in the crate is
//! the convenience [`Bundle::from_path`].
//!
//! Times (predictions, margins, ages) are milliseconds throughout.
//!
//! ```
//! use sy_selector::{Bundle, DecisionInput, Model};
//! # fn run(bundle_json: &str, observation_json: &str) -> Result<(), Box<dyn std::error::Error>> {
//! let bundle = Bundle::load(bundle_json)?;          // checks version, fields and hash
//! let input: DecisionInput = serde_json::from_str(observation_json)?;
//! let decision = bundle.decide(&input);
//! println!("{}", serde_json::to_string(&decision)?);
//! # let _ = Model::Capable; Ok(()) }
//! ```

mod bundle;
mod estimator;
mod live;
mod model;
mod observation;
mod qtable;
mod quantile;
mod rule;
mod ttft_turn;

pub use bundle::{
    BUNDLE_READABLE_VERSIONS, BUNDLE_SCHEMA_VERSION, Bundle, BundleError, InputFile,
    MAX_PLAUSIBLE_FEATURE, MAX_PLAUSIBLE_MS, ParamsError, Provenance,
};
pub use estimator::{
    EstimatorInputs, FeatureMoments, LoadCorrection, ModelEstimators, PredictError, RawFeatures,
    Standardiser, StandardiserError, log1p, predict, predict_from_baseline, predict_from_inputs,
    predict_prepared, q_baseline, raw_features, regression_target, target_from_baseline,
};
pub use live::{Candidates, LiveRule, Observer, RouteFailure, Routed};
pub use model::{Estimator, Model, Variant};
pub use observation::{
    Field, InvalidInput, Needs, Observation, PREFILL_CAPACITY_SENTINEL, Problem, Recorded,
};
pub use qtable::{OutOfRange, QTable, QTableError};
pub use quantile::{quantile_by_rank, quantile_sorted, quantile_unsorted};
pub use rule::{
    CandidateFeatures, Decision, DecisionInput, GuardLimits, GuardPass, GuardReadings, Margins,
    Reason, RequiredInputs, RuleParams, Thresholds, TriggerReads, check_guard_limits, count_guards,
    count_trigger, decide, decide_prepared, guard, p_trigger, r_trigger, read_guard_inputs,
    required_inputs, thresholds_read, trigger_enabled, ttft_trigger,
};
pub use ttft_turn::{TtftGround, TtftTurn};

/// `RuleParams` under the name the interfaces also use.
pub type Selector = RuleParams;
