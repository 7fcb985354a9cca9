//! What an evaluation may cost, bounded before anything is allocated, started or sent.
//!
//! [`check_plan`] is the second half of [`crate::plan::EvalPlan::validate`]: every count, token
//! range, duration and background field has a bound, and the products that decide memory (the
//! turns a block holds, the tokens of the prompts in flight) and open files (connections in
//! flight against the open-file limit) are computed from the plan's fields with checked
//! arithmetic, so an absurd plan is refused with the field and the limit, never run out of
//! memory or file descriptors. [`check_sessions`] applies the same bounds to a trace's
//! sessions. The token and duration limits are shared with sy-collect ([`sy_drive::limits`]):
//! one definition for both tools.

use sy_drive::limits::{
    MAX_CONTENTION, MAX_DURATION_MS, MAX_OUTPUT_TOKENS, MAX_PROMPT_TOKENS, MAX_UNIT_TOKENS,
    Machine, files_needed,
};

use crate::plan::EvalPlan;
use crate::sessions::SessionSpec;

/// Rounds of one evaluation.
pub const MAX_ROUNDS: u32 = 1_000;
/// Sessions in flight at once within a block.
pub const MAX_CONCURRENCY: usize = 1_024;
/// Sessions of one block.
pub const MAX_SESSIONS: u64 = 100_000;
/// Turns of one session.
pub const MAX_TURNS: u64 = 10_000;
/// Turns of one block (sessions × turns: every turn's record is held until the block ends).
pub const MAX_BLOCK_TURNS: u64 = 1_000_000;
/// Bytes of a trace file.
pub const MAX_TRACE_BYTES: u64 = 256 << 20;
/// Bytes of a plan file.
pub const MAX_PLAN_BYTES: u64 = 1 << 20;

/// A bound broken: the field and the message (with the limit).
pub type Problem = (String, String);

fn at_most(field: &str, value: u64, max: u64, what: &str) -> Result<(), Problem> {
    if value > max {
        return Err((
            field.to_string(),
            format!("{value} is more than the {max} {what} an evaluation allows"),
        ));
    }
    Ok(())
}

/// The longest prompt a session of these ranges can reach (its last turn): the first prompt,
/// then every later turn's appended and generated tokens.
fn longest_context(initial: u64, turns: u64, append: u64, output: u64) -> u64 {
    let later = turns.saturating_sub(1);
    initial
        .saturating_add(later.saturating_mul(append.saturating_add(output)))
        .saturating_add(output)
}

/// Checks every bound of `plan` (see the module docs); `machine` gives the open-file limit.
pub fn check_plan(plan: &EvalPlan, machine: &Machine) -> Result<(), Problem> {
    at_most(
        "rounds",
        u64::from(plan.rounds),
        u64::from(MAX_ROUNDS),
        "rounds",
    )?;
    at_most(
        "concurrency",
        plan.concurrency as u64,
        MAX_CONCURRENCY as u64,
        "sessions in flight",
    )?;
    let s = &plan.sessions;
    at_most(
        "sessions.count",
        u64::from(s.count),
        MAX_SESSIONS,
        "sessions per block",
    )?;
    at_most("sessions.turns", s.turns[1], MAX_TURNS, "turns per session")?;
    for (field, hi, max, what) in [
        (
            "sessions.initial_tokens",
            s.initial_tokens[1],
            MAX_PROMPT_TOKENS,
            "prompt tokens",
        ),
        (
            "sessions.append_tokens",
            s.append_tokens[1],
            MAX_PROMPT_TOKENS,
            "prompt tokens",
        ),
        (
            "sessions.output_tokens",
            s.output_tokens[1],
            MAX_OUTPUT_TOKENS,
            "output tokens",
        ),
        (
            "sessions.think_ms",
            s.think_ms[1],
            MAX_DURATION_MS,
            "milliseconds",
        ),
    ] {
        at_most(field, hi, max, what)?;
    }
    if s.trace.is_none() {
        at_most(
            "sessions.count",
            u64::from(s.count).saturating_mul(s.turns[1]),
            MAX_BLOCK_TURNS,
            "turns per block (sessions.count × sessions.turns)",
        )?;
        let context = longest_context(
            s.initial_tokens[1],
            s.turns[1],
            s.append_tokens[1],
            s.output_tokens[1],
        );
        check_context("sessions", context, plan.concurrency)?;
    }
    check_background(plan)?;
    for (field, ms) in plan.target.timeouts_ms() {
        at_most(field, ms, MAX_DURATION_MS, "milliseconds")?;
    }
    check_files(plan, machine)
}

/// The prompt a session reaches, and the prompts of `concurrency` such sessions in flight (each
/// built in memory), against the token limits.
fn check_context(field: &str, context: u64, concurrency: usize) -> Result<(), Problem> {
    if context > MAX_PROMPT_TOKENS {
        return Err((
            field.to_string(),
            format!(
                "a session's last turn reaches {context} prompt tokens (the first prompt plus \
                 every later turn's appended and output tokens), more than the \
                 {MAX_PROMPT_TOKENS} prompt tokens an evaluation allows"
            ),
        ));
    }
    let in_flight = context.saturating_mul(concurrency as u64);
    if in_flight > MAX_UNIT_TOKENS {
        return Err((
            "concurrency".to_string(),
            format!(
                "{concurrency} sessions in flight with prompts of up to {context} tokens are \
                 {in_flight} tokens held at once, more than the {MAX_UNIT_TOKENS} an evaluation \
                 allows"
            ),
        ));
    }
    Ok(())
}

fn check_background(plan: &EvalPlan) -> Result<(), Problem> {
    let b = &plan.background;
    for (field, n) in [
        ("background.prefill_requests", b.prefill_requests),
        ("background.decode_requests", b.decode_requests),
        ("background.busy_capable_requests", b.busy_capable_requests),
    ] {
        at_most(
            field,
            u64::from(n),
            u64::from(MAX_CONTENTION),
            "background requests",
        )?;
    }
    for (field, n, max, what) in [
        (
            "background.prefill_prompt_tokens",
            b.prefill_prompt_tokens,
            MAX_PROMPT_TOKENS,
            "prompt tokens",
        ),
        (
            "background.decode_prompt_tokens",
            b.decode_prompt_tokens,
            MAX_PROMPT_TOKENS,
            "prompt tokens",
        ),
        (
            "background.decode_output_tokens",
            b.decode_output_tokens,
            MAX_OUTPUT_TOKENS,
            "output tokens",
        ),
        (
            "background.busy_capable_output_tokens",
            b.busy_capable_output_tokens,
            MAX_OUTPUT_TOKENS,
            "output tokens",
        ),
        (
            "background.warmup_ms",
            b.warmup_ms,
            MAX_DURATION_MS,
            "milliseconds",
        ),
    ] {
        at_most(field, n, max, what)?;
    }
    let prompts = u64::from(b.prefill_requests)
        .saturating_mul(b.prefill_prompt_tokens)
        .saturating_add(u64::from(b.decode_requests).saturating_mul(b.decode_prompt_tokens))
        .saturating_mul(2);
    at_most(
        "background",
        prompts,
        MAX_UNIT_TOKENS,
        "background prompt tokens in flight",
    )
}

/// Connections in flight (sessions, each observing both candidates, and background streams on
/// up to both models) against the open-file limit.
fn check_files(plan: &EvalPlan, machine: &Machine) -> Result<(), Problem> {
    let b = &plan.background;
    let slots = (plan.concurrency as u64)
        .saturating_mul(3)
        .saturating_add(
            u64::from(b.prefill_requests)
                .saturating_add(u64::from(b.decode_requests))
                .saturating_mul(2),
        )
        .saturating_add(u64::from(b.busy_capable_requests));
    let need = files_needed(slots);
    match machine.open_files {
        Some(limit) if need > limit => Err((
            "concurrency".to_string(),
            format!(
                "{} sessions in flight and {} background requests need about {need} open \
                 files, more than this process's limit of {limit} (`ulimit -n`): lower them, \
                 or raise the limit",
                plan.concurrency,
                u64::from(b.prefill_requests)
                    + u64::from(b.decode_requests)
                    + u64::from(b.busy_capable_requests)
            ),
        )),
        _ => Ok(()),
    }
}

/// A trace's sessions against the same bounds as a generated plan's (sessions per block, turns
/// per session and per block, tokens, think time, the prompt a session reaches).
pub fn check_sessions(sessions: &[SessionSpec], concurrency: usize) -> Result<(), Problem> {
    at_most(
        "sessions",
        sessions.len() as u64,
        MAX_SESSIONS,
        "sessions per block",
    )?;
    let mut total: u64 = 0;
    for s in sessions {
        let field = format!("session `{}`", sy_rundir::escape_control(&s.id));
        at_most(&field, s.turns.len() as u64, MAX_TURNS, "turns per session")?;
        total = total.saturating_add(s.turns.len() as u64);
        let mut context: u64 = 0;
        for t in &s.turns {
            at_most(
                &format!("{field} append_tokens"),
                t.append_tokens,
                MAX_PROMPT_TOKENS,
                "prompt tokens",
            )?;
            at_most(
                &format!("{field} output_tokens"),
                t.output_tokens,
                MAX_OUTPUT_TOKENS,
                "output tokens",
            )?;
            at_most(
                &format!("{field} think_ms"),
                t.think_ms,
                MAX_DURATION_MS,
                "milliseconds",
            )?;
            context = context
                .saturating_add(t.append_tokens)
                .saturating_add(t.output_tokens);
        }
        check_context(&field, context, concurrency)?;
    }
    at_most("sessions", total, MAX_BLOCK_TURNS, "turns per block")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn plan(extra: &str) -> EvalPlan {
        toml::from_str(&format!("seed = 1\n{extra}")).unwrap()
    }

    #[test]
    fn absurd_fields_are_refused_with_field_and_limit() {
        let machine = Machine {
            open_files: Some(1024),
        };
        for (extra, field) in [
            ("rounds = 1000000\n[sessions]\ncount = 1\n", "rounds"),
            (
                "concurrency = 100000000\n[sessions]\ncount = 1\n",
                "concurrency",
            ),
            ("[sessions]\ncount = 4000000000\n", "sessions.count"),
            (
                "[sessions]\ncount = 1\nturns = [1, 100000000]\n",
                "sessions.turns",
            ),
            (
                "[sessions]\ncount = 90000\nturns = [1, 9000]\n",
                "sessions.count",
            ),
            (
                "[sessions]\ncount = 1\ninitial_tokens = [1, 100000000000]\n",
                "sessions.initial_tokens",
            ),
            (
                "[sessions]\ncount = 1\nappend_tokens = [1, 100000000000]\n",
                "sessions.append_tokens",
            ),
            (
                "[sessions]\ncount = 1\nturns = [9000, 9000]\nappend_tokens = [10000, 10000]\n",
                "sessions",
            ),
            (
                "[sessions]\ncount = 1\n[background]\nprefill_requests = 100000000\n",
                "background.prefill_requests",
            ),
            ("concurrency = 1000\n[sessions]\ncount = 1\n", "concurrency"),
            (
                "[sessions]\ncount = 1\n[target]\nrequest_timeout_ms = 100000000000\n",
                "target.request_timeout_ms",
            ),
        ] {
            let p = plan(extra);
            let (f, message) = check_plan(&p, &machine).unwrap_err();
            assert_eq!(f, field, "{extra}: {message}");
            assert!(message.chars().any(|c| c.is_ascii_digit()), "{message}");
        }
        check_plan(&plan("[sessions]\ncount = 8\n"), &machine).unwrap();
        let _ = Path::new("x");
    }
}
