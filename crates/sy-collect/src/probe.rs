//! One unit: prime the prefix, hold the background load, observe, book and send the same prompt
//! to both candidates (both at the same instant under load, one after the other in the no-load
//! grid: [`Sending`]), release everything, and build two records.
//!
//! A unit attempt that fails transiently (connect, timeout, 5xx, a stream error or drop, a
//! reservation or observation refused by an unavailable worker) is retried by the caller with a
//! *new* nonce, so the retry's prompt shares no cache with the failed attempt and its primed
//! prefix is primed afresh. The final attempt's records are written whatever their status.

use std::sync::Arc;
use std::time::Duration;
use sy_records::Model;

use sy_dynamo::observe::{Candidate, CandidateObservation, ObservedFields, observe_candidates};
use sy_dynamo::{CallError, ErrorClass, StreamOutcome};
use sy_records::{Phase, RECORD_SCHEMA_VERSION, Record, Status};

use crate::background::slots_for;
use crate::plan::Plan;
use crate::schedule::Condition;
use sy_drive::PromptFactory;
use sy_drive::background::BackgroundLoad;
use sy_drive::reservation::{Accounted, Driver, Reservation};

/// Everything a unit needs.
#[derive(Debug, Clone)]
pub struct UnitRunner {
    pub driver: Arc<Driver>,
    pub prompts: Arc<PromptFactory>,
    pub plan: Arc<Plan>,
    pub run_id: String,
}

/// The two records of one attempt, and whether a retry may help.
#[derive(Debug, Clone)]
pub struct UnitAttempt {
    pub records: [Record; 2],
    pub transient: bool,
    pub cancelled: bool,
}

impl UnitAttempt {
    pub fn ok(&self) -> bool {
        self.records.iter().all(|r| r.status == Status::Ok)
    }
}

/// A failure attributed to one side, with its record class.
#[derive(Debug, Clone)]
struct Failure {
    class: ErrorClass,
    message: String,
    transient: bool,
}

impl Failure {
    fn from_call(e: &CallError, what: Option<ErrorClass>, prefix: &str) -> Self {
        let class = if e.kind == ErrorClass::Cancelled {
            ErrorClass::Cancelled
        } else {
            what.unwrap_or(e.kind)
        };
        Failure {
            class,
            message: format!("{prefix}{}", e.message),
            transient: e.is_transient(),
        }
    }

    fn cancelled(what: &str) -> Self {
        Failure {
            class: ErrorClass::Cancelled,
            message: format!("cancelled {what}"),
            transient: false,
        }
    }
}

/// The message prefix of a failed priming: it names the worker (and rank) the priming was booked
/// on, since the record's own worker fields are the probe's, and the probe was never sent.
fn priming_prefix(acc: &Accounted) -> String {
    match &acc.reservation {
        Ok(b) => format!(
            "{PRIMING_ON_WORKER}{} rank {}: ",
            b.answer.worker_id, b.answer.dp_rank
        ),
        Err(_) => "priming: ".to_string(),
    }
}

const PRIMING_ON_WORKER: &str = "priming on worker ";

/// The worker a failed priming was booked on, read back from its record's `error_message` (see
/// [`priming_prefix`]); `None` for any other message.
pub fn worker_of_failed_priming(error_message: &str) -> Option<u64> {
    let rest = error_message.strip_prefix(PRIMING_ON_WORKER)?;
    rest.split(' ').next()?.parse().ok()
}

/// What one attempt gathered for each candidate (index 0 efficient, 1 capable).
#[derive(Debug, Default)]
struct PairState {
    observations: [CandidateObservation; 2],
    bookings: [Option<Reservation>; 2],
    outcomes: [Option<StreamOutcome>; 2],
    failures: [Option<Failure>; 2],
}

/// How the two probes of a pair leave.
///
/// In the load phase both leave at the same instant (their futures start in the same poll), so
/// both candidates meet the same background load and the pair is a fair comparison. In the
/// qgrid phase, which measures the no-load table Q_m(N, f), the capable probe leaves after the
/// efficient one has finished: a sibling in flight is a competing request at the shared
/// frontend (measured: with both sent together the first token of one waits up to ~1 ms while
/// the frontend forwards the other's; see docs/dynamo-verification.md, "A sibling in flight").
/// No load means none, so the qgrid cells are measured one request at a time, each after
/// `settle_ms` of quiet (see [`UnitRunner::quiet`]), and each candidate is observed and booked
/// right before its own probe, as the live router does before every request. Observing both
/// first and sending the second after the first probe and the quiet left the second's record
/// with an observation ~60 ms older than its send, and its probe alone without the requests to
/// the selection service just before it: measured on the dp64 stack (4 Dec 2026, two runs each
/// order), whichever candidate went second had a client − server gap 0.1–0.2 ms above the
/// first's (capable second: 0.99–1.09 ms against efficient 0.81–0.92; efficient second:
/// 0.94–1.00 against capable 0.83–0.84).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sending {
    SameInstant,
    OneAfterTheOther,
}

impl Sending {
    fn of(phase: Phase) -> Self {
        match phase {
            Phase::Qgrid => Sending::OneAfterTheOther,
            Phase::Load => Sending::SameInstant,
        }
    }
}

/// Whether a unit waits `settle_ms` before its probes: every Q-grid unit, and a load unit after
/// its priming (see [`UnitRunner::quiet`]).
fn quiet_before_probes(c: &Condition) -> bool {
    c.phase == Phase::Qgrid || c.primed_tokens() > 0
}

/// How many times a unit waits `settle_ms` (what the run-time estimate counts): before its
/// probes ([`quiet_before_probes`]) and, in the Q grid, between the pair's two candidates.
pub fn quiet_waits(c: &Condition) -> u32 {
    let between = Sending::of(c.phase) == Sending::OneAfterTheOther;
    u32::from(quiet_before_probes(c)) + u32::from(between)
}

impl UnitRunner {
    fn models(&self) -> [(Model, &str); 2] {
        [
            (Model::Efficient, self.plan.models.efficient.as_str()),
            (Model::Capable, self.plan.models.capable.as_str()),
        ]
    }

    /// Runs one attempt of (condition, repeat).
    pub async fn run(&self, cond: &Condition, repeat: u32, attempt: u32) -> UnitAttempt {
        let probe_id = format!("{}/r{repeat}/a{attempt}", cond.id);
        let tokens = self
            .prompts
            .probe(&cond.id, repeat, attempt, cond.planned_n);
        let mut pair = PairState::default();
        let when = if cond.primed_tokens() > 0 {
            "after priming"
        } else {
            "before the probe"
        };
        if self.prime(cond, &tokens, &mut pair.failures).await
            && (!quiet_before_probes(cond) || self.quiet(&mut pair.failures, when).await)
        {
            let background = self.start_background(cond, &probe_id).await;
            self.probe_pair(&tokens, Sending::of(cond.phase), &mut pair)
                .await;
            if let Some(bg) = background {
                bg.stop().await;
            }
        }
        self.attempt_of(cond, repeat, attempt, &probe_id, tokens.len(), pair)
    }

    /// 1. Primes the prefix on both models (each through the accounting path). Returns whether
    ///    the attempt goes on (no failure).
    async fn prime(
        &self,
        cond: &Condition,
        tokens: &[u32],
        failures: &mut [Option<Failure>; 2],
    ) -> bool {
        let primed = cond.primed_tokens() as usize;
        if primed == 0 {
            return true;
        }
        let cancel = self.driver.cancel.clone();
        let [(_, eff), (_, cap)] = self.models();
        let prefix = tokens[..primed].to_vec();
        // One token, which cannot be end of sequence (see `ProbeRequest::ignore_eos`).
        let (a, b) = tokio::join!(
            self.driver
                .accounted(eff, prefix.clone(), 1, true, &cancel, "prime", || {}),
            self.driver
                .accounted(cap, prefix, 1, true, &cancel, "prime", || {}),
        );
        for (i, acc) in [a, b].iter().enumerate() {
            if let Some((reserve, e)) = acc.failure() {
                let class = reserve.then_some(ErrorClass::Reservation);
                failures[i] = Some(Failure::from_call(e, class, &priming_prefix(acc)));
            }
        }
        failures.iter().all(Option::is_none)
    }

    /// Waits `settle_ms` with nothing of the collector's in flight, unless cancelled (then both
    /// sides fail as cancelled `when`). Before every Q-grid probe and after a priming: the wait
    /// lets the priming's KV events reach the router, and it gives every Q-grid probe the same
    /// idle deployment. Measured on Dynamo 1.6.1 (docs/dynamo-verification.md, "Quiet before a
    /// probe"): a request sent within ~3 ms of the previous one's end starts its first
    /// token about 0.6 ms sooner than one sent after 10 ms or more of quiet, so a probe that
    /// followed its predecessor at once and one that followed a priming were not comparable.
    async fn quiet(&self, failures: &mut [Option<Failure>; 2], when: &str) -> bool {
        let waited = self.settle_unless_cancelled().await;
        if !waited {
            *failures = [
                Some(Failure::cancelled(when)),
                Some(Failure::cancelled(when)),
            ];
        }
        waited
    }

    /// Sleeps `settle_ms`; `false` when the run was cancelled first.
    async fn settle_unless_cancelled(&self) -> bool {
        let settle = Duration::from_millis(self.plan.probe.settle_ms);
        tokio::select! {
            _ = self.driver.cancel.cancelled() => false,
            _ = tokio::time::sleep(settle) => true,
        }
    }

    /// 2. The condition's background load (if any), warmed up and held steady while the
    ///    probe runs.
    async fn start_background(&self, cond: &Condition, probe_id: &str) -> Option<BackgroundLoad> {
        if !cond.has_background() {
            return None;
        }
        let cancel = self.driver.cancel.clone();
        let [(_, eff), (_, cap)] = self.models();
        let bg = BackgroundLoad::start(
            self.driver.clone(),
            self.prompts.clone(),
            probe_id.to_string(),
            slots_for(cond, eff, cap),
            self.plan.target.retry_backoff(),
        );
        let warmup = self.plan.load.as_ref().map_or(0, |l| l.warmup_ms);
        let all_started = bg
            .warm_up(
                Duration::from_millis(self.plan.target.first_token_timeout_ms),
                Duration::from_millis(warmup),
                &cancel,
            )
            .await;
        if !all_started && !cancel.is_cancelled() {
            tracing::warn!(
                "{probe_id}: not every background slot streamed before the warm-up limit"
            );
        }
        Some(bg)
    }

    /// The attempt's records: a side never sent because its partner failed shares the
    /// partner's failure; transient if a failure may pass, cancelled if one was a cancel.
    fn attempt_of(
        &self,
        cond: &Condition,
        repeat: u32,
        attempt: u32,
        probe_id: &str,
        n_tokens: usize,
        mut pair: PairState,
    ) -> UnitAttempt {
        if pair.observations[0].model.is_empty() {
            for (i, (_, model)) in self.models().iter().enumerate() {
                pair.observations[i].model = model.to_string();
                pair.observations[i].n = n_tokens as u64;
            }
        }
        let failures = &mut pair.failures;
        for i in 0..2 {
            if failures[i].is_none() && pair.outcomes[i].is_none() {
                let partner = failures[1 - i].clone();
                failures[i] = Some(match partner {
                    Some(p) => Failure {
                        message: format!("not sent: the paired candidate failed ({})", p.message),
                        ..p
                    },
                    None => Failure::cancelled("before sending"),
                });
            }
        }
        let failed = || pair.failures.iter().flatten();
        let transient = failed().any(|f| f.transient && f.class != ErrorClass::Cancelled);
        let cancelled = failed().any(|f| f.class == ErrorClass::Cancelled);
        let records = [0usize, 1].map(|i| {
            self.record(
                cond,
                repeat,
                probe_id,
                self.models()[i].0,
                &pair.observations[i],
                pair.bookings[i].as_ref(),
                pair.outcomes[i].as_ref(),
                pair.failures[i].as_ref(),
                attempt,
            )
        });
        UnitAttempt {
            records,
            transient,
            cancelled,
        }
    }

    /// 3. Observe, reserve, send (see [`Sending`]), release: both candidates at once in the
    ///    load phase, one after the other in the Q grid.
    async fn probe_pair(&self, tokens: &[u32], sending: Sending, pair: &mut PairState) {
        if self.driver.cancel.is_cancelled() {
            pair.failures = [
                Some(Failure::cancelled("before the probe")),
                Some(Failure::cancelled("before the probe")),
            ];
            return;
        }
        match sending {
            Sending::SameInstant => self.probe_candidates(tokens, &[0, 1], pair).await,
            Sending::OneAfterTheOther => {
                self.probe_candidates(tokens, &[0], pair).await;
                if self.settle_unless_cancelled().await {
                    self.probe_candidates(tokens, &[1], pair).await;
                } else {
                    pair.failures[1] = Some(Failure::cancelled("before the probe"));
                }
            }
        }
    }

    /// Observes, reserves and sends the candidates `which` (indices: 0 efficient, 1 capable)
    /// together, then releases their bookings.
    async fn probe_candidates(&self, tokens: &[u32], which: &[usize], pair: &mut PairState) {
        if !self.observe(tokens, which, pair).await {
            return;
        }
        self.reserve(tokens, which, pair).await;
        let sent = self.send_each(tokens, which, &pair.bookings).await;
        self.settle(sent, which, pair);
    }

    /// Observes the candidates `which`; returns whether every observation succeeded.
    async fn observe(&self, tokens: &[u32], which: &[usize], pair: &mut PairState) -> bool {
        let models = self.models();
        let allowed = each(which, |i| self.driver.allowed_workers(models[i].1)).await;
        let candidates: Vec<Candidate<'_>> = which
            .iter()
            .zip(&allowed)
            .map(|(&i, allowed)| Candidate {
                model: models[i].1,
                tokens,
                allowed: allowed.as_deref(),
            })
            .collect();
        let obs = observe_candidates(&self.driver.selection, &candidates).await;
        for (&i, o) in which.iter().zip(obs) {
            if let Some(e) = &o.error {
                pair.failures[i] = Some(Failure::from_call(
                    e,
                    Some(ErrorClass::Observation),
                    "observation: ",
                ));
            }
            pair.observations[i] = o;
        }
        which.iter().all(|&i| pair.failures[i].is_none())
    }

    /// Reserves the probe on the observed workers of the candidates `which`.
    async fn reserve(&self, tokens: &[u32], which: &[usize], pair: &mut PairState) {
        let models = self.models();
        let max_tokens = self.plan.probe.max_tokens;
        let booked = each(which, |i| {
            self.driver
                .reserve(models[i].1, tokens, max_tokens, "probe")
        })
        .await;
        for (&i, r) in which.iter().zip(booked) {
            match r {
                Ok(bk) => pair.bookings[i] = Some(bk),
                Err(e) => {
                    pair.failures[i] = Some(Failure::from_call(
                        &e,
                        Some(ErrorClass::Reservation),
                        "reservation: ",
                    ))
                }
            }
        }
    }

    /// Sends the reserved probes of the candidates `which` at the same instant (their futures
    /// start in the same poll), then releases their bookings. Outcomes by candidate index.
    async fn send_each(
        &self,
        tokens: &[u32],
        which: &[usize],
        bookings: &[Option<Reservation>; 2],
    ) -> [Option<StreamOutcome>; 2] {
        let cancel = self.driver.cancel.clone();
        let max_tokens = self.plan.probe.max_tokens;
        let models = self.models();
        let send = |i: usize| {
            let booking = bookings[i].clone();
            let tokens = tokens.to_vec();
            let cancel = cancel.clone();
            let driver = self.driver.clone();
            let model = models[i].1.to_string();
            async move {
                match booking {
                    Some(b) if !cancel.is_cancelled() => Some(
                        driver
                            .send(&b, &model, tokens, max_tokens, true, &cancel, || {})
                            .await,
                    ),
                    _ => None,
                }
            }
        };
        let outcomes = each(which, send).await;
        let release = |i: usize| async move {
            if let Some(b) = &bookings[i] {
                self.driver.release(b).await;
            }
        };
        each(which, release).await;
        let mut sent = [None, None];
        for (&i, o) in which.iter().zip(outcomes) {
            sent[i] = o;
        }
        sent
    }

    /// Attributes the outcome of each candidate of `which`: a stream error (suspecting the
    /// worker on a worker fault), a probe served by another worker than booked, or nothing sent.
    fn settle(&self, mut sent: [Option<StreamOutcome>; 2], which: &[usize], pair: &mut PairState) {
        for &i in which {
            let o = sent[i].take();
            match o {
                Some(out) => {
                    if let (None, Some(b)) = (&out.error, &pair.bookings[i])
                        && let Some(f) = served_elsewhere(b, &out)
                    {
                        pair.failures[i] = Some(f);
                    }
                    if let Some(e) = &out.error {
                        pair.failures[i] = Some(Failure::from_call(e, None, ""));
                        if sy_drive::reservation::worker_fault(e.kind)
                            && let Some(b) = &pair.bookings[i]
                        {
                            self.driver.suspect(b.answer.worker_id);
                        }
                    }
                    pair.outcomes[i] = Some(out);
                }
                None if pair.failures[i].is_none() => {
                    pair.failures[i] = Some(Failure::cancelled("before sending"));
                }
                None => {}
            }
        }
    }

    /// The observation fields of the record: the snapshot's view of the reserved worker and
    /// rank (what was measured), or the advisory pick's when nothing was reserved.
    fn observed(obs: &CandidateObservation, booking: Option<&Reservation>) -> ObservedFields {
        match booking {
            Some(b) => obs.fields_for(b.answer.worker_id, b.answer.dp_rank),
            None => obs.fields(),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn record(
        &self,
        cond: &Condition,
        repeat: u32,
        probe_id: &str,
        role: Model,
        obs: &CandidateObservation,
        booking: Option<&Reservation>,
        outcome: Option<&StreamOutcome>,
        failure: Option<&Failure>,
        attempts: u32,
    ) -> Record {
        let mut observed = Self::observed(obs, booking);
        if obs.select.is_none() {
            // No answer to the advisory query: nothing was observed, so no observation time.
            observed.observed_at_unix_ms = None;
            observed.query_duration_ms = None;
        }
        let advisory = obs.fields();
        // What the frontend reported, never filled in from the booking: the booking has its own
        // fields, so a disagreement between the two stays visible.
        let served = outcome.and_then(|o| o.served_worker_id);
        Record {
            schema_version: RECORD_SCHEMA_VERSION,
            run_id: self.run_id.clone(),
            condition_id: cond.id.clone(),
            phase: cond.phase,
            repeat,
            probe_id: probe_id.to_string(),
            role,
            model: obs.model.clone(),
            planned_n: cond.planned_n,
            planned_f: cond.planned_f,
            background: cond.background.clone(),
            observed,
            sent_at_unix_ms: outcome
                .map(|o| o.sent_at_unix_ms)
                .unwrap_or_else(sy_wire::unix_ms_now),
            // The worker select_and_reserve booked (and the request was pinned to), as opposed
            // to `worker_id`, the advisory pick of the query-only observation.
            reserved_worker_id: booking.map(|b| b.answer.worker_id),
            reserved_dp_rank: booking.map(|b| b.answer.dp_rank),
            advisory_worker_id: advisory.worker_id,
            advisory_dp_rank: advisory.dp_rank,
            advisory_k: advisory.k,
            advisory_r: advisory.r,
            advisory_p: advisory.p,
            pick_differs: booking
                .map(|b| obs.pick() != Some((b.answer.worker_id, b.answer.dp_rank))),
            served_worker_id: served,
            served_dp_rank: outcome.and_then(|o| o.served_dp_rank),
            ttft_ms: outcome.and_then(|o| o.ttft_ms),
            server_ttft_ms: outcome.and_then(|o| o.server_ttft_ms),
            client_server_gap_ms: outcome.and_then(StreamOutcome::client_server_gap_ms),
            e2e_ms: outcome.and_then(|o| o.e2e_ms),
            prompt_tokens: outcome.and_then(|o| o.prompt_tokens),
            output_tokens: outcome.and_then(|o| o.output_tokens),
            cached_tokens: outcome.and_then(|o| o.cached_tokens),
            status: if failure.is_some() {
                Status::Error
            } else {
                Status::Ok
            },
            error_class: failure.map(|f| f.class),
            error_message: failure.map(|f| f.message.clone()),
            attempts,
        }
    }
}

/// A probe answered by a worker or rank other than the reserved one (the frontend reports both):
/// its TTFT does not belong to the observation. Transient: the unit is retried.
fn served_elsewhere(booking: &Reservation, out: &StreamOutcome) -> Option<Failure> {
    let (worker, rank) = (booking.answer.worker_id, booking.answer.dp_rank);
    let other_worker = out.served_worker_id.filter(|w| *w != worker);
    let other_rank = out.served_dp_rank.filter(|r| *r != rank);
    if other_worker.is_none() && other_rank.is_none() {
        return None;
    }
    Some(Failure {
        class: ErrorClass::ServedElsewhere,
        message: format!(
            "reserved worker {worker} rank {rank} but the frontend reports worker {} rank {}",
            out.served_worker_id.map_or("?".into(), |w| w.to_string()),
            out.served_dp_rank.map_or("?".into(), |r| r.to_string()),
        ),
        transient: true,
    })
}

/// `f` of one candidate index, or of two at the same instant (their futures polled together),
/// in the order of `which`.
async fn each<T, F: std::future::Future<Output = T>>(
    which: &[usize],
    f: impl Fn(usize) -> F,
) -> Vec<T> {
    match *which {
        [a] => vec![f(a).await],
        [a, b] => {
            let (x, y) = tokio::join!(f(a), f(b));
            vec![x, y]
        }
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sy_drive::reservation::{Accounted, Reservation};
    use sy_dynamo::CallError;

    #[test]
    fn every_qgrid_unit_waits_twice_and_a_load_unit_only_after_priming() {
        let plan = Plan::from_toml_str(
            "seed = 1\n[qgrid]\nn = [128]\nf = [0.0, 0.5]\nrepeats = 1\n\
             [load]\nn = [128]\nf = [0.0, 0.5]\nrepeats = 1\nprefill_contention = [2]\n",
            std::path::Path::new("t.toml"),
        )
        .unwrap();
        let s = crate::schedule::Schedule::from_plan(&plan);
        let waits = |phase: Phase, primed: bool| {
            let c = s
                .conditions
                .iter()
                .find(|c| c.phase == phase && (c.primed_tokens() > 0) == primed)
                .unwrap();
            (quiet_before_probes(c), quiet_waits(c))
        };
        assert_eq!(waits(Phase::Qgrid, false), (true, 2));
        assert_eq!(waits(Phase::Qgrid, true), (true, 2));
        assert_eq!(waits(Phase::Load, false), (false, 0));
        assert_eq!(waits(Phase::Load, true), (true, 1));
    }

    fn refused() -> CallError {
        CallError {
            kind: ErrorClass::Http5xx,
            status: Some(503),
            message: "frontend HTTP 503".into(),
            retryable: None,
        }
    }

    #[test]
    fn a_failed_priming_names_the_worker_it_was_booked_on() {
        let booked = Accounted {
            reservation: Ok(Reservation {
                selection_id: "s".into(),
                answer: sy_wire::SelectResponse {
                    worker_id: 42,
                    dp_rank: 1,
                    ..Default::default()
                },
            }),
            stream: None,
        };
        assert_eq!(priming_prefix(&booked), "priming on worker 42 rank 1: ");
        let unbooked = Accounted {
            reservation: Err(refused()),
            stream: None,
        };
        assert_eq!(priming_prefix(&unbooked), "priming: ");
        assert_eq!(
            worker_of_failed_priming("priming on worker 42 rank 1: frontend HTTP 503"),
            Some(42)
        );
        assert_eq!(worker_of_failed_priming("priming: frontend HTTP 503"), None);
        assert_eq!(worker_of_failed_priming("frontend HTTP 503"), None);
        let f = Failure::from_call(&refused(), None, &priming_prefix(&booked));
        assert_eq!(f.message, "priming on worker 42 rank 1: frontend HTTP 503");
    }
}
