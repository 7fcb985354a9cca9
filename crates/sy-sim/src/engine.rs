//! The worker engine: one tokio task per worker stepping a vLLM-like scheduler.
//!
//! Each step admits, in order: one token for every decoding sequence, prefill chunks of
//! sequences already prefilling, then new sequences from the FIFO queue (prefix-cache lookup,
//! KV blocks allocated for prompt + output) — all within `max_num_batched_tokens` and
//! `max_num_seqs`. The step's duration comes from [`StepTimeConfig`]; tokens are emitted at
//! the end of the step. With a zero step time the task never sleeps (it yields between
//! steps), so the hot path is a channel receive, a few hash-map lookups and a channel send.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use crate::cache::BlockCache;
use crate::config::StepTimeConfig;
use crate::hashing::output_token;

/// What the frontend hands to a worker.
#[derive(Debug)]
pub(crate) struct EngineRequest {
    pub prompt_len: u64,
    pub hashes: Vec<u64>,
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
    /// The worker died (killed): the request cannot finish.
    Error,
}

/// Parameters of one worker's engine.
#[derive(Debug, Clone)]
pub(crate) struct EngineParams {
    pub block_size: u64,
    pub max_num_batched_tokens: u64,
    pub max_num_seqs: usize,
    pub step: StepTimeConfig,
    pub speed: f64,
    pub time_scale: f64,
    pub seed: u64,
}

/// State shared between the engine task and the HTTP side.
#[derive(Debug)]
pub(crate) struct EngineShared {
    pub cache: Mutex<BlockCache>,
    pub alive: AtomicBool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sched {
    None,
    Decode,
    Prefill(u64),
}

#[derive(Debug)]
struct Seq {
    prompt_len: u64,
    hashes: Vec<u64>,
    prompt_hash: u64,
    max_tokens: u32,
    tx: mpsc::UnboundedSender<SeqEvent>,
    hit: usize,
    registered: usize,
    private: u64,
    cached_tokens: u64,
    computed: u64,
    generated: u32,
    arrived: Instant,
    prefill_started: Option<Instant>,
    sched: Sched,
    done: bool,
}

impl Seq {
    fn new(r: EngineRequest) -> Self {
        Self {
            prompt_len: r.prompt_len,
            hashes: r.hashes,
            prompt_hash: r.prompt_hash,
            max_tokens: r.max_tokens.max(1),
            tx: r.tx,
            hit: 0,
            registered: 0,
            private: 0,
            cached_tokens: 0,
            computed: 0,
            generated: 0,
            arrived: r.arrived,
            prefill_started: None,
            sched: Sched::None,
            done: false,
        }
    }

    fn decoding(&self) -> bool {
        self.computed >= self.prompt_len
    }

    fn context(&self) -> u64 {
        self.computed + u64::from(self.generated)
    }
}

/// Simulated milliseconds of one step.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct StepWork {
    pub fresh_tokens: u64,
    pub cached_tokens: u64,
    pub attention_token_ctx: f64,
    pub decodes: u64,
    pub decode_ctx: u64,
}

impl StepWork {
    fn is_empty(&self) -> bool {
        self.fresh_tokens == 0 && self.decodes == 0 && self.cached_tokens == 0
    }

    /// Simulated ms of this step for parameters `p` at speed `speed`.
    pub fn duration_ms(&self, p: &StepTimeConfig, speed: f64) -> f64 {
        if self.is_empty() {
            return 0.0;
        }
        let t = p.base_ms
            + p.prefill_ms_per_token * self.fresh_tokens as f64
            + p.cached_ms_per_token * self.cached_tokens as f64
            + p.attention_ms_per_token_ctx * self.attention_token_ctx / 1000.0
            + p.decode_ms_per_seq * self.decodes as f64
            + p.decode_ms_per_ctx * self.decode_ctx as f64 / 1000.0;
        t / speed.max(1e-9)
    }
}

struct Engine {
    p: EngineParams,
    shared: Arc<EngineShared>,
    waiting: VecDeque<Seq>,
    running: Vec<Seq>,
}

fn lock_cache(shared: &EngineShared) -> std::sync::MutexGuard<'_, BlockCache> {
    match shared.cache.lock() {
        Ok(g) => g,
        Err(poisoned) => poisoned.into_inner(),
    }
}

impl Engine {
    fn idle(&self) -> bool {
        self.waiting.is_empty() && self.running.is_empty()
    }

    fn fail_all(&mut self) {
        for s in self.waiting.drain(..).chain(self.running.drain(..)) {
            let _ = s.tx.send(SeqEvent::Error);
        }
    }

    /// When the planned step starts. While the worker is busy (`chain`: the end of the previous
    /// step, reset when the worker goes idle), steps follow each other back to back unless the
    /// previous one ended more than 5 ms ago. A step that admits requests to an idle worker
    /// starts when the earliest of them reached the frontend, but never before the worker's
    /// previous step ended (`prev_end`): the simulator's own handling of a request (parsing,
    /// tokenizing, hashing, routing; ~0.4 ms at N = 128 and ~1.5 ms at N = 1500 in a debug
    /// build) is host time, not simulated time, so an idle worker's simulated TTFT is the
    /// step-time model's.
    fn step_start(
        &self,
        now: Instant,
        chain: Option<Instant>,
        prev_end: Option<Instant>,
    ) -> Instant {
        let recent = now.checked_sub(Duration::from_millis(5)).unwrap_or(now);
        if let Some(t) = chain.filter(|t| *t > recent) {
            return t;
        }
        let admitted = self
            .running
            .iter()
            .filter(|s| s.prefill_started.is_none() && s.sched != Sched::None)
            .map(|s| s.arrived)
            .min();
        match admitted {
            Some(a) => a.max(prev_end.unwrap_or(a)).min(now),
            None => now,
        }
    }

    /// Plans one step; returns its work. Sequences admitted by it have no `prefill_started` yet:
    /// [`Engine::started`] sets it once the step's start is known.
    fn schedule(&mut self) -> StepWork {
        let mut w = StepWork::default();
        let mut budget = self.p.max_num_batched_tokens;
        let mut cache = lock_cache(&self.shared);
        // Cancelled requests (client gone) release their blocks before planning.
        let mut i = 0;
        while i < self.running.len() {
            if self.running[i].tx.is_closed() {
                let s = self.running.remove(i);
                cache.release(&s.hashes[..s.hit.max(s.registered)], s.private);
            } else {
                i += 1;
            }
        }
        self.waiting.retain(|s| !s.tx.is_closed());
        for s in self.running.iter_mut() {
            s.sched = Sched::None;
            if s.decoding() && budget > 0 {
                budget -= 1;
                s.sched = Sched::Decode;
                w.decodes += 1;
                w.decode_ctx += s.context();
            }
        }
        for s in self.running.iter_mut() {
            if budget == 0 {
                break;
            }
            if !s.decoding() {
                let c = (s.prompt_len - s.computed).min(budget);
                budget -= c;
                s.sched = Sched::Prefill(c);
                w.fresh_tokens += c;
                w.attention_token_ctx += c as f64 * (s.computed as f64 + c as f64 / 2.0);
            }
        }
        let bs = self.p.block_size.max(1);
        let capacity = cache.capacity();
        while budget > 0 && self.running.len() < self.p.max_num_seqs {
            let Some(head) = self.waiting.front() else {
                break;
            };
            let hit = cache.match_prefix(&head.hashes);
            let total = (head.prompt_len + u64::from(head.max_tokens))
                .div_ceil(bs)
                .min(capacity)
                .max(hit as u64);
            let private = total - hit as u64;
            if !cache.can_admit(&head.hashes, hit, private) {
                break;
            }
            let Some(mut s) = self.waiting.pop_front() else {
                break;
            };
            cache.admit(&s.hashes, hit, private);
            s.hit = hit;
            s.private = private;
            s.cached_tokens = hit as u64 * bs;
            // At least the last prompt token is computed, even on a full hit.
            s.computed = s.cached_tokens.min(s.prompt_len.saturating_sub(1));
            w.cached_tokens += s.computed;
            let c = (s.prompt_len - s.computed).min(budget);
            budget -= c;
            s.sched = Sched::Prefill(c);
            w.fresh_tokens += c;
            w.attention_token_ctx += c as f64 * (s.computed as f64 + c as f64 / 2.0);
            self.running.push(s);
        }
        w
    }

    /// Marks the sequences admitted by the planned step as prefilling since `start`.
    fn started(&mut self, start: Instant) {
        for s in self.running.iter_mut() {
            if s.prefill_started.is_none() && s.sched != Sched::None {
                s.prefill_started = Some(start);
            }
        }
    }

    /// Applies the planned step at its end time `at`: progress, tokens, completions.
    fn apply(&mut self, at: Instant) {
        let seed = self.p.seed;
        let mut cache = lock_cache(&self.shared);
        for s in self.running.iter_mut() {
            match s.sched {
                Sched::None => continue,
                Sched::Prefill(c) => {
                    s.computed += c;
                    if !s.decoding() {
                        continue;
                    }
                    // Prefill finished: its full blocks become cached blocks.
                    for h in &s.hashes[s.hit..] {
                        cache.register(*h);
                    }
                    s.private = s.private.saturating_sub((s.hashes.len() - s.hit) as u64);
                    s.registered = s.hashes.len();
                    let first = FirstToken {
                        cached_tokens: s.cached_tokens,
                        prefill_started: s.prefill_started.unwrap_or(at),
                        at,
                    };
                    let id = output_token(seed, s.prompt_hash, 0);
                    s.generated = 1;
                    if s.tx
                        .send(SeqEvent::Token {
                            id,
                            first: Some(first),
                        })
                        .is_err()
                    {
                        s.done = true;
                        continue;
                    }
                }
                Sched::Decode => {
                    let id = output_token(seed, s.prompt_hash, s.generated);
                    s.generated += 1;
                    if s.tx.send(SeqEvent::Token { id, first: None }).is_err() {
                        s.done = true;
                        continue;
                    }
                }
            }
            if s.generated >= s.max_tokens {
                let _ = s.tx.send(SeqEvent::Finished {
                    at,
                    generated: s.generated,
                });
                s.done = true;
            }
        }
        let mut i = 0;
        while i < self.running.len() {
            if self.running[i].done {
                let s = self.running.remove(i);
                cache.release(&s.hashes[..s.hit.max(s.registered)], s.private);
            } else {
                i += 1;
            }
        }
    }
}

/// Runs a worker until it is killed or every sender is gone.
pub(crate) async fn run_engine(
    p: EngineParams,
    shared: Arc<EngineShared>,
    mut rx: mpsc::UnboundedReceiver<EngineMsg>,
) {
    let mut e = Engine {
        p,
        shared,
        waiting: VecDeque::new(),
        running: Vec::new(),
    };
    // The end of the previous step while the worker stays busy (`None` once it went idle), and
    // the end of its last step ever.
    let mut last_end: Option<Instant> = None;
    let mut prev_end: Option<Instant> = None;
    loop {
        if e.idle() {
            last_end = None;
            match rx.recv().await {
                Some(EngineMsg::Add(r)) => e.waiting.push_back(Seq::new(r)),
                Some(EngineMsg::Kill) | None => break,
            }
        }
        let mut killed = false;
        loop {
            match rx.try_recv() {
                Ok(EngineMsg::Add(r)) => e.waiting.push_back(Seq::new(r)),
                Ok(EngineMsg::Kill) => {
                    killed = true;
                    break;
                }
                Err(_) => break,
            }
        }
        if killed {
            break;
        }
        let now = Instant::now();
        let work = e.schedule();
        if work.is_empty() {
            // Nothing schedulable (everything cancelled): wait for news.
            if e.idle() {
                continue;
            }
            tokio::task::yield_now().await;
            continue;
        }
        let sim_ms = work.duration_ms(&e.p.step, e.p.speed);
        let dt = crate::config::wall(e.p.time_scale, sim_ms);
        let start = e.step_start(now, last_end, prev_end);
        e.started(start);
        let end = start + dt;
        if dt.is_zero() {
            tokio::task::yield_now().await;
        } else {
            // Not tokio's timer: it ends a sleep 0–1.5 ms late, which made every simulated
            // TTFT about a millisecond longer than the step-time model (20 % on a 6 ms prefill).
            crate::precise_timer::sleep_until(end).await;
        }
        last_end = Some(end);
        prev_end = Some(end);
        // Tokens carry the step's simulated end, not the host's (later) wake-up time.
        e.apply(end);
    }
    e.shared.alive.store(false, Ordering::SeqCst);
    e.fail_all();
}
