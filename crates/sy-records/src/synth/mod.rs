//! Synthetic records with a known truth, for tests and benchmarks.
//!
//! Each model's TTFT is generated as
//!
//! ```text
//! TTFT = Q_true(N, f) + a0 + aN log1p(N) + aR log1p(R) + aP log1p(P) + noise
//! Q_true(N, f) = base + uncached · N (1 − f) + cached · N f
//! ```
//!
//! `Q_true` is bilinear in (N, f), so the bilinear interpolation of a Q table measured on any
//! grid reproduces it exactly (up to noise), and the load correction is linear in the raw log
//! features, so a fitted cache-aware correction, rescaled by the fitted standardiser, must
//! recover `(a0, aN, aR, aP)`: `aX = cX / std_X` and `a0 = c0 − Σ aX mean_X`.
//!
//! Q-grid probes (no background load: R = 0, P = 0) sample every (N, f) grid point; load-phase
//! conditions draw N, f and a background load at random, and every repeat of a condition varies R
//! and P a little, as real repeats do.
//!
//! Whom a condition's background loads is its [`Contention`]. With [`Contention::Both`] it loads
//! both models, and the capable model is then never the faster one (its Q and load correction are
//! the larger): every rule keeps the proposal, and a calibration on such records only ever
//! exercises the path where nothing overrides. [`Contention::Targeted`] loads the efficient model,
//! the capable one or both, at random, as `sy-collect`'s plans vary it, so that a busy efficient
//! worker beside an idle capable one makes capable the faster choice for some turns.

mod generate;

pub use generate::generate;

use rand::RngExt;
use rand_chacha::ChaCha8Rng;

use crate::record::{
    Background, Model, ObservedFields, Phase, RECORD_SCHEMA_VERSION, Record, Status,
};

/// The truth of one model.
#[derive(Debug, Clone, PartialEq)]
pub struct SynthModel {
    /// Served model name.
    pub name: String,
    /// Q_true: fixed cost (ms).
    pub q_base_ms: f64,
    /// Q_true: ms per uncached prompt token.
    pub q_uncached_ms_per_token: f64,
    /// Q_true: ms per cached prompt token (cached context is not free).
    pub q_cached_ms_per_token: f64,
    /// `[a0, aN, aR, aP]` on raw `log1p` features (ms).
    pub load: [f64; 4],
    /// Standard deviation of the Gaussian noise (ms).
    pub noise_sd_ms: f64,
    /// Advertised prefill capacity (P's denominator).
    pub prefill_capacity_tokens: u64,
}

impl SynthModel {
    /// `Q_true(N, f)`.
    pub fn q_true(&self, n: f64, f: f64) -> f64 {
        self.q_base_ms
            + self.q_uncached_ms_per_token * n * (1.0 - f)
            + self.q_cached_ms_per_token * n * f
    }

    /// The true load correction on raw features.
    pub fn load_true(&self, n: f64, r: f64, p: f64) -> f64 {
        self.load[0]
            + self.load[1] * n.ln_1p()
            + self.load[2] * r.ln_1p()
            + self.load[3] * p.ln_1p()
    }
}

/// Whom the background load of a load-phase condition targets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Contention {
    /// Both models, in every condition (no turn where capable is faster).
    #[default]
    Both,
    /// The efficient model, the capable one or both, one of the three at random per condition.
    Targeted,
}

impl Contention {
    /// Draws a condition's target (`Both` draws nothing: its records are those of the
    /// generator before `Targeted` existed, bit for bit).
    fn draw(self, rng: &mut ChaCha8Rng) -> &'static str {
        match self {
            Contention::Both => "both",
            Contention::Targeted => ["efficient", "capable", "both"][rng.random_range(0..3)],
        }
    }
}

/// Whether a background aimed at `target` loads `role`.
fn loads(target: &str, role: Model) -> bool {
    match target {
        "efficient" => role == Model::Efficient,
        "capable" => role == Model::Capable,
        _ => true,
    }
}

/// What to generate.
#[derive(Debug, Clone, PartialEq)]
pub struct SynthSpec {
    pub run_id: String,
    pub seed: u64,
    /// Load-phase conditions.
    pub conditions: usize,
    /// Repeats per load-phase condition (each repeat is one efficient + one capable record).
    pub repeats: u32,
    /// Q-grid prompt lengths (also the range of load-phase N).
    pub q_n_axis: Vec<u64>,
    /// Q-grid cached fractions (also the range of load-phase f); must contain 0.
    pub q_f_axis: Vec<f64>,
    /// Repeats per Q-grid cell.
    pub q_repeats: u32,
    pub efficient: SynthModel,
    pub capable: SynthModel,
    /// Whom each load-phase condition's background loads.
    pub contention: Contention,
}

impl Default for SynthSpec {
    fn default() -> Self {
        SynthSpec {
            run_id: "synth".to_string(),
            seed: 1,
            conditions: 200,
            repeats: 5,
            q_n_axis: vec![512, 2048, 8192, 32768],
            q_f_axis: vec![0.0, 0.25, 0.5, 0.75, 0.9],
            q_repeats: 5,
            efficient: SynthModel {
                name: "efficient-model".to_string(),
                q_base_ms: 40.0,
                q_uncached_ms_per_token: 0.05,
                q_cached_ms_per_token: 0.005,
                load: [20.0, 4.0, 60.0, 150.0],
                noise_sd_ms: 5.0,
                prefill_capacity_tokens: 8192,
            },
            capable: SynthModel {
                name: "capable-model".to_string(),
                q_base_ms: 80.0,
                q_uncached_ms_per_token: 0.12,
                q_cached_ms_per_token: 0.01,
                load: [30.0, 6.0, 90.0, 250.0],
                noise_sd_ms: 8.0,
                prefill_capacity_tokens: 16384,
            },
            contention: Contention::Both,
        }
    }
}

impl SynthSpec {
    /// The truth of one role.
    pub fn model(&self, role: Model) -> &SynthModel {
        match role {
            Model::Efficient => &self.efficient,
            Model::Capable => &self.capable,
        }
    }

    /// Records this spec will generate.
    pub fn record_count(&self) -> usize {
        2 * (self.conditions * self.repeats as usize
            + self.q_n_axis.len() * self.q_f_axis.len() * self.q_repeats as usize)
    }
}

/// A minimal valid record (load phase, efficient, ok): the base for tests and for naming the
/// field of an invalid JSONL line.
pub fn template_record() -> Record {
    Record {
        schema_version: RECORD_SCHEMA_VERSION,
        run_id: "run".to_string(),
        condition_id: "c".to_string(),
        phase: Phase::Load,
        repeat: 0,
        probe_id: "p".to_string(),
        role: Model::Efficient,
        model: "m".to_string(),
        planned_n: 1000,
        planned_f: 0.0,
        background: Background::default(),
        observed: ObservedFields {
            n: Some(1000),
            k: Some(0),
            r: Some(0),
            prefill_tokens_booked: Some(0),
            prefill_capacity_tokens: Some(8192),
            p: Some(0.0),
            host_overlap_tokens: None,
            disk_overlap_tokens: None,
            effective_prefill_tokens: None,
            decode_blocks: None,
            kv_capacity_blocks: None,
            pool_pending_requests: None,
            pool_pending_tokens: None,
            schedulable: Some(true),
            worker_id: Some(1),
            dp_rank: Some(0),
            endpoint: None,
            routing_group: None,
            observed_at_unix_ms: Some(0.0),
            query_duration_ms: None,
        },
        sent_at_unix_ms: 0.0,
        reserved_worker_id: Some(1),
        reserved_dp_rank: Some(0),
        advisory_worker_id: None,
        advisory_dp_rank: None,
        advisory_k: None,
        advisory_r: None,
        advisory_p: None,
        pick_differs: None,
        served_worker_id: Some(1),
        served_dp_rank: None,
        ttft_ms: Some(100.0),
        server_ttft_ms: None,
        client_server_gap_ms: None,
        e2e_ms: None,
        prompt_tokens: Some(1000),
        output_tokens: Some(1),
        cached_tokens: Some(0),
        status: Status::Ok,
        error_class: None,
        error_message: None,
        attempts: 1,
    }
}
