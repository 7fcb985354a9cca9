//! The preflight's report: its problems with their severity, the per-worker rows, the text the
//! operator reads and the exit status.

use super::*;

/// How a problem affects the exit status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// Reported, does not fail.
    Warning,
    /// The deployment is not fit to calibrate (exit 1).
    Deployment,
    /// The plan does not fit the deployment (exit 2).
    Plan,
}

#[derive(Debug, Clone, Serialize)]
pub struct Problem {
    pub severity: Severity,
    pub message: String,
}

/// Per-model figures the frontend reports in `/metrics`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ModelGauges {
    pub total_kv_blocks: Option<u64>,
    pub block_size: Option<u32>,
    pub max_num_batched_tokens: Option<u64>,
}

/// The KV-event check of one worker.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum KvEvents {
    /// The primed prefix appeared in the selection service's overlap.
    Flowing {
        primed_tokens: u64,
        seen_tokens: u64,
        after_ms: f64,
    },
    /// It did not appear within the wait.
    NotFlowing {
        primed_tokens: u64,
        seen_tokens: u64,
        waited_ms: f64,
    },
    /// Not checked (why).
    NotChecked { reason: String },
}

/// The checks of one data-parallel rank of a worker.
#[derive(Debug, Clone, Serialize)]
pub struct RankCheck {
    pub dp_rank: u32,
    /// The registered KV-event endpoint of this rank.
    pub kv_events_endpoint: Option<String>,
    pub kv_events: KvEvents,
    pub client_ttft_ms: Option<f64>,
    pub server_ttft_ms: Option<f64>,
    /// Why the pinned probe (or priming request) on this rank failed, with its named cause.
    pub probe_error: Option<String>,
}

/// One worker as the deployment reports it.
#[derive(Debug, Clone, Serialize)]
pub struct WorkerRow {
    pub model: String,
    pub worker_id: u64,
    /// Listed by the frontend's `/health` (a `generate` instance).
    pub listed_by_frontend: bool,
    /// Registered with the selection service (before this preflight, or by it).
    pub registered: bool,
    /// Registered by this preflight.
    pub registered_now: bool,
    pub lifecycle: Option<String>,
    /// Why the selection service does not schedule it (its `not_schedulable_reasons`).
    pub not_schedulable_reasons: Vec<String>,
    /// Data-parallel ranks: the registered ones, else the frontend's `dp_rank` labels.
    pub dp_ranks: Vec<u32>,
    pub block_size: Option<u32>,
    pub total_kv_blocks: Option<u64>,
    /// Registered `max_num_batched_tokens` (P's denominator).
    pub prefill_capacity: Option<u64>,
    pub kv_events_endpoints: Vec<String>,
    /// The registered KV-event endpoint of each rank.
    pub kv_events_by_rank: BTreeMap<u32, String>,
    /// The worst rank's KV-event check (every rank's is in `ranks`).
    pub kv_events: KvEvents,
    /// The first rank's probe.
    pub client_ttft_ms: Option<f64>,
    pub server_ttft_ms: Option<f64>,
    /// The data-parallel ranks the frontend's router knows for this instance (its gauges).
    pub frontend_ranks: Vec<u32>,
    /// Per rank: KV events primed and observed there, and one pinned probe.
    pub ranks: Vec<RankCheck>,
}

/// Everything the preflight found.
#[derive(Debug, Clone, Serialize)]
pub struct PreflightReport {
    pub frontend_url: String,
    pub selection_url: String,
    pub models_served: Vec<String>,
    pub plan_models: Vec<String>,
    pub gauges: BTreeMap<String, ModelGauges>,
    pub workers: Vec<WorkerRow>,
    /// Smallest KV capacity (tokens) over a model's workers.
    pub kv_capacity_tokens: BTreeMap<String, u64>,
    pub booked_requests_before: u64,
    pub problems: Vec<Problem>,
    pub duration_ms: f64,
}

/// How to run the preflight.
#[derive(Debug, Clone, Default)]
pub struct PreflightOptions {
    /// Register workers the frontend lists but the selection service does not know.
    pub register: bool,
    /// KV-event endpoints for workers registered here (worker id → one `tcp://host:port` per
    /// data-parallel rank, rank order); the frontend does not report them.
    pub kv_events: BTreeMap<u64, Vec<String>>,
    /// The deployment description (`--describe`): KV-event endpoints by system URL, provenance.
    pub describe: Option<crate::deployment::LoadedDescription>,
    /// `--wait`: poll until both models and every instance with its ranks are listed and stable.
    pub wait: Option<Duration>,
    /// Send the priming and TTFT probes (off: discovery and registration only).
    pub probes: bool,
}

impl PreflightReport {
    /// 0 fit, 1 deployment problem, 2 plan problem.
    pub fn exit_code(&self) -> i32 {
        match self.problems.iter().map(|p| p.severity).max() {
            Some(Severity::Plan) => 2,
            Some(Severity::Deployment) => 1,
            _ => 0,
        }
    }

    /// The blocking problems as an error (what `sy-collect` stops on before a run).
    pub fn blocking_error(&self) -> Option<PreflightError> {
        let worst = self.problems.iter().max_by_key(|p| p.severity)?;
        if worst.severity == Severity::Warning {
            return None;
        }
        Some(PreflightError::Blocked {
            problems: self
                .problems
                .iter()
                .filter(|p| p.severity != Severity::Warning)
                .map(|p| p.message.clone())
                .collect(),
            plan_at_fault: worst.severity == Severity::Plan,
        })
    }

    pub(super) fn problem(&mut self, severity: Severity, message: String) {
        self.problems.push(Problem { severity, message });
    }

    /// The table, then the problems, as printed by `sy-collect preflight`.
    pub fn render_text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "frontend {}  selection service {}",
            self.frontend_url, self.selection_url
        );
        let _ = writeln!(
            s,
            "models served: {}  (plan: {})",
            if self.models_served.is_empty() {
                "none".to_string()
            } else {
                self.models_served.join(", ")
            },
            self.plan_models.join(", ")
        );
        for (m, g) in &self.gauges {
            let _ = writeln!(
                s,
                "  {m}: frontend /metrics total_kv_blocks {} block_size {} max_num_batched_tokens {}",
                opt(g.total_kv_blocks),
                opt(g.block_size),
                opt(g.max_num_batched_tokens)
            );
        }
        let _ = writeln!(
            s,
            "\n{:<10} {:>20} {:<9} {:<12} {:<5} {:>5} {:>8} {:>10} {:<22} {:>14}",
            "model",
            "worker",
            "frontend",
            "registered",
            "ranks",
            "block",
            "kv_blks",
            "prefill_P",
            "kv_events",
            "ttft cli/srv"
        );
        for w in &self.workers {
            let reg = match (w.registered, w.registered_now) {
                (true, true) => "now".to_string(),
                (true, false) => w.lifecycle.clone().unwrap_or_else(|| "yes".into()),
                _ => "NO".into(),
            };
            let cap = match w.prefill_capacity {
                None => "MISSING".to_string(),
                Some(c) if c >= CAPACITY_SENTINEL => format!("{c}!"),
                Some(c) => c.to_string(),
            };
            let kv = kv_text(&w.kv_events);
            let ttft = match (w.client_ttft_ms, w.server_ttft_ms) {
                (Some(c), Some(sv)) => format!("{c:.1}/{sv:.1}"),
                (Some(c), None) => format!("{c:.1}/-"),
                _ => "-".into(),
            };
            let ranks = w
                .dp_ranks
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(",");
            let _ = writeln!(
                s,
                "{:<10} {:>20} {:<9} {:<12} {:<5} {:>5} {:>8} {:>10} {:<22} {:>14}",
                w.model,
                w.worker_id,
                if w.listed_by_frontend {
                    "listed"
                } else {
                    "NOT"
                },
                reg,
                ranks,
                opt(w.block_size),
                opt(w.total_kv_blocks),
                cap,
                kv,
                ttft
            );
            rank_lines(&mut s, w);
        }
        if self.problems.is_empty() {
            let _ = writeln!(s, "\npreflight ok ({:.1} s)", self.duration_ms / 1e3);
        } else {
            let _ = writeln!(s);
            for p in &self.problems {
                let tag = match p.severity {
                    Severity::Warning => "warning",
                    Severity::Deployment => "PROBLEM",
                    Severity::Plan => "PLAN",
                };
                let _ = writeln!(s, "{tag}: {}", p.message);
            }
            let _ = writeln!(
                s,
                "preflight {} ({:.1} s)",
                match self.exit_code() {
                    0 => "ok, with warnings",
                    1 => "FAILED: the deployment is not fit to calibrate",
                    _ => "FAILED: the plan does not fit the deployment",
                },
                self.duration_ms / 1e3
            );
        }
        s
    }
}

/// A data-parallel worker's lines: one per rank (what was primed and probed there).
pub(super) fn rank_lines(s: &mut String, w: &WorkerRow) {
    if w.ranks.len() <= 1 {
        return;
    }
    for r in &w.ranks {
        let _ = writeln!(
            s,
            "{:<10} {:>20}   rank {:<3} kv {:<22} {:<22} {:>14}",
            "",
            "",
            r.dp_rank,
            r.kv_events_endpoint.as_deref().unwrap_or("-"),
            kv_text(&r.kv_events),
            match (r.client_ttft_ms, r.server_ttft_ms, &r.probe_error) {
                (_, _, Some(_)) => "FAILED".to_string(),
                (Some(c), Some(sv), _) => format!("{c:.1}/{sv:.1}"),
                _ => "-".into(),
            }
        );
    }
}

/// A registered worker's rank problems: registered with other ranks than the frontend routes,
/// or a rank without a KV-event endpoint.
pub(super) fn rank_problems(
    w: &WorkerRow,
    who: &str,
    selection_url: &str,
) -> Vec<(Severity, String)> {
    let mut problems = Vec::new();
    if !w.frontend_ranks.is_empty() && w.frontend_ranks != w.dp_ranks {
        problems.push((
            Severity::Deployment,
            format!(
                "{who} is registered with data-parallel ranks {:?} but the frontend routes ranks \
                 {:?}: the selection service would not observe the others (DELETE \
                 {selection_url}/workers/{} and re-run preflight with {})",
                w.dp_ranks,
                w.frontend_ranks,
                w.worker_id,
                kv_events_arg(w.worker_id, &w.frontend_ranks)
            ),
        ));
    }
    let missing: Vec<u32> = w
        .dp_ranks
        .iter()
        .copied()
        .filter(|r| !w.kv_events_by_rank.contains_key(r))
        .collect();
    if !missing.is_empty() && !w.kv_events_endpoints.is_empty() {
        problems.push((
            Severity::Deployment,
            format!(
                "{who}: rank(s) {missing:?} have no registered KV-event endpoint (it has {:?}): K \
                 would read 0 there",
                w.kv_events_endpoints
            ),
        ));
    }
    problems
}

pub(super) fn kv_text(k: &KvEvents) -> String {
    match k {
        KvEvents::Flowing {
            seen_tokens,
            after_ms,
            ..
        } => format!("ok {seen_tokens} tok {after_ms:.0} ms"),
        KvEvents::NotFlowing {
            primed_tokens,
            seen_tokens,
            ..
        } => format!("NO {seen_tokens}/{primed_tokens} tok"),
        KvEvents::NotChecked { .. } => "not checked".into(),
    }
}

pub(super) fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or_else(|| "-".to_string(), |v| v.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_code_is_the_worst_problem() {
        let mut r = PreflightReport {
            frontend_url: String::new(),
            selection_url: String::new(),
            models_served: vec![],
            plan_models: vec![],
            gauges: BTreeMap::new(),
            workers: vec![],
            kv_capacity_tokens: BTreeMap::new(),
            booked_requests_before: 0,
            problems: vec![],
            duration_ms: 0.0,
        };
        assert_eq!(r.exit_code(), 0);
        assert!(r.blocking_error().is_none());
        r.problem(Severity::Warning, "w".into());
        assert_eq!(r.exit_code(), 0);
        assert!(r.blocking_error().is_none());
        r.problem(Severity::Deployment, "d".into());
        assert_eq!(r.exit_code(), 1);
        assert!(matches!(
            r.blocking_error(),
            Some(PreflightError::Blocked {
                plan_at_fault: false,
                ..
            })
        ));
        r.problem(Severity::Plan, "p".into());
        assert_eq!(r.exit_code(), 2);
        let e = r.blocking_error().unwrap();
        assert!(e.is_bad_input() && e.to_string().contains("d; p"), "{e}");
    }
}
