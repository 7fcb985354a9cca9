//! The r/p threshold search (`search_thresholds`) on 300,000 probes, the size of the fit split
//! of 1 M records, for both rule families: what `sy-select` runs once for the selection and
//! twice per stability seed.
//!
//! `cargo bench -p sy-select --bench search -- --warm-up-time 1 --measurement-time 5`

use criterion::{Criterion, criterion_group, criterion_main};
use sy_select::search::{GuardPass, RuleFamily, SearchProbe, search_thresholds};

/// Deterministic probes: R a small count, P a ratio with many distinct values, TTFTs that
/// favour capable when the efficient worker is loaded; a few probes fail a guard.
fn probes(n: usize) -> Vec<SearchProbe> {
    let mut state = 0x9E37_79B9_7F4A_7C15_u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 11) as f64 / (1u64 << 53) as f64
    };
    (0..n)
        .map(|_| {
            let r = (next() * 64.0).floor();
            let p = (next() * 4.0 * 1e4).round() / 1e4;
            let load = r / 64.0 + p / 4.0;
            let guard_ok = next() > 0.02;
            SearchProbe {
                r_eff: Some(r),
                p_eff: Some(p),
                ttft_eff_ms: 200.0 + 600.0 * load + 50.0 * next(),
                ttft_cap_ms: 450.0 + 100.0 * next(),
                guard: GuardPass {
                    r_only: guard_ok,
                    p_only: guard_ok,
                    both: guard_ok,
                },
            }
        })
        .collect()
}

fn search(c: &mut Criterion) {
    let probes = probes(300_000);
    let mut group = c.benchmark_group("search_thresholds_300k");
    group.sample_size(20);
    for family in [RuleFamily::Count, RuleFamily::CountPrefill] {
        group.bench_function(format!("{family:?}"), |b| {
            b.iter(|| search_thresholds(std::hint::black_box(&probes), family, 0))
        });
    }
    group.finish();
}

criterion_group!(benches, search);
criterion_main!(benches);
