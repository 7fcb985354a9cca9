//! The bad-input corpus: plans, records, fit files, margins, splits, bundles, observations and
//! command-line misuse, as a careless or hostile user would give them to the real binaries.
//!
//! Every case runs in a fresh copy of one good run directory (records, manifest, splits, fit,
//! margins, selection, bundles: made once by the real tools from the committed demo dataset),
//! breaks one thing, runs one tool and asserts: the exit code (2 bad input, 1 runtime
//! failure), that stderr names the file and the field, row or flag, that nothing panicked or
//! hung (a 60 s watchdog), and that every file of the run directory is byte-identical
//! afterwards (hashed before and after: no partial or overwritten output).
// End-to-end scenarios read top to bottom: the 120-line limit (clippy.toml) is for library and
// binary code.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

mod common;
use common::{bin, repo};

use serde_json::{Value, json};
use sy_selector::Bundle;

/// Runs `tool` with `args` in `cwd`, killed after 60 s (a hang is a failure).
fn run_tool(tool: &str, args: &[String], cwd: &Path) -> (Option<i32>, String, bool) {
    let mut child = Command::new(bin(tool))
        .args(args)
        .current_dir(cwd)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut stderr, &mut s).unwrap();
        s
    });
    let started = Instant::now();
    let mut hung = false;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > Duration::from_secs(60) {
            hung = true;
            child.kill().unwrap();
            break child.wait().unwrap();
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    (status.code(), reader.join().unwrap(), hung)
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dest = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &dest);
        } else {
            std::fs::copy(e.path(), dest).unwrap();
        }
    }
}

/// Every file under `dir` (relative path → SHA-256; directories as entries too).
fn snapshot(dir: &Path) -> BTreeMap<String, String> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let e = e.unwrap();
            let rel = e.path().strip_prefix(root).unwrap().display().to_string();
            if e.file_type().unwrap().is_dir() {
                out.insert(format!("{rel}/"), String::new());
                walk(root, &e.path(), out);
            } else {
                out.insert(rel, sy_cli::file_sha256(&e.path()).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// The good run directory every case starts from (made once per test process).
fn golden() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let root = tempfile::tempdir().unwrap().keep();
        let run = root.join("run");
        std::fs::create_dir_all(&run).unwrap();
        for f in ["records.parquet", "manifest.json"] {
            std::fs::copy(repo().join("data/demo").join(f), run.join(f)).unwrap();
        }
        let common = ["--run-dir", "run", "--no-progress", "-q"].map(String::from);
        for (tool, extra) in [
            ("sy-fit", vec!["--seed", "7", "--accept-failed-check"]),
            ("sy-margin", vec![]),
            ("sy-select", vec!["--no-report"]),
        ] {
            let mut args = common.to_vec();
            args.extend(extra.iter().map(|s| s.to_string()));
            let (code, err, _) = run_tool(tool, &args, &root);
            assert_eq!(code, Some(0), "{tool}: {err}");
        }
        // Side files the cases break: a JSONL copy of the records (not a name a run directory
        // is read by), an observation document and a plan.
        let loaded =
            sy_records::load_records(&[run.join("records.parquet")], &Default::default()).unwrap();
        sy_records::write_jsonl(&loaded.records[..400], &run.join("good.jsonl")).unwrap();
        std::fs::copy(
            repo().join("data/examples/observations.json"),
            run.join("obs.json"),
        )
        .unwrap();
        std::fs::write(run.join("plan.toml"), GOOD_PLAN).unwrap();
        root
    })
}

const GOOD_PLAN: &str = "seed = 1\n[qgrid]\nn = [64]\nf = [0.0]\nrepeats = 1\n";

type Setup = Box<dyn Fn(&Path) + Send + Sync>;

struct Case {
    name: String,
    tool: &'static str,
    args: Vec<String>,
    setup: Setup,
    code: i32,
    needles: Vec<String>,
}

fn case(
    name: impl Into<String>,
    tool: &'static str,
    args: &[&str],
    setup: Setup,
    code: i32,
    needles: &[&str],
) -> Case {
    Case {
        name: name.into(),
        tool,
        args: args.iter().map(|s| s.to_string()).collect(),
        setup,
        code,
        needles: needles.iter().map(|s| s.to_string()).collect(),
    }
}

fn nothing() -> Setup {
    Box::new(|_| {})
}

fn write(name: &'static str, text: impl Into<String>) -> Setup {
    let text = text.into();
    Box::new(move |run| {
        let p = run.join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, &text).unwrap();
    })
}

/// Rewrites JSON file `name` after `edit`.
fn edit_json(name: &'static str, edit: impl Fn(&mut Value) + Send + Sync + 'static) -> Setup {
    Box::new(move |run| {
        let p = run.join(name);
        let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        edit(&mut v);
        std::fs::write(&p, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
    })
}

/// Sets (or adds) the value at JSON pointer `ptr` of file `name`.
/// Puts a copy of run file `from` in place of `to` (a file of another kind where `to` belongs).
fn copy_file(from: &'static str, to: &'static str) -> Setup {
    Box::new(move |run| {
        std::fs::copy(run.join(from), run.join(to)).unwrap();
    })
}

fn set(name: &'static str, ptr: &'static str, value: Value) -> Setup {
    edit_json(name, move |v| {
        let (parent, key) = ptr.rsplit_once('/').unwrap();
        match v.pointer_mut(parent) {
            Some(Value::Object(map)) => {
                map.insert(key.to_string(), value.clone());
            }
            Some(Value::Array(items)) => items[key.parse::<usize>().unwrap()] = value.clone(),
            _ => panic!("{name}: no {parent}"),
        }
    })
}

/// Removes member `key` of the object at `ptr` of file `name`.
fn remove(name: &'static str, ptr: &'static str, key: &'static str) -> Setup {
    edit_json(name, move |v| {
        v.pointer_mut(ptr)
            .and_then(Value::as_object_mut)
            .unwrap()
            .remove(key);
    })
}

/// Edits bundle `name` and recomputes its content hash (so the parameter check is what fails).
fn edit_bundle(name: &'static str, edit: impl Fn(&mut Bundle) + Send + Sync + 'static) -> Setup {
    Box::new(move |run| {
        let p = run.join(name);
        let mut b: Bundle = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        edit(&mut b);
        b.content_hash = b.compute_hash().unwrap();
        std::fs::write(&p, serde_json::to_vec_pretty(&b).unwrap()).unwrap();
    })
}

/// Writes `bad.jsonl`: good.jsonl with line `line` (0-based) replaced by `edit` of its JSON.
fn jsonl_line(line: usize, edit: impl Fn(&mut Value) + Send + Sync + 'static) -> Setup {
    Box::new(move |run| {
        let text = std::fs::read_to_string(run.join("good.jsonl")).unwrap();
        let mut out = String::new();
        for (i, l) in text.lines().enumerate() {
            if i == line {
                let mut v: Value = serde_json::from_str(l).unwrap();
                edit(&mut v);
                out.push_str(&serde_json::to_string(&v).unwrap());
            } else {
                out.push_str(l);
            }
            out.push('\n');
        }
        std::fs::write(run.join("bad.jsonl"), out).unwrap();
    })
}

/// Writes `bad.jsonl` as good.jsonl transformed as text.
fn jsonl_text(edit: impl Fn(String) -> String + Send + Sync + 'static) -> Setup {
    Box::new(move |run| {
        let text = std::fs::read_to_string(run.join("good.jsonl")).unwrap();
        std::fs::write(run.join("bad.jsonl"), edit(text)).unwrap();
    })
}

/// The first load-phase line of good.jsonl.
fn first_load_line(run: &Path) -> usize {
    let text = std::fs::read_to_string(run.join("good.jsonl")).unwrap();
    text.lines()
        .position(|l| l.contains("\"phase\":\"load\""))
        .unwrap()
}

const COLLECT: &[&str] = &[
    "--plan",
    "run/plan.toml",
    "--run-dir",
    "run",
    "--target",
    "sim",
    "--no-progress",
];

fn plan_cases() -> Vec<Case> {
    let q = "[qgrid]\nn = [64]\nf = [0.0]\nrepeats = 1\n";
    let l = "[load]\nn = [64]\nf = [0.0]\nrepeats = 1\n";
    let table: Vec<(&str, String, &str)> = vec![
        ("near-duplicate f", "seed=1\n[load]\nn=[64]\nf=[0.0, 0.0004]\nrepeats=1\n".into(), "load.f[1]"),
        ("near-duplicate qgrid f", "seed=1\n[qgrid]\nn=[64]\nf=[0.5, 0.5001]\nrepeats=1\n".into(), "qgrid.f[1]"),
        ("duplicate f", "seed=1\n[qgrid]\nn=[64]\nf=[0.25, 0.25]\nrepeats=1\n".into(), "qgrid.f"),
        ("duplicate n", "seed=1\n[qgrid]\nn=[64, 64]\nf=[0.0]\nrepeats=1\n".into(), "qgrid.n"),
        ("repeats 1e9", "seed=1\n[qgrid]\nn=[64]\nf=[0.0]\nrepeats=1000000000\n".into(), "qgrid.repeats"),
        ("load repeats 1e9", "seed=1\n[load]\nn=[64]\nf=[0.0]\nrepeats=1000000000\n".into(), "load.repeats"),
        ("repeats 0", "seed=1\n[qgrid]\nn=[64]\nf=[0.0]\nrepeats=0\n".into(), "qgrid.repeats"),
        ("repeats negative", "seed=1\n[qgrid]\nn=[64]\nf=[0.0]\nrepeats=-1\n".into(), "repeats"),
        ("repeats float", "seed=1\n[qgrid]\nn=[64]\nf=[0.0]\nrepeats=1e9\n".into(), "repeats"),
        ("units over the limit", "seed=1\n[qgrid]\nn=[1,2,3,4,5,6,7,8,9,10,11]\nf=[0.0,0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9]\nrepeats=10000\n".into(), "qgrid.repeats"),
        ("prefill contention 100000", format!("seed=1\n{l}prefill_contention=[100000]\n"), "load.prefill_contention[0]"),
        ("decode contention 100000", format!("seed=1\n{l}decode_contention=[0, 100000]\n"), "load.decode_contention[1]"),
        ("busy requests 1e6", format!("seed=1\n{l}busy_capable=[true]\nbusy_capable_requests=1000000\n"), "load.busy_capable_requests"),
        ("streams beyond the fd limit", format!("seed=1\n{l}prefill_contention=[4000]\ndecode_contention=[4000]\nbackground_target=\"both\"\nprefill_prompt_tokens=8\ndecode_prompt_tokens=8\n"), "RLIMIT_NOFILE"),
        ("tokens in flight", format!("seed=1\n{l}prefill_contention=[4000]\nprefill_prompt_tokens=1000000\n"), "load.prefill_prompt_tokens"),
        ("max_tokens 4e9", format!("seed=1\n{q}[probe]\nmax_tokens=4000000000\n"), "probe.max_tokens"),
        ("max_tokens float", format!("seed=1\n{q}[probe]\nmax_tokens=4e9\n"), "max_tokens"),
        ("max_tokens 0", format!("seed=1\n{q}[probe]\nmax_tokens=0\n"), "probe.max_tokens"),
        ("n huge", "seed=1\n[qgrid]\nn=[99999999999]\nf=[0.0]\nrepeats=1\n".into(), "qgrid.n[0]"),
        ("n zero", "seed=1\n[qgrid]\nn=[0]\nf=[0.0]\nrepeats=1\n".into(), "qgrid.n[0]"),
        ("n negative", "seed=1\n[qgrid]\nn=[-5]\nf=[0.0]\nrepeats=1\n".into(), "n"),
        ("f above one", "seed=1\n[qgrid]\nn=[64]\nf=[1.5]\nrepeats=1\n".into(), "qgrid.f[0]"),
        ("f negative", "seed=1\n[load]\nn=[64]\nf=[-0.5]\nrepeats=1\n".into(), "load.f[0]"),
        ("f nan", "seed=1\n[qgrid]\nn=[64]\nf=[nan]\nrepeats=1\n".into(), "qgrid.f[0]"),
        ("f inf", "seed=1\n[qgrid]\nn=[64]\nf=[inf]\nrepeats=1\n".into(), "qgrid.f[0]"),
        ("empty n", "seed=1\n[qgrid]\nn=[]\nf=[0.0]\nrepeats=1\n".into(), "qgrid.n"),
        ("empty f", "seed=1\n[load]\nn=[64]\nf=[]\nrepeats=1\n".into(), "load.f"),
        ("no phase", "seed=1\n".into(), "qgrid/load"),
        ("no seed", q.to_string(), "seed"),
        ("unknown field", format!("seed=1\n{q}colour=\"red\"\n"), "colour"),
        ("unknown table", format!("seed=1\n{q}[extra]\na=1\n"), "extra"),
        ("settle one year", format!("seed=1\n{q}[probe]\nsettle_ms=31536000000\n"), "probe.settle_ms"),
        ("warmup one year", format!("seed=1\n{l}warmup_ms=31536000000\n"), "load.warmup_ms"),
        ("timeout zero", format!("seed=1\n{q}[target]\nconnect_timeout_ms=0\n"), "target.connect_timeout_ms"),
        ("request timeout huge", format!("seed=1\n{q}[target]\nrequest_timeout_ms=999999999999\n"), "target.request_timeout_ms"),
        ("first token beyond request", format!("seed=1\n{q}[target]\nfirst_token_timeout_ms=10\nrequest_timeout_ms=5\n"), "target.first_token_timeout_ms"),
        ("retries 11", format!("seed=1\n{q}[target]\nretries=11\n"), "target.retries"),
        ("backoff huge", format!("seed=1\n{q}[target]\nretry_backoff_ms=999999999999\n"), "target.retry_backoff_ms"),
        ("ftp url", format!("seed=1\n{q}[target]\nfrontend_url=\"ftp://x\"\n"), "target.frontend_url"),
        ("url without host", format!("seed=1\n{q}[target]\nselection_url=\"http://\"\n"), "target.selection_url"),
        ("empty bearer env", format!("seed=1\n{q}[target]\nbearer_token_env=\" \"\n"), "target.bearer_token_env"),
        ("same models", format!("seed=1\n{q}[models]\nefficient=\"m\"\ncapable=\"m\"\n"), "models.capable"),
        ("empty model", format!("seed=1\n{q}[models]\nefficient=\"\"\n"), "models.efficient"),
        ("vocab inverted", format!("seed=1\n{q}[prompt]\nvocab_min=10\nvocab_max=5\n"), "prompt.vocab_max"),
        ("vocab of one", format!("seed=1\n{q}[prompt]\nvocab_min=10\nvocab_max=11\n"), "prompt.vocab_max"),
        ("short >= long", format!("seed=1\n{l}short_output_tokens=300\n"), "load.long_output_tokens"),
        ("long output huge", format!("seed=1\n{l}long_output_tokens=99999999999\n"), "load.long_output_tokens"),
        ("prefill prompt huge", format!("seed=1\n{l}prefill_prompt_tokens=99999999999\n"), "load.prefill_prompt_tokens"),
        ("decode prompt zero", format!("seed=1\n{l}decode_prompt_tokens=0\n"), "load.decode_prompt_tokens"),
        ("empty prefill list", format!("seed=1\n{l}prefill_contention=[]\n"), "load.prefill_contention"),
        ("duplicate decode level", format!("seed=1\n{l}decode_contention=[2, 2]\n"), "load.decode_contention"),
        ("empty busy list", format!("seed=1\n{l}busy_capable=[]\n"), "load.busy_capable"),
        ("busy without requests", format!("seed=1\n{l}busy_capable=[true]\nbusy_capable_requests=0\n"), "load.busy_capable_requests"),
        ("bad background target", format!("seed=1\n{l}background_target=\"nobody\"\n"), "background_target"),
        ("not toml", "seed = = 1\n".into(), "plan.toml"),
        ("grid too large", "seed=1\n[load]\nn=[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30]\nf=[0.0,0.1,0.2,0.3,0.4,0.5,0.6,0.7,0.8,0.9]\nrepeats=1\nprefill_contention=[0,1,2,3,4,5,6,7,8,9]\ndecode_contention=[0,1,2,3,4,5,6,7,8,9]\nbusy_capable=[false,true]\n".into(), "load.n"),
    ];
    let mut cases: Vec<Case> = table
        .into_iter()
        .map(|(name, text, field)| {
            case(
                format!("plan: {name}"),
                "sy-collect",
                COLLECT,
                write("plan.toml", text),
                2,
                &["plan.toml", field],
            )
        })
        .collect();
    // The same bounds hold for a dry run, which never allocates per request.
    for (name, text, field) in [
        (
            "dry run repeats 1e9",
            "seed=1\n[qgrid]\nn=[64]\nf=[0.0]\nrepeats=1000000000\n",
            "qgrid.repeats",
        ),
        (
            "dry run near-duplicate f",
            "seed=1\n[qgrid]\nn=[64]\nf=[0.1, 0.1004]\nrepeats=1\n",
            "qgrid.f[1]",
        ),
        (
            "dry run contention",
            "seed=1\n[load]\nn=[64]\nf=[0.0]\nrepeats=1\nprefill_contention=[100000]\n",
            "load.prefill_contention[0]",
        ),
    ] {
        cases.push(case(
            format!("plan: {name}"),
            "sy-collect",
            &["--plan", "run/plan.toml", "--dry-run"],
            write("plan.toml", text),
            2,
            &["plan.toml", field],
        ));
    }
    cases
}

fn records_cases() -> Vec<Case> {
    let fit = |records: &'static str| -> Vec<&'static str> {
        vec![
            "--run-dir",
            "run",
            "--records",
            records,
            "--seed",
            "7",
            "--no-progress",
            "-q",
        ]
    };
    let mut cases = Vec::new();
    let field_edits: Vec<(&str, &str, Value, &str)> = vec![
        ("ttft negative", "ttft_ms", json!(-5.0), "ttft_ms"),
        ("ttft text", "ttft_ms", json!("fast"), "ttft_ms"),
        ("ttft missing on ok", "ttft_ms", Value::Null, "ttft_ms"),
        (
            "schema version 99",
            "schema_version",
            json!(99),
            "schema_version",
        ),
        (
            "schema version 0",
            "schema_version",
            json!(0),
            "schema_version",
        ),
        (
            "schema version text",
            "schema_version",
            json!("1"),
            "schema_version",
        ),
        ("unknown phase", "phase", json!("warmup"), "phase"),
        ("unknown role", "role", json!("both"), "role"),
        ("unknown status", "status", json!("maybe"), "status"),
        ("k greater than n", "k", json!(999_999_999u64), "k"),
        ("negative n", "n", json!(-1), "n"),
        ("fractional r", "r", json!(1.5), "r"),
        ("empty run id", "run_id", json!(""), "run_id"),
        (
            "empty condition id",
            "condition_id",
            json!(""),
            "condition_id",
        ),
        ("empty probe id", "probe_id", json!(""), "probe_id"),
        ("repeat negative", "repeat", json!(-1), "repeat"),
        ("planned_n text", "planned_n", json!("many"), "planned_n"),
        ("worker id float", "worker_id", json!(1.5), "worker_id"),
        (
            "unknown error class",
            "error_class",
            json!("gremlins"),
            "error_class",
        ),
    ];
    for (name, key, value, field) in field_edits {
        let key = key.to_string();
        cases.push(case(
            format!("records: {name}"),
            "sy-fit",
            &fit("run/bad.jsonl"),
            Box::new(move |run: &Path| {
                let line = first_load_line(run) + 2;
                let (key, value) = (key.clone(), value.clone());
                jsonl_line(line, move |v| {
                    v[&key] = value.clone();
                })(run);
            }),
            2,
            &["bad.jsonl", field],
        ));
    }
    for (name, setup, needles) in [
        (
            "unknown field",
            jsonl_line(3, |v| v["colour"] = json!("red")) as Setup,
            vec!["bad.jsonl", "colour"],
        ),
        (
            "missing field",
            jsonl_line(3, |v| {
                v.as_object_mut().unwrap().remove("role");
            }),
            vec!["bad.jsonl", "role"],
        ),
        (
            "corrupt middle line",
            jsonl_text(|t| {
                let mut lines: Vec<&str> = t.lines().collect();
                lines[5] = "{not json";
                lines.join("\n") + "\n"
            }),
            vec!["bad.jsonl", "row 6"],
        ),
        (
            "array line",
            jsonl_text(|t| {
                let mut lines: Vec<&str> = t.lines().collect();
                lines[7] = "[1, 2, 3]";
                lines.join("\n") + "\n"
            }),
            vec!["bad.jsonl", "row 8"],
        ),
        (
            "empty file",
            jsonl_text(|_| String::new()),
            vec!["bad.jsonl", "no valid records"],
        ),
        (
            "only blank lines",
            jsonl_text(|_| "\n\n\n".into()),
            vec!["bad.jsonl", "no valid records"],
        ),
        (
            "torn last line takes a partner",
            Box::new(|run: &Path| {
                // Keep everything up to and including the efficient half of the last load
                // probe, then tear the capable half.
                let text = std::fs::read_to_string(run.join("good.jsonl")).unwrap();
                let lines: Vec<&str> = text.lines().collect();
                let last = lines.len() - 1;
                let mut out = lines[..last].join("\n");
                out.push('\n');
                out.push_str(&lines[last][..lines[last].len() / 2]);
                std::fs::write(run.join("bad.jsonl"), out).unwrap();
            }),
            vec!["bad.jsonl", "torn", "probe_id"],
        ),
        (
            "unpaired load probe",
            jsonl_text(|t| {
                let lines: Vec<&str> = t.lines().collect();
                let n = lines.len();
                lines[..n - 1].join("\n") + "\n"
            }),
            vec!["bad.jsonl", "probe_id", "pair"],
        ),
        (
            "duplicated record",
            jsonl_text(|t| {
                let lines: Vec<&str> = t.lines().collect();
                let n = lines.len();
                let mut v: Vec<&str> = lines.clone();
                v.push(lines[n - 1]);
                v.join("\n") + "\n"
            }),
            vec!["bad.jsonl", "role", "two"],
        ),
        (
            "partner with another condition",
            Box::new(|run: &Path| {
                let line = first_load_line(run);
                jsonl_line(line, |v| v["condition_id"] = json!("l-other"))(run);
            }),
            vec!["bad.jsonl", "probe_id", "l-other"],
        ),
        (
            "no load phase",
            jsonl_text(|t| {
                t.lines()
                    .filter(|l| !l.contains("\"phase\":\"load\""))
                    .map(|l| format!("{l}\n"))
                    .collect()
            }),
            vec!["bad.jsonl", "load-phase"],
        ),
        (
            "binary garbage",
            write("bad.jsonl", "\u{0}\u{1}\u{2}garbage\n"),
            vec!["bad.jsonl", "row 1"],
        ),
    ] {
        let needles: Vec<&str> = needles;
        cases.push(case(
            format!("records: {name}"),
            "sy-fit",
            &fit("run/bad.jsonl"),
            setup,
            2,
            &needles,
        ));
    }
    for (name, file, text, needles) in [
        (
            "csv text in a number",
            "bad.csv",
            "schema_version,run_id\nx,y\n",
            vec!["bad.csv"],
        ),
        ("csv empty", "bad.csv", "", vec!["bad.csv"]),
        (
            "parquet that is not",
            "bad.parquet",
            "PAR1 not really",
            vec!["bad.parquet"],
        ),
        (
            "unknown extension",
            "bad.txt",
            "{}",
            vec!["bad.txt", "unknown record file type"],
        ),
    ] {
        cases.push(case(
            format!("records: {name}"),
            "sy-fit",
            &fit(Box::leak(format!("run/{file}").into_boxed_str())),
            write(file, text),
            2,
            &needles,
        ));
    }
    cases.push(case(
        "records: missing file",
        "sy-fit",
        &fit("run/absent.jsonl"),
        nothing(),
        2,
        &["absent.jsonl", "no such file"],
    ));
    // Run directories: the manifest and the sources must agree.
    let fit_dir = ["--run-dir", "run", "--seed", "7", "--no-progress", "-q"];
    cases.push(case(
        "records: incomplete run",
        "sy-fit",
        &fit_dir,
        set("manifest.json", "/complete", json!(false)),
        2,
        &["manifest.json", "complete", "--resume"],
    ));
    cases.push(case(
        "records: manifest complete not a boolean",
        "sy-fit",
        &fit_dir,
        set("manifest.json", "/complete", json!("yes")),
        2,
        &["manifest.json", "complete"],
    ));
    cases.push(case(
        "records: manifest not JSON",
        "sy-fit",
        &fit_dir,
        write("manifest.json", "{"),
        2,
        &["manifest.json", "not a run manifest"],
    ));
    cases.push(case(
        "records: parquet is not the manifest's copy and no jsonl",
        "sy-fit",
        &fit_dir,
        edit_json("manifest.json", |v| {
            v["records_files"] = json!({"records": 1, "jsonl_bytes": 5, "jsonl_sha256": "0".repeat(64), "parquet_sha256": "0".repeat(64)});
        }),
        2,
        &["manifest.json", "records_files"],
    ));
    cases.push(case(
        "records: jsonl changed after the manifest",
        "sy-fit",
        &fit_dir,
        Box::new(|run: &Path| {
            std::fs::copy(run.join("good.jsonl"), run.join("records.jsonl")).unwrap();
            let sha = sy_cli::file_sha256(&run.join("records.parquet")).unwrap();
            edit_json("manifest.json", move |v| {
                v["records_files"] = json!({"records": 1, "jsonl_bytes": 5, "jsonl_sha256": "0".repeat(64), "parquet_sha256": sha});
            })(run);
        }),
        2,
        &["records.jsonl", "records_files.jsonl_bytes"],
    ));
    cases.push(case(
        "records: run directory without records",
        "sy-fit",
        &["--run-dir", "run/bundles", "--seed", "7", "--no-progress"],
        nothing(),
        2,
        &["bundles", "no records"],
    ));
    cases
}

fn fit_cases() -> Vec<Case> {
    let margin = ["--run-dir", "run", "--no-progress", "-q"];
    let e = "/models/efficient/estimators";
    let c = "/models/capable/estimators";
    let table: Vec<(&str, Setup, &str)> = vec![
        (
            "schema version 99",
            set("fit.json", "/schema_version", json!(99)),
            "schema_version",
        ),
        (
            "schema version text",
            set("fit.json", "/schema_version", json!("1")),
            "schema_version",
        ),
        (
            "schema version missing",
            remove("fit.json", "", "schema_version"),
            "schema_version",
        ),
        (
            "coefficient 1e308",
            set(
                "fit.json",
                "/models/efficient/estimators/blind/coef/0",
                json!(1e308),
            ),
            "models.efficient.estimators.blind.coef[0]",
        ),
        (
            "capable coefficient -1e300",
            set(
                "fit.json",
                "/models/capable/estimators/cache/coef/2",
                json!(-1e300),
            ),
            "models.capable.estimators.cache.coef[2]",
        ),
        (
            "intercept 1e12",
            set(
                "fit.json",
                "/models/efficient/estimators/cache/intercept",
                json!(1e12),
            ),
            "models.efficient.estimators.cache.intercept",
        ),
        (
            "std zero",
            set(
                "fit.json",
                "/models/efficient/estimators/standardiser/std/0",
                json!(0.0),
            ),
            "models.efficient.estimators.standardiser.std[0]",
        ),
        (
            "std negative",
            set(
                "fit.json",
                "/models/capable/estimators/standardiser/std/1",
                json!(-1.0),
            ),
            "models.capable.estimators.standardiser.std[1]",
        ),
        (
            "std huge",
            set(
                "fit.json",
                "/models/capable/estimators/standardiser/std/2",
                json!(1e9),
            ),
            "models.capable.estimators.standardiser.std[2]",
        ),
        (
            "mean huge",
            set(
                "fit.json",
                "/models/efficient/estimators/standardiser/mean/1",
                json!(1e50),
            ),
            "models.efficient.estimators.standardiser.mean[1]",
        ),
        (
            "estimators missing",
            remove("fit.json", "/models/efficient", "estimators"),
            "efficient",
        ),
        (
            "capable missing",
            remove("fit.json", "/models", "capable"),
            "capable",
        ),
        (
            "coef too short",
            set(
                "fit.json",
                "/models/efficient/estimators/blind/coef",
                json!([1.0]),
            ),
            "efficient",
        ),
        (
            "coef text",
            set(
                "fit.json",
                "/models/capable/estimators/blind/coef/0",
                json!("big"),
            ),
            "capable",
        ),
        (
            "q table values ragged",
            set(
                "fit.json",
                "/models/efficient/estimators/q/values/0",
                json!([1.0]),
            ),
            "efficient",
        ),
        (
            "q axis unsorted",
            set(
                "fit.json",
                "/models/efficient/estimators/q/n_axis/0",
                json!(99999.0),
            ),
            "efficient",
        ),
        (
            "another dataset",
            set("fit.json", "/input_files/0/sha256", json!("a".repeat(64))),
            "input_files",
        ),
        (
            "input files not a list",
            set("fit.json", "/input_files", json!("records.parquet")),
            "input_files",
        ),
        (
            "not JSON",
            write("fit.json", "{\"schema_version\": 1,"),
            "not valid JSON",
        ),
        ("empty", write("fit.json", ""), "not valid JSON"),
        ("an array", write("fit.json", "[]"), "schema_version"),
    ];
    let _ = (e, c);
    let mut cases: Vec<Case> = table
        .into_iter()
        .map(|(name, setup, field)| {
            case(
                format!("fit: {name}"),
                "sy-margin",
                &margin,
                setup,
                2,
                &["fit.json", field],
            )
        })
        .collect();
    // sy-select reads fit.json too.
    let select = ["--run-dir", "run", "--no-progress", "--no-report", "-q"];
    for (name, setup, field) in [
        (
            "select: schema version 99",
            set("fit.json", "/schema_version", json!(99)) as Setup,
            "schema_version",
        ),
        (
            "select: coefficient 1e308",
            set(
                "fit.json",
                "/models/efficient/estimators/blind/coef/0",
                json!(1e308),
            ),
            "coef[0]",
        ),
        (
            "select: fit of another dataset",
            set("fit.json", "/input_files/0/sha256", json!("b".repeat(64))),
            "input_files",
        ),
        (
            "select: refitted fit.json",
            set("fit.json", "/warnings", json!(["refit"])),
            "margins.json",
        ),
        (
            "select: the margins file given as the fit",
            copy_file("margins.json", "fit.json"),
            "this is a margins file (written by sy-margin), not the fit file",
        ),
    ] {
        cases.push(case(
            format!("fit: {name}"),
            "sy-select",
            &select,
            setup,
            2,
            &["fit.json", field],
        ));
    }
    cases
}

fn margins_cases() -> Vec<Case> {
    let select = ["--run-dir", "run", "--no-progress", "--no-report", "-q"];
    let table: Vec<(&str, Setup, &str)> = vec![
        (
            "the fit file given as the margins",
            copy_file("fit.json", "margins.json"),
            "this is a fit file (written by sy-fit), not the margins file",
        ),
        (
            "schema version 2",
            set("margins.json", "/schema_version", json!(2)),
            "schema_version",
        ),
        (
            "delta negative",
            set("margins.json", "/delta_blind_ms", json!(-1.0)),
            "delta_blind_ms",
        ),
        (
            "delta 1e308",
            set("margins.json", "/delta_cache_ms", json!(1e308)),
            "delta_cache_ms",
        ),
        (
            "delta text",
            set("margins.json", "/delta_cache_ms", json!("small")),
            "delta_cache_ms",
        ),
        (
            "fit of another run",
            set(
                "margins.json",
                "/input_files/1/sha256",
                json!("c".repeat(64)),
            ),
            "input_files (fit)",
        ),
        (
            "splits of another run",
            set(
                "margins.json",
                "/input_files/2/sha256",
                json!("d".repeat(64)),
            ),
            "input_files (splits)",
        ),
        (
            "records of another run",
            set(
                "margins.json",
                "/input_files/0/sha256",
                json!("e".repeat(64)),
            ),
            "input_files (records)",
        ),
        (
            "too few inputs",
            set("margins.json", "/input_files", json!([])),
            "input_files",
        ),
        (
            "input hash not hex",
            set("margins.json", "/input_files/0/sha256", json!("xyz")),
            "input_files",
        ),
        (
            "split seed differs",
            set("margins.json", "/split_seed", json!(8)),
            "seed",
        ),
        (
            "missing blind",
            remove("margins.json", "", "blind"),
            "blind",
        ),
        ("not JSON", write("margins.json", "nope"), "margins.json"),
        ("empty", write("margins.json", ""), "margins.json"),
        ("an array", write("margins.json", "[1]"), "margins.json"),
        (
            "level text",
            set("margins.json", "/level", json!("high")),
            "level",
        ),
    ];
    table
        .into_iter()
        .map(|(name, setup, field)| {
            case(
                format!("margins: {name}"),
                "sy-select",
                &select,
                setup,
                2,
                &["margins.json", field],
            )
        })
        .collect()
}

fn splits_cases() -> Vec<Case> {
    let margin = ["--run-dir", "run", "--no-progress", "-q"];
    let table: Vec<(&str, Setup, &str)> = vec![
        (
            "schema version 5",
            set("splits.json", "/schema_version", json!(5)),
            "schema",
        ),
        (
            "unknown split name",
            edit_json("splits.json", |v| {
                let conds = v["conditions"]
                    .as_object_mut()
                    .unwrap()
                    .values_mut()
                    .next()
                    .unwrap();
                let first = conds.as_object_mut().unwrap().values_mut().next().unwrap();
                *first = json!("training");
            }),
            "training",
        ),
        (
            "condition missing",
            edit_json("splits.json", |v| {
                let conds = v["conditions"]
                    .as_object_mut()
                    .unwrap()
                    .values_mut()
                    .next()
                    .unwrap();
                let key = conds.as_object().unwrap().keys().next().unwrap().clone();
                conds.as_object_mut().unwrap().remove(&key);
            }),
            "splits.json",
        ),
        (
            "run missing",
            set("splits.json", "/conditions", json!({})),
            "splits.json",
        ),
        (
            "fractions do not sum to one",
            set("splits.json", "/fractions/fit", json!(0.9)),
            "fractions",
        ),
        (
            "fraction negative",
            set("splits.json", "/fractions/selection", json!(-0.2)),
            "fractions",
        ),
        (
            "seed text",
            set("splits.json", "/seed", json!("seven")),
            "seed",
        ),
        ("not JSON", write("splits.json", "{{"), "splits.json"),
        ("empty", write("splits.json", ""), "splits.json"),
        (
            "missing",
            Box::new(|run: &Path| std::fs::remove_file(run.join("splits.json")).unwrap()),
            "no split table",
        ),
    ];
    let mut cases: Vec<Case> = table
        .into_iter()
        .map(|(name, setup, field)| {
            case(
                format!("splits: {name}"),
                "sy-margin",
                &margin,
                setup,
                2,
                &["splits.json", field],
            )
        })
        .collect();
    cases.push(case(
        "splits: select with a rewritten splits.json",
        "sy-select",
        &["--run-dir", "run", "--no-progress", "--no-report", "-q"],
        set("splits.json", "/method", json!("by hand")),
        2,
        &["splits.json", "input_files (splits)"],
    ));
    cases
}

fn bundle_cases() -> Vec<Case> {
    let decide = [
        "decide",
        "--bundle",
        "run/bundle.json",
        "--observations",
        "run/obs.json",
    ];
    let replay = [
        "replay",
        "--bundle",
        "run/bundle.json",
        "--records",
        "run/records.parquet",
    ];
    let table: Vec<(&str, Setup, &str)> = vec![
        (
            "schema version 99",
            set("bundle.json", "/schema_version", json!(99)),
            "schema_version",
        ),
        (
            "schema version missing",
            remove("bundle.json", "", "schema_version"),
            "schema_version",
        ),
        (
            "content hash mismatch",
            set("bundle.json", "/params/margins/blind", json!(1.0)),
            "hash",
        ),
        (
            "margin 1e308",
            edit_bundle("bundle.json", |b| b.params.margins.cache = 1e308),
            "params.margins.cache",
        ),
        (
            "margin negative",
            edit_bundle("bundle.json", |b| b.params.margins.blind = -3.0),
            "params.margins.blind",
        ),
        (
            "coefficient 1e308",
            edit_bundle("bundle.json", |b| b.params.capable.blind.coef[1] = 1e308),
            "params.capable.blind.coef[1]",
        ),
        (
            "std zero",
            edit_bundle("bundle.json", |b| {
                b.params.efficient.standardiser.std[2] = 0.0
            }),
            "params.efficient.standardiser.std[2]",
        ),
        (
            "max age negative",
            edit_bundle("bundle.json", |b| b.params.limits.max_age_ms = -1.0),
            "params.limits.max_age_ms",
        ),
        (
            "provenance hash not hex",
            edit_bundle("bundle.json", |b| {
                b.provenance.input_files[0].sha256 = "zz".into()
            }),
            "provenance.input_files[0].sha256",
        ),
        (
            "unknown field",
            set("bundle.json", "/params/limits/extra", json!(1)),
            "extra",
        ),
        (
            "variant unknown",
            set("bundle.json", "/variant", json!("psychic")),
            "psychic",
        ),
        ("not JSON", write("bundle.json", "{"), "JSON"),
        ("an array", write("bundle.json", "[]"), "object"),
    ];
    let mut cases = Vec::new();
    for (name, setup, field) in table {
        let setup: std::sync::Arc<Setup> = std::sync::Arc::new(setup);
        for (sub, args) in [("decide", &decide[..]), ("replay", &replay[..])] {
            let s = setup.clone();
            cases.push(case(
                format!("bundle ({sub}): {name}"),
                "sy-select",
                args,
                Box::new(move |run| s(run)),
                2,
                &["bundle.json", field],
            ));
        }
    }
    cases
}

fn observation_cases() -> Vec<Case> {
    let decide = [
        "decide",
        "--bundle",
        "run/bundle.json",
        "--observations",
        "run/obs.json",
    ];
    let table: Vec<(&str, Setup, &str)> = vec![
        (
            "capable empty array",
            set("obs.json", "/capable", json!([])),
            "capable",
        ),
        (
            "efficient null",
            set("obs.json", "/efficient", Value::Null),
            "efficient",
        ),
        (
            "capable a number",
            set("obs.json", "/capable", json!(3)),
            "capable",
        ),
        (
            "capable missing",
            remove("obs.json", "", "capable"),
            "capable",
        ),
        (
            "proposal missing",
            remove("obs.json", "", "proposal"),
            "proposal",
        ),
        (
            "proposal unknown",
            set("obs.json", "/proposal", json!("medium")),
            "medium",
        ),
        ("now missing", remove("obs.json", "", "now_ms"), "now_ms"),
        (
            "n text",
            set("obs.json", "/efficient/n", json!("lots")),
            "lots",
        ),
        (
            "worker id negative",
            set("obs.json", "/capable/worker_id", json!(-1)),
            "obs.json",
        ),
        ("not JSON", write("obs.json", "{"), "not valid JSON"),
        ("top-level array", write("obs.json", "[]"), "JSON object"),
        ("empty", write("obs.json", ""), "not valid JSON"),
    ];
    table
        .into_iter()
        .map(|(name, setup, field)| {
            case(
                format!("observations: {name}"),
                "sy-select",
                &decide,
                setup,
                2,
                &["obs.json", field],
            )
        })
        .collect()
}

fn cli_cases() -> Vec<Case> {
    let file_run_dir = write("afile", "x");
    let mut cases = Vec::new();
    for tool in ["sy-fit", "sy-margin", "sy-select", "sy-collect"] {
        let mut args = vec!["--run-dir", "run/afile", "--no-progress"];
        if tool == "sy-collect" {
            args.extend(["--plan", "run/plan.toml", "--target", "sim"]);
        }
        cases.push(case(
            format!("cli: {tool} --run-dir naming a file"),
            tool,
            &args,
            write("afile", "x"),
            2,
            &["--run-dir", "afile", "not a directory"],
        ));
    }
    let _ = file_run_dir;
    type Row = (
        &'static str,
        &'static str,
        Vec<&'static str>,
        Setup,
        Vec<&'static str>,
    );
    let table: Vec<Row> = vec![
        (
            "fit --out a directory",
            "sy-fit",
            vec!["--run-dir", "run", "--out", "run/bundles"],
            nothing(),
            vec!["--out", "bundles", "directory"],
        ),
        (
            "fit --out the run directory",
            "sy-fit",
            vec!["--run-dir", "run", "--out", "run"],
            nothing(),
            vec!["--out", "run", "directory"],
        ),
        (
            "fit --out under a file",
            "sy-fit",
            vec!["--run-dir", "run", "--out", "run/fit.json/x.json"],
            nothing(),
            vec!["--out", "fit.json", "not a directory"],
        ),
        (
            "fit --splits a directory",
            "sy-fit",
            vec!["--run-dir", "run", "--splits", "run/bundles"],
            nothing(),
            vec!["--splits", "bundles"],
        ),
        (
            "margin --out a directory",
            "sy-margin",
            vec!["--run-dir", "run", "--out", "run/bundles"],
            nothing(),
            vec!["--out", "bundles", "directory"],
        ),
        (
            "select --out a directory",
            "sy-select",
            vec!["--run-dir", "run", "--no-report", "--out", "run/bundles"],
            nothing(),
            vec!["--out", "bundles", "directory"],
        ),
        (
            "select bundle.json is a directory",
            "sy-select",
            vec!["--run-dir", "run", "--no-report"],
            Box::new(|run: &Path| {
                std::fs::remove_file(run.join("bundle.json")).unwrap();
                std::fs::create_dir(run.join("bundle.json")).unwrap();
            }),
            vec!["bundle.json", "directory"],
        ),
        (
            "margin --level 2",
            "sy-margin",
            vec!["--run-dir", "run", "--level", "2"],
            nothing(),
            vec!["--level"],
        ),
        (
            "margin --level text",
            "sy-margin",
            vec!["--run-dir", "run", "--level", "high"],
            nothing(),
            vec!["--level"],
        ),
        (
            "fit --seed text",
            "sy-fit",
            vec!["--run-dir", "run", "--seed", "seven"],
            nothing(),
            vec!["--seed"],
        ),
        (
            "fit unknown flag",
            "sy-fit",
            vec!["--run-dir", "run", "--colour"],
            nothing(),
            vec!["--colour"],
        ),
        (
            "margin --fit missing",
            "sy-margin",
            vec!["--run-dir", "run", "--fit", "run/nofit.json"],
            nothing(),
            vec!["nofit.json"],
        ),
        (
            "margin --splits missing",
            "sy-margin",
            vec!["--run-dir", "run", "--splits", "run/nosplits.json"],
            nothing(),
            vec!["nosplits.json"],
        ),
        (
            "select --margins missing",
            "sy-select",
            vec![
                "--run-dir",
                "run",
                "--no-report",
                "--margins",
                "run/nomargins.json",
            ],
            nothing(),
            vec!["nomargins.json"],
        ),
        (
            "decide --bundle missing",
            "sy-select",
            vec![
                "decide",
                "--bundle",
                "run/nobundle.json",
                "--observations",
                "run/obs.json",
            ],
            nothing(),
            vec!["nobundle.json"],
        ),
        (
            "decide --observations missing",
            "sy-select",
            vec![
                "decide",
                "--bundle",
                "run/bundle.json",
                "--observations",
                "run/noobs.json",
            ],
            nothing(),
            vec!["noobs.json"],
        ),
        (
            "decide unknown variant",
            "sy-select",
            vec![
                "decide",
                "--bundle",
                "run/bundle.json",
                "--observations",
                "run/obs.json",
                "--variant",
                "psychic",
            ],
            nothing(),
            vec!["--variant", "psychic"],
        ),
        (
            "collect without --plan",
            "sy-collect",
            vec!["--run-dir", "run"],
            nothing(),
            vec!["--plan"],
        ),
        (
            "collect --plan missing",
            "sy-collect",
            vec!["--plan", "run/noplan.toml", "--run-dir", "run"],
            nothing(),
            vec!["noplan.toml"],
        ),
        (
            "collect into an existing run",
            "sy-collect",
            COLLECT.to_vec(),
            nothing(),
            vec!["run", "already holds a run", "--resume"],
        ),
        (
            "collect --resume with another plan",
            "sy-collect",
            [COLLECT, &["--resume"]].concat(),
            nothing(),
            vec!["--resume", "plan.toml", "sha256"],
        ),
        (
            "collect ftp frontend",
            "sy-collect",
            vec![
                "--plan",
                "run/plan.toml",
                "--run-dir",
                "run/new",
                "--frontend-url",
                "ftp://x",
            ],
            nothing(),
            vec!["--frontend-url"],
        ),
        (
            "collect unknown target",
            "sy-collect",
            vec![
                "--plan",
                "run/plan.toml",
                "--run-dir",
                "run",
                "--target",
                "moon",
            ],
            nothing(),
            vec!["--target", "moon"],
        ),
        (
            "collect plan is a directory",
            "sy-collect",
            vec!["--plan", "run/bundles", "--run-dir", "run"],
            nothing(),
            vec!["bundles"],
        ),
        (
            "fit no inputs",
            "sy-fit",
            vec!["--no-progress"],
            nothing(),
            vec!["--run-dir"],
        ),
        (
            "margin no inputs",
            "sy-margin",
            vec!["--no-progress"],
            nothing(),
            vec!["--run-dir"],
        ),
        (
            "select no inputs",
            "sy-select",
            vec!["--no-progress", "--no-report"],
            nothing(),
            vec!["--run-dir"],
        ),
    ];
    for (name, tool, args, setup, needles) in table {
        cases.push(case(
            format!("cli: {name}"),
            tool,
            &args,
            setup,
            2,
            &needles,
        ));
    }
    cases
}

/// Runs one case; returns a description of what went wrong, if anything.
fn check(c: &Case) -> Option<String> {
    let work = tempfile::tempdir().unwrap();
    let run = work.path().join("run");
    copy_dir(&golden().join("run"), &run);
    (c.setup)(&run);
    let before = snapshot(&run);
    let (code, stderr, hung) = run_tool(c.tool, &c.args, work.path());
    let after = snapshot(&run);
    let mut problems = Vec::new();
    if hung {
        problems.push("hung (killed after 60 s)".to_string());
    }
    if code != Some(c.code) {
        problems.push(format!("exit code {code:?}, expected {}", c.code));
    }
    if stderr.contains("panicked") || stderr.contains("RUST_BACKTRACE") {
        problems.push("panicked".to_string());
    }
    for n in &c.needles {
        if !stderr.contains(n.as_str()) {
            problems.push(format!("stderr lacks {n:?}"));
        }
    }
    if before != after {
        let changed: Vec<&String> = before
            .keys()
            .chain(after.keys())
            .filter(|k| before.get(*k) != after.get(*k))
            .collect();
        problems.push(format!("run directory changed: {changed:?}"));
    }
    (!problems.is_empty()).then(|| {
        format!(
            "{} ({} {:?}): {}\n    stderr: {}",
            c.name,
            c.tool,
            c.args,
            problems.join("; "),
            stderr.trim()
        )
    })
}

fn all_cases() -> Vec<Case> {
    let mut cases = plan_cases();
    cases.extend(records_cases());
    cases.extend(fit_cases());
    cases.extend(margins_cases());
    cases.extend(splits_cases());
    cases.extend(bundle_cases());
    cases.extend(observation_cases());
    cases.extend(cli_cases());
    cases
}

#[test]
fn every_bad_input_is_refused_clearly_and_changes_nothing() {
    let cases = all_cases();
    assert!(cases.len() >= 150, "the corpus has {} cases", cases.len());
    let mut names = std::collections::HashSet::new();
    for c in &cases {
        assert!(
            names.insert(c.name.clone()),
            "duplicate case name {}",
            c.name
        );
    }
    golden();
    let cases = std::sync::Arc::new(cases);
    let next = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let workers: Vec<_> = (0..2)
        .map(|_| {
            let (cases, next) = (cases.clone(), next.clone());
            std::thread::spawn(move || {
                let mut failures = Vec::new();
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(c) = cases.get(i) else { break };
                    failures.extend(check(c));
                }
                failures
            })
        })
        .collect();
    let failures: Vec<String> = workers
        .into_iter()
        .flat_map(|w| w.join().unwrap())
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

/// The good run directory itself passes every tool the corpus runs (the cases fail because of
/// what they break, not because the base is bad).
#[test]
fn the_unbroken_run_directory_is_accepted() {
    for (tool, args) in [
        (
            "sy-margin",
            vec![
                "--run-dir",
                "run",
                "--no-progress",
                "-q",
                "--out",
                "run/m2.json",
            ],
        ),
        (
            "sy-fit",
            vec![
                "--run-dir",
                "run",
                "--records",
                "run/good.jsonl",
                "--seed",
                "7",
                "--no-progress",
                "-q",
                "--out",
                "run/f2/fit.json",
            ],
        ),
        (
            "sy-select",
            vec![
                "decide",
                "--bundle",
                "run/bundle.json",
                "--observations",
                "run/obs.json",
            ],
        ),
        (
            "sy-select",
            vec![
                "replay",
                "--bundle",
                "run/bundle.json",
                "--records",
                "run/records.parquet",
            ],
        ),
        ("sy-collect", vec!["--plan", "run/plan.toml", "--dry-run"]),
    ] {
        let work = tempfile::tempdir().unwrap();
        copy_dir(&golden().join("run"), &work.path().join("run"));
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let (code, err, _) = run_tool(tool, &args, work.path());
        assert_eq!(code, Some(0), "{tool} {args:?}: {err}");
    }
}
