//! The cache checks: the engine's `cached_tokens` against the router's K, and contamination
//! (uncached probes that hit, a hit rate drifting inside a cell).

use super::*;

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
pub(super) fn k_agrees(r: &Record) -> bool {
    match (r.observed.k, r.cached_tokens) {
        (Some(k), Some(c)) => {
            let n = r.observed.n.or(r.prompt_tokens).unwrap_or(r.planned_n);
            k_vs_cached(n, k, c) != KCached::Mismatch
        }
        _ => true,
    }
}

pub(super) fn cached_matches_k(records: &[Record], o: &CheckOptions) -> CheckResult {
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

pub(super) fn hit_rate(r: &Record) -> Option<f64> {
    let n = r.prompt_tokens.or(r.observed.n)?;
    (n > 0).then(|| r.cached_tokens.unwrap_or(0) as f64 / n as f64)
}

pub(super) fn cache_contamination(records: &[Record], o: &CheckOptions) -> CheckResult {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::fixture::*;

    #[test]
    fn contamination_of_uncached_probes_names_the_records() {
        let mut rs = clean();
        let victim = rs
            .iter_mut()
            .find(|r| r.planned_f == 0.0 && r.planned_n == 1024 && r.role == Model::Capable)
            .unwrap();
        victim.cached_tokens = Some(512);
        victim.observed.k = Some(512);
        let name = rec_name(victim);
        let rep = judge(&rs, Some(&facts()), &CheckOptions::default());
        failing_only(&rep, "cache_contamination");
        let c = check(&rep, "cache_contamination");
        assert!(
            c.offenders.iter().any(|o| o.records.contains(&name)),
            "{c:?}"
        );
        assert!(c.offenders[0].cell.contains("q-n1024-f0"), "{c:?}");
    }

    #[test]
    fn a_drifting_hit_rate_is_contamination() {
        let mut rs = clean();
        // The second half of one cached cell's records hits the whole prompt.
        let mut cell: Vec<&mut Record> = rs
            .iter_mut()
            .filter(|r| r.condition_id == "q-n4096-f0.5" && r.role == Model::Efficient)
            .collect();
        let n = cell.len();
        for r in cell.iter_mut().skip(n / 2) {
            r.cached_tokens = Some(4096);
            r.observed.k = Some(4096);
        }
        let rep = judge(&rs, Some(&facts()), &CheckOptions::default());
        let c = check(&rep, "cache_contamination");
        assert_eq!(c.outcome, Outcome::Fail, "{}", rep.render_text());
        assert!(
            c.offenders[0].detail.contains("drifts 0.50 → 1.00"),
            "{c:?}"
        );
    }

    #[test]
    fn cached_tokens_disagreeing_with_k() {
        let mut rs = clean();
        for r in rs
            .iter_mut()
            .filter(|r| r.role == Model::Efficient && r.planned_f > 0.0)
        {
            r.cached_tokens = r.observed.k.map(|k| k - 16);
        }
        let rep = judge(&rs, Some(&facts()), &CheckOptions::default());
        failing_only(&rep, "cached_tokens_match_k");
    }
}
