//! Generating records from a [`SynthSpec`]: Q-grid probes at every grid point, load-phase
//! conditions at random, both candidates of every probe.

use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::*;

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
        // Not reserved: no worker booked, none reported as serving.
        reserved_worker_id: None,
        reserved_dp_rank: None,
        served_worker_id: None,
        ttft_ms: Some(ttft),
        e2e_ms: Some(ttft + 50.0),
        prompt_tokens: Some(obs.n),
        output_tokens: Some(16),
        cached_tokens: Some(obs.k),
        // No advisory pick, server timing or error; ok on the first attempt.
        ..template_record()
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
