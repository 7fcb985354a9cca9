//! The per-probe record.

use serde::{Deserialize, Serialize};
/// Defined with the run directory's layout (`sy_rundir::layout`).
pub use sy_rundir::RECORD_SCHEMA_VERSION;

/// Which phase of a plan produced a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// No competing requests: feeds only the no-load Q tables.
    Qgrid,
    /// Controlled background load: feeds the load corrections, margins and threshold search.
    Load,
}

impl Phase {
    /// The name used in files.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Qgrid => "qgrid",
            Phase::Load => "load",
        }
    }
}

/// Which candidate of the pair a record measures: the runtime's own [`Model`] (one enum for
/// both; files spell it `efficient` / `capable`).
pub use sy_selector::Model;

/// Whether the probe produced a TTFT.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Ok,
    Error,
}

/// Why a probe failed: one classification from the HTTP call to the record
/// (`sy_wire::failure`).
pub use sy_wire::ErrorClass;

/// The observation of one candidate: the adapter's type, embedded in the record.
pub use sy_wire::ObservedFields;

/// The background load held steady while a probe runs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Background {
    /// Number of background prefill-contention requests (large uncached prompts).
    pub prefill_requests: u32,
    /// Prompt tokens of each background prefill request.
    pub prefill_prompt_tokens: u64,
    /// Number of background decode-contention requests (long generations).
    pub decode_requests: u32,
    /// Output tokens of each background decode request.
    pub decode_output_tokens: u64,
    /// `"short"` or `"long"` when the condition belongs to an equal-count short-vs-long pair.
    pub decode_length: Option<String>,
    /// Whether the capable destination was made busy by extra background requests.
    pub busy_capable: bool,
    /// Which model(s) the background load targets: `"efficient"`, `"capable"` or `"both"`.
    pub target: String,
}

/// One candidate of one paired probe, as observed and as measured.
///
/// Observation fields are `Option`: a value the server did not give stays `None` (never a
/// made-up zero), and the runtime guard treats it as invalid.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Record {
    pub schema_version: u32,
    /// Identifies the run (one run directory); condition ids are namespaced by it when merging.
    pub run_id: String,
    /// The workload condition; all its repeats and both candidates share it (the split unit).
    pub condition_id: String,
    pub phase: Phase,
    pub repeat: u32,
    /// Shared by the efficient and the capable record of one paired probe.
    pub probe_id: String,
    pub role: Model,
    /// The served model name.
    pub model: String,

    // --- the plan ---
    /// Planned prompt tokens.
    pub planned_n: u64,
    /// Planned cached fraction in [0, 1] (1: a full repeat of the primed prompt).
    pub planned_f: f64,
    pub background: Background,

    // --- the observation, exactly as the runtime would take it ---
    /// The candidate's observation, as the Dynamo adapter produced it (flattened: its fields
    /// are the record's `n`, `k`, `r`, … members and columns). Serde buffers a flattened
    /// struct's members, so parsing one JSONL line costs about 1.7× a flat struct's (5.4 against
    /// 3.1 µs for a record of this shape, measured side by side on 2 Dec 2026); Parquet, what the
    /// calibration tools read, is decoded column by column and does not go through serde.
    #[serde(flatten)]
    pub observed: ObservedFields,

    // --- the measurement ---
    /// Wall-clock time the probe was sent, milliseconds since the Unix epoch.
    pub sent_at_unix_ms: f64,
    /// The worker the reservation (`select_and_reserve`) actually booked and the request was
    /// pinned to. Distinct from `worker_id`, which is the advisory pick of the query-only
    /// observation and may differ when load moved between observing and reserving. `None` when
    /// no reservation was made (e.g. the reservation itself failed); absent in files written
    /// before this field existed.
    #[serde(default)]
    pub reserved_worker_id: Option<u64>,
    /// The data-parallel rank the reservation booked (see `reserved_worker_id`).
    #[serde(default)]
    pub reserved_dp_rank: Option<u32>,
    /// The worker the query-only advisory `/select` picked when the observation was taken. A
    /// host that observes, decides and then reserves meets the same gap between the two.
    #[serde(default)]
    pub advisory_worker_id: Option<u64>,
    /// The advisory pick's data-parallel rank.
    #[serde(default)]
    pub advisory_dp_rank: Option<u32>,
    /// K, R and P of the advisory pick (equal to `k`, `r`, `p` unless `pick_differs`).
    #[serde(default)]
    pub advisory_k: Option<u64>,
    #[serde(default)]
    pub advisory_r: Option<u64>,
    #[serde(default)]
    pub advisory_p: Option<f64>,
    /// Whether the advisory pick (worker, rank) differs from the reserved one; `None` when no
    /// reservation was made (or in files written before this field existed).
    #[serde(default)]
    pub pick_differs: Option<bool>,
    /// The worker that actually served the probe, as the frontend reported it (the `worker_id`
    /// extra field of the stream); `None` when it reported none. Compare with
    /// `reserved_worker_id`.
    pub served_worker_id: Option<u64>,
    /// The data-parallel rank that served, as the frontend reported it.
    #[serde(default)]
    pub served_dp_rank: Option<u32>,
    /// Client-measured time to the first non-empty token (monotonic clock).
    pub ttft_ms: Option<f64>,
    /// Server-reported TTFT (`nvext` timing), when present.
    pub server_ttft_ms: Option<f64>,
    /// `ttft_ms − server_ttft_ms`: what the client and the network add (about a millisecond at
    /// no load on loopback); `None` unless both are known.
    #[serde(default)]
    pub client_server_gap_ms: Option<f64>,
    /// Client-measured end-to-end latency.
    pub e2e_ms: Option<f64>,
    pub prompt_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    /// `usage.prompt_tokens_details.cached_tokens`: the worker's real cache hit.
    pub cached_tokens: Option<u64>,
    pub status: Status,
    pub error_class: Option<ErrorClass>,
    pub error_message: Option<String>,
    /// Attempts made (1 = no retry).
    pub attempts: u32,
}

impl Record {
    /// The unit that `--resume` skips when complete: (condition, repeat).
    pub fn unit(&self) -> (&str, u32) {
        (&self.condition_id, self.repeat)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_worker_fields_default_when_absent() {
        let rec = crate::synth::template_record();
        let mut value = serde_json::to_value(&rec).unwrap();
        assert_eq!(value["reserved_worker_id"], serde_json::json!(1));
        let obj = value.as_object_mut().unwrap();
        obj.remove("reserved_worker_id");
        obj.remove("reserved_dp_rank");
        let back: Record = serde_json::from_value(value).unwrap();
        assert_eq!(back.reserved_worker_id, None);
        assert_eq!(back.reserved_dp_rank, None);
        assert_eq!(back.served_worker_id, rec.served_worker_id);
    }
}
