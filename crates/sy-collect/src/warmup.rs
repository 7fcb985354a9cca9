//! Warm-up: before the first unit, every (worker, rank) of the plan's two models is sent a few
//! requests through the accounting path whose results are not recorded.
//!
//! Why: an engine's first requests pay one-off costs that later requests do not — vLLM and
//! SGLang compile kernels and capture CUDA graphs for batch shapes as they first meet them,
//! allocators grow, caches are cold. Recorded, those first probes would put a start-up
//! transient into Q (the no-load grid runs first) and into the load corrections. The warm-up
//! covers the plan's prompt lengths from the smallest to the largest, once per rank, on fresh
//! prompts (never a prefix of a later probe, so no cache state carries over).
//!
//! Default: on for `--target dynamo` (one request per distinct planned prompt length, at most
//! [`DEFAULT_MAX_PER_RANK`]), off for the simulator; the plan's `[target] warmup_requests` sets
//! the number per rank (0 turns it off).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Instant;

use sy_drive::{Driver, PromptFactory};
use sy_rundir::artifact::manifest::WarmupSummary;

use crate::plan::Plan;

/// Warm-up requests per (worker, rank) by default on a real deployment.
pub const DEFAULT_MAX_PER_RANK: u32 = 6;

/// The prompt lengths of `count` warm-up requests: spread over the plan's distinct lengths,
/// smallest and largest first.
pub fn warmup_lengths(plan: &Plan, count: u32) -> Vec<u64> {
    let mut all: BTreeSet<u64> = BTreeSet::new();
    if let Some(q) = &plan.qgrid {
        all.extend(q.n.iter().copied());
    }
    if let Some(l) = &plan.load {
        all.extend(l.n.iter().copied());
    }
    let all: Vec<u64> = all.into_iter().collect();
    let count = count as usize;
    if all.is_empty() || count == 0 {
        return Vec::new();
    }
    if count >= all.len() {
        return all;
    }
    if count == 1 {
        return vec![all[all.len() - 1]];
    }
    let mut out: Vec<u64> = (0..count)
        .map(|i| all[i * (all.len() - 1) / (count - 1)])
        .collect();
    out.dedup();
    out
}

/// The number of warm-up requests per rank: the plan's, else the default for the target.
pub fn requests_per_rank(plan: &Plan, dynamo: bool) -> u32 {
    match plan.target.warmup_requests {
        Some(n) => n,
        None if dynamo => {
            let n = warmup_lengths(plan, u32::MAX).len() as u32;
            n.min(DEFAULT_MAX_PER_RANK)
        }
        None => 0,
    }
}

/// Warms every schedulable (worker, rank) of the plan's models. Failures are counted, never
/// recorded as data; a warm-up that cannot even list the workers is skipped.
pub async fn warm_up(
    driver: &Arc<Driver>,
    plan: &Plan,
    invocation_id: &str,
    per_rank: u32,
) -> WarmupSummary {
    let t0 = Instant::now();
    let lengths = warmup_lengths(plan, per_rank);
    let mut s = WarmupSummary {
        prompt_tokens: lengths.clone(),
        ..WarmupSummary::default()
    };
    if lengths.is_empty() {
        return s;
    }
    let Ok(workers) = driver.selection.workers().await else {
        s.failures
            .push("GET /workers failed: warm-up skipped".to_string());
        return s;
    };
    let prompts = PromptFactory::new(plan.seed, invocation_id, &plan.prompt);
    let models = [&plan.models.efficient, &plan.models.capable];
    for w in workers.iter().filter(|w| {
        models.contains(&&w.model_name)
            && serde_json::to_value(w.lifecycle)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                == Some("schedulable".into())
    }) {
        let start = w.data_parallel_start_rank.unwrap_or(0);
        let size = w.data_parallel_size.unwrap_or(1).max(1);
        for rank in start..start + size {
            s.ranks += 1;
            for (i, &n) in lengths.iter().enumerate() {
                let tokens = prompts.tokens(&format!("warmup/{}/{rank}/{i}", w.worker_id), n);
                s.requests += 1;
                if let Err(e) = one(driver, &w.model_name, w.worker_id, rank, &tokens, plan).await {
                    s.failed += 1;
                    if s.failures.len() < 5 {
                        s.failures.push(format!(
                            "worker {} ({}) rank {rank}, {n} tokens: {e}",
                            w.worker_id, w.model_name
                        ));
                    }
                }
            }
        }
    }
    s.seconds = t0.elapsed().as_secs_f64();
    s
}

async fn one(
    driver: &Arc<Driver>,
    model: &str,
    worker: u64,
    rank: u32,
    tokens: &[u32],
    plan: &Plan,
) -> Result<(), sy_dynamo::CallError> {
    let max_tokens = plan.probe.max_tokens.max(1);
    let booking = driver
        .reserve_on_rank(model, tokens, max_tokens, (worker, rank), "warmup")
        .await?;
    // Exactly max_tokens, as every request of a run: never end of sequence first.
    let out = driver
        .send(
            &booking,
            model,
            tokens.to_vec(),
            max_tokens,
            true,
            &driver.cancel.clone(),
            || {},
        )
        .await;
    driver.release(&booking).await;
    match out.error {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(q: &[u64], l: &[u64]) -> Plan {
        let mut text = String::from("name = \"w\"\nseed = 1\n");
        if !q.is_empty() {
            text += &format!("[qgrid]\nn = {q:?}\nf = [0.0]\nrepeats = 1\n");
        }
        if !l.is_empty() {
            text += &format!(
                "[load]\nn = {l:?}\nf = [0.0]\nrepeats = 1\nprefill_contention = [0]\n\
                 prefill_prompt_tokens = 64\ndecode_contention = [0]\nshort_output_tokens = 4\n\
                 long_output_tokens = 8\ndecode_prompt_tokens = 64\nbusy_capable = [false]\n"
            );
        }
        Plan::from_toml_str(&text, std::path::Path::new("w.toml")).unwrap()
    }

    #[test]
    fn lengths_span_the_plan() {
        let p = plan(&[256, 1024, 4096, 16384], &[512]);
        assert_eq!(warmup_lengths(&p, 10), vec![256, 512, 1024, 4096, 16384]);
        assert_eq!(warmup_lengths(&p, 2), vec![256, 16384]);
        assert_eq!(warmup_lengths(&p, 3), vec![256, 1024, 16384]);
        assert_eq!(warmup_lengths(&p, 1), vec![16384]);
        assert!(warmup_lengths(&p, 0).is_empty());
    }

    #[test]
    fn default_is_on_for_dynamo_only() {
        let p = plan(&[256, 1024], &[]);
        assert_eq!(requests_per_rank(&p, true), 2);
        assert_eq!(requests_per_rank(&p, false), 0);
        let mut p = plan(&[1, 2, 3, 4, 5, 6, 7, 8, 9], &[]);
        assert_eq!(requests_per_rank(&p, true), DEFAULT_MAX_PER_RANK);
        p.target.warmup_requests = Some(0);
        assert_eq!(requests_per_rank(&p, true), 0);
        p.target.warmup_requests = Some(2);
        assert_eq!(requests_per_rank(&p, false), 2);
    }
}
