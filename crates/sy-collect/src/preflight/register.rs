//! Registration: a worker the frontend lists, registered with the selection service from the
//! frontend's own figures, and the rows of the report built from registrations.

use super::*;

pub(super) fn row_from_record(
    w: &WorkerRecord,
    listed: bool,
    ranks: Option<&BTreeSet<u32>>,
) -> WorkerRow {
    let start = w.data_parallel_start_rank.unwrap_or(0);
    let dp_ranks = match w.data_parallel_size {
        Some(n) if n > 0 => (start..start + n).collect(),
        _ => ranks
            .map(|r| r.iter().copied().collect())
            .unwrap_or_default(),
    };
    let by_rank = registered_endpoints(w);
    let mut kv: Vec<String> = by_rank.values().cloned().collect();
    if by_rank.is_empty() {
        kv.extend(w.kv_events_endpoint.clone());
    }
    let frontend_ranks: Vec<u32> = ranks
        .map(|r| r.iter().copied().collect())
        .unwrap_or_default();
    WorkerRow {
        model: w.model_name.clone(),
        worker_id: w.worker_id,
        listed_by_frontend: listed,
        registered: true,
        registered_now: false,
        lifecycle: serde_json::to_value(w.lifecycle)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned)),
        not_schedulable_reasons: w.not_schedulable_reasons.clone().unwrap_or_default(),
        dp_ranks,
        block_size: w.block_size,
        total_kv_blocks: w.total_kv_blocks,
        prefill_capacity: w.max_num_batched_tokens,
        kv_events_endpoints: kv,
        kv_events_by_rank: by_rank,
        kv_events: KvEvents::NotChecked {
            reason: "probes off".into(),
        },
        client_ttft_ms: None,
        server_ttft_ms: None,
        frontend_ranks,
        ranks: Vec::new(),
    }
}

/// A registered worker's KV-event endpoints by rank (`kv_events_endpoints` is keyed by the rank
/// as a string; a single `kv_events_endpoint` is the start rank's).
pub(super) fn registered_endpoints(w: &WorkerRecord) -> BTreeMap<u32, String> {
    let mut m: BTreeMap<u32, String> = w
        .kv_events_endpoints
        .iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.parse().ok()?, v.clone())))
        .collect();
    if m.is_empty()
        && let Some(e) = &w.kv_events_endpoint
    {
        m.insert(w.data_parallel_start_rank.unwrap_or(0), e.clone());
    }
    m
}

/// Why `POST /workers` did not register a worker.
#[derive(Debug, thiserror::Error)]
pub enum RegisterError {
    #[error("{0}")]
    Http(#[source] reqwest::Error),
    #[error("HTTP {status}: {body}")]
    Status { status: u16, body: String },
    #[error("unexpected answer: {0}")]
    Answer(#[source] serde_json::Error),
}

/// Registers a worker the frontend lists, from the frontend's own figures for its model.
pub(super) async fn register(
    http: &reqwest::Client,
    bearer: Option<&str>,
    selection_url: &str,
    reg: &WorkerRegistration,
) -> Result<WorkerRecord, RegisterError> {
    let mut req = http
        .post(format!("{selection_url}/workers"))
        .timeout(Duration::from_secs(5))
        .json(reg);
    if let Some(t) = bearer {
        req = req.bearer_auth(t);
    }
    let resp = req.send().await.map_err(RegisterError::Http)?;
    let status = resp.status();
    let text = resp.text().await.map_err(RegisterError::Http)?;
    if !status.is_success() {
        return Err(RegisterError::Status {
            status: status.as_u16(),
            body: text,
        });
    }
    serde_json::from_str(&text).map_err(RegisterError::Answer)
}

/// Why the preflight cannot register a worker the frontend lists (names the worker and what to
/// pass).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RegistrationProblem {
    #[error(
        "worker {id} ({model}) is not registered and the frontend reports no data-parallel rank \
         for it yet ({} has no series for it): it is still starting; re-run with --wait \
         DURATION",
        mn::ROUTER_WORKER_REGISTERED
    )]
    NoRanks { id: u64, model: String },
    #[error("worker {id} ({model}): the frontend reports ranks {ranks:?}, not a contiguous range")]
    RanksNotContiguous {
        id: u64,
        model: String,
        ranks: Vec<u32>,
    },
    #[error(
        "worker {id} ({model}) is not registered with the selection service and the frontend \
         does not report its KV-event endpoint: pass {}",
        kv_events_arg(.id.to_owned(), .ranks)
    )]
    NoKvEvents {
        id: u64,
        model: String,
        ranks: Vec<u32>,
    },
    #[error(
        "worker {id} ({model}) has {} data-parallel rank(s) {ranks:?} but {} KV-event \
         endpoint(s) were given ({}): give one per rank, e.g. {}",
        .ranks.len(),
        .endpoints.len(),
        .endpoints.join(","),
        kv_events_arg(.id.to_owned(), .ranks)
    )]
    KvEventsPerRank {
        id: u64,
        model: String,
        ranks: Vec<u32>,
        endpoints: Vec<String>,
    },
}

/// The registration of an instance from the frontend's figures: its ranks (the router's gauges;
/// never guessed), the model's capacities, and the KV-event endpoints given for it, one per
/// rank. `Err`: why it cannot be registered.
pub(super) fn registration_for(
    id: u64,
    model: &str,
    d: &Discovery,
    endpoints: Option<&Vec<String>>,
) -> Result<WorkerRegistration, RegistrationProblem> {
    let g = d.gauges.get(model).cloned().unwrap_or_default();
    let ranks: Vec<u32> = d
        .ranks
        .get(&id)
        .map(|r| r.iter().copied().collect())
        .unwrap_or_default();
    let model_name = || model.to_string();
    if ranks.is_empty() {
        return Err(RegistrationProblem::NoRanks {
            id,
            model: model_name(),
        });
    }
    let start = ranks[0];
    let contiguous = ranks
        .iter()
        .enumerate()
        .all(|(i, r)| *r == start + i as u32);
    if !contiguous {
        return Err(RegistrationProblem::RanksNotContiguous {
            id,
            model: model_name(),
            ranks,
        });
    }
    let Some(eps) = endpoints else {
        return Err(RegistrationProblem::NoKvEvents {
            id,
            model: model_name(),
            ranks,
        });
    };
    if eps.len() != ranks.len() {
        return Err(RegistrationProblem::KvEventsPerRank {
            id,
            model: model_name(),
            ranks,
            endpoints: eps.clone(),
        });
    }
    Ok(WorkerRegistration {
        worker_id: id,
        model_name: Some(model.to_string()),
        routing_group: Some("default".into()),
        endpoint: Some(format!("dyn://{model}.backend.generate/{id}")),
        kv_events_endpoints: Some(
            ranks
                .iter()
                .zip(eps)
                .map(|(r, e)| (r.to_string(), e.clone()))
                .collect(),
        ),
        block_size: g.block_size,
        data_parallel_start_rank: Some(start),
        data_parallel_size: Some(ranks.len().max(1) as u32),
        max_num_batched_tokens: g.max_num_batched_tokens,
        total_kv_blocks: g.total_kv_blocks,
        ..WorkerRegistration::default()
    })
}

/// The `--kv-events` argument a worker needs, its id and rank count filled in: one port per
/// rank (vLLM and SGLang publish rank r on the configured port + r; see docs/gpu.md).
pub fn kv_events_arg(id: u64, ranks: &[u32]) -> String {
    if ranks.len() > 1 {
        format!(
            "--kv-events {id}=tcp://WORKER_HOST:KV_PORT-KV_PORT+{} ({} ranks: one port each)",
            ranks.len() - 1,
            ranks.len()
        )
    } else {
        format!("--kv-events {id}=tcp://WORKER_HOST:KV_PORT")
    }
}

/// A registration seen as the record it would become (for the table of an unregistered worker).
pub(super) fn record_of(reg: &WorkerRegistration) -> WorkerRecord {
    WorkerRecord {
        worker_id: reg.worker_id,
        model_name: reg.model_name.clone().unwrap_or_default(),
        routing_group: String::new(),
        lifecycle: WorkerLifecycle::Unschedulable,
        endpoint: reg.endpoint.clone(),
        kv_events_endpoint: None,
        kv_events_endpoints: reg.kv_events_endpoints.clone(),
        block_size: reg.block_size,
        data_parallel_start_rank: reg.data_parallel_start_rank,
        data_parallel_size: reg.data_parallel_size,
        max_num_batched_tokens: reg.max_num_batched_tokens,
        total_kv_blocks: reg.total_kv_blocks,
        taints: Vec::new(),
        topology_domains: BTreeMap::new(),
        not_schedulable_reasons: None,
        extra: Default::default(),
    }
}

/// A registered worker 7 as `GET /workers` lists it, with `extra`'s members (for tests).
#[cfg(test)]
pub(super) fn worker_record(extra: serde_json::Value) -> WorkerRecord {
    let mut v = serde_json::json!({"worker_id": 7, "lifecycle": "schedulable"});
    if let (Some(m), Some(e)) = (v.as_object_mut(), extra.as_object()) {
        m.extend(e.clone());
    }
    serde_json::from_value(v).unwrap_or_else(|e| panic!("{e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(extra: serde_json::Value) -> WorkerRecord {
        worker_record(extra)
    }

    #[test]
    fn the_kv_events_argument_has_one_port_per_rank() {
        assert_eq!(
            kv_events_arg(7, &[0]),
            "--kv-events 7=tcp://WORKER_HOST:KV_PORT"
        );
        assert_eq!(
            kv_events_arg(7, &[0, 1, 2]),
            "--kv-events 7=tcp://WORKER_HOST:KV_PORT-KV_PORT+2 (3 ranks: one port each)"
        );
    }

    #[test]
    fn registered_endpoints_are_keyed_by_rank() {
        let w = record(serde_json::json!({
            "kv_events_endpoints": {"0": "tcp://h:1", "1": "tcp://h:2", "x": "tcp://h:3"},
            "kv_events_endpoint": "tcp://h:9"
        }));
        let m = registered_endpoints(&w);
        assert_eq!(m.len(), 2, "a key that is not a rank is left out: {m:?}");
        assert_eq!(m[&1], "tcp://h:2");
        let w = record(serde_json::json!({
            "kv_events_endpoint": "tcp://h:9",
            "data_parallel_start_rank": 2
        }));
        assert_eq!(
            registered_endpoints(&w),
            BTreeMap::from([(2, "tcp://h:9".to_string())]),
            "a single endpoint is the start rank's"
        );
        assert!(registered_endpoints(&record(serde_json::json!({}))).is_empty());
    }
}
