//! The no-load grid's monotonicity: TTFT rises with N and falls with f.

use super::*;

pub(super) fn q_monotonic(records: &[Record], o: &CheckOptions) -> CheckResult {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::check::fixture::*;

    #[test]
    fn q_out_of_order_names_the_cells() {
        let mut rs = clean();
        for r in rs
            .iter_mut()
            .filter(|r| r.phase == Phase::Qgrid && r.role == Model::Capable && r.planned_n == 4096)
        {
            r.ttft_ms = Some(5.0);
            r.server_ttft_ms = Some(4.0);
        }
        let rep = judge(&rs, Some(&facts()), &CheckOptions::default());
        failing_only(&rep, "q_monotonic");
        let c = check(&rep, "q_monotonic");
        assert!(
            c.offenders.iter().all(|o| o.cell == "qgrid/capable"),
            "{c:?}"
        );
        assert!(
            c.offenders
                .iter()
                .any(|o| o.detail.contains("N 1024 → 4096")),
            "{c:?}"
        );
    }
}
