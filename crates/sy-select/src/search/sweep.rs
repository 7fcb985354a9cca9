//! The sweep over (r, p) thresholds: every pair of thresholds scored from the tallies, the best
//! rule kept by the tie-break order (mean, then fewer overrides, fewer terms, larger r, larger p).

use super::*;

/// A candidate under comparison: exact gain sum (units) and its tie-break keys.
#[derive(Debug, Clone, Copy)]
pub(super) struct Candidate {
    pub(super) gain: i128,
    pub(super) overrides: u64,
    pub(super) rule: ThresholdRule,
}

/// Order for the tie-break among candidates already within tolerance of the best mean:
/// fewer overrides, fewer terms, larger r, larger p (disabled = +∞). Returns true if `a` is better.
pub(super) fn tie_better(a: &ThresholdRule, a_over: u64, b: &ThresholdRule, b_over: u64) -> bool {
    if a_over != b_over {
        return a_over < b_over;
    }
    let (ta, tb) = (a.enabled_terms(), b.enabled_terms());
    if ta != tb {
        return ta < tb;
    }
    let key = |v: Option<f64>| v.unwrap_or(f64::INFINITY);
    if key(a.r) != key(b.r) {
        return key(a.r) > key(b.r);
    }
    key(a.p) > key(b.p)
}

/// A probe of the both-term rules: its R's rank among the input's distinct R values (0 when it
/// has none, see [`Cell`]), how many of the sweep's p values its P fires at, and its gain. 16
/// bytes: a seed's list of ~3 M at 10 M records was a quarter of sy-select's page faults at 32
/// bytes an entry (the value as `Option<f64>`, the count as `usize`).
pub(super) type Joining = (u32, u32, i64);

/// The candidate thresholds and the per-term prefix sums the sweep reads.
pub(super) struct Sweep<'a> {
    pub(super) family: RuleFamily,
    pub(super) r_values: Vec<f64>,
    pub(super) p_values: Vec<f64>,
    /// `R >= r` alone (guard with the r term only), per r.
    pub(super) r_sum: Vec<i128>,
    pub(super) r_cnt: Vec<u64>,
    /// `P > p` alone (guard with the p term only), per p.
    pub(super) p_sum: Vec<i128>,
    pub(super) p_cnt: Vec<u64>,
    /// The `R >= r` part of the both-term rules (guard with both terms), per r.
    pub(super) br_sum: Vec<i128>,
    pub(super) br_cnt: Vec<u64>,
    /// The input's distinct valid R values (what a [`Joining`]'s rank indexes).
    pub(super) r_distinct: &'a [f64],
    /// Probes eligible for both terms with a valid P, by ascending R (invalid R first).
    pub(super) joining: Vec<Joining>,
}

impl<'a> Sweep<'a> {
    /// One pass over the kept probes by ascending R: per rank of each term, whether a probe has
    /// it and the gain sums of each guard class (the thresholds' sums are then suffix sums over
    /// the ranks), and the both-term probes with a valid P in the order the both-term rules let
    /// them in.
    pub(super) fn new(input: &Probes<'a>, family: RuleFamily) -> Sweep<'a> {
        let prefill = family == RuleFamily::CountPrefill;
        let all = input.input;
        // `count` reads no P: its P tally stays empty.
        let mut by_r = RankTally::<2>::new(all.r_distinct.len());
        let mut by_p = RankTally::<1>::new(if prefill { all.p_distinct.len() } else { 0 });
        // Sized for every probe at once (address space only: the pages a shorter list never
        // reaches are never touched), so it is never copied while it grows.
        let mut joining: Vec<Joining> =
            Vec::with_capacity(if prefill { all.cells.len() } else { 0 });
        for c in input.cells() {
            by_r.add(c.r, [c.guard.r_only, prefill && c.guard.both], c.gain);
            if prefill {
                by_p.add(c.p, [c.guard.p_only], c.gain);
                if c.guard.both && c.p != 0 {
                    joining.push((c.r, c.p, c.gain));
                }
            }
        }
        let mut by_r = by_r.thresholds(&all.r_distinct, r_trigger);
        let mut by_p = by_p.thresholds(if prefill { &all.p_distinct } else { &[] }, p_trigger);
        // Each joining probe's P rank becomes the number of p values its P fires at.
        let fires = fires_by_rank(&all.p_distinct, &by_p.values);
        for entry in &mut joining {
            let rank = (entry.1 as usize).checked_sub(1);
            entry.1 = rank.and_then(|i| fires.get(i)).copied().unwrap_or(0);
        }
        let (p_sum, p_cnt) = by_p.class(0);
        let (r_sum, r_cnt) = by_r.class(0);
        let (br_sum, br_cnt) = by_r.class(1);
        Sweep {
            family,
            r_values: by_r.values,
            p_values: by_p.values,
            r_sum,
            r_cnt,
            p_sum,
            p_cnt,
            br_sum,
            br_cnt,
            r_distinct: &all.r_distinct,
            joining,
        }
    }

    /// The `count` family's sweep from the `count_prefill` one: the same r values and `R >= r`
    /// sums (both are read from the same list by R), no p term.
    pub(super) fn count_only(&self) -> Sweep<'a> {
        Sweep {
            family: RuleFamily::Count,
            r_values: self.r_values.clone(),
            p_values: Vec::new(),
            r_sum: self.r_sum.clone(),
            r_cnt: self.r_cnt.clone(),
            p_sum: Vec::new(),
            p_cnt: Vec::new(),
            br_sum: vec![0; self.r_values.len()],
            br_cnt: vec![0; self.r_values.len()],
            r_distinct: self.r_distinct,
            joining: Vec::new(),
        }
    }

    /// Visits every candidate rule as (gain, overrides, rule) — disabled, r alone, p alone, then
    /// both terms r by r — and calls `row(a, extra)` after the rules of the a-th r (with the
    /// per-p extra gains of the both-term rules; empty for `count`). The both-term rules of an
    /// r for which `skip_row(a)` holds are neither visited nor computed.
    pub(super) fn visit(
        &self,
        visit: &mut impl FnMut(i128, u64, ThresholdRule),
        row: &mut impl FnMut(usize, &[i128]),
        skip_row: &dyn Fn(usize) -> bool,
    ) {
        visit(0, 0, ThresholdRule::DISABLED);
        for (j, &r) in self.r_values.iter().enumerate() {
            visit(
                self.r_sum[j],
                self.r_cnt[j],
                ThresholdRule {
                    r: Some(r),
                    p: None,
                },
            );
        }
        for (j, &p) in self.p_values.iter().enumerate() {
            visit(
                self.p_sum[j],
                self.p_cnt[j],
                ThresholdRule {
                    r: None,
                    p: Some(p),
                },
            );
        }
        let mut extra = ExtraRows::new(self, &self.joining);
        for (a, &r) in self.r_values.iter().enumerate() {
            if self.family != RuleFamily::CountPrefill {
                row(a, &[]);
                continue;
            }
            extra.advance(a);
            if skip_row(a) {
                continue;
            }
            let (extra_sum, extra_cnt) = extra.row();
            for (j, &p) in self.p_values.iter().enumerate() {
                let rule = ThresholdRule {
                    r: Some(r),
                    p: Some(p),
                };
                visit(
                    self.br_sum[a] + extra_sum[j],
                    self.br_cnt[a] + extra_cnt[j],
                    rule,
                );
            }
            row(a, &extra_sum);
        }
    }
}

/// The both-term rules' extra gains, r by r in ascending order: per p, the gain sum and count
/// of the probes with `P > p` that `R >= r` does not trigger. A probe joins once, when r
/// passes its R, into the bucket of the p values its P fires at, so a row costs the number of
/// p values rather than the number of probes.
pub(super) struct ExtraRows<'a> {
    pub(super) p_values: &'a [f64],
    pub(super) r_values: &'a [f64],
    /// What a [`Joining`]'s R rank indexes.
    pub(super) r_distinct: &'a [f64],
    pub(super) joining: &'a [Joining],
    pub(super) next: usize,
    /// Gains and counts of the joined probes by how many p values they fire at (0..=len).
    pub(super) bucket_sum: Vec<i128>,
    pub(super) bucket_cnt: Vec<u64>,
}

impl<'a> ExtraRows<'a> {
    pub(super) fn new(sweep: &'a Sweep<'_>, joining: &'a [Joining]) -> Self {
        let p_len = sweep.p_values.len();
        ExtraRows {
            p_values: &sweep.p_values,
            r_values: &sweep.r_values,
            r_distinct: sweep.r_distinct,
            joining,
            next: 0,
            bucket_sum: vec![0; p_len + 1],
            bucket_cnt: vec![0; p_len + 1],
        }
    }

    /// Lets in the probes that `R >= r` does not trigger at the a-th r value (thresholds come
    /// in ascending order).
    pub(super) fn advance(&mut self, a: usize) {
        let r = self.r_values[a];
        while let Some(&(key, fires, gain)) = self.joining.get(self.next) {
            let rv = key
                .checked_sub(1)
                .and_then(|k| self.r_distinct.get(k as usize));
            if rv.is_some_and(|&rv| r_trigger(rv, r)) {
                break;
            }
            self.bucket_sum[fires as usize] += i128::from(gain);
            self.bucket_cnt[fires as usize] += 1;
            self.next += 1;
        }
    }

    /// The current row: per p value j, the joined probes firing at it (those firing at more
    /// than j values).
    pub(super) fn row(&self) -> (Vec<i128>, Vec<u64>) {
        let n = self.p_values.len();
        let mut extra_sum = vec![0i128; n];
        let mut extra_cnt = vec![0u64; n];
        let (mut acc, mut cnt) = (0i128, 0u64);
        for j in (0..n).rev() {
            acc += self.bucket_sum[j + 1];
            cnt += self.bucket_cnt[j + 1];
            extra_sum[j] = acc;
            extra_cnt[j] = cnt;
        }
        (extra_sum, extra_cnt)
    }
}

/// The two passes over the candidates: the first finds the best gain, the second the tie-break
/// winner among the candidates within tolerance of it.
pub(super) struct Chooser {
    pub(super) tol_units: i128,
    /// The all-disabled rule's gain to start with.
    pub(super) best_gain: i128,
    /// Starts as the disabled rule; replaced by the first candidate within tolerance if the
    /// disabled rule itself is not one.
    pub(super) chosen: Candidate,
    pub(super) evaluated: u64,
    pub(super) tied: u64,
}

impl Chooser {
    pub(super) fn first(&mut self, gain: i128) {
        self.evaluated += 1;
        self.best_gain = self.best_gain.min(gain);
    }

    /// The largest gain within tolerance of the best (after the first pass).
    pub(super) fn cutoff(&self) -> i128 {
        self.best_gain + self.tol_units
    }

    pub(super) fn second(&mut self, gain: i128, overrides: u64, rule: ThresholdRule) {
        let cutoff = self.cutoff();
        let within = |g: i128| g <= cutoff;
        if !within(gain) {
            return;
        }
        self.tied += 1;
        if tie_better(&rule, overrides, &self.chosen.rule, self.chosen.overrides)
            || !within(self.chosen.gain)
        {
            self.chosen = Candidate {
                gain,
                overrides,
                rule,
            };
        }
    }
}

/// The search over one family's sweep.
pub(super) fn search_sweep(
    sweep: &Sweep<'_>,
    &Totals { n, base, oracle }: &Totals,
    landscape_p_columns: usize,
) -> (SearchOutcome, Option<Landscape>) {
    let family = sweep.family;
    let n_f = n as f64;
    let to_mean = |gain: i128| (base + gain) as f64 / UNITS_PER_MS / n_f;
    let mut chooser = Chooser {
        // Tolerance on the mean (1e-9 ms) as a tolerance on the summed units: n units.
        tol_units: (TIE_TOLERANCE_MS * UNITS_PER_MS).round() as i128 * n as i128,
        best_gain: 0,
        chosen: Candidate {
            gain: 0,
            overrides: 0,
            rule: ThresholdRule::DISABLED,
        },
        evaluated: 0,
        tied: 0,
    };
    // The best gain of each r's both-term rules, so that the second pass skips the rows with no
    // rule within tolerance of the best (the chooser would ignore all of them).
    let mut row_best = vec![i128::MAX; sweep.r_values.len()];
    sweep.visit(
        &mut |gain, _, _| chooser.first(gain),
        &mut |a, extra| {
            let best = extra
                .iter()
                .min()
                .map_or(i128::MAX, |m| sweep.br_sum[a] + m);
            row_best[a] = best;
        },
        &|_| false,
    );
    let cols = landscape_columns(sweep.p_values.len(), landscape_p_columns);
    let mut rows = Vec::new();
    let cutoff = chooser.cutoff();
    sweep.visit(
        &mut |gain, overrides, rule| chooser.second(gain, overrides, rule),
        &mut |a, extra| {
            if landscape_p_columns == 0 {
                return;
            }
            let mut row = vec![to_mean(sweep.r_sum[a])];
            row.extend(cols.iter().map(|&j| to_mean(sweep.br_sum[a] + extra[j])));
            rows.push(LandscapeRow {
                r: Some(sweep.r_values[a]),
                mean_selected_ttft_ms: row,
            });
        },
        &|a| landscape_p_columns == 0 && row_best[a] > cutoff,
    );
    let landscape = (landscape_p_columns > 0).then(|| {
        let mut none_row = vec![to_mean(0)];
        none_row.extend(cols.iter().map(|&j| to_mean(sweep.p_sum[j])));
        rows.push(LandscapeRow {
            r: None,
            mean_selected_ttft_ms: none_row,
        });
        Landscape {
            p_columns: std::iter::once(None)
                .chain(cols.iter().map(|&j| Some(sweep.p_values[j])))
                .collect(),
            rows,
        }
    });
    let chosen = chooser.chosen;
    let outcome = SearchOutcome {
        family,
        best: RuleScore {
            rule: chosen.rule,
            mean_selected_ttft_ms: to_mean(chosen.gain),
            overrides: chosen.overrides,
        },
        stage_mean_ttft_ms: to_mean(0),
        oracle_mean_ttft_ms: oracle as f64 / UNITS_PER_MS / n_f,
        probes: n as u64,
        r_candidates: sweep.r_values.len() as u64,
        p_candidates: sweep.p_values.len() as u64,
        rules_evaluated: chooser.evaluated,
        tied_rules: chooser.tied,
    };
    (outcome, landscape)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(r: Option<f64>, p: Option<f64>) -> ThresholdRule {
        ThresholdRule { r, p }
    }

    #[test]
    fn ties_go_to_fewer_overrides_terms_then_larger_thresholds() {
        let (a, b) = (rule(Some(2.0), None), rule(Some(1.0), None));
        assert!(tie_better(&a, 3, &b, 4), "fewer overrides first");
        assert!(!tie_better(&a, 5, &b, 4));
        assert!(tie_better(
            &rule(Some(9.0), None),
            4,
            &rule(Some(1.0), Some(0.5)),
            4
        ));
        assert!(tie_better(&a, 4, &b, 4), "then the larger r");
        assert!(!tie_better(&rule(None, None), 4, &rule(None, None), 4));
        assert!(tie_better(
            &rule(Some(1.0), None),
            4,
            &rule(Some(1.0), Some(0.5)),
            4
        ));
    }
}
