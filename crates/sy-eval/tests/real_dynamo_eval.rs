//! sy-eval against a real NVIDIA Dynamo 1.6.1 stack (scripts/dynamo-local.sh) on 127.0.0.1: a short
//! run (data/eval/dynamo-smoke.toml) completes, every reservation is freed (each block's ledger is
//! empty, `/loads` shows nothing booked, checked again here with an independent client) and every
//! turn record is complete.
//!
//! The stack is found like the other real-Dynamo tests (crates/sy-collect/tests/real_dynamo/stack.rs):
//! `SY_DYNAMO_FRONTEND`, `SY_DYNAMO_SELECT`, `SY_DYNAMO_RUN_DIR`; without them the test says it skipped,
//! unless `SY_REQUIRE_DYNAMO=1`. It holds `$SY_DYNAMO_RUN_DIR/tests.lock` and appends its name to
//! `$SY_DYNAMO_TEST_LOG`.

// End-to-end scenarios read top to bottom: the 120-line limit (clippy.toml) is for library and
// binary code.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn env_nonempty(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn booked(select: &str) -> (u64, u64) {
    let loads: Value = http::blocking_get_json(&format!("{select}/loads"));
    let mut r = 0;
    let mut p = 0;
    for m in loads.as_array().unwrap() {
        for l in m["loads"].as_array().unwrap() {
            r += l["active_requests"].as_u64().unwrap_or(0);
            p += l["potential_prefill_tokens"].as_u64().unwrap_or(0);
        }
    }
    (r, p)
}

/// A tiny blocking GET through reqwest's async client on a private runtime.
mod http {
    pub fn blocking_get_json(url: &str) -> serde_json::Value {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            reqwest::Client::new()
                .get(url)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap()
        })
    }
}

#[test]
fn real_dynamo_eval_short_run_frees_every_reservation_and_records_every_turn() {
    let test = "real_dynamo_eval_short_run_frees_every_reservation_and_records_every_turn";
    let (Some(frontend), Some(select), Some(run_dir)) = (
        env_nonempty("SY_DYNAMO_FRONTEND"),
        env_nonempty("SY_DYNAMO_SELECT"),
        env_nonempty("SY_DYNAMO_RUN_DIR"),
    ) else {
        if env_nonempty("SY_REQUIRE_DYNAMO").as_deref() == Some("1") {
            panic!(
                "{test}: SY_REQUIRE_DYNAMO=1 but SY_DYNAMO_FRONTEND / SY_DYNAMO_SELECT / SY_DYNAMO_RUN_DIR are not set"
            );
        }
        eprintln!(
            "{test}: SKIPPED: no real Dynamo stack (SY_DYNAMO_FRONTEND unset; see scripts/test.sh)"
        );
        return;
    };
    for url in [&frontend, &select] {
        assert!(
            url.starts_with("http://127.0.0.1:") || url.starts_with("http://localhost:"),
            "{url}"
        );
    }
    let lock = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(Path::new(&run_dir).join("tests.lock"))
        .unwrap();
    lock.lock().unwrap();
    if let Some(log) = env_nonempty("SY_DYNAMO_TEST_LOG") {
        let mut f = OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .unwrap();
        writeln!(f, "{test}").unwrap();
    }
    eprintln!("{test}: running against real Dynamo at {frontend} / {select}");

    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_sy-eval"))
        .args([
            "--plan",
            &repo()
                .join("data/eval/dynamo-smoke.toml")
                .display()
                .to_string(),
        ])
        .args([
            "--bundle",
            &repo().join("data/eval/bundle.json").display().to_string(),
        ])
        .args(["--run-dir", &dir.path().display().to_string()])
        .args([
            "--target",
            "dynamo",
            "--frontend-url",
            &frontend,
            "--selection-url",
            &select,
        ])
        .args(["--json", "--no-progress"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "sy-eval --target dynamo failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    let c = &summary["comparison"];
    let mut turns = 0;
    for entry in std::fs::read_dir(dir.path().join("blocks")).unwrap() {
        let b: Value =
            serde_json::from_str(&std::fs::read_to_string(entry.unwrap().path()).unwrap()).unwrap();
        assert_eq!(
            b["outstanding_reservations"],
            serde_json::json!([]),
            "{}",
            b["variant"]
        );
        assert_eq!(b["loads_zero_at_end"], true, "{}", b["variant"]);
        assert!(
            b["start_state"]
                .as_str()
                .unwrap()
                .contains("nothing booked at start: true")
        );
        assert_eq!(b["sessions"].as_array().unwrap().len(), 3);
        for s in b["sessions"].as_array().unwrap() {
            assert_eq!(s["ok"], true, "{s}");
            assert!(s["completion_ms"].as_f64().unwrap() > 0.0);
        }
        for t in b["turns"].as_array().unwrap() {
            turns += 1;
            assert!(t["error"].is_null(), "{t}");
            for field in [
                "ttft_ms",
                "e2e_ms",
                "reserved_worker",
                "served_worker",
                "prompt_tokens",
                "uncached_input_tokens",
                "decision",
                "efficient",
                "capable",
                "observe_ms",
            ] {
                assert!(!t[field].is_null(), "turn without {field}: {t}");
            }
            assert_eq!(
                t["reserved_worker"], t["served_worker"],
                "served where reserved: {t}"
            );
            assert!(t["routing_overhead_ms"].as_f64().unwrap() > 0.0);
            assert!(t["ttft_ms"].as_f64().unwrap() <= t["e2e_ms"].as_f64().unwrap());
            let obs = &t["efficient"];
            for f in ["n", "k", "r", "prefill_capacity_tokens", "observed_at_ms"] {
                assert!(!obs[f].is_null(), "efficient observation without {f}: {t}");
            }
        }
    }
    assert_eq!(turns, 2 * 3 * 3, "2 variants × 3 sessions × 3 turns");
    for v in c["variants"].as_array().unwrap() {
        assert!(
            v["routing_overhead_ms"]["p50"].as_f64().unwrap() > 0.0,
            "{v}"
        );
        assert_eq!(v["turns_failed"], 0);
    }
    assert_eq!(booked(&select), (0, 0), "nothing left booked after the run");
}
