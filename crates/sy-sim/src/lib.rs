//! An embedded, Dynamo-compatible simulator.
//!
//! Why: calibrating the routing rule needs a deployment that answers like NVIDIA Dynamo 1.6.1
//! (the same HTTP, the same JSON, the same booking semantics) and whose time-to-first-token
//! depends on what the calibration measures — prompt length, reusable prefix, booked prefill,
//! background decodes. Researchers rehearse a plan on a laptop, CI runs the whole pipeline,
//! and `sy-collect` runs the very same client code against it as against a GPU node.
//!
//! What: [`spawn`] starts, on 127.0.0.1 with OS-chosen ports, a *frontend*
//! (`/v1/completions`, `/v1/chat/completions`, `/v1/models`, `/health`, `/metrics`) and a
//! *selection service* (`/workers`, `/ready`, `/select`, `/select_and_reserve`,
//! `/reservations…`, `/loads`, `/potential_loads`, `/overlap_scores`). Behind them, every
//! worker is one tokio task driving Dynamo 1.6.1's mocker engine (the vLLM scheduler and KV
//! manager of `aisimulate-core` 0.13.0 that `dynamo-mocker` 1.6.1 runs), with the timing model of
//! [`config::TimingKind`] scaled by the global `time_scale`; its KV events feed the router's view
//! of its cache ([`cache`]), and block hashes are Dynamo's own ([`hashing`], `dynamo-tokens`). Faults ([`config::FaultConfig`]) come from the config and can be changed at
//! runtime through the [`SimHandle`], which also kills and restarts workers.
//!
//! See `docs/simulator.md` for what is modelled, what is not, and how to fit the parameters.

pub mod cache;
pub mod config;
mod engine;
pub mod fit_config;
mod frontend;
pub mod hashing;
mod precise_timer;
mod select_http;
mod selection;
mod state;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use sy_wire::{WorkerLifecycle, WorkerRegistration};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use config::{
    DropMode, FaultConfig, LifecycleConfig, ModelConfig, RouterConfig, SimConfig, StepTimeConfig,
    TimingKind,
};
pub use selection::MISSING_CAPACITY_SENTINEL;

use crate::engine::EngineMsg;
use crate::state::{SimState, lock, read, write};

/// Errors of the simulator library.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The configuration is unreadable or invalid (`source_name` is the file or "config").
    #[error("simulator config {source_name}: {message}")]
    Config {
        source_name: String,
        message: String,
    },
    /// Binding or serving failed.
    #[error("simulator I/O: {0}")]
    Io(#[from] std::io::Error),
    /// No such worker.
    #[error("no simulated worker with id {0}")]
    UnknownWorker(u64),
    /// Fault settings out of range.
    #[error("invalid fault settings: {0}")]
    InvalidFaults(String),
}

impl SimError {
    /// Whether the error is bad input (a configuration or setting the user gave: exit code 2)
    /// rather than a runtime failure (a port in use, an I/O error: exit code 1).
    pub fn is_bad_input(&self) -> bool {
        matches!(self, SimError::Config { .. } | SimError::InvalidFaults(_))
    }
}

/// A running simulator. Drop-safe; call [`SimHandle::shutdown`] for a clean stop.
#[derive(Debug)]
pub struct SimHandle {
    state: Arc<SimState>,
    config: SimConfig,
    frontend: SocketAddr,
    selection: SocketAddr,
    stop: watch::Sender<bool>,
    servers: Vec<JoinHandle<()>>,
}

/// Starts the simulator on 127.0.0.1 with OS-chosen ports.
pub async fn spawn(config: SimConfig) -> Result<SimHandle, SimError> {
    spawn_on(config, 0, 0).await
}

/// Starts the simulator on 127.0.0.1 with the given ports (0 = OS-chosen).
pub async fn spawn_on(
    config: SimConfig,
    frontend_port: u16,
    selection_port: u16,
) -> Result<SimHandle, SimError> {
    config.validate().map_err(|message| SimError::Config {
        source_name: "config".to_owned(),
        message,
    })?;
    let fe = TcpListener::bind(("127.0.0.1", frontend_port)).await?;
    let se = TcpListener::bind(("127.0.0.1", selection_port)).await?;
    let frontend = fe.local_addr()?;
    let selection = se.local_addr()?;
    let state = Arc::new(SimState::new(&config));
    for (m, mc) in config.models.iter().enumerate() {
        for i in 0..mc.workers {
            let id = state.next_worker_id();
            state
                .start_worker(m, i, id, std::time::Duration::ZERO)
                .map_err(|message| SimError::Config {
                    source_name: "config".to_owned(),
                    message: format!("models[{m}] ({}): {message}", mc.name),
                })?;
            register_in_selection(&state, id)?;
        }
    }
    let (stop, rx) = watch::channel(false);
    let mut servers = Vec::new();
    for (listener, app) in [
        (fe, frontend::router(Arc::clone(&state))),
        (se, select_http::router(Arc::clone(&state))),
    ] {
        let mut rx = rx.clone();
        servers.push(tokio::spawn(async move {
            let shutdown = async move {
                let _ = rx.wait_for(|v| *v).await;
            };
            // Small SSE events and short answers must not wait for Nagle + delayed ACK (~40 ms).
            let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
                if let Err(e) = tcp.set_nodelay(true) {
                    tracing::debug!("TCP_NODELAY: {e}");
                }
            });
            if let Err(e) = axum::serve(listener, app)
                .with_graceful_shutdown(shutdown)
                .await
            {
                tracing::error!("simulator server stopped: {e}");
            }
        }));
    }
    Ok(SimHandle {
        state,
        config,
        frontend,
        selection,
        stop,
        servers,
    })
}

fn register_in_selection(state: &SimState, id: u64) -> Result<(), SimError> {
    let w = state.worker(id).ok_or(SimError::UnknownWorker(id))?;
    let m = &state.models[w.model].cfg;
    let reg = WorkerRegistration {
        worker_id: id,
        model_name: Some(m.name.clone()),
        routing_group: Some(sy_wire::DEFAULT_ROUTING_GROUP.to_owned()),
        endpoint: Some(format!("dyn://{}.backend.generate/{id}", m.name)),
        kv_events_endpoint: None,
        kv_events_endpoints: Some(
            [("0".to_owned(), "tcp://127.0.0.1:0".to_owned())]
                .into_iter()
                .collect(),
        ),
        block_size: Some(m.block_size),
        data_parallel_start_rank: Some(0),
        data_parallel_size: Some(1),
        max_num_batched_tokens: m.advertise_capacity.then_some(m.max_num_batched_tokens),
        total_kv_blocks: Some(m.kv_blocks),
        extra: sy_wire::Extra::new(),
    };
    lock(&state.selection).register(reg);
    Ok(())
}

impl SimHandle {
    /// `http://127.0.0.1:PORT` of the OpenAI-compatible frontend.
    pub fn frontend_url(&self) -> String {
        format!("http://{}", self.frontend)
    }

    /// `http://127.0.0.1:PORT` of the selection service.
    pub fn selection_url(&self) -> String {
        format!("http://{}", self.selection)
    }

    /// The configuration it runs with (faults as at start).
    pub fn config(&self) -> &SimConfig {
        &self.config
    }

    /// Ids of the live workers of `model`, in creation order.
    pub fn worker_ids(&self, model: &str) -> Vec<u64> {
        let Some(m) = self.state.model_index(model) else {
            return Vec::new();
        };
        read(&self.state.models[m].workers)
            .iter()
            .filter(|w| w.alive())
            .map(|w| w.id)
            .collect()
    }

    /// Current fault settings.
    pub fn faults(&self) -> FaultConfig {
        self.state.faults()
    }

    /// Replaces the fault settings (takes effect for the next request).
    pub fn set_faults(&self, faults: FaultConfig) -> Result<(), SimError> {
        faults.validate().map_err(SimError::InvalidFaults)?;
        *write(&self.state.faults) = faults;
        Ok(())
    }

    /// Kills a worker like SIGKILL: in-flight streams get Dynamo's error event, requests
    /// pinned to it fail with 500, it stays listed in `/health` for
    /// `lifecycle.stale_listing_ms` and stays registered in the selection service (nobody
    /// tells it) until deregistered.
    pub fn kill_worker(&self, id: u64) -> Result<(), SimError> {
        let w = self.state.worker(id).ok_or(SimError::UnknownWorker(id))?;
        w.engine.alive.store(false, Ordering::SeqCst);
        let _ = w.tx.send(EngineMsg::Kill);
        let stale = self.state.wall(self.state.lifecycle.stale_listing_ms);
        tokio::spawn(async move {
            tokio::time::sleep(stale).await;
            w.listed.store(false, Ordering::SeqCst);
        });
        Ok(())
    }

    /// Kills a worker and, after `lifecycle.restart_delay_ms`, starts a replacement with a new
    /// id (empty cache). Returns the new id once it serves. The selection service learns it only
    /// if `lifecycle.auto_register_restarted` (else call [`Self::register_worker`]); the
    /// frontend discovers it `lifecycle.discovery_delay_ms` later (400 for pinned requests
    /// until then).
    pub async fn restart_worker(&self, id: u64) -> Result<u64, SimError> {
        let old = self.state.worker(id).ok_or(SimError::UnknownWorker(id))?;
        self.kill_worker(id)?;
        tokio::time::sleep(self.state.wall(self.state.lifecycle.restart_delay_ms)).await;
        let new_id = self.state.next_worker_id();
        let discovery = self.state.wall(self.state.lifecycle.discovery_delay_ms);
        self.state
            .start_worker(old.model, old.index, new_id, discovery)
            .map_err(|message| SimError::Config {
                source_name: "config".to_owned(),
                message,
            })?;
        if self.state.lifecycle.auto_register_restarted {
            register_in_selection(&self.state, new_id)?;
            lock(&self.state.selection).deregister(id);
        }
        Ok(new_id)
    }

    /// Fault: the frontend forgets every instance for `sim_ms` simulated ms and then
    /// rediscovers them, as a restarted Dynamo 1.6.1 frontend does while it re-reads discovery.
    /// Meanwhile `/health` lists no instance, pinned requests get HTTP 400 `Invalid request`
    /// and unpinned ones 503; streams already running are not affected, nor is the selection
    /// service (it keeps booking the workers).
    pub fn rediscover_workers(&self, sim_ms: f64) -> Result<(), SimError> {
        if !(sim_ms.is_finite() && sim_ms >= 0.0) {
            return Err(SimError::InvalidFaults(format!(
                "rediscovery time must be ≥ 0 ms, got {sim_ms}"
            )));
        }
        let until = std::time::Instant::now() + self.state.wall(sim_ms);
        *lock(&self.state.frontend_blind_until) = Some(until);
        Ok(())
    }

    /// Fault: the frontend's model registry is empty for `sim_ms` simulated ms: completions and
    /// chat requests get HTTP 404 `Model not found` while `/health` still lists the instances
    /// (seen for a few tens of ms right after a Dynamo 1.6.1 frontend restart; `/v1/models` is
    /// not changed). The selection service is untouched.
    pub fn forget_models(&self, sim_ms: f64) -> Result<(), SimError> {
        if !(sim_ms.is_finite() && sim_ms >= 0.0) {
            return Err(SimError::InvalidFaults(format!(
                "model rediscovery time must be ≥ 0 ms, got {sim_ms}"
            )));
        }
        let until = std::time::Instant::now() + self.state.wall(sim_ms);
        *lock(&self.state.frontend_models_unknown_until) = Some(until);
        Ok(())
    }

    /// Registers a simulated worker in the selection service (as `POST /workers` would).
    pub fn register_worker(&self, id: u64) -> Result<(), SimError> {
        register_in_selection(&self.state, id)
    }

    /// Removes a worker from the selection service (as `DELETE /workers/{id}` would).
    pub fn deregister_worker(&self, id: u64) -> bool {
        lock(&self.state.selection).deregister(id).is_some()
    }

    /// Marks a worker (un)schedulable in the selection service; it keeps serving pinned
    /// requests at the frontend.
    pub fn set_schedulable(&self, id: u64, schedulable: bool) -> Result<(), SimError> {
        let mut sel = lock(&self.state.selection);
        let rec = sel
            .catalogue
            .get_mut(&id)
            .ok_or(SimError::UnknownWorker(id))?;
        rec.lifecycle = if schedulable {
            WorkerLifecycle::Schedulable
        } else {
            WorkerLifecycle::Unschedulable
        };
        Ok(())
    }

    /// Stops both servers and every worker.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        for w in read(&self.state.workers).values() {
            let _ = w.tx.send(EngineMsg::Kill);
        }
        for s in self.servers {
            // Streams still open keep a graceful server alive; do not wait for them forever.
            let _ = tokio::time::timeout(std::time::Duration::from_secs(2), s).await;
        }
    }
}
