//! # Sequential study: an adaptive collection that stops when the answer is known, against the
//! fixed plan, on the coverage study's worlds
//!
//! Each study draws conditions of a generated world (`common/world.rs`: the coverage study's
//! worlds, plus *null*, where both models are equally fast everywhere so the true change is
//! exactly 0) and measures the change of one candidate rule (the "sd 8 ms" one) versus Stage:
//!
//! - **fixed**: G conditions × 6 paired probes, then the studentized 95 % interval
//!   (`GroupDraws::mean_changes_studentized`, the variant table's method); its verdict is *gain*
//!   / *loss* when the interval excludes zero, *no useful gain* when it lies within ±ε, else
//!   *open*;
//! - **adaptive**: conditions in random order, `r` paired probes each, in rounds of B
//!   conditions; after each round the asymptotic confidence sequence
//!   (`sy_stats::sequential`, Waudby-Smith et al. 2024) of the per-condition changes, and a stop
//!   as soon as its verdict is not *open*, or when the fixed plan's probes are spent (*open*:
//!   the question stays open); with `verdict_bounded`, what `sy-collect --adaptive` runs (a rule
//!   that never acted needs the attainable change, the per-probe oracle's, within ε for *no
//!   useful gain*; the candidate rule here acts in every world);
//! - **naive**: the same rounds, but a fixed-sample Student-t interval recomputed after every
//!   round and acted on at the first verdict: what repeated looks do to an interval that is not
//!   built for them.
//!
//! Per design: probes to the stop (mean, and the share of the fixed plan's), the verdicts, the
//! *wrong* verdicts (gain when the truth ≥ 0, loss when ≤ 0, no useful gain when |truth| > ε),
//! and the coverage of the truth by the interval at the stop, each rate with its Wilson 95 %
//! interval.
//!
//! ```text
//! cargo bench -p sy-stats --bench sequential_study -- [--studies 1000] [--conditions 120]
//!     [--repeats 2] [--round 10] [--epsilon 2] [--design-n 60] [--min-n 20] [--out FILE]
//! scripts/adaptive-study.sh     # the same, writing target/adaptive-study.md
//! ```

use std::fmt::Write as _;

use sy_stats::sequential::{SequentialConfig, Verdict, confidence_sequence, verdict_bounded};
use sy_stats::{BootstrapConfig, GroupDraws, Interval};

#[path = "common/world.rs"]
mod world;
use world::*;

/// The rule whose change is measured (the coverage study's fixed candidate).
const RULE: usize = 1;
const TRUTH_CONDITIONS: usize = 200_000;

const NULL: Effect = Effect {
    name: "null",
    helps: 1.0,
    gain_median: 0.0,
    gain_log_sd: 0.0,
};

#[derive(Clone, Copy)]
struct Settings {
    studies: u64,
    conditions: usize,
    repeats: usize,
    round: usize,
    epsilon: f64,
    seq: SequentialConfig,
    resamples: u32,
}

/// What one design did in one study.
#[derive(Clone, Copy)]
struct Outcome {
    probes: u64,
    verdict: Verdict,
    covered: bool,
}

#[derive(Clone, Copy, Default)]
struct Rate {
    k: u64,
    n: u64,
}

impl Rate {
    fn add(&mut self, hit: bool) {
        self.k += u64::from(hit);
        self.n += 1;
    }
    fn merge(&mut self, o: &Rate) {
        self.k += o.k;
        self.n += o.n;
    }
    fn cell(&self) -> String {
        world::rate_cell(self.k, self.n)
    }
}

#[derive(Clone, Copy, Default)]
struct Tally {
    probes: u64,
    n: u64,
    decided: Rate,
    wrong: Rate,
    covered: Rate,
    /// The same verdict as the fixed plan's on the same world (a study of its own).
    agrees: Rate,
    verdicts: [u64; 4],
}

impl Tally {
    fn add(&mut self, o: &Outcome, truth: f64, epsilon: f64) {
        self.probes += o.probes;
        self.n += 1;
        self.decided.add(o.verdict.is_decided());
        let wrong = match o.verdict {
            Verdict::Gain => truth >= 0.0,
            Verdict::Loss => truth <= 0.0,
            Verdict::NoUsefulGain => truth.abs() > epsilon,
            Verdict::Open => false,
        };
        self.wrong.add(wrong);
        self.covered.add(o.covered);
        self.verdicts[match o.verdict {
            Verdict::Gain => 0,
            Verdict::Loss => 1,
            Verdict::NoUsefulGain => 2,
            Verdict::Open => 3,
        }] += 1;
    }
    fn merge(&mut self, o: &Tally) {
        self.probes += o.probes;
        self.n += o.n;
        self.decided.merge(&o.decided);
        self.wrong.merge(&o.wrong);
        self.covered.merge(&o.covered);
        self.agrees.merge(&o.agrees);
        for (a, b) in self.verdicts.iter_mut().zip(&o.verdicts) {
            *a += b;
        }
    }
    fn mean_probes(&self) -> f64 {
        self.probes as f64 / self.n.max(1) as f64
    }
}

fn fixed_verdict(i: &Interval, epsilon: f64) -> Verdict {
    if i.hi < 0.0 {
        Verdict::Gain
    } else if i.lo > 0.0 {
        Verdict::Loss
    } else if i.lo >= -epsilon && i.hi <= epsilon {
        Verdict::NoUsefulGain
    } else {
        Verdict::Open
    }
}

/// Per condition: the mean over its first `repeats` probes of `value(probe)`.
fn condition_means(p: &Probes, repeats: usize, value: impl Fn(usize) -> f64) -> Vec<f64> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < p.ids.len() {
        let id = p.ids[i];
        let mut j = i;
        let (mut sum, mut k) = (0.0, 0usize);
        while j < p.ids.len() && p.ids[j] == id {
            if k < repeats {
                sum += value(j);
                k += 1;
            }
            j += 1;
        }
        out.push(sum / k.max(1) as f64);
        i = j;
    }
    out
}

/// Student-t interval of a mean (the naive repeated look).
fn t_interval(x: &[f64]) -> (f64, f64) {
    let n = x.len() as f64;
    let m = x.iter().sum::<f64>() / n;
    let sd = (x.iter().map(|v| (v - m).powi(2)).sum::<f64>() / (n - 1.0)).sqrt();
    let q = sy_stats::student::t_quantile(0.975, n - 1.0);
    (m - q * sd / n.sqrt(), m + q * sd / n.sqrt())
}

fn one_study(s: Scenario, st: &Settings, truth: f64, seed: u64) -> [Outcome; 3] {
    // The fixed plan.
    let fixed_probes = (st.conditions * REPEATS) as u64;
    let p = generate(s, st.conditions, &mut Rng::new(seed));
    let cfg = BootstrapConfig {
        resamples: st.resamples,
        level: 0.95,
        seed,
    };
    let fixed = GroupDraws::new(&p.ids, &cfg)
        .ok()
        .and_then(|d| {
            d.mean_changes_studentized(&[&p.cand[RULE]], &p.stage)
                .each
                .into_iter()
                .next()
        })
        .and_then(Result::ok);
    let fixed = match fixed {
        Some(i) => Outcome {
            probes: fixed_probes,
            verdict: fixed_verdict(&i, st.epsilon),
            covered: i.contains(truth),
        },
        None => Outcome {
            probes: fixed_probes,
            verdict: Verdict::Open,
            covered: false,
        },
    };
    // The adaptive and the naive designs: the same stream of conditions (another draw).
    let most = (fixed_probes as usize) / st.repeats;
    let stream = generate(s, most, &mut Rng::new(seed ^ 0x5eed_0000_0000));
    // The rule's change, and the attainable one (the per-probe oracle's: what `sy-collect
    // --adaptive` bounds a *no useful gain* answer with).
    let x = condition_means(&stream, st.repeats, |j| {
        stream.cand[RULE][j] - stream.stage[j]
    });
    let xo = condition_means(&stream, st.repeats, |j| {
        (stream.oracle[j] - stream.stage[j]).min(0.0)
    });
    let mut adaptive = None;
    let mut naive = None;
    let mut t = st.round;
    loop {
        let t_now = t.min(x.len());
        let seen = &x[..t_now];
        if adaptive.is_none()
            && let Ok(cs) = confidence_sequence(seen, &st.seq)
            && let Ok(v) = verdict_bounded(
                &cs,
                confidence_sequence(&xo[..t_now], &st.seq).ok().as_ref(),
                st.epsilon,
                &st.seq,
            )
            && (v.is_decided() || t_now == x.len())
        {
            adaptive = Some(Outcome {
                probes: (t_now * st.repeats) as u64,
                verdict: v,
                covered: cs.contains(truth),
            });
        }
        if naive.is_none() && t_now >= st.seq.min_n as usize {
            let (lo, hi) = t_interval(seen);
            let i = Interval {
                estimate: 0.0,
                lo,
                hi,
                level: 0.95,
                resamples: 0,
                groups: 0,
            };
            let v = fixed_verdict(&i, st.epsilon);
            if v.is_decided() || t_now == x.len() {
                naive = Some(Outcome {
                    probes: (t_now * st.repeats) as u64,
                    verdict: v,
                    covered: i.contains(truth),
                });
            }
        }
        if (adaptive.is_some() && naive.is_some()) || t_now == x.len() {
            break;
        }
        t += st.round;
    }
    let open = Outcome {
        probes: (x.len() * st.repeats) as u64,
        verdict: Verdict::Open,
        covered: false,
    };
    [fixed, adaptive.unwrap_or(open), naive.unwrap_or(open)]
}

fn run_cell(s: Scenario, st: &Settings, truth: f64, base: u64) -> [Tally; 3] {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(4) as u64;
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|w| {
                scope.spawn(move || {
                    let mut t = [Tally::default(); 3];
                    for i in (w..st.studies).step_by(threads as usize) {
                        let o = one_study(s, st, truth, base + i);
                        for (a, b) in t.iter_mut().zip(&o) {
                            a.add(b, truth, st.epsilon);
                            a.agrees.add(b.verdict == o[0].verdict);
                        }
                    }
                    t
                })
            })
            .collect();
        let mut t = [Tally::default(); 3];
        for h in handles {
            if let Ok(part) = h.join() {
                for (a, b) in t.iter_mut().zip(&part) {
                    a.merge(b);
                }
            }
        }
        t
    })
}

fn arg<T: std::str::FromStr>(args: &[String], name: &str, default: T) -> T {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let st = Settings {
        studies: arg(&args, "--studies", 1000),
        conditions: arg(&args, "--conditions", 120),
        repeats: arg(&args, "--repeats", 2usize).clamp(1, REPEATS),
        round: arg(&args, "--round", 10usize).max(1),
        epsilon: arg(&args, "--epsilon", 2.0),
        seq: SequentialConfig {
            alpha: 0.05,
            design_n: arg(&args, "--design-n", 60.0),
            min_n: arg(&args, "--min-n", 20),
        },
        resamples: arg(&args, "--resamples", 2000),
    };
    let out: String = arg(&args, "--out", String::new());
    let started = std::time::Instant::now();
    let mut md = String::new();
    let _ = writeln!(
        md,
        "Adaptive collection against the fixed plan: {} studies per row; fixed = {} conditions × {REPEATS} paired probes ({} probes), studentized 95 % interval; adaptive = rounds of {} conditions × {} probes, asymptotic confidence sequence (α 0.05, t* {}, no verdict before {} conditions), stop at the first verdict or at the fixed plan's probes; naive = the same rounds with a Student-t interval at every look; ε = {} ms. Rates with Wilson 95 % intervals. `cargo bench -p sy-stats --bench sequential_study -- --studies {} --conditions {} --repeats {} --round {} --epsilon {} --design-n {} --min-n {}`.\n",
        st.studies,
        st.conditions,
        st.conditions * REPEATS,
        st.round,
        st.repeats,
        st.seq.design_n,
        st.seq.min_n,
        st.epsilon,
        st.studies,
        st.conditions,
        st.repeats,
        st.round,
        st.epsilon,
        st.seq.design_n,
        st.seq.min_n,
    );
    md.push_str("| effect | noise | truth (ms) | design | probes (mean) | share of fixed | decided | gain / loss / no useful gain / open | wrong verdicts | interval covers the truth | same verdict as fixed |\n|---|---|---|---|---|---|---|---|---|---|---|\n");
    let mut pooled = [Tally::default(); 3];
    let mut seed = 1u64;
    let worlds: Vec<Effect> = EFFECTS.iter().copied().chain([NULL]).collect();
    for effect in worlds {
        for heavy in [false, true] {
            let s = Scenario { effect, heavy };
            let truth = truth(s, 0xface_0000 + seed, TRUTH_CONDITIONS)[RULE].mean_change;
            let truth = if effect.name == "null" { 0.0 } else { truth };
            let t = run_cell(s, &st, truth, seed << 32);
            seed += 1;
            let fixed_probes = t[0].mean_probes();
            for (name, d) in ["fixed", "adaptive", "naive"].iter().zip(&t) {
                let _ = writeln!(
                    md,
                    "| {} | {} | {truth:.2} | {name} | {:.0} | {:.0} % | {} | {} | {} | {} | {} |",
                    effect.name,
                    if heavy { "heavy" } else { "log-normal" },
                    d.mean_probes(),
                    100.0 * d.mean_probes() / fixed_probes,
                    d.decided.cell(),
                    d.verdicts
                        .iter()
                        .map(u64::to_string)
                        .collect::<Vec<_>>()
                        .join(" / "),
                    d.wrong.cell(),
                    d.covered.cell(),
                    d.agrees.cell(),
                );
            }
            for (a, b) in pooled.iter_mut().zip(&t) {
                a.merge(b);
            }
            eprintln!("{} {heavy} done at {:.0?}", effect.name, started.elapsed());
        }
    }
    let _ = writeln!(
        md,
        "\nAll worlds pooled: fixed {:.0} probes, wrong {}, covers {}; adaptive {:.0} probes ({:.0} %), wrong {}, covers {}; naive {:.0} probes, wrong {}, covers {}.\n\n{:.0?}.",
        pooled[0].mean_probes(),
        pooled[0].wrong.cell(),
        pooled[0].covered.cell(),
        pooled[1].mean_probes(),
        100.0 * pooled[1].mean_probes() / pooled[0].mean_probes(),
        pooled[1].wrong.cell(),
        pooled[1].covered.cell(),
        pooled[2].mean_probes(),
        pooled[2].wrong.cell(),
        pooled[2].covered.cell(),
        started.elapsed()
    );
    print!("{md}");
    if !out.is_empty()
        && let Err(e) = std::fs::write(&out, &md)
    {
        eprintln!("cannot write {out}: {e}");
        std::process::exit(1);
    }
}
