//! The live checks: a prefix primed on each (worker, rank) through the accounting path must show
//! in the selection service's overlap, and the client's TTFT is compared with the server's.

use super::*;

/// On every rank of each checkable worker: primes a prefix pinned to that (worker, rank), waits
/// for its KV events to show in the selection service's overlap **of that rank**, then sends
/// the whole prompt pinned there and compares client and server TTFT. A failed request is a
/// problem naming the worker, the rank and the likely cause.
pub(super) async fn probe_workers(report: &mut PreflightReport, driver: &Arc<Driver>, plan: &Plan) {
    let prompts = PromptFactory::new(plan.seed, &sy_drive::new_invocation_id(), &plan.prompt);
    let mut gaps = Vec::new();
    let mut problems = Vec::new();
    for (i, w) in report.workers.iter_mut().enumerate() {
        if !(w.registered && w.listed_by_frontend && w.lifecycle.as_deref() == Some("schedulable"))
        {
            w.kv_events = KvEvents::NotChecked {
                reason: "not registered, listed and schedulable".into(),
            };
            continue;
        }
        let bs = u64::from(w.block_size.unwrap_or(16).max(1));
        let primed = (PRIME_BLOCKS * bs) as usize;
        let ranks = if w.dp_ranks.is_empty() {
            vec![0]
        } else {
            w.dp_ranks.clone()
        };
        for rank in ranks {
            let who = format!("worker {} ({}) rank {rank}", w.worker_id, w.model);
            let tokens = prompts.tokens(&format!("preflight/{i}/{rank}"), PROBE_BLOCKS * bs);
            let mut check = RankCheck {
                dp_rank: rank,
                kv_events_endpoint: w.kv_events_by_rank.get(&rank).cloned(),
                kv_events: KvEvents::NotChecked {
                    reason: "not run".into(),
                },
                client_ttft_ms: None,
                server_ttft_ms: None,
                probe_error: None,
            };
            let prime = pinned(
                driver,
                &w.model,
                w.worker_id,
                rank,
                &tokens[..primed],
                1,
                "pf-prime",
            )
            .await;
            if let Err(e) = prime {
                let msg = format!("{who}: a pinned priming request failed: {}", e.message);
                check.kv_events = KvEvents::NotChecked {
                    reason: msg.clone(),
                };
                check.probe_error = Some(msg.clone());
                problems.push((e.severity, msg));
                w.ranks.push(check);
                continue;
            }
            check.kv_events =
                wait_overlap(driver, &w.model, w.worker_id, rank, &tokens, primed as u64).await;
            if let KvEvents::NotFlowing { seen_tokens, .. } = &check.kv_events {
                problems.push((
                    Severity::Deployment,
                    format!(
                        "{who}: KV events are not reaching the selection service: {primed} tokens \
                     primed on that rank, the selection service sees {seen_tokens} there after \
                     {} s (check the worker's KV-event publisher for rank {rank} and its \
                     registered endpoint {}); K would read 0",
                        KV_EVENT_WAIT.as_secs(),
                        check.kv_events_endpoint.as_deref().unwrap_or("(none)")
                    ),
                ));
            }
            for probe in 0..GAP_PROBES {
                match pinned(driver, &w.model, w.worker_id, rank, &tokens, 2, "pf-probe").await {
                    Ok((c, sv)) => {
                        if probe == 0 {
                            check.client_ttft_ms = c;
                            check.server_ttft_ms = sv;
                        }
                        if let (Some(c), Some(sv)) = (c, sv) {
                            gaps.push(c - sv);
                        }
                    }
                    Err(e) => {
                        let msg = format!("{who}: the pinned probe failed: {}", e.message);
                        check.probe_error = Some(msg.clone());
                        problems.push((e.severity, msg));
                        break;
                    }
                }
            }
            w.ranks.push(check);
        }
        w.kv_events = worst_kv(&w.ranks);
        if let Some(first) = w.ranks.first() {
            w.client_ttft_ms = first.client_ttft_ms;
            w.server_ttft_ms = first.server_ttft_ms;
        }
    }
    for (sev, m) in problems {
        report.problem(sev, m);
    }
    let probes = gaps.len();
    if let Some(median) = sy_selector::quantile_unsorted(&mut gaps, 0.5)
        && median > TTFT_GAP_MAX_MS
    {
        report.problem(
            Severity::Deployment,
            format!(
                "client TTFT exceeds the server's own TTFT by {median:.1} ms (median over {} \
                 probes; the bound is {TTFT_GAP_MAX_MS} ms): the collector would record \
                 transport delay as engine time. Likely cause: delayed ACKs on a reused \
                 connection, a proxy or load balancer between sy-collect and the frontend, or a \
                 client machine too loaded to read the stream promptly; run sy-collect on the \
                 frontend's node against its loopback address",
                probes
            ),
        );
    }
}

/// A row's KV-event verdict over its ranks: the first not flowing, else the first not
/// checked, else the slowest flowing one.
pub(super) fn worst_kv(ranks: &[RankCheck]) -> KvEvents {
    if let Some(r) = ranks
        .iter()
        .find(|r| matches!(r.kv_events, KvEvents::NotFlowing { .. }))
    {
        return r.kv_events.clone();
    }
    if let Some(r) = ranks
        .iter()
        .find(|r| matches!(r.kv_events, KvEvents::NotChecked { .. }))
    {
        return r.kv_events.clone();
    }
    ranks
        .iter()
        .max_by(|a, b| after(&a.kv_events).total_cmp(&after(&b.kv_events)))
        .map_or(
            KvEvents::NotChecked {
                reason: "no rank".into(),
            },
            |r| r.kv_events.clone(),
        )
}

pub(super) fn after(k: &KvEvents) -> f64 {
    match k {
        KvEvents::Flowing { after_ms, .. } => *after_ms,
        _ => 0.0,
    }
}

/// The likely cause of a failed pinned request, for the operator.
pub fn named_cause(status: Option<u16>, message: &str) -> &'static str {
    let m = message.to_ascii_lowercase();
    if m.contains("not eligible") || m.contains("dp_rank") {
        "the frontend will not route to this (worker, rank): the pinned worker is not eligible \
         (the rank is not registered with the frontend's router, or the worker is still loading)"
    } else if m.contains("model not found") || status == Some(404) {
        "the frontend does not serve the model (yet)"
    } else if status == Some(409) {
        "the selection id is already in use on the selection service"
    } else if status.is_some_and(|s| s >= 500) {
        "the frontend or the worker failed the request (an engine error or a crashed worker: \
         see the worker's log)"
    } else if status.is_some_and(|s| s >= 400) {
        "the request was refused (a bad request for this deployment: see the message)"
    } else if m.contains("timed out") || m.contains("timeout") {
        "no first token within the timeout (the worker is overloaded, still compiling, or hung)"
    } else if m.contains("connect") || m.contains("refused") {
        "the service could not be reached"
    } else {
        "see the message"
    }
}

/// A pinned request that failed: the message with its named cause, and how it affects the
/// preflight. A refusal that no retry changes — the frontend will not route the (worker, rank),
/// the selection service refuses or books another rank — fails it; a failed request (an HTTP
/// 5xx, a timeout) is reported as a warning, since the collector records failures as data and
/// retries transient ones.
#[derive(Debug)]
pub(super) struct PinFailure {
    message: String,
    severity: Severity,
}

impl PinFailure {
    fn from_call(prefix: &str, e: &sy_dynamo::CallError) -> Self {
        let blocking = e.kind == sy_wire::ErrorClass::Configuration
            || e.message.to_ascii_lowercase().contains("not eligible")
            || e.status
                .is_some_and(|s| (400..500).contains(&s) && s != 404 && s != 409);
        Self {
            message: format!(
                "{prefix}{} — {}",
                e.message,
                named_cause(e.status, &e.message)
            ),
            severity: if blocking {
                Severity::Deployment
            } else {
                Severity::Warning
            },
        }
    }
}

/// One request through the accounting path, reserved on and pinned to (`worker`, `rank`):
/// client and server TTFT, or the failure with its named cause.
pub(super) async fn pinned(
    driver: &Arc<Driver>,
    model: &str,
    worker: u64,
    rank: u32,
    tokens: &[u32],
    max_tokens: u32,
    tag: &str,
) -> Result<(Option<f64>, Option<f64>), PinFailure> {
    let booking = driver
        .reserve_on_rank(model, tokens, max_tokens, (worker, rank), tag)
        .await
        .map_err(|e| {
            PinFailure::from_call("the selection service refused the reservation: ", &e)
        })?;
    let answer = &booking.answer;
    if (answer.worker_id, answer.dp_rank) != (worker, rank) {
        driver.release(&booking).await;
        return Err(PinFailure {
            message: format!(
                "the selection service booked worker {} rank {} instead — it does not know rank \
                 {rank} of this worker (re-register it with one KV-event endpoint per rank)",
                answer.worker_id, answer.dp_rank
            ),
            severity: Severity::Deployment,
        });
    }
    let out = driver
        .send(
            &booking,
            model,
            tokens.to_vec(),
            max_tokens,
            true, // exactly max_tokens: never end of sequence first
            &Cancel::new(),
            || {},
        )
        .await;
    driver.release(&booking).await;
    let mut out = out;
    if tag == "pf-prime" && out.generated_without_text() {
        out.error = None; // a priming needs the prefill, not a visible token
    }
    match out.error {
        Some(e) => Err(PinFailure::from_call("", &e)),
        None => Ok((out.ttft_ms, out.server_ttft_ms)),
    }
}

/// Polls the selection service's overlap of `tokens` on (`worker`, `rank`) until the primed
/// prefix (whole blocks) shows there, or the wait runs out.
pub(super) async fn wait_overlap(
    driver: &Arc<Driver>,
    model: &str,
    worker: u64,
    rank: u32,
    tokens: &[u32],
    primed: u64,
) -> KvEvents {
    let t0 = Instant::now();
    let mut seen = 0;
    loop {
        if let Ok(a) = driver
            .selection
            .select_on_rank(model, tokens, worker, rank)
            .await
            && a.worker_id == worker
        {
            // Per-rank overlap when the service reports it (a data-parallel worker), else the
            // picked rank's device overlap.
            seen = match a.overlap.dp.get(&rank.to_string()) {
                Some(&v) => v,
                None if a.dp_rank == rank => a.overlap.gpu,
                None => 0,
            };
            if seen >= primed {
                return KvEvents::Flowing {
                    primed_tokens: primed,
                    seen_tokens: seen,
                    after_ms: t0.elapsed().as_secs_f64() * 1e3,
                };
            }
        }
        if t0.elapsed() >= KV_EVENT_WAIT {
            return KvEvents::NotFlowing {
                primed_tokens: primed,
                seen_tokens: seen,
                waited_ms: t0.elapsed().as_secs_f64() * 1e3,
            };
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rank(dp_rank: u32, kv_events: KvEvents) -> RankCheck {
        RankCheck {
            dp_rank,
            kv_events_endpoint: None,
            kv_events,
            client_ttft_ms: None,
            server_ttft_ms: None,
            probe_error: None,
        }
    }

    fn flowing(after_ms: f64) -> KvEvents {
        KvEvents::Flowing {
            primed_tokens: 48,
            seen_tokens: 48,
            after_ms,
        }
    }

    #[test]
    fn the_worst_rank_is_not_flowing_then_not_checked_then_the_slowest() {
        let stuck = KvEvents::NotFlowing {
            primed_tokens: 48,
            seen_tokens: 0,
            waited_ms: 4000.0,
        };
        let unchecked = KvEvents::NotChecked {
            reason: "priming failed".into(),
        };
        let ranks = vec![
            rank(0, flowing(5.0)),
            rank(1, unchecked.clone()),
            rank(2, stuck.clone()),
        ];
        assert_eq!(worst_kv(&ranks), stuck);
        assert_eq!(worst_kv(&ranks[..2]), unchecked);
        let ranks = vec![rank(0, flowing(5.0)), rank(1, flowing(30.0))];
        assert_eq!(worst_kv(&ranks), flowing(30.0));
        assert!(matches!(worst_kv(&[]), KvEvents::NotChecked { .. }));
    }

    #[test]
    fn a_failed_pinned_request_is_given_its_likely_cause() {
        let cause = |status, message| named_cause(status, message);
        assert!(cause(Some(400), "worker 7 dp_rank 1 is Not Eligible").contains("not eligible"));
        assert!(cause(Some(404), "").contains("does not serve the model"));
        assert!(cause(None, "Model not found").contains("does not serve the model"));
        assert!(cause(Some(409), "").contains("already in use"));
        assert!(cause(Some(503), "").contains("failed the request"));
        assert!(cause(Some(422), "").contains("refused"));
        assert!(cause(None, "request timed out").contains("no first token"));
        assert!(cause(None, "connection refused").contains("could not be reached"));
        assert_eq!(cause(None, "something else"), "see the message");
    }
}
