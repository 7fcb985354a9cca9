//! # Coverage study: do the calibration's intervals cover a known truth?
//!
//! Generates calibration studies whose true answer is known and counts how often each interval
//! that `sy-select` prints covers it: the change of mean selected TTFT versus Stage (percentile
//! and studentized; the latter on its own and simultaneous over the four compared variants, for
//! the variant the choice picked, at 97.5 % as reported and beside it the other candidate
//! methods: equal tails at 95 %, unequal tails directed by the skew), the change of the 90th
//! percentile (percentile), the regret versus the per-probe oracle (percentile and
//! studentized), the variant table's levels (mean: percentile and studentized; p90:
//! percentile) and the margins' δ (percentile, beside the distribution-free order-statistic
//! interval). Each rate is printed with its Wilson 95 % interval (and Clopper–Pearson for the
//! headline), each candidate with its mean width.
//!
//! Run (release, about a minute per 1,000 studies on two cores):
//!
//! ```text
//! cargo bench -p sy-stats --bench coverage_study -- [--studies 1000] [--resamples 2000] [--out FILE]
//! scripts/coverage-study.sh            # the same, writing target/coverage-study.md
//! ```
//!
//! ## The generated world
//!
//! A study has G selection-split conditions (30, 60, 120) of 6 paired probes each. A condition's
//! efficient model has a load level; in a share ρ of conditions the capable model is faster (the
//! rule *helps* there) by a gain drawn from a log-normal, otherwise it is slower. Four candidate
//! rules see the true advantage through noise of their own (sd 3, 8, 15, 30 ms) and switch a
//! condition to capable when the seen advantage is positive; Stage never switches; the oracle
//! takes the faster model per probe. Each probe's TTFT is its model's level times noise:
//! log-normal (sd 0.15), or the same with a 5 % chance of a Pareto(α 2.5) spike (*heavy*).
//!
//! | effect | ρ | gain (median, log-sd) | what it stands for |
//! |---|---|---|---|
//! | dense | 0.9 | 12 ms, 0.6 | the rule helps almost everywhere |
//! | sparse | 0.27 | 35 ms, 0.5 | helps in about a quarter of conditions (9 of 33 on the committed dataset) |
//! | concentrated | 0.27 | 20 ms, 1.0 | as sparse, but a few conditions carry most of the effect (the top 5 of 9 carry 84 % on average; 74 % on the committed dataset) |
//! | extreme | 0.27 | 12 ms, 1.5 | beyond the committed dataset: the top 5 of 9 carry 91 % |
//! | none | 0.27 | 0 ms | where the rule acts the two models are equally fast: its changes are noise |
//!
//! The truth of each scenario is computed once from 200,000 generated conditions. A study's
//! interval *covers* when the truth lies inside it.

use std::fmt::Write as _;

use sy_stats::binomial::clopper_pearson;
use sy_stats::{
    BootstrapConfig, GroupDraws, Interval, Side, Tails, bootstrap_quantile, tail_groups,
};

/// The candidate whose interval is checked without a choice (the "sd 8 ms" rule).
const FIXED: usize = 1;
const TRUTH_CONDITIONS: usize = 200_000;

#[path = "common/world.rs"]
mod world;
use world::*;

/// Coverage counts of one interval.
#[derive(Clone, Copy, Default)]
struct Count {
    covered: u64,
    n: u64,
    width: f64,
}

impl Count {
    fn add(&mut self, i: Option<&Interval>, truth: f64) {
        self.n += 1;
        if let Some(i) = i {
            self.covered += u64::from(i.contains(truth));
            self.width += i.hi - i.lo;
        }
    }
    fn merge(&mut self, o: &Count) {
        self.covered += o.covered;
        self.n += o.n;
        self.width += o.width;
    }
    fn cell(&self) -> String {
        world::rate_cell(self.covered, self.n)
    }
    /// The cell with the intervals' mean width.
    fn cell_width(&self) -> String {
        if self.n == 0 {
            return "—".into();
        }
        format!("{}, {:.1}", self.cell(), self.width / self.n as f64)
    }
}

/// The headline's candidate methods, all max-t simultaneous over the four compared candidates
/// from the same resamples; they differ in the tails (see [`headline_tails`]).
const HEADLINE: [&str; 5] = [
    "equal tails 95 %",
    "equal tails 97.5 % (reported)",
    "95 %, 1.25 % on the skew side",
    "95 %, 1.25 % below",
    "96.25 %, 1.25 % on the skew side",
];

/// The tails of headline candidate `m` given the side of the residuals' skew.
fn headline_tails(m: usize, skew_side: Option<Side>) -> Tails {
    let side = skew_side.unwrap_or(Side::Lower);
    match m {
        0 => Tails::equal(0.95),
        1 => Tails::equal(sy_stats::selection_adjusted_level(0.95)),
        2 => Tails::unequal(0.95, side, 0.25),
        3 => Tails::unequal(0.95, Side::Lower, 0.25),
        _ => match side {
            Side::Lower => Tails {
                lower: 0.0125,
                upper: 0.025,
            },
            Side::Upper => Tails {
                lower: 0.025,
                upper: 0.0125,
            },
        },
    }
}

/// Alternatives measured beside the shipped methods, on the fixed candidate's mean change (the
/// same per-condition totals; a resampling of their own): a Student-t interval over conditions
/// (G − 1 degrees of freedom) and the symmetric studentized interval θ̂ ± q95(|t*|)·se.
fn alternatives(d: &[(f64, f64)], resamples: u32, seed: u64) -> (Interval, Interval) {
    let g = d.len();
    let theta_se = |idx: &[usize]| {
        let (sd, sn): (f64, f64) = idx
            .iter()
            .fold((0.0, 0.0), |a, &i| (a.0 + d[i].0, a.1 + d[i].1));
        let th = sd / sn;
        let ss: f64 = idx.iter().map(|&i| (d[i].0 - th * d[i].1).powi(2)).sum();
        let gf = idx.len() as f64;
        (th, (gf / (gf - 1.0) * ss).sqrt() / sn)
    };
    let all: Vec<usize> = (0..g).collect();
    let (th, se) = theta_se(&all);
    let nu = (g - 1) as f64;
    let z = 1.959_963_984_540_054_f64;
    let tq = z
        + (z.powi(3) + z) / (4.0 * nu)
        + (5.0 * z.powi(5) + 16.0 * z.powi(3) + 3.0 * z) / (96.0 * nu * nu);
    let mk = |lo: f64, hi: f64| Interval {
        estimate: th,
        lo,
        hi,
        level: 0.95,
        resamples,
        groups: g as u32,
    };
    let t_iv = mk(th - tq * se, th + tq * se);
    let mut rng = Rng::new(seed ^ 0xa1);
    let mut abs_t = Vec::with_capacity(resamples as usize);
    let mut idx = vec![0usize; g];
    for _ in 0..resamples {
        for x in idx.iter_mut() {
            *x = (rng.next() % g as u64) as usize;
        }
        let (t, s) = theta_se(&idx);
        if s > 0.0 {
            abs_t.push(((t - th) / s).abs());
        } else if t != th {
            abs_t.push(f64::INFINITY);
        }
    }
    abs_t.sort_by(f64::total_cmp);
    let q = sy_selector::quantile_sorted(&abs_t, 0.95).unwrap_or(f64::NAN);
    (
        t_iv,
        if se > 0.0 {
            mk(th - q * se, th + q * se)
        } else {
            mk(th, th)
        },
    )
}

/// Tail-condition buckets of the p90 change: < 5, 5–9, 10–19, ≥ 20 conditions above the p90.
const TAIL_BUCKETS: [(usize, usize, &str); 4] = [
    (0, 5, "< 5"),
    (5, 10, "5–9"),
    (10, 20, "10–19"),
    (20, usize::MAX, "≥ 20"),
];

#[derive(Clone, Copy, Default)]
struct Tally {
    mean_pct: Count,
    mean_t: Count,
    chosen_pct: Count,
    chosen_t: Count,
    chosen_simultaneous: Count,
    p90_pct: Count,
    p90_by_tail: [Count; 4],
    regret_pct: Count,
    regret_t: Count,
    mean_student: Count,
    mean_symmetric: Count,
    chosen_by_changed: [Count; 4],
    tail_sum: u64,
    /// The headline's candidate methods ([`HEADLINE`]), with their misses below and above.
    headline: [Count; 5],
    headline_below: [u64; 5],
    headline_above: [u64; 5],
    /// The headline by the share of the chosen variant's |change| carried by its top 5
    /// conditions ([`SHARE_BUCKETS`]).
    chosen_by_share: [Count; 4],
    /// The fixed candidate's mean and p90 selected TTFT (percentile intervals, the variant
    /// table's levels).
    mean_level: Count,
    p90_level: Count,
    /// The fixed candidate's mean selected TTFT, studentized (its change versus zero).
    mean_level_t: Count,
    /// The p90 level by the candidate's conditions above its 90th percentile ([`TAIL_BUCKETS`]).
    p90_level_by_tail: [Count; 4],
}

impl Tally {
    fn merge(&mut self, o: &Tally) {
        for (a, b) in [
            (&mut self.mean_pct, &o.mean_pct),
            (&mut self.mean_t, &o.mean_t),
            (&mut self.chosen_pct, &o.chosen_pct),
            (&mut self.chosen_t, &o.chosen_t),
            (&mut self.chosen_simultaneous, &o.chosen_simultaneous),
            (&mut self.p90_pct, &o.p90_pct),
            (&mut self.regret_pct, &o.regret_pct),
            (&mut self.regret_t, &o.regret_t),
            (&mut self.mean_student, &o.mean_student),
            (&mut self.mean_symmetric, &o.mean_symmetric),
        ] {
            a.merge(b);
        }
        for (a, b) in self.p90_by_tail.iter_mut().zip(&o.p90_by_tail) {
            a.merge(b);
        }
        for (a, b) in self.chosen_by_changed.iter_mut().zip(&o.chosen_by_changed) {
            a.merge(b);
        }
        for (a, b) in self.chosen_by_share.iter_mut().zip(&o.chosen_by_share) {
            a.merge(b);
        }
        for m in 0..HEADLINE.len() {
            self.headline[m].merge(&o.headline[m]);
            self.headline_below[m] += o.headline_below[m];
            self.headline_above[m] += o.headline_above[m];
        }
        for (a, b) in self.p90_level_by_tail.iter_mut().zip(&o.p90_level_by_tail) {
            a.merge(b);
        }
        self.mean_level_t.merge(&o.mean_level_t);
        self.mean_level.merge(&o.mean_level);
        self.p90_level.merge(&o.p90_level);
        self.tail_sum += o.tail_sum;
    }
}

fn one_study(s: Scenario, g: usize, truth: &[Truth; 4], seed: u64, resamples: u32) -> Tally {
    let mut t = Tally::default();
    let p = generate(s, g, &mut Rng::new(seed));
    let cfg = BootstrapConfig {
        resamples,
        level: 0.95,
        seed,
    };
    let Ok(draws) = GroupDraws::new(&p.ids, &cfg) else {
        return t;
    };
    let (Ok(stage), Ok(oracle)) = (draws.series(&p.stage, P90), draws.series(&p.oracle, P90))
    else {
        return t;
    };
    let pct: Vec<_> = (p.cand.iter())
        .map(|c| {
            draws
                .series(c, P90)
                .map(|s| (draws.intervals(&s, &stage), draws.intervals(&s, &oracle)))
        })
        .collect();
    let series: Vec<&[f64]> = p.cand.iter().map(Vec::as_slice).collect();
    let studentized = draws.mean_changes_studentized(&series, &p.stage);
    let st = draws.studentized(&series, &p.stage);
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    // The choice: the candidate with the lowest mean selected TTFT on these conditions.
    let chosen = (0..4)
        .min_by(|&a, &b| mean(&p.cand[a]).total_cmp(&mean(&p.cand[b])))
        .unwrap_or(FIXED);
    let ok = |r: &Result<Interval, _>| r.as_ref().ok().copied();
    if let Some(Ok((vs_stage, vs_oracle))) = pct.get(FIXED) {
        let tr = truth[FIXED];
        t.mean_pct
            .add(ok(&vs_stage.mean_change).as_ref(), tr.mean_change);
        t.p90_pct
            .add(ok(&vs_stage.quantile_change).as_ref(), tr.p90_change);
        let tails =
            tail_groups(&p.stage, &p.ids, P90).min(tail_groups(&p.cand[FIXED], &p.ids, P90));
        t.tail_sum += tails as u64;
        for (b, (lo, hi, _)) in TAIL_BUCKETS.iter().enumerate() {
            if (*lo..*hi).contains(&tails) {
                t.p90_by_tail[b].add(ok(&vs_stage.quantile_change).as_ref(), tr.p90_change);
            }
        }
        t.regret_pct
            .add(ok(&vs_oracle.mean_change).as_ref(), tr.regret);
        t.mean_level.add(ok(&vs_stage.mean).as_ref(), tr.mean);
        t.p90_level.add(ok(&vs_stage.quantile).as_ref(), tr.p90);
        let own_tails = tail_groups(&p.cand[FIXED], &p.ids, P90);
        for (b, (lo, hi, _)) in TAIL_BUCKETS.iter().enumerate() {
            if (*lo..*hi).contains(&own_tails) {
                t.p90_level_by_tail[b].add(ok(&vs_stage.quantile).as_ref(), tr.p90);
            }
        }
        let zeros = vec![0.0; p.cand[FIXED].len()];
        let level_t = draws.mean_changes_studentized(&[&p.cand[FIXED]], &zeros);
        t.mean_level_t.add(ok(&level_t.each[0]).as_ref(), tr.mean);
    }
    t.mean_t.add(
        ok(&studentized.each[FIXED]).as_ref(),
        truth[FIXED].mean_change,
    );
    let mut totals = vec![(0.0, 0.0); g];
    for ((c, st), id) in p.cand[FIXED].iter().zip(&p.stage).zip(&p.ids) {
        let e = &mut totals[*id as usize];
        e.0 += c - st;
        e.1 += 1.0;
    }
    let (student, symmetric) = alternatives(&totals, resamples, seed);
    t.mean_student.add(Some(&student), truth[FIXED].mean_change);
    t.mean_symmetric
        .add(Some(&symmetric), truth[FIXED].mean_change);
    let regret_t = draws.mean_changes_studentized(&[&p.cand[FIXED]], &p.oracle);
    t.regret_t
        .add(ok(&regret_t.each[0]).as_ref(), truth[FIXED].regret);
    let tc = truth[chosen].mean_change;
    if let Some(Ok((vs_stage, _))) = pct.get(chosen) {
        t.chosen_pct.add(ok(&vs_stage.mean_change).as_ref(), tc);
    }
    t.chosen_t.add(ok(&studentized.each[chosen]).as_ref(), tc);
    // The reported headline: max-t at the selection-adjusted level (what sy-select prints).
    let reported = st
        .simultaneous(
            chosen,
            Tails::equal(sy_stats::selection_adjusted_level(cfg.level)),
        )
        .ok();
    t.chosen_simultaneous.add(reported.as_ref(), tc);
    let side = st.long_side(chosen);
    for m in 0..HEADLINE.len() {
        let i = st.simultaneous(chosen, headline_tails(m, side)).ok();
        t.headline[m].add(i.as_ref(), tc);
        if let Some(i) = i {
            t.headline_below[m] += u64::from(tc < i.lo);
            t.headline_above[m] += u64::from(tc > i.hi);
        }
    }
    let share = top_share(&p.cand[chosen], &p.stage, &p.ids, g);
    for (b, (lo, hi, _)) in SHARE_BUCKETS.iter().enumerate() {
        if (*lo..*hi).contains(&share) {
            t.chosen_by_share[b].add(reported.as_ref(), tc);
        }
    }
    let mut changed: Vec<u32> = (p.cand[chosen].iter().zip(&p.stage).zip(&p.ids))
        .filter(|((c, s), _)| c != s)
        .map(|(_, id)| *id)
        .collect();
    changed.dedup();
    for (b, (lo, hi, _)) in CHANGED_BUCKETS.iter().enumerate() {
        if (*lo..*hi).contains(&changed.len()) {
            t.chosen_by_changed[b].add(reported.as_ref(), tc);
        }
    }
    t
}

/// Buckets of the share of a variant's total |change| carried by its 5 largest conditions.
const SHARE_BUCKETS: [(f64, f64, &str); 4] = [
    (0.0, 0.7, "< 70 %"),
    (0.7, 0.8, "70–80 %"),
    (0.8, 0.9, "80–90 %"),
    (0.9, f64::INFINITY, "≥ 90 %"),
];

/// The share of Σ|d_g| carried by the 5 largest |d_g| (d_g: a condition's summed change of
/// `series` versus `reference`); 1 when the variant changes nothing or acts in ≤ 5 conditions.
fn top_share(series: &[f64], reference: &[f64], ids: &[u32], g: usize) -> f64 {
    let mut d = vec![0.0f64; g];
    for ((s, r), id) in series.iter().zip(reference).zip(ids) {
        d[*id as usize] += s - r;
    }
    let mut a: Vec<f64> = d.iter().map(|x| x.abs()).collect();
    a.sort_by(|x, y| y.total_cmp(x));
    let total: f64 = a.iter().sum();
    if total <= 0.0 {
        return 1.0;
    }
    a.iter().take(5).sum::<f64>() / total
}

/// Buckets of the conditions in which the chosen variant changes the selection.
const CHANGED_BUCKETS: [(usize, usize, &str); 4] = [
    (0, 5, "< 5"),
    (5, 10, "5–9"),
    (10, 20, "10–19"),
    (20, usize::MAX, "≥ 20"),
];

fn run_cell(
    s: Scenario,
    g: usize,
    truth: &[Truth; 4],
    studies: u64,
    resamples: u32,
    base: u64,
) -> Tally {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(4) as u64;
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|w| {
                scope.spawn(move || {
                    let mut t = Tally::default();
                    for i in (w..studies).step_by(threads as usize) {
                        t.merge(&one_study(s, g, truth, base + i, resamples));
                    }
                    t
                })
            })
            .collect();
        let mut t = Tally::default();
        for h in handles {
            if let Ok(part) = h.join() {
                t.merge(&part);
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

/// One cell's rows of the headline, diagnosis and levels tables.
fn write_rows(
    (head, diagnosis, levels): (&mut String, &mut String, &mut String),
    (effect, heavy, g, studies): (Effect, bool, usize, u64),
    t: &Tally,
) {
    let (cl, ch) = clopper_pearson(t.chosen_simultaneous.covered, t.chosen_simultaneous.n, 0.95);
    let _ = writeln!(
        head,
        "| {} | {} | {g} | {} | {} | {} | {} | {} | {:.1}–{:.1} | {} | {} | {} | {:.1} | {} | {} |",
        effect.name,
        if heavy { "heavy" } else { "log-normal" },
        t.mean_pct.cell(),
        t.mean_t.cell(),
        t.chosen_pct.cell(),
        t.chosen_t.cell(),
        t.chosen_simultaneous.cell(),
        100.0 * cl,
        100.0 * ch,
        t.regret_pct.cell(),
        t.regret_t.cell(),
        t.p90_pct.cell(),
        t.tail_sum as f64 / studies as f64,
        t.mean_student.cell(),
        t.mean_symmetric.cell(),
    );
    let _ = writeln!(
        diagnosis,
        "| {} | {} | {g} | {} | {} |",
        effect.name,
        if heavy { "heavy" } else { "log-normal" },
        (0..HEADLINE.len())
            .map(|m| format!(
                "{} | {} / {}",
                t.headline[m].cell_width(),
                t.headline_below[m],
                t.headline_above[m]
            ))
            .collect::<Vec<_>>()
            .join(" | "),
        t.chosen_by_share
            .iter()
            .map(|c| format!("{} of {}", c.cell(), c.n))
            .collect::<Vec<_>>()
            .join(" | ")
    );
    let _ = writeln!(
        levels,
        "| {} | {} | {g} | {} | {} | {} |",
        effect.name,
        if heavy { "heavy" } else { "log-normal" },
        t.mean_level.cell_width(),
        t.mean_level_t.cell_width(),
        t.p90_level.cell_width(),
    );
}

/// A row's bucket cells: each rate with its Wilson interval and its count.
fn bucket_cells(c: &[Count]) -> String {
    c.iter()
        .map(|c| format!("{} of {}", c.cell(), c.n))
        .collect::<Vec<_>>()
        .join(" | ")
}

/// The headers of the six tables (headline, p90 change by tails, headline by changed
/// conditions, candidates, levels, p90 level by tails).
fn table_headers() -> [String; 6] {
    let head = String::from(
        "| effect | noise | G | mean change, percentile | mean change, studentized | chosen: percentile | chosen: studentized | chosen: simultaneous 97.5 % (reported) | chosen: Clopper–Pearson | regret, percentile | regret, studentized | p90 change, percentile | tail conditions (mean) | mean change, Student t | mean change, symmetric studentized |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    let tails = String::from(
        "\n90th-percentile change (percentile interval) by the conditions above the p90 (fewer of the two series'), all scenarios pooled per G:\n\n| G | < 5 | 5–9 | 10–19 | ≥ 20 |\n|---|---|---|---|---|\n",
    );
    let changed_md = String::from(
        "\nThe chosen variant's simultaneous mean-change interval (97.5 %, reported) by the conditions in which it changes the selection, per effect, all G and noises pooled:\n\n| effect | < 5 | 5–9 | 10–19 | ≥ 20 |\n|---|---|---|---|---|\n",
    );
    let diagnosis = format!(
        "\nThe headline's candidate methods (max-t over the 4 compared candidates, the same resamples; tails: the chance left below / above the interval, the skew side the sign of the chosen variant's per-condition residual skewness): coverage (Wilson 95 %), mean width in ms | misses with the truth below / above; then the reported headline (97.5 %) by the share of the chosen variant's |change| carried by its 5 largest conditions:\n\n| effect | noise | G | {} | top-5 share < 70 % | 70–80 % | 80–90 % | ≥ 90 % |\n|---|---|---|{}---|---|---|---|\n",
        HEADLINE
            .iter()
            .map(|h| format!("{h} | below / above"))
            .collect::<Vec<_>>()
            .join(" | "),
        "---|---|".repeat(HEADLINE.len())
    );
    let levels = String::from(
        "\nThe variant table's levels (a fixed candidate's mean and 90th-percentile selected TTFT): coverage (Wilson 95 %), mean width in ms:\n\n| effect | noise | G | mean, percentile | mean, studentized | p90, percentile |\n|---|---|---|---|---|---|\n",
    );
    let level_tails = String::from(
        "\nThe p90 level (percentile interval) by the candidate's conditions above its 90th percentile, all worlds pooled per G:\n\n| G | < 5 | 5–9 | 10–19 | ≥ 20 |\n|---|---|---|---|---|\n",
    );
    [head, tails, changed_md, diagnosis, levels, level_tails]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let studies: u64 = arg(&args, "--studies", 1000);
    let resamples: u32 = arg(&args, "--resamples", 2000);
    let out: Option<String> = arg(&args, "--out", String::new()).into();
    let only: String = arg(&args, "--effects", String::new());
    let sizes: Vec<usize> = arg(&args, "--conditions", "30,60,120".to_string())
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect();
    let started = std::time::Instant::now();
    let mut md = String::new();
    let _ = writeln!(
        md,
        "Coverage of the calibration's 95 % intervals: {studies} generated studies per row, {resamples} resamples each, 6 probes per condition; rate (Wilson 95 % interval). `cargo bench -p sy-stats --bench coverage_study -- --studies {studies} --resamples {resamples}`.\n"
    );
    let [
        mut head,
        mut tails,
        mut changed_md,
        mut diagnosis,
        mut levels,
        mut level_tails,
    ] = table_headers();
    let mut by_changed: Vec<(&str, [Count; 4])> = EFFECTS
        .iter()
        .map(|e| (e.name, [Count::default(); 4]))
        .collect();
    let mut seed = 1u64;
    for &g in &sizes {
        let mut pooled = [Count::default(); 4];
        let mut pooled_level = [Count::default(); 4];
        for effect in EFFECTS {
            if !only.is_empty() && !only.split(',').any(|e| e == effect.name) {
                seed += 2;
                continue;
            }
            for heavy in [false, true] {
                let s = Scenario { effect, heavy };
                let tr = truth(s, 0xface_0000 + seed, TRUTH_CONDITIONS);
                if std::env::var_os("SY_STUDY_DEBUG").is_some() {
                    eprintln!(
                        "{} {heavy}: truths {:?}",
                        effect.name,
                        tr.iter()
                            .map(|t| (t.mean_change, t.p90_change, t.regret))
                            .collect::<Vec<_>>()
                    );
                }
                let t = run_cell(s, g, &tr, studies, resamples, seed << 32);
                seed += 1;
                write_rows(
                    (&mut head, &mut diagnosis, &mut levels),
                    (effect, heavy, g, studies),
                    &t,
                );
                for (a, b) in pooled.iter_mut().zip(&t.p90_by_tail) {
                    a.merge(b);
                }
                for (a, b) in pooled_level.iter_mut().zip(&t.p90_level_by_tail) {
                    a.merge(b);
                }
                if let Some((_, acc)) = by_changed.iter_mut().find(|(n, _)| *n == effect.name) {
                    for (a, b) in acc.iter_mut().zip(&t.chosen_by_changed) {
                        a.merge(b);
                    }
                }
                eprintln!(
                    "{} {} G={g} done at {:.0?}",
                    effect.name,
                    heavy,
                    started.elapsed()
                );
            }
        }
        let _ = writeln!(level_tails, "| {g} | {} |", bucket_cells(&pooled_level));
        let _ = writeln!(tails, "| {g} | {} |", bucket_cells(&pooled));
    }
    for (name, acc) in &by_changed {
        let _ = writeln!(changed_md, "| {name} | {} |", bucket_cells(acc));
    }
    md.push_str(&head);
    md.push_str(&tails);
    md.push_str(&changed_md);
    md.push_str(&diagnosis);
    md.push_str(&levels);
    md.push_str(&level_tails);
    if !args.iter().any(|a| a == "--no-margins") {
        md.push_str(&margin_study(studies, resamples, &sizes));
    }
    let _ = writeln!(
        md,
        "\n{:.0?} on {} threads.",
        started.elapsed(),
        std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(4)
    );
    print!("{md}");
    if let Some(path) = out.filter(|p| !p.is_empty())
        && let Err(e) = std::fs::write(&path, &md)
    {
        eprintln!("cannot write {path}: {e}");
        std::process::exit(1);
    }
}

/// A world of the margins' study: each condition's predicted advantage is off by a bias of its
/// own (the estimator's error for that configuration), and each of its repeats' measured
/// advantage by the two models' TTFT noise.
struct MarginWorld {
    name: &'static str,
    /// sd of the per-condition bias (ms).
    bias_sd: f64,
    /// Share of badly predicted conditions and the sd of their bias (ms).
    outliers: (f64, f64),
}

const MARGIN_WORLDS: [MarginWorld; 3] = [
    MarginWorld {
        name: "bias",
        bias_sd: 30.0,
        outliers: (0.0, 0.0),
    },
    MarginWorld {
        name: "noise",
        bias_sd: 5.0,
        outliers: (0.0, 0.0),
    },
    MarginWorld {
        name: "outliers",
        bias_sd: 10.0,
        outliers: (0.1, 80.0),
    },
];

/// The per-condition scores of `conditions` generated conditions: the largest |predicted −
/// measured advantage| over [`REPEATS`] repeats (the margins' definition).
fn margin_scores(w: &MarginWorld, heavy: bool, conditions: usize, rng: &mut Rng) -> Vec<f64> {
    (0..conditions)
        .map(|_| {
            let level = 60.0 * (0.5 * rng.normal()).exp();
            let sd = if rng.uniform() < w.outliers.0 {
                w.outliers.1
            } else {
                w.bias_sd
            };
            let bias = sd * rng.normal();
            let advantage = 20.0 * (0.5 * rng.normal()).exp();
            (0..REPEATS)
                .map(|_| {
                    let measured =
                        (level + advantage) * noise(rng, heavy) - level * noise(rng, heavy);
                    (advantage + bias - measured).abs()
                })
                .fold(0.0, f64::max)
        })
        .collect()
}

/// The distribution-free interval of the `p` quantile from `n` sorted values: order statistics
/// (l, u) with P(l ≤ B < u) ≥ `level`, B ~ Binomial(n, p); `None` for an end beyond the sample
/// (unbounded).
fn order_statistic_interval(n: usize, p: f64, level: f64) -> (Option<usize>, Option<usize>) {
    let tail = 0.5 * (1.0 - level);
    let ln_choose = |k: usize| -> f64 {
        (1..=k)
            .map(|i| ((n - k + i) as f64).ln() - (i as f64).ln())
            .sum()
    };
    let pmf = |k: usize| (ln_choose(k) + k as f64 * p.ln() + (n - k) as f64 * (1.0 - p).ln()).exp();
    let cdf: Vec<f64> = (0..=n)
        .scan(0.0, |acc, k| {
            *acc += pmf(k);
            Some(*acc)
        })
        .collect();
    // l: the largest with P(B ≤ l − 1) ≤ tail (1-based order statistic); u: the smallest with
    // P(B ≤ u − 1) ≥ 1 − tail.
    let l = (1..=n).rev().find(|&l| cdf[l - 1] <= tail);
    let u = (1..=n).find(|&u| cdf[u - 1] >= 1.0 - tail);
    (l, u)
}

/// Coverage of the margins' δ interval (the percentile interval of the 90th percentile of the
/// per-condition scores, conditions resampled, as `sy-select` computes it) and of the
/// distribution-free order-statistic interval, on generated uncertainty splits of G conditions.
fn margin_study(studies: u64, resamples: u32, sizes: &[usize]) -> String {
    const LEVEL: f64 = 0.9;
    let mut md = String::from(
        "\nThe margins' δ (the 90th percentile of the per-condition scores, each a condition's largest |predicted − measured advantage| over its 6 repeats): coverage (Wilson 95 %), mean width in ms; *bias*: per-condition bias sd 30 ms, *noise*: 5 ms, *outliers*: 10 ms with 10 % of conditions at 80 ms; TTFT noise as above:\n\n| world | noise | G | δ, percentile (reported) | δ, order statistics (distribution-free) | order statistics unbounded |\n|---|---|---|---|---|---|\n",
    );
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(4) as u64;
    let mut seed = 0x6d61_7267u64;
    for &g in sizes {
        let (l, u) = order_statistic_interval(g, LEVEL, 0.95);
        for w in &MARGIN_WORLDS {
            for heavy in [false, true] {
                seed += 1;
                let mut truth_scores =
                    margin_scores(w, heavy, TRUTH_CONDITIONS, &mut Rng::new(seed));
                truth_scores.sort_by(f64::total_cmp);
                let truth = sy_selector::quantile_sorted(&truth_scores, LEVEL).unwrap_or(f64::NAN);
                let base = seed << 32;
                let (pct, os, unbounded) = std::thread::scope(|scope| {
                    let handles: Vec<_> = (0..threads)
                        .map(|t| {
                            scope.spawn(move || {
                                let (mut pct, mut os, mut unbounded) =
                                    (Count::default(), Count::default(), 0u64);
                                for i in (t..studies).step_by(threads as usize) {
                                    let mut rng = Rng::new(base + i);
                                    let mut scores = margin_scores(w, heavy, g, &mut rng);
                                    let ids: Vec<usize> = (0..g).collect();
                                    let cfg = BootstrapConfig {
                                        resamples,
                                        level: 0.95,
                                        seed: base + i,
                                    };
                                    let iv = bootstrap_quantile(&scores, &ids, LEVEL, &cfg).ok();
                                    pct.add(iv.as_ref(), truth);
                                    scores.sort_by(f64::total_cmp);
                                    let lo = l.map_or(f64::NEG_INFINITY, |k| scores[k - 1]);
                                    let hi = u.map_or(f64::INFINITY, |k| scores[k - 1]);
                                    os.n += 1;
                                    os.covered += u64::from(lo <= truth && truth <= hi);
                                    if hi.is_finite() && lo.is_finite() {
                                        os.width += hi - lo;
                                    } else {
                                        unbounded += 1;
                                    }
                                }
                                (pct, os, unbounded)
                            })
                        })
                        .collect();
                    let (mut pct, mut os, mut unbounded) = (Count::default(), Count::default(), 0);
                    for h in handles {
                        if let Ok((p, o, un)) = h.join() {
                            pct.merge(&p);
                            os.merge(&o);
                            unbounded += un;
                        }
                    }
                    (pct, os, unbounded)
                });
                let bounded = os.n - unbounded;
                let _ = writeln!(
                    md,
                    "| {} | {} | {g} | {} | {}{} | {:.1} % |",
                    w.name,
                    if heavy { "heavy" } else { "log-normal" },
                    pct.cell_width(),
                    os.cell(),
                    if bounded > 0 {
                        format!(", {:.1}", os.width / bounded as f64)
                    } else {
                        String::new()
                    },
                    100.0 * unbounded as f64 / os.n.max(1) as f64,
                );
            }
        }
    }
    md
}
