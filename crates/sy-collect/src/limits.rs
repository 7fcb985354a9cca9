//! What a plan may cost, bounded before anything is allocated or sent.
//!
//! [`check_cost`] is the second half of [`crate::Plan::validate`]: it refuses plans whose size
//! would exhaust the machine or the run's budget (repeats, conditions and units; background
//! streams against the open-file limit; tokens per request and in flight per unit; durations)
//! and plans whose grid values would give two conditions one id. Everything is computed from
//! the plan's lists with checked arithmetic: no condition or unit is built to find out. Checks
//! that need the target (the KV capacity a prompt must fit) live in [`crate::preflight`]. The
//! bounds a driving tool shares (tokens per request, durations, the open-file limit) are
//! [`sy_drive::limits`].

use sy_drive::limits::{
    FD_RESERVE, MAX_CONTENTION, MAX_DURATION_MS, MAX_OUTPUT_TOKENS, MAX_PROMPT_TOKENS,
    MAX_UNIT_TOKENS, Machine, files_needed,
};

use crate::plan::{BackgroundTarget, LoadPhase, Plan, fraction_label};

/// Repeats of one condition.
pub const MAX_REPEATS: u32 = 10_000;
/// Conditions of one phase.
pub const MAX_CONDITIONS: u64 = 100_000;
/// Units (condition × repeat) of the whole plan.
pub const MAX_UNITS: u64 = 1_000_000;

/// A problem: the field and the message.
type Problem = (String, String);

fn at_most(field: &str, value: u64, max: u64, what: &str) -> Result<(), Problem> {
    if value > max {
        return Err((
            field.to_string(),
            format!("{value} is more than the {max} {what} a run allows"),
        ));
    }
    Ok(())
}

/// Checks every bound of the plan (see the module docs).
pub fn check_cost(plan: &Plan, machine: &Machine) -> Result<(), Problem> {
    check_durations(plan)?;
    at_most(
        "probe.max_tokens",
        u64::from(plan.probe.max_tokens),
        MAX_OUTPUT_TOKENS,
        "output tokens per request",
    )?;
    let mut units = 0u64;
    if let Some(q) = &plan.qgrid {
        let conditions = check_grid("qgrid", &q.n, &q.f, q.repeats, &[])?;
        units = units.saturating_add(conditions.saturating_mul(u64::from(q.repeats)));
        check_units("qgrid.repeats", units)?;
        let unit_tokens = max_of(&q.n).saturating_add(u64::from(plan.probe.max_tokens));
        at_most(
            "qgrid.n",
            unit_tokens.saturating_mul(2),
            MAX_UNIT_TOKENS,
            "tokens in flight per unit",
        )?;
    }
    if let Some(l) = &plan.load {
        let levels = [
            l.prefill_contention.len() as u64,
            decode_levels(&l.decode_contention),
            l.busy_capable.len() as u64,
        ];
        let conditions = check_grid("load", &l.n, &l.f, l.repeats, &levels)?;
        units = units.saturating_add(conditions.saturating_mul(u64::from(l.repeats)));
        check_units("load.repeats", units)?;
        check_load_sizes(l)?;
        check_load_in_flight(plan, l, machine)?;
    }
    Ok(())
}

fn check_durations(plan: &Plan) -> Result<(), Problem> {
    let t = &plan.target;
    let mut fields = t.timeouts_ms().to_vec();
    fields.extend([
        ("target.retry_backoff_ms", t.retry_backoff_ms()),
        ("probe.settle_ms", plan.probe.settle_ms),
    ]);
    if let Some(l) = &plan.load {
        fields.push(("load.warmup_ms", l.warmup_ms));
    }
    for (field, ms) in fields {
        at_most(field, ms, MAX_DURATION_MS, "milliseconds (one day)")?;
    }
    Ok(())
}

fn max_of<T: Copy + Into<u64>>(values: &[T]) -> u64 {
    values.iter().map(|&v| v.into()).max().unwrap_or(0)
}

/// Decode levels after splitting each non-zero level into short and long outputs.
fn decode_levels(levels: &[u32]) -> u64 {
    levels.iter().map(|&d| if d == 0 { 1u64 } else { 2 }).sum()
}

/// Bounds one phase's grid and returns its number of conditions. `extra` are the lengths of the
/// load phase's other axes.
fn check_grid(
    phase: &str,
    n: &[u64],
    f: &[f64],
    repeats: u32,
    extra: &[u64],
) -> Result<u64, Problem> {
    at_most(
        &format!("{phase}.repeats"),
        u64::from(repeats),
        u64::from(MAX_REPEATS),
        "repeats per condition",
    )?;
    for (i, &v) in n.iter().enumerate() {
        at_most(
            &format!("{phase}.n[{i}]"),
            v,
            MAX_PROMPT_TOKENS,
            "prompt tokens per request",
        )?;
    }
    check_fraction_ids(phase, f)?;
    let conditions = extra
        .iter()
        .fold((n.len() as u64).saturating_mul(f.len() as u64), |a, &b| {
            a.saturating_mul(b)
        });
    if conditions > MAX_CONDITIONS {
        return Err((
            format!("{phase}.n"),
            format!(
                "the {phase} grid has {conditions} conditions (the product of its axes' \
                 lengths), more than the {MAX_CONDITIONS} a run allows"
            ),
        ));
    }
    Ok(conditions)
}

/// Two cached fractions whose condition-id labels are equal would make two conditions one id.
fn check_fraction_ids(phase: &str, f: &[f64]) -> Result<(), Problem> {
    for (i, &a) in f.iter().enumerate() {
        for (j, &b) in f.iter().enumerate().take(i) {
            let label = fraction_label(a);
            if label == fraction_label(b) {
                return Err((
                    format!("{phase}.f[{i}]"),
                    format!(
                        "{a} and {phase}.f[{j}] = {b} both round to f{label} in condition ids \
                         (three decimals): two conditions would share one id; make them differ \
                         by at least 0.001"
                    ),
                ));
            }
        }
    }
    Ok(())
}

fn check_units(field: &str, units: u64) -> Result<(), Problem> {
    if units > MAX_UNITS {
        return Err((
            field.to_string(),
            format!(
                "the plan has {units} units (conditions × repeats), more than the {MAX_UNITS} a \
                 run allows"
            ),
        ));
    }
    Ok(())
}

fn check_load_sizes(l: &LoadPhase) -> Result<(), Problem> {
    for (field, levels) in [
        ("load.prefill_contention", &l.prefill_contention),
        ("load.decode_contention", &l.decode_contention),
    ] {
        for (i, &v) in levels.iter().enumerate() {
            at_most(
                &format!("{field}[{i}]"),
                u64::from(v),
                u64::from(MAX_CONTENTION),
                "background requests per level",
            )?;
        }
    }
    if l.busy_capable.contains(&true) {
        at_most(
            "load.busy_capable_requests",
            u64::from(l.busy_capable_requests),
            u64::from(MAX_CONTENTION),
            "background requests per level",
        )?;
    }
    for (field, v) in [
        ("load.prefill_prompt_tokens", l.prefill_prompt_tokens),
        ("load.decode_prompt_tokens", l.decode_prompt_tokens),
    ] {
        at_most(field, v, MAX_PROMPT_TOKENS, "prompt tokens per request")?;
    }
    for (field, v) in [
        ("load.short_output_tokens", l.short_output_tokens),
        ("load.long_output_tokens", l.long_output_tokens),
        (
            "load.busy_capable_output_tokens",
            l.busy_capable_output_tokens,
        ),
    ] {
        at_most(field, v, MAX_OUTPUT_TOKENS, "output tokens per request")?;
    }
    Ok(())
}

/// The largest unit's background streams (against the open-file limit) and tokens in flight
/// (against [`MAX_UNIT_TOKENS`]), blaming the field that contributes most.
fn check_load_in_flight(plan: &Plan, l: &LoadPhase, machine: &Machine) -> Result<(), Problem> {
    let targets = match l.background_target {
        BackgroundTarget::Both => 2u64,
        _ => 1,
    };
    let busy = if l.busy_capable.contains(&true) {
        u64::from(l.busy_capable_requests)
    } else {
        0
    };
    let prefill = targets.saturating_mul(max_of(&l.prefill_contention));
    let decode = targets.saturating_mul(max_of(&l.decode_contention));
    let streams = [
        ("load.prefill_contention", prefill),
        ("load.decode_contention", decode),
        ("load.busy_capable_requests", busy),
    ];
    let slots = prefill.saturating_add(decode).saturating_add(busy);
    if let Some(limit) = machine.open_files
        && files_needed(slots) > limit
    {
        let field = blame(&streams);
        return Err((
            field.to_string(),
            format!(
                "a unit would hold {slots} background requests in flight, needing about {} open \
                 files (connections at both ends with the embedded simulator, plus {FD_RESERVE}), \
                 but this process may open only {limit} (RLIMIT_NOFILE: raise `ulimit -n` or \
                 lower the contention)",
                files_needed(slots)
            ),
        ));
    }
    let probe = max_of(&l.n).saturating_add(u64::from(plan.probe.max_tokens));
    let tokens = [
        (
            "load.prefill_prompt_tokens",
            prefill.saturating_mul(l.prefill_prompt_tokens.saturating_add(1)),
        ),
        (
            "load.decode_prompt_tokens",
            decode.saturating_mul(l.decode_prompt_tokens.saturating_add(l.long_output_tokens)),
        ),
        (
            "load.busy_capable_output_tokens",
            busy.saturating_mul(
                l.decode_prompt_tokens
                    .saturating_add(l.busy_capable_output_tokens),
            ),
        ),
        ("load.n", probe.saturating_mul(2)),
    ];
    let total = tokens.iter().fold(0u64, |a, (_, t)| a.saturating_add(*t));
    if total > MAX_UNIT_TOKENS {
        return Err((
            blame(&tokens).to_string(),
            format!(
                "a unit would have {total} prompt and output tokens in flight at once, more than \
                 the {MAX_UNIT_TOKENS} a run allows (its prompts are built in memory)"
            ),
        ));
    }
    Ok(())
}

/// The field with the largest share.
fn blame<'a>(shares: &[(&'a str, u64)]) -> &'a str {
    shares
        .iter()
        .max_by_key(|(_, v)| *v)
        .map_or("load", |(f, _)| f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blame_picks_the_largest_share() {
        assert_eq!(blame(&[("a", 1), ("b", 7), ("c", 3)]), "b");
    }
}
