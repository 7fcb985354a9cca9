//! What a plan may cost, bounded before anything is allocated or sent.
//!
//! [`check_cost`] is the second half of [`crate::Plan::validate`]: it refuses plans whose size
//! would exhaust the machine or the run's budget (repeats, conditions and units; background
//! streams against the open-file limit; tokens per request and in flight per unit; durations)
//! and plans whose grid values would give two conditions one id. Everything is computed from
//! the plan's lists with checked arithmetic: no condition or unit is built to find out. Checks
//! that need the target (the KV capacity a prompt must fit) live in [`crate::target::preflight`].

use crate::plan::{BackgroundTarget, LoadPhase, Plan};
use crate::schedule::fraction_label;

/// Repeats of one condition.
pub const MAX_REPEATS: u32 = 10_000;
/// Conditions of one phase.
pub const MAX_CONDITIONS: u64 = 100_000;
/// Units (condition × repeat) of the whole plan.
pub const MAX_UNITS: u64 = 1_000_000;
/// Prompt tokens of one request (Dynamo's largest context windows are far below this; the
/// target's KV capacity is checked at preflight).
pub const MAX_PROMPT_TOKENS: u64 = 1 << 24;
/// Output tokens asked of one request.
pub const MAX_OUTPUT_TOKENS: u64 = 1 << 20;
/// Background requests of one contention level (or of the busy capable destination).
pub const MAX_CONTENTION: u32 = 4_096;
/// Prompt and output tokens of every request of one unit in flight at once (the prompts are
/// built in memory: 2^27 token ids are 512 MiB).
pub const MAX_UNIT_TOKENS: u64 = 1 << 27;
/// Any duration of the plan (timeouts, settle, warm-up, back-off): one day.
pub const MAX_DURATION_MS: u64 = 24 * 3_600_000;
/// File descriptors a run needs besides its connections (stdio, record files, runtime).
pub const FD_RESERVE: u64 = 64;

/// What the machine allows this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Machine {
    /// The soft open-file limit (`RLIMIT_NOFILE`, `ulimit -n`); `None` when unknown.
    pub open_files: Option<u64>,
}

impl Machine {
    /// The limits of this process (read from `/proc/self/limits`; unknown elsewhere).
    pub fn current() -> Machine {
        let open_files = std::fs::read_to_string("/proc/self/limits")
            .ok()
            .and_then(|t| parse_open_files(&t));
        Machine { open_files }
    }
}

/// The soft "Max open files" limit of a `/proc/<pid>/limits` text.
fn parse_open_files(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("Max open files"))?;
    let soft = line
        .get("Max open files".len()..)?
        .split_whitespace()
        .next()?;
    if soft == "unlimited" {
        return Some(u64::MAX);
    }
    soft.parse().ok()
}

/// Open files a unit with `slots` background streams needs: one connection per stream, the
/// two probes and their selection-service calls; with the embedded simulator both ends of
/// every connection are in this process, so count each twice.
pub fn files_needed(slots: u64) -> u64 {
    slots
        .saturating_add(4)
        .saturating_mul(2)
        .saturating_add(FD_RESERVE)
}

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
    let mut fields = vec![
        ("target.connect_timeout_ms", t.connect_timeout_ms),
        ("target.first_token_timeout_ms", t.first_token_timeout_ms),
        ("target.request_timeout_ms", t.request_timeout_ms),
        ("target.selection_timeout_ms", t.selection_timeout_ms),
        ("target.retry_backoff_ms", t.retry_backoff_ms),
        ("probe.settle_ms", plan.probe.settle_ms),
    ];
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
    fn parses_the_soft_open_file_limit() {
        let text = "Limit                     Soft Limit           Hard Limit           Units\n\
                    Max cpu time              unlimited            unlimited            seconds\n\
                    Max open files            1024                 524288               files\n";
        assert_eq!(parse_open_files(text), Some(1024));
        let text = "Max open files            unlimited            unlimited            files\n";
        assert_eq!(parse_open_files(text), Some(u64::MAX));
        assert_eq!(parse_open_files("nothing here"), None);
    }

    #[test]
    fn files_needed_counts_both_ends_and_saturates() {
        assert_eq!(files_needed(0), 8 + FD_RESERVE);
        assert_eq!(files_needed(100), 208 + FD_RESERVE);
        assert_eq!(files_needed(u64::MAX), u64::MAX);
    }

    #[test]
    fn blame_picks_the_largest_share() {
        assert_eq!(blame(&[("a", 1), ("b", 7), ("c", 3)]), "b");
    }
}
