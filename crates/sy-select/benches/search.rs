//! The r/p threshold search on 300,000 probes, the size of the fit split of 1 M records:
//! `search_thresholds` (the probes prepared and searched once, per rule family), and what
//! `sy-select` does with them: the probes prepared once, in groups of 50 (a condition's
//! repeats; `SearchInput::grouped`), then both families searched on a subset of 60 % of the
//! groups (a split seed's fit split; `search_families`), once per seed.
//!
//! `cargo bench -p sy-select --bench search -- --warm-up-time 1 --measurement-time 5`
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use criterion::{Criterion, criterion_group, criterion_main};
use sy_select::search::{
    GuardPass, Mask, RuleFamily, SearchInput, SearchProbe, search_families, search_thresholds,
};

/// Deterministic probes: R a small count, P a ratio in steps of `1 / p_steps` (40,000 distinct
/// values at 1e4; nearly one per probe at 1e7, as a deployment's token counts may give), TTFTs
/// that favour capable when the efficient worker is loaded; a few probes fail a guard.
fn probes(n: usize, p_steps: f64) -> Vec<SearchProbe> {
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
            let p = (next() * 4.0 * p_steps).round() / p_steps;
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
    let few_p = probes(300_000, 1e4);
    let mut group = c.benchmark_group("search_thresholds_300k");
    group.sample_size(20);
    for family in [RuleFamily::Count, RuleFamily::CountPrefill] {
        group.bench_function(format!("{family:?}"), |b| {
            b.iter(|| search_thresholds(std::hint::black_box(&few_p), family, 0))
        });
    }
    group.finish();
    for (name, p_steps) in [("grouped_300k", 1e4), ("grouped_300k_distinct_p", 1e7)] {
        let probes = probes(300_000, p_steps);
        let group_of = |i: usize| (i / 50) as u32;
        let mut group = c.benchmark_group(name);
        group.sample_size(20);
        group.bench_function("prepare", |b| {
            b.iter(|| SearchInput::grouped(std::hint::black_box(&probes), group_of))
        });
        let input = SearchInput::grouped(&probes, group_of).unwrap();
        // Three groups in five, spread over the probes.
        let keep = Mask::from_fn(probes.len().div_ceil(50), |g| g % 5 < 3);
        group.bench_function("search_families_of_a_subset", |b| {
            b.iter(|| search_families(std::hint::black_box(&input.subset(&keep)), 0))
        });
        group.finish();
    }
}

criterion_group!(benches, search);
criterion_main!(benches);
