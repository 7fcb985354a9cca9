//! One block: one variant, one round, on a deployment in a matched starting state.
//!
//! The background slots start first (sy-drive's closed loops, on the same reservation path)
//! and warm up; then the sessions run, `concurrency` at a time. Every turn: observe both
//! candidates and decide ([`LiveRule::route`], the code a host links), reserve the chosen
//! model's worker (`select_and_reserve`), stream the request pinned to it (`prefill_complete` at
//! the first token), delete the reservation at the end, on error and on cancel. Only the chosen
//! model executes. When the sessions are done the background stops (each slot deletes its
//! reservation) and the block checks that nothing is left booked.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use sy_drive::background::{BackgroundLoad, Loops, SlotSpec, busy_slot};
use sy_drive::{Driver, PromptFactory};
use sy_dynamo::{Cancel, ClientConfig, CompletionClient, SelectionClient};
use sy_selector::{Bundle, LiveRule, Model, Variant};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::error::EvalError;
use crate::observer::{DynamoObserver, unix_ms_now};
use crate::plan::{BackgroundSpec, EvalPlan, Models};
use crate::sessions::{SessionSpec, TurnSpec};
use sy_rundir::artifact::eval_block::{
    BLOCK_SCHEMA_VERSION, BackgroundSample, BlockResult, SessionRecord, TurnRecord,
};

/// Everything a block needs besides its variant and round.
#[derive(Debug, Clone)]
pub struct BlockInputs {
    pub plan: Arc<EvalPlan>,
    pub bundle: Arc<Bundle>,
    pub sessions: Arc<Vec<SessionSpec>>,
    pub run_id: String,
    /// Unique per process invocation: prompts and selection ids never repeat across runs.
    pub invocation_id: String,
    pub frontend_url: String,
    pub selection_url: String,
    /// Sent as `Authorization: Bearer …` (the plan's `target.bearer_token_env`).
    pub bearer: Option<String>,
    pub cancel: Cancel,
    /// Advanced by one per finished turn.
    pub progress: indicatif::ProgressBar,
}

/// Which block of the run.
#[derive(Debug, Clone)]
pub struct BlockId {
    pub round: u32,
    pub position: u32,
    pub variant: Variant,
    /// How the starting conditions were matched (recorded in the block).
    pub start_state: String,
}

/// The background slots of the plan (the contention shapes of sy-collect's load phase).
pub fn background_slots(bg: &BackgroundSpec, models: &Models) -> Vec<SlotSpec> {
    let targets: Vec<&str> = match bg.target.as_str() {
        "capable" => vec![&models.capable],
        "both" => vec![&models.efficient, &models.capable],
        _ => vec![&models.efficient],
    };
    let loops = Loops {
        prefill: (bg.prefill_requests, bg.prefill_prompt_tokens),
        decode: (
            bg.decode_requests,
            bg.decode_prompt_tokens.max(1),
            bg.decode_output_tokens,
        ),
    };
    let mut slots = loops.slots(&targets);
    let busy = busy_slot(
        &models.capable,
        bg.decode_prompt_tokens,
        bg.busy_capable_output_tokens,
    );
    slots.extend(std::iter::repeat_n(busy, bg.busy_capable_requests as usize));
    slots
}

/// What every session of a block shares.
#[derive(Debug)]
struct SessionRunner {
    driver: Arc<Driver>,
    rule: LiveRule,
    observer: DynamoObserver,
    prompts: Arc<PromptFactory>,
    models: Models,
    block_key: String,
    round: u32,
    variant: Variant,
    capable_in_flight: AtomicU64,
    cancel: Cancel,
    progress: indicatif::ProgressBar,
}

fn client_config(inputs: &BlockInputs) -> ClientConfig {
    inputs.plan.target.client_config(
        &inputs.frontend_url,
        &inputs.selection_url,
        inputs.bearer.clone(),
    )
}

/// Runs one block and returns what it recorded (not yet written).
pub async fn run_block(inputs: &BlockInputs, id: &BlockId) -> Result<BlockResult, EvalError> {
    let started_at = sy_rundir::now_rfc3339();
    let config = client_config(inputs);
    let http = config.http_client().map_err(EvalError::HttpClient)?;
    let selection = SelectionClient::new(&config, http.clone());
    let block_key = format!("r{}-{}-p{}", id.round, id.variant, id.position);
    let driver = Arc::new(Driver::new(
        CompletionClient::new(&config, http),
        selection.clone(),
        inputs.cancel.clone(),
        format!("{}-{block_key}", inputs.invocation_id),
    ));
    driver.learn_frontend_instances().await;
    driver.stats.keep_background_outcomes();
    let plan = &inputs.plan;
    let prompts = Arc::new(PromptFactory::new(
        plan.seed,
        &inputs.invocation_id,
        &plan.prompt,
    ));
    let slots = background_slots(&plan.background, &plan.models);
    let background = if slots.is_empty() {
        None
    } else {
        let bg = BackgroundLoad::start(
            driver.clone(),
            prompts.clone(),
            block_key.clone(),
            slots,
            Duration::from_millis(100),
        );
        let warm = Duration::from_millis(plan.background.warmup_ms);
        if !bg
            .warm_up(Duration::from_secs(60), warm, &inputs.cancel)
            .await
        {
            tracing::warn!("block {block_key}: not every background slot started within 60 s");
        }
        Some(bg)
    };
    // Competing traffic is measured from here on (not during the warm-up).
    let _ = driver.stats.take_background_outcomes();
    let runner = Arc::new(SessionRunner {
        driver: driver.clone(),
        rule: LiveRule::new(&inputs.bundle, id.variant),
        observer: DynamoObserver {
            selection: selection.clone(),
            efficient: plan.models.efficient.clone(),
            capable: plan.models.capable.clone(),
        },
        prompts,
        models: plan.models.clone(),
        block_key: block_key.clone(),
        round: id.round,
        variant: id.variant,
        capable_in_flight: AtomicU64::new(0),
        cancel: inputs.cancel.clone(),
        progress: inputs.progress.clone(),
    });
    let (turns, sessions) = run_sessions(&runner, &inputs.sessions, plan.concurrency).await?;
    let background_samples = driver.stats.take_background_outcomes();
    if let Some(bg) = background {
        bg.stop().await;
    }
    let stragglers = selection.release_all().await;
    if !stragglers.is_empty() {
        tracing::warn!(
            "block {block_key}: {} reservations could not be deleted",
            stragglers.len()
        );
    }
    let loads_zero_at_end = selection.wait_loads_zero(40).await;
    if inputs.cancel.is_cancelled() {
        return Err(EvalError::Interrupted);
    }
    Ok(BlockResult {
        schema_version: BLOCK_SCHEMA_VERSION,
        run_id: inputs.run_id.clone(),
        round: id.round,
        position: id.position,
        variant: id.variant,
        started_at,
        ended_at: sy_rundir::now_rfc3339(),
        start_state: id.start_state.clone(),
        turns,
        sessions,
        background: background_samples
            .iter()
            .map(|o| BackgroundSample {
                model: if o.model == plan.models.capable {
                    Model::Capable
                } else {
                    Model::Efficient
                },
                ttft_ms: o.ttft_ms,
                e2e_ms: o.e2e_ms,
                ok: o.ok,
            })
            .collect(),
        outstanding_reservations: selection.ledger().outstanding(),
        loads_zero_at_end,
    })
}

/// Runs every session, `concurrency` at a time; records in session order.
async fn run_sessions(
    runner: &Arc<SessionRunner>,
    sessions: &Arc<Vec<SessionSpec>>,
    concurrency: usize,
) -> Result<(Vec<TurnRecord>, Vec<SessionRecord>), EvalError> {
    let gate = Arc::new(Semaphore::new(concurrency));
    let mut tasks = JoinSet::new();
    for index in 0..sessions.len() {
        let runner = runner.clone();
        let sessions = sessions.clone();
        let gate = gate.clone();
        tasks.spawn(async move {
            let _permit = gate.acquire_owned().await;
            let spec = &sessions[index];
            run_session(&runner, index as u32, spec).await
        });
    }
    let mut done = Vec::with_capacity(sessions.len());
    while let Some(joined) = tasks.join_next().await {
        done.push(joined.map_err(EvalError::SessionTask)?);
    }
    done.sort_by_key(|(_, s)| s.session);
    let mut turns = Vec::new();
    let mut records = Vec::new();
    for (t, s) in done {
        turns.extend(t);
        records.push(s);
    }
    Ok((turns, records))
}

/// One session, turn after turn; stops at the first failed turn (the session is then not ok).
async fn run_session(
    runner: &SessionRunner,
    index: u32,
    spec: &SessionSpec,
) -> (Vec<TurnRecord>, SessionRecord) {
    let start = Instant::now();
    let mut history: Vec<u32> = Vec::new();
    let mut turns = Vec::with_capacity(spec.turns.len());
    let (mut planned, mut overshoot) = (0.0, 0.0);
    let key = |t: usize, what: &str| format!("{}/s{index}/t{t}/{what}", runner.block_key);
    let mut ok = true;
    for (t, turn) in spec.turns.iter().enumerate() {
        if turn.think_ms > 0 {
            let think = Duration::from_millis(turn.think_ms);
            let t0 = Instant::now();
            tokio::select! {
                _ = runner.cancel.cancelled() => {}
                _ = tokio::time::sleep(think) => {}
            }
            planned += ms(think);
            overshoot += (ms(t0.elapsed()) - ms(think)).max(0.0);
        }
        if runner.cancel.is_cancelled() {
            ok = false;
            break;
        }
        history.extend(runner.prompts.tokens(&key(t, "append"), turn.append_tokens));
        let record = run_turn(runner, index, spec, t as u32, turn, &history).await;
        runner.progress.inc(1);
        let failed = record.error.is_some();
        turns.push(record);
        if failed {
            ok = false;
            break;
        }
        history.extend(runner.prompts.tokens(&key(t, "output"), turn.output_tokens));
    }
    let session = SessionRecord {
        round: runner.round,
        variant: runner.variant,
        session: index,
        session_id: spec.id.clone(),
        turns: turns.len() as u32,
        completion_ms: ms(start.elapsed()),
        ok: ok && turns.len() == spec.turns.len(),
        think_planned_ms: planned,
        think_overshoot_ms: overshoot,
    };
    (turns, session)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// One turn: route, reserve the chosen model's worker, stream, release.
async fn run_turn(
    runner: &SessionRunner,
    index: u32,
    spec: &SessionSpec,
    t: u32,
    turn: &TurnSpec,
    prompt: &[u32],
) -> TurnRecord {
    let started_at_unix_ms = unix_ms_now();
    let in_flight = runner.capable_in_flight.load(Ordering::SeqCst);
    let t0 = Instant::now();
    let routed = runner
        .rule
        .route(&runner.observer, prompt, turn.proposal, in_flight)
        .await;
    let routing_overhead_ms = ms(t0.elapsed());
    if let Some(f) = &routed.failure {
        tracing::warn!(
            "session {} turn {t}: {f}; keeping Stage's proposal ({})",
            spec.id,
            turn.proposal.as_str()
        );
    }
    let model = match routed.choice {
        Model::Efficient => &runner.models.efficient,
        Model::Capable => &runner.models.capable,
    };
    let mut rec = TurnRecord {
        round: runner.round,
        variant: runner.variant,
        session: index,
        session_id: spec.id.clone(),
        turn: t,
        proposal: turn.proposal,
        choice: routed.choice,
        reason: routed.reason_code().to_string(),
        fallback: routed.is_fallback(),
        decision: routed.decision,
        efficient: routed.input.as_ref().map(|i| i.efficient.clone()),
        capable: routed.input.as_ref().map(|i| i.capable.clone()),
        route_failure: routed.failure.as_ref().map(ToString::to_string),
        routing_overhead_ms,
        observe_ms: routed
            .input
            .as_ref()
            .and_then(|i| i.efficient.recorded.as_deref()?.query_duration_ms),
        prompt_tokens: prompt.len() as u64,
        max_tokens: turn.output_tokens,
        reserved_worker: None,
        served_worker: None,
        ttft_ms: None,
        e2e_ms: None,
        server_ttft_ms: None,
        output_tokens: None,
        cached_tokens: None,
        uncached_input_tokens: None,
        started_at_unix_ms,
        error: None,
    };
    let capable = routed.choice == Model::Capable;
    if capable {
        runner.capable_in_flight.fetch_add(1, Ordering::SeqCst);
    }
    execute(runner, model, prompt, turn, &mut rec).await;
    if capable {
        runner.capable_in_flight.fetch_sub(1, Ordering::SeqCst);
    }
    rec
}

/// Reserve → pinned stream → release; fills the outcome fields of `rec`.
async fn execute(
    runner: &SessionRunner,
    model: &str,
    prompt: &[u32],
    turn: &TurnSpec,
    rec: &mut TurnRecord,
) {
    let max_tokens = u32::try_from(turn.output_tokens).unwrap_or(u32::MAX);
    let driver = &runner.driver;
    let booking = match driver.reserve(model, prompt, max_tokens, "turn").await {
        Ok(b) => b,
        Err(e) => {
            rec.error = Some(format!("reservation: {e}"));
            return;
        }
    };
    rec.reserved_worker = Some(booking.answer.worker_id);
    let out = driver
        .send(
            &booking,
            model,
            prompt.to_vec(),
            max_tokens,
            true,
            &runner.cancel,
            || {},
        )
        .await;
    driver.release(&booking).await;
    rec.served_worker = out.served_worker_id;
    rec.ttft_ms = out.ttft_ms;
    rec.e2e_ms = out.e2e_ms;
    rec.server_ttft_ms = out.server_ttft_ms;
    rec.output_tokens = out.output_tokens;
    rec.cached_tokens = out.cached_tokens;
    let sent = out.prompt_tokens.unwrap_or(prompt.len() as u64);
    rec.uncached_input_tokens = out.cached_tokens.map(|c| sent.saturating_sub(c));
    if let Some(e) = out.error {
        rec.error = Some(format!("{:?}: {}", e.kind, e.message));
        if sy_drive::reservation::worker_fault(e.kind) {
            driver.suspect(booking.answer.worker_id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn background_slots_follow_the_plan() {
        let bg = BackgroundSpec {
            target: "both".into(),
            prefill_requests: 2,
            decode_requests: 1,
            decode_prompt_tokens: 0,
            decode_output_tokens: 300,
            busy_capable_requests: 3,
            ..BackgroundSpec::default()
        };
        let models = Models::default();
        let slots = background_slots(&bg, &models);
        let count = |kind: &str, model: &str| {
            slots
                .iter()
                .filter(|s| s.kind == kind && s.model == model)
                .count()
        };
        assert_eq!(
            (count("prefill", "efficient"), count("prefill", "capable")),
            (2, 2)
        );
        assert_eq!(
            (count("decode", "efficient"), count("decode", "capable")),
            (1, 1)
        );
        assert_eq!(count("busy", "capable"), 3);
        assert_eq!(slots.len(), 9);
        for s in &slots {
            assert!(s.prompt_tokens >= 1 && s.ignore_eos, "{s:?}");
            match s.kind {
                "prefill" => assert_eq!((s.prompt_tokens, s.max_tokens), (2048, 1)),
                "decode" => assert_eq!(s.max_tokens, 300),
                _ => assert_eq!(s.max_tokens, 256),
            }
        }
    }
}
