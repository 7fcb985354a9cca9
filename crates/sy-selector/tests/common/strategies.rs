//! Proptest strategies of observations shared by the property tests here and sy-select's
//! agreement test: any f64 (NaN, ±inf, subnormal, negative, huge) mixed with realistic values.

use proptest::prelude::*;
use sy_selector::Observation;

/// Any f64 (NaN, ±inf, subnormal, negative, huge) mixed with realistic values, or missing.
pub fn value(realistic: std::ops::Range<f64>) -> impl Strategy<Value = Option<f64>> {
    prop_oneof![
        1 => Just(None),
        2 => any::<f64>().prop_map(Some),
        1 => prop::sample::select(vec![
            f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -1.0, 0.0, -0.0, 1e308, f64::MAX,
            f64::MIN_POSITIVE, 10_000_000.0, 1.0,
        ]).prop_map(Some),
        6 => realistic.prop_map(Some),
    ]
}

pub const NOW: f64 = 1_764_514_800_000.0;

pub fn observation() -> impl Strategy<Value = Observation> {
    (
        value(1.0..140_000.0),
        value(0.0..140_000.0),
        value(0.0..12.0),
        value(0.0..40_000.0),
        value(1_000.0..20_000.0),
        prop_oneof![1 => Just(None), 1 => Just(Some(false)), 6 => Just(Some(true))],
        value(NOW - 800.0..NOW),
    )
        .prop_map(|(n, k, r, booked, capacity, schedulable, at)| Observation {
            n,
            k,
            r,
            prefill_tokens_booked: booked,
            prefill_capacity_tokens: capacity,
            schedulable,
            observed_at_ms: at,
            ..Observation::default()
        })
}

/// A valid, fresh observation with realistic values (K ≤ N, every value present): a turn of two
/// of these passes guard G's validity checks, so its outcome depends on the limits and the
/// predictions.
pub fn fresh_observation() -> impl Strategy<Value = Observation> {
    (
        1.0..140_000.0,
        0.0..1.0,
        0.0..12.0,
        0.0..40_000.0,
        NOW - 400.0..NOW,
    )
        .prop_map(
            |(n, f, r, booked, at): (f64, f64, f64, f64, f64)| Observation {
                n: Some(n),
                k: Some((n * f).floor()),
                r: Some(r.floor()),
                prefill_tokens_booked: Some(booked),
                prefill_capacity_tokens: Some(8_192.0),
                schedulable: Some(true),
                observed_at_ms: Some(at),
                ..Observation::default()
            },
        )
}
