//! `sy-sim fit-config`: the simulator's TTFT parameters fitted from a real run's records.
//!
//! On an idle worker the simulator's first token arrives after the prefill steps of the request
//! alone ([`crate::config::StepTimeConfig`]): with `c` the tokens the engine reuses (the worker's
//! `cached_tokens`, at most N − 1) and the fresh `N − c` tokens cut into chunks of at most
//! `max_num_batched_tokens`,
//!
//! ```text
//! TTFT = Σ_chunks [ base_ms + prefill_ms_per_token·chunk + cached_ms_per_token·(context before it)
//!                   + attention_ms_per_token_ctx·chunk·(context before it + chunk/2)/1000 ]
//!                                                                  (all divided by the speed)
//! ```
//!
//! which is linear in the four parameters. Per model, the Q-grid records (no load) are grouped by
//! (N, cached tokens), each cell's median TTFT is taken — the server's own TTFT
//! (`server_ttft_ms`) where every record of the model has it, else the client's — and the four
//! parameters are the non-negative least-squares fit of the cell medians in *relative* error
//! (every cell counts alike, short prompts as much as long ones), after taking the base's
//! `request_plane_ms` off every cell (the frontend's time: it does not scale with the worker's
//! speed). The batch budget and KV capacity
//! come from what the deployment published (the records' `prefill_capacity_tokens`,
//! `kv_capacity_blocks`) where every record agrees; the decode parameters and everything else
//! from the base configuration unchanged.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use sy_records::{LoadOptions, Phase, Record, Status};

use crate::config::{ModelConfig, SimConfig, StepTimeConfig};

/// Why a fit could not be made. Every message names the file (and the field or model).
#[derive(Debug, thiserror::Error)]
pub enum FitConfigError {
    /// The records did not load (sy-records' message names the file, row and field).
    #[error("{0}")]
    Load(sy_records::RecordsError),
    #[error("{path}: {message}")]
    Records { path: PathBuf, message: String },
    #[error("{0}")]
    Base(#[from] crate::SimError),
    #[error(
        "{path}: model {model:?} of the records is not in the base configuration {base} (models there: {known})"
    )]
    UnknownModel {
        path: PathBuf,
        model: String,
        base: PathBuf,
        known: String,
    },
    #[error("{path}: model {model:?}: {message}")]
    Model {
        path: PathBuf,
        model: String,
        message: String,
    },
    #[error("{base}: models[{index}].worker_speeds: {message}")]
    Speeds {
        base: PathBuf,
        index: usize,
        message: String,
    },
    #[error("{path}: cannot write: {message}")]
    Write { path: PathBuf, message: String },
}

impl FitConfigError {
    /// Bad input (exit 2) rather than a runtime failure (exit 1).
    pub fn is_bad_input(&self) -> bool {
        match self {
            FitConfigError::Load(e) => e.is_bad_input(),
            FitConfigError::Write { .. } => false,
            _ => true,
        }
    }
}

/// One Q-grid cell of one model: N, the tokens the worker reused, the median TTFT and its count.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cell {
    pub n: u64,
    pub cached: u64,
    pub ttft_ms: f64,
    pub count: usize,
}

/// The capacities a deployment published for a model's workers (the selection service's
/// `prefill_capacity_tokens` and `kv_capacity_blocks`, which the records carry): the batch budget
/// that decides where a prompt is cut into chunks and the KV capacity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capacities {
    pub max_num_batched_tokens: Option<u64>,
    pub kv_blocks: Option<u64>,
}

/// The one value every record of the model gives for a capacity; `None` when none gives one,
/// they disagree, or it is the selection service's "not advertised" sentinel.
fn published(records: &[&Record], field: impl Fn(&Record) -> Option<u64>) -> Option<u64> {
    let mut values = records.iter().filter_map(|r| field(r));
    let first = values.next()?;
    (first > 0 && first < crate::MISSING_CAPACITY_SENTINEL && values.all(|v| v == first))
        .then_some(first)
}

/// The capacities the model's successful records (any phase) published.
pub fn published_capacities(records: &[&Record]) -> Capacities {
    Capacities {
        max_num_batched_tokens: published(records, |r| r.observed.prefill_capacity_tokens),
        kv_blocks: published(records, |r| r.observed.kv_capacity_blocks),
    }
}

/// The fitted model: its parameters and, per cell, measured vs fitted TTFT.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelFit {
    pub model: String,
    /// The capacities taken from the records (the base's are kept where `None`).
    pub capacities: Capacities,
    /// `server_ttft_ms` or `ttft_ms`: what the cell medians are of.
    pub target: &'static str,
    pub step: StepTimeConfig,
    pub cells: Vec<(Cell, f64)>,
}

/// Coefficients of (base_ms, prefill_ms_per_token, cached_ms_per_token,
/// attention_ms_per_token_ctx) in the idle-worker TTFT of a prompt of `n` tokens of which the
/// worker reuses `cached`, with a step budget of `mbt` tokens, at speed `speed`: one prefill pass
/// per chunk, each costing [`StepTimeConfig::prefill_ms`] of one request (the engine computes at
/// least the prompt's last token).
pub fn ttft_features(n: u64, cached: u64, mbt: u64, speed: f64) -> [f64; 4] {
    let reused = cached.min(n.saturating_sub(1));
    let mut ctx = reused;
    let mut left = n - reused;
    let mut x = [0.0; 4];
    while left > 0 {
        let c = left.min(mbt.max(1));
        x[0] += 1.0;
        x[1] += c as f64;
        x[2] += ctx as f64;
        x[3] += c as f64 * (ctx as f64 + c as f64 / 2.0) / 1000.0;
        ctx += c;
        left -= c;
    }
    x.map(|v| v / speed.max(1e-9))
}

fn params(s: &StepTimeConfig) -> [f64; 4] {
    [
        s.base_ms,
        s.prefill_ms_per_token,
        s.cached_ms_per_token,
        s.attention_ms_per_token_ctx,
    ]
}

/// The simulator's idle-worker TTFT of a cell under `step`.
pub fn predict(step: &StepTimeConfig, n: u64, cached: u64, mbt: u64, speed: f64) -> f64 {
    let x = ttft_features(n, cached, mbt, speed);
    x.iter().zip(params(step)).map(|(a, b)| a * b).sum()
}

/// Solves the normal equations of the columns in `free` (Gaussian elimination with partial
/// pivoting); `None` when they are singular.
fn solve_subset(rows: &[([f64; 4], f64)], free: &[usize]) -> Option<[f64; 4]> {
    let k = free.len();
    let mut a = vec![vec![0.0; k + 1]; k];
    for (x, y) in rows {
        for i in 0..k {
            for j in 0..k {
                a[i][j] += x[free[i]] * x[free[j]];
            }
            a[i][k] += x[free[i]] * y;
        }
    }
    for col in 0..k {
        let piv = (col..k).max_by(|&p, &q| a[p][col].abs().total_cmp(&a[q][col].abs()))?;
        let scale = (0..k)
            .map(|i| a[i][i].abs())
            .fold(0.0, f64::max)
            .max(1e-300);
        if a[piv][col].abs() <= 1e-12 * scale {
            return None;
        }
        a.swap(col, piv);
        let pivot = a[col].clone();
        for (r, row) in a.iter_mut().enumerate() {
            if r != col {
                let f = row[col] / pivot[col];
                for (x, p) in row.iter_mut().zip(&pivot).skip(col) {
                    *x -= f * p;
                }
            }
        }
    }
    let mut out = [0.0; 4];
    for (i, &p) in free.iter().enumerate() {
        out[p] = a[i][k] / a[i][i];
    }
    Some(out)
}

/// Non-negative least squares of `cells` in relative error: every subset of the four parameters
/// is solved unconstrained and the best solution with no negative parameter is kept (16 subsets:
/// exact, and cheap).
pub fn fit_cells(cells: &[Cell], mbt: u64, speed: f64) -> Option<StepTimeConfig> {
    let rows: Vec<([f64; 4], f64)> = cells
        .iter()
        .filter(|c| c.ttft_ms > 0.0)
        .map(|c| {
            let x = ttft_features(c.n, c.cached, mbt, speed);
            (x.map(|v| v / c.ttft_ms), 1.0)
        })
        .collect();
    let mut best: Option<([f64; 4], f64)> = None;
    for mask in 1u32..16 {
        let free: Vec<usize> = (0..4).filter(|i| mask & (1 << i) != 0).collect();
        let Some(p) = solve_subset(&rows, &free) else {
            continue;
        };
        if p.iter().any(|v| *v < 0.0 || !v.is_finite()) {
            continue;
        }
        let sse: f64 = rows
            .iter()
            .map(|(x, y)| (x.iter().zip(p).map(|(a, b)| a * b).sum::<f64>() - y).powi(2))
            .sum();
        if best.is_none_or(|b| sse < b.1 - 1e-15) {
            best = Some((p, sse));
        }
    }
    best.map(|(p, _)| StepTimeConfig {
        base_ms: p[0],
        prefill_ms_per_token: p[1],
        cached_ms_per_token: p[2],
        attention_ms_per_token_ctx: p[3],
        ..StepTimeConfig::default()
    })
}

/// The median of a cell's TTFTs: the middle value, or for an even count the mean `(a + b) / 2`
/// of the two middle values.
///
/// Not the workspace's quantile (`sy_selector::quantile_sorted(v, 0.5)`), on purpose: for an
/// odd count both give the middle value, but for an even count that one interpolates
/// `a + 0.5 · (b − a)`, which for many pairs rounds differently from `(a + b) / 2` in the last
/// bit (e.g. 145.20393787433972 and 1221.4717663027466, checked by a unit test below).
/// Switching would move configurations this fits, and the figures docs/benchmarks.md reports
/// from them, in their last digits.
fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Q-grid cells of one model's successful records: (N, cached tokens) → median TTFT.
pub fn q_cells(records: &[&Record], use_server: bool) -> Vec<Cell> {
    let mut by: BTreeMap<(u64, u64), Vec<f64>> = BTreeMap::new();
    for r in records {
        let t = if use_server {
            r.server_ttft_ms
        } else {
            r.ttft_ms
        };
        if let (Some(n), Some(t)) = (r.observed.n.or(Some(r.planned_n)), t) {
            let cached = r.cached_tokens.or(r.observed.k).unwrap_or(0);
            by.entry((n, cached)).or_default().push(t);
        }
    }
    by.into_iter()
        .map(|((n, cached), v)| Cell {
            n,
            cached,
            count: v.len(),
            ttft_ms: median(v),
        })
        .collect()
}

/// The speed every worker of `m` runs at (the fit assumes one speed per model).
fn model_speed(m: &ModelConfig, index: usize, base: &Path) -> Result<f64, FitConfigError> {
    let s0 = m.speed(0);
    if (1..m.workers).any(|i| (m.speed(i) - s0).abs() > 1e-12) {
        return Err(FitConfigError::Speeds {
            base: base.to_path_buf(),
            index,
            message: format!(
                "{:?} differ between workers; fit-config fits one set of parameters per model, so every worker of {} must run at one speed",
                m.worker_speeds, m.name
            ),
        });
    }
    Ok(s0)
}

/// Fits every model of `records` (a run's records) into `base`; returns the new configuration and
/// the per-model fits. `records_path` and `base_path` only name the files in errors.
pub fn fit_config(
    records: &[Record],
    records_path: &Path,
    mut base: SimConfig,
    base_path: &Path,
) -> Result<(SimConfig, Vec<ModelFit>), FitConfigError> {
    let mut by_model: BTreeMap<&str, Vec<&Record>> = BTreeMap::new();
    let mut all_by_model: BTreeMap<&str, Vec<&Record>> = BTreeMap::new();
    for r in records.iter().filter(|r| r.status == Status::Ok) {
        all_by_model.entry(r.model.as_str()).or_default().push(r);
        if r.phase == Phase::Qgrid {
            by_model.entry(r.model.as_str()).or_default().push(r);
        }
    }
    if by_model.is_empty() {
        return Err(FitConfigError::Records {
            path: records_path.to_path_buf(),
            message: "no successful Q-grid records (phase = \"qgrid\", status = \"ok\"): fit-config fits the no-load TTFT".into(),
        });
    }
    let mut fits = Vec::new();
    for (model, recs) in by_model {
        let known: Vec<String> = base.models.iter().map(|m| m.name.clone()).collect();
        let Some(index) = base.models.iter().position(|m| m.name == model) else {
            return Err(FitConfigError::UnknownModel {
                path: records_path.to_path_buf(),
                model: model.to_owned(),
                base: base_path.to_path_buf(),
                known: known.join(", "),
            });
        };
        let m = &mut base.models[index];
        let speed = model_speed(m, index, base_path)?;
        let capacities = published_capacities(&all_by_model[model]);
        if let Some(v) = capacities.max_num_batched_tokens {
            m.max_num_batched_tokens = v;
        }
        if let Some(v) = capacities.kv_blocks {
            m.kv_blocks = v;
        }
        let use_server = recs.iter().all(|r| r.server_ttft_ms.is_some());
        let cells = q_cells(&recs, use_server);
        let model_err = |message: String| FitConfigError::Model {
            path: records_path.to_path_buf(),
            model: model.to_owned(),
            message,
        };
        if cells.len() < 2 {
            return Err(model_err(format!(
                "{} Q-grid cell(s) with a TTFT (field ttft_ms / server_ttft_ms); at least 2 (N, cached tokens) cells are needed",
                cells.len()
            )));
        }
        // The request plane's time is the frontend's, not the engine's: it does not scale with
        // the worker's speed, so it comes off every cell before the step costs are fitted.
        let plane = m.request_plane_ms.max(0.0);
        let engine_cells: Vec<Cell> = cells
            .iter()
            .map(|c| Cell {
                ttft_ms: c.ttft_ms - plane,
                ..*c
            })
            .collect();
        let fitted =
            fit_cells(&engine_cells, m.max_num_batched_tokens, speed).ok_or_else(|| {
                model_err("the cells do not determine the TTFT parameters (singular fit)".into())
            })?;
        m.step = StepTimeConfig {
            decode_ms_per_seq: m.step.decode_ms_per_seq,
            decode_ms_per_ctx: m.step.decode_ms_per_ctx,
            ..fitted
        };
        let step = m.step.clone();
        let mbt = m.max_num_batched_tokens;
        fits.push(ModelFit {
            model: model.to_owned(),
            capacities,
            target: if use_server {
                "server_ttft_ms"
            } else {
                "ttft_ms"
            },
            cells: cells
                .iter()
                .map(|c| (*c, plane + predict(&step, c.n, c.cached, mbt, speed)))
                .collect(),
            step,
        });
    }
    base.validate().map_err(|message| crate::SimError::Config {
        source_name: format!("fitted from {}", records_path.display()),
        message,
    })?;
    Ok((base, fits))
}

/// One model's `frontend_untimed_ms` fitted from the client − server TTFT gaps of a real run and
/// of a simulator run of the same plan.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct UntimedFit {
    /// Median `ttft_ms − server_ttft_ms` of the real run's Q-grid records.
    pub real_gap_ms: f64,
    /// The same median in the simulator's run.
    pub sim_gap_ms: f64,
    /// The fitted value: the base's plus the difference, at least 0.
    pub untimed_ms: f64,
}

/// Median client − server TTFT gap of each model's successful Q-grid records that have both.
fn gaps(records: &[Record]) -> BTreeMap<&str, f64> {
    let mut by: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for r in records
        .iter()
        .filter(|r| r.phase == Phase::Qgrid && r.status == Status::Ok)
    {
        if let (Some(c), Some(s)) = (r.ttft_ms, r.server_ttft_ms) {
            by.entry(r.model.as_str()).or_default().push(c - s);
        }
    }
    by.into_iter().map(|(m, v)| (m, median(v))).collect()
}

/// Sets every model's `frontend_untimed_ms` so that the simulator's client − server gap matches
/// the real run's: `sim` is a run of the same plan on the simulator with `cfg`'s current values,
/// so the fitted value is the current one plus (real gap − simulator gap), at least 0. Both runs
/// must report the server's TTFT for each model.
pub fn fit_untimed(
    cfg: &mut SimConfig,
    real: &[Record],
    real_path: &Path,
    sim: &[Record],
    sim_path: &Path,
) -> Result<Vec<(String, UntimedFit)>, FitConfigError> {
    let (real_gaps, sim_gaps) = (gaps(real), gaps(sim));
    let mut out = Vec::new();
    for m in &mut cfg.models {
        let Some(&real_gap_ms) = real_gaps.get(m.name.as_str()) else {
            continue;
        };
        let Some(&sim_gap_ms) = sim_gaps.get(m.name.as_str()) else {
            return Err(FitConfigError::Model {
                path: sim_path.to_path_buf(),
                model: m.name.clone(),
                message: format!(
                    "no successful Q-grid record with both ttft_ms and server_ttft_ms, while {} has them: the simulator run must be of the same plan",
                    real_path.display()
                ),
            });
        };
        m.frontend_untimed_ms = (m.frontend_untimed_ms + real_gap_ms - sim_gap_ms).max(0.0);
        out.push((
            m.name.clone(),
            UntimedFit {
                real_gap_ms,
                sim_gap_ms,
                untimed_ms: m.frontend_untimed_ms,
            },
        ));
    }
    Ok(out)
}

/// What `sy-sim fit-config` fitted.
#[derive(Debug, Clone, PartialEq)]
pub struct Fitted {
    pub models: Vec<ModelFit>,
    /// Per model, when a simulator run was given (`--sim-records`).
    pub untimed: Vec<(String, UntimedFit)>,
}

fn load(path: &Path) -> Result<Vec<Record>, FitConfigError> {
    sy_records::load_records(&[path.to_path_buf()], &LoadOptions::default())
        .map(|l| l.records)
        .map_err(FitConfigError::Load)
}

/// `sy-sim fit-config`: reads the records (and, with `sim_records`, a simulator run of the same
/// plan with the base configuration) and the base configuration, fits, writes `out` (whole or not
/// at all: a temporary file renamed into place) and returns the fits.
pub fn run(
    records: &Path,
    sim_records: Option<&Path>,
    base: &Path,
    out: &Path,
) -> Result<Fitted, FitConfigError> {
    let real = load(records)?;
    let base_cfg = SimConfig::from_toml_path(base)?;
    let (mut cfg, models) = fit_config(&real, records, base_cfg, base)?;
    let untimed = match sim_records {
        Some(sim_path) => fit_untimed(&mut cfg, &real, records, &load(sim_path)?, sim_path)?,
        None => Vec::new(),
    };
    let fitted = Fitted { models, untimed };
    write_fitted(&cfg, &fitted, records, sim_records, base, out)?;
    Ok(fitted)
}

/// Writes the fitted configuration with a header saying what was fitted from what.
fn write_fitted(
    cfg: &SimConfig,
    fitted: &Fitted,
    records: &Path,
    sim_records: Option<&Path>,
    base: &Path,
    out: &Path,
) -> Result<(), FitConfigError> {
    let write_err = |e: String| FitConfigError::Write {
        path: out.to_path_buf(),
        message: e,
    };
    let body = toml::to_string(cfg).map_err(|e| write_err(e.to_string()))?;
    let sim_arg = sim_records.map_or(String::new(), |p| format!(" --sim-records {}", p.display()));
    let mut text = format!(
        "# Fitted by `sy-sim fit-config --records {}{sim_arg} --base {}`: per model, base_ms,\n# prefill_ms_per_token, cached_ms_per_token and attention_ms_per_token_ctx from the\n# Q-grid cell medians (docs/simulator.md, \"Fitting the simulator to your own run\").\n",
        records.display(),
        base.display()
    );
    for f in &fitted.models {
        text.push_str(&format!(
            "# {}: {} cells of {}\n",
            f.model,
            f.cells.len(),
            f.target
        ));
    }
    for (model, u) in &fitted.untimed {
        text.push_str(&format!(
            "# {model}: frontend_untimed_ms {:.3} (client - server TTFT gap: real {:.3} ms, simulator {:.3} ms)\n",
            u.untimed_ms, u.real_gap_ms, u.sim_gap_ms
        ));
    }
    text.push_str(&body);
    let tmp = out.with_extension("toml.tmp");
    std::fs::write(&tmp, text).map_err(|e| write_err(e.to_string()))?;
    std::fs::rename(&tmp, out).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        write_err(e.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn truth() -> StepTimeConfig {
        StepTimeConfig {
            base_ms: 6.0,
            prefill_ms_per_token: 0.004,
            cached_ms_per_token: 0.0005,
            attention_ms_per_token_ctx: 0.002,
            ..StepTimeConfig::default()
        }
    }

    #[test]
    fn median_averages_the_two_middle_values() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        let (a, b) = (145.203_937_874_339_72, 1_221.471_766_302_746_6);
        assert_eq!(median(vec![b, a]).to_bits(), ((a + b) / 2.0).to_bits());
        // The interpolated form rounds differently here (see `median`'s doc comment).
        assert_ne!(median(vec![b, a]).to_bits(), (a + 0.5 * (b - a)).to_bits());
    }

    fn grid(step: &StepTimeConfig, mbt: u64, speed: f64) -> Vec<Cell> {
        let mut cells = Vec::new();
        for n in [128u64, 512, 1536, 3000] {
            for f in [0.0, 0.5, 0.875] {
                let cached = ((f * n as f64) as u64 / 16) * 16;
                let ttft_ms = predict(step, n, cached, mbt, speed);
                cells.push(Cell {
                    n,
                    cached,
                    ttft_ms,
                    count: 3,
                });
            }
        }
        cells
    }

    #[test]
    fn features_chunk_the_fresh_tokens_and_charge_the_reused_prefix() {
        // 3000 tokens, 1000 reused, budget 1024: chunks 1024 + 976, after 1000 and 2024 tokens
        // of context.
        let x = ttft_features(3000, 1000, 1024, 1.0);
        assert_eq!(x[0], 2.0);
        assert_eq!(x[1], 2000.0);
        assert_eq!(x[2], 3024.0);
        let want = (1024.0 * (1000.0 + 512.0) + 976.0 * (2024.0 + 488.0)) / 1000.0;
        assert!((x[3] - want).abs() < 1e-9);
        // A full hit still computes the last token; speed divides everything.
        assert_eq!(
            ttft_features(64, 64, 1024, 2.0),
            [0.5, 0.5, 31.5, 63.5 / 2000.0]
        );
    }

    #[test]
    fn recovers_known_parameters_exactly() {
        for (mbt, speed) in [(2048, 1.0), (1024, 4.0)] {
            let t = truth();
            let got = fit_cells(&grid(&t, mbt, speed), mbt, speed).unwrap();
            for (a, b) in params(&got).iter().zip(params(&t)) {
                assert!((a - b).abs() <= 1e-9 * b.max(1.0), "{got:?} vs {t:?}");
            }
        }
    }

    #[test]
    fn never_fits_a_negative_parameter() {
        // TTFT falling with N would need a negative slope: the fit clamps it to zero instead.
        let cells: Vec<Cell> = [(128u64, 20.0), (512, 18.0), (1024, 17.0)]
            .iter()
            .map(|&(n, t)| Cell {
                n,
                cached: 0,
                ttft_ms: t,
                count: 1,
            })
            .collect();
        let got = fit_cells(&cells, 2048, 1.0).unwrap();
        assert!(params(&got).iter().all(|v| *v >= 0.0), "{got:?}");
        assert!(got.base_ms > 15.0, "{got:?}");
    }

    fn record(model: &str, n: u64, cached: u64, server: Option<f64>) -> Record {
        let mut r = sy_records::synth::template_record();
        r.model = model.into();
        r.phase = Phase::Qgrid;
        r.observed.n = Some(n);
        r.planned_n = n;
        r.cached_tokens = Some(cached);
        r.server_ttft_ms = server;
        r.ttft_ms = server.map(|s| s + 0.5).or(Some(10.0));
        r.observed.prefill_capacity_tokens = Some(2048);
        r.observed.kv_capacity_blocks = None;
        r
    }

    /// The base's request plane is not engine time: it comes off the cells, so the step costs
    /// fitted at one speed predict another.
    #[test]
    fn the_request_plane_is_not_fitted_into_the_step_costs() {
        let t = truth();
        let mut base = SimConfig::default();
        base.models[0].request_plane_ms = 2.0;
        base.models[0].worker_speeds = vec![4.0, 4.0];
        let recs: Vec<Record> = grid(&t, 2048, 4.0)
            .iter()
            .map(|c| record("efficient", c.n, c.cached, Some(c.ttft_ms + 2.0)))
            .collect();
        let (cfg, fits) =
            fit_config(&recs, Path::new("r.jsonl"), base, Path::new("b.toml")).unwrap();
        let got = &cfg.models[0].step;
        assert!((got.base_ms - t.base_ms).abs() < 1e-9, "{got:?}");
        assert!((got.prefill_ms_per_token - t.prefill_ms_per_token).abs() < 1e-12);
        for (c, p) in &fits[0].cells {
            assert!((p / c.ttft_ms - 1.0).abs() < 1e-9, "{c:?}: {p}");
        }
    }

    /// The batch budget and KV capacity the deployment published replace the base's; values
    /// that disagree between records, or the "not advertised" sentinel, leave the base's.
    #[test]
    fn takes_the_published_capacities_and_chunks_with_them() {
        let t = truth();
        let mut recs = Vec::new();
        for c in grid(&t, 512, 1.0) {
            let mut r = record("efficient", c.n, c.cached, Some(c.ttft_ms));
            r.observed.prefill_capacity_tokens = Some(512);
            r.observed.kv_capacity_blocks = Some(1456);
            recs.push(r);
        }
        let mut load = record("capable", 256, 0, Some(30.0));
        load.phase = Phase::Load;
        load.observed.prefill_capacity_tokens = Some(crate::MISSING_CAPACITY_SENTINEL);
        let mut q = vec![
            record("capable", 128, 0, Some(20.0)),
            record("capable", 512, 0, Some(40.0)),
        ];
        q[1].observed.kv_capacity_blocks = Some(100);
        q[0].observed.kv_capacity_blocks = Some(200);
        recs.extend(q);
        recs.push(load);
        let base = SimConfig::default();
        let (cfg, fits) = fit_config(
            &recs,
            Path::new("r.jsonl"),
            base.clone(),
            Path::new("b.toml"),
        )
        .unwrap();
        assert_eq!(cfg.models[0].max_num_batched_tokens, 512);
        assert_eq!(cfg.models[0].kv_blocks, 1456);
        let efficient = fits.iter().find(|f| f.model == "efficient").unwrap();
        assert_eq!(efficient.capacities.max_num_batched_tokens, Some(512));
        // Chunked at 512, the grid made with 512 is fitted exactly.
        assert!((cfg.models[0].step.base_ms - t.base_ms).abs() < 1e-9);
        let capable = fits.iter().find(|f| f.model == "capable").unwrap();
        assert_eq!(capable.capacities.max_num_batched_tokens, None, "sentinel");
        assert_eq!(capable.capacities.kv_blocks, None, "disagreeing records");
        assert_eq!(
            cfg.models[1].max_num_batched_tokens,
            base.models[1].max_num_batched_tokens
        );
        assert_eq!(cfg.models[1].kv_blocks, base.models[1].kv_blocks);
    }

    #[test]
    fn errors_name_the_file_and_the_model() {
        let base = SimConfig::default();
        let (rp, bp) = (Path::new("run/records.parquet"), Path::new("base.toml"));
        let err = fit_config(&[record("gpt", 128, 0, Some(5.0))], rp, base.clone(), bp)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("run/records.parquet")
                && err.contains("\"gpt\"")
                && err.contains("base.toml")
                && err.contains("efficient, capable"),
            "{err}"
        );
        let err = fit_config(
            &[record("efficient", 128, 0, Some(5.0))],
            rp,
            base.clone(),
            bp,
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("run/records.parquet")
                && err.contains("efficient")
                && err.contains("at least 2"),
            "{err}"
        );
        let err = fit_config(&[], rp, base.clone(), bp)
            .unwrap_err()
            .to_string();
        assert!(err.contains("no successful Q-grid records"), "{err}");
        let mut uneven = base;
        uneven.models[1].worker_speeds = vec![1.0, 2.0];
        let recs = [
            record("capable", 128, 0, Some(5.0)),
            record("capable", 512, 0, Some(9.0)),
        ];
        let err = fit_config(&recs, rp, uneven, bp).unwrap_err().to_string();
        assert!(err.contains("base.toml: models[1].worker_speeds"), "{err}");
    }

    #[test]
    fn fits_server_ttft_when_every_record_has_it_and_keeps_the_rest_of_the_base() {
        let t = truth();
        let mut recs = Vec::new();
        for c in grid(&t, 2048, 1.0) {
            recs.push(record("efficient", c.n, c.cached, Some(c.ttft_ms)));
        }
        let base = SimConfig::default();
        let (cfg, fits) = fit_config(
            &recs,
            Path::new("r.jsonl"),
            base.clone(),
            Path::new("b.toml"),
        )
        .unwrap();
        assert_eq!(fits.len(), 1);
        assert_eq!(fits[0].target, "server_ttft_ms");
        for (c, p) in &fits[0].cells {
            assert!((p / c.ttft_ms - 1.0).abs() < 1e-9);
        }
        assert_eq!(
            cfg.models[1], base.models[1],
            "capable: no records, unchanged"
        );
        assert_eq!(
            cfg.models[0].step.decode_ms_per_seq,
            base.models[0].step.decode_ms_per_seq
        );
        assert!((cfg.models[0].step.base_ms - t.base_ms).abs() < 1e-9);
        // One record without a server timing: the client's TTFT is fitted instead.
        recs[0].server_ttft_ms = None;
        let (_, fits) = fit_config(&recs, Path::new("r.jsonl"), base, Path::new("b.toml")).unwrap();
        assert_eq!(fits[0].target, "ttft_ms");
    }

    #[test]
    fn untimed_work_closes_the_gap_between_the_runs_client_server_gaps() {
        let with_gap = |model: &str, server: f64, gap: f64| {
            let mut r = record(model, 128, 0, Some(server));
            r.ttft_ms = Some(server + gap);
            r
        };
        let real: Vec<Record> = [0.9, 1.0, 1.3]
            .iter()
            .map(|g| with_gap("efficient", 6.0, *g))
            .collect();
        let sim: Vec<Record> = [0.6, 0.7, 0.8]
            .iter()
            .map(|g| with_gap("efficient", 6.0, *g))
            .collect();
        let mut cfg = SimConfig::default();
        cfg.models[0].frontend_untimed_ms = 0.1;
        let (rp, sp) = (Path::new("real.parquet"), Path::new("sim.parquet"));
        let fits = fit_untimed(&mut cfg, &real, rp, &sim, sp).unwrap();
        assert_eq!(fits.len(), 1, "only the models of the real run");
        let (model, u) = &fits[0];
        assert_eq!(model, "efficient");
        assert!((u.real_gap_ms - 1.0).abs() < 1e-12 && (u.sim_gap_ms - 0.7).abs() < 1e-12);
        assert!(
            (cfg.models[0].frontend_untimed_ms - 0.4).abs() < 1e-12,
            "{u:?}"
        );
        // A simulator already slower than the real frontend: no negative work.
        let slow: Vec<Record> = sim
            .iter()
            .map(|r| with_gap("efficient", 6.0, 2.0 + r.ttft_ms.unwrap() - 6.0))
            .collect();
        fit_untimed(&mut cfg, &real, rp, &slow, sp).unwrap();
        assert_eq!(cfg.models[0].frontend_untimed_ms, 0.0);
        // The simulator run must cover the real run's models.
        let other: Vec<Record> = sim
            .iter()
            .map(|r| with_gap("capable", 6.0, r.ttft_ms.unwrap() - 6.0))
            .collect();
        let e = fit_untimed(&mut cfg, &real, rp, &other, sp)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("sim.parquet") && e.contains("efficient") && e.contains("same plan"),
            "{e}"
        );
    }
}
