//! The hostile-input corpus, second part: the run directory as a shared, hostile place. A second
//! writer, links planted to lead outputs outside, a full disk, another tool's run directory,
//! artifacts of another run or split, absurd evaluation plans, FIFOs as inputs, control
//! characters in names, and a failed run that must leave nothing behind.
//!
//! Every case runs the real binaries in a fresh copy of one good run directory (the committed
//! demo dataset, calibrated once by the real tools) and asserts: the exit code (2 bad input, 1
//! runtime failure), that stderr names the file and the field or flag, that nothing hung (60 s)
//! or panicked, that the run directory is unchanged (every file hashed before and after, links
//! and FIFOs recorded as such) and that nothing outside it was written.
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

use serde_json::Value;

/// What a run of a tool gave: exit code, stderr, stdout and whether it hung.
struct Ran {
    code: Option<i32>,
    stderr: String,
    hung: bool,
}

/// Runs `program` with `args` in `cwd`, killed after 60 s (a hang is a failure).
fn run_program(program: &Path, args: &[&str], cwd: &Path) -> Ran {
    let mut child = Command::new(program)
        .args(args)
        .current_dir(cwd)
        .env_remove("RUST_LOG")
        .env("NO_COLOR", "1")
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
        std::thread::sleep(Duration::from_millis(5));
    };
    Ran {
        code: status.code(),
        stderr: reader.join().unwrap(),
        hung,
    }
}

fn run_tool(tool: &str, args: &[&str], cwd: &Path) -> Ran {
    run_program(&bin(tool), args, cwd)
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

/// Every entry under `dir`: files by SHA-256, links by target, directories and other kinds by
/// kind (a FIFO is never opened).
fn snapshot(dir: &Path) -> BTreeMap<String, String> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries {
            let e = e.unwrap();
            let rel = e.path().strip_prefix(root).unwrap().display().to_string();
            let t = e.file_type().unwrap();
            if t.is_symlink() {
                let target = std::fs::read_link(e.path()).unwrap();
                out.insert(rel, format!("link -> {}", target.display()));
            } else if t.is_dir() {
                out.insert(format!("{rel}/"), String::new());
                walk(root, &e.path(), out);
            } else if t.is_file() {
                out.insert(rel, sy_cli::file_sha256(&e.path()).unwrap());
            } else {
                out.insert(rel, "special".to_string());
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
        let common = ["--run-dir", "run", "--no-progress", "-q"];
        for (tool, extra) in [
            ("sy-fit", vec!["--seed", "7", "--accept-failed-check"]),
            ("sy-margin", vec![]),
            ("sy-select", vec!["--no-report"]),
        ] {
            let mut args = common.to_vec();
            args.extend(extra);
            let r = run_tool(tool, &args, &root);
            assert_eq!(r.code, Some(0), "{tool}: {}", r.stderr);
        }
        root
    })
}

/// A fresh copy of the good run directory (`work/run`), with `work/outside` an empty directory
/// beside it: where a planted link points.
fn fresh() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let work = tempfile::tempdir().unwrap();
    let run = work.path().join("run");
    copy_dir(&golden().join("run"), &run);
    let outside = work.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    (work, run, outside)
}

/// Runs `tool` in `work` and checks the outcome: exit `code`, stderr naming every needle, no
/// hang or panic, and `run` and `outside` as they were before.
fn expect(work: &Path, tool: &str, args: &[&str], code: i32, needles: &[&str]) -> String {
    let run = work.join("run");
    let outside = work.join("outside");
    let (before, before_out) = (snapshot(&run), snapshot(&outside));
    let r = run_tool(tool, args, work);
    let mut problems = Vec::new();
    if r.hung {
        problems.push("hung (killed after 60 s)".to_string());
    }
    if r.code != Some(code) {
        problems.push(format!("exit code {:?}, expected {code}", r.code));
    }
    if r.stderr.contains("panicked") || r.stderr.contains("RUST_BACKTRACE") {
        problems.push("panicked".to_string());
    }
    for n in needles {
        if !r.stderr.contains(n) {
            problems.push(format!("stderr lacks {n:?}"));
        }
    }
    let (after, after_out) = (snapshot(&run), snapshot(&outside));
    if before != after {
        let changed: Vec<&String> = before
            .keys()
            .chain(after.keys())
            .filter(|k| before.get(*k) != after.get(*k))
            .collect();
        problems.push(format!("run directory changed: {changed:?}"));
    }
    if before_out != after_out {
        problems.push(format!("written outside the run directory: {after_out:?}"));
    }
    assert!(
        problems.is_empty(),
        "{tool} {args:?}: {}\n    stderr: {}",
        problems.join("; "),
        r.stderr.trim()
    );
    r.stderr
}

/// sy-fit on the good run directory (the demo dataset fails the data-quality check's
/// contention and contamination bounds; fitting it anyway is what these cases need).
const FIT: &[&str] = &[
    "--run-dir",
    "run",
    "--no-progress",
    "--seed",
    "7",
    "--accept-failed-check",
];
const MARGIN: &[&str] = &["--run-dir", "run", "--no-progress"];
const SELECT: &[&str] = &["--run-dir", "run", "--no-progress", "--no-report"];

/// A tiny evaluation plan on the simulator (two sessions of two turns, one round): `top` and
/// `sessions` are `key = value` lines replacing the defaults of the same keys, `tail` tables
/// added at the end.
fn eval_plan_with(work: &Path, top: &str, sessions: &str, tail: &str) -> String {
    let merge = |defaults: &[&str], over: &str| {
        let keys: Vec<&str> = over
            .lines()
            .filter_map(|l| l.split('=').next())
            .map(str::trim)
            .collect();
        let mut lines: Vec<String> = defaults
            .iter()
            .filter(|d| !keys.contains(&d.split('=').next().unwrap_or("").trim()))
            .map(|d| d.to_string())
            .collect();
        lines.extend(over.lines().filter(|l| !l.is_empty()).map(str::to_string));
        lines.join("\n")
    };
    let top = merge(
        &[
            "seed = 1",
            "variants = [\"stage\", \"cache\"]",
            "rounds = 1",
            "concurrency = 2",
        ],
        top,
    );
    let sessions = merge(
        &[
            "count = 2",
            "turns = [2, 2]",
            "initial_tokens = [200, 300]",
            "append_tokens = [20, 40]",
            "output_tokens = [2, 4]",
        ],
        sessions,
    );
    let text = format!(
        "{top}\n[sessions]\n{sessions}\n[target]\nsim_config = \"{}\"\n{tail}\n",
        repo().join("data/eval/sim-quarter.toml").display()
    );
    let path = work.join("eval.toml");
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

fn eval_plan(work: &Path, sessions: &str, top: &str) -> String {
    eval_plan_with(work, top, sessions, "")
}

fn eval_bundle() -> String {
    repo().join("data/eval/bundle.json").display().to_string()
}

fn mkfifo(path: &Path) {
    let ok = Command::new("mkfifo").arg(path).status().unwrap().success();
    assert!(ok, "mkfifo {}", path.display());
}

// 1. One writer per run directory.

#[test]
fn a_second_writer_is_refused_naming_the_holder() {
    let (work, run, _) = fresh();
    // This test process holds the run directory, as a tool running there would.
    let lock = sy_rundir::RunLock::acquire(&run, "sy-holder").unwrap();
    let pid = format!("PID {}", std::process::id());
    let w = work.path();
    for (tool, args) in [
        ("sy-fit", FIT),
        ("sy-margin", MARGIN),
        ("sy-select", SELECT),
    ] {
        expect(
            w,
            tool,
            args,
            2,
            &["run", "another sy tool is writing", &pid],
        );
    }
    // The holder is checked before the run directory's contents: a collector started twice
    // is refused naming the first.
    std::fs::write(
        w.join("cplan.toml"),
        "seed = 1\n[qgrid]\nn = [64]\nf = [0.0]\nrepeats = 1\n",
    )
    .unwrap();
    expect(
        w,
        "sy-collect",
        &[
            "--plan",
            "cplan.toml",
            "--run-dir",
            "run",
            "--target",
            "sim",
            "--resume",
        ],
        2,
        &["run", "another sy tool is writing", &pid],
    );
    drop(lock);
    let plan = eval_plan(w, "", "");
    // sy-eval into an evaluation directory held by another writer.
    let eval = w.join("outside/eval");
    let _held = sy_rundir::RunLock::acquire(&eval, "sy-holder").unwrap();
    let bundle = eval_bundle();
    let r = run_tool(
        "sy-eval",
        &[
            "--plan",
            &plan,
            "--bundle",
            &bundle,
            "--run-dir",
            "outside/eval",
            "--no-progress",
        ],
        w,
    );
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert!(
        r.stderr.contains(&pid) && r.stderr.contains("eval"),
        "{}",
        r.stderr
    );
    assert!(!eval.join("eval-manifest.json").exists());
}

#[test]
fn two_collectors_at_once_record_each_unit_once() {
    let work = tempfile::tempdir().unwrap();
    let plan = work.path().join("plan.toml");
    std::fs::write(
        &plan,
        "seed = 3\n[qgrid]\nn = [64, 128]\nf = [0.0, 0.5]\nrepeats = 3\n",
    )
    .unwrap();
    let args = [
        "--plan",
        "plan.toml",
        "--run-dir",
        "run",
        "--target",
        "sim",
        "--no-progress",
        "--no-preflight",
        "-q",
    ];
    let spawn = || {
        Command::new(bin("sy-collect"))
            .args(args)
            .current_dir(work.path())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (a, b) = (spawn(), spawn());
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    let codes = [a.status.code(), b.status.code()];
    assert!(
        codes.contains(&Some(0)) && codes.contains(&Some(2)),
        "one must win, the other be refused: {codes:?}\n{}\n{}",
        String::from_utf8_lossy(&a.stderr),
        String::from_utf8_lossy(&b.stderr)
    );
    let loser = if a.status.code() == Some(2) { &a } else { &b };
    let text = String::from_utf8_lossy(&loser.stderr);
    assert!(
        text.contains("PID") || text.contains("already holds a run"),
        "{text}"
    );
    let records = std::fs::read_to_string(work.path().join("run/records.jsonl")).unwrap();
    let mut keys = std::collections::HashSet::new();
    for line in records.lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        let key = (
            v["condition_id"].to_string(),
            v["repeat"].to_string(),
            v["role"].to_string(),
        );
        assert!(keys.insert(key.clone()), "recorded twice: {key:?}");
    }
}

#[test]
fn a_crashed_holder_is_recognised_and_does_not_block() {
    let (work, run, _) = fresh();
    // What a holder killed with SIGKILL leaves: its PID and command, no lock (the kernel
    // released it).
    std::fs::write(
        run.join(sy_rundir::LOCK_FILE_NAME),
        "pid 999999\ntool sy-fit\ncommand sy-fit --run-dir run\n",
    )
    .unwrap();
    let r = run_tool("sy-margin", MARGIN, work.path());
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(
        r.stderr.contains("999999") && r.stderr.contains("without releasing"),
        "{}",
        r.stderr
    );
    // Released cleanly: the next run sees no earlier holder.
    let r = run_tool("sy-margin", MARGIN, work.path());
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    assert!(!r.stderr.contains("without releasing"), "{}", r.stderr);
    assert!(
        !run.join(sy_rundir::LOCK_FILE_NAME).exists(),
        "a clean run leaves no lock file"
    );
}

#[test]
fn a_writer_killed_with_sigkill_leaves_no_stale_lock() {
    let work = tempfile::tempdir().unwrap();
    std::fs::write(
        work.path().join("plan.toml"),
        "seed = 3\n[qgrid]\nn = [64, 128]\nf = [0.0, 0.5]\nrepeats = 500\n",
    )
    .unwrap();
    let mut child = Command::new(bin("sy-collect"))
        .args([
            "--plan",
            "plan.toml",
            "--run-dir",
            "run",
            "--target",
            "sim",
            "--no-progress",
            "--no-preflight",
            "-q",
        ])
        .current_dir(work.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let run = work.path().join("run");
    let started = Instant::now();
    // Killed mid-run, once it has recorded something.
    while std::fs::metadata(run.join("records.jsonl")).map_or(true, |m| m.len() == 0) {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no record written"
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "finished before it could be killed"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let pid = child.id();
    child.kill().unwrap();
    child.wait().unwrap();
    // The kernel released the lock; the file still names the killed holder.
    let text = std::fs::read_to_string(run.join(sy_rundir::LOCK_FILE_NAME)).unwrap();
    assert!(text.contains(&format!("pid {pid}")), "{text}");
    let lock = sy_rundir::RunLock::acquire(&run, "sy-test").unwrap();
    let stale = lock.stale_holder().unwrap_or_default().to_string();
    assert!(
        stale.contains(&format!("PID {pid}")) && stale.contains("sy-collect"),
        "{stale}"
    );
}

// 2. Nothing written outside the run directory.

#[test]
fn links_planted_in_the_run_directory_are_not_written_through() {
    let w_fit = |name: &str| {
        let (work, run, outside) = fresh();
        std::fs::remove_file(run.join(name)).unwrap();
        std::fs::write(outside.join(name), "outside\n").unwrap();
        std::os::unix::fs::symlink(outside.join(name), run.join(name)).unwrap();
        work
    };
    for name in ["fit.json", "splits.json"] {
        let work = w_fit(name);
        expect(work.path(), "sy-fit", FIT, 2, &[name, "symbolic link"]);
    }
    let work = w_fit("margins.json");
    expect(
        work.path(),
        "sy-margin",
        MARGIN,
        2,
        &["margins.json", "symbolic link"],
    );

    // A linked bundles/ directory.
    let (work, run, outside) = fresh();
    std::fs::remove_dir_all(run.join("bundles")).unwrap();
    std::os::unix::fs::symlink(&outside, run.join("bundles")).unwrap();
    expect(
        work.path(),
        "sy-select",
        SELECT,
        2,
        &["bundles", "symbolic link"],
    );

    // A linked records.jsonl, resumed: never truncated or appended through the link.
    let (work, run, outside) = fresh();
    let plan = work.path().join("plan.toml");
    std::fs::write(
        &plan,
        "seed = 3\n[qgrid]\nn = [64]\nf = [0.0]\nrepeats = 2\n",
    )
    .unwrap();
    let col = |run_dir: &str| {
        run_tool(
            "sy-collect",
            &[
                "--plan",
                "plan.toml",
                "--run-dir",
                run_dir,
                "--target",
                "sim",
                "--no-progress",
                "--no-preflight",
                "-q",
            ],
            work.path(),
        )
    };
    let r = col("c");
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    let c = work.path().join("c");
    let records = std::fs::read(c.join("records.jsonl")).unwrap();
    let mut torn = records.clone();
    torn.extend_from_slice(b"{\"torn");
    std::fs::write(outside.join("records.jsonl"), &torn).unwrap();
    std::fs::remove_file(c.join("records.jsonl")).unwrap();
    std::os::unix::fs::symlink(outside.join("records.jsonl"), c.join("records.jsonl")).unwrap();
    let mut manifest: Value =
        serde_json::from_str(&std::fs::read_to_string(c.join("manifest.json")).unwrap()).unwrap();
    manifest["complete"] = Value::Bool(false);
    std::fs::write(c.join("manifest.json"), manifest.to_string()).unwrap();
    let before = snapshot(&outside);
    let r = run_tool(
        "sy-collect",
        &[
            "--plan",
            "plan.toml",
            "--run-dir",
            "c",
            "--target",
            "sim",
            "--no-progress",
            "--no-preflight",
            "--resume",
        ],
        work.path(),
    );
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert!(
        r.stderr.contains("records.jsonl") && r.stderr.contains("symbolic link"),
        "{}",
        r.stderr
    );
    assert_eq!(before, snapshot(&outside), "the outside file was changed");
    let _ = run;

    // A linked records.parquet in a new collection: refused before the first request.
    let (work, _, outside) = fresh();
    std::fs::write(
        work.path().join("plan.toml"),
        "seed = 3\n[qgrid]\nn = [64]\nf = [0.0]\nrepeats = 2\n",
    )
    .unwrap();
    let fresh_dir = work.path().join("n");
    std::fs::create_dir_all(&fresh_dir).unwrap();
    std::os::unix::fs::symlink(outside.join("p"), fresh_dir.join("records.parquet")).unwrap();
    let r = run_tool(
        "sy-collect",
        &[
            "--plan",
            "plan.toml",
            "--run-dir",
            "n",
            "--target",
            "sim",
            "--no-progress",
            "--no-preflight",
        ],
        work.path(),
    );
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert!(r.stderr.contains("records.parquet"), "{}", r.stderr);
    assert!(!fresh_dir.join("records.jsonl").exists(), "a unit ran");
    assert!(!outside.join("p").exists());

    // A linked report.md of an evaluation.
    let (work, _, outside) = fresh();
    let plan = eval_plan(work.path(), "", "");
    let eval = work.path().join("ev");
    std::fs::create_dir_all(&eval).unwrap();
    std::fs::write(outside.join("report.md"), "theirs\n").unwrap();
    std::os::unix::fs::symlink(outside.join("report.md"), eval.join("report.md")).unwrap();
    let bundle = eval_bundle();
    let r = run_tool(
        "sy-eval",
        &[
            "--plan",
            &plan,
            "--bundle",
            &bundle,
            "--run-dir",
            "ev",
            "--no-progress",
        ],
        work.path(),
    );
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert!(r.stderr.contains("report.md"), "{}", r.stderr);
    assert!(!eval.join("blocks").exists(), "a block ran");
    assert_eq!(
        std::fs::read_to_string(outside.join("report.md")).unwrap(),
        "theirs\n"
    );

    // A linked blocks/ directory of an evaluation.
    let (work, _, outside) = fresh();
    let plan = eval_plan(work.path(), "", "");
    let eval = work.path().join("ev");
    std::fs::create_dir_all(&eval).unwrap();
    std::os::unix::fs::symlink(&outside, eval.join("blocks")).unwrap();
    let bundle = eval_bundle();
    let before = snapshot(&outside);
    let r = run_tool(
        "sy-eval",
        &[
            "--plan",
            &plan,
            "--bundle",
            &bundle,
            "--run-dir",
            "ev",
            "--no-progress",
        ],
        work.path(),
    );
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert!(r.stderr.contains("blocks"), "{}", r.stderr);
    assert_eq!(before, snapshot(&outside));
}

// 3. A full disk: exit 1 naming the file, nothing half-written, no SIGBUS.

/// Runs `tool` with a file-size limit of `kib` KiB (writes beyond it fail with EFBIG instead of
/// killing the process, as a full disk's ENOSPC would).
fn run_with_fsize(work: &Path, kib: u64, tool: &str, args: &[&str]) -> Ran {
    let script = format!(
        "trap '' XFSZ; ulimit -f {}; exec \"$0\" \"$@\"",
        kib * 2 // POSIX sh counts 512-byte blocks
    );
    let program = bin(tool);
    let mut full = vec!["-c", &script, program.to_str().unwrap()];
    full.extend_from_slice(args);
    let sh = PathBuf::from("/bin/sh");
    run_program(&sh, &full, work)
}

#[test]
fn a_full_disk_is_a_clean_failure_naming_the_file() {
    // Writes larger than the limit fail: the probe-table cache (the largest file), then fit.json.
    let (work, run, _) = fresh();
    std::fs::remove_file(run.join("probe-table.cache")).ok();
    let before = snapshot(&run);
    let r = run_with_fsize(work.path(), 16, "sy-fit", FIT);
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert!(
        r.stderr.contains("fit.json") || r.stderr.contains("splits.json"),
        "{}",
        r.stderr
    );
    assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
    assert_eq!(
        before,
        snapshot(&run),
        "a partial or temporary file was left"
    );
}

/// The same on a real full file system (a 1 MiB tmpfs) when this process may mount one (root):
/// the cache's mapped regions are allocated before they are written, so a full disk is an
/// error, never a SIGBUS.
#[test]
fn a_full_tmpfs_is_a_clean_failure_not_a_sigbus() {
    let work = tempfile::tempdir().unwrap();
    let mnt = work.path().join("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
        .arg(&mnt)
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !mounted {
        eprintln!("skipped: cannot mount a tmpfs here (not root); the RLIMIT_FSIZE case covers it");
        return;
    }
    let result = std::panic::catch_unwind(|| {
        let run = mnt.join("run");
        copy_dir(&golden().join("run"), &run);
        std::fs::remove_file(run.join("probe-table.cache")).ok();
        for f in ["fit.json", "splits.json", "margins.json", "selection.json"] {
            std::fs::remove_file(run.join(f)).ok();
        }
        // Fill the rest of the disk.
        let mut fill = Vec::new();
        let filler = mnt.join("filler");
        let mut f = std::fs::File::create(&filler).unwrap();
        fill.resize(4096, 7u8);
        while std::io::Write::write_all(&mut f, &fill).is_ok() {}
        drop(f);
        // Leave a little room: the tools' small outputs may fit, the cache must not.
        let len = std::fs::metadata(&filler).unwrap().len();
        let keep = len.saturating_sub(48 << 10);
        std::fs::File::options()
            .write(true)
            .open(&filler)
            .unwrap()
            .set_len(keep)
            .unwrap();
        let before = snapshot(&run);
        let r = run_tool("sy-fit", FIT, &mnt);
        assert!(!r.hung, "hung");
        assert!(
            matches!(r.code, Some(0 | 1)),
            "exit {:?} (a signal is a crash): {}",
            r.code,
            r.stderr
        );
        let after = snapshot(&run);
        let temporaries: Vec<&String> = after.keys().filter(|k| k.ends_with(".tmp")).collect();
        assert!(
            temporaries.is_empty(),
            "temporary files left: {temporaries:?}"
        );
        if r.code == Some(1) {
            assert!(
                r.stderr.contains("fit.json") || r.stderr.contains("splits.json"),
                "{}",
                r.stderr
            );
            assert_eq!(before, after, "a partial output was left");
        }
    });
    let _ = Command::new("umount").arg(&mnt).status();
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}

// 4. Each tool owns its outputs.

#[test]
fn sy_eval_refuses_a_calibration_run_and_the_reverse() {
    let (work, run, _) = fresh();
    std::fs::write(run.join("report.md"), "sy-select's report\n").unwrap();
    let plan = eval_plan(work.path(), "", "");
    let bundle = eval_bundle();
    expect(
        work.path(),
        "sy-eval",
        &[
            "--plan",
            &plan,
            "--bundle",
            &bundle,
            "--run-dir",
            "run",
            "--no-progress",
        ],
        2,
        &["run", "a calibration run", "manifest.json"],
    );
    // An evaluation's directory refuses the calibration tools.
    std::fs::write(run.join("eval-manifest.json"), "{}").unwrap();
    for (tool, args) in [
        ("sy-fit", FIT),
        ("sy-margin", MARGIN),
        ("sy-select", SELECT),
    ] {
        expect(
            work.path(),
            tool,
            args,
            2,
            &["eval-manifest.json", "an evaluation"],
        );
    }
}

// 5. The provenance chain.

#[test]
fn artifacts_of_another_split_or_run_are_refused() {
    // A fit of another seed (another split of the same records), with this run's splits.
    let (work, _, _) = fresh();
    let r = run_tool(
        "sy-fit",
        &[
            "--run-dir",
            "run",
            "--seed",
            "8",
            "--out",
            "run/s8/fit.json",
            "--no-progress",
            "-q",
            "--accept-failed-check",
        ],
        work.path(),
    );
    assert_eq!(r.code, Some(0), "{}", r.stderr);
    expect(
        work.path(),
        "sy-margin",
        &[
            "--run-dir",
            "run",
            "--fit",
            "run/s8/fit.json",
            "--out",
            "run/m.json",
            "--no-progress",
        ],
        2,
        &["s8/fit.json", "split.seed", "splits.json"],
    );
    // This run's fit with the splits of another seed.
    expect(
        work.path(),
        "sy-margin",
        &[
            "--run-dir",
            "run",
            "--splits",
            "run/s8/splits.json",
            "--out",
            "run/m.json",
            "--no-progress",
        ],
        2,
        &["fit.json", "split.seed", "s8/splits.json"],
    );
    // A foreign fit.json naming no input files.
    let (work, run, _) = fresh();
    let p = run.join("fit.json");
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    v.as_object_mut().unwrap().remove("input_files");
    std::fs::write(&p, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
    expect(
        work.path(),
        "sy-margin",
        &["--run-dir", "run", "--out", "run/m.json", "--no-progress"],
        2,
        &["fit.json", "input_files", "missing or empty"],
    );
}

#[test]
fn resume_refuses_records_and_blocks_of_another_run() {
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    std::fs::write(
        w.join("plan.toml"),
        "seed = 3\n[qgrid]\nn = [64]\nf = [0.0]\nrepeats = 2\n",
    )
    .unwrap();
    // Another plan: another run id (the run id names the plan's hash).
    std::fs::write(
        w.join("planb.toml"),
        "seed = 4\n[qgrid]\nn = [64]\nf = [0.0]\nrepeats = 2\n",
    )
    .unwrap();
    let collect = |dir: &str, resume: bool| {
        let plan = if dir == "b" {
            "planb.toml"
        } else {
            "plan.toml"
        };
        let mut args = vec![
            "--plan",
            plan,
            "--run-dir",
            dir,
            "--target",
            "sim",
            "--no-progress",
            "--no-preflight",
            "-q",
        ];
        if resume {
            args.push("--resume");
        }
        run_tool("sy-collect", &args, w)
    };
    for d in ["a", "b"] {
        let r = collect(d, false);
        assert_eq!(r.code, Some(0), "{}", r.stderr);
    }
    // b's records under a's manifest.
    std::fs::copy(w.join("b/records.jsonl"), w.join("a/records.jsonl")).unwrap();
    let before = snapshot(&w.join("a"));
    let r = collect("a", true);
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert!(
        r.stderr.contains("records.jsonl") && r.stderr.contains("run_id"),
        "{}",
        r.stderr
    );
    assert_eq!(
        before,
        snapshot(&w.join("a")),
        "the run directory was changed"
    );

    // An evaluation's block copied into another evaluation.
    let plan = eval_plan(w, "", "");
    let bundle = eval_bundle();
    let eval = |dir: &str, resume: bool| {
        let mut args = vec![
            "--plan",
            plan.as_str(),
            "--bundle",
            bundle.as_str(),
            "--run-dir",
            dir,
            "--no-progress",
            "-q",
        ];
        if resume {
            args.push("--resume");
        }
        run_tool("sy-eval", &args, w)
    };
    for d in ["e1", "e2"] {
        let r = eval(d, false);
        assert_eq!(r.code, Some(0), "{}", r.stderr);
    }
    let blocks: Vec<PathBuf> = std::fs::read_dir(w.join("e1/blocks"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    let name = blocks[0].file_name().unwrap();
    std::fs::copy(w.join("e2/blocks").join(name), &blocks[0]).unwrap();
    let before = snapshot(&w.join("e1"));
    let r = eval("e1", true);
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert!(
        r.stderr.contains(name.to_str().unwrap()) && r.stderr.contains("run_id"),
        "{}",
        r.stderr
    );
    assert_eq!(before, snapshot(&w.join("e1")));
}

// 6. Bounds for every evaluation field; non-regular inputs.

#[test]
fn absurd_evaluation_plans_are_refused_before_anything_runs() {
    let (work, _, _) = fresh();
    let w = work.path();
    let bundle = eval_bundle();
    for (top, sessions, tail, field) in [
        ("rounds = 4000000000", "", "", "rounds"),
        ("concurrency = 100000000", "", "", "concurrency"),
        ("", "count = 4000000000", "", "sessions.count"),
        (
            "",
            "count = 90000\nturns = [9000, 9000]",
            "",
            "sessions.count",
        ),
        ("", "turns = [1, 1000000000]", "", "sessions.turns"),
        (
            "",
            "initial_tokens = [1, 10000000000]",
            "",
            "sessions.initial_tokens",
        ),
        (
            "",
            "append_tokens = [1, 10000000000]",
            "",
            "sessions.append_tokens",
        ),
        (
            "",
            "output_tokens = [1, 10000000000]",
            "",
            "sessions.output_tokens",
        ),
        ("", "think_ms = [0, 100000000000]", "", "sessions.think_ms"),
        (
            "",
            "turns = [5000, 5000]\nappend_tokens = [4000, 4000]",
            "",
            "sessions",
        ),
        (
            "",
            "",
            "[background]\nprefill_requests = 100000000",
            "background.prefill_requests",
        ),
        (
            "",
            "",
            "[background]\nprefill_prompt_tokens = 100000000000",
            "background.prefill_prompt_tokens",
        ),
        (
            "",
            "",
            "[background]\nwarmup_ms = 100000000000",
            "background.warmup_ms",
        ),
    ] {
        let plan = eval_plan_with(w, top, sessions, tail);
        let r = run_tool(
            "sy-eval",
            &[
                "--plan",
                &plan,
                "--bundle",
                &bundle,
                "--run-dir",
                "ev",
                "--no-progress",
            ],
            w,
        );
        assert!(!r.hung, "{field}: hung");
        assert_eq!(r.code, Some(2), "{field}: {}", r.stderr);
        assert!(
            r.stderr.contains(&format!("`{field}`")) && r.stderr.contains("eval.toml"),
            "{field}: {}",
            r.stderr
        );
        assert!(
            !w.join("ev").exists(),
            "{field}: the run directory was created"
        );
    }
    // 10^8 simulator workers.
    let sim = w.join("sim.toml");
    std::fs::write(
        &sim,
        "[[models]]\nname = \"e\"\nworkers = 100000000\n[[models]]\nname = \"c\"\nworkers = 1\n",
    )
    .unwrap();
    let plan = eval_plan(w, "", "");
    let r = run_tool(
        "sy-eval",
        &[
            "--plan",
            &plan,
            "--bundle",
            &bundle,
            "--run-dir",
            "ev",
            "--sim-config",
            "sim.toml",
            "--no-progress",
        ],
        w,
    );
    assert!(!r.hung);
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    assert!(
        r.stderr.contains("sim.toml") && r.stderr.contains("workers"),
        "{}",
        r.stderr
    );
}

#[test]
fn fifos_and_other_special_files_are_refused_as_inputs() {
    let (work, _, outside) = fresh();
    let w = work.path();
    let fifo = outside.join("fifo");
    mkfifo(&fifo);
    let fifo_s = fifo.display().to_string();
    expect(
        w,
        "sy-fit",
        &[
            "--records",
            &fifo_s,
            "--out",
            "run/f2/fit.json",
            "--no-progress",
        ],
        2,
        &["fifo", "not a regular file"],
    );
    for (tool, flag) in [("sy-margin", "--fit"), ("sy-margin", "--splits")] {
        expect(
            w,
            tool,
            &[
                "--run-dir",
                "run",
                flag,
                &fifo_s,
                "--out",
                "run/m.json",
                "--no-progress",
            ],
            2,
            &["fifo"],
        );
    }
    expect(
        w,
        "sy-collect",
        &["--plan", &fifo_s, "--dry-run"],
        2,
        &["fifo"],
    );
    let bundle = eval_bundle();
    expect(
        w,
        "sy-eval",
        &[
            "--plan",
            &fifo_s,
            "--bundle",
            &bundle,
            "--run-dir",
            "ev",
            "--no-progress",
        ],
        2,
        &["fifo"],
    );
    let plan = eval_plan(w, "", "");
    expect(
        w,
        "sy-eval",
        &[
            "--plan",
            &plan,
            "--bundle",
            &fifo_s,
            "--run-dir",
            "ev",
            "--no-progress",
        ],
        2,
        &["fifo"],
    );
}

// 7. The lesser items.

#[test]
fn lesser_items() {
    let (work, run, _) = fresh();
    let w = work.path();
    // A non-UTF-8 evaluation plan.
    std::fs::write(w.join("bad.toml"), b"seed = 1\nname = \"\xff\xfe\"\n").unwrap();
    let bundle = eval_bundle();
    expect(
        w,
        "sy-eval",
        &[
            "--plan",
            "bad.toml",
            "--bundle",
            &bundle,
            "--run-dir",
            "ev",
            "--no-progress",
        ],
        2,
        &["bad.toml", "UTF-8"],
    );
    // A cached fraction of 1.5 in fit.json.
    let p = run.join("fit.json");
    let text = std::fs::read_to_string(&p).unwrap();
    let mut v: Value = serde_json::from_str(&text).unwrap();
    let q = &mut v["models"]["efficient"]["estimators"]["q"];
    let axis = if q["f_axis"][0].is_array() {
        &mut q["f_axis"][0]
    } else {
        &mut q["f_axis"]
    };
    let last = axis.as_array().unwrap().len() - 1;
    axis[last] = Value::from(1.5);
    std::fs::write(&p, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
    expect(
        w,
        "sy-margin",
        &["--run-dir", "run", "--out", "run/m.json", "--no-progress"],
        2,
        &["fit.json", "f_axis", "1.5"],
    );
    std::fs::write(&p, text).unwrap();

    // A run directory under a file is bad input, not a failure of the system.
    std::fs::write(w.join("afile"), "x").unwrap();
    let plan_e = eval_plan(w, "", "");
    expect(
        w,
        "sy-eval",
        &[
            "--plan",
            &plan_e,
            "--bundle",
            &bundle,
            "--run-dir",
            "afile/x",
            "--no-progress",
        ],
        2,
        &["afile/x", "a part of the path is a file"],
    );
    std::fs::write(
        w.join("c.toml"),
        "seed = 1\n[qgrid]\nn = [64]\nf = [0.0]\nrepeats = 1\n",
    )
    .unwrap();
    expect(
        w,
        "sy-collect",
        &[
            "--plan",
            "c.toml",
            "--run-dir",
            "afile/x",
            "--target",
            "sim",
            "--no-progress",
        ],
        2,
        &["afile/x", "a part of the path is a file"],
    );

    // A plan name with a newline cannot forge a line of output: refused, and escaped where
    // it is named.
    let plan = w.join("forge.toml");
    std::fs::write(
        &plan,
        "seed = 1\nname = \"x\\nerror: forged\\u001b[2J\"\n[qgrid]\nn = [64]\nf = [0.0]\nrepeats = 1\n",
    )
    .unwrap();
    for args in [
        vec![
            "--plan",
            "forge.toml",
            "--run-dir",
            "run2",
            "--target",
            "sim",
            "--no-progress",
            "--no-preflight",
        ],
        vec![
            "--plan",
            "forge.toml",
            "--run-dir",
            "run",
            "--target",
            "sim",
            "--no-progress",
        ],
    ] {
        let r = run_tool("sy-collect", &args, w);
        assert!(
            !r.stderr.lines().any(|l| l.starts_with("error: forged")),
            "forged line: {}",
            r.stderr
        );
        assert!(!r.stderr.contains('\u{1b}'), "raw escape: {:?}", r.stderr);
    }

    // A collection that fails before its first unit leaves no plan.toml (nor directory).
    std::fs::write(
        w.join("ok.toml"),
        "seed = 1\n[qgrid]\nn = [64]\nf = [0.0]\nrepeats = 1\n",
    )
    .unwrap();
    let r = run_tool(
        "sy-collect",
        &[
            "--plan",
            "ok.toml",
            "--run-dir",
            "nothing",
            "--target",
            "dynamo",
            "--frontend-url",
            "http://127.0.0.1:9",
            "--selection-url",
            "http://127.0.0.1:9",
            "--no-progress",
        ],
        w,
    );
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert!(
        !w.join("nothing").exists(),
        "left behind: {:?}",
        snapshot(&w.join("nothing"))
    );

    // A failed evaluation leaves nothing that blocks a plain rerun.
    let plan = eval_plan(w, "", "");
    let args = [
        "--plan",
        plan.as_str(),
        "--bundle",
        bundle.as_str(),
        "--run-dir",
        "ev",
        "--target",
        "dynamo",
        "--frontend-url",
        "http://127.0.0.1:9",
        "--selection-url",
        "http://127.0.0.1:9",
        "--no-progress",
    ];
    let r = run_tool("sy-eval", &args, w);
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert!(!w.join("ev/eval-manifest.json").exists());
    let r = run_tool("sy-eval", &args, w);
    assert_eq!(r.code, Some(1), "{}", r.stderr);
    assert!(!r.stderr.contains("already holds"), "{}", r.stderr);
}
