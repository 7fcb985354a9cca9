//! The generated calibration worlds of the coverage study, shared by the studies in
//! `benches/` (`coverage_study`, `sequential_study`): conditions with a known truth, four
//! candidate rules, Stage and the per-probe oracle (see `coverage_study.rs` for the worlds).

#![allow(dead_code)]

pub const REPEATS: usize = 6;
pub const CANDIDATE_NOISE_MS: [f64; 4] = [3.0, 8.0, 15.0, 30.0];
pub const P90: f64 = 0.9;

pub struct Rng(pub u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        let mut r = Rng(seed ^ 0x9e37_79b9_7f4a_7c15);
        r.next();
        r
    }
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    pub fn uniform(&mut self) -> f64 {
        ((self.next() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }
    pub fn normal(&mut self) -> f64 {
        let (u, v) = (self.uniform(), self.uniform());
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }
}

#[derive(Clone, Copy)]
pub struct Effect {
    pub name: &'static str,
    pub helps: f64,
    pub gain_median: f64,
    pub gain_log_sd: f64,
}

pub const EFFECTS: [Effect; 5] = [
    Effect {
        name: "dense",
        helps: 0.9,
        gain_median: 12.0,
        gain_log_sd: 0.6,
    },
    Effect {
        name: "sparse",
        helps: 0.27,
        gain_median: 35.0,
        gain_log_sd: 0.5,
    },
    Effect {
        name: "concentrated",
        helps: 0.27,
        gain_median: 20.0,
        gain_log_sd: 1.0,
    },
    Effect {
        name: "extreme",
        helps: 0.27,
        gain_median: 12.0,
        gain_log_sd: 1.5,
    },
    Effect {
        name: "none",
        helps: 0.27,
        gain_median: 0.0,
        gain_log_sd: 0.0,
    },
];

#[derive(Clone, Copy)]
pub struct Scenario {
    pub effect: Effect,
    pub heavy: bool,
}

/// Conditions' probes: Stage, the four candidates and the oracle per probe, with condition ids.
#[derive(Default)]
pub struct Probes {
    pub stage: Vec<f64>,
    pub cand: [Vec<f64>; 4],
    pub oracle: Vec<f64>,
    pub ids: Vec<u32>,
}

pub fn noise(rng: &mut Rng, heavy: bool) -> f64 {
    let mut m = (0.15 * rng.normal()).exp();
    if heavy && rng.uniform() < 0.05 {
        // Pareto(x_m = 0.5, α = 2.5): an occasional slow probe, up to several times its level.
        m *= 1.0 + 0.5 * rng.uniform().powf(-1.0 / 2.5);
    }
    m
}

pub fn generate(s: Scenario, conditions: usize, rng: &mut Rng) -> Probes {
    let mut p = Probes::default();
    for g in 0..conditions {
        let level = 60.0 * (0.5 * rng.normal()).exp();
        let (eff, cap) = if rng.uniform() < s.effect.helps {
            let gain = s.effect.gain_median * (s.effect.gain_log_sd * rng.normal()).exp();
            // A zero gain: both models equally fast; the candidates act on half such conditions.
            (level + gain, level)
        } else {
            (level, level + 20.0 * (0.5 * rng.normal()).exp())
        };
        let acts: Vec<bool> = CANDIDATE_NOISE_MS
            .iter()
            .map(|sd| (eff - cap) + sd * rng.normal() > 0.0)
            .collect();
        for _ in 0..REPEATS {
            let (e, c) = (eff * noise(rng, s.heavy), cap * noise(rng, s.heavy));
            p.stage.push(e);
            for (k, a) in acts.iter().enumerate() {
                p.cand[k].push(if *a { c } else { e });
            }
            p.oracle.push(e.min(c));
            p.ids.push(g as u32);
        }
    }
    p
}

/// Per candidate: mean change, p90 change and regret.
#[derive(Clone, Copy, Default)]
pub struct Truth {
    pub mean_change: f64,
    pub p90_change: f64,
    pub regret: f64,
    /// The candidate's own mean and 90th percentile of selected TTFT (the report's levels).
    pub mean: f64,
    pub p90: f64,
}

pub fn truth(s: Scenario, seed: u64, conditions: usize) -> [Truth; 4] {
    let p = generate(s, conditions, &mut Rng::new(seed));
    let n = p.stage.len() as f64;
    let mean = |v: &[f64]| v.iter().sum::<f64>() / n;
    let (stage_mean, oracle_mean) = (mean(&p.stage), mean(&p.oracle));
    let stage_p90 = quantile(&p.stage, P90);
    std::array::from_fn(|k| Truth {
        mean_change: mean(&p.cand[k]) - stage_mean,
        p90_change: quantile(&p.cand[k], P90) - stage_p90,
        regret: mean(&p.cand[k]) - oracle_mean,
        mean: mean(&p.cand[k]),
        p90: quantile(&p.cand[k], P90),
    })
}

/// A share with its Wilson 95 % interval, as the studies' tables print it ("—" for no trials).
pub fn rate_cell(k: u64, n: u64) -> String {
    if n == 0 {
        return "—".into();
    }
    let (lo, hi) = sy_stats::binomial::wilson(k, n, 0.95);
    format!(
        "{:.1} % ({:.1}–{:.1})",
        100.0 * k as f64 / n as f64,
        100.0 * lo,
        100.0 * hi
    )
}

/// The `q`-quantile of unsorted values (NaN when empty): the runtime crate's quantile.
fn quantile(values: &[f64], q: f64) -> f64 {
    sy_selector::quantile_unsorted(&mut values.to_vec(), q).unwrap_or(f64::NAN)
}
