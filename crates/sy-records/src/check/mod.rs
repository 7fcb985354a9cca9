//! The data-quality verdict of a run: whether its records can be trusted before anything is
//! fitted. `sy-collect check RUN_DIR` prints it and writes it to `check.json`; `sy-fit` refuses a
//! run that fails it unless told to accept it.
//!
//! Every check is computed from the records (and, for the end-of-run loads, the manifest), has
//! a documented bound ([`CheckOptions`], defaults in [`CheckOptions::default`]) and, when it
//! fails, names the cells and the records (`probe_id`, role) that made it fail:
//!
//! | check | fails when |
//! |---|---|
//! | `ttft_gap` | the median client − server TTFT of a (phase, model) exceeds `max_ttft_gap_ms` |
//! | `cached_tokens_match_k` | fewer than `min_k_match_share` of a model's ok records have the worker's `cached_tokens` equal to the router's K (a full-prompt hit the engine recomputes the last block of, [`k_vs_cached`], agrees) |
//! | `q_monotonic` | in the no-load grid, a model's median TTFT falls by more than the tolerance as N rises (at fixed f < 1: a full repeat computes one block whatever N) or rises as f rises (at fixed N), and every record of the faster cell is below every record of the other by more than the tolerance |
//! | `failures` | the failure share of the run exceeds `max_failure_share`, or of one condition `max_condition_failure_share` (shares by error class are reported) |
//! | `loads_zero_at_end` | the manifest says booked load remained after the run, or reservations were left |
//! | `advisory_disagreement` | the share of records whose advisory pick is another (worker, rank) that saw other K, R or P than the reserved one exceeds `max_pick_differs_share` (a tie between equally idle workers does not count) |
//! | `contention_observed` | a load condition whose background loads a model has R = 0 on every record of that model, or P = 0 where the plan runs prefill contention on it |
//! | `cache_contamination` | more than `max_uncached_hit_share` of probes planned uncached (f = 0) report cached tokens, or a cell's hit rate drifts by more than `max_hit_rate_drift` between the first and second half of its records |
//! | `over_saturation` | inside a condition, a model's TTFT rises with time: Kendall's τ between send time and TTFT ≥ `saturation_tau` and the last third's median ≥ `saturation_ratio` × the first third's and `saturation_min_rise_ms` above it |
//!
//! A check with nothing to judge (no server TTFT, no manifest, no load phase) is `skipped` and
//! does not fail the run.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::record::{Model, Phase, Record, Status};

#[cfg(test)]
mod tests;

/// Version of `check.json`.
pub const CHECK_SCHEMA_VERSION: u32 = 1;

/// The bounds of the checks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckOptions {
    /// Largest median client − server TTFT per (phase, model), ms. On loopback the two agree
    /// within a few ms; a delayed-ACK stall costs about 40 ms.
    pub max_ttft_gap_ms: f64,
    /// Smallest share of ok records (per model) whose `cached_tokens` equals K.
    pub min_k_match_share: f64,
    /// Relative tolerance of the Q-grid monotonicity (a median may move against the expected
    /// direction by this fraction of the larger one)…
    pub q_rel_tolerance: f64,
    /// …plus this many ms.
    pub q_abs_tolerance_ms: f64,
    /// Largest failure share over the run.
    pub max_failure_share: f64,
    /// Largest failure share of one condition (its probes of both models).
    pub max_condition_failure_share: f64,
    /// Largest share of records whose advisory pick is another worker that saw other figures.
    /// Background load that starts and ends between observing and reserving moves some picks
    /// (28 % of the efficient load-phase records of the real-Dynamo data-parallel test); a
    /// majority means the query and the booking disagree systematically.
    pub max_pick_differs_share: f64,
    /// Largest share of probes planned uncached that report cached tokens.
    pub max_uncached_hit_share: f64,
    /// Largest share of loaded (condition, model) cells in which the background's load was not
    /// seen although it could have been (a background that finished before the probe observed
    /// it: one record per cell at one repeat, so a busy client machine misses a few). A plan
    /// whose contention cannot reach the probe's (worker, rank) fails at any share.
    pub max_unseen_load_share: f64,
    /// Largest change of a cell's mean hit rate (cached / prompt tokens) between the first and
    /// second half of its records.
    pub max_hit_rate_drift: f64,
    /// Kendall's τ between send time and TTFT from which a condition counts as saturating…
    pub saturation_tau: f64,
    /// …when its last third's median TTFT is also at least this multiple of its first third's.
    pub saturation_ratio: f64,
    /// …and at least this many ms above it (a millisecond of jitter on a 5 ms TTFT is not a
    /// queue).
    pub saturation_min_rise_ms: f64,
    /// Fewest ok records of one model in one condition for the saturation test (at least 6, so
    /// that each third holds two).
    pub saturation_min_records: usize,
}

impl Default for CheckOptions {
    fn default() -> Self {
        Self {
            max_ttft_gap_ms: 20.0,
            min_k_match_share: 0.9,
            q_rel_tolerance: 0.15,
            q_abs_tolerance_ms: 5.0,
            max_failure_share: 0.02,
            max_condition_failure_share: 0.2,
            max_pick_differs_share: 0.5,
            max_uncached_hit_share: 0.01,
            max_unseen_load_share: 0.05,
            max_hit_rate_drift: 0.15,
            saturation_tau: 0.6,
            saturation_ratio: 1.5,
            saturation_min_rise_ms: 5.0,
            saturation_min_records: 6,
        }
    }
}

/// What the manifest says about the end of the run (`None`: no manifest).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunFacts {
    pub loads_zero_at_end: Option<bool>,
    pub outstanding_reservations: usize,
    pub complete: Option<bool>,
}

impl RunFacts {
    /// The facts of a `manifest.json` (read loosely: only these fields).
    pub fn from_manifest(v: &serde_json::Value) -> Self {
        Self {
            loads_zero_at_end: v
                .get("loads_zero_at_end")
                .and_then(serde_json::Value::as_bool),
            outstanding_reservations: v
                .get("outstanding_reservations")
                .and_then(serde_json::Value::as_array)
                .map_or(0, Vec::len),
            complete: v.get("complete").and_then(serde_json::Value::as_bool),
        }
    }
}

/// Outcome of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Pass,
    Fail,
    /// Nothing to judge.
    Skipped,
}

/// A cell (or condition) that made a check fail, with the records concerned (or, under a check
/// that tolerates a share of such cells and passed, one it names all the same).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Offender {
    /// What the cell is, e.g. `qgrid/capable` or `condition L12 (efficient)`.
    pub cell: String,
    /// What was measured there against the bound.
    pub detail: String,
    /// `probe_id/role` of the records concerned (at most [`MAX_RECORDS_NAMED`]).
    pub records: Vec<String>,
    /// How many records are concerned in all.
    pub record_count: usize,
}

/// Records named per offender, at most.
pub const MAX_RECORDS_NAMED: usize = 10;

/// One check's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckResult {
    pub name: String,
    pub outcome: Outcome,
    /// The bound, in words.
    pub bound: String,
    /// The measured values, in words.
    pub measured: String,
    pub offenders: Vec<Offender>,
}

/// The verdict of a run (`check.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckReport {
    pub schema_version: u32,
    /// `pass` when no check failed.
    pub verdict: Outcome,
    pub records: usize,
    /// Run ids judged.
    pub run_ids: Vec<String>,
    pub options: CheckOptions,
    pub checks: Vec<CheckResult>,
}

impl CheckReport {
    pub fn passed(&self) -> bool {
        self.verdict == Outcome::Pass
    }

    /// Names of the failed checks.
    pub fn failed(&self) -> Vec<&str> {
        self.checks
            .iter()
            .filter(|c| c.outcome == Outcome::Fail)
            .map(|c| c.name.as_str())
            .collect()
    }

    /// The table printed by `sy-collect check`.
    pub fn render_text(&self) -> String {
        use std::fmt::Write as _;
        let mut s = String::new();
        for c in &self.checks {
            let tag = match c.outcome {
                Outcome::Pass => "pass",
                Outcome::Fail => "FAIL",
                Outcome::Skipped => "skip",
            };
            let _ = writeln!(
                s,
                "{tag:<5} {:<24} {} (bound: {})",
                c.name, c.measured, c.bound
            );
            for o in &c.offenders {
                let _ = writeln!(s, "        {}: {}", o.cell, o.detail);
                if !o.records.is_empty() {
                    let more = o.record_count.saturating_sub(o.records.len());
                    let _ = writeln!(
                        s,
                        "          records: {}{}",
                        o.records.join(", "),
                        if more > 0 {
                            format!(" … and {more} more")
                        } else {
                            String::new()
                        }
                    );
                }
            }
        }
        let _ = writeln!(
            s,
            "verdict: {} ({} records{})",
            if self.passed() { "PASS" } else { "FAIL" },
            self.records,
            if self.passed() {
                String::new()
            } else {
                format!("; failed: {}", self.failed().join(", "))
            }
        );
        s
    }
}

/// Judges `records` (one or more runs) with the manifest facts when known.
pub fn judge(records: &[Record], facts: Option<&RunFacts>, opts: &CheckOptions) -> CheckReport {
    let checks = vec![
        ttft_gap(records, opts),
        cached_matches_k(records, opts),
        q_monotonic(records, opts),
        failures(records, opts),
        loads_zero(facts),
        advisory_disagreement(records, opts),
        contention_observed(records, opts),
        cache_contamination(records, opts),
        over_saturation(records, opts),
    ];
    let verdict = if checks.iter().any(|c| c.outcome == Outcome::Fail) {
        Outcome::Fail
    } else {
        Outcome::Pass
    };
    let mut run_ids: Vec<String> = records.iter().map(|r| r.run_id.clone()).collect();
    run_ids.sort();
    run_ids.dedup();
    CheckReport {
        schema_version: CHECK_SCHEMA_VERSION,
        verdict,
        records: records.len(),
        run_ids,
        options: opts.clone(),
        checks,
    }
}

fn ok(r: &Record) -> bool {
    r.status == Status::Ok
}

fn role_name(m: Model) -> &'static str {
    match m {
        Model::Efficient => "efficient",
        Model::Capable => "capable",
    }
}

fn rec_name(r: &Record) -> String {
    format!("{}/{}", r.probe_id, role_name(r.role))
}

fn offender<'a>(
    cell: String,
    detail: String,
    recs: impl IntoIterator<Item = &'a Record>,
) -> Offender {
    let all: Vec<&Record> = recs.into_iter().collect();
    Offender {
        cell,
        detail,
        records: all
            .iter()
            .take(MAX_RECORDS_NAMED)
            .map(|r| rec_name(r))
            .collect(),
        record_count: all.len(),
    }
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    sy_selector::quantile_sorted(&v, 0.5)
}

fn share(part: usize, whole: usize) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 / whole as f64
    }
}

fn result(name: &str, bound: String, measured: String, offenders: Vec<Offender>) -> CheckResult {
    CheckResult {
        name: name.into(),
        outcome: if offenders.is_empty() {
            Outcome::Pass
        } else {
            Outcome::Fail
        },
        bound,
        measured,
        offenders,
    }
}

fn skipped(name: &str, bound: String, why: &str) -> CheckResult {
    CheckResult {
        name: name.into(),
        outcome: Outcome::Skipped,
        bound,
        measured: why.into(),
        offenders: Vec::new(),
    }
}

/// Records grouped by a key, in key order.
fn group<'a, K: Ord>(
    records: impl IntoIterator<Item = &'a Record>,
    key: impl Fn(&Record) -> K,
) -> BTreeMap<K, Vec<&'a Record>> {
    let mut m: BTreeMap<K, Vec<&Record>> = BTreeMap::new();
    for r in records {
        m.entry(key(r)).or_default().push(r);
    }
    m
}

fn ttft_gap(records: &[Record], o: &CheckOptions) -> CheckResult {
    let bound = format!(
        "median client − server TTFT ≤ {} ms per phase and model",
        o.max_ttft_gap_ms
    );
    let with_gap = records.iter().filter(|r| ok(r) && gap(r).is_some());
    let groups = group(with_gap, |r| (r.phase, r.role));
    if groups.is_empty() {
        return skipped("ttft_gap", bound, "no record has a server TTFT");
    }
    let mut measured = Vec::new();
    let mut offenders = Vec::new();
    for ((phase, role), rs) in groups {
        let m = median(rs.iter().filter_map(|r| gap(r)).collect()).unwrap_or(0.0);
        let cell = format!("{}/{}", phase.as_str(), role_name(role));
        measured.push(format!("{cell} {m:.1} ms"));
        if m > o.max_ttft_gap_ms {
            let mut worst = rs.clone();
            worst.sort_by(|a, b| gap(b).unwrap_or(0.0).total_cmp(&gap(a).unwrap_or(0.0)));
            let over: Vec<&Record> = worst
                .into_iter()
                .filter(|r| gap(r).unwrap_or(0.0) > o.max_ttft_gap_ms)
                .collect();
            offenders.push(offender(
                cell,
                format!(
                    "median gap {m:.1} ms over {} records ({} above the bound): transport delay \
                     (delayed ACKs, a proxy, a loaded client) is in the recorded TTFT",
                    rs.len(),
                    over.len()
                ),
                over,
            ));
        }
    }
    result("ttft_gap", bound, measured.join(", "), offenders)
}

fn gap(r: &Record) -> Option<f64> {
    r.client_server_gap_ms
        .or_else(|| Some(r.ttft_ms? - r.server_ttft_ms?))
}

/// One probe's K against its engine's cached tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KCached {
    Equal,
    /// K covers the whole prompt (K = N) and the engine reports less: it recomputed the block
    /// holding the last prompt token, as vLLM does to get that token's logits. Expected.
    FullHitRecomputed,
    Mismatch,
}

/// Classifies K (the selection service's overlap) against `cached_tokens` for a prompt of `n`
/// tokens. An engine that must compute the last prompt token to sample from it caps a prefix hit
/// at `n − 1` tokens, in whole blocks, so it reports less than K only when K covers the whole
/// prompt.
pub fn k_vs_cached(n: u64, k: u64, cached: u64) -> KCached {
    if cached == k {
        KCached::Equal
    } else if k == n && cached < k {
        KCached::FullHitRecomputed
    } else {
        KCached::Mismatch
    }
}

/// Whether a record's `cached_tokens` agrees with its K ([`k_vs_cached`] not a mismatch).
fn k_agrees(r: &Record) -> bool {
    match (r.observed.k, r.cached_tokens) {
        (Some(k), Some(c)) => {
            let n = r.observed.n.or(r.prompt_tokens).unwrap_or(r.planned_n);
            k_vs_cached(n, k, c) != KCached::Mismatch
        }
        _ => true,
    }
}

fn cached_matches_k(records: &[Record], o: &CheckOptions) -> CheckResult {
    let bound = format!(
        "≥ {:.0} % of a model's ok records have cached_tokens = K",
        o.min_k_match_share * 100.0
    );
    let known = records
        .iter()
        .filter(|r| ok(r) && r.cached_tokens.is_some() && r.observed.k.is_some());
    let groups = group(known, |r| r.role);
    if groups.is_empty() {
        return skipped(
            "cached_tokens_match_k",
            bound,
            "no record has both cached_tokens and K",
        );
    }
    let mut measured = Vec::new();
    let mut offenders = Vec::new();
    for (role, rs) in groups {
        let bad: Vec<&Record> = rs.iter().copied().filter(|r| !k_agrees(r)).collect();
        let sh = 1.0 - share(bad.len(), rs.len());
        measured.push(format!("{} {:.1} %", role_name(role), sh * 100.0));
        if sh < o.min_k_match_share {
            // Name the cells where they disagree most.
            let by_cell = group(bad.iter().copied(), |r| r.condition_id.clone());
            let mut cells: Vec<_> = by_cell.into_iter().collect();
            cells.sort_by_key(|(_, v)| std::cmp::Reverse(v.len()));
            for (cell, v) in cells.into_iter().take(5) {
                let ex = v[0];
                offenders.push(offender(
                    format!("condition {cell} ({})", role_name(role)),
                    format!(
                        "{} records with cached_tokens ≠ K (e.g. K {} cached {}); {:.1} % agree \
                         over the model",
                        v.len(),
                        ex.observed.k.unwrap_or(0),
                        ex.cached_tokens.unwrap_or(0),
                        sh * 100.0
                    ),
                    v,
                ));
            }
        }
    }
    result(
        "cached_tokens_match_k",
        bound,
        measured.join(", "),
        offenders,
    )
}

fn q_monotonic(records: &[Record], o: &CheckOptions) -> CheckResult {
    let bound = format!(
        "no-load median TTFT non-decreasing in N and non-increasing in f, within {:.0} % + {} ms",
        o.q_rel_tolerance * 100.0,
        o.q_abs_tolerance_ms
    );
    let q: Vec<&Record> = records
        .iter()
        .filter(|r| r.phase == Phase::Qgrid && ok(r) && r.ttft_ms.is_some())
        .collect();
    if q.is_empty() {
        return skipped("q_monotonic", bound, "no ok Q-grid record");
    }
    // Cell medians: (role, f as per-mille, N) → (median, records).
    let cells = group(q.iter().copied(), |r| {
        (r.role, (r.planned_f * 1000.0).round() as i64, r.planned_n)
    });
    let med: BTreeMap<_, (f64, Vec<&Record>)> = cells
        .into_iter()
        .map(|(k, v)| {
            let m = median(v.iter().filter_map(|r| r.ttft_ms).collect()).unwrap_or(0.0);
            (k, (m, v))
        })
        .collect();
    let ttfts = |v: &[&Record]| -> (f64, f64) {
        let t: Vec<f64> = v.iter().filter_map(|r| r.ttft_ms).collect();
        (
            t.iter().copied().fold(f64::INFINITY, f64::min),
            t.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        )
    };
    // Cell `b` should not be faster than cell `a`: a violation when its median is lower by more
    // than the tolerance **and** every one of its records is below every one of `a`'s by more
    // than it (one stalled probe in a two-repeat cell is noise, not an inverted grid).
    let against = |ma: f64, va: &[&Record], mb: f64, vb: &[&Record]| {
        let tol = |x: f64, y: f64| o.q_rel_tolerance * x.max(y) + o.q_abs_tolerance_ms;
        let (min_a, _) = ttfts(va);
        let (_, max_b) = ttfts(vb);
        ma - mb > tol(ma, mb) && min_a - max_b > tol(min_a, max_b)
    };
    let mut offenders = Vec::new();
    let mut pairs = 0;
    let keys: Vec<_> = med.keys().copied().collect();
    for (i, a) in keys.iter().enumerate() {
        for b in &keys[i + 1..] {
            let (ra, fa, na) = *a;
            let (rb, fb, nb) = *b;
            if ra != rb {
                continue;
            }
            let (ma, va) = &med[a];
            let (mb, vb) = &med[b];
            // Adjacent cells only: same f, next N; same N, next f.
            // At f = 1 (a full repeat) the engine computes one block whatever N: no order in N
            // is expected there.
            let next_n = fa == fb
                && fa < 1000
                && nb > na
                && !keys
                    .iter()
                    .any(|k| k.0 == ra && k.1 == fa && k.2 > na && k.2 < nb);
            let next_f = na == nb
                && fb > fa
                && !keys
                    .iter()
                    .any(|k| k.0 == ra && k.2 == na && k.1 > fa && k.1 < fb);
            let bad = if next_n {
                pairs += 1;
                against(*ma, va, *mb, vb)
            } else if next_f {
                pairs += 1;
                against(*mb, vb, *ma, va)
            } else {
                false
            };
            if bad {
                let what = if next_n {
                    format!(
                        "f {:.2}: N {na} → {nb} median TTFT {ma:.1} → {mb:.1} ms (should not fall)",
                        fa as f64 / 1000.0
                    )
                } else {
                    format!(
                        "N {na}: f {:.2} → {:.2} median TTFT {ma:.1} → {mb:.1} ms (should not rise)",
                        fa as f64 / 1000.0,
                        fb as f64 / 1000.0
                    )
                };
                offenders.push(offender(
                    format!("qgrid/{}", role_name(ra)),
                    what,
                    va.iter().chain(vb.iter()).copied(),
                ));
            }
        }
    }
    let measured = format!(
        "{} cells, {pairs} adjacent pairs, {} out of order",
        med.len(),
        offenders.len()
    );
    result("q_monotonic", bound, measured, offenders)
}

fn failures(records: &[Record], o: &CheckOptions) -> CheckResult {
    let bound = format!(
        "failure share ≤ {:.1} % over the run and ≤ {:.0} % in any condition",
        o.max_failure_share * 100.0,
        o.max_condition_failure_share * 100.0
    );
    if records.is_empty() {
        return skipped("failures", bound, "no record");
    }
    let failed: Vec<&Record> = records.iter().filter(|r| !ok(r)).collect();
    let by_class = group(failed.iter().copied(), |r| {
        r.error_class
            .map(|c| {
                serde_json::to_value(c)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default()
            })
            .unwrap_or_else(|| "unclassified".into())
    });
    let total = share(failed.len(), records.len());
    let classes = by_class
        .iter()
        .map(|(c, v)| format!("{c} {}", v.len()))
        .collect::<Vec<_>>()
        .join(", ");
    let measured = format!(
        "{} of {} failed ({:.2} %){}",
        failed.len(),
        records.len(),
        total * 100.0,
        if classes.is_empty() {
            String::new()
        } else {
            format!(": {classes}")
        }
    );
    let mut offenders = Vec::new();
    if total > o.max_failure_share {
        for (class, v) in &by_class {
            offenders.push(offender(
                format!("run, class {class}"),
                format!(
                    "{} failures ({:.2} % of the run); e.g. {}",
                    v.len(),
                    share(v.len(), records.len()) * 100.0,
                    v[0].error_message.as_deref().unwrap_or("no message")
                ),
                v.iter().copied(),
            ));
        }
    }
    for (cond, rs) in group(records, |r| (r.run_id.clone(), r.condition_id.clone())) {
        let bad: Vec<&Record> = rs.iter().copied().filter(|r| !ok(r)).collect();
        let sh = share(bad.len(), rs.len());
        if sh > o.max_condition_failure_share {
            offenders.push(offender(
                format!("condition {}", cond.1),
                format!(
                    "{} of {} records failed ({:.0} %)",
                    bad.len(),
                    rs.len(),
                    sh * 100.0
                ),
                bad,
            ));
        }
    }
    result("failures", bound, measured, offenders)
}

fn loads_zero(facts: Option<&RunFacts>) -> CheckResult {
    let bound =
        "the selection service shows no booked load and no reservation is left after the run"
            .to_string();
    let Some(f) = facts else {
        return skipped("loads_zero_at_end", bound, "no manifest");
    };
    let Some(zero) = f.loads_zero_at_end else {
        return skipped(
            "loads_zero_at_end",
            bound,
            "the manifest does not say (an interrupted run?)",
        );
    };
    let measured = format!(
        "loads zero at end: {zero}, reservations left: {}",
        f.outstanding_reservations
    );
    let offenders = if zero && f.outstanding_reservations == 0 {
        Vec::new()
    } else {
        vec![Offender {
            cell: "run".into(),
            detail: format!(
                "booked load remained after the run ({} reservations could not be deleted): R \
                 and P of a later run on this deployment would include it",
                f.outstanding_reservations
            ),
            records: Vec::new(),
            record_count: 0,
        }]
    };
    result("loads_zero_at_end", bound, measured, offenders)
}

/// Whether the advisory pick differs from the reserved (worker, rank) **and** saw other figures:
/// a tie between equally idle workers, broken one way by the query and the other by the
/// reservation, changes nothing the rule would see.
fn differs_materially(r: &Record) -> bool {
    r.pick_differs == Some(true)
        && (r.advisory_k != r.observed.k
            || r.advisory_r != r.observed.r
            || match (r.advisory_p, r.observed.p) {
                (Some(a), Some(b)) => (a - b).abs() > 1e-9,
                (a, b) => a.is_some() != b.is_some(),
            })
}

fn advisory_disagreement(records: &[Record], o: &CheckOptions) -> CheckResult {
    let bound = format!(
        "≤ {:.0} % of records whose advisory pick is another (worker, rank) with other K, R or P",
        o.max_pick_differs_share * 100.0
    );
    let known = records.iter().filter(|r| r.pick_differs.is_some());
    let groups = group(known, |r| (r.phase, r.role));
    if groups.is_empty() {
        return skipped(
            "advisory_disagreement",
            bound,
            "no record says whether the picks differ",
        );
    }
    let mut measured = Vec::new();
    let mut offenders = Vec::new();
    for ((phase, role), rs) in groups {
        let other = rs.iter().filter(|r| r.pick_differs == Some(true)).count();
        let differ: Vec<&Record> = rs
            .iter()
            .copied()
            .filter(|r| differs_materially(r))
            .collect();
        let sh = share(differ.len(), rs.len());
        let cell = format!("{}/{}", phase.as_str(), role_name(role));
        measured.push(format!(
            "{cell} {:.1} % ({:.1} % another worker)",
            sh * 100.0,
            share(other, rs.len()) * 100.0
        ));
        if sh > o.max_pick_differs_share {
            offenders.push(offender(
                cell,
                format!(
                    "{} of {} records: the load moved between observing and reserving, so the \
                     observation the rule would see is not the one measured",
                    differ.len(),
                    rs.len()
                ),
                differ,
            ));
        }
    }
    result(
        "advisory_disagreement",
        bound,
        measured.join(", "),
        offenders,
    )
}

/// Whether the prefill and decode background loops of `r`'s condition run on `r`'s model (as
/// sy-collect's background plans them: `target` names the model(s); with a busy capable
/// destination, the capable model's load is the busy slots instead, decode only).
fn loops_target(r: &Record) -> bool {
    let capable = r.role == Model::Capable;
    match r.background.target.as_str() {
        "capable" => capable,
        "both" => !capable || !r.background.busy_capable,
        "none" => false,
        _ => !capable,
    }
}

fn contention_observed(records: &[Record], opts: &CheckOptions) -> CheckResult {
    let bound = format!(
        "R > 0 on some record of every (condition, model) the plan loads, and P > 0 where it \
         runs prefill contention; at most {:.0} % of those cells unseen, none because the \
         contention cannot reach the probe's (worker, rank)",
        opts.max_unseen_load_share * 100.0
    );
    let contended = records.iter().filter(|r| {
        let b = &r.background;
        r.phase == Phase::Load
            && ok(r)
            && ((loops_target(r) && (b.prefill_requests > 0 || b.decode_requests > 0))
                || (b.busy_capable && r.role == Model::Capable))
    });
    let groups = group(contended, |r| (r.condition_id.clone(), r.role));
    if groups.is_empty() {
        return skipped(
            "contention_observed",
            bound,
            "no load condition with planned contention",
        );
    }
    // The (worker, rank) pairs each model's probes were reserved on, over the whole run.
    let mut pairs: BTreeMap<Model, std::collections::BTreeSet<(u64, u32)>> = BTreeMap::new();
    for r in records {
        if let Some(w) = r.reserved_worker_id {
            pairs
                .entry(r.role)
                .or_default()
                .insert((w, r.reserved_dp_rank.unwrap_or(0)));
        }
    }
    let mut offenders = Vec::new();
    let mut structural = 0usize;
    let n = groups.len();
    for ((cond, role), rs) in groups {
        let prefill = loops_target(rs[0]) && rs[0].background.prefill_requests > 0;
        let b = &rs[0].background;
        let spread = pairs.get(&role).map_or(0, std::collections::BTreeSet::len);
        let requests = if loops_target(rs[0]) {
            b.prefill_requests.max(b.decode_requests) as usize
        } else {
            0
        };
        let spread_out = requests > 0 && requests < spread;
        let cause = if spread_out {
            format!(
                "the background's {requests} request(s) spread over this model's {spread} \
                 (worker, rank) pairs and the probe was reserved on an idle one: raise the \
                 contention levels to at least the number of ranks, or serve the model on fewer"
            )
        } else {
            "the background was not booked through the selection service, or finished before \
             the probes"
                .to_string()
        };
        let r_seen = rs.iter().any(|r| r.observed.r.is_some_and(|v| v > 0));
        let p_seen = rs.iter().any(|r| r.observed.p.is_some_and(|v| v > 0.0));
        let mut missing = Vec::new();
        if !r_seen {
            missing.push("R");
        }
        if prefill && !p_seen {
            missing.push("P");
        }
        if !missing.is_empty() {
            structural += usize::from(spread_out);
            offenders.push(offender(
                format!("condition {cond} ({})", role_name(role)),
                format!(
                    "{} stayed 0 on all {} records although the plan loads this model there ({} \
                     prefill, {} decode background requests{}): {cause}",
                    missing.join(" and "),
                    rs.len(),
                    b.prefill_requests,
                    b.decode_requests,
                    if b.busy_capable {
                        ", busy capable destination"
                    } else {
                        ""
                    }
                ),
                rs,
            ));
        }
    }
    let unseen = offenders.len();
    let measured = format!(
        "{n} loaded (condition, model) cells, {unseen} without load seen ({:.1} %; {structural} \
         where the contention cannot reach the probe's rank)",
        100.0 * unseen as f64 / n as f64
    );
    if structural == 0 && unseen as f64 <= opts.max_unseen_load_share * n as f64 {
        // Within the bound: a pass that still names the cells where load went unseen.
        return CheckResult {
            name: "contention_observed".into(),
            outcome: Outcome::Pass,
            bound,
            measured,
            offenders,
        };
    }
    result("contention_observed", bound, measured, offenders)
}

fn hit_rate(r: &Record) -> Option<f64> {
    let n = r.prompt_tokens.or(r.observed.n)?;
    (n > 0).then(|| r.cached_tokens.unwrap_or(0) as f64 / n as f64)
}

fn cache_contamination(records: &[Record], o: &CheckOptions) -> CheckResult {
    let bound = format!(
        "≤ {:.0} % of probes planned uncached report cached tokens; a cell's hit rate moves ≤ {:.2} \
         between the halves of its records",
        o.max_uncached_hit_share * 100.0,
        o.max_hit_rate_drift
    );
    let with_cache: Vec<&Record> = records
        .iter()
        .filter(|r| ok(r) && r.cached_tokens.is_some())
        .collect();
    if with_cache.is_empty() {
        return skipped(
            "cache_contamination",
            bound,
            "no record reports cached_tokens",
        );
    }
    let mut offenders = Vec::new();
    let uncached: Vec<&Record> = with_cache
        .iter()
        .copied()
        .filter(|r| r.planned_f == 0.0)
        .collect();
    let hit: Vec<&Record> = uncached
        .iter()
        .copied()
        .filter(|r| r.cached_tokens.unwrap_or(0) > 0)
        .collect();
    let sh = share(hit.len(), uncached.len());
    if sh > o.max_uncached_hit_share {
        for (cell, v) in group(hit.iter().copied(), |r| (r.condition_id.clone(), r.role)) {
            offenders.push(offender(
                format!("condition {} ({})", cell.0, role_name(cell.1)),
                format!(
                    "{} probes planned uncached report cached tokens (e.g. {} of {}): a prompt \
                     reused across probes or runs, or another client's traffic",
                    v.len(),
                    v[0].cached_tokens.unwrap_or(0),
                    v[0].prompt_tokens.unwrap_or(v[0].planned_n)
                ),
                v,
            ));
        }
    }
    let mut drifting = 0;
    for (cell, mut v) in group(with_cache.iter().copied(), |r| {
        (r.condition_id.clone(), r.role)
    }) {
        if v.len() < 4 {
            continue;
        }
        v.sort_by(|a, b| a.sent_at_unix_ms.total_cmp(&b.sent_at_unix_ms));
        let half = v.len() / 2;
        let mean = |s: &[&Record]| {
            let h: Vec<f64> = s.iter().filter_map(|r| hit_rate(r)).collect();
            (!h.is_empty()).then(|| h.iter().sum::<f64>() / h.len() as f64)
        };
        if let (Some(a), Some(b)) = (mean(&v[..half]), mean(&v[v.len() - half..]))
            && (b - a).abs() > o.max_hit_rate_drift
        {
            drifting += 1;
            offenders.push(offender(
                format!("condition {} ({})", cell.0, role_name(cell.1)),
                format!(
                    "hit rate drifts {a:.2} → {b:.2} between the first and second half of its {} \
                     records (planned f {:.2}): the cache state changed during the run",
                    v.len(),
                    v[0].planned_f
                ),
                v[v.len() - half..].iter().copied(),
            ));
        }
    }
    let measured = format!(
        "{} of {} uncached probes hit the cache ({:.2} %), {drifting} drifting cells",
        hit.len(),
        uncached.len(),
        sh * 100.0
    );
    result("cache_contamination", bound, measured, offenders)
}

/// Kendall's τ-b of `(x, y)` pairs (ties allowed).
pub fn kendall_tau(pairs: &[(f64, f64)]) -> Option<f64> {
    let n = pairs.len();
    if n < 2 {
        return None;
    }
    let (mut c, mut d, mut tx, mut ty) = (0i64, 0i64, 0i64, 0i64);
    for i in 0..n {
        for j in i + 1..n {
            let dx = pairs[i].0 - pairs[j].0;
            let dy = pairs[i].1 - pairs[j].1;
            if dx == 0.0 && dy == 0.0 {
                continue;
            } else if dx == 0.0 {
                tx += 1;
            } else if dy == 0.0 {
                ty += 1;
            } else if (dx > 0.0) == (dy > 0.0) {
                c += 1;
            } else {
                d += 1;
            }
        }
    }
    let denom = (((c + d + tx) as f64) * ((c + d + ty) as f64)).sqrt();
    (denom > 0.0).then(|| (c - d) as f64 / denom)
}

fn over_saturation(records: &[Record], o: &CheckOptions) -> CheckResult {
    let bound = format!(
        "inside a condition, TTFT does not rise with time (Kendall τ < {}, or last-third median < \
         {}× and < {} ms above the first third's; ≥ {} records)",
        o.saturation_tau,
        o.saturation_ratio,
        o.saturation_min_rise_ms,
        o.saturation_min_records.max(6)
    );
    let min_records = o.saturation_min_records.max(6);
    let groups = group(
        records.iter().filter(|r| ok(r) && r.ttft_ms.is_some()),
        |r| (r.run_id.clone(), r.condition_id.clone(), r.role),
    );
    let mut judged = 0;
    let mut offenders = Vec::new();
    for ((_, cond, role), mut v) in groups {
        if v.len() < min_records {
            continue;
        }
        judged += 1;
        v.sort_by(|a, b| a.sent_at_unix_ms.total_cmp(&b.sent_at_unix_ms));
        let pairs: Vec<(f64, f64)> = v
            .iter()
            .map(|r| (r.sent_at_unix_ms, r.ttft_ms.unwrap_or(0.0)))
            .collect();
        let Some(tau) = kendall_tau(&pairs) else {
            continue;
        };
        let third = v.len() / 3;
        let first = median(v[..third].iter().filter_map(|r| r.ttft_ms).collect()).unwrap_or(0.0);
        let last = median(
            v[v.len() - third..]
                .iter()
                .filter_map(|r| r.ttft_ms)
                .collect(),
        )
        .unwrap_or(0.0);
        if tau >= o.saturation_tau
            && first > 0.0
            && last >= o.saturation_ratio * first
            && last - first >= o.saturation_min_rise_ms
        {
            offenders.push(offender(
                format!("condition {cond} ({})", role_name(role)),
                format!(
                    "TTFT rises with time: τ {tau:.2}, median {first:.1} → {last:.1} ms from the \
                     first to the last third of its {} records: a queue builds up (background \
                     load above what the workers sustain, or leaked load)",
                    v.len()
                ),
                v[v.len() - third..].iter().copied(),
            ));
        }
    }
    if judged == 0 {
        return skipped(
            "over_saturation",
            bound,
            "no condition has enough ok records",
        );
    }
    let measured = format!(
        "{judged} (condition, model) cells, {} rising",
        offenders.len()
    );
    result("over_saturation", bound, measured, offenders)
}

/// The file `sy-collect check` writes in a run directory.
pub const CHECK_FILE: &str = "check.json";

/// Judges record files or run directories (merged; the end-of-run facts are read from each run
/// directory's `manifest.json` — the run fails `loads_zero_at_end` if any of them says so).
pub fn judge_paths(
    paths: &[std::path::PathBuf],
    opts: &CheckOptions,
) -> Result<CheckReport, crate::RecordsError> {
    let loaded = crate::load_records(paths, &crate::LoadOptions::default())?;
    let mut facts: Option<RunFacts> = None;
    for p in paths.iter().filter(|p| p.is_dir()) {
        let m = sy_rundir::Artifact::Manifest.path(p);
        if !m.exists() {
            continue;
        }
        let text = std::fs::read_to_string(&m).map_err(|e| crate::RecordsError::Read {
            path: m.clone(),
            message: e.to_string(),
        })?;
        let v: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| crate::RecordsError::Format {
                path: m.clone(),
                message: format!("not a manifest: {e}"),
            })?;
        let f = RunFacts::from_manifest(&v);
        facts = Some(match facts {
            None => f,
            Some(a) => RunFacts {
                loads_zero_at_end: match (a.loads_zero_at_end, f.loads_zero_at_end) {
                    (Some(x), Some(y)) => Some(x && y),
                    _ => None,
                },
                outstanding_reservations: a.outstanding_reservations + f.outstanding_reservations,
                complete: match (a.complete, f.complete) {
                    (Some(x), Some(y)) => Some(x && y),
                    _ => None,
                },
            },
        });
    }
    Ok(judge(&loaded.records, facts.as_ref(), opts))
}
