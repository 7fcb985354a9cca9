// End-to-end scenarios read top to bottom: the 120-line limit (clippy.toml) is for library and
// binary code.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::too_many_lines
)]
//! The real `sy-select` binary on a run directory built from synthetic records with known truth.

use std::path::Path;
use std::process::Command;

use serde_json::Value;
use sy_calibration::margins::testkit::{true_estimators, write_fit};
use sy_calibration::margins::{MarginOptions, write_margins};
use sy_records::synth::{SynthSpec, generate};
use sy_records::{SplitFractions, SplitTable, write_jsonl};
use sy_selector::{Bundle, DecisionInput, Model, Variant};

fn sy_select(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_sy-select"))
        .args(args)
        .output()
        .unwrap()
}

fn json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// records.jsonl, splits.json, fit.json (the generator's truth) and margins.json (sy-margin's
/// library) in `dir`. The generator's records carry no client − server gap (like the committed
/// dataset).
fn prepare(dir: &Path) -> Vec<sy_records::Record> {
    prepare_with(dir, |_| {})
}

/// [`prepare`], with `edit` applied to the records before anything is written.
fn prepare_with(dir: &Path, edit: impl Fn(&mut [sy_records::Record])) -> Vec<sy_records::Record> {
    let spec = SynthSpec {
        conditions: 150,
        repeats: 3,
        ..SynthSpec::default()
    };
    let mut records = generate(&spec);
    edit(&mut records);
    write_jsonl(&records, &dir.join("records.jsonl")).unwrap();
    SplitTable::build(&records, 11, SplitFractions::default())
        .write(&dir.join("splits.json"))
        .unwrap();
    write_fit(
        &dir.join("fit.json"),
        &true_estimators(&spec, Model::Efficient).unwrap(),
        &true_estimators(&spec, Model::Capable).unwrap(),
        &[&dir.join("records.jsonl")],
        &dir.join("splits.json"),
    )
    .unwrap();
    write_margins(
        &MarginOptions {
            records: vec![dir.to_path_buf()],
            fit: dir.join("fit.json"),
            splits: dir.join("splits.json"),
            out: dir.join("margins.json"),
            level: 0.9,
            skip_invalid: false,
            records_cache: None,
        },
        &mut |_| {},
    )
    .unwrap();
    records
}

#[test]
fn selects_freezes_reports_and_replays_to_the_same_numbers() {
    let dir = tempfile::tempdir().unwrap();
    let records = prepare(dir.path());
    let d = dir.path().to_str().unwrap();
    let out = sy_select(&["--run-dir", d, "--json", "--no-progress"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();

    let selection = json(&dir.path().join("selection.json"));
    let margins = json(&dir.path().join("margins.json"));
    // Both outputs match their schemas.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../schemas");
    for (schema, doc) in [
        ("selection.schema.json", &selection),
        ("margins.schema.json", &margins),
    ] {
        let schema = json(&root.join(schema));
        let validator = jsonschema::validator_for(&schema).unwrap();
        let errors: Vec<String> = validator.iter_errors(doc).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{errors:?}");
    }

    // The bundle loads in the runtime crate (version + hash checked) with the chosen parameters.
    let bundle = Bundle::from_path(dir.path().join("bundle.json")).unwrap();
    assert_eq!(summary["content_hash"], bundle.content_hash.as_str());
    assert_eq!(
        serde_json::to_value(bundle.variant).unwrap(),
        selection["bundle_variant"]
    );
    assert_eq!(
        bundle.params.margins.blind,
        margins["delta_blind_ms"].as_f64().unwrap()
    );
    assert_eq!(
        bundle.params.margins.cache,
        margins["delta_cache_ms"].as_f64().unwrap()
    );
    assert_eq!(
        serde_json::to_value(bundle.params.thresholds).unwrap(),
        selection["thresholds"]
    );
    assert_eq!(bundle.provenance.split_seed, 11);
    assert_eq!(bundle.provenance.input_files.len(), 4);
    for v in Variant::ALL {
        let b = Bundle::from_path(dir.path().join(format!("bundles/{}.json", v.as_str()))).unwrap();
        assert_eq!(b.variant, v);
        assert_eq!(b.params, bundle.params);
    }
    // The chosen threshold rule is one of the two, the estimator one of the two.
    let rule = selection["threshold_rule"]["variant"].as_str().unwrap();
    assert!(rule == "count" || rule == "count_prefill");
    let est = selection["estimator"]["variant"].as_str().unwrap();
    assert!(est == "blind" || est == "cache");
    // The search never does worse than Stage on the fit split.
    for s in ["search_count", "search_count_prefill"] {
        let o = &selection[s];
        assert!(
            o["best"]["mean_selected_ttft_ms"].as_f64().unwrap()
                <= o["stage_mean_ttft_ms"].as_f64().unwrap() + 1e-9
        );
    }
    // With the true estimators and a margin the cache-aware rule is never worse than Stage here.
    let replay = &selection["replay"];
    let mean = |v: &str| {
        replay["variants"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["variant"] == v)
            .unwrap()["all"]["mean_selected_ttft_ms"]
            .as_f64()
            .unwrap()
    };
    assert!(
        mean("cache") <= mean("stage") + 1e-9,
        "{} vs {}",
        mean("cache"),
        mean("stage")
    );
    assert!(mean("stage") > 0.0);

    // replay reproduces selection.json's numbers exactly.
    let out = sy_select(&[
        "replay",
        "--bundle",
        &format!("{d}/bundle.json"),
        "--run-dir",
        d,
        "--split",
        "selection",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let replayed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(&replayed["replay"], replay);

    // The report shows those numbers and every figure it references exists.
    let md = std::fs::read_to_string(dir.path().join("report.md")).unwrap();
    for v in replay["variants"].as_array().unwrap() {
        let m = v["all"]["mean_selected_ttft_ms"].as_f64().unwrap();
        assert!(
            md.contains(&sy_select::report::fmt_ms(m)),
            "report lacks {m}"
        );
    }
    // The generator's records carry no server timing: the gap section says so instead of failing.
    assert!(
        md.contains("## Client − server TTFT gap\n\nNot available: none of the"),
        "{md}"
    );
    let mut figures = 0;
    for part in md.split("](plots/").skip(1) {
        let name = &part[..part.find(')').unwrap()];
        assert!(dir.path().join("plots").join(name).is_file(), "{name}");
        figures += 1;
    }
    // 13 figures, each as SVG and PNG.
    assert_eq!(figures, 26, "{md}");
    for stem in [
        "margin_reliability",
        "q_heatmap_efficient",
        "q_lines_capable",
        "predicted_vs_measured_cache",
        "margin_cdf",
        "rp_landscape",
        "variants",
        "residuals_by_decode_length_blind",
    ] {
        assert!(
            dir.path().join(format!("plots/{stem}.png")).is_file(),
            "{stem}"
        );
    }
    assert!(md.contains("per-probe p90"));

    // decide: one turn from an observation document.
    let e = records
        .iter()
        .find(|r| r.phase == sy_records::Phase::Load && r.role == Model::Efficient)
        .unwrap();
    let c = records
        .iter()
        .find(|r| r.probe_id == e.probe_id && r.role == Model::Capable)
        .unwrap();
    let input = DecisionInput {
        proposal: Model::Efficient,
        efficient: e.observation(),
        capable: c.observation(),
        now_ms: e.sent_at_unix_ms,
        local_capable_in_flight: 0,
    };
    let obs_path = dir.path().join("obs.json");
    std::fs::write(&obs_path, serde_json::to_vec_pretty(&input).unwrap()).unwrap();
    let out = sy_select(&[
        "decide",
        "--bundle",
        &format!("{d}/bundles/cache.json"),
        "--observations",
        obs_path.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let decision: Value = serde_json::from_slice(&out.stdout).unwrap();
    let expected = sy_selector::decide(&bundle.params, Variant::Cache, &input);
    assert_eq!(decision, serde_json::to_value(expected).unwrap());
    assert!(decision["predicted_efficient_ms"].as_f64().unwrap() > 0.0);
    let out = sy_select(&[
        "decide",
        "--bundle",
        &format!("{d}/bundle.json"),
        "--observations",
        obs_path.to_str().unwrap(),
        "--variant",
        "stage",
    ]);
    let decision: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(decision["reason"]["kind"], "stage_baseline");
    assert_eq!(decision["choice"], "efficient");
}

#[test]
fn bad_inputs_exit_2_with_a_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    prepare(dir.path());
    let d = dir.path().to_str().unwrap();
    // No margins.json yet for selection → names the file.
    std::fs::rename(dir.path().join("margins.json"), dir.path().join("m.json")).unwrap();
    let out = sy_select(&["--run-dir", d, "--no-report"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("margins.json"));
    assert!(!dir.path().join("selection.json").exists());
    assert!(!dir.path().join("bundle.json").exists());

    let out = sy_select(&[
        "--run-dir",
        d,
        "--margins",
        &format!("{d}/m.json"),
        "--no-report",
        "-q",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // A tampered bundle is refused by replay and decide.
    let text = std::fs::read_to_string(dir.path().join("bundle.json")).unwrap();
    let mut v: Value = serde_json::from_str(&text).unwrap();
    v["params"]["efficient"]["blind"]["intercept"] = Value::from(12345.0);
    std::fs::write(dir.path().join("tampered.json"), v.to_string()).unwrap();
    let out = sy_select(&[
        "replay",
        "--bundle",
        &format!("{d}/tampered.json"),
        "--run-dir",
        d,
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("hash mismatch"));

    // An observation document with an unknown field names it.
    std::fs::write(
        dir.path().join("obs.json"),
        r#"{"proposal": "efficient", "efficient": {"n": 1, "bogus": 2}, "capable": {}, "now_ms": 0}"#,
    )
    .unwrap();
    let out = sy_select(&[
        "decide",
        "--bundle",
        &format!("{d}/bundle.json"),
        "--observations",
        &format!("{d}/obs.json"),
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bogus") && err.contains("obs.json"), "{err}");

    // Replay of a split without splits.json.
    let other = tempfile::tempdir().unwrap();
    let out = sy_select(&[
        "replay",
        "--bundle",
        &format!("{d}/bundle.json"),
        "--records",
        &format!("{d}/records.jsonl"),
        "--split",
        "selection",
        "--splits",
        other.path().join("none.json").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("none.json"));
}

/// The report leads with the answer, and the reproduce commands it prints run as printed (from
/// the directory sy-select ran in, with relative paths) and recompute its numbers.
#[test]
fn report_leads_with_the_answer_and_its_commands_run_as_printed() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    std::fs::create_dir_all(&run).unwrap();
    // A server timing on every record but every seventh: gap = 0.5 + (i mod 5) / 10 ms.
    prepare_with(&run, |records| {
        for (i, r) in records.iter_mut().enumerate() {
            if i % 7 != 3 {
                let gap = 0.5 + (i % 5) as f64 / 10.0;
                r.server_ttft_ms = r.ttft_ms.map(|t| t - gap);
                r.client_server_gap_ms = Some(gap);
            }
        }
    });
    let in_dir = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_sy-select"))
            .args(args)
            .current_dir(dir.path())
            .output()
            .unwrap()
    };
    let out = in_dir(&[
        "--run-dir",
        "run",
        "--records",
        "run/records.jsonl",
        "--no-progress",
        "--stability-seeds",
        "3",
        "--bootstrap-resamples",
        "200",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.starts_with("Chosen: "), "{stdout}");
    assert!(!stdout.contains("Some("), "no debug text: {stdout}");
    let report = std::fs::read_to_string(run.join("report.md")).unwrap();
    let first_screen: String = report.lines().take(24).collect::<Vec<_>>().join("\n");
    assert!(first_screen.contains("## Answer"), "{first_screen}");
    assert!(first_screen.contains("Chosen: "), "{first_screen}");
    assert!(first_screen.contains("95 % CI"), "{first_screen}");
    assert!(
        first_screen.contains("Robustness to the split (3 split seeds other than the run's"),
        "{first_screen}"
    );
    // The client − server gap per phase and model: both phases, both models, with the records
    // without a server timing counted.
    let gap = report
        .split("## Client − server TTFT gap")
        .nth(1)
        .expect("a gap section")
        .split("\n## ")
        .next()
        .unwrap();
    assert!(gap.contains("| phase | model | records with the gap | without a server timing | median (ms) | p90 (ms) | p99 (ms) | max (ms) |"), "{gap}");
    for (phase, model) in [
        ("qgrid", "efficient-model"),
        ("qgrid", "capable-model"),
        ("load", "efficient-model"),
        ("load", "capable-model"),
    ] {
        let row = gap
            .lines()
            .find(|l| l.starts_with(&format!("| {phase} | {model} | ")))
            .unwrap_or_else(|| panic!("no {phase} × {model} row: {gap}"));
        let cells: Vec<&str> = row.split(" | ").collect();
        let with: usize = cells[2].parse().unwrap();
        let without: usize = cells[3].parse().unwrap();
        assert!(with > 0 && without > 0, "{row}");
        let med: f64 = cells[4].parse().unwrap();
        let max: f64 = cells[7].trim_end_matches(" |").parse().unwrap();
        assert!(
            (0.5..=0.9).contains(&med) && (med..=0.9).contains(&max),
            "{row}"
        );
    }
    // Every table header is a table: the line after it is its separator.
    let lines: Vec<&str> = report.lines().collect();
    for (i, l) in lines.iter().enumerate() {
        if l.starts_with("| ") && (i == 0 || !lines[i - 1].starts_with('|')) {
            assert!(
                lines[i + 1].starts_with("|---"),
                "broken table at line {i}: {l}"
            );
        }
    }
    let block = report
        .split("## Reproduce")
        .nth(1)
        .and_then(|s| s.split("```sh\n").nth(1))
        .and_then(|s| s.split("```").next())
        .unwrap();
    let selection = json(&run.join("selection.json"));
    let commands: Vec<&str> = block.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(commands.len(), 2, "{block}");
    for cmd in commands {
        let words: Vec<&str> = cmd.split_whitespace().collect();
        assert_eq!(words[0], "sy-select");
        let mut args: Vec<&str> = words[1..].to_vec();
        args.push("--json");
        let out = in_dir(&args);
        assert!(
            out.status.success(),
            "{cmd}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(
            v["replay"], selection["replay"],
            "{cmd} recomputes the report's table"
        );
        assert_eq!(v["in_sample"], false);
    }
    let decisions = dir.path().join("run/decisions.parquet");
    let bytes = std::fs::read(&decisions).unwrap();
    assert_eq!(&bytes[..4], b"PAR1");
}

/// `replay --decisions` writes one row per pair and variant; replaying the calibration records
/// without `--split selection` is flagged in-sample.
#[test]
fn replay_exports_every_decision_and_warns_in_sample() {
    let dir = tempfile::tempdir().unwrap();
    prepare(dir.path());
    let d = dir.path().to_str().unwrap();
    let out = sy_select(&[
        "--run-dir",
        d,
        "--no-progress",
        "--no-report",
        "--stability-seeds",
        "0",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bundle = dir.path().join("bundle.json");
    let jsonl = dir.path().join("decisions.jsonl");
    let out = sy_select(&[
        "replay",
        "--bundle",
        bundle.to_str().unwrap(),
        "--records",
        d,
        "--decisions",
        jsonl.to_str().unwrap(),
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("in-sample"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["in_sample"], true);
    let pairs = v["replay"]["pairs"].as_u64().unwrap();
    let text = std::fs::read_to_string(&jsonl).unwrap();
    let rows: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len() as u64, pairs * 5, "one row per pair and variant");
    for key in [
        "n_efficient",
        "predicted_efficient_ms",
        "advantage_ms",
        "reason",
        "choice",
        "selected_ttft_ms",
        "oracle_ttft_ms",
    ] {
        assert!(rows[0].get(key).is_some(), "column {key}");
    }
    // The selected TTFT of each row is the measured TTFT of its choice.
    for r in &rows {
        let want = if r["choice"] == "capable" {
            &r["ttft_capable_ms"]
        } else {
            &r["ttft_efficient_ms"]
        };
        assert_eq!(&r["selected_ttft_ms"], want);
    }
}
