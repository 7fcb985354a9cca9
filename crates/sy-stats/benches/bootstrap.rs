//! One series' grouped bootstrap (`GroupDraws::series`: the mean and the 90th percentile of
//! every resample), the shape of `sy-select`'s selection split: about 50 pairs a condition,
//! 100,000 pairs at 1 M records and 1,000,000 at 10 M; 2,000 resamples, as the tool draws
//! (for six series).
//!
//! `cargo bench -p sy-stats --bench bootstrap -- --warm-up-time 1 --measurement-time 5`

use criterion::{Criterion, criterion_group, criterion_main};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use sy_stats::{BootstrapConfig, GroupDraws};

/// `conditions × 50` TTFT-like values: a level per condition and a spread within it.
fn series(conditions: usize) -> (Vec<f64>, Vec<u32>) {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let mut values = Vec::with_capacity(conditions * 50);
    let mut ids = Vec::with_capacity(conditions * 50);
    for c in 0..conditions {
        let level = 100.0 + 900.0 * rng.random::<f64>();
        for _ in 0..50 {
            values.push(level + 80.0 * rng.random::<f64>());
            ids.push(c as u32);
        }
    }
    (values, ids)
}

fn bench(c: &mut Criterion) {
    let cfg = BootstrapConfig {
        resamples: 2_000,
        ..BootstrapConfig::default()
    };
    for (name, conditions) in [("2,000 conditions", 2_000), ("20,000 conditions", 20_000)] {
        let (values, ids) = series(conditions);
        // Draws fail only without groups or resamples; these have both.
        let Ok(draws) = GroupDraws::new(&ids, &cfg) else {
            continue;
        };
        c.bench_function(&format!("series p90, {name}"), |b| {
            b.iter(|| draws.series(&values, 0.9))
        });
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10);
    targets = bench
}
criterion_main!(benches);
