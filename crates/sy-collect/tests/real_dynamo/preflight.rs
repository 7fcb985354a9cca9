//! `sy-collect preflight` and the GPU recipe (docs/gpu.md) against the real Dynamo 1.6.1 stack on
//! 127.0.0.1 (see `real_dynamo/stack.rs` for how the stack is found). Each misconfiguration is made
//! on one worker, checked, and undone before the next, so the stack is left as it was found.

use std::path::Path;
use std::process::{Command, Output};

use crate::stack::{self, Stack, repo_root};
use serde_json::{Value, json};

fn sy_collect() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sy-collect"))
}

fn preflight(stack: &Stack, plan: &Path, extra: &[&str]) -> Output {
    sy_collect()
        .arg("preflight")
        .arg("--plan")
        .arg(plan)
        .args([
            "--frontend-url",
            &stack.frontend,
            "--selection-url",
            &stack.select,
        ])
        .args(extra)
        .output()
        .unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn ci_plan() -> std::path::PathBuf {
    repo_root().join("data/plans/ci.toml")
}

/// The registered record of a worker (GET /workers).
async fn record(stack: &Stack, id: u64) -> Value {
    let (_, all) = stack.sel_get("/workers").await;
    all.as_array()
        .unwrap()
        .iter()
        .find(|w| w["worker_id"].as_u64() == Some(id))
        .cloned()
        .unwrap_or_else(|| panic!("worker {id} not registered: {all}"))
}

/// Re-registers `id` with `rec` (minus the fields the service derives).
async fn reregister(stack: &Stack, id: u64, mut rec: Value) {
    let o = rec.as_object_mut().unwrap();
    for k in ["lifecycle", "not_schedulable_reasons"] {
        o.remove(k);
    }
    o.retain(|_, v| !v.is_null());
    stack.sel_delete(&format!("/workers/{id}")).await;
    let (st, v) = stack.sel_post("/workers", &rec).await;
    assert!(st < 300, "POST /workers: {st} {v}");
}

/// Waits until the frontend no longer lists a killed worker (Dynamo 1.6.1 keeps it about 9 s).
async fn wait_unlisted(stack: &Stack, id: u64) {
    for _ in 0..150 {
        let (_, h) = stack
            .call(
                reqwest::Method::GET,
                &format!("{}/health", stack.frontend),
                None,
            )
            .await;
        let listed = h["instances"]
            .as_array()
            .is_some_and(|a| a.iter().any(|i| i["instance_id"].as_u64() == Some(id)));
        if !listed {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    panic!("the frontend still lists killed worker {id} after 30 s");
}

/// A correct table on the healthy stack; then an unregistered prefill capacity, a worker without a
/// KV-event publisher and a model missing are each named, with a non-zero exit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_dynamo_preflight_table_and_each_problem() {
    let Some(stack) = Stack::acquire("real_dynamo_preflight_table_and_each_problem").await else {
        return;
    };
    // Healthy: every worker listed, registered, its real capacity, KV events flowing.
    let out = preflight(&stack, &ci_plan(), &["--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = report["workers"].as_array().unwrap();
    assert_eq!(rows.len(), stack.workers().len(), "{report}");
    for w in stack.workers() {
        let row = rows
            .iter()
            .find(|r| r["worker_id"].as_u64() == Some(w.worker_id))
            .unwrap_or_else(|| panic!("{} missing from {report}", w.name));
        assert_eq!(
            row["prefill_capacity"].as_u64(),
            Some(w.max_num_batched_tokens)
        );
        assert_eq!(row["total_kv_blocks"].as_u64(), Some(w.total_kv_blocks));
        assert_eq!(row["block_size"].as_u64(), Some(stack::BLOCK));
        assert_eq!(row["listed_by_frontend"], true);
        assert_eq!(row["lifecycle"], "schedulable");
        assert_eq!(row["dp_ranks"], json!([0]));
        assert_eq!(row["kv_events"]["result"], "flowing", "{row}");
        assert!(row["server_ttft_ms"].as_f64().is_some(), "{row}");
    }
    let table = preflight(&stack, &ci_plan(), &[]);
    let t = String::from_utf8_lossy(&table.stdout);
    assert!(t.contains("prefill_P") && t.contains("kv_events"), "{t}");

    let target = stack.worker("capable-w1");
    let id = target.worker_id;
    let original = record(&stack, id).await;

    // 1. Prefill capacity left unregistered.
    let mut no_cap = original.clone();
    no_cap
        .as_object_mut()
        .unwrap()
        .remove("max_num_batched_tokens");
    reregister(&stack, id, no_cap).await;
    let out = preflight(&stack, &ci_plan(), &[]);
    reregister(&stack, id, original.clone()).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let s = text(&out);
    assert!(
        s.contains(&format!(
            "worker {id} (capable): registered prefill capacity"
        )),
        "{s}"
    );
    assert!(s.contains("10000000"), "{s}");

    // 2. Unregistered: preflight registers it from the frontend's figures (with the endpoint
    //    given), and the deployment is fit again.
    stack.sel_delete(&format!("/workers/{id}")).await;
    let kv = original["kv_events_endpoints"]["0"]
        .as_str()
        .unwrap()
        .to_string();
    let out = preflight(
        &stack,
        &ci_plan(),
        &["--kv-events", &format!("{id}={kv}"), "--json"],
    );
    let now = record(&stack, id).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let row = v["workers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["worker_id"].as_u64() == Some(id))
        .unwrap()
        .clone();
    assert_eq!(row["registered_now"], true, "{row}");
    assert_eq!(
        now["max_num_batched_tokens"],
        original["max_num_batched_tokens"]
    );
    assert_eq!(now["total_kv_blocks"], original["total_kv_blocks"]);
    assert_eq!(now["lifecycle"], "schedulable", "{now}");

    // 3. KV events disabled on one worker (restarted without its publisher; the launcher still
    //    registers the endpoint it should publish on).
    let launcher = |extra: &[(&str, &str)], args: &[&str]| {
        let mut c = Command::new(repo_root().join("scripts/dynamo-local.sh"));
        c.args(args).env("RUN_DIR", &stack.run_dir);
        for (k, v) in extra {
            c.env(k, v);
        }
        let o = c.output().unwrap();
        assert!(o.status.success(), "launcher {args:?}: {}", text(&o));
    };
    launcher(
        &[("NO_KV_EVENTS_WORKERS", "capable-w1")],
        &["restart-worker", "capable-w1"],
    );
    let silent = stack.worker("capable-w1").worker_id;
    let out = preflight(&stack, &ci_plan(), &[]);
    launcher(&[], &["restart-worker", "capable-w1"]);
    wait_unlisted(&stack, silent).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let s = text(&out);
    assert!(
        s.contains(&format!(
            "worker {silent} (capable) rank 0: KV events are not reaching the selection service"
        )),
        "{s}"
    );

    // 4. A model the deployment does not serve.
    let dir = tempfile::tempdir().unwrap();
    let plan = std::fs::read_to_string(ci_plan()).unwrap()
        + "\n[models]\nefficient = \"efficient\"\ncapable = \"capable-70b\"\n";
    let path = dir.path().join("missing.toml");
    std::fs::write(&path, plan).unwrap();
    let out = preflight(&stack, &path, &[]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("plan field `models.capable`: model `capable-70b` is not served"),
        "{}",
        text(&out)
    );

    // Back to fit.
    let out = preflight(&stack, &ci_plan(), &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    stack.assert_loads_zero("after the preflight checks").await;
}

/// Every command of docs/gpu.md's `<!-- runnable: real-dynamo -->` block succeeds against the stack,
/// and the collection prints the end-of-run table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_dynamo_gpu_doc_rehearsal_runs() {
    let Some(stack) = Stack::acquire("real_dynamo_gpu_doc_rehearsal_runs").await else {
        return;
    };
    let doc = std::fs::read_to_string(repo_root().join("docs/gpu.md")).unwrap();
    let block = doc
        .split("<!-- runnable: real-dynamo -->")
        .nth(1)
        .and_then(|rest| rest.split("```sh").nth(1))
        .and_then(|b| b.split("```").next())
        .expect("docs/gpu.md has a runnable: real-dynamo block");
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(repo_root().join("data"), dir.path().join("data")).unwrap();
    let mut ran = 0;
    for line in block.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let line = line
            .replace("$SY_DYNAMO_FRONTEND", &stack.frontend)
            .replace("$SY_DYNAMO_SELECT", &stack.select);
        let mut words = line.split_whitespace();
        assert_eq!(words.next(), Some("sy-collect"), "{line}");
        let out = sy_collect()
            .args(words)
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "{line}\n{}", text(&out));
        if line.contains("--run-dir") {
            let s = String::from_utf8_lossy(&out.stderr);
            assert!(s.contains("ttft p50") && s.contains("probes/s"), "{s}");
        }
        ran += 1;
    }
    assert_eq!(ran, 4, "{block}");
    stack.assert_loads_zero("after the rehearsal").await;
}
