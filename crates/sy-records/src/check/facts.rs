//! What a run directory's `manifest.json` says about the end of the run, for `loads_zero_at_end`.

use super::*;

/// What the manifest says about the end of the run (`None`: no manifest).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunFacts {
    pub loads_zero_at_end: Option<bool>,
    pub outstanding_reservations: usize,
    pub complete: Option<bool>,
}

impl RunFacts {
    /// The facts of a `manifest.json` (read loosely: only these fields).
    pub fn from_manifest(v: &serde_json::Value) -> Self {
        Self {
            loads_zero_at_end: v
                .get("loads_zero_at_end")
                .and_then(serde_json::Value::as_bool),
            outstanding_reservations: v
                .get("outstanding_reservations")
                .and_then(serde_json::Value::as_array)
                .map_or(0, Vec::len),
            complete: v.get("complete").and_then(serde_json::Value::as_bool),
        }
    }

    /// The facts of several runs judged together: loads left or reservations outstanding in
    /// any of them count; `None` where one of them does not say.
    pub fn and(&self, other: &RunFacts) -> RunFacts {
        RunFacts {
            loads_zero_at_end: match (self.loads_zero_at_end, other.loads_zero_at_end) {
                (Some(x), Some(y)) => Some(x && y),
                _ => None,
            },
            outstanding_reservations: self.outstanding_reservations
                + other.outstanding_reservations,
            complete: match (self.complete, other.complete) {
                (Some(x), Some(y)) => Some(x && y),
                _ => None,
            },
        }
    }
}
