//! The three splits of a run's load-phase conditions and their sizes: what `splits.json` and
//! `fit.json` name. The split rule (which condition goes where) and the split table are
//! `sy-records`'.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Which use a condition's measurements are reserved for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Split {
    /// Standardiser statistics and ridge load corrections (`sy-fit`).
    Fit,
    /// Error margins delta_blind / delta_cache (`sy-margin`).
    Uncertainty,
    /// Threshold search and the choice of rule and estimator (`sy-select`).
    Selection,
}

impl Split {
    pub const ALL: [Split; 3] = [Split::Fit, Split::Uncertainty, Split::Selection];

    pub fn as_str(self) -> &'static str {
        match self {
            Split::Fit => "fit",
            Split::Uncertainty => "uncertainty",
            Split::Selection => "selection",
        }
    }
}

impl fmt::Display for Split {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Fractions of conditions per split; non-negative, summing to 1.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SplitFractions {
    pub fit: f64,
    pub uncertainty: f64,
    pub selection: f64,
}

impl Default for SplitFractions {
    /// 60 / 20 / 20.
    fn default() -> Self {
        SplitFractions {
            fit: 0.6,
            uncertainty: 0.2,
            selection: 0.2,
        }
    }
}

/// Split fractions that cannot be used (`--split` or `splits.json`'s `fractions`).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FractionsError {
    #[error("split fractions must be finite and ≥ 0, got {fit},{uncertainty},{selection}")]
    Negative {
        fit: f64,
        uncertainty: f64,
        selection: f64,
    },
    #[error("split fractions must sum to 1, got {fit}+{uncertainty}+{selection} = {sum}")]
    Sum {
        fit: f64,
        uncertainty: f64,
        selection: f64,
        sum: f64,
    },
    #[error("the fit fraction must be > 0")]
    NoFit,
    #[error("expected three fractions FIT,UNCERTAINTY,SELECTION (e.g. 0.6,0.2,0.2), got {0:?}")]
    Count(String),
    #[error("split fraction {0:?} is not a number")]
    NotNumber(String),
}

impl SplitFractions {
    /// Checks the fractions: finite, ≥ 0, summing to 1 (within 1e-9), fit > 0.
    pub fn new(fit: f64, uncertainty: f64, selection: f64) -> Result<Self, FractionsError> {
        let all = [fit, uncertainty, selection];
        if all.iter().any(|v| !v.is_finite() || *v < 0.0) {
            return Err(FractionsError::Negative {
                fit,
                uncertainty,
                selection,
            });
        }
        let sum: f64 = all.iter().sum();
        if (sum - 1.0).abs() > 1e-9 {
            return Err(FractionsError::Sum {
                fit,
                uncertainty,
                selection,
                sum,
            });
        }
        if fit == 0.0 {
            return Err(FractionsError::NoFit);
        }
        Ok(SplitFractions {
            fit,
            uncertainty,
            selection,
        })
    }

    /// The split of a point `u` in `[0, 1)`.
    #[inline]
    pub fn split_at(&self, u: f64) -> Split {
        if u < self.fit {
            Split::Fit
        } else if u < self.fit + self.uncertainty {
            Split::Uncertainty
        } else {
            Split::Selection
        }
    }
}

impl FromStr for SplitFractions {
    type Err = FractionsError;

    /// `"0.6,0.2,0.2"` or `"60,20,20"` / `"60/20/20"` (percentages when the sum is 100).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let parts: Vec<&str> = s.split([',', '/', ':']).map(str::trim).collect();
        if parts.len() != 3 {
            return Err(FractionsError::Count(s.to_string()));
        }
        let mut v = [0.0; 3];
        for (slot, p) in v.iter_mut().zip(&parts) {
            *slot = p
                .parse::<f64>()
                .map_err(|_| FractionsError::NotNumber(p.to_string()))?;
        }
        let sum: f64 = v.iter().sum();
        if (sum - 100.0).abs() < 1e-6 {
            v.iter_mut().for_each(|x| *x /= 100.0);
        }
        SplitFractions::new(v[0], v[1], v[2])
    }
}

/// Conditions per split.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SplitCounts {
    pub fit: usize,
    pub uncertainty: usize,
    pub selection: usize,
}

impl SplitCounts {
    pub fn get(&self, s: Split) -> usize {
        match s {
            Split::Fit => self.fit,
            Split::Uncertainty => self.uncertainty,
            Split::Selection => self.selection,
        }
    }
}
