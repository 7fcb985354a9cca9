//! HTTP surface of the selection service. Status codes and error texts follow the Dynamo
//! 1.6.1 captures: 201 on `POST /workers` and `POST /reservations`, 422 for an undecodable body,
//! 400 without a prompt, 404 unknown worker/reservation/pending selection, 409 reused
//! `selection_id`, 503 for a model without schedulable workers.

// Early returns carry the finished HTTP answer; its size does not matter next to the I/O.
#![allow(clippy::result_large_err)]

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use axum::routing::{get, post};
use serde::de::DeserializeOwned;
use sy_wire::{
    DEFAULT_ROUTING_GROUP, ErrorBody, Extra, ModelLoads, OverlapScoresResponse, PromptQuery,
    ReadyResponse, ReservationRequest, ReservationResponse, SelectRequest, SelectResponse,
    StatusResponse, WorkerLifecycle, WorkerOverlapScore, WorkerRegistration,
};

use crate::hashing::sequence_hashes;
use crate::selection::{Booking, CachedSelection, Candidate, SelectionState};
use crate::state::{SimState, lock, read};

pub(crate) fn router(state: Arc<SimState>) -> Router {
    Router::new()
        .route("/workers", post(register).get(list_workers))
        .route("/workers/{id}", axum::routing::delete(delete_worker))
        .route("/ready", get(ready))
        .route("/health", get(health))
        .route("/select", post(select))
        .route("/select_and_reserve", post(select_and_reserve))
        .route("/reservations", post(reservations))
        .route("/reservations/{id}", axum::routing::delete(free))
        .route(
            "/reservations/{id}/prefill_complete",
            post(prefill_complete),
        )
        .route("/reservations/{id}/output_block", post(output_block))
        .route("/loads", get(loads))
        .route("/potential_loads", post(potential_loads))
        .route("/overlap_scores", post(overlap_scores))
        .with_state(state)
}

fn reply<T: serde::Serialize>(status: StatusCode, v: &T) -> Response {
    let body = serde_json::to_vec(v).unwrap_or_else(|_| b"{}".to_vec());
    let mut r = Response::new(axum::body::Body::from(body));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

fn err(status: StatusCode, msg: impl Into<String>) -> Response {
    reply(status, &ErrorBody::text(msg))
}

fn parse<T: DeserializeOwned>(body: &[u8]) -> Result<T, Response> {
    serde_json::from_slice(body).map_err(|e| {
        err(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!("Failed to deserialize the JSON body into the target type: {e}"),
        )
    })
}

/// The injected "slow selection service" fault.
async fn delay(st: &SimState) {
    let (ms, rate) = {
        let f = read(&st.faults);
        (f.selection_delay_ms, f.selection_delay_rate)
    };
    if ms > 0.0 && lock(&st.fault_rng).chance(rate) {
        tokio::time::sleep(st.wall(ms)).await;
    }
}

fn no_workers(model: &str) -> Response {
    err(
        StatusCode::SERVICE_UNAVAILABLE,
        format!("no schedulable workers for model={model} routing_group={DEFAULT_ROUTING_GROUP}"),
    )
}

/// Block size of a model: the simulator's, else the first registration's, else 16.
fn block_size(st: &SimState, sel: &SelectionState, model: &str) -> u64 {
    if let Some(i) = st.model_index(model) {
        return u64::from(st.models[i].cfg.block_size);
    }
    sel.catalogue
        .values()
        .find(|w| w.model_name == model)
        .and_then(|w| w.block_size)
        .map_or(16, u64::from)
}

/// The prompt-describing members every selection request carries (`/select`,
/// `/select_and_reserve`, `/reservations`, `/potential_loads`, `/overlap_scores`).
trait PromptRequest {
    fn model_name(&self) -> Option<&String>;
    fn token_ids(&self) -> Option<&Vec<u32>>;
    fn sequence_hashes(&self) -> Option<&Vec<i64>>;
    fn block_hashes(&self) -> Option<&Vec<u64>>;
    fn isl_tokens(&self) -> Option<u64>;

    /// The model the request names (`"default"` when it names none, like Dynamo).
    fn model(&self) -> String {
        self.model_name()
            .cloned()
            .unwrap_or_else(|| "default".to_owned())
    }
}

macro_rules! prompt_request {
    ($($t:ty),*) => {$(
        impl PromptRequest for $t {
            fn model_name(&self) -> Option<&String> { self.model_name.as_ref() }
            fn token_ids(&self) -> Option<&Vec<u32>> { self.token_ids.as_ref() }
            fn sequence_hashes(&self) -> Option<&Vec<i64>> { self.sequence_hashes.as_ref() }
            fn block_hashes(&self) -> Option<&Vec<u64>> { self.block_hashes.as_ref() }
            fn isl_tokens(&self) -> Option<u64> { self.isl_tokens }
        }
    )*};
}

prompt_request!(SelectRequest, ReservationRequest, PromptQuery);

/// A request's prompt as chained block hashes, its length in tokens and the model's block size.
struct Prompt {
    bs: u64,
    hashes: Vec<u64>,
    isl: u64,
}

/// Reads the prompt of `req` for `model` (token ids, else sequence hashes, else local block
/// hashes, which cannot match the chained cache keys); an error response when it has none.
fn prompt_of(
    st: &SimState,
    sel: &SelectionState,
    model: &str,
    req: &impl PromptRequest,
) -> Result<Prompt, Response> {
    let bs = block_size(st, sel, model);
    let isl = req.isl_tokens();
    let (hashes, isl) = if let Some(t) = req.token_ids() {
        (sequence_hashes(t, bs as u32), t.len() as u64)
    } else if let Some(s) = req.sequence_hashes() {
        let h: Vec<u64> = s.iter().map(|x| *x as u64).collect();
        let n = isl.unwrap_or(h.len() as u64 * bs);
        (h, n)
    } else if let Some(b) = req.block_hashes() {
        // Local (unchained) hashes cannot match the chained cache keys: no overlap.
        (Vec::new(), isl.unwrap_or(b.len() as u64 * bs))
    } else {
        return Err(err(
            StatusCode::BAD_REQUEST,
            "block_hashes is required without token_ids",
        ));
    };
    Ok(Prompt { bs, hashes, isl })
}

fn overlap_blocks(st: &SimState, worker: u64, hashes: &[u64]) -> u64 {
    st.worker(worker)
        .map_or(0, |w| w.cache().match_prefix(hashes) as u64)
}

/// Evaluates every schedulable candidate and picks one (Dynamo's default cost).
fn choose(
    st: &SimState,
    sel: &mut SelectionState,
    model: &str,
    hashes: &[u64],
    isl: u64,
    bs: u64,
    allowed: Option<&Vec<u64>>,
) -> Result<Candidate, Response> {
    let ids: Vec<u64> = sel
        .schedulable(model)
        .iter()
        .map(|w| w.worker_id)
        .filter(|id| allowed.is_none_or(|a| a.contains(id)))
        .collect();
    let weight = st.router.overlap_score_weight;
    let cands: Vec<Candidate> = ids
        .into_iter()
        .map(|id| {
            let ob = overlap_blocks(st, id, hashes);
            Candidate {
                worker: id,
                overlap_blocks: ob,
                cost: sel.cost(id, isl, ob * bs, hashes, bs, weight),
            }
        })
        .collect();
    sel.pick(&cands).ok_or_else(|| no_workers(model))
}

fn answer(
    sel: &SelectionState,
    model: &str,
    c: &Candidate,
    hashes: &[u64],
    isl: u64,
    bs: u64,
    advisory: bool,
) -> SelectResponse {
    let rec = sel.catalogue.get(&c.worker);
    let overlap_tokens = (c.overlap_blocks * bs).min(isl);
    SelectResponse {
        model_name: Some(model.to_owned()),
        routing_group: Some(DEFAULT_ROUTING_GROUP.to_owned()),
        worker_id: c.worker,
        dp_rank: 0,
        endpoint: rec.and_then(|r| r.endpoint.clone()).unwrap_or_default(),
        block_size: bs as u32,
        overlap: SelectionState::overlap(overlap_tokens),
        effective_prefill_tokens: isl - overlap_tokens,
        potential_decode_blocks: sel.select_decode_blocks(c.worker, isl, bs, hashes),
        worker_load: advisory.then(|| sel.worker_load(c.worker)),
        ..SelectResponse::default()
    }
}

async fn register(State(st): State<Arc<SimState>>, body: Bytes) -> Response {
    delay(&st).await;
    let r: WorkerRegistration = match parse(&body) {
        Ok(r) => r,
        Err(e) => return e,
    };
    let rec = lock(&st.selection).register(r);
    reply(StatusCode::CREATED, &rec)
}

async fn list_workers(State(st): State<Arc<SimState>>) -> Response {
    delay(&st).await;
    let list: Vec<_> = lock(&st.selection).catalogue.values().cloned().collect();
    reply(StatusCode::OK, &list)
}

async fn delete_worker(State(st): State<Arc<SimState>>, Path(id): Path<String>) -> Response {
    delay(&st).await;
    let Ok(id) = id.parse::<u64>() else {
        return err(StatusCode::BAD_REQUEST, format!("invalid worker id {id}"));
    };
    match lock(&st.selection).deregister(id) {
        Some(rec) => reply(StatusCode::OK, &rec),
        None => err(StatusCode::NOT_FOUND, format!("worker {id} not found")),
    }
}

async fn ready(State(st): State<Arc<SimState>>) -> Response {
    delay(&st).await;
    let sel = lock(&st.selection);
    let workers: Vec<_> = sel.catalogue.values().cloned().collect();
    let n = workers
        .iter()
        .filter(|w| w.lifecycle == WorkerLifecycle::Schedulable)
        .count() as u64;
    reply(
        StatusCode::OK,
        &ReadyResponse {
            ready: n > 0,
            schedulable_workers: n,
            workers,
            extra: Extra::new(),
        },
    )
}

async fn health() -> Response {
    reply(StatusCode::OK, &StatusResponse::ok())
}

/// The prompt of `req` and the worker the router picks for it among the allowed ones (the
/// shared first steps of `select` and `select_and_reserve`); an error response otherwise.
fn prompt_and_choice(
    st: &SimState,
    sel: &mut SelectionState,
    model: &str,
    req: &SelectRequest,
) -> Result<(Prompt, Candidate), Response> {
    let prompt = prompt_of(st, sel, model, req)?;
    let c = choose(
        st,
        sel,
        model,
        &prompt.hashes,
        prompt.isl,
        prompt.bs,
        req.allowed_worker_ids.as_ref(),
    )?;
    Ok((prompt, c))
}

async fn select(State(st): State<Arc<SimState>>, body: Bytes) -> Response {
    delay(&st).await;
    let req: SelectRequest = match parse(&body) {
        Ok(r) => r,
        Err(e) => return e,
    };
    let model = req.model();
    let mut sel = lock(&st.selection);
    let (Prompt { bs, hashes, isl }, c) = match prompt_and_choice(&st, &mut sel, &model, &req) {
        Ok(x) => x,
        Err(e) => return e,
    };
    let mut a = answer(
        &sel,
        &model,
        &c,
        &hashes,
        isl,
        bs,
        req.advisory.unwrap_or(false),
    );
    if let Some(id) = req.selection_id {
        a.selection_id = Some(id.clone());
        sel.remember(
            id,
            CachedSelection {
                model,
                worker: c.worker,
                prefill_tokens: a.effective_prefill_tokens,
                hashes,
            },
        );
    }
    reply(StatusCode::OK, &a)
}

async fn select_and_reserve(State(st): State<Arc<SimState>>, body: Bytes) -> Response {
    delay(&st).await;
    let req: SelectRequest = match parse(&body) {
        Ok(r) => r,
        Err(e) => return e,
    };
    let Some(sid) = req.selection_id.clone() else {
        return err(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Failed to deserialize the JSON body into the target type: missing field `selection_id`",
        );
    };
    let model = req.model();
    let mut sel = lock(&st.selection);
    if sel.reservations.contains_key(&sid) {
        return err(
            StatusCode::CONFLICT,
            format!("selection {sid} is already reserved or being reserved"),
        );
    }
    let (Prompt { bs, hashes, isl }, c) = match prompt_and_choice(&st, &mut sel, &model, &req) {
        Ok(x) => x,
        Err(e) => return e,
    };
    let mut a = answer(&sel, &model, &c, &hashes, isl, bs, false);
    a.selection_id = Some(sid.clone());
    a.sequence_hashes = Some(hashes.iter().map(|h| *h as i64).collect());
    a.isl_tokens = Some(isl);
    a.track_prefill_tokens = Some(true);
    sel.book(
        sid,
        Booking {
            worker: c.worker,
            prefill_tokens: a.effective_prefill_tokens,
            hashes,
        },
    );
    reply(StatusCode::OK, &a)
}

async fn reservations(State(st): State<Arc<SimState>>, body: Bytes) -> Response {
    delay(&st).await;
    let req: ReservationRequest = match parse(&body) {
        Ok(r) => r,
        Err(e) => return e,
    };
    let model = req.model();
    let sid = req.selection_id.clone();
    let mut sel = lock(&st.selection);
    if sel.reservations.contains_key(&sid) {
        return err(
            StatusCode::CONFLICT,
            format!("selection {sid} is already reserved or being reserved"),
        );
    }
    let booking = if let Some(worker) = req.worker_id {
        let ok = sel
            .schedulable(&model)
            .iter()
            .any(|w| w.worker_id == worker);
        if !ok {
            return err(
                StatusCode::NOT_FOUND,
                format!(
                    "schedulable worker {worker} not found for model={model} routing_group={DEFAULT_ROUTING_GROUP}"
                ),
            );
        }
        let hashes = prompt_of(&st, &sel, &model, &req)
            .map(|p| p.hashes)
            .unwrap_or_default();
        // As observed on 1.6.1: the explicit form books the request and its blocks, but
        // prefill tokens only when given explicitly.
        Booking {
            worker,
            prefill_tokens: req.effective_prefill_tokens.unwrap_or(0),
            hashes,
        }
    } else {
        match sel.take_pending(&sid, &model) {
            Some(p) => Booking {
                worker: p.worker,
                prefill_tokens: p.prefill_tokens,
                hashes: p.hashes,
            },
            None => {
                return err(
                    StatusCode::NOT_FOUND,
                    format!(
                        "no pending selection {sid} for model={model} routing_group={DEFAULT_ROUTING_GROUP} (expired, already used, or never selected)"
                    ),
                );
            }
        }
    };
    let worker = booking.worker;
    let endpoint = sel
        .catalogue
        .get(&worker)
        .and_then(|r| r.endpoint.clone())
        .unwrap_or_default();
    sel.book(sid.clone(), booking);
    reply(
        StatusCode::CREATED,
        &ReservationResponse {
            selection_id: sid,
            model_name: Some(model),
            routing_group: Some(DEFAULT_ROUTING_GROUP.to_owned()),
            worker_id: worker,
            dp_rank: 0,
            endpoint,
            extra: Extra::new(),
        },
    )
}

fn not_found_reservation(id: &str) -> Response {
    err(StatusCode::NOT_FOUND, format!("reservation {id} not found"))
}

async fn prefill_complete(State(st): State<Arc<SimState>>, Path(id): Path<String>) -> Response {
    delay(&st).await;
    if lock(&st.selection).prefill_complete(&id) {
        reply(StatusCode::OK, &StatusResponse::ok())
    } else {
        not_found_reservation(&id)
    }
}

async fn output_block(State(st): State<Arc<SimState>>, Path(id): Path<String>) -> Response {
    delay(&st).await;
    if lock(&st.selection).reservations.contains_key(&id) {
        reply(StatusCode::OK, &StatusResponse::ok())
    } else {
        not_found_reservation(&id)
    }
}

async fn free(State(st): State<Arc<SimState>>, Path(id): Path<String>) -> Response {
    delay(&st).await;
    if lock(&st.selection).free(&id) {
        reply(StatusCode::OK, &StatusResponse::ok())
    } else {
        not_found_reservation(&id)
    }
}

#[derive(Debug, serde::Deserialize)]
struct LoadsQuery {
    model_name: Option<String>,
}

async fn loads(State(st): State<Arc<SimState>>, Query(q): Query<LoadsQuery>) -> Response {
    delay(&st).await;
    let sel = lock(&st.selection);
    let mut models: Vec<String> = match q.model_name {
        Some(m) => vec![m],
        None => sel
            .catalogue
            .values()
            .map(|w| w.model_name.clone())
            .collect(),
    };
    models.sort();
    models.dedup();
    let out: Vec<ModelLoads> = models
        .into_iter()
        .map(|m| ModelLoads {
            loads: sel
                .catalogue
                .values()
                .filter(|w| w.model_name == m && w.lifecycle == WorkerLifecycle::Schedulable)
                .map(|w| sel.load_row(w.worker_id))
                .collect(),
            model_name: m,
            routing_group: Some(DEFAULT_ROUTING_GROUP.to_owned()),
            pending_count: 0,
            pending_isl_tokens: 0,
            extra: Extra::new(),
        })
        .collect();
    reply(StatusCode::OK, &out)
}

/// What the prompt-scoring routes (`/potential_loads`, `/overlap_scores`) share: the query's
/// model (`"default"` when unnamed), its block size, the prompt's block hashes and length, and
/// the model's schedulable workers.
struct ScoringQuery {
    bs: u64,
    hashes: Vec<u64>,
    isl: u64,
    ids: Vec<u64>,
}

/// Reads a scoring query; an error response for a bad body, a bad prompt or no schedulable
/// worker.
fn scoring_query(
    st: &SimState,
    sel: &SelectionState,
    body: &[u8],
) -> Result<ScoringQuery, Response> {
    let req: PromptQuery = parse(body)?;
    let model = req.model();
    let Prompt { bs, hashes, isl } = prompt_of(st, sel, &model, &req)?;
    let ids: Vec<u64> = sel
        .schedulable(&model)
        .iter()
        .map(|w| w.worker_id)
        .collect();
    if ids.is_empty() {
        return Err(no_workers(&model));
    }
    Ok(ScoringQuery {
        bs,
        hashes,
        isl,
        ids,
    })
}

async fn potential_loads(State(st): State<Arc<SimState>>, body: Bytes) -> Response {
    delay(&st).await;
    let sel = lock(&st.selection);
    let ScoringQuery {
        bs,
        hashes,
        isl,
        ids,
    } = match scoring_query(&st, &sel, &body) {
        Ok(q) => q,
        Err(e) => return e,
    };
    let rows: Vec<_> = ids
        .into_iter()
        .map(|id| {
            let ob = overlap_blocks(&st, id, &hashes);
            sel.potential_row(id, isl, (ob * bs).min(isl), &hashes)
        })
        .collect();
    reply(StatusCode::OK, &rows)
}

async fn overlap_scores(State(st): State<Arc<SimState>>, body: Bytes) -> Response {
    delay(&st).await;
    let sel = lock(&st.selection);
    let ScoringQuery {
        bs, hashes, ids, ..
    } = match scoring_query(&st, &sel, &body) {
        Ok(q) => q,
        Err(e) => return e,
    };
    drop(sel);
    let workers = ids
        .into_iter()
        .map(|id| {
            let b = overlap_blocks(&st, id, &hashes);
            let mut extra = Extra::new();
            extra.insert("host_pinned_extension_blocks".into(), 0.into());
            extra.insert("disk_extension_blocks".into(), 0.into());
            extra.insert(
                "shared_beyond_device_blocks".into(),
                serde_json::Value::Null,
            );
            WorkerOverlapScore {
                worker_id: id,
                dp_rank: 0,
                device_blocks: b,
                host_pinned_blocks: b,
                disk_blocks: b,
                extra,
            }
        })
        .collect();
    let mut extra = Extra::new();
    extra.insert(
        "shared_cache".into(),
        serde_json::json!({"enabled": false, "total_hit_blocks": 0, "ranges": [], "error": null}),
    );
    reply(
        StatusCode::OK,
        &OverlapScoresResponse {
            block_size: bs as u32,
            num_blocks: hashes.len() as u64,
            workers,
            extra,
        },
    )
}
