//! `sy-collect preflight` on data-parallel workers, every rank, against the real Dynamo 1.6.1
//! stack of `scripts/test.sh` phase 2b (a data-parallel-size-2 and a data-parallel-size-4
//! worker): ranks from the frontend's gauges, one KV-event endpoint per rank, K primed and seen
//! on every (worker, rank), one pinned probe per (worker, rank), and each way of getting it
//! wrong named with the worker and the rank. Every change is undone before the test ends.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::{Value, json};

use crate::stack::Stack;

fn sy_collect() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sy-collect"))
}

fn text(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The dp64 plan of this binary, written to `dir`.
fn plan(dir: &Path) -> std::path::PathBuf {
    let p = dir.join("plan.toml");
    std::fs::write(&p, crate::DP_PLAN).unwrap();
    p
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

/// The launcher's table (`workers.json`) rows of running workers.
fn table(stack: &Stack) -> Vec<Value> {
    let text = std::fs::read_to_string(stack.run_dir.join("workers.json")).unwrap();
    let t: Vec<Value> = serde_json::from_str(&text).unwrap();
    t.into_iter()
        .filter(|w| w["running"] == json!(true))
        .collect()
}

fn with_dp(table: &[Value], dp: u64) -> Option<Value> {
    table
        .iter()
        .find(|w| w["data_parallel_size"].as_u64() == Some(dp))
        .cloned()
}

async fn record(stack: &Stack, id: u64) -> Value {
    let (_, all) = stack.sel_get("/workers").await;
    all.as_array()
        .unwrap()
        .iter()
        .find(|w| w["worker_id"].as_u64() == Some(id))
        .cloned()
        .unwrap_or_else(|| panic!("worker {id} not registered: {all}"))
}

/// Replaces `id`'s registration with `rec` (minus the fields the service derives).
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

fn row(report: &Value, id: u64) -> Value {
    report["workers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["worker_id"].as_u64() == Some(id))
        .cloned()
        .unwrap_or_else(|| panic!("worker {id} missing from {report}"))
}

/// Every rank of `id` was primed, seen and probed.
fn assert_every_rank_checked(report: &Value, id: u64, dp: u32) {
    let r = row(report, id);
    let want: Vec<u32> = (0..dp).collect();
    assert_eq!(r["dp_ranks"], json!(want), "{r}");
    assert_eq!(r["frontend_ranks"], json!(want), "{r}");
    let ranks = r["ranks"].as_array().unwrap();
    assert_eq!(ranks.len(), dp as usize, "{r}");
    for (i, k) in ranks.iter().enumerate() {
        assert_eq!(k["dp_rank"], json!(i), "{k}");
        assert_eq!(k["kv_events"]["result"], "flowing", "rank {i}: {k}");
        assert!(k["probe_error"].is_null(), "rank {i}: {k}");
        assert!(k["server_ttft_ms"].as_f64().is_some(), "rank {i}: {k}");
    }
}

/// On the way out, even after a failed assertion: each worker's registration put back as it
/// was (plain HTTP/1.1 on a blocking socket: a `Drop` cannot await).
struct Restore<'a> {
    stack: &'a Stack,
    originals: Vec<(u64, Value)>,
}

fn raw(hostport: &str, method: &str, path: &str, body: &str) {
    use std::io::{Read, Write};
    if let Ok(mut c) = std::net::TcpStream::connect(hostport) {
        let _ = write!(
            c,
            "{method} {path} HTTP/1.1\r\nHost: {hostport}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        let _ = c.read_to_end(&mut Vec::new());
    }
}

impl Drop for Restore<'_> {
    fn drop(&mut self) {
        let hostport = self.stack.select.trim_start_matches("http://").to_string();
        for (id, rec) in &self.originals {
            let mut rec = rec.clone();
            if let Some(o) = rec.as_object_mut() {
                o.remove("lifecycle");
                o.remove("not_schedulable_reasons");
                o.retain(|_, v| !v.is_null());
            }
            raw(&hostport, "DELETE", &format!("/workers/{id}"), "");
            raw(&hostport, "POST", "/workers", &rec.to_string());
        }
    }
}

/// The whole sequence on one stack; the DP=4 worker is made wrong in each way, then put back.
pub async fn every_rank(stack: &Stack) {
    let t = table(stack);
    let (Some(dp2), Some(dp4)) = (with_dp(&t, 2), with_dp(&t, 4)) else {
        panic!(
            "the dp stack needs a data-parallel-size-2 and -4 worker (scripts/test.sh phase \
             2b): {t:?}"
        );
    };
    let id4 = dp4["worker_id"].as_u64().unwrap();
    let id2 = dp2["worker_id"].as_u64().unwrap();
    let kv4 = dp4["kv_events_port"].as_u64().unwrap();
    let m4 = dp4["model"].as_str().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let plan = plan(dir.path());
    let original4 = record(stack, id4).await;
    let original2 = record(stack, id2).await;
    let _restore = Restore {
        stack,
        originals: vec![(id4, original4.clone()), (id2, original2.clone())],
    };

    // 1. Healthy: every rank of both data-parallel workers primed, seen, probed.
    let out = preflight(stack, &plan, &["--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_every_rank_checked(&report, id4, 4);
    assert_every_rank_checked(&report, id2, 2);
    let table_out = preflight(stack, &plan, &[]);
    let s = String::from_utf8_lossy(&table_out.stdout).to_string();
    assert!(s.contains("rank 3"), "per-rank lines: {s}");

    // 2. Registered the way a one-endpoint preflight used to (rank 0 only): named.
    let mut rank0 = original4.clone();
    rank0["data_parallel_size"] = json!(1);
    rank0["kv_events_endpoints"] = json!({"0": format!("tcp://127.0.0.1:{kv4}")});
    reregister(stack, id4, rank0).await;
    let out = preflight(stack, &plan, &[]);
    let s = text(&out);
    assert_eq!(out.status.code(), Some(1), "{s}");
    assert!(
        s.contains(&format!(
            "worker {id4} ({m4}) is registered with data-parallel ranks [0] but the \
             frontend routes ranks [0, 1, 2, 3]"
        )),
        "{s}"
    );

    // 3. Unregistered, no endpoint given: the exact argument it needs, ranks counted.
    stack.sel_delete(&format!("/workers/{id4}")).await;
    let out = preflight(stack, &plan, &[]);
    let s = text(&out);
    assert_eq!(out.status.code(), Some(1), "{s}");
    assert!(
        s.contains(&format!(
            "--kv-events {id4}=tcp://WORKER_HOST:KV_PORT-KV_PORT+3"
        )),
        "{s}"
    );

    // 4. One endpoint for four ranks: refused, naming the ranks.
    let one = format!("{id4}=tcp://127.0.0.1:{kv4}");
    let out = preflight(stack, &plan, &["--kv-events", &one]);
    let s = text(&out);
    assert_eq!(out.status.code(), Some(1), "{s}");
    assert!(
        s.contains("has 4 data-parallel rank(s) [0, 1, 2, 3] but 1 KV-event endpoint(s)"),
        "{s}"
    );

    // 5. A port range: registered with every rank, each checked.
    let range = format!("{id4}=tcp://127.0.0.1:{kv4}-{}", kv4 + 3);
    let out = preflight(stack, &plan, &["--kv-events", &range, "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(row(&report, id4)["registered_now"], true);
    assert_every_rank_checked(&report, id4, 4);
    let now = record(stack, id4).await;
    assert_eq!(now["data_parallel_size"], 4, "{now}");
    for r in 0..4u64 {
        assert_eq!(
            now["kv_events_endpoints"][r.to_string()],
            json!(format!("tcp://127.0.0.1:{}", kv4 + r)),
            "{now}"
        );
    }

    // 6. Rank 2's endpoint wrong (nothing publishes there): K would read 0 on rank 2 only.
    let mut wrong = now.clone();
    wrong["kv_events_endpoints"]["2"] = json!("tcp://127.0.0.1:9");
    reregister(stack, id4, wrong).await;
    let out = preflight(stack, &plan, &["--json"]);
    reregister(stack, id4, original4.clone()).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let problems = report["problems"].to_string();
    assert!(
        problems.contains(&format!(
            "worker {id4} ({m4}) rank 2: KV events are not reaching the selection service"
        )),
        "{problems}"
    );
    for r in [0, 1, 3] {
        assert!(
            !problems.contains(&format!("worker {id4} ({m4}) rank {r}:")),
            "only rank 2 is wrong: {problems}"
        );
    }

    // 7. A deployment description (system URLs and KV-event ports, no ids): both data-parallel
    //    workers registered from it.
    let desc = dir.path().join("deployment.toml");
    let mut d = String::from("[deployment]\ngpu = \"none (mocker)\"\n");
    for w in [&dp2, &dp4] {
        let kv = w["kv_events_port"].as_u64().unwrap();
        let n = w["data_parallel_size"].as_u64().unwrap();
        d += &format!(
            "[[workers]]\nsystem_url = \"http://127.0.0.1:{}\"\nkv_events = \
             \"tcp://127.0.0.1:{kv}-{}\"\nmodel = \"{}\"\ngpus_per_rank = 1\n",
            w["system_port"].as_u64().unwrap(),
            kv + n - 1,
            w["model"].as_str().unwrap()
        );
    }
    std::fs::write(&desc, d).unwrap();
    stack.sel_delete(&format!("/workers/{id4}")).await;
    stack.sel_delete(&format!("/workers/{id2}")).await;
    let out = preflight(
        stack,
        &plan,
        &["--describe", desc.to_str().unwrap(), "--json"],
    );
    let after4 = record(stack, id4).await;
    let after2 = record(stack, id2).await;
    reregister(stack, id4, original4).await;
    reregister(stack, id2, original2).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_every_rank_checked(&report, id4, 4);
    assert_every_rank_checked(&report, id2, 2);
    assert_eq!(after4["data_parallel_size"], 4);
    assert_eq!(after2["data_parallel_size"], 2);

    // Back to fit.
    let out = preflight(stack, &plan, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    stack
        .assert_loads_zero("after the data-parallel preflight")
        .await;
}

/// The launcher's environment for this stack, rebuilt from its `workers.json` and URLs (the
/// test's own environment may name another stack's ports).
fn launcher_env(stack: &Stack) -> Vec<(String, String)> {
    let all: Vec<Value> =
        serde_json::from_str(&std::fs::read_to_string(stack.run_dir.join("workers.json")).unwrap())
            .unwrap();
    let port = |url: &str| url.rsplit(':').next().unwrap().to_string();
    let rows: Vec<String> = all
        .iter()
        .map(|w| {
            format!(
                "{} {} {} {} {} {} {}",
                w["name"].as_str().unwrap(),
                w["model"].as_str().unwrap(),
                w["speedup"],
                w["total_kv_blocks"],
                w["max_num_batched_tokens"],
                w["data_parallel_size"],
                w["block_size"]
            )
        })
        .collect();
    vec![
        ("RUN_DIR".into(), stack.run_dir.display().to_string()),
        ("FRONTEND_PORT".into(), port(&stack.frontend)),
        ("SELECT_PORT".into(), port(&stack.select)),
        (
            "WORKER_SYS_PORT_BASE".into(),
            all[0]["system_port"].to_string(),
        ),
        (
            "ZMQ_KV_PORT_BASE".into(),
            all[0]["kv_events_port"].to_string(),
        ),
        ("TOPOLOGY".into(), "dp64".into()),
        ("WORKERS".into(), rows.join("\n")),
    ]
}

fn launcher(stack: &Stack, extra: &[(&str, &str)], args: &[&str]) -> Output {
    let mut c = Command::new(crate::stack::repo_root().join("scripts/dynamo-local.sh"));
    c.args(args);
    for (k, v) in launcher_env(stack) {
        c.env(k, v);
    }
    for (k, v) in extra {
        c.env(k, v);
    }
    c.output().unwrap()
}

/// `preflight --wait` against a data-parallel worker that is still starting: it prints what it
/// waits for, then registers the new instance with every rank from a `--describe` file (no id
/// copied) and checks them all. The worker is started without registration, as a node's
/// operator would start it.
pub async fn waits_for_a_starting_worker(stack: &Stack) {
    let t = table(stack);
    let Some(dp4) = with_dp(&t, 4) else {
        panic!("the dp stack needs a data-parallel-size-4 worker: {t:?}");
    };
    let name = dp4["name"].as_str().unwrap().to_string();
    let old = dp4["worker_id"].as_u64().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let plan = plan(dir.path());
    let kv = dp4["kv_events_port"].as_u64().unwrap();
    let desc = dir.path().join("deployment.toml");
    std::fs::write(
        &desc,
        format!(
            "[[workers]]\nsystem_url = \"http://127.0.0.1:{}\"\nkv_events = \
             \"tcp://127.0.0.1:{kv}-{}\"\n",
            dp4["system_port"].as_u64().unwrap(),
            kv + 3
        ),
    )
    .unwrap();

    let out = launcher(stack, &[], &["kill-worker", &name]);
    assert!(out.status.success(), "{}", text(&out));
    stack.sel_delete(&format!("/workers/{old}")).await;
    // Started a moment after the preflight, without registration: the preflight must wait for
    // the frontend to drop the dead instance and list the new one with its four ranks.
    let starter = {
        let env = launcher_env(stack);
        let name = name.clone();
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(500));
            let mut c = Command::new(crate::stack::repo_root().join("scripts/dynamo-local.sh"));
            c.args(["start-worker", &name])
                .env("UNREGISTERED_WORKERS", &name);
            for (k, v) in env {
                c.env(k, v);
            }
            c.output().unwrap()
        })
    };
    let out = preflight(
        stack,
        &plan,
        &[
            "--wait",
            "90s",
            "--describe",
            desc.to_str().unwrap(),
            "--json",
        ],
    );
    let started = starter.join().unwrap();
    assert!(started.status.success(), "{}", text(&started));
    let s = text(&out);
    assert_eq!(out.status.code(), Some(0), "{s}");
    assert!(
        s.contains("preflight: waiting"),
        "it says what it waits for: {s}"
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let new = table(stack)
        .into_iter()
        .find(|w| w["name"] == name.as_str())
        .unwrap()["worker_id"]
        .as_u64()
        .unwrap();
    assert_ne!(new, old);
    assert_eq!(row(&report, new)["registered_now"], true, "{report}");
    assert_every_rank_checked(&report, new, 4);
    assert!(
        report["workers"]
            .as_array()
            .unwrap()
            .iter()
            .all(|w| w["worker_id"].as_u64() != Some(old)),
        "the dead instance is gone from the table: {report}"
    );
    stack.assert_loads_zero("after the readiness wait").await;
}
