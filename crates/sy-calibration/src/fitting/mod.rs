//! Fitting: Q tables, standardisers and ridge load corrections from calibration records (`sy-fit`
//! writes them; the stability seeds of `sy-select` refit them per split seed)
//!
//! The proposal's estimators are `T = Q_m(N, f) + c0 + cN zN + cR zR + cP zP`. This module fits
//! their parameters offline, per model:
//!
//! 1. the **Q table** — median no-load TTFT per (prompt length, cached fraction) from the Q-grid
//!    records ([`qbuild`]);
//! 2. the **standardiser** — mean and std of `log1p` N, R, P on the **fit split** only;
//! 3. the **load correction** of each estimator — a ridge regression of `TTFT − Q(N, f)` (f = 0
//!    for cache-blind) on the standardised features, intercept unpenalised, alpha chosen by grouped
//!    k-fold cross-validation inside the fit split ([`fit`](mod@fit)).
//!
//! Every formula (features, Q lookup, targets) is sy-selector's; this module only chooses rows
//! and solves. The ridge ([`ridge`]) is a closed-form solve on sufficient statistics, so the whole CV
//! curve costs one pass over the rows, and is also a linfa estimator (`Fit` / `Predict`).
//!
//! The result is `fit.json` ([`sy_rundir::artifact::fit::FitFile`]), which embeds sy-selector's `ModelEstimators` per model
//! for `sy-margin` and `sy-select`.

mod condition_sums;
mod error;
pub mod fit;
pub mod qbuild;
pub mod ridge;

pub use condition_sums::{ConditionSumsTable, KnownRow, KnownRows};
pub use fit::{AlphaGridError, FitConfig, FitError, FitResult, NoRowsCause, fit};
pub use ridge::{FittedRidge, Ridge, RidgeError, SuffStats};
