//! Fixtures for tests and benchmarks of the fitting tools: hand-built records, split tables and
//! fit files whose predictions are known exactly.

use std::collections::BTreeMap;
use std::path::Path;
use sy_selector::Model;

use sy_records::{Record, synth::SynthSpec, synth::template_record};
use sy_selector::{LoadCorrection, ModelEstimators, QTable, Standardiser};

/// One paired probe: the efficient and the capable record of `condition`/`repeat` with the given
/// measured TTFTs (ms); everything else from `sy_records::synth::template_record`.
pub fn pair(condition: &str, repeat: u32, ttft_eff: f64, ttft_cap: f64) -> [Record; 2] {
    let mk = |role: Model, ttft: f64| {
        let mut r = template_record();
        r.condition_id = condition.to_string();
        r.repeat = repeat;
        r.probe_id = format!("{condition}-{repeat}");
        r.role = role;
        r.model = role.as_str().to_string();
        r.ttft_ms = Some(ttft);
        r
    };
    [mk(Model::Efficient, ttft_eff), mk(Model::Capable, ttft_cap)]
}

/// Estimators predicting a constant `ttft` (ms) for any valid observation with N in
/// [1, 1e6]: a flat Q table, unit standardiser, zero load correction.
pub fn constant_estimators(ttft: f64) -> Option<ModelEstimators> {
    let zero = LoadCorrection {
        intercept: 0.0,
        coef: [0.0; 3],
    };
    Some(ModelEstimators {
        q: QTable::new(vec![1.0, 1e6], vec![0.0, 1.0], vec![ttft; 4]).ok()?,
        standardiser: Standardiser {
            mean: [0.0; 3],
            std: [1.0; 3],
        },
        blind: zero,
        cache: zero,
    })
}

/// The true estimators of a synthetic model: the Q table on the spec's grid holds `Q_true`
/// (bilinear, so interpolation is exact), the standardiser is the identity on `log1p`
/// features and the load correction is the generator's `(a0, aN, aR, aP)`, for both estimators.
pub fn true_estimators(spec: &SynthSpec, role: Model) -> Option<ModelEstimators> {
    let m = spec.model(role);
    let n_axis: Vec<f64> = spec.q_n_axis.iter().map(|&n| n as f64).collect();
    let f_axis = spec.q_f_axis.clone();
    let values: Vec<f64> = n_axis
        .iter()
        .flat_map(|&n| f_axis.iter().map(move |&f| m.q_true(n, f)))
        .collect();
    let correction = LoadCorrection {
        intercept: m.load[0],
        coef: [m.load[1], m.load[2], m.load[3]],
    };
    Some(ModelEstimators {
        q: QTable::new(n_axis, f_axis, values).ok()?,
        standardiser: Standardiser {
            mean: [0.0; 3],
            std: [1.0; 3],
        },
        blind: correction,
        cache: correction,
    })
}

/// Writes a `fit.json` holding only what the later tools read (the estimators of both models)
/// and its provenance, as `sy-fit` writes it: the record files it stands for (`input_files`,
/// with their SHA-256) and the split (`split`: seed, fractions and counts of the split table at
/// `splits`, which must exist).
pub fn write_fit(
    path: &Path,
    efficient: &ModelEstimators,
    capable: &ModelEstimators,
    records: &[&Path],
    splits: &Path,
) -> std::io::Result<()> {
    let input_files = records
        .iter()
        .map(|p| {
            let sha256 = sy_rundir::file_sha256(p).map_err(std::io::Error::other)?;
            Ok(serde_json::json!({"path": p.display().to_string(), "sha256": sha256}))
        })
        .collect::<std::io::Result<Vec<_>>>()?;
    let table: serde_json::Value =
        serde_json::from_slice(&std::fs::read(splits)?).map_err(std::io::Error::other)?;
    let v = serde_json::json!({
        "schema_version": sy_rundir::layout::FIT_SCHEMA_VERSION,
        "input_files": input_files,
        "split": {
            "file": splits.display().to_string(),
            "seed": table["seed"],
            "fractions": table["fractions"],
            "conditions": table["counts"],
        },
        "models": {
            "efficient": {"estimators": efficient},
            "capable": {"estimators": capable},
        }
    });
    std::fs::write(
        path,
        serde_json::to_vec_pretty(&v).map_err(std::io::Error::other)?,
    )
}

/// Writes a `splits.json` assigning each listed condition of run `run` to a split
/// (`"fit"`, `"uncertainty"`, `"selection"`).
pub fn write_splits(
    path: &Path,
    run: &str,
    seed: u64,
    assign: &[(&str, &str)],
) -> std::io::Result<()> {
    let mut counts = BTreeMap::from([("fit", 0u64), ("uncertainty", 0), ("selection", 0)]);
    let mut conditions = BTreeMap::new();
    for &(c, s) in assign {
        *counts.entry(s).or_insert(0) += 1;
        conditions.insert(c.to_string(), s.to_string());
    }
    let v = serde_json::json!({
        "schema_version": sy_rundir::layout::SPLITS_SCHEMA_VERSION,
        "seed": seed,
        "fractions": {"fit": 0.6, "uncertainty": 0.2, "selection": 0.2},
        "method": "test",
        "counts": counts,
        "conditions": {run: conditions},
    });
    std::fs::write(
        path,
        serde_json::to_vec_pretty(&v).map_err(std::io::Error::other)?,
    )
}
