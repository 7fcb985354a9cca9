//! `decide` per variant on the proposal's example turn.
//!
//! ```text
//! cargo bench -p sy-selector --bench decide
//! ```
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../tests/common/mod.rs"]
mod common;

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use sy_selector::{CandidateFeatures, Estimator, TtftGround, Variant, decide, decide_prepared};

fn bench_decide(c: &mut Criterion) {
    let params = common::params();
    let input = common::example_input();
    let mut group = c.benchmark_group("decide");
    for variant in Variant::ALL {
        group.bench_function(variant.as_str(), |b| {
            // The decision stays where `decide` wrote it; `black_box(&d)` keeps it observable
            // without timing criterion's 184-byte copy of a returned value.
            b.iter(|| {
                let d = decide(black_box(&params), black_box(variant), black_box(&input));
                black_box(&d);
            })
        });
    }
    group.finish();
}

/// A TTFT variant's decision three ways on the same turn: `decide_prepared` (the features
/// taken beforehand), settling the turn (`TtftGround::settle`, once per turn in `sy-select`)
/// and finishing a settled turn (`TtftTurn::decide`, once per split seed).
fn bench_settled(c: &mut Criterion) {
    let params = common::params();
    let input = common::example_input();
    let features = CandidateFeatures::of(&input);
    let ground = TtftGround::of(&params);
    let mut group = c.benchmark_group("ttft_turn");
    for (variant, estimator) in [
        (Variant::Blind, Estimator::Blind),
        (Variant::Cache, Estimator::Cache),
    ] {
        let name = variant.as_str();
        group.bench_function(format!("{name}: decide_prepared"), |b| {
            b.iter(|| {
                let d = decide_prepared(black_box(&params), variant, black_box(&input), &features);
                black_box(&d);
            })
        });
        group.bench_function(format!("{name}: settle"), |b| {
            b.iter(|| black_box(ground.settle(estimator, black_box(&input), black_box(&features))))
        });
        let turn = ground.settle(estimator, &input, &features).unwrap();
        group.bench_function(format!("{name}: finish"), |b| {
            b.iter(|| black_box(black_box(&turn).decide(black_box(&params), estimator, &features)))
        });
    }
    group.finish();
}

criterion_group!(benches, bench_decide, bench_settled);
criterion_main!(benches);
