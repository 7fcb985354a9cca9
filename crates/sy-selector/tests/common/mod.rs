//! Shared fixture: plausible rule parameters and the proposal's example observation.
//! Also used by `examples/example_bundle.rs`, which writes `data/examples/*.json`.
#![allow(dead_code)]

#[cfg(test)]
pub mod strategies;

use std::collections::BTreeMap;

use sy_selector::{
    Bundle, DecisionInput, GuardLimits, InputFile, LoadCorrection, Margins, Model, ModelEstimators,
    Observation, Provenance, QTable, Recorded, RuleParams, Standardiser, Thresholds, Variant,
};

const N_AXIS: [f64; 5] = [1_000.0, 8_000.0, 32_000.0, 64_000.0, 128_000.0];
const F_AXIS: [f64; 6] = [0.0, 0.25, 0.5, 0.75, 0.9, 1.0];

/// A no-load TTFT table `fixed + uncached · N(1−f) + cached · N f` (ms), optionally with one
/// unmeasured cell.
fn q_table(fixed: f64, uncached: f64, cached: f64, missing: Option<(usize, usize)>) -> QTable {
    let mut values = Vec::new();
    for (i, n) in N_AXIS.iter().enumerate() {
        for (j, f) in F_AXIS.iter().enumerate() {
            let v = fixed + uncached * n * (1.0 - f) + cached * n * f;
            values.push(if missing == Some((i, j)) { f64::NAN } else { v });
        }
    }
    match QTable::new(N_AXIS.to_vec(), F_AXIS.to_vec(), values) {
        Ok(q) => q,
        Err(e) => unreachable!("fixture Q table is valid: {e}"),
    }
}

pub fn params() -> RuleParams {
    RuleParams {
        efficient: ModelEstimators {
            q: q_table(25.0, 0.012, 0.0015, None),
            standardiser: Standardiser {
                mean: [9.9, 1.2, 0.45],
                std: [1.4, 0.8, 0.5],
            },
            blind: LoadCorrection {
                intercept: 180.0,
                coef: [40.0, 150.0, 260.0],
            },
            cache: LoadCorrection {
                intercept: 120.0,
                coef: [15.0, 140.0, 240.0],
            },
        },
        capable: ModelEstimators {
            q: q_table(60.0, 0.03, 0.003, Some((4, 5))),
            standardiser: Standardiser {
                mean: [9.9, 0.9, 0.3],
                std: [1.4, 0.7, 0.45],
            },
            blind: LoadCorrection {
                intercept: 90.0,
                coef: [60.0, 120.0, 300.0],
            },
            cache: LoadCorrection {
                intercept: 70.0,
                coef: [25.0, 110.0, 280.0],
            },
        },
        thresholds: Thresholds {
            r: Some(4.0),
            p: Some(1.5),
        },
        margins: Margins {
            blind: 250.0,
            cache: 120.0,
        },
        limits: GuardLimits {
            max_age_ms: 500.0,
            destination_limit: 8.0,
            local_limit: 4,
        },
    }
}

pub fn provenance() -> Provenance {
    let mut tool_versions = BTreeMap::new();
    for tool in ["sy-collect", "sy-fit", "sy-margin", "sy-select"] {
        tool_versions.insert(tool.to_string(), "0.1.0".to_string());
    }
    Provenance {
        tool_versions,
        input_files: vec![
            InputFile {
                path: "runs/example/records.parquet".to_string(),
                sha256: "3b7a0d1c5e9f24f1a8f0c6d2b4e6a8c0d2e4f6a8b0c2d4e6f8a0b2c4d6e8f0a2"
                    .to_string(),
            },
            InputFile {
                path: "runs/example/splits.json".to_string(),
                sha256: "9c1e3a5b7d9f1b3d5f7a9c1e3b5d7f9a1c3e5b7d9f1a3c5e7b9d1f3a5c7e9b1d"
                    .to_string(),
            },
        ],
        split_seed: 20_261_130,
        created_at: "2026-11-30T15:00:00Z".to_string(),
        uncertainty: None,
    }
}

pub fn bundle(variant: Variant) -> Bundle {
    match Bundle::freeze(variant, params(), provenance()) {
        Ok(b) => b,
        Err(e) => unreachable!("fixture bundle freezes: {e}"),
    }
}

/// The proposal's example candidate: N = 100,000, K = 90,000, R = 4, P = 16,000 / 8,000 = 2.
pub fn example_efficient() -> Observation {
    Observation {
        n: Some(100_000.0),
        k: Some(90_000.0),
        r: Some(4.0),
        prefill_tokens_booked: Some(16_000.0),
        prefill_capacity_tokens: Some(8_000.0),
        schedulable: Some(true),
        observed_at_ms: Some(1_764_514_800_000.0),
        recorded: Some(Box::new(Recorded {
            host_overlap_tokens: Some(90_000),
            disk_overlap_tokens: Some(90_000),
            effective_prefill_tokens: Some(10_000),
            decode_blocks: Some(2_400),
            kv_capacity_blocks: Some(16_384),
            pool_pending_requests: Some(0),
            pool_pending_tokens: Some(0),
            worker_id: Some(7_587_890_123_456_789_012),
            dp_rank: Some(0),
            endpoint: Some("dyn://efficient.backend.generate".to_string()),
            routing_group: Some("default".to_string()),
            model: Some("efficient".to_string()),
            query_duration_ms: Some(2.7),
        })),
    }
}

/// The capable candidate of the same turn: tokenised a little differently, nothing cached, idle.
pub fn example_capable() -> Observation {
    Observation {
        n: Some(98_500.0),
        k: Some(0.0),
        r: Some(1.0),
        prefill_tokens_booked: Some(0.0),
        prefill_capacity_tokens: Some(8_192.0),
        schedulable: Some(true),
        observed_at_ms: Some(1_764_514_800_001.0),
        recorded: Some(Box::new(Recorded {
            host_overlap_tokens: Some(0),
            disk_overlap_tokens: Some(0),
            effective_prefill_tokens: Some(98_500),
            decode_blocks: Some(310),
            kv_capacity_blocks: Some(32_768),
            pool_pending_requests: Some(0),
            pool_pending_tokens: Some(0),
            worker_id: Some(7_587_890_123_456_790_555),
            dp_rank: Some(0),
            endpoint: Some("dyn://capable.backend.generate".to_string()),
            routing_group: Some("default".to_string()),
            model: Some("capable".to_string()),
            query_duration_ms: Some(3.1),
        })),
    }
}

pub fn example_input() -> DecisionInput {
    DecisionInput {
        proposal: Model::Efficient,
        efficient: example_efficient(),
        capable: example_capable(),
        now_ms: 1_764_514_800_040.0,
        local_capable_in_flight: 1,
    }
}
