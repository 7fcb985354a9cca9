//! The static checks of every worker row: listed, registered, schedulable, capacities.

use super::*;

/// The static checks of every row: listed, registered, schedulable, capacities.
pub(super) fn check_rows(report: &mut PreflightReport, plan: &Plan) {
    let (largest, largest_field) = plan.largest_prompt();
    let output = u64::from(plan.probe.max_tokens);
    let need = largest.saturating_add(output);
    let mut problems = Vec::new();
    for model in report.plan_models.clone() {
        let mine: Vec<&WorkerRow> = report.workers.iter().filter(|w| w.model == model).collect();
        if report.models_served.contains(&model) && !mine.iter().any(|w| w.listed_by_frontend) {
            problems.push((
                Severity::Deployment,
                format!(
                    "model `{model}`: the frontend serves it but lists no worker instance for it \
                     yet: its workers are still loading or registering (wait for them: \
                     sy-collect preflight --wait 10m)"
                ),
            ));
        }
        for w in &mine {
            let who = format!("worker {} ({model})", w.worker_id);
            // Registration already explained (no endpoint, wrong count, no ranks yet).
            let already = report.problems.iter().any(|p| {
                p.message
                    .starts_with(&format!("worker {} ({model})", w.worker_id))
            });
            if !w.registered && !already {
                problems.push((
                    Severity::Deployment,
                    format!(
                        "{who} is not registered with the selection service (run preflight \
                         without --no-register, or POST /workers)"
                    ),
                ));
            }
            if !w.registered {
                continue;
            }
            if !w.listed_by_frontend {
                problems.push((
                    Severity::Deployment,
                    format!(
                        "{who} is registered but the frontend does not list it (a stale id: \
                         DELETE {}/workers/{})",
                        report.selection_url, w.worker_id
                    ),
                ));
            }
            problems.extend(rank_problems(w, &who, &report.selection_url));
            if w.lifecycle.as_deref() != Some("schedulable") {
                let mut why = w.not_schedulable_reasons.join("; ");
                if why.contains("kv_events") {
                    why.push_str(
                        " (give the worker's KV-event publisher: --kv-events ID=tcp://HOST:PORT)",
                    );
                }
                problems.push((
                    Severity::Deployment,
                    format!(
                        "{who} is {} in the selection service{}{why}",
                        w.lifecycle.as_deref().unwrap_or("of unknown state"),
                        if why.is_empty() { "" } else { ": " }
                    ),
                ));
            }
            match w.prefill_capacity {
                None => problems.push((
                    Severity::Deployment,
                    format!(
                        "{who}: registered prefill capacity (max_num_batched_tokens, P's \
                         denominator) is missing: Dynamo would use {CAPACITY_SENTINEL} and P \
                         would read ≈ 0; register the engine's prefill token budget"
                    ),
                )),
                Some(c) if c >= CAPACITY_SENTINEL => problems.push((
                    Severity::Deployment,
                    format!(
                        "{who}: registered prefill capacity is {c}, Dynamo's placeholder for a \
                         missing value; register the engine's prefill token budget"
                    ),
                )),
                _ => {}
            }
            if w.total_kv_blocks.is_none() {
                problems.push((
                    Severity::Deployment,
                    format!("{who}: total_kv_blocks is not registered"),
                ));
            }
        }
        let cap = mine
            .iter()
            .filter_map(|w| Some(w.total_kv_blocks? * u64::from(w.block_size?)))
            .min();
        if let Some(cap) = cap {
            report.kv_capacity_tokens.insert(model.clone(), cap);
            // Blame what does not fit: the output alone, else the largest prompt.
            let field = if output >= cap || output > largest {
                "probe.max_tokens"
            } else {
                largest_field
            };
            if need > cap {
                problems.push((
                    Severity::Plan,
                    format!(
                        "plan field `{field}`: a prompt of {largest} tokens (`{largest_field}`) \
                         plus {output} output tokens (`probe.max_tokens`) does not fit the KV \
                         capacity of model `{model}`: {cap} tokens per worker (total_kv_blocks × \
                         block_size); the server would reject it"
                    ),
                ));
            }
        }
    }
    for (s, m) in problems {
        report.problem(s, m);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A plan whose largest prompt is 4,096 tokens (and 16 output tokens by default).
    fn plan() -> Plan {
        let text = "seed = 1\n[qgrid]\nn = [4096]\nf = [0.0]\nrepeats = 1\n";
        Plan::from_toml_str(text, std::path::Path::new("t.toml")).unwrap()
    }

    fn report(workers: Vec<WorkerRow>) -> PreflightReport {
        PreflightReport {
            frontend_url: String::new(),
            selection_url: "http://sel".into(),
            models_served: vec!["efficient".into(), "capable".into()],
            plan_models: vec!["efficient".into()],
            gauges: BTreeMap::new(),
            workers,
            kv_capacity_tokens: BTreeMap::new(),
            booked_requests_before: 0,
            problems: vec![],
            duration_ms: 0.0,
        }
    }

    fn row(listed: bool, extra: serde_json::Value) -> WorkerRow {
        let mut base = serde_json::json!({
            "model_name": "efficient",
            "max_num_batched_tokens": 8192,
            "total_kv_blocks": 1024,
            "block_size": 16
        });
        if let (Some(m), Some(e)) = (base.as_object_mut(), extra.as_object()) {
            m.extend(e.clone());
        }
        row_from_record(&worker_record(base), listed, None)
    }

    fn messages(r: &PreflightReport) -> Vec<(Severity, String)> {
        r.problems
            .iter()
            .map(|p| (p.severity, p.message.clone()))
            .collect()
    }

    #[test]
    fn a_fit_registered_worker_passes_and_gives_the_kv_capacity() {
        let mut r = report(vec![row(true, serde_json::json!({}))]);
        check_rows(&mut r, &plan());
        assert!(r.problems.is_empty(), "{:?}", messages(&r));
        assert_eq!(r.kv_capacity_tokens["efficient"], 1024 * 16);
    }

    #[test]
    fn a_missing_capacity_or_stale_id_names_the_worker() {
        let mut r = report(vec![row(
            false,
            serde_json::json!({"max_num_batched_tokens": 10_000_000}),
        )]);
        check_rows(&mut r, &plan());
        let m = messages(&r);
        assert!(m.iter().all(|(s, _)| *s == Severity::Deployment), "{m:?}");
        assert!(
            m.iter().any(|(_, t)| t
                .contains("worker 7 (efficient) is registered but the frontend does not list it")),
            "{m:?}"
        );
        assert!(
            m.iter()
                .any(|(_, t)| t.contains("placeholder for a missing value")),
            "{m:?}"
        );
    }

    #[test]
    fn a_prompt_larger_than_the_kv_capacity_is_the_plans_fault() {
        let mut r = report(vec![row(true, serde_json::json!({"total_kv_blocks": 100}))]);
        check_rows(&mut r, &plan());
        let m = messages(&r);
        assert_eq!(m.len(), 1, "{m:?}");
        assert_eq!(m[0].0, Severity::Plan);
        assert!(
            m[0].1
                .contains("does not fit the KV capacity of model `efficient`: 1600 tokens"),
            "{m:?}"
        );
        assert_eq!(r.exit_code(), 2);
    }
}
