//! Background load held steady while a probe runs.
//!
//! Each background *slot* is a closed loop: it sends one request through the accounting path,
//! and when that request ends it sends the next, so the number of booked background requests
//! stays constant. Slots come in three kinds:
//!
//! - prefill contention: large uncached prompts (unique tokens every time), one output token;
//! - decode contention: short prompts generating `short` or `long` outputs (`ignore_eos`), with
//!   equal request counts for the short and the long condition;
//! - busy capable destination: long generations on the capable model.
//!
//! [`BackgroundLoad::start`] spawns the slots, [`BackgroundLoad::warm_up`] waits until every
//! slot has streamed its first token and then the plan's warm-up time, and
//! [`BackgroundLoad::stop`] cancels the slots; every cancelled request still deletes its
//! reservation before the slot task ends.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use sy_dynamo::{Cancel, ErrorClass};
use tokio::sync::Notify;
use tokio::task::JoinSet;

use crate::accounting::Driver;
use crate::prompt::PromptFactory;
use crate::schedule::Condition;

/// One background loop.
#[derive(Debug, Clone, PartialEq)]
pub struct SlotSpec {
    pub kind: &'static str,
    pub model: String,
    pub prompt_tokens: u64,
    pub max_tokens: u32,
    pub ignore_eos: bool,
}

/// The contention loops run on each target model: `prefill` = (requests, prompt tokens) of large
/// uncached prompts with one output token; `decode` = (requests, prompt tokens, output tokens)
/// of long generations.
#[derive(Debug, Clone, Copy)]
pub struct Loops {
    pub prefill: (u32, u64),
    pub decode: (u32, u64, u64),
}

impl Loops {
    /// Every loop on every target, prefill loops first per target.
    pub fn slots(&self, targets: &[&str]) -> Vec<SlotSpec> {
        let (prefills, prefill_tokens) = self.prefill;
        let (decodes, decode_prompt, decode_output) = self.decode;
        let mut slots = Vec::new();
        for model in targets {
            let slot = |kind, prompt_tokens, max_tokens| SlotSpec {
                kind,
                model: model.to_string(),
                prompt_tokens,
                max_tokens,
                ignore_eos: true,
            };
            let decode = slot("decode", decode_prompt, saturate(decode_output));
            slots.extend(std::iter::repeat_n(
                slot("prefill", prefill_tokens, 1),
                prefills as usize,
            ));
            slots.extend(std::iter::repeat_n(decode, decodes as usize));
        }
        slots
    }
}

/// One loop keeping the capable destination busy with generations.
pub fn busy_slot(capable: &str, prompt_tokens: u64, output_tokens: u64) -> SlotSpec {
    SlotSpec {
        kind: "busy",
        model: capable.to_string(),
        prompt_tokens: prompt_tokens.max(1),
        max_tokens: saturate(output_tokens),
        ignore_eos: true,
    }
}

fn saturate(tokens: u64) -> u32 {
    u32::try_from(tokens).unwrap_or(u32::MAX)
}

/// The slots a condition needs.
pub fn slots_for(condition: &Condition, efficient: &str, capable: &str) -> Vec<SlotSpec> {
    let bg = &condition.background;
    let targets: Vec<&str> = match bg.target.as_str() {
        "capable" => vec![capable],
        "both" if !bg.busy_capable => vec![efficient, capable],
        // With a busy capable destination the capable load comes from the busy slots.
        "both" => vec![efficient],
        "none" => vec![],
        _ => vec![efficient],
    };
    let loops = Loops {
        prefill: (bg.prefill_requests, bg.prefill_prompt_tokens),
        decode: (
            bg.decode_requests,
            condition.decode_prompt_tokens,
            bg.decode_output_tokens,
        ),
    };
    let mut slots = loops.slots(&targets);
    if bg.busy_capable {
        let busy = busy_slot(
            capable,
            condition.decode_prompt_tokens,
            condition.busy_capable_output_tokens,
        );
        slots.extend(std::iter::repeat_n(
            busy,
            condition.busy_capable_requests as usize,
        ));
    }
    slots
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Plan;
    use crate::schedule::Schedule;
    use std::path::Path;

    #[test]
    fn slots_follow_the_condition() {
        let plan = Plan::from_toml_str(
            "seed=1\n[load]\nn=[64]\nf=[0.0]\nrepeats=1\nprefill_contention=[2]\ndecode_contention=[3]\nbusy_capable=[false,true]\nbusy_capable_requests=4\n",
            Path::new("t"),
        )
        .unwrap();
        let s = Schedule::from_plan(&plan);
        let short_idle = s
            .conditions
            .iter()
            .find(|c| c.id.ends_with("dc3short-idle"))
            .unwrap();
        let slots = slots_for(short_idle, "e", "c");
        assert_eq!(slots.iter().filter(|s| s.kind == "prefill").count(), 2);
        assert_eq!(slots.iter().filter(|s| s.kind == "decode").count(), 3);
        assert!(slots.iter().all(|s| s.model == "e"));
        let long_busy = s
            .conditions
            .iter()
            .find(|c| c.id.ends_with("dc3long-busy"))
            .unwrap();
        let slots = slots_for(long_busy, "e", "c");
        assert_eq!(
            slots
                .iter()
                .filter(|s| s.kind == "busy" && s.model == "c")
                .count(),
            4
        );
        assert_eq!(slots.iter().filter(|s| s.model == "e").count(), 5);
    }
}
