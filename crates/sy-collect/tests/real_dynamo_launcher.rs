//! Every verb of `scripts/dynamo-local.sh`, exercised for real (issue 11, deliver 4): `install` as a
//! no-op on the cached venv, `start`, a second `start` refused, `status`, `env`, `restart-worker` on the
//! FIRST row and on a LATER row of the worker table (a data-parallel-size-2 row, so the per-rank
//! KV-event ports of a later row are recomputed too), `register` (a deleted registration comes back;
//! a second `register` changes nothing), and `stop` (every recorded process gone, `status` says so).
//!
//! The verbs that start and stop a whole stack run on a private two-row stack of their own (its own
//! run directory and ports, below), so the stack the other real-Dynamo tests share is left exactly as
//! it was. The test still takes that stack's lock (one real-Dynamo test at a time: CPU is shared) and
//! is skipped or required like the others (`SY_REQUIRE_DYNAMO=1`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "real_dynamo/stack.rs"]
#[allow(dead_code)]
mod stack;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::Value;
use stack::{Stack, repo_root};

/// The private stack's ports: away from the CI stack (28000/28092/28100+/28200+) and the dp64 stack
/// (29500+). Overridable (`SY_TEST_LAUNCHER_PORT_BASE`) when something else listens there.
fn port_base() -> u16 {
    std::env::var("SY_TEST_LAUNCHER_PORT_BASE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(28300)
}

/// Row 0: one efficient worker; row 1: a capable worker with data-parallel size 2. Small KV pools:
/// nothing is served that needs more.
const WORKERS: &str = "efficient-w0 efficient 4 256 1024 1\ncapable-dp capable 1 256 1024 2";

/// The private stack: `scripts/dynamo-local.sh` with this run directory, table and ports, whatever
/// the calling environment (scripts/test.sh exports the CI stack's ports) says.
struct Private {
    run_dir: PathBuf,
    base: u16,
    stopped: bool,
}

impl Private {
    fn frontend(&self) -> String {
        format!("http://127.0.0.1:{}", self.base)
    }

    fn select(&self) -> String {
        format!("http://127.0.0.1:{}", self.base + 92)
    }

    fn run(&self, args: &[&str]) -> Output {
        self.run_env(args, &[])
    }

    /// `run` with extra environment variables (set after the ones the private stack clears).
    fn run_env(&self, args: &[&str], extra: &[(&str, &str)]) -> Output {
        let b = self.base;
        let mut cmd = Command::new(repo_root().join("scripts/dynamo-local.sh"));
        cmd.args(args)
            .env("RUN_DIR", &self.run_dir)
            .env("FRONTEND_PORT", b.to_string())
            .env("SELECT_PORT", (b + 92).to_string())
            .env("WORKER_SYS_PORT_BASE", (b + 100).to_string())
            .env("ZMQ_KV_PORT_BASE", (b + 150).to_string())
            .env("WORKERS", WORKERS)
            .env("BLOCK_SIZE", "16")
            .env("TOPOLOGY", "default")
            .env_remove("NO_CAPACITY_WORKERS")
            .env_remove("NO_KV_EVENTS_WORKERS")
            .env_remove("UNREGISTERED_WORKERS")
            .env_remove("FRONTEND_EXTRA_ARGS")
            .envs(extra.iter().copied());
        cmd.output().expect("run scripts/dynamo-local.sh")
    }

    /// Runs a verb and checks its exit code; returns stdout and stderr.
    fn verb(&self, args: &[&str], want: i32) -> String {
        self.verb_env(args, &[], want)
    }

    /// `verb` with extra environment variables.
    fn verb_env(&self, args: &[&str], extra: &[(&str, &str)], want: i32) -> String {
        let out = self.run_env(args, extra);
        let (so, se) = (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        );
        assert_eq!(
            out.status.code(),
            Some(want),
            "scripts/dynamo-local.sh {args:?}: exit {:?}\nstdout:\n{so}\nstderr:\n{se}",
            out.status.code()
        );
        so + &se
    }

    fn pids(&self) -> Vec<(String, u32)> {
        std::fs::read_to_string(self.run_dir.join("pids"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                let (n, p) = l.split_once(' ')?;
                Some((n.to_owned(), p.trim().parse().ok()?))
            })
            .collect()
    }

    /// The recorded PID of process NAME (the newest line for it).
    fn pid(&self, name: &str) -> u32 {
        let pids = self.pids();
        let found = pids.iter().rev().find(|(n, _)| n == name);
        found
            .map(|x| x.1)
            .unwrap_or_else(|| panic!("no pid for {name}: {pids:?}"))
    }

    fn table(&self) -> Vec<Value> {
        let text =
            std::fs::read_to_string(self.run_dir.join("workers.json")).expect("workers.json");
        serde_json::from_str::<Vec<Value>>(&text).expect("parse workers.json")
    }

    fn worker_id(&self, name: &str) -> u64 {
        self.table()
            .iter()
            .find(|w| w["name"] == name && w["running"] == true)
            .and_then(|w| w["worker_id"].as_u64())
            .unwrap_or_else(|| panic!("{name} not running in workers.json: {:?}", self.table()))
    }
}

impl Drop for Private {
    fn drop(&mut self) {
        if !self.stopped {
            let _ = self.run(&["stop"]);
        }
    }
}

fn alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
        && std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| !s.contains(") Z "))
            .unwrap_or(false)
}

async fn get_json(http: &reqwest::Client, url: &str) -> Value {
    let resp = http
        .get(url)
        .send()
        .await
        .unwrap_or_else(|e| panic!("{url}: {e}"));
    assert!(resp.status().is_success(), "{url}: HTTP {}", resp.status());
    resp.json().await.unwrap_or_else(|e| panic!("{url}: {e}"))
}

/// Worker ids registered in the selection service, with their data-parallel size.
async fn registered(http: &reqwest::Client, select: &str) -> Vec<(u64, u64)> {
    let v = get_json(http, &format!("{select}/workers")).await;
    let mut ids: Vec<(u64, u64)> = v
        .as_array()
        .expect("/workers is an array")
        .iter()
        .map(|w| {
            (
                w["worker_id"].as_u64().unwrap(),
                w["data_parallel_size"].as_u64().unwrap_or(1),
            )
        })
        .collect();
    ids.sort_unstable();
    ids
}

/// Instance ids of `generate` endpoints the frontend lists in /health.
async fn frontend_ids(http: &reqwest::Client, frontend: &str) -> Vec<u64> {
    let v = get_json(http, &format!("{frontend}/health")).await;
    v["instances"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|i| i["endpoint"] == "generate")
                .filter_map(|i| i["instance_id"].as_u64())
                .collect()
        })
        .unwrap_or_default()
}

/// A completion pinned to `worker` (and `rank`) is served there.
/// `check_rank`: the worker has several ranks, so the answer must name the pinned one.
async fn served_on(
    http: &reqwest::Client,
    frontend: &str,
    model: &str,
    (worker, rank): (u64, u64),
    check_rank: bool,
) {
    let body = serde_json::json!({"model": model, "prompt": stack::fresh_tokens(40), "max_tokens": 2,
        "nvext": {"backend_instance_id": worker, "dp_rank": rank, "extra_fields": ["worker_id"]}});
    let resp = http
        .post(format!("{frontend}/v1/completions"))
        .json(&body)
        .send()
        .await
        .unwrap_or_else(|e| panic!("completion on {model}: {e}"));
    assert_eq!(resp.status().as_u16(), 200, "completion pinned to {worker}");
    let v: Value = resp.json().await.unwrap();
    assert_eq!(
        v["nvext"]["worker_id"]["decode_worker_id"].as_u64(),
        Some(worker),
        "{v}"
    );
    if check_rank {
        assert_eq!(
            v["nvext"]["worker_id"]["decode_dp_rank"].as_u64(),
            Some(rank),
            "{v}"
        );
    }
}

/// restart-worker NAME: a new instance id, registered (the old one deleted), listed by the frontend,
/// serving pinned requests; the other row keeps its id.
async fn restart_checked(p: &Private, http: &reqwest::Client, name: &str, other: &str) {
    let (old, other_id) = (p.worker_id(name), p.worker_id(other));
    let out = p.verb(&["restart-worker", name], 0);
    assert!(out.contains(&format!("{name} back in")), "{out}");
    let new = p.worker_id(name);
    assert_ne!(new, old, "{name}: a restarted worker has a new instance id");
    assert_eq!(p.worker_id(other), other_id, "{other} untouched");
    let ids: Vec<u64> = registered(http, &p.select())
        .await
        .iter()
        .map(|w| w.0)
        .collect();
    assert!(
        ids.contains(&new) && !ids.contains(&old) && ids.contains(&other_id),
        "{name}: selection service lists {ids:?} (old {old}, new {new})"
    );
    let listed = frontend_ids(http, &p.frontend()).await;
    assert!(
        listed.contains(&new),
        "frontend lists {listed:?}, not {new}"
    );
    let (model, ranks) = if name == "capable-dp" {
        ("capable", 2)
    } else {
        ("efficient", 1)
    };
    for rank in 0..ranks {
        served_on(http, &p.frontend(), model, (new, rank), ranks > 1).await;
    }
}

/// restart-frontend: a frontend that cannot start is reported at once, with its log, not after the
/// readiness timeout; a crash (`--kill`) with a stream open and a drain (TERM) both bring back a
/// frontend that serves both models on the same port, and the old process is gone, threads and all.
async fn frontend_restarts_checked(p: &Private, http: &reqwest::Client) {
    let t0 = Instant::now();
    let out = p.verb_env(
        &["restart-frontend", "--kill"],
        &[
            ("FRONTEND_EXTRA_ARGS", "--no-such-flag"),
            ("READY_TIMEOUT", "60"),
        ],
        1,
    );
    assert!(
        t0.elapsed() < Duration::from_secs(30),
        "a dead frontend took {:?} to report: {out}",
        t0.elapsed()
    );
    assert!(out.contains("exited while waiting"), "{out}");
    assert!(out.contains("no-such-flag"), "the frontend's log: {out}");

    for args in [
        &["restart-frontend", "--kill"][..],
        &["restart-frontend"][..],
    ] {
        let old = p.pid("frontend");
        // An open stream when the frontend goes: the port is then held until every thread exits.
        let stream = http
            .post(format!("{}/v1/completions", p.frontend()))
            .json(
                &serde_json::json!({"model": "capable", "prompt": stack::fresh_tokens(40),
                                      "max_tokens": 2000, "stream": true}),
            )
            .send();
        let stream = tokio::spawn(stream);
        tokio::time::sleep(Duration::from_millis(300)).await;
        let out = p.verb(args, 0);
        assert!(out.contains("frontend back in"), "{args:?}: {out}");
        assert!(
            !alive(old),
            "{args:?}: the old frontend ({old}) is still alive"
        );
        assert_ne!(p.pid("frontend"), old, "{args:?}");
        for (name, model) in [("efficient-w0", "efficient"), ("capable-dp", "capable")] {
            served_on(http, &p.frontend(), model, (p.worker_id(name), 0), false).await;
        }
        stream.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_dynamo_launcher_every_verb() {
    let Some(shared) = Stack::acquire("real_dynamo_launcher_every_verb").await else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let mut p = Private {
        run_dir: tmp.path().join("run"),
        base: port_base(),
        stopped: true,
    };
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();

    // install: the venv the stacks run from is cached, so this is a no-op that says so.
    let out = p.verb(&["install"], 0);
    assert!(out.contains("already installed"), "{out}");

    // status before start: "not started", exit 3.
    let out = p.verb(&["status"], 3);
    assert!(out.contains("not started"), "{out}");

    // start: every process recorded, both models served, both rows registered with their DP size.
    p.stopped = false;
    let out = p.verb(&["start"], 0);
    assert!(out.contains("up in"), "{out}");
    let names: Vec<String> = p.pids().into_iter().map(|x| x.0).collect();
    assert_eq!(
        names,
        ["frontend", "select_service", "efficient-w0", "capable-dp"],
        "pids file"
    );
    let stack_env = std::fs::read_to_string(p.run_dir.join("stack.env")).unwrap();
    assert!(
        stack_env.contains(&format!("SY_DYNAMO_FRONTEND={}", p.frontend())),
        "{stack_env}"
    );
    let (w0, dp) = (p.worker_id("efficient-w0"), p.worker_id("capable-dp"));
    let mut want = vec![(w0, 1), (dp, 2)];
    want.sort_unstable();
    assert_eq!(registered(&http, &p.select()).await, want);

    // A second start while it runs is refused and changes nothing.
    let out = p.verb(&["start"], 1);
    assert!(out.contains("already running"), "{out}");
    assert_eq!(p.worker_id("efficient-w0"), w0);

    // status: every process alive, exit 0; env: the eval-able URLs of this stack.
    let out = p.verb(&["status"], 0);
    for n in ["frontend", "select_service", "efficient-w0", "capable-dp"] {
        assert!(
            out.lines().any(|l| l.starts_with(n) && l.contains("alive")),
            "{n}: {out}"
        );
    }
    assert!(!out.contains("DEAD"), "{out}");
    let out = p.verb(&["env"], 0);
    for line in [
        format!("export SY_DYNAMO_FRONTEND={}", p.frontend()),
        format!("export SY_DYNAMO_SELECT={}", p.select()),
        format!("export SY_DYNAMO_RUN_DIR={}", p.run_dir.display()),
    ] {
        assert!(out.lines().any(|l| l == line), "{line} not in:\n{out}");
    }

    // restart-worker on the first row, then on a later (data-parallel) row.
    restart_checked(&p, &http, "efficient-w0", "capable-dp").await;
    restart_checked(&p, &http, "capable-dp", "efficient-w0").await;

    frontend_restarts_checked(&p, &http).await;

    // register: a registration deleted behind the launcher's back comes back; a second register is a
    // no-op (a live worker is never re-registered).
    let gone = p.worker_id("capable-dp");
    let st = http
        .delete(format!("{}/workers/{gone}", p.select()))
        .send()
        .await
        .unwrap()
        .status();
    assert!(st.is_success(), "DELETE /workers/{gone}: {st}");
    assert!(
        !registered(&http, &p.select())
            .await
            .iter()
            .any(|w| w.0 == gone)
    );
    let out = p.verb(&["register"], 0);
    assert!(out.contains("registered capable-dp"), "{out}");
    assert!(registered(&http, &p.select()).await.contains(&(gone, 2)));
    let out = p.verb(&["register"], 0);
    assert!(
        !out.contains("registered") && !out.contains("deleted"),
        "{out}"
    );

    // stop: every recorded process gone, the pids file and stack.env removed, status says so.
    let pids = p.pids();
    let out = p.verb(&["stop"], 0);
    p.stopped = true;
    for (name, pid) in &pids {
        assert!(!alive(*pid), "{name} ({pid}) still alive after stop: {out}");
    }
    assert!(!p.run_dir.join("pids").exists());
    assert!(!p.run_dir.join("stack.env").exists());
    let out = p.verb(&["status"], 3);
    assert!(out.contains("not started"), "{out}");

    // The shared stack was not touched.
    shared.wait_healthy().await;
    shared.assert_loads_zero("after the launcher test").await;
}
