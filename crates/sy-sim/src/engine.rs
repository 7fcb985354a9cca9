//! The worker engine: one tokio task per worker driving Dynamo's mocker engine.
//!
//! The scheduler, the KV manager (prefix cache, block allocation, eviction, preemption) and the
//! timing model are the ones `python -m dynamo.mocker` runs in Dynamo 1.6.1: `dynamo-mocker`
//! 1.6.1 drives `aisimulate-core` 0.13.0's vLLM engine (`aisimulate_core::engine::Engine`,
//! `engine/scheduler/vllm/core.rs`) through its wall-clock driver (`dynamo-mocker`'s
//! `src/generalized_live.rs`). This module is that driver for the simulator's clock instead:
//! the engine eagerly computes a pass and its modeled end; the task sleeps `time_scale` × the
//! pass's simulated duration on the precise timer, then completes the pass and hands its outputs
//! to the requests' streams. Its KV events feed the worker's [`CachedBlocks`], what the routers
//! match prompts against. Output token ids are the simulator's own (seeded), not the engine's.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aisimulate_core::engine::generalized::{EngineIdentity, SchedulerCommand};
use aisimulate_core::engine::{
    Command, Engine, EngineFactory, EngineLaunchConfig, KvEvent, Output, Request, TimingModel,
};
use tokio::sync::mpsc;
use uuid::Uuid;

use crate::cache::CachedBlocks;
use crate::config::{ModelConfig, StepTimeConfig, TimingKind};
use crate::hashing::output_token;

/// What the frontend hands to a worker.
#[derive(Debug)]
pub(crate) struct EngineRequest {
    pub tokens: Vec<u32>,
    pub prompt_hash: u64,
    pub max_tokens: u32,
    pub tx: mpsc::UnboundedSender<SeqEvent>,
    /// When the frontend received the request: the earliest its prefill may start.
    pub arrived: Instant,
}

#[derive(Debug)]
pub(crate) enum EngineMsg {
    Add(EngineRequest),
    Kill,
}

/// Facts about the first token.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FirstToken {
    pub cached_tokens: u64,
    pub prefill_started: Instant,
    pub at: Instant,
}

/// What a worker sends back per request.
#[derive(Debug)]
pub(crate) enum SeqEvent {
    Token {
        id: u32,
        first: Option<FirstToken>,
    },
    Finished {
        at: Instant,
        generated: u32,
    },
    /// The worker died (killed) or its engine refused the request: it cannot finish.
    Error,
}

/// Parameters of one worker's engine.
#[derive(Debug, Clone)]
pub(crate) struct EngineParams {
    pub block_size: u64,
    pub kv_blocks: u64,
    pub max_num_batched_tokens: u64,
    pub max_num_seqs: usize,
    pub timing: TimingKind,
    pub step: StepTimeConfig,
    pub speed: f64,
    pub time_scale: f64,
    pub seed: u64,
}

impl EngineParams {
    /// The parameters of worker `index` of model `m`.
    pub fn of(m: &ModelConfig, index: usize, time_scale: f64, seed: u64) -> Self {
        Self {
            block_size: u64::from(m.block_size),
            kv_blocks: m.kv_blocks,
            max_num_batched_tokens: m.max_num_batched_tokens,
            max_num_seqs: m.max_num_seqs,
            timing: m.timing,
            step: m.step.clone(),
            speed: m.speed(index),
            time_scale,
            seed,
        }
    }
}

/// The step-time model as the engine's timing model. The engine asks for a pass's prefill batch
/// first and its decode batch after (`aisimulate-core` 0.13.0, `engine/scheduler/vllm/core.rs`:
/// `predict_prefill_duration`, then `emit_ready_tokens`) and adds the two; one forward pass has
/// one fixed cost, so the decode batch of a pass that also prefilled does not pay `base_ms` again.
/// `prefill_in_pass` says whether this pass prefilled: the prefill prediction sets it, the
/// decode prediction takes it, the driver clears it before every pass.
struct StepTiming {
    step: StepTimeConfig,
    prefill_in_pass: Arc<AtomicBool>,
}

impl TimingModel for StepTiming {
    fn prefill_batch_validation_can_fail(&self) -> bool {
        false
    }

    fn prefill_prediction_can_fail(&self) -> bool {
        false
    }

    fn predict_prefill_ms(
        &self,
        batch_size: usize,
        mean_isl: usize,
        mean_prefix: usize,
    ) -> anyhow::Result<f64> {
        let ms = self.step.prefill_ms(batch_size, mean_isl, mean_prefix);
        if ms > 0.0 {
            self.prefill_in_pass.store(true, Ordering::Relaxed);
        }
        Ok(ms)
    }

    fn predict_decode_ms(
        &self,
        batch_size: usize,
        _active_kv_tokens: usize,
        mean_context_length: usize,
        _total_kv_tokens: usize,
    ) -> anyhow::Result<f64> {
        let shared = self.prefill_in_pass.swap(false, Ordering::Relaxed);
        Ok(self
            .step
            .decode_ms(batch_size, mean_context_length, !shared))
    }
}

/// Builds a worker's engine: the launch configuration `python -m dynamo.mocker` makes of
/// `--block-size`, `--num-gpu-blocks-override`, `--max-num-seqs`, `--max-num-batched-tokens` and
/// `--speedup-ratio` (prefix caching and chunked prefill on, their defaults), with KV events on.
/// The error is the engine's own message.
pub(crate) fn build_engine(p: &EngineParams, worker_id: u64) -> Result<BuiltEngine, String> {
    let prefill_in_pass = Arc::new(AtomicBool::new(false));
    let launch = EngineLaunchConfig::from_value(serde_json::json!({
        "engine": {
            "backend": "vllm",
            "block_size": p.block_size,
            "num_gpu_blocks": p.kv_blocks,
            "max_num_seqs": p.max_num_seqs,
            "max_num_batched_tokens": p.max_num_batched_tokens,
            "speedup_ratio": p.speed,
            "enable_prefix_caching": true,
            "enable_chunked_prefill": true,
        }
    }))
    .map_err(|e| format!("{e:#}"))?;
    let mut rank = launch.engine;
    rank.emit_kv_events = true;
    let factory = match p.timing {
        TimingKind::Mocker => EngineFactory::new(rank),
        TimingKind::Step => EngineFactory::with_timing_model(
            rank,
            Arc::new(StepTiming {
                step: p.step.clone(),
                prefill_in_pass: Arc::clone(&prefill_in_pass),
            }),
        ),
    }
    .map_err(|e| format!("{e:#}"))?;
    let engine = factory
        .build(EngineIdentity::new(worker_id), NonZeroU32::MIN)
        .map_err(|e| format!("{e:#}"))?;
    Ok(BuiltEngine {
        engine,
        prefill_in_pass,
    })
}

/// A worker's engine and its timing model's pass flag (see `StepTiming`).
pub(crate) struct BuiltEngine {
    pub engine: Engine,
    pub prefill_in_pass: Arc<AtomicBool>,
}

/// State shared between the engine task and the HTTP side.
#[derive(Debug)]
pub(crate) struct EngineShared {
    pub cache: Mutex<CachedBlocks>,
    pub alive: AtomicBool,
}

#[derive(Debug)]
struct Seq {
    prompt_hash: u64,
    tx: mpsc::UnboundedSender<SeqEvent>,
    arrived: Instant,
    cached_tokens: u64,
    prefill_started: Option<Instant>,
    generated: u32,
}

fn lock_cache(shared: &EngineShared) -> std::sync::MutexGuard<'_, CachedBlocks> {
    match shared.cache.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}

struct Driver {
    p: EngineParams,
    shared: Arc<EngineShared>,
    engine: Engine,
    prefill_in_pass: Arc<AtomicBool>,
    seqs: HashMap<Uuid, Seq>,
    next_id: u128,
    /// The engine's clock (simulated ms): never goes back.
    engine_ms: f64,
    origin: Instant,
}

impl Driver {
    /// Simulated ms of the wall instant `t` on the engine's clock (the engine's own
    /// bookkeeping; durations come from its timing model).
    fn sim_now(&mut self, t: Instant) -> f64 {
        let wall_ms = t.saturating_duration_since(self.origin).as_secs_f64() * 1000.0;
        let sim = if self.p.time_scale > 0.0 {
            wall_ms / self.p.time_scale
        } else {
            self.engine_ms
        };
        self.engine_ms = self.engine_ms.max(sim);
        self.engine_ms
    }

    fn apply_kv(&self, events: &[KvEvent]) {
        if events.is_empty() {
            return;
        }
        let mut cache = lock_cache(&self.shared);
        for e in events {
            cache.apply(e);
        }
    }

    fn command(&mut self, command: Command) -> bool {
        let now = self.sim_now(Instant::now());
        match self
            .engine
            .apply_command_effects(SchedulerCommand::new(0, command), now)
        {
            Ok(effects) => {
                for r in &effects.by_rank {
                    self.apply_kv(&r.effects.kv_events);
                }
                true
            }
            Err(e) => {
                tracing::warn!("simulated worker engine refused a command: {e:#}");
                false
            }
        }
    }

    fn submit(&mut self, r: EngineRequest) {
        let id = Uuid::from_u128(self.next_id);
        self.next_id += 1;
        let request = Request {
            request_id: id,
            tokens: r.tokens,
            max_output_tokens: r.max_tokens.max(1) as usize,
            output_token_ids: None,
        };
        let tx = r.tx;
        if !self.command(Command::Submit(request)) {
            let _ = tx.send(SeqEvent::Error);
            return;
        }
        self.seqs.insert(
            id,
            Seq {
                prompt_hash: r.prompt_hash,
                tx,
                arrived: r.arrived,
                cached_tokens: 0,
                prefill_started: None,
                generated: 0,
            },
        );
    }

    /// Requests whose client went away leave the engine (their blocks are released).
    fn cancel_closed(&mut self) {
        let closed: Vec<Uuid> = self
            .seqs
            .iter()
            .filter(|(_, s)| s.tx.is_closed())
            .map(|(id, _)| *id)
            .collect();
        for id in closed {
            self.seqs.remove(&id);
            self.command(Command::CancelRequest {
                request_id: id,
                discard_pending_output: true,
            });
        }
    }

    fn fail_all(&mut self) {
        for (_, s) in self.seqs.drain() {
            let _ = s.tx.send(SeqEvent::Error);
        }
    }

    /// Delivers one output of a pass that ended at `at`.
    fn deliver(&mut self, o: &Output, at: Instant) {
        let seed = self.p.seed;
        let Some(s) = self.seqs.get_mut(&o.request_id) else {
            return;
        };
        if o.rejected {
            let _ = s.tx.send(SeqEvent::Error);
            self.seqs.remove(&o.request_id);
            return;
        }
        let mut gone = false;
        if o.token_id.is_some() {
            let first = (s.generated == 0).then(|| FirstToken {
                cached_tokens: o.cached_tokens.map_or(s.cached_tokens, |c| c as u64),
                prefill_started: s.prefill_started.unwrap_or(at),
                at,
            });
            let id = output_token(seed, s.prompt_hash, s.generated);
            s.generated += 1;
            gone = s.tx.send(SeqEvent::Token { id, first }).is_err();
        }
        if o.completed && !gone {
            let _ = s.tx.send(SeqEvent::Finished {
                at,
                generated: s.generated,
            });
        }
        if o.completed || gone {
            self.seqs.remove(&o.request_id);
        }
    }
}

/// When a pass starts on the wall clock. While the worker is busy (`chain`: the end of the
/// previous pass, reset when the worker goes idle), passes follow each other back to back unless
/// the previous one ended more than 5 ms ago (the mocker's driver allows the same catch-up,
/// `ABSOLUTE_PASS_MAX_CATCH_UP`). A pass that admits requests to an idle worker starts when the
/// earliest of them reached the frontend (`admitted`), but never before the worker's previous
/// pass ended (`prev_end`): the simulator's own handling of a request (parsing, tokenizing,
/// hashing, routing) is host time, not simulated time, so an idle worker's simulated TTFT is the
/// timing model's.
fn pass_start(
    now: Instant,
    chain: Option<Instant>,
    prev_end: Option<Instant>,
    admitted: Option<Instant>,
) -> Instant {
    let recent = now.checked_sub(Duration::from_millis(5)).unwrap_or(now);
    if let Some(t) = chain.filter(|t| *t > recent) {
        return t;
    }
    match admitted {
        Some(a) => a.max(prev_end.unwrap_or(a)).min(now),
        None => now,
    }
}

/// Runs a worker until it is killed or every sender is gone.
pub(crate) async fn run_engine(
    p: EngineParams,
    built: BuiltEngine,
    shared: Arc<EngineShared>,
    mut rx: mpsc::UnboundedReceiver<EngineMsg>,
) {
    let mut d = Driver {
        p,
        shared,
        engine: built.engine,
        prefill_in_pass: built.prefill_in_pass,
        seqs: HashMap::new(),
        next_id: 1,
        engine_ms: 0.0,
        origin: Instant::now(),
    };
    // The end of the previous pass while the worker stays busy (`None` once it went idle), and
    // the end of its last pass ever.
    let mut chain: Option<Instant> = None;
    let mut prev_end: Option<Instant> = None;
    'run: loop {
        if d.seqs.is_empty() {
            chain = None;
            match rx.recv().await {
                Some(EngineMsg::Add(r)) => d.submit(r),
                Some(EngineMsg::Kill) | None => break 'run,
            }
        }
        loop {
            match rx.try_recv() {
                Ok(EngineMsg::Add(r)) => d.submit(r),
                Ok(EngineMsg::Kill) => break 'run,
                Err(_) => break,
            }
        }
        d.cancel_closed();
        if !d.engine.is_ready() {
            if !d.seqs.is_empty() {
                // Requests the engine cannot run yet and no pass to wait for: wait for news.
                tokio::task::yield_now().await;
            }
            continue;
        }
        let now = Instant::now();
        let start_ms = d.sim_now(now);
        d.prefill_in_pass.store(false, Ordering::Relaxed);
        let started = match d.engine.execute_pass(start_ms) {
            Ok(Some(s)) => s,
            Ok(None) => continue,
            Err(e) => {
                tracing::warn!("simulated worker engine failed a pass: {e:#}");
                break 'run;
            }
        };
        let mut admitted: Option<Instant> = None;
        let mut newly: Vec<Uuid> = Vec::new();
        for r in &started.by_rank {
            d.apply_kv(&r.effects.kv_events);
            for a in &r.effects.admissions {
                if let Some(s) = d.seqs.get_mut(&a.request_id)
                    && s.prefill_started.is_none()
                {
                    s.cached_tokens = a.reused_input_tokens as u64;
                    admitted = Some(admitted.map_or(s.arrived, |t: Instant| t.min(s.arrived)));
                    newly.push(a.request_id);
                }
            }
        }
        let sim_ms = (started.end_ms - started.started_at_ms).max(0.0);
        let dt = crate::config::wall(d.p.time_scale, sim_ms);
        let start = pass_start(now, chain, prev_end, admitted);
        for id in newly {
            if let Some(s) = d.seqs.get_mut(&id) {
                s.prefill_started = Some(start);
            }
        }
        let end = start + dt;
        if dt.is_zero() {
            tokio::task::yield_now().await;
        } else {
            // Not tokio's timer: it ends a sleep 0–1.5 ms late, which made every simulated
            // TTFT about a millisecond longer than the timing model (20 % on a 6 ms prefill).
            crate::precise_timer::sleep_until(end).await;
        }
        chain = Some(end);
        prev_end = Some(end);
        d.engine_ms = d.engine_ms.max(started.end_ms);
        let completed = match d.engine.complete_pass(started.pass_id, started.end_ms) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!("simulated worker engine failed to complete a pass: {e:#}");
                break 'run;
            }
        };
        // Tokens carry the pass's simulated end, not the host's (later) wake-up time.
        for r in &completed.effects.by_rank {
            d.apply_kv(&r.effects.kv_events);
            for o in &r.effects.outputs {
                d.deliver(o, end);
            }
        }
    }
    d.shared.alive.store(false, Ordering::SeqCst);
    d.fail_all();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(timing: TimingKind) -> EngineParams {
        EngineParams {
            block_size: 16,
            kv_blocks: 64,
            max_num_batched_tokens: 256,
            max_num_seqs: 8,
            timing,
            step: StepTimeConfig::default(),
            speed: 1.0,
            time_scale: 0.0,
            seed: 1,
        }
    }

    /// The engine's KV events name the blocks by the same sequence hashes the routers compute
    /// (`dynamo-tokens`), so a prompt served once matches itself in full afterwards.
    #[test]
    fn kv_events_use_the_routers_block_hashes() -> Result<(), String> {
        let p = params(TimingKind::Step);
        let mut engine = build_engine(&p, 7)?.engine;
        let tokens: Vec<u32> = (100..164).collect();
        let hashes = crate::hashing::sequence_hashes(&tokens, 16);
        let mut cache = CachedBlocks::default();
        let submit = Command::Submit(Request {
            request_id: Uuid::from_u128(1),
            tokens,
            max_output_tokens: 2,
            output_token_ids: None,
        });
        let effects = engine
            .apply_command_effects(SchedulerCommand::new(0, submit), 0.0)
            .map_err(|e| e.to_string())?;
        let mut events: Vec<KvEvent> = effects
            .by_rank
            .into_iter()
            .flat_map(|r| r.effects.kv_events)
            .collect();
        let mut now = 0.0;
        let mut outputs = 0;
        while let Some(started) = engine.execute_pass(now).map_err(|e| e.to_string())? {
            events.extend(
                started
                    .by_rank
                    .iter()
                    .flat_map(|r| r.effects.kv_events.clone()),
            );
            now = started.end_ms;
            let done = engine
                .complete_pass(started.pass_id, now)
                .map_err(|e| e.to_string())?;
            for r in done.effects.by_rank {
                outputs += r.effects.outputs.len();
                events.extend(r.effects.kv_events);
            }
        }
        for e in &events {
            cache.apply(e);
        }
        assert_eq!(outputs, 2);
        assert_eq!(cache.match_prefix(&hashes), 4);
        Ok(())
    }

    /// Runs passes until one admits `id`; returns that pass's simulated duration.
    fn pass_admitting(engine: &mut Engine, flag: &AtomicBool, id: Uuid, now: &mut f64) -> f64 {
        loop {
            flag.store(false, Ordering::Relaxed);
            let started = engine.execute_pass(*now).unwrap().unwrap();
            let admitted = started
                .by_rank
                .iter()
                .any(|r| r.effects.admissions.iter().any(|a| a.request_id == id));
            let took = started.end_ms - started.started_at_ms;
            *now = started.end_ms;
            engine.complete_pass(started.pass_id, *now).unwrap();
            if admitted {
                return took;
            }
        }
    }

    /// A pass that prefills and decodes pays the step's fixed cost once: the prefill batch's
    /// cost plus the decode batch's per-sequence cost, not two `base_ms`.
    #[test]
    fn a_mixed_pass_pays_the_fixed_cost_once() {
        let p = params(TimingKind::Step);
        let built = build_engine(&p, 3).unwrap();
        let (mut engine, flag) = (built.engine, built.prefill_in_pass);
        let submit = |engine: &mut Engine, id: u128, n: u32, out: usize, now: f64| {
            let first = 1000 * u32::try_from(id).unwrap();
            let request = Request {
                request_id: Uuid::from_u128(id),
                tokens: (first..first + n).collect(),
                max_output_tokens: out,
                output_token_ids: None,
            };
            engine
                .apply_command_effects(SchedulerCommand::new(0, Command::Submit(request)), now)
                .unwrap();
        };
        let mut now = 0.0;
        submit(&mut engine, 1, 32, 50, now);
        let alone = pass_admitting(&mut engine, &flag, Uuid::from_u128(1), &mut now);
        assert!(
            (alone - p.step.prefill_ms(1, 32, 0)).abs() < 1e-6,
            "{alone}"
        );
        // Request 1 now decodes; request 2's prefill joins it in one pass.
        submit(&mut engine, 2, 64, 2, now);
        let mixed = pass_admitting(&mut engine, &flag, Uuid::from_u128(2), &mut now);
        let want = p.step.prefill_ms(1, 64, 0) + p.step.decode_ms(1, 33, false);
        assert!(
            (mixed - want).abs() < 1e-6,
            "mixed pass {mixed} ms, want {want} ms"
        );
        assert!(mixed < p.step.prefill_ms(1, 64, 0) + p.step.base_ms);
        // A decode-only pass pays it.
        flag.store(false, Ordering::Relaxed);
        let started = engine.execute_pass(now).unwrap().unwrap();
        let took = started.end_ms - started.started_at_ms;
        assert!(took >= p.step.base_ms, "{took}");
    }

    #[test]
    fn both_timing_models_build() {
        assert!(build_engine(&params(TimingKind::Step), 1).is_ok());
        assert!(build_engine(&params(TimingKind::Mocker), 1).is_ok());
        let mut bad = params(TimingKind::Step);
        bad.block_size = 0;
        assert!(build_engine(&bad, 1).is_err());
    }
}
