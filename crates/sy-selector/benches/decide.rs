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
use sy_selector::{Variant, decide};

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

criterion_group!(benches, bench_decide);
criterion_main!(benches);
