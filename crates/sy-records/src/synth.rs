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

use crate::record::Model;
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::record::{Background, ObservedFields, Phase, RECORD_SCHEMA_VERSION, Record, Status};

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

fn gaussian(rng: &mut ChaCha8Rng) -> f64 {
    // Box–Muller.
    let u1: f64 = rng.random::<f64>().max(f64::MIN_POSITIVE);
    let u2: f64 = rng.random::<f64>();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

struct Obs {
    n: u64,
    k: u64,
    r: u64,
    booked: u64,
}

#[allow(clippy::too_many_arguments)]
fn make_record(
    spec: &SynthSpec,
    rng: &mut ChaCha8Rng,
    phase: Phase,
    condition_id: &str,
    repeat: u32,
    probe_id: &str,
    role: Model,
    planned_n: u64,
    planned_f: f64,
    background: &Background,
    obs: &Obs,
    sent_at: f64,
) -> Record {
    let m = spec.model(role);
    let n = obs.n as f64;
    let f = obs.k as f64 / n;
    let p = obs.booked as f64 / m.prefill_capacity_tokens as f64;
    let load = if phase == Phase::Qgrid {
        0.0
    } else {
        m.load_true(n, obs.r as f64, p)
    };
    let ttft = (m.q_true(n, f) + load + m.noise_sd_ms * gaussian(rng)).max(0.1);
    Record {
        schema_version: RECORD_SCHEMA_VERSION,
        run_id: spec.run_id.clone(),
        condition_id: condition_id.to_string(),
        phase,
        repeat,
        probe_id: probe_id.to_string(),
        role,
        model: m.name.clone(),
        planned_n,
        planned_f,
        background: background.clone(),
        observed: ObservedFields {
            n: Some(obs.n),
            k: Some(obs.k),
            r: Some(obs.r),
            prefill_tokens_booked: Some(obs.booked),
            prefill_capacity_tokens: Some(m.prefill_capacity_tokens),
            p: Some(p),
            host_overlap_tokens: Some(0),
            disk_overlap_tokens: Some(0),
            effective_prefill_tokens: Some(obs.n - obs.k),
            decode_blocks: Some(obs.r * 64),
            kv_capacity_blocks: Some(65_536),
            pool_pending_requests: Some(0),
            pool_pending_tokens: Some(0),
            schedulable: Some(true),
            worker_id: Some(match role {
                Model::Efficient => 0xE000_0000_0000_0001,
                Model::Capable => 0xC000_0000_0000_0001,
            }),
            dp_rank: Some(0),
            endpoint: None,
            routing_group: None,
            observed_at_unix_ms: Some(sent_at - 2.0),
            query_duration_ms: Some(1.5),
        },
        sent_at_unix_ms: sent_at,
        reserved_worker_id: None,
        reserved_dp_rank: None,
        advisory_worker_id: None,
        advisory_dp_rank: None,
        advisory_k: None,
        advisory_r: None,
        advisory_p: None,
        pick_differs: None,
        served_worker_id: None,
        served_dp_rank: None,
        ttft_ms: Some(ttft),
        server_ttft_ms: None,
        client_server_gap_ms: None,
        e2e_ms: Some(ttft + 50.0),
        prompt_tokens: Some(obs.n),
        output_tokens: Some(16),
        cached_tokens: Some(obs.k),
        status: Status::Ok,
        error_class: None,
        error_message: None,
        attempts: 1,
    }
}

/// Generates the records of `spec`: Q-grid probes first, then the load-phase conditions.
pub fn generate(spec: &SynthSpec) -> Vec<Record> {
    let mut rng = ChaCha8Rng::seed_from_u64(spec.seed);
    let mut out = Vec::with_capacity(spec.record_count());
    let mut clock = 1.7e12;
    let quiet = Background {
        target: "none".to_string(),
        ..Background::default()
    };
    let mut probe = 0u64;
    for &n in &spec.q_n_axis {
        for &f in &spec.q_f_axis {
            let condition_id = format!("q-n{n}-f{f}");
            let k = ((f * n as f64).round() as u64).min(n);
            for rep in 0..spec.q_repeats {
                probe += 1;
                let probe_id = format!("q{probe}");
                clock += 100.0;
                for role in [Model::Efficient, Model::Capable] {
                    let obs = Obs {
                        n,
                        k,
                        r: 0,
                        booked: 0,
                    };
                    out.push(make_record(
                        spec,
                        &mut rng,
                        Phase::Qgrid,
                        &condition_id,
                        rep,
                        &probe_id,
                        role,
                        n,
                        f,
                        &quiet,
                        &obs,
                        clock,
                    ));
                }
            }
        }
    }
    let n_lo = spec.q_n_axis.first().copied().unwrap_or(1).max(1) as f64;
    let n_hi = spec.q_n_axis.last().copied().unwrap_or(1).max(1) as f64;
    let f_hi = spec.q_f_axis.last().copied().unwrap_or(0.0);
    for c in 0..spec.conditions {
        let condition_id = format!("c{c:06}");
        // log-uniform N, uniform f, a background mix.
        let n = (n_lo * (n_hi / n_lo).powf(rng.random::<f64>())).round() as u64;
        let n = n.clamp(n_lo as u64, n_hi as u64);
        let f = rng.random::<f64>() * f_hi;
        let background = Background {
            prefill_requests: rng.random_range(0..5),
            prefill_prompt_tokens: 4096,
            decode_requests: rng.random_range(0..9),
            decode_output_tokens: if rng.random_bool(0.5) { 64 } else { 2048 },
            decode_length: Some(if c % 2 == 0 { "short" } else { "long" }.to_string()),
            busy_capable: rng.random_bool(0.3),
            target: spec.contention.draw(&mut rng).to_string(),
        };
        let k = ((f * n as f64).round() as u64).min(n);
        for rep in 0..spec.repeats {
            probe += 1;
            let probe_id = format!("p{probe}");
            clock += 250.0;
            for role in [Model::Efficient, Model::Capable] {
                let busy = u64::from(role == Model::Capable && background.busy_capable) * 6;
                let loaded = u64::from(loads(&background.target, role));
                let r = loaded
                    * (u64::from(background.prefill_requests)
                        + u64::from(background.decode_requests))
                    + busy
                    + rng.random_range(0..3);
                let booked = (loaded as f64
                    * f64::from(background.prefill_requests)
                    * background.prefill_prompt_tokens as f64
                    * rng.random_range(0.3..1.0)) as u64;
                let obs = Obs { n, k, r, booked };
                out.push(make_record(
                    spec,
                    &mut rng,
                    Phase::Load,
                    &condition_id,
                    rep,
                    &probe_id,
                    role,
                    n,
                    f,
                    &background,
                    &obs,
                    clock,
                ));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generates_the_promised_records_deterministically() {
        let spec = SynthSpec {
            conditions: 20,
            repeats: 3,
            ..SynthSpec::default()
        };
        let a = generate(&spec);
        assert_eq!(a.len(), spec.record_count());
        assert_eq!(a, generate(&spec));
        for r in &a {
            assert!(crate::load::validate_record(r).is_ok(), "{r:?}");
        }
        assert!(crate::pair_indices(&a).is_ok());
    }

    /// The truth of a record without noise (what the generator adds noise to).
    fn true_ttft(spec: &SynthSpec, r: &Record) -> f64 {
        let m = spec.model(r.role);
        let o = &r.observed;
        let n = o.n.unwrap_or(0) as f64;
        let f = o.k.unwrap_or(0) as f64 / n;
        m.q_true(n, f) + m.load_true(n, o.r.unwrap_or(0) as f64, o.p.unwrap_or(0.0))
    }

    /// 300 conditions of 2 repeats with `contention`, and their records.
    fn generated(contention: Contention) -> (SynthSpec, Vec<Record>) {
        let spec = SynthSpec {
            conditions: 300,
            repeats: 2,
            contention,
            ..SynthSpec::default()
        };
        let records = generate(&spec);
        (spec, records)
    }

    #[test]
    fn targeted_contention_loads_only_the_target_and_sometimes_makes_capable_faster() {
        let (spec, records) = generated(Contention::Targeted);
        let load: Vec<&Record> = records.iter().filter(|r| r.phase == Phase::Load).collect();
        for target in ["efficient", "capable", "both"] {
            assert!(
                load.iter().any(|r| r.background.target == target),
                "{target}"
            );
        }
        for r in &load {
            let bg = &r.background;
            let busy = u64::from(r.role == Model::Capable && bg.busy_capable) * 6;
            let own = u64::from(bg.prefill_requests) + u64::from(bg.decode_requests);
            let extra = r.observed.r.unwrap_or(0) - busy;
            if loads(&bg.target, r.role) {
                assert!((own..own + 3).contains(&extra), "{r:?}");
            } else {
                assert!(extra < 3, "{r:?}");
                assert_eq!(r.observed.prefill_tokens_booked, Some(0), "{r:?}");
            }
        }
        // Pairs are written efficient then capable: capable is truly faster for some turns,
        // never when both models carry the background.
        let faster = |target: &str| {
            load.chunks_exact(2)
                .filter(|p| p[0].background.target == target)
                .filter(|p| true_ttft(&spec, p[1]) < true_ttft(&spec, p[0]))
                .count()
        };
        assert!(faster("efficient") > 0);
        assert_eq!(faster("both"), 0);
        assert_eq!(faster("capable"), 0);
    }

    #[test]
    fn both_contention_never_makes_capable_faster() {
        let (spec, records) = generated(Contention::default());
        let load: Vec<&Record> = records.iter().filter(|r| r.phase == Phase::Load).collect();
        assert!(load.iter().all(|r| r.background.target == "both"));
        assert!(
            load.chunks_exact(2)
                .all(|p| true_ttft(&spec, p[1]) >= true_ttft(&spec, p[0]))
        );
    }
}
