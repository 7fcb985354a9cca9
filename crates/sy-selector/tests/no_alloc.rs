//! `decide` performs no heap allocation: a counting global allocator in this test binary (its own
//! binary so no other test shares the allocator) counts allocations made by this thread while
//! decisions run.
#![allow(unsafe_code)]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

use sy_selector::{Model, Variant, decide};

struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    // Const-initialised and without a destructor: reading it never allocates.
    static ARMED: Cell<bool> = const { Cell::new(false) };
}

fn count() {
    if ARMED.with(Cell::get) {
        ALLOCATIONS.fetch_add(1, Ordering::SeqCst);
    }
}

// SAFETY: every method forwards to the system allocator unchanged; counting has no effect on the
// returned memory.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations made by this thread while `f` runs.
fn allocations_during(f: impl FnOnce()) -> usize {
    let before = ALLOCATIONS.load(Ordering::SeqCst);
    ARMED.with(|a| a.set(true));
    f();
    ARMED.with(|a| a.set(false));
    ALLOCATIONS.load(Ordering::SeqCst) - before
}

#[test]
fn decide_does_not_allocate() {
    let params = common::params();
    let base = common::example_input();
    // Inputs that reach every path: override, trigger false, each guard failure, invalid input,
    // out of range, non-positive prediction, capable proposal.
    let mut inputs = vec![base.clone()];
    let mut i = base.clone();
    i.proposal = Model::Capable;
    inputs.push(i);
    let mut i = base.clone();
    i.capable.schedulable = Some(false);
    inputs.push(i);
    let mut i = base.clone();
    i.efficient.k = Some(f64::NAN);
    inputs.push(i);
    let mut i = base.clone();
    i.now_ms += 10_000.0;
    inputs.push(i);
    let mut i = base.clone();
    i.capable.r = Some(100.0);
    inputs.push(i);
    let mut i = base.clone();
    i.local_capable_in_flight = 100;
    inputs.push(i);
    let mut i = base.clone();
    i.capable.n = Some(1e7);
    inputs.push(i);
    let mut i = base.clone();
    i.efficient.r = Some(0.0);
    i.efficient.prefill_tokens_booked = Some(0.0);
    inputs.push(i);
    let mut negative = params.clone();
    negative.capable.cache.intercept = -1e9;
    negative.capable.blind.intercept = -1e9;
    let mut off = params.clone();
    off.thresholds.r = None;
    off.thresholds.p = None;

    // Warm up anything lazily initialised outside the counted region.
    for i in &inputs {
        for v in Variant::ALL {
            std::hint::black_box(decide(&params, v, i));
        }
    }

    let mut reasons = std::collections::BTreeSet::new();
    let mut decisions = Vec::with_capacity(inputs.len() * Variant::ALL.len() * 3);
    let n = allocations_during(|| {
        for i in &inputs {
            for v in Variant::ALL {
                for p in [&params, &negative, &off] {
                    let d = decide(std::hint::black_box(p), v, std::hint::black_box(i));
                    // `decisions` has capacity reserved up front: pushing does not allocate.
                    decisions.push(d);
                }
            }
        }
    });
    for d in &decisions {
        reasons.insert(d.reason.code());
    }
    assert_eq!(n, 0, "decide allocated {n} times");
    // The counter works: an allocation inside the armed region is seen.
    let seen = allocations_during(|| {
        std::hint::black_box(vec![1_u8; 16]);
    });
    assert!(seen >= 1);
    // Every kind of path was exercised.
    for code in sy_selector::Reason::CODES {
        assert!(reasons.contains(code), "{code} not reached: {reasons:?}");
    }
}
