//! The two candidate models, the five rule variants and the two estimators.

use serde::{Deserialize, Serialize};

/// One of the two models Stage chooses between.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Model {
    /// The cheaper, faster model; the only proposal the rule may change.
    Efficient,
    /// The stronger model; a capable proposal is never changed.
    Capable,
}

impl Model {
    /// The name used in files and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Model::Efficient => "efficient",
            Model::Capable => "capable",
        }
    }
}

/// The five benchmark variants; one is selected per run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Variant {
    /// Baseline: follow Stage, no probes.
    Stage,
    /// `R_efficient >= r`.
    Count,
    /// `R_efficient >= r OR P_efficient > p` (either term may be disabled).
    CountPrefill,
    /// `T_blind(efficient) - T_blind(capable) > delta_blind` (K forced to 0).
    Blind,
    /// `T_cache(efficient) - T_cache(capable) > delta_cache`.
    Cache,
}

impl Variant {
    /// Every variant, in the proposal's order.
    pub const ALL: [Variant; 5] = [
        Variant::Stage,
        Variant::Count,
        Variant::CountPrefill,
        Variant::Blind,
        Variant::Cache,
    ];

    /// The name used in files, flags and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Variant::Stage => "stage",
            Variant::Count => "count",
            Variant::CountPrefill => "count_prefill",
            Variant::Blind => "blind",
            Variant::Cache => "cache",
        }
    }

    /// The estimator a TTFT variant uses (`None` for `stage`, `count`, `count_prefill`).
    pub fn estimator(self) -> Option<Estimator> {
        match self {
            Variant::Blind => Some(Estimator::Blind),
            Variant::Cache => Some(Estimator::Cache),
            _ => None,
        }
    }
}

impl std::fmt::Display for Variant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Variant {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Variant::ALL
            .into_iter()
            .find(|v| v.as_str() == s)
            .ok_or_else(|| {
                format!("unknown variant {s:?}: expected one of stage, count, count_prefill, blind, cache")
            })
    }
}

/// The two TTFT estimators.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Estimator {
    /// `T_blind = Q(N, 0) + b0 + bN zN + bR zR + bP zP`: the reusable prefix K is forced to 0.
    Blind,
    /// `T_cache = Q(N, K/N) + c0 + cN zN + cR zR + cP zP`.
    Cache,
}

impl Estimator {
    /// Both estimators.
    pub const ALL: [Estimator; 2] = [Estimator::Blind, Estimator::Cache];

    /// The name used in files and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Estimator::Blind => "blind",
            Estimator::Cache => "cache",
        }
    }
}
