//! Shared simulator state: models, workers, faults, the selection service's books.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

use tokio::sync::mpsc;

use crate::cache::CachedBlocks;
use crate::config::{FaultConfig, LifecycleConfig, ModelConfig, RouterConfig, SimConfig};
use crate::engine::{EngineMsg, EngineParams, EngineShared, build_engine, run_engine};
use crate::hashing::SplitMix64;
use crate::selection::SelectionState;

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

pub(crate) fn read<T>(m: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    match m.read() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

pub(crate) fn write<T>(m: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    match m.write() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

/// One simulated worker (a Dynamo instance).
#[derive(Debug)]
pub(crate) struct Worker {
    pub id: u64,
    pub model: usize,
    /// Position in the model's configured workers (picks the speed).
    pub index: usize,
    pub tx: mpsc::UnboundedSender<EngineMsg>,
    pub engine: Arc<EngineShared>,
    /// Listed in the frontend's `/health` (a killed worker stays listed for a while).
    pub listed: AtomicBool,
    /// The frontend does not know the worker before this instant (discovery delay of a
    /// restarted worker, a fault): unlisted in `/health`, pinned requests get 400.
    pub discovered_at: std::time::Instant,
    /// The frontend's own view of its load (for its router and `/metrics`).
    pub fe_prefill_tokens: AtomicU64,
    pub fe_decode_blocks: AtomicU64,
}

impl Worker {
    pub fn alive(&self) -> bool {
        self.engine.alive.load(Ordering::SeqCst)
    }

    pub fn cache(&self) -> MutexGuard<'_, CachedBlocks> {
        lock(&self.engine.cache)
    }
}

/// One model and its current workers.
#[derive(Debug)]
pub(crate) struct ModelState {
    pub cfg: ModelConfig,
    /// Workers in creation order (dead ones removed once unlisted).
    pub workers: RwLock<Vec<Arc<Worker>>>,
}

#[derive(Debug)]
pub(crate) struct SimState {
    pub seed: u64,
    pub time_scale: f64,
    pub created_unix: u64,
    pub models: Vec<ModelState>,
    pub by_name: HashMap<String, usize>,
    pub workers: RwLock<HashMap<u64, Arc<Worker>>>,
    pub faults: RwLock<FaultConfig>,
    pub fault_rng: Mutex<SplitMix64>,
    pub router_rng: Mutex<SplitMix64>,
    pub id_rng: Mutex<SplitMix64>,
    pub lifecycle: LifecycleConfig,
    pub router: RouterConfig,
    pub selection: Mutex<SelectionState>,
    pub request_counter: AtomicU64,
    /// Fault: the frontend knows no instance before this instant (it is rediscovering its
    /// workers, as after a frontend restart).
    pub frontend_blind_until: Mutex<Option<std::time::Instant>>,
    /// Fault: the frontend's model registry is empty before this instant (requests get 404
    /// `Model not found`), as seen for a moment after a Dynamo 1.6.1 frontend restart.
    pub frontend_models_unknown_until: Mutex<Option<std::time::Instant>>,
}

impl SimState {
    pub fn new(cfg: &SimConfig) -> Self {
        let by_name = cfg
            .models
            .iter()
            .enumerate()
            .map(|(i, m)| (m.name.clone(), i))
            .collect();
        let created_unix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        Self {
            seed: cfg.seed,
            time_scale: cfg.time_scale,
            created_unix,
            models: cfg
                .models
                .iter()
                .map(|m| ModelState {
                    cfg: m.clone(),
                    workers: RwLock::new(Vec::new()),
                })
                .collect(),
            by_name,
            workers: RwLock::new(HashMap::new()),
            faults: RwLock::new(cfg.faults.clone()),
            fault_rng: Mutex::new(SplitMix64::new(cfg.seed ^ 0xFA17)),
            router_rng: Mutex::new(SplitMix64::new(cfg.seed ^ 0x2077E)),
            id_rng: Mutex::new(SplitMix64::new(cfg.seed ^ 0x1D)),
            lifecycle: cfg.lifecycle.clone(),
            router: cfg.router.clone(),
            selection: Mutex::new(SelectionState::new(cfg.seed)),
            request_counter: AtomicU64::new(0),
            frontend_blind_until: Mutex::new(None),
            frontend_models_unknown_until: Mutex::new(None),
        }
    }

    /// A fresh worker id above 2^53 (Dynamo's ids are large lease ids).
    pub fn next_worker_id(&self) -> u64 {
        let mut rng = lock(&self.id_rng);
        loop {
            let id = (1u64 << 62) | (rng.next_u64() >> 2);
            if !read(&self.workers).contains_key(&id) {
                return id;
            }
        }
    }

    /// Starts a worker engine for `model` (worker index `index` picks its speed); the frontend
    /// discovers it after `discovery_delay` (a fault; zero normally). An error is the engine's
    /// refusal of the model's parameters.
    pub fn start_worker(
        &self,
        model: usize,
        index: usize,
        id: u64,
        discovery_delay: std::time::Duration,
    ) -> Result<Arc<Worker>, String> {
        let m = &self.models[model].cfg;
        let params = EngineParams::of(m, index, self.time_scale, self.seed);
        let engine = build_engine(&params, id)?;
        let shared = Arc::new(EngineShared {
            cache: Mutex::new(CachedBlocks::default()),
            alive: AtomicBool::new(true),
        });
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(run_engine(params, engine, Arc::clone(&shared), rx));
        let w = Arc::new(Worker {
            id,
            model,
            index,
            tx,
            engine: shared,
            listed: AtomicBool::new(true),
            discovered_at: std::time::Instant::now() + discovery_delay,
            fe_prefill_tokens: AtomicU64::new(0),
            fe_decode_blocks: AtomicU64::new(0),
        });
        write(&self.workers).insert(id, Arc::clone(&w));
        write(&self.models[model].workers).push(Arc::clone(&w));
        Ok(w)
    }

    /// Whether the frontend currently knows (lists and routes to) `w`: listed, discovered,
    /// and the frontend is not rediscovering its workers.
    pub fn frontend_knows(&self, w: &Worker) -> bool {
        if !w.listed.load(Ordering::Relaxed) {
            return false;
        }
        let now = std::time::Instant::now();
        if now < w.discovered_at {
            return false;
        }
        !lock(&self.frontend_blind_until).is_some_and(|until| now < until)
    }

    /// The index of a model the frontend serves right now: `None` for an unknown name, and for
    /// every name while the frontend has forgotten its models (see
    /// `frontend_models_unknown_until`; Dynamo answers 404 `Model not found` then).
    pub fn frontend_model_index(&self, name: &str) -> Option<usize> {
        let forgotten = lock(&self.frontend_models_unknown_until)
            .is_some_and(|until| std::time::Instant::now() < until);
        self.model_index(name).filter(|_| !forgotten)
    }

    pub fn worker(&self, id: u64) -> Option<Arc<Worker>> {
        read(&self.workers).get(&id).cloned()
    }

    pub fn model_index(&self, name: &str) -> Option<usize> {
        self.by_name.get(name).copied()
    }

    pub fn faults(&self) -> FaultConfig {
        read(&self.faults).clone()
    }

    /// Wall duration of simulated ms.
    pub fn wall(&self, sim_ms: f64) -> std::time::Duration {
        crate::config::wall(self.time_scale, sim_ms)
    }

    pub fn now_epoch_ms() -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0)
    }

    /// Picks among equal-cost candidates with the seeded generator.
    pub fn pick_min(&self, costs: &[(u64, f64)]) -> Option<u64> {
        let min = costs.iter().map(|c| c.1).fold(f64::INFINITY, f64::min);
        let best: Vec<u64> = costs
            .iter()
            .filter(|c| c.1 <= min + 1e-9)
            .map(|c| c.0)
            .collect();
        match best.len() {
            0 => None,
            1 => Some(best[0]),
            n => {
                let r = lock(&self.router_rng).next_u64();
                Some(best[(r % n as u64) as usize])
            }
        }
    }
}
