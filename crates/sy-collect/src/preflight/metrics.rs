//! The frontend's Prometheus page read into per-model gauges and per-worker `dp_rank` labels.

use super::*;

/// The frontend's per-model gauges and per-worker `dp_rank` labels from a Prometheus text page.
pub fn parse_metrics(text: &str) -> (BTreeMap<String, ModelGauges>, BTreeMap<u64, BTreeSet<u32>>) {
    let mut gauges: BTreeMap<String, ModelGauges> = BTreeMap::new();
    let mut ranks: BTreeMap<u64, BTreeSet<u32>> = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((name, rest)) = line.split_once('{') else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once('}') else {
            continue;
        };
        let label = |key: &str| -> Option<&str> {
            labels.split(',').find_map(|kv| {
                let (k, v) = kv.split_once('=')?;
                (k.trim() == key).then(|| v.trim().trim_matches('"'))
            })
        };
        let value: Option<f64> = value.trim().parse().ok();
        let as_u64 = value
            .filter(|v| v.is_finite() && *v > 0.0)
            .map(|v| v as u64);
        if name == mn::WORKER_ACTIVE_PREFILL_TOKENS || name == mn::WORKER_ACTIVE_DECODE_BLOCKS {
            if let (Some(w), Some(r)) = (label("worker_id"), label("dp_rank"))
                && let (Some(w), Ok(r)) = (parse_worker_label(w), r.parse())
            {
                ranks.entry(w).or_default().insert(r);
            }
            continue;
        }
        if name == mn::ROUTER_WORKER_REGISTERED {
            // `router_worker_id` is the instance id in decimal; this series' `worker_id` label
            // is the frontend's own id, not the worker's.
            if let (Some(w), Some(r)) = (label("router_worker_id"), label("dp_rank"))
                && let (Ok(w), Ok(r)) = (w.parse(), r.parse())
                && value.is_some_and(|v| v > 0.0)
            {
                ranks.entry(w).or_default().insert(r);
            }
            continue;
        }
        let Some(model) = label("model") else {
            continue;
        };
        let g = || ModelGauges::default();
        if name == mn::MODEL_TOTAL_KV_BLOCKS {
            gauges.entry(model.into()).or_insert_with(g).total_kv_blocks = as_u64;
        } else if name == mn::MODEL_KV_CACHE_BLOCK_SIZE {
            gauges.entry(model.into()).or_insert_with(g).block_size =
                as_u64.and_then(|v| u32::try_from(v).ok());
        } else if name == mn::MODEL_MAX_NUM_BATCHED_TOKENS {
            gauges
                .entry(model.into())
                .or_insert_with(g)
                .max_num_batched_tokens = as_u64;
        }
    }
    (gauges, ranks)
}

/// A `worker_id` label: decimal, or hexadecimal (Dynamo's component metrics).
pub(super) fn parse_worker_label(s: &str) -> Option<u64> {
    s.parse()
        .ok()
        .or_else(|| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_give_model_gauges_and_worker_ranks() {
        let text = "# HELP x\n\
            dynamo_frontend_model_total_kv_blocks{model=\"capable\"} 1024\n\
            dynamo_frontend_model_kv_cache_block_size{model=\"capable\"} 16\n\
            dynamo_frontend_model_max_num_batched_tokens{model=\"capable\"} 0\n\
            dynamo_frontend_worker_active_prefill_tokens{dp_rank=\"1\",worker_id=\"42\",worker_type=\"decode\"} 0\n\
            dynamo_frontend_worker_active_prefill_tokens{dp_rank=\"0\",worker_id=\"42\"} 3\n\
            dynamo_frontend_worker_active_prefill_tokens{dp_rank=\"0\",worker_id=\"ff\"} 3\n";
        let (g, r) = parse_metrics(text);
        let c = &g["capable"];
        assert_eq!(c.total_kv_blocks, Some(1024));
        assert_eq!(c.block_size, Some(16));
        assert_eq!(c.max_num_batched_tokens, None, "0 is no capacity");
        assert_eq!(r[&42].iter().copied().collect::<Vec<_>>(), vec![0, 1]);
        assert!(r.contains_key(&255), "hex worker ids");
    }
}
