//! [`BackgroundLoad`]: the running closed loops of a unit or block.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use sy_dynamo::{Cancel, ErrorClass};
use tokio::sync::Notify;
use tokio::task::JoinSet;

use super::slots::SlotSpec;
use crate::prompt::PromptFactory;
use crate::reservation::Driver;

/// Running background slots.
#[derive(Debug)]
pub struct BackgroundLoad {
    stop: Cancel,
    tasks: JoinSet<()>,
    started: Arc<AtomicUsize>,
    notify: Arc<Notify>,
    slots: usize,
}

impl BackgroundLoad {
    /// Spawns one loop per slot.
    pub fn start(
        driver: Arc<Driver>,
        prompts: Arc<PromptFactory>,
        unit_key: String,
        slots: Vec<SlotSpec>,
        retry_backoff: Duration,
    ) -> Self {
        let stop = Cancel::new();
        let started = Arc::new(AtomicUsize::new(0));
        let notify = Arc::new(Notify::new());
        let mut tasks = JoinSet::new();
        // Ctrl-C stops the background too.
        {
            let stop = stop.clone();
            let global = driver.cancel.clone();
            tasks.spawn(async move {
                tokio::select! {
                    _ = global.cancelled() => stop.cancel(),
                    _ = stop.cancelled() => {}
                }
            });
        }
        let n = slots.len();
        for (i, spec) in slots.into_iter().enumerate() {
            let driver = driver.clone();
            let prompts = prompts.clone();
            let stop = stop.clone();
            let started = started.clone();
            let notify = notify.clone();
            let unit_key = unit_key.clone();
            tasks.spawn(async move {
                let slot_name = format!("{}{i}", spec.kind);
                let mut iteration = 0u64;
                let mut signalled = false;
                let mut backoff = retry_backoff;
                while !stop.is_cancelled() {
                    let tokens =
                        prompts.background(&unit_key, &slot_name, iteration, spec.prompt_tokens);
                    iteration += 1;
                    let on_first: Box<dyn FnOnce() + Send> = if signalled {
                        Box::new(|| {})
                    } else {
                        let started = started.clone();
                        let notify = notify.clone();
                        Box::new(move || {
                            started.fetch_add(1, Ordering::SeqCst);
                            notify.notify_waiters();
                        })
                    };
                    let got_first = {
                        let a = driver
                            .accounted(
                                &spec.model,
                                tokens,
                                spec.max_tokens,
                                spec.ignore_eos,
                                &stop,
                                "bg",
                                on_first,
                            )
                            .await;
                        driver
                            .stats
                            .background_requests
                            .fetch_add(1, Ordering::Relaxed);
                        let first = a.stream.as_ref().is_some_and(|s| s.ttft_ms.is_some());
                        if !a
                            .failure()
                            .is_some_and(|(_, e)| e.kind == ErrorClass::Cancelled)
                        {
                            driver.stats.record_background(&spec.model, &a);
                        }
                        match a.failure() {
                            Some((_, e)) if e.kind == ErrorClass::Cancelled => {}
                            Some((reserve, e)) => {
                                let kind = if reserve {
                                    "reservation".to_string()
                                } else {
                                    format!("{:?}", e.kind).to_lowercase()
                                };
                                driver.stats.count_background_error(&kind);
                                tracing::debug!("background {slot_name}: {e}");
                                tokio::select! {
                                    _ = stop.cancelled() => {}
                                    _ = tokio::time::sleep(backoff) => {}
                                }
                                backoff = (backoff * 2).min(Duration::from_secs(2));
                            }
                            None => backoff = retry_backoff,
                        }
                        first
                    };
                    signalled |= got_first;
                }
            });
        }
        Self {
            stop,
            tasks,
            started,
            notify,
            slots: n,
        }
    }

    /// Waits until every slot has streamed its first token (at most `limit`), then `warmup`.
    /// Returns whether every slot started.
    pub async fn warm_up(&self, limit: Duration, warmup: Duration, cancel: &Cancel) -> bool {
        let all = async {
            loop {
                let notified = self.notify.notified();
                if self.started.load(Ordering::SeqCst) >= self.slots {
                    return;
                }
                notified.await;
            }
        };
        let ok = tokio::select! {
            _ = cancel.cancelled() => return false,
            r = tokio::time::timeout(limit, all) => r.is_ok(),
        };
        tokio::select! {
            _ = cancel.cancelled() => return false,
            _ = tokio::time::sleep(warmup) => {}
        }
        ok
    }

    pub fn slots(&self) -> usize {
        self.slots
    }

    /// Cancels every slot and waits until each has deleted its reservation.
    pub async fn stop(mut self) {
        self.stop.cancel();
        while self.tasks.join_next().await.is_some() {}
    }
}
